"""Tests of hrljax.agents.ippo: config checks, the per-agent batch (one row per step, environment
and agent; the team reward and each agent's own GAE), the shared network acting per agent, and one
update. Tiny sizes and two small jitted programs, none of which steps the environment: the
learner's rollout, evaluation and driver run in the preset's smoke run
(tests/experiments/preset_smoke.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import ippo
from hrljax.config_checks import ConfigError
from hrljax.networks import ActorCritic
from hrljax.types import Transition

ENV, ENV_PARAMS = envs.make("MPE_simple_spread_v3")
SPEC = envs.spec(ENV, ENV_PARAMS)
N, D = SPEC.observation_shape
A = SPEC.action_dim
T, E = 4, 2  # rollout length, environments


def tiny_config(**overrides):
  config = ippo.get_config()
  config.num_envs = E
  config.num_steps = T
  config.total_timesteps = E * T * 2
  config.update_epochs = 1
  config.num_minibatches = 2
  config.hidden_sizes = (8,)
  config.eval_episodes = 2
  config.update(overrides)
  return config


# ------------------------------------------------------------------------------------ the config
@pytest.mark.parametrize(
  "field, value, message",
  [
    ("learning_rate", -1.0, "config.learning_rate: expected a finite number > 0"),
    ("gae_lambda", 1.5, "config.gae_lambda: expected a number in"),
    ("num_minibatches", 3, "config.num_minibatches: expected a divisor"),
    ("env_name", "CartPole-v1", "config.env_name: expected a multi-agent environment"),
  ],
)
def test_validate_config_names_the_bad_field(field, value, message):
  with pytest.raises(ConfigError, match=message):
    ippo.validate_config(tiny_config(**{field: value}))


def test_validate_config_accepts_the_defaults_and_rejects_envs_not_divisible_by_devices():
  ippo.validate_config(ippo.get_config())
  ippo.validate_config(tiny_config(agent_ids=True))
  with pytest.raises(ConfigError, match="num_envs: expected a multiple of the device count"):
    ippo.validate_config(tiny_config(num_envs=3), num_devices=2)


# ----------------------------------------------------------------- the shared network, per agent
@jax.jit
def network_outputs(agent, with_ids, obs, key):
  """The shared network's outputs on `[E, N, D]` observations, on agent 0's rows alone, the
  agent's sampled and greedy actions, and the logits of the agent with ids."""
  dist, value = agent.network.apply(agent.params, obs)
  alone_dist, alone_value = agent.network.apply(agent.params, obs[:, 0])
  ids_input = ippo.agent_inputs(obs, with_ids.config)
  ids_logits = with_ids.network.apply(with_ids.params, ids_input)[0].logits
  actions = agent.act(obs, key), agent.act(obs, None, deterministic=True)
  return dist.logits, value, alone_dist.logits, alone_value, actions, ids_logits


def test_the_shared_network_acts_on_each_agents_own_row():
  """Without ids, an agent's policy and value depend on its own observation only (the same row
  alone gives the same numbers; two agents that see the same get the same); with `agent_ids`
  the one-hot id tells them apart."""
  agent = ippo.IPPOAgent.create(jax.random.key(0), SPEC, tiny_config())
  with_ids = ippo.IPPOAgent.create(jax.random.key(0), SPEC, tiny_config(agent_ids=True))
  widths = {leaf.shape[0] for leaf in jax.tree.leaves(with_ids.params) if leaf.ndim == 2}
  assert D + N in widths and D not in widths
  obs = jax.random.normal(jax.random.key(1), (E, N, D)).at[:, 1].set(0.0).at[:, 2].set(0.0)
  logits, value, alone_logits, alone_value, actions, ids_logits = network_outputs(
    agent, with_ids, obs, jax.random.key(2)
  )
  assert logits.shape == (E, N, A) and value.shape == (E, N)
  np.testing.assert_allclose(logits[:, 0], alone_logits, rtol=1e-6)
  np.testing.assert_allclose(value[:, 0], alone_value, rtol=1e-6)
  np.testing.assert_array_equal(logits[:, 1], logits[:, 2])
  assert actions[0].shape == (E, N)
  np.testing.assert_array_equal(actions[1], np.argmax(logits, axis=-1))
  assert not np.allclose(ids_logits[:, 1], ids_logits[:, 2])


# ------------------------------------------------------------------- the batch and one update
def hand_gae(reward, discount, value, next_value, done, lambda_):
  """GAE of one actor's `[T]` column, written out: the recursion restarts after an episode end."""
  advantage, running = np.zeros_like(value), 0.0
  for t in reversed(range(len(reward))):
    delta = reward[t] + discount[t] * next_value[t] - value[t]
    running = delta + discount[t] * lambda_ * (1.0 - done[t]) * running
    advantage[t] = running
  return advantage


