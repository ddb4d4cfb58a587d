"""The interquartile mean and the bootstrap interval against direct computations (scipy is imported
by the tests that use it: at module level, every test worker would pay about 2 s for it while
collecting)."""

import numpy as np
import pytest

from hrljax import stats


def test_iqm_is_the_mean_of_the_middle_half():
  from scipy import stats as scipy_stats

  assert stats.iqm(np.arange(1, 9)) == 4.5  # mean of 3, 4, 5, 6
  values = np.random.default_rng(0).normal(size=(12, 3))
  np.testing.assert_allclose(stats.iqm(values), scipy_stats.trim_mean(values, 0.25, axis=0))


def reference_interval(values, statistic, confidence, reps, seed):
  """The percentile bootstrap written out draw by draw (the same draws as the library's)."""
  from scipy import stats as scipy_stats

  if statistic == "iqm":
    fn = lambda v: scipy_stats.trim_mean(v, 0.25, axis=0)  # noqa: E731
  else:
    fn = lambda v: np.mean(v, axis=0)  # noqa: E731
  draws = np.random.default_rng(seed).integers(0, len(values), size=(reps, len(values)))
  resampled = [fn(values[row]) for row in draws]
  tail = 50.0 * (1.0 - confidence)
  return np.percentile(resampled, tail, axis=0), np.percentile(resampled, 100 - tail, axis=0)


@pytest.mark.parametrize("statistic", ["mean", "iqm"])
def test_bootstrap_interval_equals_the_draw_by_draw_computation(statistic):
  values = np.random.default_rng(1).normal(size=(10, 4))
  low, high = stats.bootstrap_interval(values, statistic, 0.9, reps=300, seed=3)
  want_low, want_high = reference_interval(values, statistic, 0.9, 300, 3)
  np.testing.assert_allclose(low, want_low)
  np.testing.assert_allclose(high, want_high)


def test_bootstrap_interval_of_the_mean_matches_scipy_s_percentile_bootstrap_in_width():
  """Different draws, same method: scipy's percentile bootstrap gives an interval of about the
  same width (5 % at 20,000 resamples)."""
  from scipy import stats as scipy_stats

  values = np.random.default_rng(2).normal(size=40)
  low, high = stats.bootstrap_interval(values, "mean", 0.95, reps=20_000)
  ref = scipy_stats.bootstrap(
    (values,),
    np.mean,
    confidence_level=0.95,
    n_resamples=20_000,
    method="percentile",
    random_state=np.random.default_rng(4),
  ).confidence_interval
  assert abs((high - low) - (ref.high - ref.low)) < 0.05 * (ref.high - ref.low)
  assert low < values.mean() < high


@pytest.mark.parametrize(
  "kwargs, message",
  [
    (dict(values=[1.0]), "values: expected .* at least 2 runs, got shape"),
    (dict(values=[1.0, 2.0], confidence=1.5), "confidence: expected a number in"),
    (dict(values=[1.0, 2.0], reps=0), "reps: expected an integer >= 1"),
    (dict(values=[1.0, 2.0], statistic="median"), "statistic: expected one of"),
  ],
)
def test_bad_arguments_name_themselves(kwargs, message):
  with pytest.raises(ValueError, match=message):
    stats.bootstrap_interval(**kwargs)
