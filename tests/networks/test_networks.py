"""Tests of hrljax.networks: shapes, distributions, initialisation, flattening."""

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.networks import MLP, ActorCritic, GaussianHead, ValueHead, flatten_observation


def test_mlp_shapes_and_activate_final():
  x = jnp.ones((3, 5))
  outputs = {}
  for activate_final in (True, False):
    mlp = MLP((8, 2), activation="tanh", activate_final=activate_final)
    outputs[activate_final] = mlp.apply(mlp.init(jax.random.key(0), x), x * 10.0)
    assert outputs[activate_final].shape == (3, 2)
  # same parameters (same key): the activated output is tanh of the linear one
  np.testing.assert_allclose(outputs[True], np.tanh(outputs[False]), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="activation"):
    MLP((4,), activation="swish?").init(jax.random.key(0), x)


def test_actor_critic_discrete_starts_near_uniform():
  net = ActorCritic(action_dim=3)
  obs = jax.random.normal(jax.random.key(1), (6, 4))
  dist, value = net.apply(net.init(jax.random.key(0), obs), obs)
  assert isinstance(dist, distrax.Categorical)
  assert value.shape == (6,)
  np.testing.assert_allclose(dist.probs, np.full((6, 3), 1 / 3), atol=0.02)


def test_actor_critic_gaussian_and_value_method():
  net = ActorCritic(action_dim=2, discrete=False)
  obs = jnp.ones((4, 3))
  params = net.init(jax.random.key(0), obs)
  dist, value = net.apply(params, obs)
  assert dist.sample(seed=jax.random.key(2)).shape == (4, 2)
  np.testing.assert_allclose(net.apply(params, obs, method=ActorCritic.value), value, rtol=1e-6)
  # value() accepts extra leading (time) axes
  assert net.apply(params, jnp.ones((5, 4, 3)), method=ActorCritic.value).shape == (5, 4)


def test_gaussian_head_log_std_clipped():
  head = GaussianHead(action_dim=2, log_std_init=10.0, log_std_max=1.0)
  x = jnp.ones((1, 3))
  dist = head.apply(head.init(jax.random.key(0), x), x)
  np.testing.assert_allclose(dist.stddev(), np.exp(1.0) * np.ones((1, 2)), rtol=1e-6)


def test_value_head_and_flatten():
  head = ValueHead()
  assert head.apply(head.init(jax.random.key(0), jnp.ones((2, 3))), jnp.ones((2, 3))).shape == (2,)
  grid = jnp.ones((7, 5, 4, 3), jnp.int32)
  assert flatten_observation(grid, observation_ndim=3).shape == (7, 60)
  assert flatten_observation(grid, observation_ndim=3).dtype == jnp.float32
