"""Aggregates over seeds for multi-seed claims: the interquartile mean and bootstrap intervals.

Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS
2021 (arXiv:2108.13264): report the interquartile mean (IQM, the mean of the middle 50 % of the
runs, §4.3) with a percentile bootstrap confidence interval over runs (§4.1), as their `rliable`
library does for one task (its stratified bootstrap resamples runs within each task).
"""

from typing import Callable

import numpy as np

STATISTICS = ("mean", "iqm")


def iqm(values, axis: int = 0) -> np.ndarray:
  """The interquartile mean along `axis`: the mean after cutting 25 % of the values at each end
  (`scipy.stats.trim_mean(values, 0.25)`, rliable's definition)."""
  from scipy import stats as scipy_stats  # 2 s to import: only where an IQM is taken

  return scipy_stats.trim_mean(np.asarray(values, dtype=float), 0.25, axis=axis)


def statistic_fn(name: str) -> Callable:
  """`"mean"` or `"iqm"` as a function of `(values, axis)`."""
  if name not in STATISTICS:
    raise ValueError(f"statistic: expected one of {list(STATISTICS)}, got {name!r}")
  return iqm if name == "iqm" else lambda values, axis=0: np.mean(values, axis=axis)


def bootstrap_interval(
  values,
  statistic: str = "mean",
  confidence: float = 0.95,
  reps: int = 2000,
  seed: int = 0,
) -> tuple:
  """`(low, high)`: the percentile bootstrap interval of `statistic` over the runs of `values`.

  `values` is `[runs]` or `[runs, points]` (e.g. one row per seed, one column per x of a
  learning curve); the runs (rows) are drawn with replacement `reps` times, the statistic is
  taken over each draw, and the interval is the `(1 - confidence) / 2` and `(1 + confidence) / 2`
  percentiles of those statistics, per point. Deterministic given `seed`.
  """
  values = np.asarray(values, dtype=float)
  fn = statistic_fn(statistic)
  if values.ndim not in (1, 2) or values.shape[0] < 2:
    raise ValueError(
      f"values: expected [runs] or [runs, points] with at least 2 runs, got shape {values.shape}"
    )
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence: expected a number in (0, 1), got {confidence!r}")
  if int(reps) != reps or reps < 1:
    raise ValueError(f"reps: expected an integer >= 1, got {reps!r}")
  runs = values.shape[0]
  draws = np.random.default_rng(seed).integers(0, runs, size=(int(reps), runs))
  resampled = fn(values[draws], axis=1)  # [reps] or [reps, points]
  tail = 100.0 * (1.0 - confidence) / 2.0
  low, high = np.percentile(resampled, [tail, 100.0 - tail], axis=0)
  return low, high
