"""Segment statistics and group normalisation: the core of every group-relative estimator.

Batch-level: a function takes the flat batch, ``group_ids`` (int ``[B]`` in ``[0, num_groups)``,
any row order, ragged groups), a static ``num_groups`` and an optional ``valid`` mask (invalid rows
enter no statistic and get 0).
"""

from typing import Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import (
  SINGLETON_MODES,
  check_rows,
  check_segment_args,
  safe_div,
  shifted_moments,
  std_from_moments,
  valid_or_all,
  with_nan,
)

Array = chex.Array

_SCALES = ("group", "batch", "none")


def segment_count(group_ids: Array, num_groups: int, valid: Optional[Array] = None) -> Array:
  """Number of valid rows per group (batch-level).

  Args:
    group_ids: int ``[B]`` in ``[0, num_groups)``.
    num_groups: static number of groups.
    valid: optional bool ``[B]``; invalid rows are not counted.

  Returns:
    int32 ``[num_groups]``.
  """
  _checks.integer("num_groups", num_groups)
  named = [("group_ids", group_ids)] + ([("valid", valid)] if valid is not None else [])
  check_rows(named, int_names=("group_ids",), bool_names=("valid",))
  valid = valid_or_all(valid, group_ids) & _checks.ids_in_range("group_ids", group_ids, num_groups)
  return jax.ops.segment_sum(valid.astype(jnp.int32), group_ids, num_groups)


def segment_mean(
  values: Array, group_ids: Array, num_groups: int, valid: Optional[Array] = None
) -> Array:
  """Mean of the valid rows of each group (batch-level); empty groups give 0.

  Computed on values shifted by the group maximum, so an all-equal group's mean is exactly that
  value.

  Args:
    values: float ``[B]``.
    group_ids: int ``[B]`` in ``[0, num_groups)``.
    num_groups: static number of groups.
    valid: optional bool ``[B]``.

  Returns:
    ``[num_groups]``, dtype of ``values``.
  """
  valid = check_segment_args(values, group_ids, num_groups, valid)
  return shifted_moments(values, group_ids, num_groups, valid).mean


def segment_std(
  values: Array, group_ids: Array, num_groups: int, *, ddof: int = 1, valid: Optional[Array] = None
) -> Array:
  """Standard deviation of the valid rows of each group (batch-level).

  Shifted two-pass estimator (``docs/group_relative.md``): exactly 0 for bit-identical values.
  Groups with ``count <= ddof`` (e.g. singletons with the unbiased estimator) give 0 instead of
  NaN/inf.
  A group with a NaN or +-Inf among its valid values gives NaN, whatever its size (its spread
  is undefined; without this, the ``count <= ddof`` fallback and the square root's guard would
  report a one-row group with a NaN, or a group with an Inf, as spread 0). Invalid rows'
  values are ignored, NaN or not.

  Args:
    values: float ``[B]``.
    group_ids: int ``[B]`` in ``[0, num_groups)``.
    num_groups: static number of groups.
    ddof: 1 for the unbiased (Bessel) std used by verl, TRL, OpenRLHF, Tunix, Trinity GRPO;
      0 for the population std (Trinity REC, DAPO's filter).
    valid: optional bool ``[B]``.

  Returns:
    ``[num_groups]``, dtype of ``values``.
  """
  _checks.integer("ddof", ddof, low=0)
  valid = check_segment_args(values, group_ids, num_groups, valid)
  std = std_from_moments(shifted_moments(values, group_ids, num_groups, valid), ddof)
  non_finite = jax.ops.segment_sum(
    (valid & ~jnp.isfinite(values)).astype(jnp.int32), group_ids, num_groups
  )
  return with_nan(std, non_finite > 0)


def contiguous_group_ids(num_groups: int, group_size: int) -> Array:
  """Group ids ``[num_groups * group_size]`` of the dense row-major ``[P, G]`` layout.

  ``x.reshape(-1)`` of a ``[num_groups, group_size]`` array (TRL, OpenRLHF, oat and Tunix layout)
  together with these ids feeds any segment function of this module.
  """
  _checks.integer("num_groups", num_groups)
  _checks.integer("group_size", group_size)
  return jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), group_size)


