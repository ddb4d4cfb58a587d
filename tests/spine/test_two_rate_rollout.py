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
  plain_carry, plain = rollout.rollout(
    env, params, uniform_policy, None, carry, jax.random.key(1), 10
  )
  two_carry, two = rollout.two_rate_rollout(
    env,
    params,
    uniform_policy,
    None,
    direct,
    rollout.no_safety_layer,
    None,
    carry,
    jax.random.key(1),
    10,
    1,
    info_keys=("cost",),
  )
  for expected, actual in zip(
    jax.tree.leaves((plain_carry, plain)), jax.tree.leaves((two_carry, two.decision))
  ):
    np.testing.assert_array_equal(expected, actual)
  np.testing.assert_array_equal(two.num_substeps, np.ones((10, 3)))
  np.testing.assert_array_equal(two.control.action[:, 0], plain.action)
  assert not np.any(two.control.intervened)


def test_decisions_sum_rewards_count_substeps_and_freeze_ended_environments():
  # Episodes of 7 control steps with K = 3: decisions of 3, 3 and 1 executed control steps (the
  # episode is truncated inside the third), then the next episode starts at a decision boundary.
  env, params = make_env(max_steps_in_episode=7)
  carry = rollout.reset(env, params, jax.random.key(0), 2)
  _, traj = rollout.two_rate_rollout(
    env,
    params,
    uniform_policy,
    None,
    direct,
    rollout.no_safety_layer,
    None,
    carry,
    jax.random.key(1),
    4,
    3,
    info_keys=("cost", "violation"),
  )
  control, decision = traj.control, traj.decision
  np.testing.assert_array_equal(traj.num_substeps, [[3, 3], [3, 3], [1, 1], [3, 3]])
  np.testing.assert_array_equal(control.active[2], [[True, True], [False, False], [False, False]])
  np.testing.assert_array_equal(
    decision.truncated, [[False] * 2, [False] * 2, [True] * 2, [False] * 2]
  )
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
  rightwards = lambda params, obs, key: (jnp.tile(jnp.asarray([1.0, 0.0]), (obs.shape[0], 1)), None)
  # Start x = -0.7, 0.05 per step: x > -0.58 first holds at the 4th control step (x = -0.55).
  _, traj = rollout.two_rate_rollout(
    env, params, rightwards, None, direct, position_layer, -0.58, carry, jax.random.key(1), 2, 5
  )
  control = traj.control
  intervened = np.asarray(control.intervened[:, :, 0])
  np.testing.assert_array_equal(
    intervened, [[False, False, False, True, True], [True, True, True, True, True]]
  )
  np.testing.assert_array_equal(control.proposed_action[:, :, 0], np.tile([1.0, 0.0], (2, 5, 1)))
  expected = np.where(intervened[..., None], [0.0, -1.0], [1.0, 0.0])
  np.testing.assert_array_equal(control.action[:, :, 0], expected)
  np.testing.assert_array_equal(traj.intervened[:, 0], [True, True])
  # The environment executed the layer's action: p' = clip(p + dt * executed) (y reaches the wall).
  positions = np.asarray(control.next_obs[:, :, 0, :2], np.float64).reshape(-1, 2)
  expected_positions = np.clip(
    np.array([-0.7, -0.7]) + DT * np.cumsum(expected.reshape(-1, 2), axis=0), -1.0, 1.0
  )
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
  _, traj = rollout.two_rate_rollout(
    env,
    params,
    uniform_policy,
    None,
    controller,
    recording_layer,
    None,
    carry,
    jax.random.key(1),
    3,
    2,
    safety_noise_fn=noise_fn,
  )
  assert seen == [(4, 2)]
  np.testing.assert_allclose(
    traj.control.proposed_action,
    0.5 * np.broadcast_to(traj.decision.action[:, None], (3, 2, 4, 2)),
    rtol=1e-6,
  )
  noise = np.asarray(traj.control.action) - np.asarray(traj.control.proposed_action)
  assert np.all(np.abs(noise) > 0) and np.all(np.abs(noise) < 0.1)
  assert len({float(x) for x in noise[:, :, 0, 0].ravel()}) == 6  # a fresh draw per control step


