"""Shared pieces of the hierarchical-critic losses (private): extras, argument checks, masks."""

from typing import NamedTuple, Optional, Tuple

import chex
import jax.numpy as jnp

from hrljax.losses import _masking

Array = chex.Array

HEAD_MODES = ("per_head", "min")
BASELINE_DENOMINATORS = ("valid_tokens", "all_tokens")
FILTER_METHODS = ("quantile", "top_count")


# ----------------------------------------------------------------------------------------------
# Extras.
# ----------------------------------------------------------------------------------------------


class CriticExtras(NamedTuple):
  """Per-element quantities of a twin Q/V critic loss (E heads, B transitions)."""

  q_target: Array  # [E, B] y_e = r + γ(1 − terminated)·V̄(s')
  v_target: Array  # [E, B] z_e (a target-critic Q at a_π or at the data action)
  q_td_error: Array  # [E, B] y_e − Q_e(s, a)
  v_error: Array  # [E, B] z_e − V_e(s)
  q_head_loss: Array  # [E] masked batch mean of the Q term of head e
  v_head_loss: Array  # [E] masked batch mean of the V term of head e
  loss_sum: Array  # scalar: sum over valid examples of the per-example loss
  denominator: Array  # scalar: number of valid examples


class ActorExtras(NamedTuple):
  """Per-utterance quantities of the ArCHer REINFORCE actor loss."""

  advantage: Array  # [B] min_e Q_e(s, a_π) − min_e V_e(s), no gradient
  sequence_log_prob: Array  # [B] Σ_h mask_h·log π(a_π^h | s, a_π^{<h})
  num_tokens: Array  # [B] number of unmasked tokens
  loss_sum: Array  # scalar
  denominator: Array  # scalar: number of valid examples


class BaselineActorExtras(NamedTuple):
  """Per-token quantities of the ArCHer actor loss with a token-level baseline."""

  advantage: Array  # [B] utterance-level advantage, no gradient
  residual_advantage: Array  # [B, L] A − b_h on unmasked tokens, 0 elsewhere, no gradient
  pg_loss: Array  # scalar: policy-gradient term
  baseline_loss: Array  # scalar: masked MSE of the baseline onto A (before baseline_coef)
  pg_loss_sum: Array  # scalar
  pg_denominator: Array  # scalar: number of valid examples
  baseline_loss_sum: Array  # scalar
  baseline_denominator: Array  # scalar: valid tokens, or valid examples × L


class AWRActorExtras(NamedTuple):
  """Per-utterance quantities of the Offline ArCHer advantage-weighted actor loss."""

  advantage: Array  # [B] min_e Q_e(s, a_data) − min_e V_e(s), no gradient
  weight: Array  # [B] min(exp(β·A), w_max), no gradient
  sequence_log_prob: Array  # [B]
  loss_sum: Array  # scalar
  denominator: Array  # scalar


class BCExtras(NamedTuple):
  """Per-utterance quantities of the (filtered) behaviour-cloning loss."""

  sequence_log_prob: Array  # [B]
  keep: Array  # [B] bool: example counted (kept by the filter and valid)
  loss_sum: Array  # scalar
  denominator: Array  # scalar: number of kept examples


# ----------------------------------------------------------------------------------------------
# Validation of Python-valued arguments and shared shape checks.
# ----------------------------------------------------------------------------------------------


def _check_ensemble(*arrays: Array) -> None:
  """Critic outputs: float, rank 2 ([E, B]), all of one shape."""
  chex.assert_rank(arrays, 2)
  chex.assert_type(arrays, float)
  chex.assert_equal_shape(arrays)


def _valid_mask(valid: Optional[Array], batch_size: int) -> Array:
  """Bool [B] example mask; all True when `valid` is None."""
  if valid is None:
    return jnp.ones((batch_size,), dtype=bool)
  chex.assert_rank(valid, 1)
  chex.assert_shape(valid, (batch_size,))
  return jnp.asarray(valid) != 0


def _token_mask(token_logp: Array, token_mask: Array) -> Array:
  """Checks a `[B, L]` log-prob array and its mask; returns the mask as bool."""
  chex.assert_rank([token_logp, token_mask], 2)
  chex.assert_type(token_logp, float)
  chex.assert_equal_shape([token_logp, token_mask])
  return jnp.asarray(token_mask) != 0


def _masked_mean(per_example: Array, valid: Array) -> Tuple[Array, Array, Array]:
  """(mean, sum, count) of `per_example` over `valid`; the mean of an empty batch is 0."""
  loss_sum = jnp.sum(jnp.where(valid, per_example, 0.0))
  denominator = jnp.sum(valid).astype(per_example.dtype)
  return loss_sum / jnp.maximum(denominator, 1.0), loss_sum, denominator


def _zero_invalid_transitions(
  valid: Array, q: Array, v: Array, v_next_tgt: Array, q_tgt: Array, r: Array, terminated: Array
) -> Tuple[Array, ...]:
  """The critic inputs with zeros at invalid transitions (`valid` [B]; `[E, B]` critics, `[B]`
  rewards and flags), so that whatever an invalid transition holds is never read."""
  chex.assert_rank([r, terminated], 1)
  chex.assert_equal_shape([r, terminated, valid])
  critics = _masking.zero_masked(valid[None, :], q, v, v_next_tgt, q_tgt)
  return critics + _masking.zero_masked(valid, r, jnp.asarray(terminated))


def _sequence_log_prob(token_logp: Array, mask: Array) -> Array:
  # `where`, not `*`: padded positions may hold -inf or NaN (log of a zero probability), and
  # 0 * -inf would poison both the sum and its gradient.
  return jnp.sum(jnp.where(mask, token_logp, 0.0), axis=-1)


def _reduce_heads(values: Array, heads: str) -> Array:
  """Per-head targets ([E, B]) or their min over heads broadcast back to [E, B]."""
  if heads == "per_head":
    return values
  return jnp.broadcast_to(jnp.min(values, axis=0, keepdims=True), values.shape)
