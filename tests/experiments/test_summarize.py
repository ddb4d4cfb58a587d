"""Tests of experiments.summarize: per-seed rows from run directories, and their mean."""

import json
import math

import pytest

from experiments import summarize


def write_run(path, seeds):
  path.mkdir()
  with open(path / "metrics.jsonl", "w") as f:
    for update in (10, 20, 30, 40):
      for seed in seeds:
        value = None if update == 40 and seed == seeds[0] else update + seed
        f.write(
          json.dumps(
            {
              "phase": "train",
              "seed": seed,
              "update": update,
              "env_steps": 100 * update,
              "episode_return": value,
            }
          )
          + "\n"
        )
    for seed in seeds:
      f.write(
        json.dumps(
          {
            "phase": "eval",
            "seed": seed,
            "update": 40,
            "eval_return": 100.0 + seed,
            "eval_length": 7.0,
          }
        )
        + "\n"
      )
  return str(path)


def test_rows_average_the_last_updates_and_take_the_final_evaluation(tmp_path):
  rows = summarize.seed_rows(
    write_run(tmp_path / "run", seeds=(0, 3)), "episode_return", last=0.5, eval_fields=[]
  )
  # the last half is updates > 20: seed 0 has 30 (its 40 is undefined), seed 3 has 33 and 43
  assert [(r["seed"], r["episode_return"], r["eval_return"]) for r in rows] == [
    (0, 30.0, 100.0),
    (3, 38.0, 103.0),
  ]
  [mean] = summarize.summary_rows(rows)
  assert mean["episode_return"][0] == 34.0 and mean["eval_return"][0] == 101.5
  # two seeds: the bootstrap draws (30, 30), (30, 38), (38, 38), so the interval is [30, 38]
  assert mean["episode_return"][1:] == (30.0, 38.0)
  assert mean["run"].endswith("mean of 2 [95% CI]")
  assert "34 [30, 38]" in summarize.format_table(rows + [mean])


def test_a_sweep_s_values_are_summarised_apart_and_one_seed_runs_together(tmp_path):
  path = tmp_path / "sweep"
  path.mkdir()
  with open(path / "metrics.jsonl", "w") as f:
    for lr, seed, value in [(1e-3, 0, 1.0), (1e-3, 1, 3.0), (3e-4, 0, 10.0), (3e-4, 1, 30.0)]:
      record = {"phase": "train", "seed": seed, "learning_rate": lr, "update": 1, "loss": value}
      f.write(json.dumps({**record, "env_steps": 8}) + "\n")
  rows = summarize.seed_rows(str(path), "loss", 1.0, [])
  assert [(r["learning_rate"], r["seed"], r["loss"]) for r in rows] == [
    (3e-4, 0, 10.0),
    (3e-4, 1, 30.0),
    (1e-3, 0, 1.0),
    (1e-3, 1, 3.0),
  ]
  summaries = summarize.summary_rows(rows, "iqm")
  assert [(s["learning_rate"], s["loss"][0]) for s in summaries] == [(3e-4, 20.0), (1e-3, 2.0)]
  single = [
    summarize.seed_rows(write_run(tmp_path / f"s{seed}", seeds=(seed,)), "episode_return", 1.0, [])
    for seed in (0, 1, 2)
  ]
  [together] = summarize.summary_rows([row for rows in single for row in rows])
  assert together["run"] == "mean of 3 [95% CI]"


def test_table_has_one_line_per_row_and_a_header(tmp_path):
  rows = summarize.seed_rows(
    write_run(tmp_path / "run", seeds=(0,)), "episode_return", 1.0, ["eval_length"]
  )
  assert set(rows[0]) == {"run", "seed", "episode_return", "eval_length"}
  table = summarize.format_table(rows)
  assert table.splitlines()[0] == "| run | seed | episode_return | eval_length |"
  assert len(table.splitlines()) == 3
  assert math.isnan(
    summarize.seed_rows(write_run(tmp_path / "empty", seeds=(0,)), "loss", 1.0, [])[0]["loss"]
  )


def test_a_window_of_env_steps_replaces_the_last_updates(tmp_path):
  rows = summarize.seed_rows(
    write_run(tmp_path / "run", seeds=(1,)), "episode_return", 0.1, [], steps=(1000, 3000)
  )
  assert rows[0]["episode_return"] == (21 + 31) / 2  # env steps 2000 and 3000


def test_episode_statistics_are_weighted_by_the_episodes_of_each_record():
  records = [{"episode_length": 100.0, "episodes": 1.0}, {"episode_length": 10.0, "episodes": 9.0}]
  assert summarize.window_mean(records, "episode_length") == (100.0 + 90.0) / 10
  assert summarize.window_mean([{"loss": 1.0}, {"loss": 3.0}], "loss") == 2.0
  assert math.isnan(summarize.window_mean([], "loss"))


def test_several_metrics_and_evaluations_read_back_from_evaluate_s_output(tmp_path):
  run = write_run(tmp_path / "run", seeds=(0, 1))
  path = tmp_path / "evaluations.jsonl"
  record = {"workdir": run + "/", "update": 40, "seed": 1, "eval_return": 7.0}
  path.write_text(json.dumps(record) + "\n\n")
  evaluations = summarize.read_evaluations(str(path))
  rows = summarize.seed_rows(run, ["episode_return", "missing"], 0.5, [], None, evaluations)
  # seed 1's final evaluation is the file's (which lacks eval_length); seed 0 keeps its own
  assert [(r["seed"], r["episode_return"], r["eval_return"]) for r in rows] == [
    (0, 30.0, 100.0),
    (1, 36.0, 7.0),
  ]
  assert "eval_length" not in rows[1] and rows[0]["eval_length"] == 7.0
  assert all(math.isnan(r["missing"]) for r in rows)
  path.write_text(json.dumps({"update": 40}) + "\n")
  with pytest.raises(ValueError, match="line 1 .* no workdir and seed"):
    summarize.read_evaluations(str(path))
