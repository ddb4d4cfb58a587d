"""Tests of experiments/benchmarks/archer_throughput.py at a tiny batch.

The PPO side it times must be token PPO's own gradient step on ArCHer's policy, changing both
networks; ArCHer's steps are tested in tests/agents/test_archer.py, so they are built here but
only the cheap programs are compiled. Timings are never asserted.
"""

import importlib.util
import os

import jax
import numpy as np
import pytest

from experiments.configs import archer_token_game

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
  "archer_throughput_benchmark",
  os.path.join(ROOT, "experiments", "benchmarks", "archer_throughput.py"),
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

BATCH = 8


@pytest.fixture(scope="module")
def measured():
  config = archer_token_game.get_config()
  # A one-layer policy and critic: compile time grows with depth, and the test is about wiring.
  config.num_layers = config.critic_num_layers = 1
  programs = bench.build(config, BATCH, seed=0)
  timed = {name: programs[name] for name in ("generate", "ppo_update")}
  return programs, bench.measure(timed, reps=2)


def _max_change(before, after):
  return max(
    float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after))
  )


def test_ppo_side_is_token_ppo_updating_the_same_policy(measured):
  programs, (_, _, outputs) = measured
  ppo_agent, ppo_batch = programs["ppo_update"][1]
  archer_agent = programs["archer_update"][1][0]
  assert _max_change(archer_agent.policy_params, ppo_agent.policy_params) == 0.0
  assert ppo_batch.dialogue.shape[0] == BATCH
  policy_params, value_params, metrics = outputs["ppo_update"]
  assert _max_change(ppo_agent.policy_params, policy_params) > 0.0
  assert _max_change(ppo_agent.value_params, value_params) > 0.0
  assert np.isfinite(float(metrics["loss"]))


def test_generate_samples_one_utterance_per_dialogue(measured):
  programs, (compile_seconds, times, outputs) = measured
  assert outputs["generate"].shape == (BATCH, programs["archer_update"][1][0].utterance_len)
  assert set(times) == set(compile_seconds) == {"generate", "ppo_update"}
  assert all(len(t) == 2 for t in times.values())


def test_summary_ratios_come_from_the_median_times():
  times = {
    "generate": [2.0, 4.0, 3.0],
    "archer_update": [6.0, 5.0, 7.0],
    "ppo_update": [1.0, 2.0, 3.0],
  }
  record = bench.summary(BATCH, 4, 3, {name: 1.0 for name in times}, times)
  assert record["archer_to_ppo"] == pytest.approx(6.0 / 2.0)
  assert record["utterances_per_second"] == pytest.approx(BATCH / 3.0)
  assert record["archer_updates_per_second"] == pytest.approx(1 / 6.0)
  assert record["min_seconds"] == {"generate": 2.0, "archer_update": 5.0, "ppo_update": 1.0}