@pytest.mark.parametrize(
  "field, value", [("num_decisions", 0), ("control_steps", 0), ("control_steps", 2.0)]
)
def test_bad_counts_raise(field, value):
  env, params = make_env()
  carry = rollout.reset(env, params, jax.random.key(0), 1)
  kwargs = {"num_decisions": 2, "control_steps": 2, field: value}
  with pytest.raises(ValueError, match=field):
    rollout.two_rate_rollout(
      env,
      params,
      uniform_policy,
      None,
      direct,
      rollout.no_safety_layer,
      None,
      carry,
      jax.random.key(1),
      **kwargs,
    )


def random_reflex(key, obs_dim, latch=True):
  """A `Reflex` with random linear parts, and its weights w: fires where w·[obs, proposed] > b
  (b = safety_params), recovers with tanh(M obs + noise)."""
  w_key, m_key = jax.random.split(key)
  w = jax.random.normal(w_key, (obs_dim + 2, 1))
  m = jax.random.normal(m_key, (obs_dim, 2))

  def trigger(threshold, obs, proposed):
    return (jnp.concatenate([obs, proposed], axis=-1) @ w)[:, 0] > threshold

  def recover(threshold, obs, proposed, noise):
    return jnp.tanh(obs @ m + noise)

  return rollout.Reflex(trigger_fn=trigger, recovery_fn=recover, latch=latch), np.asarray(w)


def random_reflex_weights(key, obs_dim):
  """`random_reflex`'s weights (w, M) for `key`, as arrays."""
  w_key, m_key = jax.random.split(key)
  return jax.random.normal(w_key, (obs_dim + 2, 1)), jax.random.normal(m_key, (obs_dim, 2))


def linear_reflex(latch=True):
  """`random_reflex` with its weights read from the reflex parameters `(b, w, M)` instead of
  closed over, so that one compiled rollout serves every seed."""

  def trigger(reflex_params, obs, proposed):
    threshold, w, _ = reflex_params
    return (jnp.concatenate([obs, proposed], axis=-1) @ w)[:, 0] > threshold

  def recover(reflex_params, obs, proposed, noise):
    return jnp.tanh(obs @ reflex_params[2] + noise)

  return rollout.Reflex(trigger_fn=trigger, recovery_fn=recover, latch=latch)


@functools.lru_cache(maxsize=None)
def lookahead_rollout():
  """`(env, params, run)`: `run((b, w, M), carry, key, lookahead)`, the jitted rollout of 8
  decisions of K = 5 in 6 environments (episodes of 13 control steps) with `linear_reflex`, one
  program per `lookahead` for all seeds."""
  env, params = make_env(max_steps_in_episode=13)
  reflex = linear_reflex()
  noise_fn = lambda key, leading: 0.3 * jax.random.normal(key, leading + (6, 2))
  controller = lambda obs, command: jnp.clip(command - obs[:, :2], -1.0, 1.0)

  @functools.partial(jax.jit, static_argnames="lookahead")
  def run(reflex_params, carry, key, lookahead):
    return rollout.two_rate_rollout(
      env,
      params,
      uniform_policy,
      None,
      controller,
      reflex,
      reflex_params,
      carry,
      key,
      8,
      5,
      info_keys=("cost",),
      safety_noise_fn=noise_fn,
      lookahead=lookahead,
    )

  return env, params, run


@pytest.mark.bitwise
def test_lookahead_reflex_reproduces_the_per_step_reflex_exactly():
  # Seeds 0-2 in one test: a `bitwise` test compiles inside `bitwise_compile`, which clears JAX's
  # caches on entry and exit, so a test per seed would trace and lower both programs again.
  for seed in range(3):
    check_lookahead_against_the_per_step_reflex(seed)


def check_lookahead_against_the_per_step_reflex(seed):
  # Episodes of 13 control steps, K = 5: episodes end inside decisions (frozen environments), the
  # threshold puts the first reflex anywhere in a decision (or nowhere).
  env, params, run = lookahead_rollout()
  keys = jax.random.split(jax.random.key(seed), 4)  # keys[2] unused: keeps the seeds' draws
  carry = rollout.reset(env, params, keys[0], 6)
  w, m = random_reflex_weights(keys[1], carry.obs.shape[1])

  # The threshold: the 0.9 quantile of the scores of the nominal actions (float32, as the
  # reflex compares; one argument type for every call, hence one program).
  nominal = run((np.float32(np.inf), w, m), carry, keys[3], lookahead=False)[1].control
  scores = np.concatenate([np.asarray(nominal.obs), np.asarray(nominal.proposed_action)], -1)
  scores = scores @ np.asarray(w)
  threshold = np.float32(np.quantile(scores, 0.9))
  fast = run((threshold, w, m), carry, keys[3], lookahead=True)
  slow = run((threshold, w, m), carry, keys[3], lookahead=False)
  intervened = np.asarray(slow[1].control.intervened)
  assert intervened.any() and not intervened.all(), seed
  fired = intervened.any(axis=1)
  assert np.any(np.argmax(intervened, axis=1)[fired] > 0), seed  # a reflex starts mid-decision
  for expected, actual in zip(jax.tree.leaves(slow), jax.tree.leaves(fast)):
    np.testing.assert_array_equal(expected, actual, err_msg=f"seed {seed}")


