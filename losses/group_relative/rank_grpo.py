"""Rank-GRPO: GRPO whose unit is one rank (item) of a generated recommendation list.

Zhu, Steck, Liang, He, Ostuni, Li, Kallus, "Rank-GRPO: Training LLM-based Conversational
Recommender Systems with Reinforcement Learning" (ConvRec-R1 in its later versions), arXiv
2510.20150. A response is a list of ``N`` items; the rank ``k`` is an action with its own reward,
advantage and importance ratio, between a token (too fine) and the whole list (too coarse):

* causal rank reward: the item at rank ``k`` is credited with its own relevance and the
  relevance below it, never with the items above it (the paper's ``DCG@k:N``);
* advantage: the rank-``k`` rewards z-scored over the group, separately for every ``k``;
* importance ratio: the geometric mean of the item's token probability ratios,
  ``w_k = exp(mean_{t in item k} (log pi_theta - log pi_old))``, clipped as in PPO.

What was read: the abstract and summaries of the paper (the rank as the unit, the non-causal
credit removed, the geometric-mean ratio, and the name ``DCG@k:N`` of the reward), not its
numbered equations; the formulas follow the authors' code, ``yaochenzhu/Rank-GRPO@0808d82``:
``libs/reward_funcs.py`` (``reward_func_log_decay``: ``DCG@k:N``; ``reward_func_exp_inf``: the
rank's own hit), ``libs/metrics_align.py::_discounts``, ``libs/trl/rank_grpo_trainer.py``
(per-rank group normalisation in ``_generate_and_score_completions``, the ``"item"``
importance-sampling level and the clipped loss in ``_compute_loss``) and ``train_rank_grpo.py``
(``epsilon=0.06``, ``epsilon_high=0.08``, ``reward_func`` default ``exp_inf``). Batch-level.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import (
  check_rows,
  safe_div,
  valid_or_all,
  with_nan,
)
from hrljax.losses.group_relative.normalize import group_normalize
from hrljax.losses.policy_gradient import AGGREGATION_MODES, aggregate

Array = chex.Array

RANK_REWARDS = ("dcg", "hit")
RANK_AGGREGATIONS = AGGREGATION_MODES + ("rank_mean",)


def rank_grpo_rewards(relevance: Array, *, reward: str = "dcg") -> Array:
  """Causal per-rank rewards of ranked lists (per-example; ``[B, N] -> [B, N]``).

  With ranks ``k = 1..N`` and ``rel_k`` the relevance (hit) of the item at rank ``k``:

  * ``"dcg"`` (default; the paper's ``DCG@k:N``, the authors' ``log_decay``):
    ``r_k = sum_{j >= k} rel_j / log2(j + 1)``, the list's DCG minus the part earned above
    rank ``k``;
  * ``"hit"`` (the authors' ``exp_inf``, the default of their training script): ``r_k = rel_k``,
    only the rank's own relevance (the limit of an infinitely fast decay).

  Args:
    relevance: float ``[B, N]`` relevance of each rank (0/1 hits in the paper; a missing or
      unparsable item is 0).
    reward: ``"dcg"`` or ``"hit"``.

  Returns:
    float ``[B, N]``.
  """
  _checks.choice("reward", reward, RANK_REWARDS)
  chex.assert_rank(relevance, 2)
  chex.assert_type(relevance, float)
  if reward == "hit":
    return relevance
  ranks = jnp.arange(1, relevance.shape[1] + 1, dtype=relevance.dtype)
  gains = relevance / jnp.log2(ranks + 1)[None, :]
  return jnp.flip(jnp.cumsum(jnp.flip(gains, axis=1), axis=1), axis=1)


def rank_grpo_advantages(
  rank_rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  scale: str = "group",
  eps: float = 1e-4,
  ddof: int = 1,
  singleton_mode: str = "zero",
) -> Array:
  """Per-rank group-relative advantages ``(r_ik - mean_{g,k}) / (std_{g,k} + eps)`` (batch-level).

  Each rank ``k`` is normalised separately over the valid rows of the group (rank ``k`` of one
  list is compared with rank ``k`` of the other lists for the same prompt), as the authors'
  trainer does (unbiased std, ``eps = 1e-4``, TRL's).

  Args:
    rank_rewards: float ``[B, N]`` (:func:`rank_grpo_rewards`).
    group_ids: int ``[B]`` in ``[0, num_groups)``.
    num_groups: static number of groups.
    valid: optional bool ``[B]``; invalid rows enter no statistic and get 0 at every rank.
    scale: ``"group"`` (default) or ``"none"`` (TRL ``scale_rewards=False``), or ``"batch"``
      (the std of all valid rows at that rank); see :func:`group_normalize`.
    eps: added to the std (1e-4, the authors').
    ddof: std estimator (1, unbiased, the authors').
    singleton_mode: a one-row group: ``"zero"`` (default) or ``"raw"``. The authors' torch
      std of one value is NaN.

  Returns:
    float ``[B, N]`` under ``stop_gradient``; NaN where a valid row's reward is NaN.
  """
  _checks.integer("num_groups", num_groups)
  chex.assert_rank(rank_rewards, 2)
  chex.assert_type(rank_rewards, float)
  named = [("group_ids", group_ids)] + ([("valid", valid)] if valid is not None else [])
  check_rows(named, int_names=("group_ids",), bool_names=("valid",))
  chex.assert_equal_shape_prefix([rank_rewards, group_ids], 1)
  valid = valid_or_all(valid, group_ids) & _checks.ids_in_range("group_ids", group_ids, num_groups)
  num_ranks = rank_rewards.shape[1]
  ids = jnp.where(valid, group_ids, 0)[:, None] * num_ranks + jnp.arange(num_ranks)[None, :]
  flat_valid = jnp.broadcast_to(valid[:, None], rank_rewards.shape).reshape(-1)
  advantages = group_normalize(
    rank_rewards.reshape(-1),
    ids.reshape(-1).astype(jnp.int32),
    num_groups * num_ranks,
    valid=flat_valid,
    scale=scale,
    eps=eps,
    ddof=ddof,
    singleton_mode=singleton_mode,
  )
  # A NaN reward stays NaN (a one-row group's 0 would hide it).
  advantages = with_nan(advantages, flat_valid & jnp.isnan(rank_rewards.reshape(-1)))
  return jax.lax.stop_gradient(advantages.reshape(rank_rewards.shape))


class RankGrpoExtras(NamedTuple):
  per_token_loss: Array  # [B, T] the rank's loss on each of its tokens; 0 off the mask
  per_rank_loss: Array  # [B, N] -min(w A, clip(w) A); 0 for ranks without a token
  ratio: Array  # [B, N] detached w_k = exp(mean log-ratio over the item's tokens); 1 if empty
  rank_tokens: Array  # [B, N] number of read tokens of each rank
  clipped: Array  # [B, N] float: the clipped branch is the active one (no gradient flows)
  clip_fraction: Array  # scalar fraction of ranks with tokens whose clipped branch is active
  loss_sum: Array  # scalar numerator of the aggregation
  denominator: Array  # scalar denominator of the aggregation


def rank_grpo_loss(
  logp: Array,
  old_logp: Array,
  mask: Array,
  item_ids: Array,
  advantages: Array,
  *,
  epsilon: float = 0.06,
  epsilon_high: Optional[float] = 0.08,
  log_ratio_clamp: Optional[float] = 20.0,
  aggregation: str = "token_mean",
) -> Tuple[Array, RankGrpoExtras]:
  """Rank-GRPO clipped surrogate with a rank-level importance ratio (batch-level, ``[B, T]``).

  For rank ``k`` of row ``i``, with ``S_ik`` its read tokens:
  ``w_ik = exp(mean_{t in S_ik} (logp_t - old_logp_t))`` and
  ``l_ik = -min(w_ik A_ik, clip(w_ik, 1 - epsilon, 1 + epsilon_high) A_ik)``.
  As in the authors' trainer, every token of the item carries its rank's loss and the token
  losses are aggregated (``aggregation``, a mode of ``policy_gradient.aggregate``; the
  authors' trainer reads TRL's ``loss_type``, which their script leaves at the library
  default). ``"rank_mean"`` instead averages ``l_ik`` over the (row, rank) pairs that have a
  token, so every rank counts once whatever its length (the reading of the rank as the unit;
  not checked against the paper's objective).

  Not offered, as not specific to Rank-GRPO: the authors' overflow bin (tokens past the
  ``N``-th item, with their own penalty), the EOS length shaping, TRL's ``delta`` cap and the
  k3 KL to the reference policy (``beta = 1e-3`` in their script; add
  ``policy_gradient.kl_divergence`` with the same mask).

  Args:
    logp: float ``[B, T]`` log-probs of the sampled tokens under pi_theta.
    old_logp: float ``[B, T]`` the same under the behaviour policy.
    mask: ``[B, T]`` (bool or 0/1): the item tokens that enter the loss (the authors'
      ``item_token_mask``, which leaves out the separators between items). Masked tokens are
      never read (NaN or -inf there change nothing, gradients included).
    item_ids: int ``[B, T]``: the rank (0-based, in ``[0, N)``) of the item each read token
      belongs to; ignored off the mask. An eager call raises ``ValueError`` for a read token
      outside ``[0, N)``; under jit such a token is not read.
    advantages: float ``[B, N]`` (:func:`rank_grpo_advantages`); read under ``stop_gradient``.
      ``N`` is ``advantages.shape[1]``.
    epsilon: lower clip ``epsilon_low`` (0.06, the authors' script).
    epsilon_high: upper clip (0.08, the authors' script); ``None`` means ``epsilon``.
    log_ratio_clamp: the item's mean log-ratio is clamped to +-this before ``exp`` (None: no
      clamp; the authors do not clamp).
    aggregation: a mode of ``policy_gradient.aggregate`` (default ``"token_mean"``) or
      ``"rank_mean"``.

  Returns:
    ``(loss, RankGrpoExtras)``.
  """
  _checks.nonnegative("epsilon", epsilon)
  epsilon_high = epsilon if epsilon_high is None else epsilon_high
  _checks.nonnegative("epsilon_high", epsilon_high)
  _checks.positive("log_ratio_clamp", log_ratio_clamp, finite=False, optional=True)
  _checks.choice("aggregation", aggregation, RANK_AGGREGATIONS)
  chex.assert_rank([logp, old_logp, mask, item_ids, advantages], 2)
  chex.assert_equal_shape([logp, old_logp, mask, item_ids])
  chex.assert_type([logp, old_logp, advantages], float)
  chex.assert_type(item_ids, int)
  chex.assert_equal_shape_prefix([logp, advantages], 1)
  batch, length = logp.shape
  num_ranks = advantages.shape[1]
  read = jnp.asarray(mask) != 0
  read = read & _checks.ids_in_range("item_ids", jnp.where(read, item_ids, 0), num_ranks)
  logp, old_logp = _masking.zero_masked(read, logp, old_logp)
  advantages = jax.lax.stop_gradient(advantages)
  dtype = logp.dtype

  rows = jnp.broadcast_to(jnp.arange(batch)[:, None], (batch, length))
  segment = jnp.where(read, rows * num_ranks + item_ids, 0).reshape(-1)
  num_segments = batch * num_ranks
  m = read.astype(dtype)
  log_ratio = (logp - jax.lax.stop_gradient(old_logp)) * m
  sums = jax.ops.segment_sum(log_ratio.reshape(-1), segment, num_segments)
  counts = jax.ops.segment_sum(m.reshape(-1), segment, num_segments)
  mean_log_ratio = safe_div(sums, counts).reshape(batch, num_ranks)
  counts = counts.reshape(batch, num_ranks)
  if log_ratio_clamp is not None:
    mean_log_ratio = jnp.clip(mean_log_ratio, -log_ratio_clamp, log_ratio_clamp)
  ratio = jnp.exp(mean_log_ratio)
  has_tokens = counts > 0
  (advantages,) = _masking.zero_masked(has_tokens, advantages)  # a rank with no token is unread
  unclipped = -advantages * ratio
  clipped_branch = -advantages * jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon_high)
  per_rank = jnp.where(has_tokens, jnp.maximum(unclipped, clipped_branch), 0)
  clipped = (has_tokens & (clipped_branch > unclipped)).astype(dtype)

  per_token = jnp.where(read, per_rank.reshape(-1)[segment].reshape(batch, length), 0)
  if aggregation == "rank_mean":
    loss_sum = jnp.sum(per_rank)
    denominator = jnp.sum(has_tokens).astype(dtype)
    loss = safe_div(loss_sum, denominator)
  else:
    loss, agg = aggregate(per_token, read, mode=aggregation)
    loss_sum, denominator = agg.total, agg.denominator
  clip_fraction = safe_div(jnp.sum(clipped), jnp.sum(has_tokens).astype(dtype))
  extras = RankGrpoExtras(
    per_token_loss=per_token,
    per_rank_loss=per_rank,
    ratio=jax.lax.stop_gradient(ratio),
    rank_tokens=counts,
    clipped=clipped,
    clip_fraction=clip_fraction,
    loss_sum=loss_sum,
    denominator=denominator,
  )
  return loss, extras
