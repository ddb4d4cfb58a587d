"""Unlikeliness reward: correct but unlikely responses keep more of their reward.

He, Fried, Welleck, "Rewarding the Unlikely: Lifting GRPO Beyond Distribution Sharpening",
arXiv 2506.02355 (EMNLP 2025). GRPO has a rank bias: it reinforces the correct responses the
policy already finds likely and neglects rare correct ones, which sharpens the distribution and
hurts pass@N at large N. The unlikeliness reward scales each reward down by the response's
likelihood rank within its group before the usual GRPO normalisation.

Equation numbers could not be read: the stored copies of the paper reachable here give its
abstract and summaries only. The rule follows the authors' code,
``AndreHe02/rewarding-unlikely-release@ca1cff0``,
``verl/trainer/ppo/ray_lean_trainer.py::RayLeanTrainer._compute_advantages`` (and
``rank_penalty=0.25`` in ``examples/lean/grpo.sh``). Batch-level.
"""

from typing import NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import (
  check_rows,
  check_segment_args,
  safe_div,
  valid_or_all,
  with_nan,
)
from hrljax.losses.group_relative.grpo import grpo_advantages

Array = chex.Array


class UnlikelinessAdvantages(NamedTuple):
  advantages: Array  # [B] under stop_gradient; 0 on invalid rows
  shaped_rewards: Array  # [B] R' = R * (1 - beta * rank / G); 0 on invalid rows
  ranks: Array  # int32 [B] likelihood rank in the group, 0 = least likely; 0 on invalid rows
  log_likelihood: Array  # [B] masked mean token log-prob under pi_old; 0 on invalid rows


