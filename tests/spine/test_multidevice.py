"""The same train step on 1 device and on a mesh of 8 (fake CPU devices, in one subprocess), and
the same run in 2 processes of 4 devices (`experiments.launch_local`)."""

import json
import os
import subprocess
import sys

import pytest

from hrljax.logging import read_jsonl
from tests.spine.multidevice_checks import CLI_ARGS, PPO_CARTPOLE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.multidevice


def run(command, env, timeout=600):
  return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """Where the checks' command lines train: `d1`, `d8` (1 and 8 devices) and `x` (refused)."""
  return tmp_path_factory.mktemp("multidevice")


@pytest.fixture(scope="module")
def checks(eight_cpu_devices_env, workdir):
  """One process with 8 devices: the update checks and the command lines (`multidevice_checks`)."""
  result = run(
    [sys.executable, "-m", "tests.spine.multidevice_checks", str(workdir)], eight_cpu_devices_env
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def train_losses(workdir):
  return [
    {k: r[k] for k in ("update", "loss", "policy_loss", "value_loss", "entropy")}
    for r in read_jsonl(str(workdir))
    if r["phase"] == "train"
  ]


def test_sgd_update_on_8_devices_equals_1_device(checks):
  assert checks["num_devices"] == 8
  assert checks["ppo_param_change"] > 1e-3  # the update did something
  assert checks["ppo_param_diff"] < 1e-5, checks
  assert checks["ppo_metric_diff"] < 1e-5, checks


def test_state_layout_env_sharded_params_replicated(checks):
  assert checks["env_spec_8"] == "P('data',)"
  assert checks["param_spec_8"] == "P()"


def test_shard_map_needs_the_global_mean_inside_the_gradient(checks):
  assert checks["global_mean_grad_diff"] < 1e-5
  assert checks["grad_then_pmean_ratio"] == pytest.approx(8.0, rel=1e-4)


def test_cli_logs_same_losses_on_1_and_8_devices(checks, workdir):
  """`python -m experiments.train` with `--num_devices=1` and `=8` (`multidevice_checks.CLI_ARGS`,
  run in the checks' process): the same losses at every update."""
  records = {}
  for devices in (1, 8):
    result = checks["cli"][f"d{devices}"]
    assert result["code"] == 0, result["err"][-3000:]
    assert f"{devices} device(s)" in result["out"]
    records[devices] = train_losses(workdir / f"d{devices}")
  assert [r["update"] for r in records[8]] == [1, 2, 3]
  for one, eight in zip(records[1], records[8]):
    for key in ("loss", "policy_loss", "value_loss", "entropy"):
      assert eight[key] == pytest.approx(one[key], rel=1e-5, abs=1e-6), (key, one, eight)


def test_a_resumed_8_device_run_logs_what_the_uninterrupted_one_logs(checks, workdir):
  """Stopped at its checkpoint at update 2 and resumed (`multidevice_checks.command_lines`): the
  environment-sharded state is restored in place of `init`'s and trains to the same losses."""
  for name in ("r8_first", "r8", "d8"):
    assert checks["cli"][name]["code"] == 0, checks["cli"][name]["err"][-3000:]
  assert "resumed from the checkpoint at update 2" in checks["cli"]["r8"]["out"]
  resumed, whole = train_losses(workdir / "r8"), train_losses(workdir / "d8")
  assert [r["update"] for r in resumed] == [1, 2, 3]
  for a, b in zip(resumed, whole):
    for key in ("loss", "policy_loss", "value_loss", "entropy"):
      assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (key, a, b)


def test_env_count_not_divisible_by_device_count_is_a_clear_error(checks, workdir):
  result = checks["cli"]["x"]
  assert result["code"] == 2
  assert result["err"].strip() == (
    "error: config.num_envs: expected a multiple of the device count (8), got 4"
  )
  assert not (workdir / "x").exists()


def test_two_processes_of_four_devices_log_what_one_process_of_eight_logs(
  tmp_path, checks, workdir
):
  """`experiments.launch_local` (multi-process over one global mesh, gloo) of the same command
  line as the 8-device run of `checks`: the same losses."""
  two = run(
    [
      sys.executable,
      "-m",
      "experiments.launch_local",
      "--num_processes=2",
      "--devices_per_process=4",
      "--",
      f"--workdir={tmp_path / 'two'}",
      f"--config={PPO_CARTPOLE}",
      *CLI_ARGS,
    ],
    dict(os.environ),
  )
  assert two.returncode == 0, two.stderr[-3000:]
  assert "8 device(s) (cpu) in 2 process(es)" in two.stdout
  eight = checks["cli"]["d8"]
  assert eight["code"] == 0, eight["err"][-3000:]
  two_losses, one_losses = train_losses(tmp_path / "two"), train_losses(workdir / "d8")
  assert [r["update"] for r in two_losses] == [1, 2, 3]
  for a, b in zip(two_losses, one_losses):
    for key in ("loss", "policy_loss", "value_loss", "entropy"):
      assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (key, a, b)
