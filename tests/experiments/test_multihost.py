"""Multi-process runs on this machine: several local processes over one global mesh (gloo)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from hrljax.logging import read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.multidevice
TRAIN_ARGS = [
  "--config=experiments/configs/ppo_cartpole.py",
  "--config.num_envs=8",
  "--config.num_steps=16",
  "--config.total_timesteps=384",
  "--config.log_every=1",
  "--config.checkpoint_every=3",
  "--config.eval_episodes=8",
]


def losses(workdir):
  return [
    {k: r[k] for k in ("update", "loss", "policy_loss", "value_loss", "entropy")}
    for r in read_jsonl(str(workdir))
    if r["phase"] == "train"
  ]


def test_two_processes_of_four_devices_log_what_one_process_of_eight_logs(
  tmp_path, eight_cpu_devices_env
):
  two = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.launch_local",
      "--num_processes=2",
      "--devices_per_process=4",
      "--",
      f"--workdir={tmp_path / 'two'}",
      *TRAIN_ARGS,
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert two.returncode == 0, two.stderr[-3000:]
  assert "8 device(s) (cpu) in 2 process(es)" in two.stdout
  one = subprocess.run(
    [sys.executable, "-m", "experiments.train", f"--workdir={tmp_path / 'one'}", *TRAIN_ARGS],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
    env=eight_cpu_devices_env,
  )
  assert one.returncode == 0, one.stderr[-3000:]
  two_losses, one_losses = losses(tmp_path / "two"), losses(tmp_path / "one")
  assert [r["update"] for r in two_losses] == [1, 2, 3]
  for a, b in zip(two_losses, one_losses):
    for key in ("loss", "policy_loss", "value_loss", "entropy"):
      assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (key, a, b)


def test_a_dying_process_stops_the_others_with_a_clear_error(tmp_path):
  workdir = tmp_path / "dies"
  launcher = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "experiments.launch_local",
      "--num_processes=2",
      "--devices_per_process=1",
      "--grace_seconds=5",
      "--",
      f"--workdir={workdir}",
      "--config=experiments/configs/ppo_cartpole.py",
      "--config.num_envs=2",
      "--config.total_timesteps=20000000",
      "--config.log_every=1",
    ],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  pids = {}
  while len(pids) < 2:
    line = launcher.stdout.readline()
    assert line, "launcher ended before starting its processes"
    if line.startswith("launch_local: process"):
      _, _, index, _, pid = line.split()
      pids[int(index)] = int(pid)
  for _ in range(1500):  # poll every 0.2 s, for at most about 5 minutes
    if (workdir / "metrics.jsonl").exists():  # training is under way
      break
    assert launcher.poll() is None, launcher.stderr.read()[-3000:]
    time.sleep(0.2)
  os.kill(pids[1], signal.SIGKILL)
  # Bounded: the launcher must be done within 30 s (wait raises TimeoutExpired otherwise), not
  # left hanging with a survivor blocked in a collective.
  launcher.wait(timeout=30)
  assert launcher.returncode == 1
  assert "error: process 1 exited with code -9; stopping the other processes" in (
    launcher.stderr.read()
  )
  for pid in pids.values():
    with pytest.raises(ProcessLookupError):
      os.kill(pid, 0)
