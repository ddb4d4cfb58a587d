"""Tests of experiments/benchmarks/marl_rollout.py at tiny sizes: both sides run, the lines carry
their fields, and the reward check passes across an episode end. Timings are never asserted."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
  "marl_rollout_benchmark", os.path.join(ROOT, "experiments", "benchmarks", "marl_rollout.py")
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

NUM_ENVS, NUM_STEPS, NUM_AGENTS = 2, 27, 2  # 27 steps: one MPE episode (26 steps) ends


@pytest.fixture(scope="module")
def report():
  return bench.report(NUM_ENVS, NUM_STEPS, NUM_AGENTS, reps=2, seed=0)


def test_both_sides_report_their_speed(report):
  lines, _ = report
  assert [line["implementation"] for line in lines] == ["hrljax", "jaxmarl_ippo"]
  for line in lines:
    assert line["env_steps"] == NUM_ENVS * NUM_STEPS
    assert len(line["run_seconds"]) == len(line["cpu_seconds"]) == 2
    for field in ("env_steps_per_second", "env_steps_per_cpu_second", "compile_seconds"):
      assert line[field] > 0


def test_ratios_and_reward_check(report):
  _, ratios = report
  for field in (
    "speed_ratio_hrljax_over_jaxmarl",
    "cpu_speed_ratio_hrljax_over_jaxmarl",
    "compile_ratio_hrljax_over_jaxmarl",
  ):
    assert ratios[field] > 0
  check = ratios["reward_check"]
  assert check["equal"], check
  assert check["episodes_ended"] == NUM_ENVS


def test_bad_flag_is_named():
  with pytest.raises(ValueError, match="--num_envs"):
    bench.validate(0, 1, 1, 1)
