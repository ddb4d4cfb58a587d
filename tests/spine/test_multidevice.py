"""The same train step on 1 device and on a mesh of 8 (fake CPU devices, in subprocesses)."""

import json
import os
import subprocess
import sys

import pytest

from hrljax.logging import read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.multidevice


def run(command, env, timeout=600):
  return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def checks(eight_cpu_devices_env):
  result = run([sys.executable, "tests/spine/multidevice_checks.py"], eight_cpu_devices_env)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout)


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


def test_cli_logs_same_losses_on_1_and_8_devices(tmp_path, eight_cpu_devices_env):
  common = [
    "--config=experiments/configs/ppo_cartpole.py",
    "--config.num_envs=8",
    "--config.num_steps=16",
    "--config.total_timesteps=384",
    "--config.log_every=1",
    "--config.checkpoint_every=3",
    "--config.eval_episodes=8",
  ]
  records = {}
  for devices in (1, 8):
    workdir = tmp_path / f"d{devices}"
    result = run(
      [
        sys.executable,
        "-m",
        "experiments.train",
        f"--workdir={workdir}",
        f"--num_devices={devices}",
        *common,
      ],
      eight_cpu_devices_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{devices} device(s)" in result.stdout
    records[devices] = [r for r in read_jsonl(str(workdir)) if r["phase"] == "train"]
  assert [r["update"] for r in records[8]] == [1, 2, 3]
  for one, eight in zip(records[1], records[8]):
    for key in ("loss", "policy_loss", "value_loss", "entropy"):
      assert eight[key] == pytest.approx(one[key], rel=1e-5, abs=1e-6), (key, one, eight)


def test_env_count_not_divisible_by_device_count_is_a_clear_error(tmp_path, eight_cpu_devices_env):
  result = run(
    [
      sys.executable,
      "-m",
      "experiments.train",
      f"--workdir={tmp_path / 'x'}",
      "--config=experiments/configs/ppo_cartpole.py",
      "--config.num_envs=4",
    ],
    eight_cpu_devices_env,
  )
  assert result.returncode == 2
  assert result.stderr.strip() == (
    "error: config.num_envs: expected a multiple of the device count (8), got 4"
  )
