"""Soft actor-critic: the soft Q target and the critic, actor and temperature objectives.

Haarnoja, Zhou, Abbeel, Levine, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep Reinforcement
Learning with a Stochastic Actor", arXiv:1801.01290 (Section 4.2: soft policy iteration with a
parameterised soft Q function and a reparameterised policy; two Q functions, the minimum in the
value); Haarnoja, Zhou, Hartikainen, Tucker, Ha, Tan, Kumar, Zhu, Gupta, Abbeel, Levine, "Soft
Actor-Critic Algorithms and Applications", arXiv:1812.05905 (the form used here, without a
separate value network: Eq. 3 soft value, Eq. 5 critic objective, Eq. 7 actor objective, Eq. 18
temperature objective with target entropy H̄; Section 5 the twin critics).

All functions are batch-level over one batch axis `B` (a replay batch of independent
transitions), with the `K` critics of an ensemble on a leading axis: `q_t` is `[K, B]`.
`discount_t` is γ·(1 − terminated): a time-limit truncation keeps γ and bootstraps from the true
successor. Targets carry no gradient unless `stop_target_gradients=False`; the temperature α
never receives a gradient from the critic or actor objectives (it has its own).
"""

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks

Array = chex.Array

ALPHA_LOSS_FORMS = ("alpha", "log_alpha")
Q_REDUCTIONS = ("min", "mean")


class CriticExtras(NamedTuple):
  td_error: Array  # [K, B]: target − Q_k(s, a)
  q_value: Array  # [K, B]


class ActorExtras(NamedTuple):
  q_value: Array  # [B]: the reduced Q(s, ã) the actor maximises
  log_prob: Array  # [B]: log π(ã|s)


class TemperatureExtras(NamedTuple):
  entropy_gap: Array  # [B]: −log π(ã|s) − H̄, the (sampled) entropy above the target


def soft_q_target(
  r_t: Array,
  discount_t: Array,
  q_t: Array,
  log_prob_t: Array,
  alpha: Array,
  stop_target_gradients: bool = True,
) -> Array:
  """The soft Bellman target y = r + discount·(min_k Q̄_k(s', a') − α·log π(a'|s')), a' ~ π(·|s').

  arXiv:1812.05905 Eq. 3 and 5 (the soft value of the next state under the current policy,
  estimated with one sample a'), with the minimum over the target critics (Section 5).

  Args:
    r_t: rewards, float `[B]`.
    discount_t: γ·(1 − terminated), float `[B]` (truncation keeps γ).
    q_t: target critics at (s', a'), float `[K, B]`.
    log_prob_t: log π(a'|s'), float `[B]`.
    alpha: temperature α, float scalar.
    stop_target_gradients: the target carries no gradient unless False.

  Returns:
    the targets, float `[B]`.
  """
  chex.assert_rank([r_t, discount_t, q_t, log_prob_t, alpha], [1, 1, 2, 1, 0])
  chex.assert_type([r_t, discount_t, q_t, log_prob_t], float)
  chex.assert_equal_shape([r_t, discount_t, log_prob_t, q_t[0]])
  next_value = jnp.min(q_t, axis=0) - alpha * log_prob_t
  target = r_t + discount_t * next_value
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def critic_loss(q_tm1: Array, target: Array) -> tuple[Array, CriticExtras]:
  """J_Q = E_B[Σ_k ½ (Q_k(s, a) − y)²] (arXiv:1812.05905 Eq. 5), summed over the K critics.

  The mean over B. `target` should come from `soft_q_target` (no gradient).

  Args:
    q_tm1: the critics at the replayed (s, a), float `[K, B]`.
    target: y, float `[B]`.
  """
  chex.assert_rank([q_tm1, target], [2, 1])
  chex.assert_type([q_tm1, target], float)
  chex.assert_equal_shape([q_tm1[0], target])
  td_error = target[None, :] - q_tm1
  loss = 0.5 * jnp.mean(jnp.sum(jnp.square(td_error), axis=0))
  return loss, CriticExtras(td_error=td_error, q_value=q_tm1)


def actor_loss(
  log_prob: Array, q_value: Array, alpha: Array, q_reduction: str = "min"
) -> tuple[Array, ActorExtras]:
  """J_π = E_B[α·log π(ã|s) − Q(s, ã)] with ã = f(ε; s) reparameterised (arXiv:1812.05905 Eq. 7).

  The mean over B. Q is the `min` over the K critics (the paper) or their `mean` (softlearning's
  current code). α carries no gradient here.

  Args:
    log_prob: log π(ã|s) of reparameterised samples, float `[B]`.
    q_value: the critics at (s, ã), float `[K, B]`.
    alpha: temperature α, float scalar.
    q_reduction: "min" or "mean".
  """
  _checks.choice("q_reduction", q_reduction, Q_REDUCTIONS)
  chex.assert_rank([log_prob, q_value, alpha], [1, 2, 0])
  chex.assert_type([log_prob, q_value], float)
  chex.assert_equal_shape([log_prob, q_value[0]])
  q = jnp.min(q_value, axis=0) if q_reduction == "min" else jnp.mean(q_value, axis=0)
  loss = jnp.mean(jax.lax.stop_gradient(alpha) * log_prob - q)
  return loss, ActorExtras(q_value=q, log_prob=log_prob)


def temperature_loss(
  log_alpha: Array, log_prob: Array, target_entropy: float, form: str = "alpha"
) -> tuple[Array, TemperatureExtras]:
  """J(α) = E_B[−α·(log π(ã|s) + H̄)] (arXiv:1812.05905 Eq. 18), a function of log α.

  The mean over B. `form="alpha"` is Eq. 18 with α = exp(log α) (its gradient in log α is
  −α·(log π + H̄)); `form="log_alpha"` puts log α in place of α (early softlearning,
  Stable-Baselines3: gradient −(log π + H̄)). Both push α up while the policy's entropy −log π is
  below H̄. `log_prob` carries no gradient.

  Args:
    log_alpha: log α, float scalar (the trained parameter).
    log_prob: log π(ã|s) of fresh samples, float `[B]`.
    target_entropy: H̄, a Python float (−|A| in the paper).
    form: "alpha" or "log_alpha".
  """
  _checks.choice("form", form, ALPHA_LOSS_FORMS)
  _checks.number("target_entropy", target_entropy)
  chex.assert_rank([log_alpha, log_prob], [0, 1])
  chex.assert_type([log_alpha, log_prob], float)
  entropy_gap = -jax.lax.stop_gradient(log_prob) - target_entropy
  coefficient = jnp.exp(log_alpha) if form == "alpha" else log_alpha
  loss = jnp.mean(coefficient * entropy_gap)
  return loss, TemperatureExtras(entropy_gap=entropy_gap)
