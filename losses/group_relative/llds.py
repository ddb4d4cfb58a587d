"""LLDS: a likelihood-preserving regulariser against lazy likelihood displacement in GRPO.

Deng, Li, Gong, Ren, Thrampoulidis, Li, "On GRPO Collapse in Search-R1: The Lazy
Likelihood-Displacement Death Spiral" (later titled "On Group Relative Policy Optimization
Collapse in Agent Search: The Lazy Likelihood-Displacement"), arXiv 2512.04220.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import safe_div, with_nan

Array = chex.Array


class LldsExtras(NamedTuple):
  per_token_loss: Array  # [B, T] coef_t * max(0, old_logp - logp) on gated tokens, else 0
  gated: (
    Array  # bool [B, T] tokens of the preserving set whose action (or response) lost likelihood
  )
  loss_sum: Array  # scalar numerator
  denominator: Array  # scalar number of unmasked tokens


_LLDS_GATES = ("action", "response")


def llds_loss(
  logp: Array,
  old_logp: Array,
  advantages: Array,
  mask: Array,
  *,
  coef: float = 0.2,
  gate: str = "action",
  answer_mask: Optional[Array] = None,
  answer_coef: Optional[float] = None,
) -> Tuple[Array, LldsExtras]:
  """LLDS regulariser: penalise likelihood drops of preserved actions that lost likelihood.

  Deng et al., arXiv 2512.04220. Only the abstract of the paper could be read here (its
  equation numbers are not cited for that reason); the formula follows the authors' code,
  vengdeng/LLDS-On-Group-Relative-Policy-Optimization-Collapse-in-Search-R1 @c19a094,
  ``verl/workers/actor/dp_actor.py::update_policy`` (the ``no_reduce`` terms), and is added to
  the GRPO loss::

    L = coef * sum_t g_t * max(0, log pi_old(y_t) - log pi_theta(y_t)) / #tokens

  The preserving set is the unmasked tokens with ``A_t >= 0``. The gate ``g_t`` (detached)
  opens the penalty only where likelihood fell:

  * ``gate="action"`` (the authors' "A-gate", their training script's setting and best result):
    an action is a maximal run of consecutive preserved tokens (in tool-integrated RL the
    response mask excludes tool outputs, so each turn of the model is one run); ``g_t = 1`` on
    the tokens of an action whose summed ``log pi_old - log pi_theta`` is > 0.
  * ``gate="response"`` (the "R-gate"): ``g_t = 1`` on every preserved token of a response whose
    summed ``log pi_old - log pi_theta`` over its preserved tokens is > 0.

  Within an open gate only tokens whose own likelihood fell are penalised (the ``max``); its
  gradient raises exactly those log-probs. The token mean runs over all unmasked tokens of the
  batch, negative-advantage ones included (the code's ``masked_mean``).

  ``answer_mask`` reproduces the code's answer-region coefficient (its ``MASK_ANS`` option,
  presumably the LLDS-MA variant that summaries of the paper mention):
  answer tokens get ``min(answer_coef, coef)``. The code marks the answer region with 0 in its
  ``answer_mask``; here ``answer_mask`` is True on answer tokens. The code's
  ``mask_adaptive`` scaling of that coefficient by a search-count statistic belongs to the
  trainer: pass the scaled ``answer_coef``. Its ``reduce_threshold`` option is read by no code
  path at @c19a094 (the gates compare with 0), so it is not offered.

  Args:
    logp: float ``[B, T]`` log-probs under the policy being optimised.
    old_logp: float ``[B, T]`` under the behaviour policy (no gradient).
    advantages: float ``[B, T]`` token advantages (detached; ``broadcast_to_tokens`` of GRPO's).
    mask: ``[B, T]`` loss mask (bool or 0/1; tool-output tokens masked). Masked tokens are not
      read, whatever the arrays hold there.
    coef: ``lambda`` (>= 0; the authors' script uses 0.2).
    gate: ``"action"`` or ``"response"``.
    answer_mask: optional ``[B, T]`` bool/0-1, True on answer tokens.
    answer_coef: their coefficient, ``min(answer_coef, coef)`` (>= 0); required with
      ``answer_mask``.

  Returns:
    ``(loss, LldsExtras)``; the loss is 0 when no likelihood fell. A NaN in a read input makes
    the loss NaN (the gates would otherwise hide it).
  """
  _checks.nonnegative("coef", coef)
  _checks.choice("gate", gate, _LLDS_GATES)
  arrays = [logp, old_logp, advantages, mask]
  if answer_mask is not None:
    arrays.append(answer_mask)
    if answer_coef is None:
      _checks.fail("answer_coef", "a float >= 0 with answer_mask", answer_coef)
    _checks.nonnegative("answer_coef", answer_coef)
  chex.assert_rank(arrays, 2)
  chex.assert_equal_shape(arrays)
  chex.assert_type([logp, old_logp, advantages], float)
  read = jnp.asarray(mask) != 0
  poisoned = jnp.any(read & (jnp.isnan(logp) | jnp.isnan(old_logp) | jnp.isnan(advantages)))
  logp, old_logp, advantages = _masking.zero_masked(read, logp, old_logp, advantages)
  old_logp = jax.lax.stop_gradient(old_logp)
  a = jax.lax.stop_gradient(advantages)
  preserved = read & (a >= 0)
  drop = old_logp - logp
  fell = jax.lax.stop_gradient(jnp.where(preserved, drop, 0))
  b, t = logp.shape
  if gate == "response":
    gated = preserved & (jnp.sum(fell, axis=1, keepdims=True) > 0)
  else:
    previous = jnp.concatenate([jnp.zeros((b, 1), bool), preserved[:, :-1]], axis=1)
    start = preserved & ~previous
    chunk = jnp.cumsum(start.astype(jnp.int32), axis=1) * preserved  # 1..K on runs, 0 outside
    flat = (jnp.arange(b, dtype=jnp.int32)[:, None] * (t + 1) + chunk).reshape(-1)
    chunk_drop = jax.ops.segment_sum(fell.reshape(-1), flat, b * (t + 1))
    gated = preserved & (chunk_drop[flat].reshape(b, t) > 0)
  coef_map = jnp.full(logp.shape, coef, logp.dtype)
  if answer_mask is not None:
    coef_map = jnp.where(jnp.asarray(answer_mask) != 0, min(answer_coef, coef), coef_map)
  per_token = jnp.where(gated, coef_map * jnp.maximum(drop, 0), 0)
  loss_sum = jnp.sum(per_token)
  denominator = jnp.sum(read).astype(logp.dtype)
  loss = with_nan(safe_div(loss_sum, denominator), poisoned)
  return loss, LldsExtras(per_token, gated, loss_sum, denominator)
