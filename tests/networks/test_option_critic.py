"""Tests of hrljax.networks.option_critic: shapes, the batched option heads, init, temperature."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.networks.option_critic import OptionCriticNetwork

O, A, D = 3, 4, 5


def init(network, obs_shape=(2, D), key=0):
  return network.init(jax.random.key(key), jnp.zeros(obs_shape, jnp.float32))


def test_output_shapes_for_batch_and_time_leading_axes():
  network = OptionCriticNetwork(num_options=O, num_actions=A, hidden_sizes=(8,))
  params = init(network)
  out = network.apply(params, jnp.ones((6, 2, D)))
  assert out.q.shape == (6, 2, O)
  assert out.beta.shape == (6, 2, O)
  assert out.logits.shape == (6, 2, O, A)
  np.testing.assert_array_equal(
    network.apply(params, jnp.ones((6, 2, D)), method=OptionCriticNetwork.option_values), out.q
  )


def test_zero_heads_give_the_papers_initial_values():
  """head_init_scale 0 (paper: weights start at zero): Q = 0, beta = 1/2, uniform policies."""
  network = OptionCriticNetwork(num_options=O, num_actions=A, hidden_sizes=(8,))
  out = network.apply(init(network), jax.random.normal(jax.random.key(1), (7, D)))
  np.testing.assert_array_equal(out.q, 0.0)
  np.testing.assert_array_equal(out.beta, 0.5)
  np.testing.assert_allclose(jax.nn.softmax(out.logits), 1.0 / A)


def test_heads_match_a_hand_computed_linear_table_per_option():
  """No torso, no bias: each head is obs @ W; option w's logits are columns w*A .. w*A+A-1,
  divided by the temperature; beta is the sigmoid of the termination row."""
  temperature = 0.5
  network = OptionCriticNetwork(
    num_options=O, num_actions=A, temperature=temperature, head_init_scale=1.0, head_bias=False
  )
  params = init(network)
  p = jax.tree.map(np.asarray, params["params"])
  assert set(p["policy_head"]) == {"kernel"}  # no bias when head_bias=False
  obs = np.asarray(jax.random.normal(jax.random.key(2), (6, D)), np.float64)
  out = network.apply(params, jnp.asarray(obs, jnp.float32))
  np.testing.assert_allclose(out.q, obs @ p["q_head"]["kernel"], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(
    out.beta, 1.0 / (1.0 + np.exp(-obs @ p["termination_head"]["kernel"])), rtol=1e-5, atol=1e-6
  )
  kernel = p["policy_head"]["kernel"]
  for w in range(O):
    expected = obs @ kernel[:, w * A : (w + 1) * A] / temperature
    np.testing.assert_allclose(out.logits[:, w], expected, rtol=1e-5, atol=1e-5)


def test_one_hot_input_reads_one_row_of_the_table():
  network = OptionCriticNetwork(num_options=O, num_actions=A, head_init_scale=1.0, head_bias=False)
  params = init(network)
  out = network.apply(params, jax.nn.one_hot(jnp.array([3]), D))
  np.testing.assert_allclose(out.q[0], params["params"]["q_head"]["kernel"][3], rtol=1e-6)


def test_temperature_scales_logits():
  cold = OptionCriticNetwork(
    num_options=O, num_actions=A, hidden_sizes=(8,), temperature=0.1, head_init_scale=1.0
  )
  warm = cold.clone(temperature=1.0)
  params = init(cold)
  obs = jax.random.normal(jax.random.key(3), (4, D))
  np.testing.assert_allclose(
    cold.apply(params, obs).logits, 10.0 * warm.apply(params, obs).logits, rtol=1e-5, atol=1e-6
  )


def test_grid_observations_are_flattened():
  network = OptionCriticNetwork(num_options=O, num_actions=A, observation_ndim=2, hidden_sizes=(8,))
  params = network.init(jax.random.key(0), jnp.zeros((1, 3, 3)))
  assert network.apply(params, jnp.ones((5, 3, 3))).logits.shape == (5, O, A)


@pytest.mark.parametrize(
  "kwargs, message",
  [
    ({"temperature": 0.0}, "temperature: expected a float > 0"),
    ({"num_options": 0}, "num_options, num_actions: expected integers >= 1"),
  ],
)
def test_bad_arguments_raise(kwargs, message):
  network = OptionCriticNetwork(**{"num_options": O, "num_actions": A, **kwargs})
  with pytest.raises(ValueError, match=message):
    init(network)
