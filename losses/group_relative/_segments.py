"""Segment statistics shared by the group-relative estimators (private).

Group statistics are computed on values shifted by a member of the group (its maximum) and with a
two-pass variance, so a group of bit-identical rewards gives centred values and a variance of
exactly zero in float32, hence an advantage of exactly zero (a one-pass float32 std of
``[0.35] * 4`` is about 1.6e-4, which divided into rounding noise blew advantages up about 4000x
in NeMo-RL, PR #4161). ``docs/group_relative.md`` has the derivation.
"""

from typing import NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks

Array = chex.Array

# What a group with one valid row gets: 0, or its raw value (mean 0, std 1).
SINGLETON_MODES = ("zero", "raw")


def check_rows(name_values, *, float_names=(), int_names=(), bool_names=()) -> None:
  """Checks that every named array is rank 1 and that all share one shape."""
  arrays = [v for _, v in name_values]
  chex.assert_rank(arrays, 1)
  chex.assert_equal_shape(arrays)
  for name, value in name_values:
    if name in float_names:
      chex.assert_type(value, float)
    elif name in int_names:
      chex.assert_type(value, int)
    elif name in bool_names:
      chex.assert_type(value, bool)


def valid_or_all(valid: Optional[Array], like: Array) -> Array:
  if valid is None:
    return jnp.ones(like.shape, dtype=bool)
  return valid


def safe_div(num: Array, den: Array) -> Array:
  """num / den where den > 0, else 0; differentiable without NaN in either branch."""
  ok = den > 0
  return jnp.where(ok, num / jnp.where(ok, den, 1), 0)


def safe_sqrt(x: Array) -> Array:
  ok = x > 0
  return jnp.where(ok, jnp.sqrt(jnp.where(ok, x, 1)), 0)


def with_nan(x: Array, poisoned: Array) -> Array:
  """``x`` with NaN where ``poisoned``: puts back a NaN input that a select (a one-row group's 0,
  a ``safe_*`` fallback) would otherwise turn into a plausible finite value."""
  return jnp.where(poisoned, jnp.asarray(jnp.nan, x.dtype), x)


class Moments(NamedTuple):
  centred: Array  # [B] x_i - mean_g; exactly 0 in an all-equal group; 0 on invalid rows
  count: Array  # [G] float32 number of valid rows
  mean: Array  # [G]
  sq_dev_sum: Array  # [G] sum of squared deviations from the mean


def shifted_moments(x: Array, group_ids: Array, num_groups: int, valid: Array) -> Moments:
  """Shifted two-pass segment moments.

  Each group is shifted by its own maximum first, so bit-identical values become exact zeros and
  the centred values and the variance come out exactly zero (a plain two-pass variance leaves the
  mean of ``[0.4] * 8`` one ulp away from 0.4 in float32). The shift only moves a constant, so it
  carries no gradient.
  """
  count = jax.ops.segment_sum(valid.astype(jnp.float32), group_ids, num_groups)
  ref = jax.ops.segment_max(jnp.where(valid, x, -jnp.inf), group_ids, num_groups)
  ref = jax.lax.stop_gradient(jnp.where(count > 0, ref, 0).astype(x.dtype))
  shifted = jnp.where(valid, x - ref[group_ids], 0)
  shifted_mean = safe_div(jax.ops.segment_sum(shifted, group_ids, num_groups), count)
  centred = jnp.where(valid, shifted - shifted_mean[group_ids], 0)
  sq_dev_sum = jax.ops.segment_sum(jnp.square(centred), group_ids, num_groups)
  return Moments(centred, count, ref + shifted_mean, sq_dev_sum)


def std_from_moments(m: Moments, ddof: int) -> Array:
  return safe_sqrt(safe_div(m.sq_dev_sum, m.count - ddof))


def check_segment_args(
  values: Array, group_ids: Array, num_groups: int, valid: Optional[Array]
) -> Array:
  _checks.integer("num_groups", num_groups)
  named = [("values", values), ("group_ids", group_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, float_names=("values",), int_names=("group_ids",), bool_names=("valid",))
  # A row whose group id is outside [0, num_groups) is an invalid row (an eager call raises).
  return valid_or_all(valid, values) & _checks.ids_in_range("group_ids", group_ids, num_groups)
