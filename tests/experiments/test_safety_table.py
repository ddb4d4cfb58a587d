"""`experiments/safety_table.py`: one row of the safety results table, on tiny runs."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_OFF_POLICY = ["--config.hidden_sizes=(16,)", "--config.risk_hidden_sizes=(16,)",
                   "--config.batch_size=16", "--config.risk_batch_size=16",
                   "--config.num_envs=2", "--config.buffer_size=256",
                   "--config.risk_buffer_size=256", "--config.learning_starts=8",
                   "--config.risk_pretrain_updates=2", "--config.total_timesteps=32"]
TINY_PPO = ["--config.num_envs=4", "--config.num_steps=20", "--config.total_timesteps=160",
            "--config.update_epochs=1", "--config.num_minibatches=2",
            "--config.hidden_sizes=(16,16)"]


def table_row(config: str, *args):
  result = subprocess.run(
      [sys.executable, "-m", "experiments.safety_table",
       f"--config=experiments/configs/{config}.py", *args],
      cwd=REPO, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-2000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def check_seed(entry: dict, max_violations: int):
  assert 0 <= entry["violating_steps"] <= max_violations
  assert all(isinstance(v, (int, float)) for v in entry.values())


def test_off_policy_row_has_training_and_evaluation_numbers_per_seed():
  row = table_row("recovery_rl_pointhazard", "--seeds=0,1", *TINY_OFF_POLICY)
  assert row["agent"] == "recovery_rl" and row["seeds"] == [0, 1] and row["env_steps"] == 32
  for seed in ("seed0", "seed1"):
    check_seed(row[seed], 32)
    assert "train_cost_last10" in row[seed] and len(row[seed]) > 4  # + evaluation statistics


def test_ppo_family_row_counts_rollout_violations():
  row = table_row("ppo_lagrangian_pointhazard", "--seeds=3", *TINY_PPO)
  assert row["agent"] == "ppo_lagrangian" and row["env_steps"] == 160
  check_seed(row["seed3"], 160)
  assert "eval_cost" in row["seed3"]


def test_bad_seeds_are_a_usage_error():
  result = subprocess.run([sys.executable, "-m", "experiments.safety_table",
                           "--config=experiments/configs/ppo_pointhazard.py", "--seeds=a,b"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode != 0 and "--seeds: expected integers" in result.stderr
