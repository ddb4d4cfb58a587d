"""Tests of hrljax.agents.ppo: config checks, the agent API, determinism, and learning CartPole."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs, rollout
from hrljax.agents import ppo
from hrljax.config_checks import ConfigError
from tests.same_numbers import assert_same


def tiny_config(**overrides):
  config = ppo.get_config()
  config.total_timesteps = 4 * 32 * 3
  config.num_steps = 32
  config.update_epochs = 2
  config.num_minibatches = 2
  config.update(overrides)
  return config


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("learning_rate", -1.0, "config.learning_rate: expected a finite number > 0"),
    ("num_envs", 0, "config.num_envs: expected an integer > 0"),
    ("gamma", 1.5, "config.gamma: expected a number in"),
    ("optimizer", "rmsprop", "config.optimizer: expected one of"),
    ("num_minibatches", 3, "config.num_minibatches: expected a divisor"),
    ("env_name", "CartPole-v9", "env_name: unknown environment"),
  ],
)
def test_validate_config_names_the_field(field, value, message):
  config = tiny_config()
  config[field] = value
  with pytest.raises(ValueError, match=message):
    ppo.validate_config(config)


def test_validate_config_rejects_env_count_not_divisible_by_devices():
  with pytest.raises(ConfigError, match="num_envs: expected a multiple of the device count"):
    ppo.validate_config(tiny_config(num_envs=6), num_devices=4)


def test_act_and_update_shapes():
  config = tiny_config()
  env, params = envs.make("CartPole-v1")
  agent = ppo.PPOAgent.create(jax.random.key(0), envs.spec(env, params), config)
  obs = jnp.zeros((5, 4))
  assert agent.act(obs, jax.random.key(1)).shape == (5,)
  assert agent.act(obs, None, deterministic=True).dtype in (jnp.int32, jnp.int64)
  obs = jax.random.normal(jax.random.key(2), (8, 4))
  _, value = agent.network.apply(agent.params, obs)  # PPO2 value clipping is around these
  batch = ppo.Batch(
    obs=obs,
    action=jnp.zeros(8, jnp.int32),
    log_prob=jnp.full(8, -0.69),
    value=value,
    advantage=jnp.linspace(-1, 1, 8),
    target=jnp.ones(8),
  )
  new_agent, metrics = jax.jit(lambda a, b: a.update(b))(agent, batch)
  assert set(metrics) >= {
    "loss",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
  }
  changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), agent.params, new_agent.params)
  assert all(jax.tree.leaves(changed))


def test_batched_critic_gives_the_values_of_the_critic_run_at_every_step():
  """The rollout loop runs only the actor; `make_batch` evaluates the critic afterwards over all
  steps at once. Its values (and so the value targets) are those of the critic run inside the
  loop at every step, as the rollout saw them, up to float32 rounding; the log-probabilities are
  the loop's own."""
  config = tiny_config()
  env, env_params = envs.make(config.env_name)
  agent = ppo.PPOAgent.create(jax.random.key(0), envs.spec(env, env_params), config)

  def actor_and_critic(params, obs, key):
    dist, value = agent.network.apply(params, obs)
    action = dist.sample(seed=key)
    return action, (dist.log_prob(action), value)

  def run(agent):
    carry = rollout.reset(env, env_params, jax.random.key(1), config.num_envs)
    _, traj = rollout.rollout(
      env, env_params, actor_and_critic, agent.params, carry, jax.random.key(2), config.num_steps
    )
    log_prob, value = traj.policy_extras
    batch, _ = ppo.make_batch(agent, traj._replace(policy_extras=log_prob), config)
    return batch, log_prob.reshape(-1), value.reshape(-1)

  batch, log_prob, value = jax.jit(run)(agent)
  assert float(jnp.std(value)) > 1e-3  # the values vary from step to step
  assert_same(value, batch.value)
  assert_same(batch.advantage + value, batch.target)
  np.testing.assert_array_equal(np.asarray(batch.log_prob), np.asarray(log_prob))


def test_same_seed_same_numbers_and_different_seed_different_numbers_in_one_vmapped_program():
  """Seeds 0, 0, 1 trained side by side in one vmapped program (one compilation): the same seed
  gives the same numbers, another seed others."""
  train = jax.jit(jax.vmap(ppo.make_train(tiny_config())))
  _, metrics = train(jax.vmap(jax.random.key)(jnp.array([0, 0, 1])))
  assert metrics["loss"].shape == (3, 3)
  for key in metrics:
    np.testing.assert_array_equal(metrics[key][0], metrics[key][1], err_msg=key)
  assert not np.array_equal(metrics["loss"][0], metrics["loss"][2])


@pytest.mark.learning
@pytest.mark.optimised
def test_ppo_solves_cartpole_within_500k_steps():
  """PureJaxRL's config, seed 0: the mean return of episodes ending in the last 10% of updates.

  Threshold 475 is the issue's (CartPole-v1's "solved" level). Measured here: seed 0 reaches 500.0;
  seeds 0-4 (vmapped run, closing note) all reach >= 475.

  This test compiles with `LEARNING_COMPILE` (`optimised`: LLVM at -O1, which here costs less in
  compile time than it saves in the run); it changes the last bits of transcendental functions,
  so the run is not bit for bit the measured one, and it passes there too.
  """
  _, metrics = jax.jit(ppo.make_train(ppo.get_config()))(jax.random.key(0))
  tail = len(metrics["episodes"]) // 10
  final_return = float(
    metrics["episode_return_sum"][-tail:].sum() / metrics["episodes"][-tail:].sum()
  )
  assert final_return >= 475.0, final_return
