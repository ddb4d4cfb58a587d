"""Tests of `experiments.token_game_curves`, the reader of token-game run directories: each run's
curve from its per-seed evaluation records, the bar crossings and ratios, the printed tables and
the PNG (the command line, run in this process), and the errors. (That the token agents evaluate
on fixed games, so a policy held still gives a flat curve: test_archer.py.)"""

import json
import os

import pytest

from experiments import token_game_curves as curves
from tests.script_in_process import run_module

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(workdir, rows, steps_per_update=128):
  """A run directory whose metrics.jsonl holds a train record and, per (update, per-seed
  success) row, one evaluation record per seed (as experiments.train writes them)."""
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for update, values in rows:
      for seed, value in enumerate(values):
        if update:
          f.write(
            json.dumps(
              {
                "phase": "train",
                "seed": seed,
                "update": update,
                "env_steps": update * steps_per_update,
                "loss": 0.1,
              }
            )
            + "\n"
          )
        f.write(
          json.dumps(
            {
              "phase": "eval",
              "seed": seed,
              "update": update,
              "env_steps": update * steps_per_update,
              "eval_return": value,
            }
          )
          + "\n"
        )
  return str(workdir)


PPO = [(0, [0.5, 0.7]), (5, [0.9, 0.8]), (10, [1.0, 0.8]), (15, [1.0, 1.0])]
ARCHER = [(0, [0.5, 0.7]), (4, [0.5, 0.7]), (8, [0.7, 1.0]), (12, [0.9, 0.8]), (16, [1.0, 1.0])]


def test_curve_groups_the_seeds_of_each_evaluation(tmp_path):
  curve = curves.read_curve(write_run(tmp_path / "ppo", PPO))
  assert curve.seeds == [0, 1]
  assert [(u, s) for u, s, _ in curve.points] == [(0, 0), (5, 640), (10, 1280), (15, 1920)]
  steps, means = zip(*curve.means())
  assert steps == (0, 640, 1280, 1920)
  assert means == pytest.approx((0.6, 0.85, 0.9, 1.0))


def test_a_run_of_one_directory_per_seed_is_read_as_one_curve(tmp_path):
  """Host-driven agents write one directory per seed; joined by commas they make one curve, equal
  to the curve of one directory holding both seeds. A seed in two directories is an error."""
  both = curves.read_curve(write_run(tmp_path / "both", PPO))
  seed_0 = write_run(tmp_path / "s0", [(u, v[:1]) for u, v in PPO])
  seed_1 = tmp_path / "s1"
  write_run(seed_1, [(u, v) for u, v in PPO])  # seeds 0 and 1: seed 0 clashes with s0
  with pytest.raises(ValueError, match="seed 0 is also in"):
    curves.read_curve(f"{seed_0},{seed_1}")
  with open(seed_1 / "metrics.jsonl") as f:
    only_1 = [line for line in f if json.loads(line)["seed"] == 1]
  with open(seed_1 / "metrics.jsonl", "w") as f:
    f.writelines(only_1)
  joined = curves.read_curve(f"{seed_0},{seed_1}")
  assert joined.seeds == [0, 1]
  assert joined.points == both.points
  assert curves.default_label(f"{tmp_path}/archer/s0,{tmp_path}/archer/s1") == "archer"
  assert curves.default_label(f"{tmp_path}/ppo/") == "ppo"


def test_first_crossing_reports_the_interval_and_whether_it_stays(tmp_path):
  ppo = curves.read_curve(write_run(tmp_path / "ppo", PPO))
  archer = curves.read_curve(write_run(tmp_path / "archer", ARCHER, steps_per_update=256))
  assert curves.first_crossing(ppo, 0.85) == (640, 0, True)
  # ArCHer's mean: 0.6, 0.6, 0.85, 0.85, 1.0: reaches 0.85 at 2,048 (after 1,024) and stays.
  assert curves.first_crossing(archer, 0.85) == (2048, 1024, True)
  assert curves.first_crossing(archer, 0.9) == (4096, 3072, True)
  dips = curves.read_curve(write_run(tmp_path / "dips", [(0, [0.9]), (1, [0.5]), (2, [0.95])]))
  assert curves.first_crossing(dips, 0.9) == (0, 0, False)
  assert curves.first_crossing(ppo, 1.01) is None
  table = curves.bars_table(["PPO", "ArCHer"], [ppo, archer], [0.85, 0.9, 1.01])
  assert "| 0.85 | 640 (stays) | 2,048 (stays) | 0.31 |" in table
  assert "| 0.9 | 1,280 (stays) | 4,096 (stays) | 0.31 |" in table
  assert "| 1.01 | - | - | - |" in table


def test_one_seed_runs_without_a_seed_field_count_as_seed_0(tmp_path):
  os.makedirs(tmp_path / "one")
  with open(tmp_path / "one" / "metrics.jsonl", "w") as f:
    f.write(json.dumps({"phase": "eval", "update": 3, "env_steps": 30, "eval_return": 0.25}))
  curve = curves.read_curve(str(tmp_path / "one"))
  assert curve.points == [(3, 30, {0: 0.25})]
  assert "| 3 | 30 | 0.250 | 0.250 |" in curves.table("one", curve)


def run(*args):
  return run_module("experiments.token_game_curves", *args)


def test_command_line_prints_the_tables_and_draws_the_png(tmp_path):
  ppo, archer = write_run(tmp_path / "ppo", PPO), write_run(tmp_path / "archer", ARCHER, 256)
  png = tmp_path / "both.png"
  result = run(ppo, archer, "--labels=PPO,ArCHer", "--bars=0.85,0.9", f"--png={png}")
  assert result.code == 0, result.err[-3000:]
  assert "| updates | utterances / seed | seeds 0 / 1 | mean |" in result.out
  assert "| 15 | 1,920 | 1.000 / 1.000 | 1.000 |" in result.out
  assert "| 0.9 | 1,280 (stays) | 4,096 (stays) | 0.31 |" in result.out
  assert png.read_bytes()[:8] == PNG_MAGIC
  # The errors: one line each.
  nothing = run()
  assert nothing.code == 2 and "expected one or more run directories" in nothing.err
  missing = run(str(tmp_path / "absent"))
  assert missing.code == 2 and "no metrics file at" in missing.err
  labels = run(ppo, archer, "--labels=PPO")
  assert labels.code == 2 and "--labels: expected 2 labels, got 1" in labels.err
  alone = run(ppo, "--labels=PPO", "--bars=0.9")  # one run: no ratio column
  assert alone.code == 0 and "| bar | PPO |\n|---|---|\n| 0.9 | 1,280 (stays) |" in alone.out
  bars = run(ppo, "--bars=2")
  assert bars.code == 2 and "--bars: expected numbers in [0, 1]" in bars.err
  empty = write_run(tmp_path / "empty", [])
  no_eval = run(empty)
  assert no_eval.code == 2 and "no evaluation record" in no_eval.err


@pytest.mark.parametrize("y", ["eval_return", "eval_length"])
def test_a_missing_metric_is_a_value_error_naming_it(tmp_path, y):
  workdir = write_run(tmp_path / "run", PPO)
  if y == "eval_return":
    assert curves.read_curve(workdir, y).seeds == [0, 1]
  else:
    with pytest.raises(ValueError, match="eval_length"):
      curves.read_curve(workdir, y)