# ----------------------------------------------------------------------------------------------
# Option (b): the reflex ends the decision (`two_rate_rollout_end_decision`).
# ----------------------------------------------------------------------------------------------


def position_reflex(recovery_action):
  """Fires where x > threshold (safety_params); recovers with a fixed action."""

  def trigger(threshold, obs, proposed):
    return obs[:, 0] > threshold

  def recover(threshold, obs, proposed, noise):
    return jnp.tile(jnp.asarray(recovery_action), (obs.shape[0], 1))

  return rollout.Reflex(trigger_fn=trigger, recovery_fn=recover, latch=False)


def rightwards(params, obs, key):
  return jnp.tile(jnp.asarray([1.0, 0.0]), (obs.shape[0], 1)), None


def run_rightwards(recovery_action, recovery_credit):
  env, params = make_env()
  carry = rollout.reset(env, params, jax.random.key(0), 1)
  _, traj = rollout.two_rate_rollout_end_decision(
    env,
    params,
    rightwards,
    None,
    direct,
    position_reflex(recovery_action),
    -0.58,
    carry,
    jax.random.key(1),
    2,
    5,
    recovery_credit=recovery_credit,
  )
  squeeze = lambda x: np.asarray(x).reshape((10,) + np.shape(x)[3:])  # [T, K, 1, ...] -> [10, ...]
  return jax.tree.map(squeeze, traj)


@pytest.mark.parametrize(
  "credit, lengths, next_x",
  [("reflex_state", [3, 1, 1, 1], -0.55), ("recovery_step", [4, 2, 2, 2], -0.6)],
)
def test_the_reflex_ends_the_decision_and_the_task_decides_again_after_one_recovery_step(
  credit, lengths, next_x
):
  # x = -0.7 + 0.05 per step to the right, -0.05 per recovery step (to the left); the reflex
  # fires at x = -0.55 > -0.58: after 3 nominal steps, then after every single one (from -0.6).
  traj = run_rightwards([-1.0, 0.0], credit)
  fires = [False, False, False, True, False, True, False, True, False, True]
  np.testing.assert_array_equal(traj.control.intervened, fires)
  np.testing.assert_array_equal(traj.intervened, fires)
  np.testing.assert_array_equal(traj.control.action[:, 0], np.where(fires, -1.0, 1.0))
  # A decision ends at each reflex (and no other time: K = 5 is never reached).
  np.testing.assert_array_equal(traj.valid, fires)
  np.testing.assert_array_equal(traj.num_substeps[traj.valid], lengths)
  np.testing.assert_allclose(
    traj.decision.obs[traj.valid][:, 0], [-0.7, -0.6, -0.6, -0.6], atol=1e-6
  )
  np.testing.assert_allclose(traj.decision.next_obs[traj.valid][:, 0], [next_x] * 4, atol=1e-6)
  # The decision's reward: the rewards of its counted control steps.
  counted = ~np.asarray(fires) if credit == "reflex_state" else np.ones(10, bool)
  rewards = np.where(counted, traj.control.reward, 0.0)
  ends = np.flatnonzero(fires)
  starts = np.concatenate([[0], ends[:-1] + 1])
  expected = [rewards[s : e + 1].sum() for s, e in zip(starts, ends)]
  np.testing.assert_allclose(traj.decision.reward[traj.valid], expected, rtol=1e-5)
  assert not np.any(traj.decision.terminated | traj.decision.truncated)


