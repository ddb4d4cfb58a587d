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


def test_workdir_runs_are_what_plot_safety_reads(tmp_path):
  """`--workdir` writes each seed as an `experiments.train` workdir: plot_safety's summary of it
  gives the row's evaluation numbers and, from the logged per-step cost rate, its violating
  steps (indicator cost); a second run into the same workdir is refused before training."""
  from experiments import plot_safety
  args = ("--seeds=0,1", f"--workdir={tmp_path}", "--config.log_every=4", *TINY_OFF_POLICY)
  row = table_row("recovery_rl_pointhazard", *args)
  for seed in (0, 1):
    workdir = tmp_path / f"recovery_rl_pointhazard_s{seed}"
    summary = plot_safety.summarize_run(str(workdir))
    assert summary.seed == seed and summary.label == "recovery_rl"
    assert summary.eval_return == row[f"seed{seed}"]["eval_return"]
    assert summary.eval_cost == row[f"seed{seed}"]["eval_cost"]
    assert abs(summary.training_cost - row[f"seed{seed}"]["violating_steps"]) < 0.5
    records = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
    assert [r["update"] for r in records if r["phase"] == "train"] == [4, 8, 12, 16]
    assert plot_safety.restore_agent(str(workdir)).config.agent == "recovery_rl"
  again = subprocess.run(
      [sys.executable, "-m", "experiments.safety_table",
       "--config=experiments/configs/recovery_rl_pointhazard.py", *args],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert again.returncode != 0 and "already holds a run" in again.stderr