def group_normalize(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  scale: str = "group",
  eps: float = 1e-6,
  ddof: int = 1,
  singleton_mode: str = "zero",
  std_floor: float = 0.0,
) -> Array:
  """Group-relative normalisation ``(r_i - mean_g) / (max(std, std_floor) + eps)`` (batch-level).

  The core of GRPO (Shao et al., "DeepSeekMath", arXiv 2402.03300, section 4.1.2, outcome
  supervision) and of its variants. Differentiable: this primitive does not stop gradients (the
  estimators built on it do).

  Args:
    rewards: float ``[B]``.
    group_ids: int ``[B]`` in ``[0, num_groups)``; any row order, ragged groups.
    num_groups: static number of groups.
    valid: optional bool ``[B]``. Invalid rows enter no statistic and get 0.
    scale: ``"group"``: divide by the group std (GRPO, verl, TRL default); ``"batch"``: keep
      the group mean but divide by the std of all valid rewards of the batch (TRL
      ``scale_rewards="batch"``, Trinity ``std_cal_level="batch"``, "PPO-Lite"
      arXiv 2508.08221); ``"none"``: no division (Dr. GRPO, TRL ``scale_rewards="none"``).
    eps: added to the std. verl/Trinity/Tunix/verl-agent 1e-6 (default), TRL 1e-4, OpenRLHF
      1e-9, oat 1e-8. Unused with ``scale="none"``.
    ddof: std estimator; 1 (unbiased, every framework's GRPO) or 0 (population).
    singleton_mode: what a group with exactly one valid row gets. ``"zero"`` (default, safe;
      TRL's result, Tunix RLOO); ``"raw"``: the group mean is taken as 0 and the std as 1, as
      verl ``grpo`` and Trinity do, giving ``r / (1 + eps)`` (``r`` with ``scale="none"``, and
      ``r / (batch_std + eps)`` with ``scale="batch"``).
    std_floor: the std is floored at this value before ``eps`` is added (the NeMo-RL PR #4161
      remedy; 1e-3 there). Default 0.

  Returns:
    ``[B]`` advantages, dtype of ``rewards``. Bit-identical rewards in a group give exactly 0; a
    zero denominator (all-equal group with ``eps=0``) gives 0, never NaN.

  Deviation: verl's vectorised path floors the *variance* at eps and then also adds eps
  (``sqrt(max(var, eps)) + eps``); use ``std_floor=sqrt(eps)`` to approximate it.
  """
  _checks.choice("scale", scale, _SCALES)
  _checks.choice("singleton_mode", singleton_mode, SINGLETON_MODES)
  _checks.nonnegative("eps", eps)
  _checks.nonnegative("std_floor", std_floor)
  _checks.integer("ddof", ddof, low=0)
  valid = check_segment_args(rewards, group_ids, num_groups, valid)

  moments = shifted_moments(rewards, group_ids, num_groups, valid)
  if scale == "group":
    std = std_from_moments(moments, ddof)[group_ids]
  elif scale == "batch":
    batch = shifted_moments(rewards, jnp.zeros_like(group_ids), 1, valid)
    std = jnp.broadcast_to(std_from_moments(batch, ddof), rewards.shape)
  if scale == "none":
    advantages = moments.centred
    singleton_denominator = jnp.ones_like(rewards)
  else:
    denominator = jnp.maximum(std, std_floor) + eps
    advantages = safe_div(moments.centred, denominator)
    singleton_denominator = jnp.ones_like(rewards) + eps if scale == "group" else denominator

  singleton = moments.count[group_ids] == 1
  if singleton_mode == "raw":
    singleton_value = safe_div(rewards, singleton_denominator)
  else:
    singleton_value = jnp.zeros_like(rewards)
  advantages = jnp.where(singleton, singleton_value, advantages)
  return jnp.where(valid, advantages, 0).astype(rewards.dtype)


def group_normalize_dense(rewards: Array, *, valid: Optional[Array] = None, **kwargs) -> Array:
  """:func:`group_normalize` on the dense ``[num_groups, group_size]`` layout (batch-level).

  Row ``p`` of ``rewards`` is one group. ``valid`` (optional) is bool ``[P, G]``. Keyword
  arguments are those of :func:`group_normalize`. Returns ``[P, G]``.
  """
  chex.assert_rank(rewards, 2)
  if valid is not None:
    chex.assert_equal_shape([rewards, valid])
    valid = valid.reshape(-1)
  num_groups, group_size = rewards.shape
  ids = contiguous_group_ids(num_groups, group_size)
  flat = group_normalize(rewards.reshape(-1), ids, num_groups, valid=valid, **kwargs)
  return flat.reshape(rewards.shape)


def broadcast_to_tokens(advantages: Array, mask: Array) -> Array:
  """Sequence advantages ``[B]`` to token advantages ``[B, T]``: ``A[:, None] * mask``, exactly 0
  off the mask (the advantage of a row with no token is not read)."""
  chex.assert_rank([advantages, mask], [1, 2])
  chex.assert_equal_shape_prefix([advantages, mask], 1)
  (tokens,) = _masking.zero_masked(mask, jnp.broadcast_to(advantages[:, None], mask.shape))
  return tokens * mask.astype(advantages.dtype)
