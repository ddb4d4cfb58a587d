"""Tests of hrljax.networks.continuous: the squashed Gaussian's density, the actor, Q ensembles."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.networks.continuous import (
  QEnsemble,
  QNetwork,
  SquashedGaussian,
  TanhGaussianActor,
  ensemble,
)


def squashed_log_density_numpy(action, loc, scale, low, high, step=1e-6):
  """log p(a) by the change of variables with a finite-difference Jacobian, in float64.

  a = low + (tanh(u) + 1)(high − low)/2 per dimension, so p(a) = N(u; loc, scale)·|du/da| with
  u(a) = atanh((2a − low − high)/(high − low)); du/da is taken numerically.
  """
  action, loc, scale, low, high = (
    np.asarray(x, np.float64) for x in (action, loc, scale, low, high)
  )
  inverse = lambda a: np.arctanh((2.0 * a - low - high) / (high - low))
  u = inverse(action)
  du_da = (inverse(action + step) - inverse(action - step)) / (2.0 * step)
  normal = -0.5 * ((u - loc) / scale) ** 2 - np.log(scale) - 0.5 * math.log(2.0 * math.pi)
  return np.sum(normal + np.log(np.abs(du_da)), axis=-1)


# Jitted entry points shared by the tests: one compile per shape instead of one per eager op.
# (A distrax distribution cannot be returned from a jitted function, so these return arrays.)
@jax.jit
def log_prob(loc, scale, low, high, action):
  return SquashedGaussian(loc, scale, low, high).log_prob(action)


@functools.partial(jax.jit, static_argnums=5)
def sample_and_log_prob(loc, scale, low, high, key, sample_shape=()):
  return SquashedGaussian(loc, scale, low, high).sample_and_log_prob(
    seed=key, sample_shape=sample_shape
  )


@jax.jit
def mode(loc, scale, low, high):
  return SquashedGaussian(loc, scale, low, high).mode()


LOC = np.array([[0.3, -1.2], [1.5, 0.1], [-0.4, 0.7]], np.float32)
SCALE = np.array([[0.5, 1.3], [0.2, 0.9], [1.0, 0.4]], np.float32)
LOW = np.array([-2.0, 0.0], np.float32)
HIGH = np.array([2.0, 1.0], np.float32)


def test_log_prob_matches_a_numerical_change_of_variables():
  actions = np.array([[1.2, 0.3], [-0.7, 0.9], [0.05, 0.5]], np.float32)
  expected = squashed_log_density_numpy(actions, LOC, SCALE, LOW, HIGH)
  np.testing.assert_allclose(
    log_prob(LOC, SCALE, LOW, HIGH, actions), expected, rtol=1e-4, atol=1e-4
  )


def test_sample_and_log_prob_agrees_with_the_density_of_the_returned_sample():
  actions, sampled_log_prob = sample_and_log_prob(LOC, SCALE, LOW, HIGH, jax.random.key(0))
  assert actions.shape == (3, 2) and sampled_log_prob.shape == (3,)
  assert np.all(np.asarray(actions) > LOW) and np.all(np.asarray(actions) < HIGH)
  expected = squashed_log_density_numpy(actions, LOC, SCALE, LOW, HIGH, step=1e-7)
  np.testing.assert_allclose(sampled_log_prob, expected, rtol=1e-3, atol=1e-3)


def test_one_dimensional_density_integrates_to_one():
  grid = np.linspace(-2.0, 2.0, 40_001)[1:-1].astype(np.float32)
  loc, scale = np.full((grid.size, 1), 0.8, np.float32), np.full((grid.size, 1), 0.6, np.float32)
  density = np.exp(np.asarray(log_prob(loc, scale, LOW[:1], HIGH[:1], grid[:, None])))
  np.testing.assert_allclose(np.trapezoid(density, grid), 1.0, atol=2e-3)


def test_reduces_to_plain_tanh_correction_on_unit_bounds():
  """With [-1, 1] bounds: log π(a) = log N(u) − Σ log(1 − tanh²(u)) (arXiv:1812.05905 App. C)."""
  u = np.array([[0.2, -0.5], [1.1, 0.3], [-2.0, 0.0]])
  normal = -0.5 * ((u - LOC) / SCALE) ** 2 - np.log(SCALE) - 0.5 * math.log(2.0 * math.pi)
  expected = np.sum(normal - np.log(1.0 - np.tanh(u) ** 2), axis=-1)
  unit_low, unit_high = -np.ones(2, np.float32), np.ones(2, np.float32)
  np.testing.assert_allclose(
    log_prob(LOC, SCALE, unit_low, unit_high, np.tanh(u).astype(np.float32)),
    expected,
    rtol=1e-4,
    atol=1e-4,
  )


def test_sample_log_prob_stays_finite_where_inverting_tanh_would_not():
  """A pre-squash sample near 20 has tanh = 1.0 in float32 (whatever XLA's optimisation level;
  near 12 it is 1.0 only with the default one); its log-prob from the sample is finite
  (inverting tanh at 1.0 would give infinity)."""
  action, sampled_log_prob = sample_and_log_prob(
    np.array([[20.0]], np.float32),
    np.array([[1e-3]], np.float32),
    -np.ones(1, np.float32),
    np.ones(1, np.float32),
    jax.random.key(0),
  )
  assert float(action[0, 0]) == 1.0
  assert np.isfinite(float(sampled_log_prob[0]))


def test_mode_is_the_squashed_mean_and_samples_have_extra_leading_axes():
  expected = LOW + (np.tanh(LOC) + 1.0) * (HIGH - LOW) / 2.0
  np.testing.assert_allclose(mode(LOC, SCALE, LOW, HIGH), expected, rtol=1e-6)
  actions, sampled_log_prob = sample_and_log_prob(LOC, SCALE, LOW, HIGH, jax.random.key(1), (4,))
  assert actions.shape == (4, 3, 2) and sampled_log_prob.shape == (4, 3)


def test_sample_is_reparameterised():
  """d a / d loc = (high − low)/2 · (1 − tanh²(u)) for a = affine(tanh(loc + scale·ε))."""
  key = jax.random.key(2)
  loc = jnp.asarray(LOC)

  def first_action(loc):
    return SquashedGaussian(loc, jnp.asarray(SCALE), jnp.asarray(LOW), jnp.asarray(HIGH)).sample(
      seed=key
    )[0, 0]

  grad, action = jax.jit(lambda loc: (jax.grad(first_action)(loc), first_action(loc)))(loc)
  action = float(action)
  tanh_u = (2.0 * action - LOW[0] - HIGH[0]) / (HIGH[0] - LOW[0])
  np.testing.assert_allclose(grad[0, 0], (HIGH[0] - LOW[0]) / 2.0 * (1.0 - tanh_u**2), rtol=1e-4)
  assert float(jnp.abs(grad[1:]).sum()) == 0.0


def test_actor_shapes_bounds_and_log_std_clipping():
  actor = TanhGaussianActor(
    action_dim=2,
    hidden_sizes=(16,),
    action_low=(-2.0, 0.0),
    action_high=(2.0, 1.0),
    log_std_min=-3.0,
    log_std_max=0.5,
  )
  params = jax.jit(actor.init)(jax.random.key(0), jnp.zeros((1, 3)))
  obs = jax.random.normal(jax.random.key(1), (5, 3))
  # Push the log-std head far outside the bounds in both directions.
  params = jax.tree_util.tree_map_with_path(
    lambda path, x: (
      jnp.array([50.0, -50.0]) if "log_std" in jax.tree_util.keystr(path) and x.ndim == 1 else x
    ),
    params,
  )

  @jax.jit
  def scale_and_sample(params, obs):  # distrax distributions cannot leave a jitted function
    dist = actor.apply(params, obs)
    return dist.distribution.scale_diag, dist.sample(seed=jax.random.key(2))

  scale, actions = scale_and_sample(params, obs)
  np.testing.assert_allclose(scale[:, 0], math.exp(0.5), rtol=1e-5)
  np.testing.assert_allclose(scale[:, 1], math.exp(-3.0), rtol=1e-5)
  assert actions.shape == (5, 2)
  assert np.all(np.asarray(actions) >= LOW) and np.all(np.asarray(actions) <= HIGH)


def test_actor_flattens_multi_axis_observations():
  actor = TanhGaussianActor(action_dim=1, hidden_sizes=(8,), observation_ndim=2)
  params = jax.jit(actor.init)(jax.random.key(0), jnp.zeros((1, 2, 3)))
  assert jax.jit(lambda p, o: actor.apply(p, o).mode())(params, jnp.ones((4, 2, 3))).shape == (4, 1)


OBS = np.asarray(jax.random.normal(jax.random.key(3), (4, 3)))
ACTION = np.full((4, 2), 0.5, np.float32)
TWIN = QEnsemble(num_members=3, hidden_sizes=(16,))


@pytest.fixture(scope="module")
def twin_params():
  return jax.jit(TWIN.init)(jax.random.key(0), OBS, ACTION)


def test_ensemble_members_are_independent(twin_params):
  kernels = twin_params["params"]["members"]["MLP_0"]["Dense_0"]["kernel"]
  assert kernels.shape == (3, 5, 16)
  assert not np.allclose(kernels[0], kernels[1])
  values = jax.jit(TWIN.apply)(twin_params, OBS, ACTION)
  assert values.shape == (3, 4)
  assert not np.allclose(values[0], values[1])


def test_ensemble_member_equals_the_single_network_with_its_parameters(twin_params):
  member = jax.tree.map(lambda x: x[1], twin_params["params"]["members"])
  single = jax.jit(QNetwork(hidden_sizes=(16,)).apply)({"params": member}, OBS, ACTION)
  assert single.shape == (4,)
  np.testing.assert_allclose(jax.jit(TWIN.apply)(twin_params, OBS, ACTION)[1], single, rtol=1e-6)


@pytest.mark.parametrize("num_members", [0, -1, 1.5])
def test_ensemble_rejects_bad_member_counts(num_members):
  with pytest.raises(ValueError, match="num_members: expected an integer > 0"):
    ensemble(QNetwork, num_members)
