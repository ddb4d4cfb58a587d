"""Multi-process runs on this machine: several local processes over one global mesh (gloo). (That 2
processes of 4 devices log what one process of 8 logs: tests/spine/test_multidevice.py, beside
the 8-device run it compares with.)"""

import os
import signal
import subprocess
import sys
import time

import pytest

from experiments import launch_local

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.multidevice


def test_each_pinned_process_gets_an_equal_share_of_the_cores():
  assert launch_local.core_shares(2, [0, 1]) == [[0], [1]]
  assert launch_local.core_shares(2, [0, 1, 2, 3, 4]) == [[0, 1], [2, 3]]
  with pytest.raises(ValueError, match="expected at least one core per process, got 1 cores"):
    launch_local.core_shares(2, [5])


def test_a_dying_process_stops_the_others_with_a_clear_error(tmp_path):
  """Also: with `--pin_cores` the two processes run on disjoint cores."""
  workdir = tmp_path / "dies"
  launcher = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "experiments.launch_local",
      "--num_processes=2",
      "--devices_per_process=1",
      "--grace_seconds=5",
      "--pin_cores",
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
  cores = [os.sched_getaffinity(pid) for pid in pids.values()]
  assert cores[0] and cores[1] and not cores[0] & cores[1], cores
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
