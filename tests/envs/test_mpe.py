"""The JaxMARL adapter (`hrljax.envs.mpe`: MPE simple_spread behind gymnax's API, agent axis first).

One compiled program serves most tests: two simple_spread environments stepped `STEPS` steps by
`hrljax.rollout` (jit, vmap over environments, gymnax's auto-reset), with a scripted policy that
sends agent i to landmark i; beside it, JaxMARL's own `step_env` on the same state and actions,
so the team reward is checked against the library's per-agent rewards.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs, rollout
from hrljax.envs import minigrid, mpe

NAME = "MPE_simple_spread_v3"
NUM_AGENTS, OBS_DIM, NUM_ACTIONS = 3, 18, 5
TIME_LIMIT = 25
STEPS = 30  # past one time limit: the auto-reset and the next episode's first steps
NOOP, LEFT, RIGHT, DOWN, UP = range(5)  # JaxMARL's discrete MPE actions (-x, +x, -y, +y)


def scripted(params, obs, key):
  """Agent i moves towards landmark i along its larger coordinate gap (obs[4 + 2i : 6 + 2i] is
  that landmark's position relative to the agent); within 0.05 it stays."""
  del params, key
  index = jnp.arange(NUM_AGENTS)
  rel = (
    jax.vmap(lambda o: o[index, 4 + 2 * index], in_axes=0)(obs),
    jax.vmap(lambda o: o[index, 5 + 2 * index], in_axes=0)(obs),
  )
  dx, dy = rel
  along_x = jnp.abs(dx) >= jnp.abs(dy)
  action = jnp.where(along_x, jnp.where(dx > 0, RIGHT, LEFT), jnp.where(dy > 0, UP, DOWN))
  close = jnp.hypot(dx, dy) < 0.05
  return jnp.where(close, NOOP, action).astype(jnp.int32), None


@pytest.fixture(scope="module")
def run():
  """`(env, params, trajectory, team reward of one step, JaxMARL's per-agent rewards)`."""
  env, params = envs.make(NAME)

  @jax.jit
  def program(key):
    reset_key, run_key, step_key = jax.random.split(key, 3)
    carry = rollout.reset(env, params, reset_key, 2)
    _, traj = rollout.rollout(env, params, scripted, None, carry, run_key, STEPS)
    # One step of the first environment through the adapter and through JaxMARL itself.
    state = jax.tree.map(lambda x: x[0], carry.env_state)
    action = jnp.asarray([RIGHT, UP, NOOP], jnp.int32)
    _, _, team_reward, _, _ = env.step_env(step_key, state, action, params)
    actions = {a: action[i] for i, a in enumerate(env.agents)}
    with jax.numpy_rank_promotion("allow"):  # JaxMARL's own code broadcasts across ranks
      _, _, rewards, _, _ = env._env.step_env(step_key, state.inner, actions)
    return traj, team_reward, jnp.stack([rewards[a] for a in env.agents])

  traj, team_reward, agent_rewards = program(jax.random.key(3))
  return env, params, traj, team_reward, agent_rewards


def test_registered_spec_and_agent_axis():
  assert NAME in envs.available()
  env, params = envs.make(NAME)
  spec = envs.spec(env, params)
  assert (spec.observation_shape, spec.discrete, spec.action_dim) == (
    (NUM_AGENTS, OBS_DIM),
    True,
    NUM_ACTIONS,
  )
  assert env.num_agents == NUM_AGENTS and params.max_steps_in_episode == TIME_LIMIT
  two, two_params = envs.make(NAME, num_agents=2, num_landmarks=2, max_steps_in_episode=7)
  assert envs.spec(two, two_params).observation_shape == (2, 4 + 4 + 4)
  assert two_params.max_steps_in_episode == 7


def test_shapes_and_dtypes_under_jit_and_vmap(run):
  _, _, traj, _, _ = run
  assert traj.obs.shape == (STEPS, 2, NUM_AGENTS, OBS_DIM) and traj.obs.dtype == jnp.float32
  assert traj.next_obs.shape == traj.obs.shape
  assert traj.action.shape == (STEPS, 2, NUM_AGENTS) and traj.action.dtype == jnp.int32
  assert traj.reward.shape == (STEPS, 2) and traj.reward.dtype == jnp.float32
  assert traj.terminated.shape == traj.truncated.shape == (STEPS, 2)
  # the two environments start from different draws
  assert not np.allclose(traj.obs[0, 0], traj.obs[0, 1])


def test_team_reward_is_the_sum_of_jaxmarls_agent_rewards(run):
  _, _, _, team_reward, agent_rewards = run
  assert team_reward.shape == ()
  np.testing.assert_allclose(team_reward, agent_rewards.sum(), rtol=1e-6)


def test_time_limit_truncates_never_terminates(run):
  _, _, traj, _, _ = run
  assert not np.asarray(traj.terminated).any()
  truncated_at = [np.flatnonzero(np.asarray(traj.truncated[:, e])).tolist() for e in range(2)]
  assert truncated_at == [[TIME_LIMIT - 1]] * 2
  np.testing.assert_array_equal(traj.episode_length[TIME_LIMIT - 1], [TIME_LIMIT] * 2)
  # the true final observation is kept for the bootstrap; the next step starts a new episode
  assert not np.allclose(traj.next_obs[TIME_LIMIT - 1], traj.obs[TIME_LIMIT])
  np.testing.assert_allclose(traj.next_obs[TIME_LIMIT - 2], traj.obs[TIME_LIMIT - 1])


def test_scripted_spread_covers_every_landmark(run):
  """Each agent ends its episode near its own landmark (the bang-bang script overshoots by up to
  about an agent's radius, 0.15), much nearer than it started, and the team reward rises from the
  first step to the last."""
  _, _, traj, _, _ = run
  index = np.arange(NUM_AGENTS)

  def distances(obs):  # [2, N] distance of agent i to landmark i
    return np.hypot(obs[:, index, 4 + 2 * index], obs[:, index, 5 + 2 * index])

  start, end = (
    distances(np.asarray(traj.obs[0])),
    distances(np.asarray(traj.next_obs[TIME_LIMIT - 1])),
  )
  assert (end < 0.3).all() and (end.sum(1) < start.sum(1) / 3).all(), (start, end)
  rewards = np.asarray(traj.reward[:TIME_LIMIT])
  assert (rewards[-1] > rewards[0]).all(), rewards


def test_missing_package_is_one_line(monkeypatch):
  monkeypatch.setitem(sys.modules, "jaxmarl", None)  # import jaxmarl raises ImportError
  with pytest.raises(minigrid.MissingPackage) as error:
    envs.make(NAME)
  message = str(error.value)
  assert "\n" not in message and NAME in message and mpe.INSTALL in message


def test_bad_arguments():
  with pytest.raises(ValueError, match="env_kwargs: MPE_simple_spread_v3 has no parameter 'size'"):
    envs.make(NAME, size=3)
  with pytest.raises(ValueError, match="name: expected one of"):
    mpe.MultiAgentMPE("MPE_simple_tag_v3")
