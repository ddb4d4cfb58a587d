"""Tests of `hrljax.rollout.two_rate_rollout`: equivalence with `rollout` at K = 1, decision-level
aggregation (SMDP step counts, truncation inside a decision, frozen environments), the safety layer
at the control rate (proposed vs executed actions, interventions, latching), and bad inputs."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs, rollout

DT = 0.05  # PointHazard's default control step


def uniform_policy(params, obs, key):
  action = jax.random.uniform(key, (obs.shape[0], 2), minval=-1.0, maxval=1.0)
  return action, action


def direct(obs, command):
  return command


def make_env(**overrides):
  return envs.make("PointHazard-v0", **overrides)


def test_one_control_step_per_decision_without_a_layer_is_the_plain_rollout():
  env, params = make_env(max_steps_in_episode=7)
  carry = rollout.reset(env, params, jax.random.key(0), 3)
  plain_carry, plain = rollout.rollout(env, params, uniform_policy, None, carry,
                                       jax.random.key(1), 10)
  two_carry, two = rollout.two_rate_rollout(env, params, uniform_policy, None, direct,
                                            rollout.no_safety_layer, None, carry,
                                            jax.random.key(1), 10, 1, info_keys=("cost",))
  for expected, actual in zip(jax.tree.leaves((plain_carry, plain)),
                              jax.tree.leaves((two_carry, two.decision))):
    np.testing.assert_array_equal(expected, actual)
  np.testing.assert_array_equal(two.num_substeps, np.ones((10, 3)))
  np.testing.assert_array_equal(two.control.action[:, 0], plain.action)
  assert not np.any(two.control.intervened)


def test_decisions_sum_rewards_count_substeps_and_freeze_ended_environments():
  # Episodes of 7 control steps with K = 3: decisions of 3, 3 and 1 executed control steps (the
  # episode is truncated inside the third), then the next episode starts at a decision boundary.
  env, params = make_env(max_steps_in_episode=7)
  carry = rollout.reset(env, params, jax.random.key(0), 2)
  _, traj = rollout.two_rate_rollout(env, params, uniform_policy, None, direct,
                                     rollout.no_safety_layer, None, carry, jax.random.key(1), 4, 3,
                                     info_keys=("cost", "violation"))
  control, decision = traj.control, traj.decision
  np.testing.assert_array_equal(traj.num_substeps, [[3, 3], [3, 3], [1, 1], [3, 3]])
  np.testing.assert_array_equal(control.active[2], [[True, True], [False, False], [False, False]])
  np.testing.assert_array_equal(decision.truncated, [[False] * 2, [False] * 2, [True] * 2,
                                                     [False] * 2])
  assert not np.any(decision.terminated)
  rewards = np.asarray(control.reward, np.float64) * np.asarray(control.active)
  np.testing.assert_allclose(decision.reward, rewards.sum(axis=1), rtol=1e-6)
  np.testing.assert_array_equal(decision.episode_length[2], [7, 7])
  np.testing.assert_allclose(decision.episode_return[2], rewards[:3].sum(axis=(0, 1)), rtol=1e-5)
  # The decision's successor is its last executed step's; the frozen steps did not move the env.
  np.testing.assert_array_equal(decision.next_obs[2], control.next_obs[2, 0])
  np.testing.assert_array_equal(decision.next_obs[0], control.next_obs[0, 2])
  np.testing.assert_array_equal(decision.obs[1], control.next_obs[0, 2])
  # Every control step of a decision executes the same command; the control-rate stream chains.
  np.testing.assert_array_equal(control.action[0], np.broadcast_to(decision.action[0], (3, 2, 2)))
  np.testing.assert_array_equal(control.obs[0, 1:], control.next_obs[0, :-1])
  # After the truncation the fourth decision starts from the reset (start) position.
  np.testing.assert_allclose(decision.obs[3][:, :2], [[-0.7, -0.7]] * 2)
  assert control.info["cost"].dtype == jnp.float32 and control.info["violation"].dtype == bool


def position_layer(safety_params, obs, proposed, key, latched):
  """Intervenes (action (0, -1)) once x > threshold, and for the rest of the decision (latch)."""
  del key
  intervened = (obs[:, 0] > safety_params) | latched
  return jnp.where(intervened[:, None], jnp.asarray([0.0, -1.0]), proposed), intervened


def test_the_safety_layer_acts_at_every_control_step_and_both_actions_are_recorded():
  env, params = make_env()
  carry = rollout.reset(env, params, jax.random.key(0), 1)
  rightwards = lambda params, obs, key: (jnp.tile(jnp.asarray([1.0, 0.0]), (obs.shape[0], 1)),
                                         None)
  # Start x = -0.7, 0.05 per step: x > -0.58 first holds at the 4th control step (x = -0.55).
  _, traj = rollout.two_rate_rollout(env, params, rightwards, None, direct, position_layer,
                                     -0.58, carry, jax.random.key(1), 2, 5)
  control = traj.control
  intervened = np.asarray(control.intervened[:, :, 0])
  np.testing.assert_array_equal(intervened, [[False, False, False, True, True],
                                             [True, True, True, True, True]])
  np.testing.assert_array_equal(control.proposed_action[:, :, 0], np.tile([1.0, 0.0], (2, 5, 1)))
  expected = np.where(intervened[..., None], [0.0, -1.0], [1.0, 0.0])
  np.testing.assert_array_equal(control.action[:, :, 0], expected)
  np.testing.assert_array_equal(traj.intervened[:, 0], [True, True])
  # The environment executed the layer's action: p' = clip(p + dt * executed) (y reaches the wall).
  positions = np.asarray(control.next_obs[:, :, 0, :2], np.float64).reshape(-1, 2)
  expected_positions = np.clip(
      np.array([-0.7, -0.7]) + DT * np.cumsum(expected.reshape(-1, 2), axis=0), -1.0, 1.0)
  np.testing.assert_allclose(positions, expected_positions, atol=1e-6)


def test_the_layer_sees_the_controller_output_and_per_step_noise():
  env, params = make_env()
  carry = rollout.reset(env, params, jax.random.key(0), 4)
  controller = lambda obs, command: 0.5 * command
  seen = []

  def recording_layer(safety_params, obs, proposed, noise, latched):
    seen.append(noise.shape)
    return proposed + noise, jnp.zeros(proposed.shape[:1], bool)

  noise_fn = lambda key, leading: 0.01 * jax.random.normal(key, leading + (4, 2))
  _, traj = rollout.two_rate_rollout(env, params, uniform_policy, None, controller,
                                     recording_layer, None, carry, jax.random.key(1), 3, 2,
                                     safety_noise_fn=noise_fn)
  assert seen == [(4, 2)]
  np.testing.assert_allclose(traj.control.proposed_action,
                             0.5 * np.broadcast_to(traj.decision.action[:, None], (3, 2, 4, 2)),
                             rtol=1e-6)
  noise = np.asarray(traj.control.action) - np.asarray(traj.control.proposed_action)
  assert np.all(np.abs(noise) > 0) and np.all(np.abs(noise) < 0.1)
  assert len({float(x) for x in noise[:, :, 0, 0].ravel()}) == 6  # a fresh draw per control step


@pytest.mark.parametrize("field, value", [("num_decisions", 0), ("control_steps", 0),
                                          ("control_steps", 2.0)])
def test_bad_counts_raise(field, value):
  env, params = make_env()
  carry = rollout.reset(env, params, jax.random.key(0), 1)
  kwargs = {"num_decisions": 2, "control_steps": 2, field: value}
  with pytest.raises(ValueError, match=field):
    rollout.two_rate_rollout(env, params, uniform_policy, None, direct, rollout.no_safety_layer,
                             None, carry, jax.random.key(1), **kwargs)


def random_reflex(key, obs_dim, latch=True):
  """A `Reflex` with random linear parts, and its weights w: fires where w·[obs, proposed] > b
  (b = safety_params), recovers with tanh(M obs + noise)."""
  w_key, m_key = jax.random.split(key)
  w = jax.random.normal(w_key, (obs_dim + 2, 1))
  m = jax.random.normal(m_key, (obs_dim, 2))

  def trigger(threshold, obs, proposed):
    return (jnp.concatenate([obs, proposed], axis=-1) @ w)[:, 0] > threshold

  def recover(threshold, obs, noise):
    return jnp.tanh(obs @ m + noise)

  return rollout.Reflex(trigger_fn=trigger, recovery_fn=recover, latch=latch), np.asarray(w)


@pytest.mark.parametrize("seed", range(3))
def test_lookahead_reflex_reproduces_the_per_step_reflex_exactly(seed):
  # Episodes of 13 control steps, K = 5: episodes end inside decisions (frozen environments), the
  # threshold puts the first reflex anywhere in a decision (or nowhere).
  env, params = make_env(max_steps_in_episode=13)
  keys = jax.random.split(jax.random.key(seed), 4)  # keys[2] unused: keeps the seeds' draws
  carry = rollout.reset(env, params, keys[0], 6)
  reflex, w = random_reflex(keys[1], carry.obs.shape[1])
  noise_fn = lambda key, leading: 0.3 * jax.random.normal(key, leading + (6, 2))
  controller = lambda obs, command: jnp.clip(command - obs[:, :2], -1.0, 1.0)

  @functools.partial(jax.jit, static_argnames="lookahead")
  def run(threshold, lookahead):
    return rollout.two_rate_rollout(env, params, uniform_policy, None, controller, reflex,
                                    threshold, carry, keys[3], 8, 5, info_keys=("cost",),
                                    safety_noise_fn=noise_fn, lookahead=lookahead)

  # The threshold: the 0.9 quantile of the scores of the nominal actions.
  nominal = run(jnp.inf, False)[1].control
  scores = np.concatenate([np.asarray(nominal.obs), np.asarray(nominal.proposed_action)], -1)
  scores = scores @ w
  threshold = np.quantile(scores, 0.9)
  fast, slow = run(threshold, True), run(threshold, False)
  intervened = np.asarray(slow[1].control.intervened)
  assert intervened.any() and not intervened.all()
  fired = intervened.any(axis=1)
  assert np.any(np.argmax(intervened, axis=1)[fired] > 0)  # some reflex starts mid-decision
  for expected, actual in zip(jax.tree.leaves(slow), jax.tree.leaves(fast)):
    np.testing.assert_array_equal(expected, actual)
