"""Tests of hrljax.logging: the external sinks' tags (TensorBoard read back from its event
file), the progress line with an agent's headline metrics, per-seed curves, their mean and
range, and the PNG."""

import glob
import io
import json
import struct
import sys

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


TRAIN = {
  "phase": "train",
  "seed": 0,
  "update": 4,
  "env_steps": 512,
  "wall_time": 1.5,
  "env_steps_per_second": 400.0,
  "episode_return": 20.0,
  "loss": float("nan"),  # no tag: NaN is None in the record
}
EVAL = {
  "phase": "eval",
  "seed": 0,
  "update": 4,
  "env_steps": 512,
  "wall_time": 1.5,
  "eval_return": 30.0,
  "success": 0.5,  # a host evaluation's name, without the prefix
}


def test_scalar_tags_namespace_training_and_evaluation_records():
  logger = hlog.MetricsLogger("unused", enabled=False)
  train, evaluation = logger.write(TRAIN), logger.write(EVAL)
  assert hlog.scalar_tags(train) == {
    "train/env_steps": 512,
    "train/wall_time": 1.5,
    "train/env_steps_per_second": 400.0,
    "train/episode_return": 20.0,
  }
  assert hlog.scalar_tags(evaluation) == {"eval/return": 30.0, "eval/success": 0.5}
  # `eval_` is kept where dropping it would meet another field of the record.
  both = hlog.scalar_tags({"phase": "eval", "update": 1, "eval_loss": 1.0, "loss": 2.0})
  assert both == {"eval/eval_loss": 1.0, "eval/loss": 2.0}
  assert hlog.scalar_tags(train, per_seed=True)["train/episode_return/seed_0"] == 20.0


def read_tensorboard_scalars(logdir) -> list:
  """`[(step, tag, value)]` of the scalar summaries in `logdir`'s event files (TFRecord framing:
  a little-endian uint64 length, its CRC, the serialized Event, its CRC), with the steps of the
  purge markers as `(step, None, None)`."""
  from tensorboardX.proto import event_pb2

  found = []
  for path in sorted(glob.glob(str(logdir / "events.out.tfevents.*"))):
    with open(path, "rb") as f:
      data = f.read()
    pos = 0
    while pos < len(data):
      (length,) = struct.unpack("<Q", data[pos : pos + 8])
      event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
      pos += 12 + length + 4
      if event.HasField("session_log"):
        found.append((event.step, None, None))
      found.extend((event.step, v.tag, v.simple_value) for v in event.summary.value)
  return found


def test_tensorboard_sink_writes_the_namespaced_tags_and_keeps_the_jsonl_keys(tmp_path):
  with hlog.MetricsLogger(str(tmp_path), tensorboard=True) as logger:
    logger.truncate_after(0)  # a fresh run (nothing to drop) marks step 1 on
    logger.write(TRAIN)
    logger.write(EVAL)
  scalars = read_tensorboard_scalars(tmp_path / "tensorboard")
  assert scalars == [
    (1, None, None),  # purge_step: events a killed run wrote after its checkpoint are hidden
    (4, "train/env_steps", 512.0),
    (4, "train/wall_time", 1.5),
    (4, "train/env_steps_per_second", 400.0),
    (4, "train/episode_return", 20.0),
    (4, "eval/return", 30.0),
    (4, "eval/success", 0.5),
  ]
  records = hlog.read_jsonl(str(tmp_path))
  assert [set(r) for r in records] == [set(TRAIN), set(EVAL)]  # metrics.jsonl as before
  assert records[0]["loss"] is None


def test_a_missing_sink_package_names_its_extra(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "tensorboardX", None)
  monkeypatch.setitem(sys.modules, "wandb", None)
  with pytest.raises(ImportError, match=r"tensorboardX: pip install 'hrljax\[tensorboard\]'"):
    hlog.MetricsLogger(str(tmp_path), tensorboard=True)
  with pytest.raises(ImportError, match=r"wandb: pip install 'hrljax\[wandb\]'"):
    hlog.WandbSink(project="p", mode="offline", directory=str(tmp_path))


class ListSink:
  def __init__(self):
    self.written, self.closed = [], False

  def write(self, step, scalars):
    self.written.append((step, scalars))

  def close(self):
    self.closed = True


def test_a_sink_is_any_object_with_write_and_close_and_seeds_get_their_own_tags(tmp_path):
  sink = ListSink()
  with hlog.MetricsLogger(str(tmp_path), sinks=[sink], seeds=(0, 1)) as logger:
    logger.write({**TRAIN, "seed": 1})
  assert sink.closed
  [(step, scalars)] = sink.written
  assert step == 4 and scalars["train/episode_return/seed_1"] == 20.0
  other = ListSink()
  hlog.MetricsLogger(str(tmp_path), sinks=[other], enabled=False).write(TRAIN)
  assert other.written == []  # processes other than process 0 write nothing


def test_the_progress_line_shows_the_headline_metrics_and_counts_samples_offline(tmp_path):
  default = hlog.format_progress(TRAIN, 16)
  assert default == "update 4/16 | env steps 512 | 400 steps/s | episode_return 20 | loss nan"
  out = io.StringIO()
  logger = hlog.MetricsLogger(
    str(tmp_path), stream=out, headline=("value_loss", "success"), samples=True
  )
  logger.write(EVAL)
  logger.write({**EVAL, "seed": 1, "success": 1.0})  # two seeds: their mean
  # The training loop prints the logger's line: its headline metrics, counted in samples.
  logger.progress(logger.format_progress({**TRAIN, "value_loss": 0.25}, 16))
  logger.progress("plain text")
  assert out.getvalue().splitlines() == [
    "update 4/16 | samples 512 | 400 samples/s | value_loss 0.25 | success 0.75",
    "plain text",
  ]
