"""Tests of experiments/group_relative_table.py on hand-written run directories."""

import json
import os

import pytest

from experiments import group_relative_table as table


def _write_run(path, estimator, records):
  os.makedirs(path)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump({"estimator": estimator}, f)
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")


def test_final_means_average_the_last_fraction_of_updates_per_seed():
  records = [{"phase": "train", "seed": s, "update": u, "success_rate": s + u / 100}
             for s in (0, 1) for u in range(1, 21)]
  records.append({"phase": "eval", "seed": 0, "update": 20, "success_rate": 99.0})
  means = table.final_means(records, "success_rate", fraction=0.1)
  # The last 10% of 20 updates are updates 19 and 20.
  assert means == pytest.approx({0: 0.195, 1: 1.195})


def test_a_record_without_seed_counts_as_seed_zero(tmp_path):
  run = str(tmp_path / "run")
  _write_run(run, "gigpo", [{"phase": "train", "update": u, "success_rate": 0.5}
                            for u in range(1, 11)])
  assert table.table_row(run, "success_rate", 0.1) == "| gigpo | seeds 0 | 0.50 | 0.500 |"


def test_several_seeds_give_mean_and_sample_std(tmp_path):
  run = str(tmp_path / "run")
  values = {0: 0.86, 1: 0.85, 2: 0.89}
  _write_run(run, "gigpo", [{"phase": "train", "seed": s, "update": 10, "success_rate": v}
                            for s, v in values.items()])
  row = table.table_row(run, "success_rate", 0.1)
  assert row == "| gigpo | seeds 0,1,2 | 0.86 / 0.85 / 0.89 | 0.867 +- 0.021 |"


def test_a_run_without_the_metric_is_an_error(tmp_path):
  run = str(tmp_path / "run")
  _write_run(run, "grpo", [{"phase": "train", "update": 1, "loss": 0.0}])
  with pytest.raises(ValueError, match="success_rate"):
    table.table_row(run, "success_rate", 0.1)
