"""End-to-end tests of `python -m experiments.train` and `experiments.plot`: in subprocesses where
the process is the point (the driver's absl entry point, a SIGKILL), the other command lines in
this process (`tests.train_in_process.cli`: the driver's `parse_flags` then `main`; the plot
command run as `__main__` by `tests.script_in_process.run_module`). The installed console scripts
are tested from a wheel (tests/test_wheel.py)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from hrljax.logging import WALL_CLOCK_FIELDS, read_jsonl
from tests.script_in_process import run_module
from tests.train_in_process import cli
from tests.tiny_ppo import TINY_PPO_OVERRIDES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO_CONFIG = "experiments/configs/ppo_cartpole.py"
TINY = TINY_PPO_OVERRIDES


def train_command(workdir, *overrides, config=PPO_CONFIG):
  return [
    sys.executable,
    "-m",
    "experiments.train",
    f"--config={config}",
    f"--workdir={workdir}",
    *overrides,
  ]


def run(command, env=None, timeout=300):
  return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def without_wall_clock(records):
  return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in records]


def final_params(workdir):
  """The parameters in the newest checkpoint, read with orbax's generic restore."""
  import orbax.checkpoint as ocp

  checkpoints = os.path.join(workdir, "checkpoints")
  step = max(int(name) for name in os.listdir(checkpoints) if name.isdigit())
  tree = ocp.StandardCheckpointer().restore(os.path.join(checkpoints, str(step), "state"))
  return step, tree["agent"]["params"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
  """One run of the tiny config (16 updates, checkpoints at 8 and 16), in this process (`cli`:
  the command line through the driver's `parse_flags` and `main`; its programs are then in the
  persistent compilation cache for the SIGKILL test's subprocess): checked by the smoke test, the
  uninterrupted reference of the SIGKILL test and the workdir the config check copies."""
  workdir = tmp_path_factory.mktemp("smoke") / "run"
  return workdir, cli(os.path.join(ROOT, PPO_CONFIG), workdir, *TINY)


def test_smoke_run_logs_checkpoints_evaluates_and_plots(smoke_run, tmp_path):
  workdir, result = smoke_run
  assert result.code == 0, result.err[-2000:]
  assert "update 16/16" in result.out and "evaluation at update 16:" in result.out
  records = read_jsonl(str(workdir))
  assert [r["update"] for r in records if r["phase"] == "train"] == [4, 8, 12, 16]
  assert records[-1]["phase"] == "eval" and records[-1]["eval_return"] > 0
  for field in ("env_steps", "wall_time", "env_steps_per_second", "loss", "episode_return"):
    assert field in records[0]
  assert json.load(open(workdir / "config.json"))["num_steps"] == 32
  plot = run_module(
    "experiments.plot", str(workdir), str(workdir), f"--out={tmp_path / 'curve.png'}"
  )
  assert plot.code == 0, plot.err
  assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_command_line_failure_is_one_line_exit_2_and_no_workdir(tmp_path):
  """The real entry point (absl's `app.run` with the driver's flags parser), on a failure found
  before the config file is read (so before the agents are imported); the other failures are
  tested in process (test_train_in_process.py)."""
  workdir = tmp_path / "run"
  result = run(train_command(workdir, config="no_such.py"))
  assert result.returncode == 2
  expected = "error: --config: no such file 'no_such.py' (expected a config file or hrljax:NAME)"
  assert result.stderr.strip().splitlines() == [expected], result.stderr
  assert not workdir.exists()


# `python -m experiments.train ARGS` with one change: the save of checkpoint `update` hangs before
# it writes anything, after announcing itself in the file `paused`, until the process is killed.
PAUSED_TRAIN = """
import runpy, sys, threading
from hrljax import checkpoint

paused, update = sys.argv.pop(1), int(sys.argv.pop(1))
original = checkpoint.Checkpointer.save

def save(self, step, *args, **kwargs):
  if step == update:
    open(paused, "w").close()
    threading.Event().wait()
  return original(self, step, *args, **kwargs)

checkpoint.Checkpointer.save = save
runpy.run_module("experiments.train", run_name="__main__", alter_sys=True)
"""


def test_sigkilled_run_resumes_to_the_uninterrupted_result(smoke_run, tmp_path):
  """SIGKILL after the updates past the first checkpoint (8) were run and logged, as the save of
  the next one (16) starts; the same command line started again (in this process: the kill is what
  needs a process of its own) resumes from 8, runs 9-16 again and ends with the metrics and
  parameters of the uninterrupted smoke run (the same command line and programs, so the killed
  process reads them from the persistent compilation cache)."""
  reference_dir, reference = smoke_run
  assert reference.code == 0, reference.err[-2000:]
  killed_dir, paused = tmp_path / "killed", tmp_path / "paused"
  command = train_command(killed_dir, *TINY)
  with open(tmp_path / "stderr", "w") as stderr:  # a file, not a pipe that could fill and block
    process = subprocess.Popen(
      [sys.executable, "-c", PAUSED_TRAIN, str(paused), "16", *command[3:]],
      cwd=ROOT,
      stdout=subprocess.DEVNULL,
      stderr=stderr,
    )
  for _ in range(12_000):  # poll every 20 ms, for at most about 4 minutes
    if paused.exists() or process.poll() is not None:
      break
    time.sleep(0.02)
  assert paused.exists(), (tmp_path / "stderr").read_text()[-3000:]
  process.send_signal(signal.SIGKILL)
  process.wait(timeout=60)
  assert process.returncode == -signal.SIGKILL
  checkpoints = killed_dir / "checkpoints"
  assert sorted(int(n) for n in os.listdir(checkpoints) if n.isdigit()) == [8]
  logged = [r["update"] for r in read_jsonl(str(killed_dir)) if r["phase"] == "train"]
  assert logged == [4, 8, 12, 16]  # logged past the checkpoint: the resumed run rewrites 12, 16

  resumed = cli(os.path.join(ROOT, PPO_CONFIG), killed_dir, *TINY)  # in this process
  assert resumed.code == 0, resumed.err[-2000:]
  assert "resumed from the checkpoint at update 8" in resumed.out
  assert without_wall_clock(read_jsonl(str(killed_dir))) == without_wall_clock(
    read_jsonl(str(reference_dir))
  )
  ref_step, ref_params = final_params(str(reference_dir))
  step, params = final_params(str(killed_dir))
  assert step == ref_step == 16
  assert jax.tree.structure(ref_params) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(ref_params), jax.tree.leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_resuming_a_workdir_with_another_config_is_a_one_line_error(smoke_run, tmp_path):
  """Refused before any program is built, so the command line runs in this process (`cli`: the
  driver's `parse_flags` then `main`, as `python -m experiments.train` calls them)."""
  # A copy of the smoke run's workdir (checkpoints at updates 8 and 16).
  first_dir, first = smoke_run
  assert first.code == 0, first.err[-2000:]
  workdir = tmp_path / "run"
  shutil.copytree(first_dir, workdir)
  result = cli(os.path.join(ROOT, PPO_CONFIG), workdir, *TINY, "--config.hidden_sizes=(32, 32)")
  assert result.code == 2
  last = result.err.strip().splitlines()[-1]
  assert last.startswith(f"error: {workdir} was trained to update 16 with another config"), (
    result.err[-2000:]
  )
  assert "config.hidden_sizes: [64, 64] in the run, [32, 32] now" in last
  assert "Traceback" not in result.err
  assert json.load(open(workdir / "config.json"))["hidden_sizes"] == [64, 64]
