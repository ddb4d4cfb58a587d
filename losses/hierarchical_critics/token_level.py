"""Token-level views of utterance-level quantities: the token stream of a dialogue, per-token
advantages and their normalisation."""

from typing import NamedTuple

import chex
import jax.numpy as jnp

from hrljax.losses import _checks, _masking, policy_gradient
from hrljax.losses.hierarchical_critics._common import Array

# ----------------------------------------------------------------------------------------------
# Token-level PPO on utterance-level transitions (the flat baseline of the ArCHer paper).
# ----------------------------------------------------------------------------------------------


class TokenStream(NamedTuple):
  """One trajectory of `T` utterances as `T * L` token steps, every field `[T * L]`: the inputs
  of `policy_gradient.generalized_advantage_estimation`."""

  reward: Array
  discount: Array
  value: Array
  next_value: Array
  lambda_: Array
  done: Array


def token_stream(
  reward: Array,
  terminated: Array,
  done: Array,
  value: Array,
  next_dialogue_value: Array,
  mask: Array,
  gamma: float,
  gae_lambda: float,
  token_gamma: float = 1.0,
) -> TokenStream:
  """Turns one trajectory of `T` utterances into `T * L` token steps (per trajectory).

  ArCHer (Zhou et al., arXiv 2402.19446) compares against flat token-level PPO (Schulman et al.,
  arXiv 1707.06347), where every token is an action; this is that MDP built from utterance-level
  transitions. Inside an utterance every read token (a prefix of the row, `mask`) is one action
  taken in the state "dialogue + the utterance's earlier tokens"; the utterance's reward arrives
  at its last read token. Unread tokens are not actions: reward 0, values 0, discount 1 and λ 1
  pass the next utterance's advantage through to the last read token unchanged.

  Discounts: `token_gamma` between the read tokens of an utterance (1: token-level returns equal
  the utterance-level returns of ArCHer's critic; `gamma`: plain token-level discounting) and
  `gamma · (1 − terminated)` from an utterance's last read token to the next utterance, so a
  termination cuts the bootstrap and a time-limit truncation bootstraps from the true next
  dialogue (`next_dialogue_value`). λ is `gae_lambda` after every read token; `done` (terminated
  or truncated) stops the recursion at the utterance's last read token.

  Args:
    reward, terminated, done: `[T]` utterance-level reward (float) and flags (bool or 0/1).
    value: float `[T, L]` V of the state before each token.
    next_dialogue_value: float `[T]` V of the true next dialogue (before any auto-reset).
    mask: bool `[T, L]`, the tokens the environment reads (a prefix of each row, at least one).
    gamma: utterance-level discount in [0, 1].
    gae_lambda: GAE λ in [0, 1].
    token_gamma: discount between the tokens of one utterance, in [0, 1].

  Returns:
    `TokenStream` of `[T * L]` arrays.
  """
  for name, rate in (("gamma", gamma), ("gae_lambda", gae_lambda), ("token_gamma", token_gamma)):
    _checks.discount(name, rate)
  chex.assert_rank([reward, terminated, done, value, next_dialogue_value, mask], [1, 1, 1, 2, 1, 2])
  chex.assert_type([reward, value, next_dialogue_value], float)
  chex.assert_equal_shape([value, mask])
  chex.assert_equal_shape([reward, terminated, done, next_dialogue_value, value[:, 0]])
  num_tokens = mask.shape[1]
  mask = mask.astype(bool)
  length = mask.sum(axis=1)
  is_last = jnp.arange(num_tokens)[None, :] == (length - 1)[:, None]
  # Within an utterance the successor of token j is the state before token j + 1.
  shifted = jnp.concatenate([value[:, 1:], jnp.zeros_like(value[:, :1])], axis=1)
  next_value = jnp.where(is_last, next_dialogue_value[:, None], shifted)
  last_discount = gamma * (1.0 - terminated.astype(jnp.float32))
  discount = jnp.where(is_last, last_discount[:, None], token_gamma)
  step_reward = jnp.where(is_last, reward[:, None], 0.0)
  return TokenStream(
    reward=jnp.where(mask, step_reward, 0.0).reshape(-1),
    discount=jnp.where(mask, discount, 1.0).reshape(-1),
    value=jnp.where(mask, value, 0.0).reshape(-1),
    next_value=jnp.where(mask, next_value, 0.0).reshape(-1),
    lambda_=jnp.where(mask, gae_lambda, 1.0).reshape(-1),
    done=(is_last & done.astype(bool)[:, None]).reshape(-1),
  )


def token_level_advantages(
  reward: Array,
  terminated: Array,
  done: Array,
  value: Array,
  next_dialogue_value: Array,
  mask: Array,
  gamma: float,
  gae_lambda: float,
  token_gamma: float = 1.0,
) -> Array:
  """Token-level GAE `[T, L]` of one trajectory of `T` utterances (0 on unread tokens).

  GAE (Schulman et al., arXiv 1506.02438, Eq. 16) over the `token_stream` of the trajectory:
  `policy_gradient.generalized_advantage_estimation` with the stream's per-token discounts and
  λ. Per trajectory (the caller vmaps over environments); arguments as in `token_stream`. The
  value targets are `advantages + value`.
  """
  num_steps, num_tokens = mask.shape
  stream = token_stream(
    reward, terminated, done, value, next_dialogue_value, mask, gamma, gae_lambda, token_gamma
  )
  advantage = policy_gradient.generalized_advantage_estimation(
    stream.reward, stream.discount, stream.value, stream.next_value, stream.lambda_, stream.done
  )
  return jnp.where(mask, advantage.reshape(num_steps, num_tokens), 0.0)


def normalize_token_advantages(advantage: Array, mask: Array, eps: float = 1e-8) -> Array:
  """(A − mean) / (std + eps) over the masked tokens (0 elsewhere): PPO's per-minibatch
  advantage standardisation (as in the reference PPO implementations) restricted to the tokens
  that are actions. Batch-level; any shape, `mask` of the same shape. Masked entries are not
  read (0 out, no gradient, whatever they hold)."""
  _checks.nonnegative("eps", eps)
  chex.assert_type(advantage, float)
  chex.assert_equal_shape([advantage, mask])
  (advantage,) = _masking.zero_masked(mask, advantage)
  mean = policy_gradient.masked_mean(advantage, mask)
  std = jnp.sqrt(policy_gradient.masked_mean(jnp.square(advantage - mean), mask))
  return jnp.where(mask, (advantage - mean) / (std + eps), 0.0)
