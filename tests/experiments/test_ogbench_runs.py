"""`experiments/ogbench_runs.py` end to end on a tiny locally generated point-maze dataset."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_module(*args):
  return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                        timeout=600)


def test_missing_dataset_is_one_line_naming_the_flag_and_the_fix(tmp_path):
  missing = tmp_path / "none.npz"
  result = run_module("experiments.ogbench_runs", f"--dataset={missing}",
                      f"--out={tmp_path / 'o.json'}")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      f"error: --dataset: no file at '{missing}'; make it with: python -m "
      f"experiments.make_dataset --env=pointmaze-medium-navigate-v0 --out={missing}"]


def test_tiny_run_trains_and_evaluates_the_five_tasks(tmp_path):
  data, out = tmp_path / "d.npz", tmp_path / "o.json"
  made = run_module("experiments.make_dataset", "--env=pointmaze-medium-navigate-v0",
                    f"--out={data}", "--num_episodes=3", "--max_episode_steps=60",
                    "--num_val_episodes=1")
  assert made.returncode == 0, made.stderr[-2000:]
  result = run_module("experiments.ogbench_runs", "--agent=hiql", f"--dataset={data}",
                      "--updates=3", "--log_every=2", "--eval_episodes=1", "--batch_size=8",
                      "--hidden_dims=8", f"--out={out}")
  assert result.returncode == 0, result.stderr[-2000:]
  record = json.load(open(out))
  assert record["agent"] == "hiql" and record["updates"] == 3
  assert [entry["update"] for entry in record["log"]] == [2, 3]  # a short final chunk
  (seed,) = record["seeds"]
  tasks = [seed[f"task{i}_success"] for i in range(1, 6)]
  assert all(0.0 <= t <= 1.0 for t in tasks)
  assert abs(seed["success"] - sum(tasks) / 5) < 1e-6