def group_ranks(
  values: Array, group_ids: Array, num_groups: int, valid: Optional[Array] = None
) -> Array:
  """Ascending rank of each valid row's value within its group (batch-level).

  ``rank_i = #{j in g(i), valid: v_j < v_i, or v_j == v_i and j < i}``: the smallest value gets
  rank 0, and ties are broken by row position (the earlier row gets the lower rank), which is
  ``argsort(argsort(v))`` with a stable sort. ``-0.0`` ranks as ``0.0``; NaN ranks above every
  number. One ``lax.sort`` of the batch on (group, value, row) keys: ``O(B log B)`` work,
  ``O(B)`` memory, ragged groups in any order.

  Args:
    values: ``[B]`` (float or int).
    group_ids: int ``[B]`` in ``[0, num_groups)``; an eager call raises for an id outside,
      under jit such a row is invalid.
    num_groups: static number of groups.
    valid: optional bool ``[B]``; invalid rows are ranked in no group and get 0.

  Returns:
    int32 ``[B]``.
  """
  _checks.integer("num_groups", num_groups)
  named = [("values", values), ("group_ids", group_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, int_names=("group_ids",), bool_names=("valid",))
  valid = valid_or_all(valid, group_ids) & _checks.ids_in_range("group_ids", group_ids, num_groups)
  n = values.shape[0]
  bucket = jnp.where(valid, group_ids, num_groups).astype(jnp.int32)
  (key,) = _masking.zero_masked(valid, values)
  key = key + jnp.zeros((), key.dtype)  # -0.0 + 0.0 is +0.0: one key per number
  row = jnp.arange(n, dtype=jnp.int32)
  sorted_bucket, _, _, perm = jax.lax.sort((bucket, key, row, row), num_keys=3)
  position = jnp.arange(n, dtype=jnp.int32)
  first = jax.ops.segment_min(position, sorted_bucket, num_groups + 1)[sorted_bucket]
  rank = jnp.zeros((n,), jnp.int32).at[perm].set(position - first)
  return jnp.where(valid, rank, 0)


def unlikeliness_advantages(
  rewards: Array,
  old_logp: Array,
  mask: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  beta: float = 0.25,
  normalize: bool = True,
  scale: str = "group",
  eps: float = 1e-6,
  ddof: int = 1,
  singleton_mode: str = "zero",
  std_floor: float = 0.0,
) -> UnlikelinessAdvantages:
  """GRPO advantages of the unlikeliness-shaped reward ``R' = R * (1 - beta * rank / G)``.

  ``l_i = sum_t m_it old_logp_it / sum_t m_it`` is the mean token log-prob of response ``i``
  under the behaviour policy (a row with no token counts as ``l = 0``); ``rank_i`` is its rank
  in its group by ``l`` ascending (:func:`group_ranks`: the *least* likely response has rank 0
  and keeps its full reward, the most likely has rank ``G - 1`` and keeps
  ``1 - beta (G - 1) / G`` of it; equal ``l`` are ranked by row position); ``G`` is the
  group's number of valid rows. Then ``A = grpo_advantages(R')`` (group mean and std of the
  *shaped* rewards), or ``A = R'`` with ``normalize=False``. A NaN ``l`` (a NaN log-prob at a
  read token) makes ``R'`` NaN, so it reaches the group's advantages; a -inf log-prob is a
  response of likelihood 0, the least likely.

  Only correct responses (``R > 0``) are affected for a 0/1 reward; a shift of the rewards is
  not an invariance (the factor multiplies the reward, so the zero of the scale matters).

  A third-party port ranks the other way (most likely = rank 0) and flips the sign of the
  factor, which rewards the likely responses: that reading is not followed here.

  Deviations from the authors' code: ``torch.argsort`` makes no promise on ties (the order is
  deterministic here, by row); a row with no token is ``0 / 0 = NaN`` there (it sorts last,
  i.e. most likely) and ``l = 0`` here (also most likely unless some mean log-prob is
  positive). The authors' normalisation is verl GRPO's (unbiased std, ``eps = 1e-6``, a
  one-response group gets mean 0 and std 1): ``singleton_mode="raw"`` reproduces it.

  Args:
    rewards: float ``[B]`` outcome rewards.
    old_logp: float ``[B, T]`` log-probs of the sampled tokens under the behaviour policy.
    mask: ``[B, T]`` response mask (bool or 0/1); masked tokens are never read.
    group_ids: int ``[B]`` in ``[0, num_groups)``.
    num_groups: static number of groups.
    valid: optional bool ``[B]``; invalid rows are in no group (no rank, no statistic) and
      get 0 everywhere.
    beta: the rank penalty ``beta_rank`` in ``[0, 1]`` (0.25 in the authors' script; at most
      1 so the factor stays positive).
    normalize: apply :func:`grpo_advantages` to ``R'`` (default) or return ``R'`` itself.
    scale: see :func:`grpo_advantages`.
    eps: see :func:`grpo_advantages`.
    ddof: see :func:`grpo_advantages`.
    singleton_mode: see :func:`grpo_advantages` (``"raw"`` for the authors' code).
    std_floor: see :func:`grpo_advantages`.

  Returns:
    ``UnlikelinessAdvantages(advantages, shaped_rewards, ranks, log_likelihood)``.
  """
  _checks.number("beta", beta, low=0.0, high=1.0)
  _checks.boolean("normalize", normalize)
  valid = check_segment_args(rewards, group_ids, num_groups, valid)
  chex.assert_rank([old_logp, mask], 2)
  chex.assert_equal_shape([old_logp, mask])
  chex.assert_type(old_logp, float)
  chex.assert_equal_shape_prefix([old_logp, rewards], 1)
  read = (jnp.asarray(mask) != 0) & valid[:, None]
  (old_logp,) = _masking.zero_masked(read, old_logp)
  m = read.astype(old_logp.dtype)
  likelihood = safe_div(jnp.sum(old_logp * m, axis=1), jnp.sum(m, axis=1))
  likelihood = jax.lax.stop_gradient(jnp.where(valid, likelihood, 0))

  ranks = group_ranks(likelihood, group_ids, num_groups, valid)
  size = jax.ops.segment_sum(valid.astype(rewards.dtype), group_ids, num_groups)[group_ids]
  fraction = safe_div(ranks.astype(rewards.dtype), size)
  (r,) = _masking.zero_masked(valid, rewards)
  shaped = with_nan(r * (1 - beta * fraction), jnp.isnan(likelihood))  # no rank without l
  shaped = jax.lax.stop_gradient(jnp.where(valid, shaped, 0))
  if normalize:
    advantages = grpo_advantages(
      shaped,
      group_ids,
      num_groups,
      valid=valid,
      scale=scale,
      eps=eps,
      ddof=ddof,
      singleton_mode=singleton_mode,
      std_floor=std_floor,
    )
  else:
    advantages = shaped
  return UnlikelinessAdvantages(advantages, shaped, ranks, likelihood)
