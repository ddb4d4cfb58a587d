"""GRPO, Dr. GRPO and RLOO advantages, and DAPO's group filter and length penalty.

Outcome supervision: one reward per response (or episode), compared with the other responses of
its group. Batch-level (see ``normalize``). Combine the advantages with a clipped surrogate, a KL
estimator and an aggregation mode from ``hrljax.losses.policy_gradient``.
"""

from typing import Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks
from hrljax.losses.group_relative._segments import (
  SINGLETON_MODES,
  check_segment_args,
  safe_div,
  shifted_moments,
)
from hrljax.losses.group_relative.normalize import group_normalize

Array = chex.Array


def grpo_advantages(
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
  """GRPO outcome-supervision advantages ``(r_i - mean_g) / (std_g + eps)`` (batch-level).

  Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
  Models", arXiv 2402.03300, section 4.1.2. The paper divides by ``std``; implementations use the
  unbiased std plus ``eps=1e-6`` (verl), which are the defaults here. Broadcast the result to the
  response tokens with :func:`broadcast_to_tokens`.

  Arguments are those of :func:`group_normalize`; the result is under ``stop_gradient``.
  For verl parity pass ``singleton_mode="raw"``; for TRL, ``eps=1e-4``.
  """
  return jax.lax.stop_gradient(
    group_normalize(
      rewards,
      group_ids,
      num_groups,
      valid=valid,
      scale=scale,
      eps=eps,
      ddof=ddof,
      singleton_mode=singleton_mode,
      std_floor=std_floor,
    )
  )


def dr_grpo_advantages(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  singleton_mode: str = "zero",
) -> Array:
  """Dr. GRPO advantages ``r_i - mean_g``, without the std division (batch-level).

  Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv 2503.20783
  (the std term biases updates by question difficulty). Pair with the constant-
  normaliser aggregation of ``hrljax.losses.policy_gradient``. Under ``stop_gradient``.
  ``singleton_mode="raw"`` gives ``r`` to a singleton group (verl / OpenRLHF parity).
  """
  return grpo_advantages(
    rewards, group_ids, num_groups, valid=valid, scale="none", singleton_mode=singleton_mode
  )


def rloo_advantages(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  singleton_mode: str = "zero",
) -> Array:
  """REINFORCE leave-one-out advantages ``r_i - mean_{j != i} r_j`` (batch-level).

  Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from
  Human Feedback in LLMs", arXiv 2402.14740 (Kool et al. 2019 baseline). Computed as
  ``n / (n - 1) * (r_i - mean_g)`` (verl ``rloo``), which is exactly 0 in an all-equal group.

  Args:
    rewards, group_ids, num_groups, valid: as in :func:`group_normalize`.
    singleton_mode: a one-row group has no leave-one-out baseline. ``"zero"`` (default; Tunix)
      or ``"raw"`` (baseline 0, advantage ``r``; verl).

  Returns:
    ``[B]`` under ``stop_gradient``.
  """
  _checks.choice("singleton_mode", singleton_mode, SINGLETON_MODES)
  valid = check_segment_args(rewards, group_ids, num_groups, valid)
  moments = shifted_moments(rewards, group_ids, num_groups, valid)
  n = moments.count[group_ids]
  advantages = safe_div(n * moments.centred, n - 1)
  singleton_value = rewards if singleton_mode == "raw" else jnp.zeros_like(rewards)
  advantages = jnp.where(n == 1, singleton_value, advantages)
  return jax.lax.stop_gradient(jnp.where(valid, advantages, 0).astype(rewards.dtype))


OUTCOME_ESTIMATORS = ("grpo", "dr_grpo", "rloo")


def outcome_advantages(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  estimator: str = "grpo",
  *,
  valid: Optional[Array] = None,
  scale: str = "group",
  eps: float = 1e-6,
  singleton_mode: str = "zero",
) -> Array:
  """The outcome advantages of ``estimator``, one of :data:`OUTCOME_ESTIMATORS` (batch-level).

  ``"grpo"`` is :func:`grpo_advantages` (with ``scale`` and ``eps``), ``"dr_grpo"``
  :func:`dr_grpo_advantages`, ``"rloo"`` :func:`rloo_advantages`; ``scale`` and ``eps`` apply to
  GRPO only. The switch agents expose as their ``estimator`` field. Under ``stop_gradient``.
  """
  _checks.choice("estimator", estimator, OUTCOME_ESTIMATORS)
  if estimator == "grpo":
    return grpo_advantages(
      rewards,
      group_ids,
      num_groups,
      valid=valid,
      scale=scale,
      eps=eps,
      singleton_mode=singleton_mode,
    )
  if estimator == "dr_grpo":
    return dr_grpo_advantages(
      rewards, group_ids, num_groups, valid=valid, singleton_mode=singleton_mode
    )
  return rloo_advantages(rewards, group_ids, num_groups, valid=valid, singleton_mode=singleton_mode)


_FILTER_RULES = ("std", "range")


def informative_group_mask(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  rule: str = "std",
  reward_range: Tuple[float, float] = (0.0, 1.0),
  keep_singletons: bool = True,
) -> Array:
  """DAPO dynamic-sampling filter: which groups carry a learning signal (batch-level).

  Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv 2503.14476,
  section 3.2, Eq. 11 (keep a prompt iff ``0 < #correct < G``). Dynamic sampling itself
  (generate more until the batch is full) is a data-pipeline step; this returns the keep mask
  and the caller resamples.

  Args:
    rewards: float ``[B]`` (the metric that is filtered on: accuracy, score, ...).
    group_ids: int ``[B]``.
    num_groups: static number of groups.
    valid: optional bool ``[B]``; invalid rows are ignored.
    rule: ``"std"`` (verl DAPO recipe): keep iff the group's rewards are not all equal
      (population std > 0, computed exactly by the shifted estimator); ``"range"``
      (OpenRLHF ``dynamic_filtering_reward_range``): keep iff ``lo < mean_g < hi`` with
      fixed bounds (a "minmax" filter; OpenRLHF compares with the configured
      bounds, not the group's own min and max).
    reward_range: ``(lo, hi)`` for ``rule="range"``.
    keep_singletons: with ``rule="std"``, keep one-row groups (the verl recipe does).

  Returns:
    bool ``[num_groups]``. Groups with no valid row are never kept. Row mask:
    ``keep[group_ids]``.
  """
  _checks.choice("rule", rule, _FILTER_RULES)
  valid = check_segment_args(rewards, group_ids, num_groups, valid)
  moments = shifted_moments(rewards, group_ids, num_groups, valid)
  non_empty = moments.count > 0
  if rule == "std":
    keep = moments.sq_dev_sum > 0
    if keep_singletons:
      keep = keep | (moments.count == 1)
  else:
    if len(reward_range) != 2:
      _checks.fail("reward_range", "a pair (lo, hi)", reward_range)
    lo, hi = reward_range
    _checks.number("reward_range[0]", lo, finite=False)
    _checks.number("reward_range[1]", hi, finite=False)
    keep = (moments.mean > lo) & (moments.mean < hi)
  return keep & non_empty


def overlong_penalty(
  lengths: Array,
  *,
  max_len: int = 20480,
  cache_len: int = 4096,
  factor: float = 1.0,
  hard_branch: bool = True,
) -> Array:
  """DAPO soft overlong punishment ``R_len(|y|)``, added to the reward before the advantage.

  Yu et al., DAPO, arXiv 2503.14476, section 3.4, Eq. 13. With ``s = max_len - cache_len``: 0 for
  ``|y| <= s``; ``(s - |y|) / cache_len`` for ``s < |y| <= max_len``; -1 beyond ``max_len``.
  Every branch is multiplied by ``factor`` (Tunix / verl ``overlong_buffer.penalty_factor``).
  Per-example (elementwise).

  Args:
    lengths: int or float ``[...]`` response lengths in tokens.
    max_len: ``L_max`` (paper and Tunix default 20480).
    cache_len: ``L_cache``, the soft buffer (default 4096); ``0 < cache_len <= max_len``.
    factor: penalty scale (default 1).
    hard_branch: ``True`` is the paper (clamped at -1 beyond ``max_len``). ``False`` is verl's
      ``min(-(|y| - s) / L_cache * factor, 0)`` without the -1 branch (verl truncates
      generation at ``max_len`` so never reaches it).

  Returns:
    float32 penalties, shape of ``lengths`` (<= 0).
  """
  _checks.integer("max_len", max_len)
  _checks.integer("cache_len", cache_len)
  if cache_len > max_len:
    _checks.fail("cache_len", f"<= max_len={max_len}", cache_len)
  _checks.nonnegative("factor", factor)
  lengths = jnp.asarray(lengths).astype(jnp.float32)
  start = float(max_len - cache_len)
  penalty = jnp.minimum((start - lengths) / cache_len, 0.0)
  if hard_branch:
    penalty = jnp.where(lengths > max_len, -1.0, penalty)
  return penalty * factor
