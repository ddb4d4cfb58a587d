"""REC, OPMD and AsymRE: group-relative REINFORCE read as an off-policy algorithm.

Yao, Chen, et al., "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm: Demystifying
Some Myths About GRPO and Its Friends", arXiv 2509.24203, which reinterprets OPMD (Kimi k1.5)
and AsymRE as regularised REINFORCE. Advantages are batch-level (see ``normalize``); the token
losses take ``[B, T]`` arrays and a response mask.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import check_segment_args, safe_div, shifted_moments
from hrljax.losses.group_relative.normalize import group_normalize

Array = chex.Array

_REC_DROPS = ("none", "balance")


class RecAdvantages(NamedTuple):
  advantages: Array  # [B] under stop_gradient; 0 on dropped and invalid rows
  kept: Array  # bool [B] rows that survived the drop strategy (and are valid)


def rec_advantages(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  std_normalize: bool = False,
  eps: float = 1e-6,
  drop: str = "none",
  key: Optional[Array] = None,
) -> RecAdvantages:
  """REC advantages: group-mean baseline, optional balancing drop (batch-level).

  Yao, Chen, et al., "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm:
  Demystifying Some Myths About GRPO and Its Friends", arXiv 2509.24203 (paper checked at
  abstract level only); the details follow the authors' code, Trinity-RFT
  ``advantage_fn/rec_advantage.py::RECGroupedAdvantage``.

  ``A_i = r_i - mean_kept`` (or ``/ (std_kept + eps)`` with ``std_normalize``, population std).
  With ``drop="balance"``, a group with more negatives (``r < mean``) than positives loses
  ``#neg - #pos`` uniformly chosen negatives (``A := 0``), and the mean and std are recomputed
  on the kept rows. A group with at most one kept row uses mean 0 and std 1 (``A = r``, or
  ``r / (1 + eps)``), as Trinity does.

  Args:
    rewards, group_ids, num_groups, valid: as in :func:`group_normalize`.
    std_normalize: divide by the kept rows' population std + eps (the ``rec_gsm8k`` example
      does not).
    eps: std epsilon (1e-6).
    drop: ``"none"`` or ``"balance"``.
    key: PRNG key, required by ``drop="balance"``.

  Returns:
    ``RecAdvantages(advantages, kept)``.

  Fixes Trinity's ``NameError`` on a one-experience group (``rewards`` referenced before
  assignment at @d4baca6): such a group gets ``A = r``, like any group with one kept row.
  """
  _checks.choice("drop", drop, _REC_DROPS)
  _checks.nonnegative("eps", eps)
  valid = check_segment_args(rewards, group_ids, num_groups, valid)
  kept = valid
  if drop == "balance":
    if key is None:
      _checks.fail("key", "a PRNG key with drop='balance'", key)
    moments = shifted_moments(rewards, group_ids, num_groups, valid)
    negative = valid & (moments.centred < 0)
    num_neg = jax.ops.segment_sum(negative.astype(jnp.int32), group_ids, num_groups)
    num_pos = jax.ops.segment_sum((valid & ~negative).astype(jnp.int32), group_ids, num_groups)
    excess = jnp.maximum(num_neg - num_pos, 0)
    # Rank each negative among its group's negatives by a random priority; drop the lowest.
    priority = jax.random.uniform(key, rewards.shape)
    bucket = jnp.where(negative, group_ids, num_groups).astype(jnp.int32)
    n = rewards.shape[0]
    sorted_bucket, _, perm = jax.lax.sort(
      (bucket, priority, jnp.arange(n, dtype=jnp.int32)), num_keys=2
    )
    position = jnp.arange(n, dtype=jnp.int32)
    first = jax.ops.segment_min(position, sorted_bucket, num_groups + 1)[sorted_bucket]
    rank = jnp.zeros((n,), jnp.int32).at[perm].set(position - first)
    dropped = negative & (rank < excess[group_ids])
    kept = valid & ~dropped
  advantages = group_normalize(
    rewards,
    group_ids,
    num_groups,
    valid=kept,
    scale="group" if std_normalize else "none",
    eps=eps,
    ddof=0,
    singleton_mode="raw",
  )
  return RecAdvantages(jax.lax.stop_gradient(advantages), kept)


_OPMD_BASELINES = ("mean", "logavgexp")


def opmd_advantages(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  baseline: str = "mean",
  tau: float = 1.0,
) -> Array:
  """Online Policy Mirror Descent advantages ``r_i - b_g`` (batch-level).

  Kimi Team, "Kimi k1.5: Scaling Reinforcement Learning with LLMs", arXiv 2501.12599,
  section 2.3.2 (OPMD), as implemented by Trinity-RFT ``opmd_advantage.py`` and reinterpreted
  as regularised REINFORCE by arXiv 2509.24203.

  Args:
    rewards, group_ids, num_groups, valid: as in :func:`group_normalize`.
    baseline: ``"mean"`` (``b = mean_g r``) or ``"logavgexp"``
      (``b = tau * log(mean_g exp(r / tau))``, the soft-max baseline of the OPMD derivation;
      tends to ``mean`` as ``tau -> inf`` and to ``max`` as ``tau -> 0``).
    tau: temperature of the log-avg-exp baseline (> 0).

  Returns:
    ``[B]`` under ``stop_gradient``. One-row groups use ``b = 0`` (Trinity), i.e. ``A = r``.
    All-equal groups give exactly 0 under both baselines.
  """
  _checks.choice("baseline", baseline, _OPMD_BASELINES)
  _checks.positive("tau", tau)
  valid = check_segment_args(rewards, group_ids, num_groups, valid)
  moments = shifted_moments(rewards, group_ids, num_groups, valid)
  if baseline == "mean":
    advantages = moments.centred
  else:
    top = jax.ops.segment_max(jnp.where(valid, rewards, -jnp.inf), group_ids, num_groups)
    top = jnp.where(moments.count > 0, top, 0)
    shifted = jnp.where(valid, rewards - top[group_ids], 0)
    mean_exp = safe_div(
      jax.ops.segment_sum(jnp.where(valid, jnp.exp(shifted / tau), 0), group_ids, num_groups),
      moments.count,
    )
    log_mean_exp = tau * jnp.log(jnp.where(moments.count > 0, mean_exp, 1))
    advantages = shifted - log_mean_exp[group_ids]
  advantages = jnp.where(moments.count[group_ids] == 1, rewards, advantages)
  return jax.lax.stop_gradient(jnp.where(valid, advantages, 0))


def asymre_advantages(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  baseline_shift: float = -0.1,
) -> Array:
  """Asymmetric REINFORCE advantages ``r_i - (mean_g + delta)`` (batch-level).

  Arnal et al., "Asymmetric REINFORCE for off-Policy Reinforcement Learning: Balancing positive
  and negative rewards", arXiv 2506.20520; Trinity-RFT ``asymre_advantage.py``. By linearity
  this is REINFORCE plus ``-delta * sum log pi(y)`` (the ``forward-kl`` regulariser of
  :func:`rec_loss` with ``reg_coef = -delta``), arXiv 2509.24203.

  Args:
    rewards, group_ids, num_groups, valid: as in :func:`group_normalize`.
    baseline_shift: ``delta`` (Trinity default -0.1; negative favours positive samples).

  Returns:
    ``[B]`` under ``stop_gradient``. One-row groups use baseline 0 (Trinity): ``A = r``.
  """
  _checks.number("baseline_shift", baseline_shift)
  valid = check_segment_args(rewards, group_ids, num_groups, valid)
  moments = shifted_moments(rewards, group_ids, num_groups, valid)
  advantages = moments.centred - baseline_shift
  advantages = jnp.where(moments.count[group_ids] == 1, rewards, advantages)
  return jax.lax.stop_gradient(jnp.where(valid, advantages, 0))


def _check_token_args(
  logp: Array, old_logp: Optional[Array], advantages: Array, mask: Array
) -> Array:
  arrays = [logp, advantages, mask] + ([old_logp] if old_logp is not None else [])
  chex.assert_rank(arrays, 2)
  chex.assert_equal_shape(arrays)
  chex.assert_type([logp, advantages], float)
  if old_logp is not None:
    chex.assert_type(old_logp, float)
  return mask.astype(logp.dtype)


class RecExtras(NamedTuple):
  per_token_loss: Array  # [B, T] (0 on masked tokens); re-aggregate with policy_gradient
  keep: Array  # bool [B, T] tokens whose gradient is kept by the clip mode
  ratio: Array  # [B, T] detached token ratio pi / pi_old
  clip_fraction: Array  # scalar: masked mean of ~keep
  loss_sum: Array  # scalar numerator of the aggregation
  denominator: Array  # scalar denominator (tokens, or sequences for gspo-one-side)


_REC_CLIP_MODES = ("none", "one-side", "two-side", "ring", "gspo-one-side")


_REC_WEIGHTS = ("none", "importance_sampling", "gspo_importance_sampling", "advantage")


_REC_REGULARIZERS = ("none", "k2", "forward-kl")


def rec_loss(
  logp: Array,
  old_logp: Array,
  advantages: Array,
  mask: Array,
  *,
  clip_mode: str = "none",
  weight: str = "none",
  eps_low: float = 0.2,
  eps_high: float = 0.2,
  eps_low_outer: float = 0.6,
  eps_high_outer: float = 2.0,
  regularizer: str = "none",
  reg_coef: float = 0.0,
  temp: float = 1.0,
  log_ratio_clamp: float = 20.0,
) -> Tuple[Array, RecExtras]:
  """REC loss: REINFORCE with a detached keep mask and weight (batch-level, ``[B, T]``).

  Yao, Chen, et al., arXiv 2509.24203; Trinity-RFT ``rec_policy_loss.py::RECPolicyLossFn``.
  Per token ``l_t = -w_t * A_t * log pi(y_t) * keep_t`` (+ regulariser), where the ratio
  ``rho = pi / pi_old``, the keep mask and the weight ``w`` are all detached, so the gradient is
  plain REINFORCE on the kept tokens whatever ``old_logp`` is (the "secretly off-policy" reading).

  Clip modes (``keep``): ``"none"``; ``"two-side"``: ``1-eps_low <= rho <= 1+eps_high``;
  ``"one-side"``: ``(A >= 0 and rho <= 1+eps_high) or (A <= 0 and rho >= 1-eps_low)``, PPO's
  non-zero-gradient region; ``"ring"``: two-side, or ``A >= 0 and rho <= 1-eps_low_outer``, or
  ``A <= 0 and rho >= 1+eps_high_outer``; ``"gspo-one-side"``: one-side on the sequence ratio
  ``exp(masked mean_t log rho)``, aggregated seq-mean-token-mean (as Trinity forces).
  Weights: ``"none"``; ``"importance_sampling"``: ``rho`` (the gradient of the unclipped PPO
  surrogate); ``"gspo_importance_sampling"``: the sequence ratio; ``"advantage"``:
  ``exp(A / temp)``. Regularisers: ``"k2"``: ``+ reg_coef * (logp - old_logp)^2`` (the 1/2
  absorbed, as in Trinity; OPMD's reading); ``"forward-kl"``: ``- reg_coef * logp`` (AsymRE's
  reading).

  Paper variant names map to ``(clip_mode, weight)``: REC-OneSide-NoIS = ("one-side", "none"),
  REC-OneSide-IS = ("one-side", "importance_sampling"), REC-TwoSide-NoIS = ("two-side",
  "none"), REC-Ring-NoIS = ("ring", "none") (names as recalled, not checked in the paper).

  Args:
    logp: float ``[B, T]`` log-probs of the sampled tokens under pi_theta.
    old_logp: float ``[B, T]`` under the behaviour policy.
    advantages: float ``[B, T]`` (:func:`broadcast_to_tokens` of sequence advantages).
    mask: ``[B, T]`` response mask (bool or float). The loss reads no masked token: whatever it
      holds (a -inf log-prob of padding, NaN), its loss is 0 with no gradient, and the ``ratio``
      and ``keep`` diagnostics report it as a token of log-prob and advantage 0.
    clip_mode, weight, regularizer: see above.
    eps_low, eps_high: inner band (Trinity ``default_args``: 0.2, 0.2).
    eps_low_outer, eps_high_outer: ring's outer thresholds (``default_args``: 0.6, 2.0; the
      Trinity constructor's own keyword defaults are 0.4, 0.4).
    reg_coef: regulariser coefficient (>= 0).
    temp: temperature of the ``"advantage"`` weight (> 0).
    log_ratio_clamp: ``logp - old_logp`` is clamped to +-this before ``exp`` (verl's 20;
      Trinity does not clamp, which only matters for extreme ratios).

  Returns:
    ``(loss, RecExtras)``: token-mean loss (Trinity's default ``masked_mean``).

  Deviations: Trinity's ``gspo_importance_sampling`` weight reads the sequence ratio that only
  the ``gspo-one-side`` mode defines (a ``NameError`` with other modes); here it is always
  defined. A ``truncated_importance_sampling`` weight is not in the Trinity code read
  (@1d7fae4 and an older copy), so it is not offered.
  """
  _checks.choice("clip_mode", clip_mode, _REC_CLIP_MODES)
  _checks.choice("weight", weight, _REC_WEIGHTS)
  _checks.choice("regularizer", regularizer, _REC_REGULARIZERS)
  _checks.number("eps_low", eps_low, low=0.0, high=1.0, low_open=True)
  _checks.positive("eps_high", eps_high)
  _checks.number("eps_low_outer", eps_low_outer, low=0.0, high=1.0, low_open=True)
  _checks.positive("eps_high_outer", eps_high_outer)
  _checks.nonnegative("reg_coef", reg_coef)
  _checks.positive("temp", temp)
  _checks.positive("log_ratio_clamp", log_ratio_clamp, finite=False)
  m = _check_token_args(logp, old_logp, advantages, mask)
  read = m != 0
  # No masked token is read from here on: it counts as a token of log-prob and advantage 0.
  logp, old_logp, a = _masking.zero_masked(read, logp, old_logp, advantages)
  a = jax.lax.stop_gradient(a)

  log_ratio = jax.lax.stop_gradient(jnp.clip(logp - old_logp, -log_ratio_clamp, log_ratio_clamp))
  ratio = jnp.exp(log_ratio)
  tokens = jnp.sum(m, axis=1)
  seq_ratio = jnp.exp(safe_div(jnp.sum(log_ratio * m, axis=1), tokens))[:, None]
  pos, neg = a >= 0, a <= 0
  inner = (ratio >= 1 - eps_low) & (ratio <= 1 + eps_high)
  if clip_mode == "none":
    keep = jnp.ones_like(inner)
  elif clip_mode == "two-side":
    keep = inner
  elif clip_mode == "one-side":
    keep = (pos & (ratio <= 1 + eps_high)) | (neg & (ratio >= 1 - eps_low))
  elif clip_mode == "ring":
    keep = inner | (pos & (ratio <= 1 - eps_low_outer)) | (neg & (ratio >= 1 + eps_high_outer))
  else:
    keep = (pos & (seq_ratio <= 1 + eps_high)) | (neg & (seq_ratio >= 1 - eps_low))

  if weight == "importance_sampling":
    a = a * jnp.where(read, ratio, 1.0)
  elif weight == "gspo_importance_sampling":
    a = a * seq_ratio
  elif weight == "advantage":
    a = a * jnp.exp(a / temp)
  per_token = -a * logp * keep.astype(logp.dtype)
  if regularizer == "k2":
    per_token = per_token + reg_coef * jnp.square(logp - old_logp)
  elif regularizer == "forward-kl":
    per_token = per_token - reg_coef * logp
  per_token = per_token * m

  if clip_mode == "gspo-one-side":
    loss_sum = jnp.sum(safe_div(jnp.sum(per_token, axis=1), tokens))
    denominator = jnp.sum(tokens > 0).astype(logp.dtype)
  else:
    loss_sum = jnp.sum(per_token)
    denominator = jnp.sum(m)
  clip_fraction = safe_div(jnp.sum((~keep).astype(logp.dtype) * m), jnp.sum(m))
  loss = safe_div(loss_sum, denominator)
  return loss, RecExtras(per_token, keep, ratio, clip_fraction, loss_sum, denominator)


class TokenLossExtras(NamedTuple):
  per_token_loss: Array  # [B, T] (0 on masked tokens)
  loss_sum: Array  # scalar
  denominator: Array  # scalar number of unmasked tokens


def opmd_loss(
  logp: Array, advantages: Array, mask: Array, *, tau: float = 1.0
) -> Tuple[Array, TokenLossExtras]:
  """OPMD policy loss ``-masked_mean(A * logp) / (1 + tau)`` (batch-level, ``[B, T]``).

  Kimi k1.5 (arXiv 2501.12599) OPMD as in Trinity-RFT ``opmd_policy_loss.py``: a REINFORCE
  loss scaled by ``1 / (1 + tau)``, token-mean. ``old_logp`` is not used. The ``tau/2 * (log
  pi - log pi_old)^2`` regulariser of the OPMD surrogate is :func:`rec_loss`'s ``"k2"`` option.

  Args:
    logp: float ``[B, T]``.
    advantages: float ``[B, T]`` (:func:`opmd_advantages` broadcast to tokens); detached.
    mask: ``[B, T]``; masked tokens are not read (whatever they hold).
    tau: the OPMD temperature (>= 0).

  Returns:
    ``(loss, TokenLossExtras)``.
  """
  _checks.nonnegative("tau", tau)
  m = _check_token_args(logp, None, advantages, mask)
  logp, advantages = _masking.zero_masked(m, logp, advantages)
  per_token = -jax.lax.stop_gradient(advantages) * logp * m / (1.0 + tau)
  loss_sum, denominator = jnp.sum(per_token), jnp.sum(m)
  return safe_div(loss_sum, denominator), TokenLossExtras(per_token, loss_sum, denominator)
