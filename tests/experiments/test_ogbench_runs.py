"""`experiments/ogbench_runs.py` end to end on a tiny locally generated point-maze dataset."""

import json
import os
import subprocess
import sys

import pytest

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


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
  data = tmp_path_factory.mktemp("data") / "d.npz"
  made = run_module("experiments.make_dataset", "--env=pointmaze-medium-navigate-v0",
                    f"--out={data}", "--num_episodes=3", "--max_episode_steps=60",
                    "--num_val_episodes=1")
  assert made.returncode == 0, made.stderr[-2000:]
  return data


def test_tiny_run_trains_and_evaluates_the_five_tasks(tmp_path, tiny_dataset):
  data, out = tiny_dataset, tmp_path / "o.json"
  result = run_module("experiments.ogbench_runs", "--agent=hiql", f"--dataset={data}",
                      "--updates=3", "--log_every=2", "--eval_episodes=1", "--batch_size=8",
                      "--hidden_dims=8", "--eval_max_episode_steps=20", f"--out={out}")
  assert result.returncode == 0, result.stderr[-2000:]
  record = json.load(open(out))
  assert record["agent"] == "hiql" and record["updates"] == 3
  assert [entry["update"] for entry in record["log"]] == [2, 3]  # a short final chunk
  (seed,) = record["seeds"]
  tasks = [seed[f"task{i}_success"] for i in range(1, 6)]
  assert all(0.0 <= t <= 1.0 for t in tasks)
  assert abs(seed["success"] - sum(tasks) / 5) < 1e-6
  assert record["finished"] and record["evaluations"] == []
  # the value diagnostic along each task's shortest path: cells >= 2 (start and goal)
  assert all(seed[f"task{i}_path_cells"] >= 2 for i in range(1, 6))
  assert all(0.0 <= seed[f"task{i}_v_rise"] <= 1.0 for i in range(1, 6))
  assert all(-1.0 <= seed[f"task{i}_action_cos"] <= 1.0 for i in range(1, 6))


TINY = ("--updates=4", "--log_every=2", "--checkpoint_every=2", "--eval_episodes=1",
        "--batch_size=8", "--hidden_dims=8", "--eval_max_episode_steps=20")


def test_killed_run_resumes_from_its_checkpoint_and_matches_the_uninterrupted_run(
    tmp_path, tiny_dataset):
  common = ("experiments.ogbench_runs", "--agent=ota", f"--dataset={tiny_dataset}", *TINY)
  whole = run_module(*common, f"--out={tmp_path / 'whole.json'}",
                     f"--workdir={tmp_path / 'w_whole'}")
  assert whole.returncode == 0, whole.stderr[-2000:]
  # the "killed" run: stopped after its first chunk (checkpoint at update 2) by the deadline
  first = run_module(*common, "--deadline=0", f"--out={tmp_path / 'part.json'}",
                     f"--workdir={tmp_path / 'w_part'}")
  assert first.returncode == 0, first.stderr[-2000:]
  assert json.load(open(tmp_path / "part.json"))["updates"] == 2
  resumed = run_module(*common, f"--out={tmp_path / 'part.json'}",
                       f"--workdir={tmp_path / 'w_part'}")
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  assert "resumed from the checkpoint at update 2" in resumed.stdout
  a, b = json.load(open(tmp_path / "whole.json")), json.load(open(tmp_path / "part.json"))
  assert [r["update"] for r in b["log"]] == [2, 4]
  for key in ("loss", "v_mean", "high_v_mean", "high_value_loss"):
    assert [r[key] for r in a["log"]] == [r[key] for r in b["log"]], key
  assert a["seeds"][0]["task1_v_start"] == b["seeds"][0]["task1_v_start"]


def test_resuming_with_other_settings_names_the_flags(tmp_path, tiny_dataset):
  common = ("experiments.ogbench_runs", f"--dataset={tiny_dataset}", *TINY, "--deadline=0",
            f"--out={tmp_path / 'o.json'}", f"--workdir={tmp_path / 'w'}")
  assert run_module(*common, "--agent=hiql").returncode == 0
  other = run_module(*common, "--agent=gcivl")
  assert other.returncode == 2
  assert "--agent was 'hiql', now 'gcivl'" in other.stderr


def test_mid_run_evaluation_is_recorded(tmp_path, tiny_dataset):
  out = tmp_path / "o.json"
  result = run_module("experiments.ogbench_runs", "--agent=gcivl", f"--dataset={tiny_dataset}",
                      *TINY, "--eval_every=2", "--mid_eval_episodes=1", f"--out={out}")
  assert result.returncode == 0, result.stderr[-2000:]
  record = json.load(open(out))
  (mid,) = record["evaluations"]  # at update 2; update 4 is the final evaluation
  assert mid["update"] == 2 and mid["eval_episodes_per_task"] == 1
  assert set(mid["seeds"][0]) >= {f"task{i}_success" for i in range(1, 6)}


@pytest.mark.parametrize("flag, message", [
    ("--checkpoint_every=3", "--checkpoint_every: expected a multiple of --log_every=2, got 3"),
    ("--eval_every=-2", "--eval_every: expected 0 or a positive integer, got -2"),
])
def test_bad_schedule_flags_are_one_line_errors(tmp_path, tiny_dataset, flag, message):
  result = run_module("experiments.ogbench_runs", f"--dataset={tiny_dataset}", "--log_every=2",
                      flag, f"--out={tmp_path / 'o.json'}")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [f"error: {message}"]
