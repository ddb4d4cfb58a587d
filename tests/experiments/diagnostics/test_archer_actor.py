"""Tests of experiments/diagnostics/archer_actor.py: the discounted episode returns, the per-turn
baseline, and one iteration of the actor on a tiny game, against values computed by hand."""

import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.diagnostics import archer_actor as diag
from hrljax import envs
from hrljax.agents import archer
from hrljax.agents import token_common as tc
from tests.fast_compile import fast_jit


def test_episode_returns_discount_the_terminal_value_back_over_the_first_episode():
  # Column 0: terminal at step 2 with value 0.5; column 1: terminal at step 0 with value 1,
  # then an auto-reset episode that must not count (valid False).
  terminated = jnp.asarray([[False, True], [False, False], [True, True]])
  final_value = jnp.asarray([[0.0, 1.0], [0.0, 0.0], [0.5, 0.25]])
  valid = jnp.asarray([[True, True], [True, False], [True, False]])
  transitions = types.SimpleNamespace(terminated=terminated)
  returns = np.asarray(diag.episode_returns(transitions, valid, final_value, 0.9))
  np.testing.assert_allclose(returns, [[0.5 * 0.81, 1.0], [0.5 * 0.9, 0.0], [0.5, 0.0]], rtol=1e-6)


def test_turn_baseline_subtracts_the_mean_of_each_turn_and_standardises():
  returns = jnp.asarray([[1.0, 0.0, 0.5], [0.2, 0.6, 9.0]])
  valid = jnp.asarray([[True, True, True], [True, True, False]])
  adv = np.asarray(diag.turn_baseline_advantage(returns, valid))
  centred = np.asarray([[0.5, -0.5, 0.0], [-0.2, 0.2, 0.0]])
  std = np.sqrt(np.sum(centred**2) / 5)
  np.testing.assert_allclose(adv, centred / (std + 1e-6), rtol=1e-5)


def test_one_iteration_trains_on_oracle_returns_of_a_tiny_game():
  config = archer.get_config()
  config.env_kwargs = ml_collections.ConfigDict(dict(num_items=4, num_attributes=2, max_turns=3))
  config.update(dict(d_model=16, num_layers=1, num_heads=2, critic_d_model=16))
  _, env_params = envs.make(config.env_name, **config.env_kwargs)
  policy = tc.make_policy(env_params, config)
  params = tc.init_policy_params(jax.random.key(0), policy, env_params)
  tx = diag.make_optimizer("sgd", 0.1, 1e-5, 1.0)
  iteration = fast_jit(
    diag.make_iteration(config, tx, num_games=64, epochs=2, minibatches=2, advantage="oracle")
  )
  (new_params, _), metrics = iteration((params, tx.init(params)), jax.random.key(0))
  moved = jax.tree.reduce(
    lambda a, b: a + b,
    jax.tree.map(lambda a, b: float(jnp.sum(jnp.abs(a - b))), params, new_params),
  )
  assert moved > 0.0
  assert 0.0 <= float(metrics["sampled_success"]) <= 1.0
  assert np.isfinite(float(metrics["actor_loss"]))
  # Oracle returns are Q* values discounted by gamma <= 1, hence in [0, 1]; with this key some
  # random guess of a consistent item earns one (else every advantage would be 0 and nothing move).
  assert 0.0 < float(metrics["return_mean"]) <= 1.0