def hand_made_rollout() -> Transition:
  """A `[T, E]` multi-agent rollout: environment 0 terminates at step 1, environment 1 is
  truncated at step 2."""
  keys = jax.random.split(jax.random.key(3), 5)
  return Transition(
    obs=jax.random.normal(keys[0], (T, E, N, D)),
    action=jax.random.randint(keys[1], (T, E, N), 0, A),
    reward=jax.random.normal(keys[2], (T, E)),
    terminated=jnp.zeros((T, E), bool).at[1, 0].set(True),
    truncated=jnp.zeros((T, E), bool).at[2, 1].set(True),
    next_obs=jax.random.normal(keys[3], (T, E, N, D)),
    policy_extras=(jnp.full((T, E, N), -1.6), jax.random.normal(keys[4], (T, E, N))),
    episode_return=jnp.zeros((T, E)),
    episode_length=jnp.zeros((T, E), jnp.int32),
  )


@pytest.fixture(scope="module")
def batch_and_update():
  """The agent, a hand-made rollout, its batch, successor values, and the agent after one
  update on the batch: one jitted program."""
  config = tiny_config()
  agent = ippo.IPPOAgent.create(jax.random.key(0), SPEC, config)
  traj = hand_made_rollout()

  @jax.jit
  def batch_then_update(agent, traj):
    batch = ippo.make_batch(agent, traj, config)
    next_value = agent.network.apply(agent.params, traj.next_obs, method=ActorCritic.value)
    return batch, next_value, *agent.update(batch)

  return agent, traj, *batch_then_update(agent, traj)


def test_the_batch_has_a_row_per_step_environment_and_agent_with_the_team_reward(
  batch_and_update,
):
  """Rows time-major with an environment's agents consecutive; every agent's advantage is GAE of
  the team reward over its own values, a termination cutting the bootstrap and a truncation
  bootstrapping."""
  agent, traj, batch, next_value, _, _ = batch_and_update
  config = agent.config
  rows = T * E * N
  assert batch.obs.shape == (rows, D)
  assert batch.action.shape == batch.advantage.shape == batch.target.shape == (rows,)
  np.testing.assert_array_equal(batch.obs.reshape(T, E, N, D), traj.obs)
  np.testing.assert_array_equal(batch.action.reshape(T, E, N), traj.action)
  value, next_value = np.asarray(traj.policy_extras[1]), np.asarray(next_value)
  advantage = np.asarray(batch.advantage).reshape(T, E, N)
  for e in range(E):
    discount = config.gamma * (1.0 - np.asarray(traj.terminated[:, e], np.float32))
    done = np.asarray(traj.done[:, e], np.float32)
    for n in range(N):
      expected = hand_gae(
        np.asarray(traj.reward[:, e]),
        discount,
        value[:, e, n],
        next_value[:, e, n],
        done,
        config.gae_lambda,
      )
      np.testing.assert_allclose(advantage[:, e, n], expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(batch.target, batch.advantage + value.reshape(-1), rtol=1e-6)


def test_one_update_moves_every_parameter_and_gives_finite_metrics(batch_and_update):
  agent, _, _, _, updated, metrics = batch_and_update
  moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), agent.params, updated.params)
  assert all(jax.tree.leaves(moved))
  assert set(metrics) >= {"loss", "policy_loss", "value_loss", "entropy", "approx_kl"}
  assert all(np.isfinite(np.asarray(value)).all() for value in metrics.values())
  assert float(metrics["entropy"]) > 0.0


def test_the_learner_counts_team_environment_steps():
  learner = ippo.make_learner(tiny_config())
  assert learner.env_steps_per_update == E * T and learner.num_updates == 2


def test_a_tiny_ippo_run_on_the_two_agent_four_rooms_has_finite_metrics_and_its_shapes():
  # the four-rooms task (hrljax.envs.two_agent_rooms) through make_train: a row per agent of
  # observations [2, 12], 5 moves each, the team reward shared
  config = tiny_config(env_name="TwoAgentFourRooms-v0", env_kwargs={"task": "random_split"})
  learner = ippo.make_learner(config)
  assert learner.num_updates == 2 and learner.env_steps_per_update == E * T
  state, metrics = jax.jit(ippo.make_train(config))(jax.random.key(0))
  assert int(state.update) == 2 and state.env.obs.shape == (E, 2, 12)
  for name in ("loss", "entropy"):
    assert np.asarray(metrics[name]).shape == (2,), name
  assert all(np.isfinite(np.asarray(value)).all() for value in metrics.values())
  entropy = np.asarray(metrics["entropy"])
  assert (entropy > 0).all() and (entropy <= np.log(5) + 1e-5).all()  # over the 5 moves
  params = state.agent.params
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))
  evaluation = jax.jit(learner.evaluate)(state, jax.random.key(1))
  assert all(np.isfinite(np.asarray(v)).all() and np.ndim(v) == 0 for v in evaluation.values())
