"""`experiments/safety_table.py`: rows of the safety results table read from run directories of
`experiments.train` (tiny runs, trained once per module), and its reading rules on synthetic
records."""

import json
import math
import os

import pytest

from experiments import plot_safety, safety_table
from experiments import train as train_cli
from tests.experiments import preset_smoke
from tests.script_in_process import run_module

TINY_OFF_POLICY = dict(
  hidden_sizes=(16,),
  risk_hidden_sizes=(16,),
  batch_size=16,
  risk_batch_size=16,
  num_envs=2,
  buffer_size=256,
  risk_buffer_size=256,
  learning_starts=8,
  risk_pretrain_updates=2,
  total_timesteps=32,
  log_every=4,
  checkpoint_every=8,
  eval_episodes=2,
)
# The smoke run's sizes of `ppo_lagrangian_pointhazard` (tests/experiments/preset_smoke.py), so
# that the compilation cache serves the programs one of the two runs compiled to the other.
TINY_PPO = {**preset_smoke.RUN, **preset_smoke.PPO_HAZARD}


def train(experiment_config, name, workdir, **overrides):
  """`experiments.train.experiment` (what `python -m experiments.train` runs, as the smoke runs
  do): validation, the learner, training, logging and the final evaluation in `workdir`."""
  config = experiment_config(name)
  config.update(overrides)
  train_cli.experiment(config, str(workdir))
  return str(workdir)


@pytest.fixture(scope="module")
def runs(experiment_config, tmp_path_factory):
  """Recovery RL with seeds 0 and 1 in one program; seeds 2 and 3 in a second run (the same
  programs: the persistent compilation cache serves them); PPO-Lagrangian seed 3."""
  root = tmp_path_factory.mktemp("runs")
  return {
    "recovery_rl": train(
      experiment_config, "recovery_rl_pointhazard", root / "rrl", seeds=(0, 1), **TINY_OFF_POLICY
    ),
    "recovery_rl_s2": train(
      experiment_config, "recovery_rl_pointhazard", root / "rrl2", seeds=(2, 3), **TINY_OFF_POLICY
    ),
    "ppo_lagrangian": train(
      experiment_config, "ppo_lagrangian_pointhazard", root / "ppo", seeds=(3,), **TINY_PPO
    ),
  }


def test_off_policy_row_has_training_and_evaluation_numbers_per_seed(runs):
  row = safety_table.table_row([runs["recovery_rl"]])
  assert row["agent"] == "recovery_rl" and row["seeds"] == [0, 1] and row["env_steps"] == 32
  for seed in ("seed0", "seed1"):
    assert 0 <= row[seed]["violating_steps"] <= 32
    assert {
      "train_return_last10",
      "train_cost_last10",
      "eval_return",
      "eval_cost",
      "eval_violation_rate",
      "eval_interventions",
    } <= set(row[seed])
    assert all(isinstance(v, (int, float)) for v in row[seed].values())


def same_json(a, b) -> bool:
  """Equal as JSON text (NaN == NaN there, unlike in a dict comparison)."""
  return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_runs_of_one_config_join_in_one_row_by_seed(runs):
  row = safety_table.table_row([runs["recovery_rl"], runs["recovery_rl_s2"]])
  assert row["seeds"] == [0, 1, 2, 3]
  # (as JSON: the tiny runs end no episode in their last tenth, so some entries are NaN)
  assert same_json(row["seed2"], safety_table.table_row([runs["recovery_rl_s2"]])["seed2"])
  with pytest.raises(ValueError, match="seed 0 appears in two runs"):
    safety_table.table_row([runs["recovery_rl"], runs["recovery_rl"]])
  with pytest.raises(ValueError, match="expected runs of one agent"):
    safety_table.table_row([runs["recovery_rl"], runs["ppo_lagrangian"]])


