"""Tests of hrljax.agents.macro_mixture (MacroHFT's hyper-agent over frozen experts) with tiny
experts built here: the mixture starts uniform, the experts' parameters never change, the hard
switch acts with the largest-weight expert, and a few jitted updates run (the losses:
tests/losses/test_macrohft.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import macro_mixture
from hrljax.config_checks import ConfigError
from hrljax.envs import four_rooms
from hrljax.networks.discrete_q import DiscreteQNetwork

NUM_EXPERTS = 3


def tiny_config(**overrides):
  config = macro_mixture.get_config()
  config.env_kwargs.max_steps_in_episode = 20
  config.expert_runs = ("unused",)  # experts are passed to make_learner directly
  config.num_envs = 2
  config.total_timesteps = 2 * 8  # 8 Learner steps
  config.learning_starts = 4
  config.batch_size = 4
  config.buffer_size = 32
  config.memory_size = 8
  config.num_neighbours = 2
  config.hyper_hidden_size = 8
  config.epsilon_decay_steps = 8
  config.log_every = 4
  config.checkpoint_every = 8
  config.eval_episodes = 2
  config.update(overrides)
  return config


def tiny_experts(key=0):
  env, params = envs.make(four_rooms.ENV_NAME, max_steps_in_episode=20)
  spec = envs.spec(env, params)
  network = DiscreteQNetwork(num_actions=spec.action_dim, hidden_sizes=(8,))
  obs = jnp.zeros((1,) + tuple(spec.observation_shape))
  keys = jax.random.split(jax.random.key(key), NUM_EXPERTS)
  return macro_mixture.stack_experts(network, [network.init(k, obs) for k in keys]), spec


def test_mixture_starts_uniform_and_acts_with_the_mean_of_the_experts():
  experts, spec = tiny_experts()
  agent = macro_mixture.MixtureAgent.create(jax.random.key(1), spec, tiny_config(), experts)
  obs = jax.nn.one_hot(jnp.array([14, 40, 100]), spec.observation_shape[0])
  q_mix, weights, q_experts, _ = agent.mixture(agent.params, obs)
  np.testing.assert_allclose(weights, np.full((3, NUM_EXPERTS), 1 / NUM_EXPERTS), rtol=1e-6)
  np.testing.assert_allclose(q_mix, np.mean(np.asarray(q_experts), axis=1), rtol=1e-5, atol=1e-6)


def test_hard_switch_acts_with_the_largest_weight_expert():
  experts, spec = tiny_experts()
  agent = macro_mixture.MixtureAgent.create(
    jax.random.key(1), spec, tiny_config(switch="hard"), experts
  )
  # Logits favouring expert 2 everywhere: a bias on the zero-initialised output layer.
  params = jax.tree_util.tree_map(lambda x: x, agent.params)
  params["params"]["logits"]["bias"] = jnp.array([0.0, -1.0, 2.0])
  agent = agent.replace(params=params)
  obs = jax.nn.one_hot(jnp.array([14, 40, 100]), spec.observation_shape[0])
  q_experts = experts.q_values(experts.params, obs)
  np.testing.assert_allclose(agent.acting_q(params, obs), q_experts[:, 2], rtol=1e-6)
  expected = jnp.argmax(q_experts[:, 2], axis=-1)
  np.testing.assert_array_equal(agent.act(obs, jax.random.key(0)), expected)


def test_a_few_updates_train_the_hyper_agent_and_leave_the_experts_frozen():
  experts, _ = tiny_experts()
  config = tiny_config()
  learner = macro_mixture.make_learner(config, experts)
  state = learner.init(jax.random.key(0))
  step = jax.jit(learner.step)
  for _ in range(learner.num_updates):
    state, metrics = step(state)
  agent = state.agent
  for got, want in zip(jax.tree.leaves(agent.expert_params), jax.tree.leaves(experts.params)):
    np.testing.assert_array_equal(got, want)
  moved = [np.abs(np.asarray(x)).max() for x in jax.tree.leaves(agent.params["params"]["logits"])]
  assert max(moved) > 0  # the zero-initialised output layer has been trained
  assert int(agent.num_updates) == learner.num_updates - 1  # step 0 only collects (warm-up)
  assert int(agent.memory.size) == config.memory_size  # 16 transitions into 8 slots
  assert np.isfinite(float(metrics["loss"])) and float(metrics["kl"]) >= 0.0
  evaluation = learner.evaluate(state, jax.random.key(1))
  assert np.all(np.isfinite(np.asarray(jax.tree.leaves(evaluation)[0])))


def test_the_shortest_path_demonstration_points_along_the_path():
  table = four_rooms.shortest_path_action_values((1, 1))
  # From (1, 2) left (action 3) reaches the goal: 0 steps left; right (action 1): 2 steps.
  row = table[1 * four_rooms.GRID_SIZE + 2]
  assert row[3] == 0.0 and row[1] == -2.0 and row[0] == -1.0  # up hits the wall and stays


def test_bad_fields_are_named():
  with pytest.raises(ConfigError, match="config.switch"):
    macro_mixture.validate_config(tiny_config(switch="argmax"))
  with pytest.raises(ConfigError, match="config.expert_runs"):
    macro_mixture.validate_config(tiny_config(expert_runs=()))
  with pytest.raises(ConfigError, match="config.num_neighbours"):
    macro_mixture.validate_config(tiny_config(num_neighbours=9))
