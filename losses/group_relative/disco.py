"""DisCO: a discriminative objective over the positive and negative responses of a question.

Li, Lin, Galanti, Tu, Yang, "DisCO: Reinforcing Large Reasoning Models with Discriminative
Constrained Optimization", arXiv 2505.12366.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import check_rows, safe_div, valid_or_all

Array = chex.Array


class DiscoExtras(NamedTuple):
  scores: Array  # [B] s(o): length-normalised log-likelihood or ratio
  objective: Array  # [num_groups] J_q (0 for questions without both signs)
  valid_questions: Array  # bool [num_groups] at least one positive and one negative
  kl: Array  # scalar KL(pi_old || pi_theta) estimate
  penalty: Array  # scalar (beta / 2) * max(kl - delta, 0)^2
  objective_sum: Array  # scalar sum of J_q over valid questions
  num_questions: Array  # scalar number of questions present (the denominator)


_DISCO_SCORES = ("logL", "Lratio")


_DISCO_VARIANTS = ("lse", "basic")


_DISCO_KLS = ("k1", "k3")


def disco_loss(
  logp: Array,
  old_logp: Array,
  mask: Array,
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  score: str = "logL",
  tau: Optional[float] = None,
  delta: float = 1e-4,
  beta: float = 1e3,
  variant: str = "lse",
  kl_estimator: str = "k1",
  log_ratio_clamp: float = 20.0,
) -> Tuple[Array, DiscoExtras]:
  """DisCO: discriminative objective with a squared-hinge KL constraint (batch-level).

  Li, Lin, Galanti, Tu, Yang, "DisCO: Reinforcing Large Reasoning Models with Discriminative
  Constrained Optimization", arXiv 2505.12366 (NeurIPS 2025); reference code: verl branch
  ``compute_policy_loss_disco`` and Optimization-AI/DisCO ``compute_policy_loss_disco_logL``.

  Rewards are binary: 1 positive, 0 negative (other values are ignored). A question (group)
  counts when it has at least one of each. Scores ``s(o) = mean_t log pi(o_t)`` (``"logL"``) or
  ``mean_t pi/pi_old`` (``"Lratio"``). Objective per question:

  * ``"lse"`` (DisCO): ``J_q = mean_{o+} s(o+) - tau * log sum_{o-} exp(s(o-) / tau)``;
  * ``"basic"`` (DisCO-b): ``mean_{o+} s(o+) - mean_{o-} s(o-)`` (the form as recalled, not
    checked against the paper).

  ``loss = -(1 / num_questions) sum_{valid q} J_q + (beta / 2) * max(KL - delta, 0)^2`` where
  ``num_questions`` counts every question present, valid or not (as the reference does), and
  ``KL`` is the token mean over the batch of ``old_logp - logp`` (k1) or of
  ``rho - 1 - log rho`` (k3, the upstream repository's ``low_var_kl`` default).

  Deviations from the reference code (same gradient, meaningful value): the reference
  optimises the gradient-only surrogates ``S / sg(S)`` for the log-sum-exp and
  ``sg(max(beta (KL - delta), 0)) * KL`` for the penalty; here the loss value is the true
  objective and penalty, whose gradients are identical. The reference reshapes to equal-size
  groups; here groups are segments (ragged, any order). With no valid question the loss is
  the penalty alone (the reference's dummy zero), with no NaN in the gradient.

  Args:
    logp, old_logp: float ``[B, T]``.
    mask: ``[B, T]`` response mask.
    rewards: ``[B]`` binary rewards (float or bool).
    group_ids: int ``[B]`` question of each response.
    num_groups: static number of questions.
    valid: optional bool ``[B]``; invalid rows are neither positive nor negative, do not count
      a question as present and do not enter the KL. Their tokens, and masked tokens, are not
      read (an invalid row scores 0).
    score: ``"logL"`` or ``"Lratio"``.
    tau: temperature; default 10 for ``logL`` and 1 for ``Lratio`` (paper defaults).
    delta: KL budget (1e-4); beta: penalty weight (1e3).
    variant: ``"lse"`` or ``"basic"``.
    kl_estimator: ``"k1"`` or ``"k3"``.
    log_ratio_clamp: clamp of ``logp - old_logp`` inside the ratio score and k3.

  Returns:
    ``(loss, DiscoExtras)``.
  """
  _checks.integer("num_groups", num_groups)
  _checks.choice("score", score, _DISCO_SCORES)
  _checks.choice("variant", variant, _DISCO_VARIANTS)
  _checks.choice("kl_estimator", kl_estimator, _DISCO_KLS)
  if tau is None:
    tau = 10.0 if score == "logL" else 1.0
  _checks.positive("tau", tau)
  _checks.nonnegative("delta", delta)
  _checks.nonnegative("beta", beta)
  _checks.positive("log_ratio_clamp", log_ratio_clamp, finite=False)
  chex.assert_rank([logp, old_logp, mask], 2)
  chex.assert_equal_shape([logp, old_logp, mask])
  chex.assert_type([logp, old_logp], float)
  named = [("rewards", rewards), ("group_ids", group_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, int_names=("group_ids",), bool_names=("valid",))
  chex.assert_equal_shape_prefix([logp, rewards], 1)
  valid = valid_or_all(valid, group_ids) & _checks.ids_in_range("group_ids", group_ids, num_groups)
  token_valid = (jnp.asarray(mask) != 0) & valid[:, None]
  logp, old_logp = _masking.zero_masked(token_valid, logp, old_logp)
  m = token_valid.astype(logp.dtype)

  tokens = jnp.sum(m, axis=1)
  log_ratio = jnp.clip(logp - old_logp, -log_ratio_clamp, log_ratio_clamp)
  per_token = logp if score == "logL" else jnp.exp(log_ratio)
  scores = safe_div(jnp.sum(per_token * m, axis=1), tokens)
  rows_ok = valid & (tokens > 0)
  r = rewards.astype(logp.dtype)
  positive = rows_ok & (r == 1)
  negative = rows_ok & (r == 0)

  num_pos = jax.ops.segment_sum(positive.astype(logp.dtype), group_ids, num_groups)
  num_neg = jax.ops.segment_sum(negative.astype(logp.dtype), group_ids, num_groups)
  present = jax.ops.segment_sum(rows_ok.astype(jnp.int32), group_ids, num_groups) > 0
  valid_q = (num_pos > 0) & (num_neg > 0)
  pos_mean = safe_div(
    jax.ops.segment_sum(jnp.where(positive, scores, 0), group_ids, num_groups), num_pos
  )
  if variant == "basic":
    neg_term = safe_div(
      jax.ops.segment_sum(jnp.where(negative, scores, 0), group_ids, num_groups), num_neg
    )
  else:
    z = scores / tau
    top = jax.ops.segment_max(jnp.where(negative, z, -jnp.inf), group_ids, num_groups)
    top = jax.lax.stop_gradient(jnp.where(num_neg > 0, top, 0))
    # Non-negative rows are replaced by the shift before exp, so no inf * 0 in the gradient.
    e = jnp.where(negative, jnp.exp(jnp.where(negative, z, top[group_ids]) - top[group_ids]), 0)
    total = jax.ops.segment_sum(e, group_ids, num_groups)
    neg_term = tau * (top + jnp.log(jnp.where(total > 0, total, 1)))
  objective = jnp.where(valid_q, pos_mean - neg_term, 0)

  if kl_estimator == "k1":
    kl_tok = old_logp - logp
  else:
    kl_tok = jnp.exp(log_ratio) - 1 - log_ratio
  kl = safe_div(jnp.sum(kl_tok * m), jnp.sum(m))
  penalty = 0.5 * beta * jnp.square(jnp.maximum(kl - delta, 0))
  objective_sum = jnp.sum(objective)
  num_questions = jnp.sum(present).astype(logp.dtype)
  loss = -safe_div(objective_sum, num_questions) + penalty
  return loss, DiscoExtras(scores, objective, valid_q, kl, penalty, objective_sum, num_questions)
