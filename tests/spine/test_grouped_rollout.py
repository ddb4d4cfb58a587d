"""Tests of the grouped rollouts of hrljax.rollout: G tasks x K samples, one episode each."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs, rollout


def _four_rooms(max_steps=500):
  return envs.make(
    "FourRooms-misc", resample_init_pos=True, resample_goal_pos=True, max_steps_in_episode=max_steps
  )


def _uniform(num_actions):
  def policy(params, obs, key):
    del params
    action = jax.random.randint(key, (obs.shape[0],), 0, num_actions)
    return action, jnp.zeros((obs.shape[0],), jnp.float32)

  return policy


def test_grouped_reset_members_share_the_start_and_groups_differ():
  env, params = _four_rooms()
  carry, group_ids = jax.jit(lambda k: rollout.grouped_reset(env, params, k, 5, 3))(
    jax.random.key(0)
  )
  assert group_ids.dtype == jnp.int32
  np.testing.assert_array_equal(group_ids, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4])
  obs = np.asarray(carry.obs).reshape(5, 3, 4)  # (agent row, agent col, goal row, goal col)
  for g in range(5):
    np.testing.assert_array_equal(obs[g], np.broadcast_to(obs[g, 0], (3, 4)))
  starts = {tuple(o) for o in obs[:, 0]}
  assert len(starts) == 5  # independent tasks (for this seed every group differs)
  np.testing.assert_array_equal(carry.running_return, 0.0)
  np.testing.assert_array_equal(carry.running_length, 0)


def test_reset_groups_follows_the_ids_in_any_order():
  env, params = _four_rooms()
  key = jax.random.key(3)
  contiguous, _ = rollout.grouped_reset(env, params, key, 3, 2)
  shuffled = rollout.reset_groups(env, params, key, jnp.array([2, 0, 1, 0, 2, 1], jnp.int32))
  c, s = np.asarray(contiguous.obs), np.asarray(shuffled.obs)
  for row, g in enumerate([2, 0, 1, 0, 2, 1]):
    np.testing.assert_array_equal(s[row], c[2 * g])


def test_grouped_reset_bad_arguments():
  env, params = _four_rooms()
  with pytest.raises(ValueError, match="num_groups: expected a Python int >= 1, got 0"):
    rollout.grouped_reset(env, params, jax.random.key(0), 0, 2)
  with pytest.raises(ValueError, match="group_size: expected a Python int >= 1, got True"):
    rollout.grouped_ids(2, True)
  with pytest.raises(ValueError, match="group_ids: expected a rank-1 integer array"):
    rollout.reset_groups(env, params, jax.random.key(0), jnp.zeros((2, 2), jnp.int32))
  with pytest.raises(ValueError, match="group_ids: expected a rank-1 integer array"):
    rollout.reset_groups(env, params, jax.random.key(0), jnp.zeros((4,), jnp.float32))


def test_first_episode_mask_hand_computed():
  done = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 1], [1, 0, 0, 0]], bool)
  expected = np.array([[1, 1, 1, 1], [1, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 0]], bool)
  np.testing.assert_array_equal(rollout.first_episode_mask(jnp.asarray(done)), expected)


def test_grouped_episodes_mask_summary_and_shared_starts():
  num_steps = 24
  env, params = _four_rooms(max_steps=num_steps)
  group_ids = rollout.grouped_ids(4, 6)

  @jax.jit
  def run(key):
    episodes = rollout.grouped_episodes(
      env, params, _uniform(4), None, key, group_ids, num_steps, unroll=2
    )
    return episodes, rollout.summarize_episodes(episodes)

  episodes, summary = run(jax.random.key(7))
  t = episodes.transitions
  assert t.reward.shape == episodes.valid.shape == (num_steps, 24)
  np.testing.assert_array_equal(episodes.group_ids, group_ids)
  obs0 = np.asarray(t.obs[0]).reshape(4, 6, 4)
  assert (obs0 == obs0[:, :1]).all()  # every member of a group starts from the same state
  # Members then diverge (different actions and slips), so later observations differ somewhere.
  assert not (np.asarray(t.obs[5]).reshape(4, 6, 4) == obs0[:, :1]).all()

  done, valid = np.asarray(t.done), np.asarray(episodes.valid)
  reward, terminated = np.asarray(t.reward), np.asarray(t.terminated)
  first_done = done.argmax(axis=0)
  assert done.any(axis=0).all()  # the time limit equals the window: every episode ends in it
  for n in range(24):
    np.testing.assert_array_equal(valid[:, n], np.arange(num_steps) <= first_done[n])
    assert summary.length[n] == first_done[n] + 1
    assert summary.episode_return[n] == reward[: first_done[n] + 1, n].sum()
    assert bool(summary.terminated[n]) == bool(terminated[first_done[n], n])
  assert np.asarray(summary.ended).all()
  # FourRooms pays 1 exactly when the goal is reached, which terminates the episode.
  np.testing.assert_array_equal(summary.episode_return, np.asarray(summary.terminated, float))
  assert 0 < np.asarray(summary.terminated).sum() < 24


def test_episodes_cut_by_the_window_are_not_ended():
  env, params = _four_rooms(max_steps=500)
  episodes = rollout.grouped_episodes(
    env, params, _uniform(4), None, jax.random.key(1), rollout.grouped_ids(2, 2), 3
  )
  summary = rollout.summarize_episodes(episodes)
  running = ~np.asarray(summary.ended)
  assert running.any()
  np.testing.assert_array_equal(np.asarray(summary.length)[running], 3)
  with pytest.raises(ValueError, match="num_steps: expected a Python int >= 1, got 0"):
    rollout.grouped_episodes(
      env, params, _uniform(4), None, jax.random.key(1), rollout.grouped_ids(2, 2), 0
    )
