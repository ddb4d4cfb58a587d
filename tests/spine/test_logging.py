"""Tests of hrljax.logging's curves: per-seed curves, their mean and range, and the PNG."""

import json

import numpy as np
import pytest

from hrljax import logging as hlog


def write_run(workdir, seeds, steps=(10, 20, 30)):
  workdir.mkdir()
  with open(workdir / hlog.METRICS_FILE, "w") as f:
    for step in steps:
      for seed in seeds:
        f.write(
          json.dumps(
            {"phase": "train", "seed": seed, "env_steps": step, "episode_return": step / 10 + seed}
          )
          + "\n"
        )
    f.write(
      json.dumps({"phase": "eval", "seed": seeds[0], "env_steps": steps[-1], "eval_return": 1.0})
      + "\n"
    )
  return str(workdir)


def test_seed_curves_split_records_by_seed_and_skip_those_without_the_metric(tmp_path):
  records = hlog.read_jsonl(write_run(tmp_path / "run", seeds=(0, 4)))
  curves = hlog.seed_curves(records, "env_steps", "episode_return")
  assert curves == {0: ([10, 20, 30], [1.0, 2.0, 3.0]), 4: ([10, 20, 30], [5.0, 6.0, 7.0])}
  assert hlog.seed_curves(records, "env_steps", "eval_return") == {0: ([30], [1.0])}
  assert hlog.seed_curves([{"env_steps": 1, "loss": 2.0}], "env_steps", "loss") == {0: ([1], [2.0])}


def test_aggregate_curve_is_taken_where_every_seed_has_a_value():
  xs, mean, low, high = hlog.aggregate_curve(
    {0: ([10, 20, 30], [1.0, 2.0, 3.0]), 1: ([10, 20], [3.0, 6.0])}
  )
  np.testing.assert_array_equal(xs, [10, 20])
  np.testing.assert_allclose(mean, [2.0, 4.0])
  # Two seeds: a resample's mean is one of the seeds' values or their mean.
  assert np.all(low >= [1.0, 2.0]) and np.all(high <= [3.0, 6.0]) and np.all(low < high)


def test_aggregate_curve_iqm_is_the_interquartile_mean_of_the_seeds():
  curves = {seed: ([0, 1], [float(seed), 2.0 * seed]) for seed in range(8)}
  xs, center, low, high = hlog.aggregate_curve(curves, "iqm")
  np.testing.assert_allclose(center, [3.5, 7.0])  # the mean of seeds 2..5
  assert np.all(low <= center) and np.all(center <= high)


def test_plot_curves_draws_single_and_several_seed_runs(tmp_path):
  one = write_run(tmp_path / "one", seeds=(0,))
  three = write_run(tmp_path / "three", seeds=(0, 1, 2))
  out = hlog.plot_curves([one, three], str(tmp_path / "curves.png"))
  hlog.plot_curves([three], str(tmp_path / "iqm.png"), statistic="iqm")
  with pytest.raises(ValueError, match="statistic: expected one of"):
    hlog.plot_curves([three], str(tmp_path / "bad.png"), statistic="median")
  with open(out, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  with pytest.raises(ValueError, match="y: no record in .* has both 'env_steps' and 'nothing'"):
    hlog.plot_curves([one], str(tmp_path / "x.png"), y="nothing")
