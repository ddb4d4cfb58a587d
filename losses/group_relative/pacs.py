"""PACS: the outcome reward as a label, predicted by a score the policy parameterises.

Li, Chen, Gong, Chen, Wang, He, Luo, Yang, "Implicit Actor Critic Coupling via a Supervised
Learning Framework for RLVR", arXiv 2509.02522. The verifiable outcome ``R in {0, 1}`` is a label
and the policy's implicit reward, centred within the prompt's group, is the logit that predicts
it; the cross-entropy's gradient is a policy gradient whose weight (``sigmoid(psi) - R``) plays
the critic, hence the "implicit actor-critic coupling".

Equation numbers could not be read: the stored copies of the paper reachable here give the
abstract and summaries (a policy-parameterised score ``psi(q, o; pi_theta)`` trained by
cross-entropy, instantiated with a REINFORCE leave-one-out baseline), not the numbered
equations. The loss follows the authors' code, ``ritzz-ai/PACS@bbe1dc6``,
``src/pacs/pacs_core_algos.py`` (``compute_reward``, ``compute_rloo_outcome_advantage``,
``compute_grpo_outcome_advantage``, ``compute_weight``, ``compute_pacs_loss``) with the
settings of ``scripts/pacs/pacs_beta_1.0.sh``. Batch-level; token arrays are ``[B, T]``.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import (
  SINGLETON_MODES,
  check_rows,
  safe_div,
  shifted_moments,
  valid_or_all,
  with_nan,
)
from hrljax.losses.group_relative.normalize import group_normalize

Array = chex.Array

PACS_SCORES = ("log_ratio", "mean_logp")
PACS_CENTRINGS = ("leave_one_out", "zscore", "mean", "raw")
PACS_WEIGHTINGS = ("none", "balanced", "positive", "negative")


class PacsExtras(NamedTuple):
  implicit_rewards: Array  # [B] r^ (carries the gradient); 0 on invalid rows
  logits: Array  # [B] psi, the centred r^ fed to the cross-entropy; 0 on invalid rows
  weights: Array  # [B] detached per-row weights; 0 on invalid rows
  per_row_loss: Array  # [B] w * BCE(psi, R); 0 on invalid rows
  loss_sum: Array  # scalar sum of per_row_loss
  denominator: Array  # scalar number of valid rows


def pacs_loss(
  logp: Array,
  old_logp: Array,
  mask: Array,
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  beta: float = 1.0,
  score: str = "log_ratio",
  centring: str = "leave_one_out",
  weighting: str = "none",
  eps: float = 1e-6,
  singleton_mode: str = "zero",
) -> Tuple[Array, PacsExtras]:
  """PACS loss: binary cross-entropy of the group-centred implicit reward against the outcome.

  * Implicit reward (``score="log_ratio"``, the authors' ``reward_method=1``):
    ``r^_i = beta * sum_t m_it (logp_it - old_logp_it)``; ``score="mean_logp"``
    (``reward_method=2``): ``beta * sum_t m_it logp_it / L_i``, no old policy.
  * Logit ``psi_i``: ``centring="leave_one_out"`` (default; the released scripts'
    ``adv_estimator=rloo``): ``r^_i - mean_{j != i} r^_j``, computed as
    ``n / (n - 1) * (r^_i - mean_g r^)``; ``"zscore"`` (``grpo`` with
    ``norm_adv_by_std_in_grpo``): ``(r^_i - mean_g) / (std_g + eps)``, unbiased std;
    ``"mean"``: ``r^_i - mean_g``; ``"raw"`` (``naive``): ``r^_i``. The centring is *not*
    detached: the other responses' rewards are part of the logit and carry gradient, as in
    the authors' code.
  * ``loss = (1 / n_valid) sum_i w_i * BCEWithLogits(psi_i, R_i)``, with
    ``BCEWithLogits(x, y) = softplus(x) - x y``, i.e. torch's ``BCEWithLogitsLoss(weight=w)``
    with its mean over the rows (not over the weights).
  * Weights: ``"none"`` (1); ``"balanced"`` (the released scripts' ``use_weight=True,
    weight_mode=question``, scikit-learn's ``"balanced"`` class weights within each group):
    in a group with both classes, a row of class ``c`` gets ``n_g / (2 * n_{g,c})``, in a
    one-class group 1; ``"positive"`` / ``"negative"`` (``only_positive`` / ``only_negative``):
    1 on the rows with ``R = 1`` (``R = 0``), 0 elsewhere.

  The gradient of the loss raises the log-probs of responses with ``R = 1`` and lowers those
  with ``R = 0`` (by ``w (sigmoid(psi) - R)``, a policy gradient with a learned baseline).

  Deviations from the authors' code: their implicit reward sums over every response position,
  padding included (a no-op when verl's padded log-probs are zero, as with remove-padding);
  here masked tokens are never read. Their groups are ``rollout_n`` consecutive rows; here they
  are segments (any order, ragged). A one-row group divides by zero in their leave-one-out and
  gives NaN in their z-score; here it gets ``singleton_mode``.

  Args:
    logp: float ``[B, T]`` log-probs of the sampled tokens under pi_theta.
    old_logp: float ``[B, T]`` under the behaviour policy (unused by ``score="mean_logp"``).
    mask: ``[B, T]`` response mask (bool or 0/1); masked tokens are never read.
    rewards: float ``[B]`` outcome labels in ``[0, 1]`` (binary in the paper; a soft label is
      accepted by the cross-entropy, the class weights read ``R > 0.5`` as positive).
    group_ids: int ``[B]`` in ``[0, num_groups)``: the prompt of each response.
    num_groups: static number of groups.
    valid: optional bool ``[B]``; invalid rows (and rows with an out-of-range group id under
      jit) are not read, enter no group statistic, and give loss, weight and gradient 0.
    beta: scale of the implicit reward (> 0; the scripts use 1.0 and 2.0).
    score: ``"log_ratio"`` or ``"mean_logp"``.
    centring: ``"leave_one_out"``, ``"zscore"``, ``"mean"`` or ``"raw"``.
    weighting: ``"none"``, ``"balanced"``, ``"positive"`` or ``"negative"``.
    eps: std epsilon of ``"zscore"`` (1e-6, the authors').
    singleton_mode: a one-row group's logit under the centred modes: ``"zero"`` (default;
      its loss is ``w log 2`` with no gradient) or ``"raw"`` (``r^``, or ``r^ / (1 + eps)``).
      A NaN implicit reward gives a NaN logit in every mode.

  Returns:
    ``(loss, PacsExtras)``.
  """
  _checks.integer("num_groups", num_groups)
  _checks.positive("beta", beta)
  _checks.choice("score", score, PACS_SCORES)
  _checks.choice("centring", centring, PACS_CENTRINGS)
  _checks.choice("weighting", weighting, PACS_WEIGHTINGS)
  _checks.nonnegative("eps", eps)
  _checks.choice("singleton_mode", singleton_mode, SINGLETON_MODES)
  chex.assert_rank([logp, old_logp, mask], 2)
  chex.assert_equal_shape([logp, old_logp, mask])
  chex.assert_type([logp, old_logp, rewards], float)
  named = [("rewards", rewards), ("group_ids", group_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, int_names=("group_ids",), bool_names=("valid",))
  chex.assert_equal_shape_prefix([logp, rewards], 1)
  valid = valid_or_all(valid, group_ids) & _checks.ids_in_range("group_ids", group_ids, num_groups)
  read = (jnp.asarray(mask) != 0) & valid[:, None]
  logp, old_logp = _masking.zero_masked(read, logp, old_logp)
  (labels,) = _masking.zero_masked(valid, rewards)
  m = read.astype(logp.dtype)

  if score == "log_ratio":
    implicit = beta * jnp.sum((logp - jax.lax.stop_gradient(old_logp)) * m, axis=1)
  else:
    implicit = beta * safe_div(jnp.sum(logp * m, axis=1), jnp.sum(m, axis=1))
  implicit = jnp.where(valid, implicit, 0)

  if centring == "raw":
    psi = implicit
  elif centring == "leave_one_out":
    moments = shifted_moments(implicit, group_ids, num_groups, valid)
    n = moments.count[group_ids].astype(implicit.dtype)
    psi = safe_div(n * moments.centred, n - 1)
    singleton = implicit if singleton_mode == "raw" else jnp.zeros_like(implicit)
    psi = jnp.where(n == 1, singleton, psi)
  else:
    psi = group_normalize(
      implicit,
      group_ids,
      num_groups,
      valid=valid,
      scale="group" if centring == "zscore" else "none",
      eps=eps,
      ddof=1,
      singleton_mode=singleton_mode,
    )
  psi = jnp.where(valid, with_nan(psi, jnp.isnan(implicit)), 0)

  positive = valid & (labels > 0.5)
  negative = valid & ~(labels > 0.5)
  if weighting == "none":
    weights = valid.astype(logp.dtype)
  elif weighting == "positive":
    weights = positive.astype(logp.dtype)
  elif weighting == "negative":
    weights = negative.astype(logp.dtype)
  else:
    n_pos = jax.ops.segment_sum(positive.astype(logp.dtype), group_ids, num_groups)[group_ids]
    n_neg = jax.ops.segment_sum(negative.astype(logp.dtype), group_ids, num_groups)[group_ids]
    mixed = (n_pos > 0) & (n_neg > 0)
    balanced = safe_div(n_pos + n_neg, 2 * jnp.where(positive, n_pos, n_neg))
    weights = jnp.where(valid, jnp.where(mixed, balanced, 1.0), 0.0).astype(logp.dtype)
  weights = jax.lax.stop_gradient(weights)

  bce = jax.nn.softplus(psi) - psi * labels.astype(psi.dtype)
  per_row = jnp.where(valid, weights * bce, 0)
  loss_sum = jnp.sum(per_row)
  denominator = jnp.sum(valid).astype(logp.dtype)
  loss = safe_div(loss_sum, denominator)
  return loss, PacsExtras(implicit, psi, weights, per_row, loss_sum, denominator)
