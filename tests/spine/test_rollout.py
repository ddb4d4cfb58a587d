"""Tests of hrljax.rollout: terminated vs truncated, true final observations, episode statistics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs, rollout


def _constant_policy(action):
  def policy(params, obs, key):
    del params, key
    return jnp.full((obs.shape[0],), action, jnp.int32), {"seen": obs[:, 0]}

  return policy


def test_truncation_is_not_termination_and_keeps_final_observation():
  env, params = envs.make("CartPole-v1", max_steps_in_episode=3)
  carry = rollout.reset(env, params, jax.random.key(0), 2)

  # The pole cannot fall within 3 steps, so every episode hits the time limit.
  def push_left(p, obs, key):
    del p, key
    return jnp.zeros((obs.shape[0],), jnp.int32), None

  carry, traj = jax.jit(
    lambda c: rollout.rollout(env, params, push_left, None, c, jax.random.key(1), 7)
  )(carry)
  truncated = np.asarray(traj.truncated)
  assert truncated[2].all() and truncated[5].all() and truncated.sum() == 4
  assert not np.asarray(traj.terminated).any()
  # The stored successor at a truncation is the pre-reset observation, not the next episode's
  # first observation, which is the obs of the following step.
  assert not np.allclose(traj.next_obs[2], traj.obs[3])
  np.testing.assert_allclose(traj.next_obs[1], traj.obs[2])
  np.testing.assert_allclose(traj.episode_return[2], [3.0, 3.0])
  np.testing.assert_allclose(traj.episode_length[5], [3, 3])
  assert carry.running_length.tolist() == [1, 1]


def test_termination_and_policy_extras_and_statistics():
  env, params = envs.make("CartPole-v1")
  carry = rollout.reset(env, params, jax.random.key(0), 3)
  _, traj = rollout.rollout(env, params, _constant_policy(1), None, carry, jax.random.key(1), 40)
  terminated = np.asarray(traj.terminated)
  assert terminated.any() and not np.asarray(traj.truncated).any()
  np.testing.assert_allclose(traj.policy_extras["seen"], traj.obs[..., 0])
  stats = rollout.episode_statistics(traj)
  first = terminated.argmax(axis=0)
  assert float(stats["episodes"]) == terminated.sum()
  # each env's first episode lasts first+1 steps with reward 1 per step
  assert np.asarray(traj.episode_return)[first, np.arange(3)].tolist() == (first + 1).tolist()


def test_episode_statistics_nan_when_no_episode_ended():
  env, params = envs.make("CartPole-v1")
  carry = rollout.reset(env, params, jax.random.key(0), 2)
  _, traj = rollout.rollout(env, params, _constant_policy(0), None, carry, jax.random.key(1), 2)
  assert np.isnan(rollout.episode_statistics(traj)["episode_return"])


def test_evaluate_counts_first_episode_per_environment():
  env, params = envs.make("CartPole-v1", max_steps_in_episode=20)

  def balance(p, obs, key):
    del p, key
    return (obs[:, 2] > 0).astype(jnp.int32), None  # push toward the pole's lean

  out = rollout.evaluate(env, params, balance, None, jax.random.key(0), 4, 25)
  assert float(out["eval_return"]) == 20.0 and float(out["eval_length"]) == 20.0


def test_rollout_is_deterministic_per_key():
  env, params = envs.make("CartPole-v1")

  def random_policy(p, obs, key):
    del p
    return jax.random.randint(key, (obs.shape[0],), 0, 2), None

  run = jax.jit(
    lambda k: (
      rollout.rollout(env, params, random_policy, None, rollout.reset(env, params, k, 4), k, 16)[
        1
      ].reward
    )
  )
  np.testing.assert_array_equal(run(jax.random.key(3)), run(jax.random.key(3)))


def test_env_registry_errors():
  with pytest.raises(ValueError, match="env_name"):
    envs.make("NoSuchEnv-v0")
  with pytest.raises(ValueError, match="env_kwargs"):
    envs.make("CartPole-v1", not_a_field=1)
  spec = envs.spec(*envs.make("CartPole-v1"))
  assert spec.discrete and spec.action_dim == 2 and spec.observation_shape == (4,)


def test_own_environments_are_registered_and_take_param_overrides():
  for name in (
    "TokenGame-v0",
    "PointHazard-v0",
    "Chain1D-v0",
    "SafeCartPole-v0",
    "SafeCartPole-discrete-v0",
  ):
    assert name in envs.available()
    env, params = envs.make(name)
    obs, _ = env.reset(jax.random.key(0), params)
    assert obs.shape == envs.spec(env, params).observation_shape
  _, params = envs.make("PointHazard-v0", max_steps_in_episode=50)
  assert params.max_steps_in_episode == 50


@pytest.mark.parametrize(
  "name, overrides",
  [("CartPole-v1", {"max_steps_in_episode": 7}), ("FourRooms-misc", {"max_steps_in_episode": 9})],
)
def test_batched_auto_reset_equals_gymnax_step(monkeypatch, name, overrides):
  """The fast path (reset only when some env is done) computes exactly gymnax's step."""
  env, params = envs.make(name, **overrides)
  assert rollout.plain._uses_base_step(env)

  def random_policy(p, obs, key):
    del p
    return jax.random.randint(key, (obs.shape[0],), 0, env.num_actions), None

  def run():
    carry = rollout.reset(env, params, jax.random.key(0), 5)
    return rollout.rollout(env, params, random_policy, None, carry, jax.random.key(1), 30)

  fast_carry, fast = jax.jit(run)()
  monkeypatch.setattr(rollout.plain, "_uses_base_step", lambda env: False)
  slow_carry, slow = jax.jit(run)()
  assert np.asarray(fast.done).sum() > 5  # episodes did end and reset
  for a, b in zip(jax.tree.leaves((fast_carry, fast)), jax.tree.leaves((slow_carry, slow))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
