"""Tests of experiments/benchmarks/pointmaze_generation.py at a tiny size (needs `ogbench`).

Its reference side (the plain protocol loop) must equal `pointmaze.generate` array for array;
timings are printed by the benchmark, never asserted here.
"""

import importlib.util
import json
import os

import numpy as np
import pytest

from hrljax.data import pointmaze
from tests.script_in_process import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
  "pointmaze_generation_benchmark",
  os.path.join(ROOT, "experiments", "benchmarks", "pointmaze_generation.py"),
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_reference_loop_equals_generate():
  """`pointmaze.generate` (oracle table, unwrapped stepping, preallocated rows) against the plain
  loop (wrappers, the maze's per-step BFS, the noisy oracle written out): episodes long enough
  that goals are reached and redrawn several times."""
  reference = bench.reference_generate("pointmaze-medium-navigate-v0", 2, 400, seed=7)
  ours = bench.fast_generate("pointmaze-medium-navigate-v0", 2, 400, seed=7)
  assert bench.first_difference(reference, ours) is None
  np.testing.assert_array_equal(np.nonzero(reference["terminals"])[0], [399, 799])
  other = bench.reference_generate("pointmaze-medium-navigate-v0", 1, 300, seed=6)
  assert bench.first_difference(reference, other) == "observations"  # the check can fail


def test_first_difference_names_the_differing_array():
  a = {key: np.zeros((3, 2), np.float32) for key in pointmaze.RAW_KEYS}
  b = {key: value.copy() for key, value in a.items()}
  b["qvel"][1, 0] = 1.0
  assert bench.first_difference(a, b) == "qvel"
  assert bench.first_difference(a, a) is None


def test_run_reports_both_sides_and_their_ratio():
  record = bench.run("pointmaze-medium-navigate-v0", episodes=1, steps=40, reps=2, reference=True)
  assert record["identical_arrays"] and record["steps_per_round"] == 40
  for side in ("reference", "generate"):
    assert record[side]["steps_per_second_best"] >= record[side]["steps_per_second_median"] > 0
  expected = (
    record["generate"]["steps_per_second_median"] / record["reference"]["steps_per_second_median"]
  )
  assert record["ratio_median"] == pytest.approx(expected)


@pytest.mark.parametrize(
  "kwargs, message",
  [
    (dict(episodes=0), "episodes: expected an integer >= 1, got 0"),
    (dict(steps=1), "steps: expected an integer >= 2, got 1"),
    (dict(name="pointmaze-tiny-navigate-v0"), "env: expected one of"),
  ],
)
def test_bad_sizes_and_names_raise_naming_the_argument(kwargs, message):
  args = dict(name="pointmaze-medium-navigate-v0", episodes=1, steps=10, reps=1, reference=False)
  args.update(kwargs)
  with pytest.raises(ValueError, match=message):
    bench.run(**args)


def test_cli_prints_one_json_line():
  result = run_module(
    "experiments.benchmarks.pointmaze_generation",
    "--episodes=1",
    "--steps=20",
    "--reps=1",
    "--env=pointmaze-giant-navigate-v0",
  )
  assert result.code == 0, result.err[-2000:]
  (line,) = result.out.strip().splitlines()
  record = json.loads(line)
  assert record["env"] == "pointmaze-giant-navigate-v0" and record["identical_arrays"]
  assert record["ratio_median"] > 0
