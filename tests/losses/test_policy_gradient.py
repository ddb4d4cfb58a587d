"""Tests of hrljax.losses.policy_gradient: hand-computed vectors, properties, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from hrljax.losses import policy_gradient as pg

VARIANTS = pytest.mark.parametrize("transform", [lambda f: f, jax.jit], ids=["nojit", "jit"])


def _gae_numpy(r, discount, v_tm1, v_t, lam, done):
  """Backward recursion in float64, written independently of the library."""
  advantages = np.zeros(len(r))
  next_adv = 0.0
  for t in reversed(range(len(r))):
    delta = r[t] + discount[t] * v_t[t] - v_tm1[t]
    next_adv = delta + discount[t] * lam * (1.0 - done[t]) * next_adv
    advantages[t] = next_adv
  return advantages


# ------------------------------------------------------------------------------------------- GAE


@VARIANTS
def test_gae_matches_rlax_without_truncation(transform):
  rng = np.random.default_rng(0)
  values = rng.normal(size=9).astype(np.float32)
  r = rng.normal(size=8).astype(np.float32)
  discount = np.array([0.9, 0.9, 0.0, 0.9, 0.9, 0.9, 0.0, 0.9], np.float32)
  ours = transform(pg.generalized_advantage_estimation)(r, discount, values[:-1], values[1:], 0.8)
  theirs = rlax.truncated_generalized_advantage_estimation(r, discount, 0.8, values)
  np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_gae_truncation_bootstraps_from_final_observation_and_cuts_recursion():
  # Step 1 is a time-limit truncation: its successor value is V(final obs) = 10, discounted by
  # gamma, and step 0's advantage must not see through the boundary into step 2's episode.
  r = np.array([1.0, 1.0, 1.0], np.float32)
  v_tm1 = np.array([0.5, 0.5, 0.5], np.float32)
  v_t = np.array([0.5, 10.0, 0.5], np.float32)
  discount = np.array([0.9, 0.9, 0.9], np.float32)
  done = np.array([False, True, False])
  adv = pg.generalized_advantage_estimation(r, discount, v_tm1, v_t, 0.95, done)
  expected = _gae_numpy(r, discount, v_tm1, v_t, 0.95, done)
  np.testing.assert_allclose(adv, expected, rtol=1e-6)
  np.testing.assert_allclose(adv[1], 1.0 + 0.9 * 10.0 - 0.5, rtol=1e-6)
  # Termination: zero discount, no bootstrap at all.
  terminated = pg.generalized_advantage_estimation(
    r, np.array([0.9, 0.0, 0.9], np.float32), v_tm1, v_t, 0.95, done
  )
  np.testing.assert_allclose(terminated[1], 1.0 - 0.5, rtol=1e-6)


def test_gae_hand_computed_two_steps():
  # delta0 = 1 + 0.5*2 - 1 = 1; delta1 = 0 + 0.5*3 - 2 = -0.5; A1 = -0.5; A0 = 1 + 0.5*0.5*(-0.5)
  adv = pg.generalized_advantage_estimation(
    jnp.array([1.0, 0.0]), jnp.array([0.5, 0.5]), jnp.array([1.0, 2.0]), jnp.array([2.0, 3.0]), 0.5
  )
  np.testing.assert_allclose(adv, [0.875, -0.5], rtol=1e-6)


def test_gae_lambda_zero_is_td_error_and_one_is_monte_carlo():
  rng = np.random.default_rng(1)
  r, v_tm1 = rng.normal(size=5).astype(np.float32), rng.normal(size=5).astype(np.float32)
  v_t = np.concatenate([v_tm1[1:], [0.0]]).astype(np.float32)
  discount = np.full(5, 0.9, np.float32)
  td = pg.generalized_advantage_estimation(r, discount, v_tm1, v_t, 0.0)
  np.testing.assert_allclose(td, r + 0.9 * v_t - v_tm1, rtol=1e-5, atol=1e-6)
  mc = pg.generalized_advantage_estimation(r, discount, v_tm1, v_t, 1.0)
  returns = np.array([sum(0.9**k * r[t + k] for k in range(5 - t)) for t in range(5)])
  np.testing.assert_allclose(mc + v_tm1, returns, rtol=1e-5, atol=1e-5)


def test_gae_gradient_stopped_by_default():
  def f(v, stop):
    return pg.generalized_advantage_estimation(
      jnp.ones(3), jnp.full(3, 0.9), v, v, 0.9, stop_target_gradients=stop
    ).sum()

  assert float(jnp.abs(jax.grad(f)(jnp.ones(3), True)).sum()) == 0.0
  assert float(jnp.abs(jax.grad(f)(jnp.ones(3), False)).sum()) > 0.0


def test_gae_bad_inputs():
  with pytest.raises(AssertionError):
    pg.generalized_advantage_estimation(
      jnp.ones((3, 2)), jnp.ones(3), jnp.ones(3), jnp.ones(3), 0.9
    )
  with pytest.raises(AssertionError):
    pg.generalized_advantage_estimation(jnp.ones(3), jnp.ones(4), jnp.ones(3), jnp.ones(3), 0.9)
  with pytest.raises(AssertionError):
    pg.generalized_advantage_estimation(
      jnp.ones(3, jnp.int32), jnp.ones(3), jnp.ones(3), jnp.ones(3), 0.9
    )


# ------------------------------------------------------------------------------------ surrogate

RATIOS = np.array([0.5, 0.9, 1.0, 1.25, 1.5, 5.0], np.float32)


@VARIANTS
def test_clipped_surrogate_vector_with_dual_clip(transform):
  """Hand-computed: eps_low 0.2, eps_high 0.28, c = 3."""
  fn = transform(
    lambda lp, olp, a: pg.clipped_surrogate_loss(
      lp, olp, a, epsilon=0.2, epsilon_high=0.28, dual_clip=3.0
    )[0]
  )
  logp = jnp.log(RATIOS)
  zeros = jnp.zeros_like(logp)
  np.testing.assert_allclose(
    fn(logp, zeros, jnp.ones_like(logp)), [-0.5, -0.9, -1.0, -1.25, -1.28, -1.28], rtol=1e-5
  )
  np.testing.assert_allclose(
    fn(logp, zeros, -jnp.ones_like(logp)), [0.8, 0.9, 1.0, 1.25, 1.5, 3.0], rtol=1e-5
  )


def test_clipped_surrogate_symmetric_and_extras():
  logp = jnp.log(jnp.array([0.5, 1.0, 1.5]))
  loss, extras = pg.clipped_surrogate_loss(logp, jnp.zeros(3), jnp.array([-2.0, 1.0, 1.0]))
  # A=-2, rho=0.5: max(1.0, 1.6) = 1.6 (clipped at 0.8); rho=1: -1; rho=1.5, A=1: -1.2 (clipped)
  np.testing.assert_allclose(loss, [1.6, -1.0, -1.2], rtol=1e-6)
  np.testing.assert_allclose(extras.clipped, [1.0, 0.0, 1.0])
  np.testing.assert_allclose(extras.ratio, [0.5, 1.0, 1.5], rtol=1e-6)
  np.testing.assert_allclose(extras.approx_kl, -logp, rtol=1e-6)


def test_log_ratio_clamp_keeps_ratio_finite():
  loss, extras = pg.clipped_surrogate_loss(jnp.array([50.0]), jnp.array([0.0]), jnp.array([-1.0]))
  assert np.isfinite(loss).all()
  np.testing.assert_allclose(extras.ratio, [np.exp(20.0)], rtol=1e-5)


def test_on_policy_surrogate_gradient_is_reinforce():
  """With old_logp = sg(logp) the ratio is 1 and the gradient is -A * grad(logp)."""
  logits = jnp.array([0.3, -0.2, 0.1])
  actions = jnp.array([0, 2])
  advantages = jnp.array([1.5, -0.5])

  def surrogate(l):
    logp = jax.nn.log_softmax(l)[actions]
    return pg.clipped_surrogate_loss(logp, jax.lax.stop_gradient(logp), advantages)[0].sum()

  def reinforce(l):
    return -(advantages * jax.nn.log_softmax(l)[actions]).sum()

  np.testing.assert_allclose(jax.grad(surrogate)(logits), jax.grad(reinforce)(logits), rtol=1e-6)


def test_surrogate_no_gradient_into_old_logp_or_advantages():
  def f(old_logp, adv):
    return pg.clipped_surrogate_loss(jnp.array([0.1, -0.3]), old_logp, adv)[0].sum()

  g_old, g_adv = jax.grad(f, argnums=(0, 1))(jnp.array([0.0, 0.0]), jnp.array([1.0, -1.0]))
  assert float(jnp.abs(g_old).sum()) == 0.0 and float(jnp.abs(g_adv).sum()) == 0.0


def test_surrogate_bad_inputs():
  with pytest.raises(ValueError, match="epsilon"):
    pg.clipped_surrogate_loss(jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), epsilon=-0.1)
  with pytest.raises(ValueError, match="dual_clip"):
    pg.clipped_surrogate_loss(jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), dual_clip=0.5)
  with pytest.raises(AssertionError):
    pg.clipped_surrogate_loss(jnp.zeros(2), jnp.zeros(3), jnp.zeros(2))
  with pytest.raises(AssertionError):
    pg.clipped_surrogate_loss(jnp.zeros(2, jnp.int32), jnp.zeros(2), jnp.zeros(2))


def test_sequence_log_ratio_vector():
  logp = jnp.array([[-1.0, -2.0, -0.5, 0.0]])
  old = jnp.array([[-1.1, -1.8, -0.5, 9.0]])
  mask = jnp.array([[1, 1, 1, 0]])
  np.testing.assert_allclose(jnp.exp(pg.sequence_log_ratio(logp, old, mask)), [0.967216], rtol=1e-5)


# ---------------------------------------------------------------------------------- value, KL


def test_value_loss_plain_and_clipped():
  v, target, old = jnp.array([1.0, 3.0]), jnp.array([2.0, 0.0]), jnp.array([0.0, 2.0])
  np.testing.assert_allclose(pg.value_loss(v, target), [0.5, 4.5])
  # clipped value: old + clip(v - old, ±0.2) = [0.2, 2.2]; errors [1.8^2, 2.2^2] vs [1, 9]
  np.testing.assert_allclose(
    pg.value_loss(v, target, old, clip_epsilon=0.2), [0.5 * 1.8**2, 4.5], rtol=1e-6
  )
  with pytest.raises(ValueError, match="old_value"):
    pg.value_loss(v, target, clip_epsilon=0.2)


@VARIANTS
def test_kl_vector(transform):
  logp, ref = jnp.log(jnp.array([0.5])), jnp.log(jnp.array([0.25]))
  for estimator, expected in [
    ("k1", 0.693147),
    ("k2", 0.240227),
    ("k3", 0.193147),
    ("abs", 0.693147),
  ]:
    value = transform(lambda a, b: pg.kl_divergence(a, b, estimator))(logp, ref)  # noqa: B023
    np.testing.assert_allclose(value, [expected], rtol=1e-5)


def test_kl_properties_and_straight_through():
  logp = jnp.linspace(-3.0, 0.0, 7)
  ref = jnp.linspace(0.0, -3.0, 7)
  assert (pg.kl_divergence(logp, ref, "k3") >= 0).all()
  for estimator in ("k1", "k2", "k3"):
    np.testing.assert_allclose(pg.kl_divergence(logp, logp, estimator), 0.0, atol=1e-7)
  np.testing.assert_allclose(
    pg.kl_divergence(logp, ref, "k3+"), pg.kl_divergence(logp, ref, "k3"), rtol=1e-6
  )
  grad = lambda est: jax.grad(lambda l: pg.kl_divergence(l, ref, est).sum())(logp)
  np.testing.assert_allclose(grad("k3+"), grad("k2"), rtol=1e-6)
  np.testing.assert_allclose(grad("k1+"), grad("k2"), rtol=1e-6)
  assert float(jnp.max(pg.kl_divergence(logp, ref, "k3", clamp=0.5))) <= 0.5
  with pytest.raises(ValueError, match="estimator"):
    pg.kl_divergence(logp, ref, "k4")


def test_categorical_entropy():
  np.testing.assert_allclose(
    pg.categorical_entropy(jnp.zeros((2, 4))), [np.log(4.0)] * 2, rtol=1e-6
  )


# -------------------------------------------------------------------------------- aggregation


@VARIANTS
def test_aggregation_vector(transform):
  """Hand-computed: one row of 3 valid tokens, one of 1."""
  loss = jnp.array([[1.0, 2.0, 3.0, 7.0], [4.0, 9.0, 9.0, 9.0]])
  mask = jnp.array([[1, 1, 1, 0], [1, 0, 0, 0]])
  expected = {
    "token_mean": 2.5,
    "seq_mean_token_sum": 5.0,
    "seq_mean_token_mean": 3.0,
    "seq_mean_constant_norm": 1.25,
    "total_constant_norm": 2.5,
  }
  for mode, value in expected.items():
    out, parts = transform(lambda l, m: pg.aggregate(l, m, mode, constant=4.0))(loss, mask)  # noqa
    np.testing.assert_allclose(out, value, rtol=1e-6, err_msg=mode)
    np.testing.assert_allclose(parts.total / parts.denominator, value, rtol=1e-6)


def test_aggregation_excludes_fully_masked_rows_and_honours_normalizer():
  loss = jnp.array([[1.0, 2.0], [5.0, 5.0], [3.0, 3.0]])
  mask = jnp.array([[1, 1], [0, 0], [1, 0]])
  value, parts = pg.aggregate(loss, mask, "seq_mean_token_mean")
  np.testing.assert_allclose(value, (1.5 + 3.0) / 2, rtol=1e-6)
  assert float(parts.denominator) == 2.0
  value, parts = pg.aggregate(loss, mask, "token_mean", normalizer=12.0)
  np.testing.assert_allclose(value, 6.0 / 12.0, rtol=1e-6)
  with pytest.raises(ValueError, match="mode"):
    pg.aggregate(loss, mask, "token-mean")
  with pytest.raises(AssertionError):
    pg.aggregate(loss[0], mask[0])


def test_masked_mean():
  np.testing.assert_allclose(
    pg.masked_mean(jnp.array([1.0, 3.0, 5.0]), jnp.array([True, False, True])), 3.0
  )
  assert float(pg.masked_mean(jnp.ones(2), jnp.zeros(2, bool))) == 0.0


# ----------------------------------------------------------------------------------------------
# PPO's whole objective


def _ppo_inputs():
  return dict(
    logp=jnp.log(jnp.array([0.5, 0.45])),
    old_logp=jnp.log(jnp.array([0.4, 0.5])),
    advantages=jnp.array([1.0, -1.0]),
    value=jnp.array([1.0, 0.0]),
    old_value=jnp.array([0.5, 0.5]),
    target=jnp.array([2.0, 0.0]),
    entropy=jnp.array([1.0, 0.5]),
  )


@pytest.mark.parametrize("jit", [False, True])
def test_ppo_loss_matches_a_hand_computation(jit):
  # ratios 1.25 / 0.9; surrogate -min(1.25, 1.2) = -1.2 and -(-0.9) = 0.9, mean -0.15; value
  # loss 0.5 * max(1, (0.7 - 2)^2) = 0.845 and 0.5 * max(0, 0.3^2) = 0.045, mean 0.445;
  # total -0.15 + 0.5 * 0.445 - 0.01 * 0.75 = 0.065; k1 KL mean(log .8, log(.5/.45)) = -0.058892.
  fn = jax.jit(pg.ppo_loss, static_argnames=("clip_value",)) if jit else pg.ppo_loss
  loss, parts = fn(**_ppo_inputs())
  np.testing.assert_allclose(float(loss), 0.065, atol=1e-6)
  np.testing.assert_allclose(float(parts.policy_loss), -0.15, atol=1e-6)
  np.testing.assert_allclose(float(parts.value_loss), 0.445, atol=1e-6)
  np.testing.assert_allclose(float(parts.entropy), 0.75, atol=1e-6)
  np.testing.assert_allclose(float(parts.approx_kl), -0.0588915, atol=1e-6)
  np.testing.assert_allclose(float(parts.clip_fraction), 0.5, atol=1e-6)
  unclipped_value, _ = fn(**_ppo_inputs(), clip_value=False)  # value loss 0.5 * (1, 0)
  np.testing.assert_allclose(float(unclipped_value), -0.15 + 0.5 * 0.25 - 0.0075, atol=1e-6)


def test_ppo_loss_gradient_reaches_only_logp_value_and_entropy():
  inputs = _ppo_inputs()
  grads = jax.grad(lambda d: pg.ppo_loss(**d)[0])(inputs)
  for frozen in ("old_logp", "advantages", "old_value", "target"):
    np.testing.assert_array_equal(np.asarray(grads[frozen]), 0.0)
  # element 0 is clipped (no surrogate gradient), element 1 is not: d/dlogp = -A*ratio/2 = 0.45
  np.testing.assert_allclose(np.asarray(grads["logp"]), [0.0, 0.45], atol=1e-6)
  np.testing.assert_allclose(np.asarray(grads["entropy"]), [-0.005, -0.005], atol=1e-7)


def test_ppo_loss_rejects_mismatched_shapes_and_a_non_bool_clip_value():
  inputs = _ppo_inputs()
  with pytest.raises(AssertionError):
    pg.ppo_loss(**{**inputs, "value": jnp.zeros(3)})
  with pytest.raises(ValueError, match="clip_value: expected a Python bool"):
    pg.ppo_loss(**inputs, clip_value=1)
