"""Tests of hrljax.losses.soft_actor_critic: the soft Q target and the critic, actor and
temperature objectives against hand-computed vectors, their gradients and their argument checks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import soft_actor_critic as soft_ac


def variants(fn):
  """The function itself and its jitted version (the losses are pure functions of arrays)."""
  return [fn, jax.jit(fn)]


R_T = np.array([1.0, -0.5, 2.0], np.float32)
DISCOUNT_T = np.array([0.99, 0.0, 0.99], np.float32)  # the second transition terminated
Q_T = np.array([[1.0, 2.0, -1.0], [1.5, 0.5, -2.0]], np.float32)  # [K=2, B=3]
LOG_PROB_T = np.array([-1.0, 0.5, 2.0], np.float32)
ALPHA = np.float32(0.2)
# By hand: min_k Q = [1.0, 0.5, -2.0]; minus α·log π = [1.2, 0.4, -2.4];
# y = [1 + 0.99·1.2, −0.5 + 0, 2 + 0.99·(−2.4)].
EXPECTED_TARGET = np.array([2.188, -0.5, -0.376])


@pytest.mark.parametrize("fn", variants(soft_ac.soft_q_target))
def test_soft_q_target_hand_computed(fn):
  target = fn(R_T, DISCOUNT_T, Q_T, LOG_PROB_T, ALPHA)
  np.testing.assert_allclose(target, EXPECTED_TARGET, rtol=1e-6)


def test_soft_q_target_carries_no_gradient_unless_asked():
  def total(q_t, log_prob_t, alpha, stop):
    return soft_ac.soft_q_target(
      R_T, DISCOUNT_T, q_t, log_prob_t, alpha, stop_target_gradients=stop
    ).sum()

  grads = jax.grad(total, argnums=(0, 1, 2))(Q_T, LOG_PROB_T, ALPHA, True)
  assert all(float(jnp.abs(g).sum()) == 0.0 for g in grads)
  d_q, d_log_prob, d_alpha = jax.grad(total, argnums=(0, 1, 2))(Q_T, LOG_PROB_T, ALPHA, False)
  # dy/dQ_k = discount where k is the minimum; dy/dlog π = −α·discount; dy/dα = −Σ discount·log π.
  np.testing.assert_allclose(d_q, [[0.99, 0.0, 0.0], [0.0, 0.0, 0.99]], rtol=1e-6)
  np.testing.assert_allclose(d_log_prob, [-0.198, 0.0, -0.198], rtol=1e-6)
  np.testing.assert_allclose(d_alpha, -(0.99 * -1.0 + 0.99 * 2.0), rtol=1e-6)


Q_TM1 = np.array([[1.0, 0.0, 0.5], [2.0, -1.0, 0.0]], np.float32)


@pytest.mark.parametrize("fn", variants(soft_ac.critic_loss))
def test_critic_loss_hand_computed(fn):
  loss, extras = fn(Q_TM1, EXPECTED_TARGET.astype(np.float32))
  # TD errors y − Q: [[1.188, −0.5, −0.876], [0.188, 0.5, −0.376]]; squares summed over the
  # critics: [1.446688, 0.5, 0.908752]; ½·mean = 0.4759067.
  np.testing.assert_allclose(
    extras.td_error, [[1.188, -0.5, -0.876], [0.188, 0.5, -0.376]], rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(loss, 0.4759067, rtol=1e-5)


def test_critic_loss_gradient_is_the_td_error_over_the_batch_size():
  target = EXPECTED_TARGET.astype(np.float32)
  grad = jax.grad(lambda q: soft_ac.critic_loss(q, target)[0])(Q_TM1)
  np.testing.assert_allclose(grad, (Q_TM1 - target[None, :]) / 3.0, rtol=1e-5, atol=1e-6)


LOG_PROB = np.array([-1.0, 0.5], np.float32)
Q_PI = np.array([[1.0, 3.0], [2.0, -1.0]], np.float32)


@pytest.mark.parametrize("fn", variants(soft_ac.actor_loss))
def test_actor_loss_hand_computed(fn):
  # α = 0.5. min: Q = [1, −1] -> [0.5·(−1) − 1, 0.5·0.5 + 1] = [−1.5, 1.25], mean −0.125.
  loss, extras = fn(LOG_PROB, Q_PI, np.float32(0.5))
  np.testing.assert_allclose(loss, -0.125, rtol=1e-6)
  np.testing.assert_allclose(extras.q_value, [1.0, -1.0])


def test_actor_loss_mean_reduction_hand_computed():
  # mean: Q = [1.5, 1.0] -> [−0.5 − 1.5, 0.25 − 1.0] = [−2.0, −0.75], mean −1.375.
  loss, _ = soft_ac.actor_loss(LOG_PROB, Q_PI, np.float32(0.5), q_reduction="mean")
  np.testing.assert_allclose(loss, -1.375, rtol=1e-6)


def test_actor_loss_gradients():
  d_log_prob, d_q, d_alpha = jax.grad(
    lambda lp, q, a: soft_ac.actor_loss(lp, q, a)[0], argnums=(0, 1, 2)
  )(LOG_PROB, Q_PI, np.float32(0.5))
  np.testing.assert_allclose(d_log_prob, [0.25, 0.25])  # α / B
  np.testing.assert_allclose(d_q, [[-0.5, 0.0], [0.0, -0.5]])  # −1/B at each argmin
  assert float(d_alpha) == 0.0  # α is trained by its own objective only


@pytest.mark.parametrize(
  "form, expected_loss, expected_grad",
  [
    # entropy gap −log π − H̄ with H̄ = −1: [2, 1, 0.5], mean 7/6.
    ("alpha", 0.5 * 7 / 6, 0.5 * 7 / 6),  # J = α·gap, dJ/dlog α = α·gap
    ("log_alpha", math.log(0.5) * 7 / 6, 7 / 6),  # J = log α·gap, dJ/dlog α = gap
  ],
)
def test_temperature_loss_hand_computed(form, expected_loss, expected_grad):
  log_prob = np.array([-1.0, 0.0, 0.5], np.float32)
  log_alpha = np.float32(math.log(0.5))

  def loss(log_alpha, log_prob):
    return soft_ac.temperature_loss(log_alpha, log_prob, -1.0, form)[0]

  value = jax.jit(loss)(log_alpha, log_prob)
  d_log_alpha, d_log_prob = jax.grad(loss, argnums=(0, 1))(log_alpha, log_prob)
  np.testing.assert_allclose(value, expected_loss, rtol=1e-6)
  np.testing.assert_allclose(d_log_alpha, expected_grad, rtol=1e-6)
  assert float(jnp.abs(d_log_prob).sum()) == 0.0


def test_temperature_rises_when_entropy_is_below_target():
  """A gradient step on log α increases α when −log π < H̄ and decreases it when above."""
  for form in soft_ac.ALPHA_LOSS_FORMS:
    grad = lambda log_prob: jax.grad(
      lambda la: soft_ac.temperature_loss(la, log_prob, -1.0, form)[0]
    )(np.float32(0.0))
    assert float(grad(np.array([2.0, 3.0], np.float32))) < 0.0  # entropy −2.5 < −1: raise α
    assert float(grad(np.array([-2.0, -3.0], np.float32))) > 0.0


def test_objectives_reject_bad_shapes_types_and_modes():
  with pytest.raises(AssertionError):
    soft_ac.soft_q_target(R_T, DISCOUNT_T, Q_T[0], LOG_PROB_T, ALPHA)  # Q without the critic axis
  with pytest.raises(AssertionError):
    soft_ac.soft_q_target(R_T[:2], DISCOUNT_T, Q_T, LOG_PROB_T, ALPHA)
  with pytest.raises(AssertionError):
    soft_ac.critic_loss(Q_TM1.astype(np.int32), EXPECTED_TARGET.astype(np.float32))
  with pytest.raises(AssertionError):
    soft_ac.actor_loss(LOG_PROB, Q_PI, np.ones(2, np.float32))  # α must be a scalar
  with pytest.raises(ValueError, match="q_reduction: expected one of"):
    soft_ac.actor_loss(LOG_PROB, Q_PI, np.float32(0.5), q_reduction="max")
  with pytest.raises(ValueError, match="form: expected one of"):
    soft_ac.temperature_loss(np.float32(0.0), LOG_PROB, -1.0, form="alpha2")
  with pytest.raises(ValueError, match="target_entropy: expected a finite float"):
    soft_ac.temperature_loss(np.float32(0.0), LOG_PROB, float("nan"))