@pytest.mark.parametrize(
  "credit, valid_steps, lengths",
  [("reflex_state", [3], [3]), ("recovery_step", [3, 4, 5, 6, 7, 8, 9], [4, 1, 1, 1, 1, 1, 1])],
)
def test_a_command_rejected_at_its_first_control_step_is_a_decision_only_with_recovery_credit(
  credit, valid_steps, lengths
):
  # Recovery moves down, x stays at -0.55: every new command's first nominal action is rejected,
  # so π_rec keeps control; with "reflex_state" those commands executed nothing (not stored).
  traj = run_rightwards([0.0, -1.0], credit)
  np.testing.assert_array_equal(traj.control.intervened, np.arange(10) >= 3)
  np.testing.assert_array_equal(np.flatnonzero(traj.valid), valid_steps)
  np.testing.assert_array_equal(traj.num_substeps[traj.valid], lengths)


def reference_decisions(control, command, credit, control_steps):
  """Option (b)'s decisions rebuilt in Python from a `[S, N]` control stream: per environment a
  list of (end step, start step, n, reward, successor, terminated) tuples."""
  num_steps, num_envs = control.reward.shape
  done = np.asarray(control.terminated | control.truncated)
  decisions = []
  for n in range(num_envs):
    ended, start, taken, reward = [], 0, 0, 0.0
    for t in range(num_steps):
      fires = bool(control.intervened[t, n])
      if fires and credit == "reflex_state":
        if taken > 0:
          ended.append((t, start, taken, reward, control.obs[t, n], False))
        start, taken, reward = t + 1, 0, 0.0
        continue
      taken, reward = taken + 1, reward + float(control.reward[t, n])
      if fires or done[t, n] or taken == control_steps or t == num_steps - 1:
        ended.append(
          (t, start, taken, reward, control.next_obs[t, n], bool(control.terminated[t, n]))
        )
        start, taken, reward = t + 1, 0, 0.0
      elif t + 1 < num_steps:  # the command stays in force inside a decision
        np.testing.assert_array_equal(command[t + 1, n], command[t, n])
    decisions.append(ended)
  return decisions


@functools.lru_cache(maxsize=None)
def end_decision_rollout(credit):
  """`(env, params, run)`: `run((b, w, M), carry, key)`, the jitted option-(b) rollout of 8
  decisions of K = 5 in 4 environments (episodes of 13 control steps) with a non-latching
  `linear_reflex`, one program per credit for all seeds."""
  env, params = make_env(max_steps_in_episode=13)
  reflex = linear_reflex(latch=False)
  controller = lambda obs, command: jnp.clip(command - obs[:, :2], -1.0, 1.0)
  noise_fn = lambda key, leading: 0.3 * jax.random.normal(key, leading + (4, 2))
  run = jax.jit(
    lambda reflex_params, carry, key: rollout.two_rate_rollout_end_decision(
      env,
      params,
      uniform_policy,
      None,
      controller,
      reflex,
      reflex_params,
      carry,
      key,
      8,
      5,
      info_keys=("cost",),
      safety_noise_fn=noise_fn,
      recovery_credit=credit,
    )
  )
  return env, params, run


@pytest.mark.parametrize("credit", rollout.RECOVERY_CREDITS)
@pytest.mark.parametrize("seed", range(2))
def test_end_decision_matches_a_python_reference_with_episode_ends_and_reflexes(credit, seed):
  # Episodes of 13 control steps (they end inside decisions), K = 5, a random linear reflex
  # firing at about 20% of the nominal actions.
  env, params, run = end_decision_rollout(credit)
  keys = jax.random.split(jax.random.key(seed), 3)
  carry = rollout.reset(env, params, keys[0], 4)
  w, m = random_reflex_weights(keys[1], carry.obs.shape[1])
  nominal = run((np.float32(np.inf), w, m), carry, keys[2])[1].control
  scores = np.concatenate([np.asarray(nominal.obs), np.asarray(nominal.proposed_action)], -1)
  _, traj = run((np.float32(np.quantile(scores @ np.asarray(w), 0.8)), w, m), carry, keys[2])
  flat = lambda x: np.asarray(x).reshape((40,) + np.shape(x)[2:])
  control, command = jax.tree.map(flat, traj.control), flat(traj.command)
  valid, taken = flat(traj.valid), flat(traj.num_substeps)
  decision = jax.tree.map(flat, traj.decision)
  assert control.intervened.any() and control.active.all()
  assert (control.terminated | control.truncated).any()
  # Executed actions: the recovery action where the reflex fired, else the controller's.
  np.testing.assert_allclose(
    control.proposed_action, np.clip(command - control.obs[..., :2], -1.0, 1.0), atol=1e-6
  )
  assert np.all(np.any(control.action != control.proposed_action, axis=-1) <= control.intervened)
  lengths = set()
  for n, ended in enumerate(reference_decisions(control, command, credit, 5)):
    np.testing.assert_array_equal(np.flatnonzero(valid[:, n]), [e[0] for e in ended])
    for end, start, length, reward, successor, terminated in ended:
      lengths.add(length)
      assert taken[end, n] == length
      np.testing.assert_allclose(decision.reward[end, n], reward, rtol=1e-5, atol=1e-6)
      np.testing.assert_array_equal(decision.next_obs[end, n], successor)
      assert decision.terminated[end, n] == terminated
      # The decision was taken where it started, with the command in force from there on.
      np.testing.assert_array_equal(decision.obs[end, n], control.obs[start, n])
      np.testing.assert_array_equal(decision.action[end, n], command[start, n])
  assert len(lengths) > 2 and max(lengths) == 5  # variable lengths, full decisions too