def test_ppo_family_row_counts_violating_steps(runs):
  row = safety_table.table_row([runs["ppo_lagrangian"]])
  assert row["agent"] == "ppo_lagrangian" and row["env_steps"] == 320
  assert 0 <= row["seed3"]["violating_steps"] <= 320
  assert "eval_cost" in row["seed3"]


def test_rows_agree_with_plot_safety_on_the_same_runs(runs):
  """plot_safety's summary of a run directory gives the row's evaluation numbers and, from the
  logged per-step cost rate, its violating steps (indicator cost, one control step per update)."""
  row = safety_table.table_row([runs["recovery_rl"]])
  for summary in plot_safety.summarize_run(runs["recovery_rl"]):
    entry = row[f"seed{summary.seed}"]
    assert summary.label == "recovery_rl"
    assert round(summary.eval_return, 3) == entry["eval_return"]
    assert round(summary.eval_cost, 3) == entry["eval_cost"]
    assert abs(summary.training_cost - entry["violating_steps"]) < 0.5


def test_command_line_prints_the_json_line_and_the_markdown_row(runs):
  run = lambda *args: run_module("experiments.safety_table", *args)
  result = run(runs["ppo_lagrangian"])
  assert result.code == 0, result.err[-2000:]
  assert same_json(
    json.loads(result.out.strip().splitlines()[-1]),
    safety_table.table_row([runs["ppo_lagrangian"]]),
  )
  markdown = run("--markdown", runs["ppo_lagrangian"])
  assert markdown.out.startswith("| ppo_lagrangian (seeds 3) | ")
  assert safety_table.table_row([runs["recovery_rl"]])["label"] == "recovery_rl"
  missing = run(os.path.join(runs["ppo_lagrangian"], "nowhere"))
  assert missing.code == 2 and "no config.json" in missing.err


def records(violations, returns, costs, episodes, seed=0, every=1):
  """Train records of `every` updates each (values per update), then an eval record."""
  out = [
    {
      "phase": "train",
      "seed": seed,
      "update": every * (i + 1),
      "env_steps": 10 * every * (i + 1),
      "violating_steps": v,
      "episode_return": r,
      "episode_cost": c,
      "episodes": e,
    }
    for i, (v, r, c, e) in enumerate(zip(violations, returns, costs, episodes))
  ]
  return out + [
    {
      "phase": "eval",
      "seed": seed,
      "update": every * len(violations),
      "eval_return": 2.5,
      "eval_cost": 0.0,
    }
  ]


def test_last_tenth_weights_the_episodes_of_the_last_records():
  """20 records of 5 updates: the last 10% of the 100 updates are the last two records."""
  train = records(
    [1.0] * 20, [0.0] * 18 + [1.0, 3.0], [9.0] * 18 + [4.0, 0.0], [1.0] * 18 + [2.0, 6.0], every=5
  )[:-1]
  assert safety_table.last_tenth(train, "episode_return") == pytest.approx(20.0 / 8)
  assert safety_table.last_tenth(train, "episode_cost") == pytest.approx(8.0 / 8)
  assert safety_table.violating_steps(train) == 100  # 1 per update x 100 updates
  nothing = records([0.0] * 10, [math.nan] * 10, [math.nan] * 10, [0.0] * 10)[:-1]
  assert math.isnan(safety_table.last_tenth(nothing, "episode_return"))


def test_a_resumed_run_counts_its_repeated_updates_once_and_old_runs_are_refused(tmp_path):
  first = records([2.0] * 10, [1.0] * 10, [0.0] * 10, [1.0] * 10)
  resumed = [r for r in first if r["phase"] == "train"][:3] + first  # logged again after a kill
  assert safety_table.by_seed(resumed)[0]["train"] == first[:-1]
  assert safety_table.seed_entry(safety_table.by_seed(resumed)[0])["violating_steps"] == 20
  old = [dict(r, violating_steps=None) for r in first[:-1]]
  for r in old:
    del r["violating_steps"]
  with pytest.raises(ValueError, match="expected 'violating_steps'"):
    safety_table.violating_steps(old)
