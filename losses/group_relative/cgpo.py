"""CGPO's judge-gated optimisers: CRPG (policy gradient) and CRRAFT (reward-ranked fine-tuning).

Xu, Helenowski, Sankararaman, Jin, Peng, Han, Nie, Zhu, Zhang, Zhou, Zeng, He, Mandyam,
Talabzadeh, Khabsa, Cohen, Tian, Ma, Wang, Fang, "The Perfect Blend: Redefining RLHF with
Mixture of Judges", arXiv 2409.20370 (Constrained Generative Policy Optimization). A mixture of
judges (rule-based and LLM-based) flags each response as passing or violating the constraints
of its task; the judges, the reward models and the per-task stratification (each task its own
reward model, judges, optimiser and hyper-parameters) live outside these losses, which take the
judges' verdict as ``passed``.

The authors' code is not public. The losses follow the paper's description as far as it could be
verified (abstract and secondary summaries) and, for the formulas, the one implementation read,
the TRL pull request huggingface/trl#2190 (``trl/trainer/cgpo_trainer.py``, third-party,
unmerged; it cites the paper's Eq. 14 for CODPO and Eq. 18 for CRRAFT).
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import (
  check_rows,
  safe_div,
  shifted_moments,
  valid_or_all,
  with_nan,
)

Array = chex.Array


class CgpoExtras(NamedTuple):
  calibrated: Array  # [B] passed * sigmoid(r - r_baseline) * KL factor (detached; 0 on invalid)
  weights: Array  # [B] detached weight on each row's sequence log-prob
  selected: Array  # bool [B] rows that carry a gradient
  loss_sum: Array  # scalar numerator
  denominator: Array  # scalar denominator (tokens for CRPG, selected rows for CRRAFT)


_CRPG_BASELINES = ("batch", "group", "none")


def _check_cgpo_args(
  logp,
  mask,
  rewards,
  baseline_rewards,
  passed,
  group_ids,
  num_groups,
  valid,
  kl,
  kl_threshold,
  extra=(),
):
  _checks.integer("num_groups", num_groups)
  if (kl is None) != (kl_threshold is None):
    _checks.fail("kl_threshold", "a float > 0 exactly when kl is given", kl_threshold)
  if kl_threshold is not None:
    _checks.positive("kl_threshold", kl_threshold)
  chex.assert_rank([logp, mask], 2)
  chex.assert_equal_shape([logp, mask])
  chex.assert_type(logp, float)
  named = [
    ("rewards", rewards),
    ("baseline_rewards", baseline_rewards),
    ("passed", passed),
    ("group_ids", group_ids),
  ] + list(extra)
  if kl is not None:
    named.append(("kl", kl))
  if valid is not None:
    named.append(("valid", valid))
  check_rows(
    named,
    float_names=("rewards", "baseline_rewards", "kl"),
    int_names=("group_ids",),
    bool_names=("passed", "valid", "fallback"),
  )
  chex.assert_equal_shape_prefix([logp, rewards], 1)
  valid = valid_or_all(valid, group_ids) & _checks.ids_in_range("group_ids", group_ids, num_groups)
  read = (jnp.asarray(mask) != 0) & valid[:, None]
  poisoned = jnp.any(read & jnp.isnan(logp))
  for value in (rewards, baseline_rewards) + ((kl,) if kl is not None else ()):
    poisoned = poisoned | jnp.any(valid & jnp.isnan(value))
  (logp,) = _masking.zero_masked(read, logp)
  m = read.astype(logp.dtype)
  seq_logp = jnp.sum(logp * m, axis=1)
  diff = jnp.where(valid, rewards - baseline_rewards, 0)
  calibrated = jnp.where(valid & passed, jax.nn.sigmoid(diff), 0)
  return valid, m, seq_logp, jax.lax.stop_gradient(calibrated), poisoned


def crpg_loss(
  logp: Array,
  mask: Array,
  rewards: Array,
  baseline_rewards: Array,
  passed: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  kl: Optional[Array] = None,
  kl_threshold: Optional[float] = None,
  baseline: str = "batch",
) -> Tuple[Array, CgpoExtras]:
  """CRPG: a policy gradient on the calibrated reward of judge-passing responses (batch-level).

  Xu et al., arXiv 2409.20370, "Calibrated-Regularized Policy Gradient". The reward of a response
  is calibrated against the reward of its prompt's baseline response (e.g. the dataset's
  reference answer), which makes rewards comparable across prompts and bounded::

    R_i = passed_i * sigmoid(r_i - r_baseline(x_i)) * max(1 - KL_i / KL_max, 0)

  so a response that violates a judge gets 0: it is pushed down relative to the passing ones by
  the baseline ``w_i = R_i - mean R`` (with ``baseline="batch"``), and a passing response is
  pushed up in proportion to how much better it is than the baseline response. The loss is
  ``-sum_i w_i log pi(y_i|x_i) / #tokens`` (sequence log-prob, normalised by the number of
  response tokens in the batch).

  Reconstructed from the TRL pull request (``crpg_optimization``), not verified against the
  paper's equations: the batch-mean baseline, the soft KL factor ``max(1 - KL/KL_max, 0)``
  (``kl`` the sampled response's sequence ``log pi_old(y|x) - log pi_ref(y|x)``) and the token
  normalisation. ``baseline="group"`` (the group-relative reading of the same baseline, the mean
  over the prompt's responses) and ``"none"`` (plain REINFORCE on ``R >= 0``: violating
  responses get no gradient at all) are this library's options.

  Args:
    logp: float ``[B, T]`` token log-probs under the policy being optimised.
    mask: ``[B, T]`` response mask; masked tokens are not read.
    rewards: float ``[B]`` reward-model scores ``r(x, y)``.
    baseline_rewards: float ``[B]`` the score of each row's prompt's baseline response.
    passed: bool ``[B]`` the response satisfies every judge of its task.
    group_ids: int ``[B]`` prompt of each row, in ``[0, num_groups)``.
    num_groups: static number of prompts.
    valid: optional bool ``[B]``; invalid rows (and, under jit, out-of-range group ids) enter no
      mean, get weight 0 and add no tokens.
    kl: optional float ``[B]`` sequence KL estimate of each response (detached).
    kl_threshold: ``KL_max`` (> 0), given exactly when ``kl`` is.
    baseline: ``"batch"``, ``"group"`` or ``"none"``.

  Returns:
    ``(loss, CgpoExtras)``; ``selected`` is every valid row. A NaN in a read input makes the
    loss NaN.
  """
  _checks.choice("baseline", baseline, _CRPG_BASELINES)
  valid, m, seq_logp, calibrated, poisoned = _check_cgpo_args(
    logp, mask, rewards, baseline_rewards, passed, group_ids, num_groups, valid, kl, kl_threshold
  )
  if kl is not None:
    factor = jnp.maximum(1.0 - jax.lax.stop_gradient(kl) / kl_threshold, 0)
    calibrated = jnp.where(valid, calibrated * factor, 0)
  if baseline == "batch":
    weights = calibrated - safe_div(jnp.sum(calibrated), jnp.sum(valid).astype(calibrated.dtype))
  elif baseline == "group":
    weights = shifted_moments(calibrated, group_ids, num_groups, valid).centred
  else:
    weights = calibrated
  weights = jax.lax.stop_gradient(jnp.where(valid, weights, 0))
  loss_sum = -jnp.sum(weights * seq_logp)
  denominator = jnp.sum(m)
  loss = with_nan(safe_div(loss_sum, denominator), poisoned)
  return loss, CgpoExtras(calibrated, weights, valid, loss_sum, denominator)


def crraft_loss(
  logp: Array,
  mask: Array,
  rewards: Array,
  baseline_rewards: Array,
  passed: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  kl: Optional[Array] = None,
  kl_threshold: Optional[float] = None,
  fallback: Optional[Array] = None,
) -> Tuple[Array, CgpoExtras]:
  """CRRAFT: fine-tune on the best judge-passing response of each prompt (batch-level).

  Xu et al., arXiv 2409.20370, "Calibrated-Regularized Reward Ranking Finetuning" (RAFT with the
  judges as a filter). Per prompt, the responses that pass every judge (and stay within the KL
  threshold) are ranked by their calibrated reward ``R = sigmoid(r - r_baseline)``; the best
  one is trained on with weight ``R``::

    L = -sum_{selected i} R_i log pi(y_i|x_i) / #selected

  (sequence log-prob; the TRL pull request cites this as the paper's Eq. 18). A prompt with no
  passing response falls back to its baseline response, if it is given as a row flagged in
  ``fallback`` and itself passes the judges and the KL threshold; its calibrated reward is
  ``sigmoid(0) = 0.5``. A prompt with neither contributes nothing (it is skipped, not counted).

  Reconstructed from the TRL pull request (``crraft_optimization``), not verified against the
  paper's equations: the hard KL filter ``KL_i <= KL_max``, the single best response per prompt
  (ties: the first row) and the fallback.

  Args:
    logp: float ``[B, T]`` token log-probs under the policy being optimised.
    mask: ``[B, T]`` response mask; masked tokens are not read.
    rewards: float ``[B]`` reward-model scores (ignored on ``fallback`` rows).
    baseline_rewards: float ``[B]`` the score of each row's prompt's baseline response.
    passed: bool ``[B]`` the response satisfies every judge of its task.
    group_ids: int ``[B]`` prompt of each row, in ``[0, num_groups)``.
    num_groups: static number of prompts.
    valid: optional bool ``[B]``; invalid rows (and, under jit, out-of-range group ids) are
      never selected.
    kl: optional float ``[B]`` sequence KL estimate of each response (detached).
    kl_threshold: ``KL_max`` (> 0), given exactly when ``kl`` is.
    fallback: optional bool ``[B]`` rows that are their prompt's baseline response.

  Returns:
    ``(loss, CgpoExtras)``. A NaN in a read input makes the loss NaN.
  """
  extra = [("fallback", fallback)] if fallback is not None else []
  valid, _, seq_logp, calibrated, poisoned = _check_cgpo_args(
    logp,
    mask,
    rewards,
    baseline_rewards,
    passed,
    group_ids,
    num_groups,
    valid,
    kl,
    kl_threshold,
    extra,
  )
  is_fallback = jnp.zeros_like(valid) if fallback is None else valid & fallback
  calibrated = jnp.where(is_fallback, jnp.where(valid & passed, 0.5, 0.0), calibrated)
  if kl is not None:
    calibrated = jnp.where(jax.lax.stop_gradient(kl) <= kl_threshold, calibrated, 0)
  calibrated = jax.lax.stop_gradient(jnp.where(valid, calibrated, 0))
  b = logp.shape[0]
  index = jnp.arange(b, dtype=jnp.int32)

  def first_best(candidate):
    score = jnp.where(candidate, calibrated, -1.0)
    best = jax.ops.segment_max(score, group_ids, num_groups)
    top = candidate & (calibrated > 0) & (score == best[group_ids])
    first = jax.ops.segment_min(jnp.where(top, index, b), group_ids, num_groups)
    return top & (index == first[group_ids]), jnp.maximum(best, 0)

  chosen, best = first_best(valid & ~is_fallback)
  backup, _ = first_best(is_fallback & (best[group_ids] <= 0))
  selected = chosen | backup
  weights = jnp.where(selected, calibrated, 0)
  loss_sum = -jnp.sum(weights * seq_logp)
  denominator = jnp.sum(selected).astype(logp.dtype)
  loss = with_nan(safe_div(loss_sum, denominator), poisoned)
  return loss, CgpoExtras(calibrated, weights, selected, loss_sum, denominator)