def test_end_decision_without_a_reflex_is_the_latching_rollout():
  # No reflex fires and no episode ends inside a decision (K = 5 divides the 15-step episodes):
  # option (b) takes the same decisions, keys and control steps as option (a).
  env, params = make_env(max_steps_in_episode=15)
  keys = jax.random.split(jax.random.key(4), 3)
  carry = rollout.reset(env, params, keys[0], 3)
  reflex, _ = random_reflex(keys[1], carry.obs.shape[1])
  noise_fn = lambda key, leading: 0.3 * jax.random.normal(key, leading + (3, 2))
  controller = lambda obs, command: jnp.clip(command - obs[:, :2], -1.0, 1.0)
  common = (env, params, uniform_policy, None, controller)
  carry_a, latched = rollout.two_rate_rollout(
    *common, reflex, jnp.inf, carry, keys[2], 6, 5, info_keys=("cost",), safety_noise_fn=noise_fn
  )
  carry_b, ended = rollout.two_rate_rollout_end_decision(
    *common,
    reflex._replace(latch=False),
    jnp.inf,
    carry,
    keys[2],
    6,
    5,
    info_keys=("cost",),
    safety_noise_fn=noise_fn,
  )
  for expected, actual in zip(
    jax.tree.leaves((carry_a, latched.control)), jax.tree.leaves((carry_b, ended.control))
  ):
    np.testing.assert_array_equal(expected, actual)
  np.testing.assert_array_equal(
    ended.valid, np.broadcast_to(np.arange(5) == 4, (6, 3, 5)).transpose(0, 2, 1)
  )
  at_end = lambda x: np.asarray(x)[:, 4]  # [T, N, ...]: the decisions end at control step K - 1
  np.testing.assert_array_equal(at_end(ended.num_substeps), latched.num_substeps)
  for field in ("obs", "action", "terminated", "truncated", "next_obs", "policy_extras"):
    np.testing.assert_array_equal(
      at_end(getattr(ended.decision, field)), getattr(latched.decision, field), err_msg=field
    )
  np.testing.assert_allclose(at_end(ended.decision.reward), latched.decision.reward, rtol=1e-6)
  assert np.asarray(latched.decision.truncated).any()  # episodes ended (at decision ends)


@pytest.mark.parametrize(
  "kwargs, message",
  [(dict(recovery_credit="after"), "recovery_credit"), (dict(num_decisions=0), "num_decisions")],
)
def test_end_decision_bad_inputs_raise(kwargs, message):
  env, params = make_env()
  carry = rollout.reset(env, params, jax.random.key(0), 1)
  args = dict(num_decisions=2, control_steps=2)
  args.update(kwargs)
  with pytest.raises(ValueError, match=message):
    rollout.two_rate_rollout_end_decision(
      env,
      params,
      rightwards,
      None,
      direct,
      position_reflex([0.0, 0.0]),
      0.0,
      carry,
      jax.random.key(1),
      **args,
    )
  with pytest.raises(ValueError, match="reflex"):
    rollout.two_rate_rollout_end_decision(
      env,
      params,
      rightwards,
      None,
      direct,
      rollout.no_safety_layer,
      0.0,
      carry,
      jax.random.key(1),
      2,
      2,
    )
