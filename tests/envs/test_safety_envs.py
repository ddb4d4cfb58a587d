"""Tests for the safety test-bed environments: PointHazard, Chain1D and SafeCartPole.

Expected values are computed independently in NumPy float64 (or by hand; Chain1D's closed-form
values are derived in `docs/safety.md`).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control import cartpole

from hrljax.envs import chain
from hrljax.envs import point_hazard as ph
from hrljax.envs import safe_cartpole as sc

DEFAULT_CENTERS = np.array([[0.0, 0.0], [-0.35, 0.45], [0.45, -0.35]])
DEFAULT_RADII = np.array([0.3, 0.2, 0.2])
DEFAULT_START = np.array([-0.7, -0.7])
DEFAULT_GOAL = np.array([0.7, 0.7])


def _numpy_greedy_episode(steps, dt=0.05, gain=10.0):
  """Greedy goal-seeking point robot in float64: per step (violating, goal reached, progress)."""
  p = DEFAULT_START.copy()
  out = []
  for _ in range(steps):
    command = gain * (DEFAULT_GOAL - p)
    command = command / max(1.0, np.linalg.norm(command))
    new = np.clip(p + dt * command, -1.0, 1.0)
    violating = bool(np.any(np.linalg.norm(new - DEFAULT_CENTERS, axis=1) < DEFAULT_RADII))
    reached = bool(np.linalg.norm(new - DEFAULT_GOAL) <= 0.1)
    progress = np.linalg.norm(p - DEFAULT_GOAL) - np.linalg.norm(new - DEFAULT_GOAL)
    out.append((violating, reached, progress))
    p = new
  return out


def _greedy_rollout(env, params, steps):
  """Scan the greedy waypoint controller through env.step (auto-reset included)."""

  def body(state, key):
    action = ph.waypoint_controller(state.position, state.goal)
    _, state, reward, terminated, truncated, info = env.step(key, state, action, params)
    return state, (
      reward,
      terminated,
      truncated,
      info["cost"],
      info["violation"],
      info["goal_reached"],
      info["barrier"],
    )

  _, state = env.reset(jax.random.key(0), params)
  keys = jax.random.split(jax.random.key(1), steps)
  return jax.jit(lambda s: jax.lax.scan(body, s, keys))(state)[1]


# ---------------------------------------------------------------------------------------------
# PointHazard
# ---------------------------------------------------------------------------------------------


class TestPointHazardGeometry:
  def test_barrier_and_signed_distances_match_numpy(self):
    rng = np.random.default_rng(0)
    positions = rng.uniform(-1.0, 1.0, size=(64, 2))
    centers = jnp.asarray(DEFAULT_CENTERS, jnp.float32)
    radii = jnp.asarray(DEFAULT_RADII, jnp.float32)
    pos = jnp.asarray(positions, jnp.float32)
    values = jax.vmap(ph.barrier_values, (0, None, None))(pos, centers, radii)
    h = jax.vmap(ph.barrier, (0, None, None))(pos, centers, radii)
    dist = jax.vmap(ph.signed_distances, (0, None, None))(pos, centers, radii)
    diff = np.linalg.norm(positions[:, None, :] - DEFAULT_CENTERS[None], axis=-1)
    np.testing.assert_allclose(values, diff**2 - DEFAULT_RADII**2, atol=1e-6)
    np.testing.assert_allclose(h, np.min(diff**2 - DEFAULT_RADII**2, axis=1), atol=1e-6)
    np.testing.assert_allclose(dist, diff - DEFAULT_RADII, atol=1e-6)

  def test_cost_is_positive_exactly_when_barrier_negative(self):
    rng = np.random.default_rng(1)
    positions = rng.uniform(-0.5, 0.5, size=(512, 2))
    # Points exactly on the central hazard's edge in float32 (||p||^2 and r^2 round the
    # same way; cost 0, violation is strict) and the hazard centres.
    edges = np.array([[0.3, 0.0], [0.0, -0.3], [-0.3, 0.0]])
    positions = np.concatenate([positions, edges, DEFAULT_CENTERS]).astype(np.float32)
    centers = jnp.asarray(DEFAULT_CENTERS, jnp.float32)
    radii = jnp.asarray(DEFAULT_RADII, jnp.float32)
    pos = jnp.asarray(positions)

    def signals(p):
      return (
        ph.barrier(p, centers, radii),
        ph.signed_distances(p, centers, radii),
        ph.hazard_cost(p, centers, radii, "indicator"),
        ph.hazard_cost(p, centers, radii, "graded"),
      )

    h, dist, indicator, graded = jax.vmap(signals)(pos)
    inside = np.asarray(h) < 0
    assert 0 < inside.sum() < len(positions)
    np.testing.assert_array_equal(np.asarray(indicator), inside.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(graded) > 0, inside)
    np.testing.assert_array_equal(np.min(np.asarray(dist), axis=1) < 0, inside)
    diff = np.linalg.norm(positions[:, None, :] - DEFAULT_CENTERS[None], axis=-1)
    expected_graded = np.sum(np.maximum(DEFAULT_RADII - diff, 0.0), axis=1)
    np.testing.assert_allclose(graded, expected_graded, atol=1e-6)
    # The edge points: h = 0 up to rounding, no cost; the centres: cost r_i (graded).
    np.testing.assert_array_equal(np.asarray(indicator)[512:515], 0.0)
    np.testing.assert_allclose(np.asarray(graded)[515:], DEFAULT_RADII, atol=1e-6)

  def test_barrier_gradient_is_two_offsets_and_finite_at_centres(self):
    centers = jnp.asarray(DEFAULT_CENTERS, jnp.float32)
    radii = jnp.asarray(DEFAULT_RADII, jnp.float32)
    p = jnp.array([0.1, -0.2], jnp.float32)
    jac = jax.jacobian(ph.barrier_values)(p, centers, radii)
    np.testing.assert_allclose(jac, 2.0 * (np.asarray(p)[None] - DEFAULT_CENTERS), atol=1e-6)
    at_centre = jax.jacobian(ph.signed_distances)(centers[0], centers, radii)
    assert np.all(np.isfinite(at_centre))

  def test_lidar_hand_computed(self):
    centers = jnp.array([[0.5, 0.0]], jnp.float32)
    radii = jnp.array([0.1], jnp.float32)
    origin = jnp.zeros((2,), jnp.float32)
    # Ray 0 (+x) enters the circle at t = 0.4; rays +y, -x, -y miss.
    np.testing.assert_allclose(
      ph.lidar(origin, centers, radii, 4, 1.0), [0.6, 0.0, 0.0, 0.0], atol=1e-6
    )
    # With range 0.2 the hazard is out of range.
    np.testing.assert_allclose(ph.lidar(origin, centers, radii, 4, 0.2), [0, 0, 0, 0])
    # Ray at 45 degrees towards a circle at (0.3, 0.3) of radius 0.1: t = 0.3 sqrt2 - 0.1.
    np.testing.assert_allclose(
      ph.lidar(origin, jnp.array([[0.3, 0.3]]), radii, 8, 1.0)[1],
      1.0 - (0.3 * np.sqrt(2.0) - 0.1),
      atol=1e-6,
    )
    # Inside a hazard every ray reads 1.
    np.testing.assert_allclose(ph.lidar(centers[0], centers, radii, 4, 1.0), np.ones(4))

  def test_waypoint_controller(self):
    p = jnp.zeros((2,), jnp.float32)
    far = ph.waypoint_controller(p, jnp.array([0.6, 0.8], jnp.float32))
    np.testing.assert_allclose(far, [0.6, 0.8], atol=1e-6)  # saturated: unit norm
    near = ph.waypoint_controller(p, jnp.array([0.03, -0.04], jnp.float32), gain=10.0)
    np.testing.assert_allclose(near, [0.3, -0.4], atol=1e-6)  # linear regime

  def test_bad_geometry_inputs(self):
    centers = jnp.asarray(DEFAULT_CENTERS, jnp.float32)
    radii = jnp.asarray(DEFAULT_RADII, jnp.float32)
    with pytest.raises(ValueError, match="cost_type"):
      ph.hazard_cost(jnp.zeros(2), centers, radii, "binary")
    with pytest.raises(AssertionError):
      ph.barrier(jnp.zeros((1, 2)), centers, radii)
    with pytest.raises(AssertionError):
      ph.barrier(jnp.zeros(2), centers, radii[:2])
    with pytest.raises(AssertionError):
      ph.barrier(jnp.zeros(2, jnp.int32), centers, radii)
    with pytest.raises(ValueError, match="num_bins"):
      ph.lidar(jnp.zeros(2), centers, radii, 0, 1.0)


class TestPointHazardEnv:
  def test_reset_observation_and_spaces(self):
    env = ph.PointHazard()
    params = env.default_params
    obs, state = env.reset(jax.random.key(0), params)
    expected = np.concatenate(
      [DEFAULT_START, DEFAULT_GOAL - DEFAULT_START, (DEFAULT_CENTERS - DEFAULT_START).ravel()]
    )
    np.testing.assert_allclose(obs, expected, atol=1e-6)
    assert obs.dtype == jnp.float32 and state.time == 0
    assert env.observation_space(params).shape == obs.shape
    assert bool(env.observation_space(params).contains(obs))
    assert env.action_space(params).shape == (2,) and env.num_actions == 2
    lidar_params = params.replace(observation_type="lidar", dynamics="force", num_lidar_bins=8)
    lidar_obs, _ = env.reset(jax.random.key(0), lidar_params)
    assert lidar_obs.shape == (2 + 2 + 2 + 8,)
    assert env.observation_space(lidar_params).shape == lidar_obs.shape

  def test_one_step_dynamics_reward_and_info(self):
    env = ph.PointHazard()
    params = env.default_params
    _, state = env.reset(jax.random.key(0), params)
    out = env.step(jax.random.key(1), state, jnp.array([3.0, -0.5], jnp.float32), params)
    assert len(out) == 6  # gymnax 1.0: obs, state, reward, terminated, truncated, info
    obs, next_state, reward, terminated, truncated, info = out
    new = DEFAULT_START + 0.05 * np.array([1.0, -0.5])  # the action is clipped to [-1, 1]
    np.testing.assert_allclose(next_state.position, new, atol=1e-6)
    progress = np.linalg.norm(DEFAULT_START - DEFAULT_GOAL) - np.linalg.norm(new - DEFAULT_GOAL)
    np.testing.assert_allclose(reward, progress, atol=1e-6)
    assert not bool(terminated) and not bool(truncated) and next_state.time == 1
    assert {"cost", "violation", "barrier", "goal_reached"} <= set(info)
    assert info["cost"].dtype == jnp.float32 and info["barrier"].dtype == jnp.float32
    assert info["violation"].dtype == jnp.bool_ and info["goal_reached"].dtype == jnp.bool_
    h = np.min(np.sum((new - DEFAULT_CENTERS) ** 2, axis=1) - DEFAULT_RADII**2)
    np.testing.assert_allclose(info["barrier"], h, atol=1e-6)
    np.testing.assert_allclose(obs[:2], new, atol=1e-6)

  def test_continue_on_violation_greedy_episode(self):
    env = ph.PointHazard()
    steps = 40
    reward, terminated, truncated, cost, violation, reached, barrier = _greedy_rollout(
      env, env.default_params, steps
    )
    expected = _numpy_greedy_episode(steps)
    exp_violation = np.array([v for v, _, _ in expected])
    exp_reached = np.array([g for _, g, _ in expected])
    goal_step = int(np.argmax(exp_reached))
    assert exp_violation.sum() > 1 and exp_reached.any()
    # Up to and including the goal step, the env matches the float64 simulation.
    window = slice(0, goal_step + 1)
    np.testing.assert_array_equal(np.asarray(violation)[window], exp_violation[window])
    np.testing.assert_array_equal(np.asarray(cost)[window], exp_violation[window])
    np.testing.assert_array_equal(np.asarray(barrier)[window] < 0, exp_violation[window])
    # Violations do not end the episode; costs accumulate; only the goal terminates.
    np.testing.assert_array_equal(np.asarray(terminated)[window], exp_reached[window])
    assert float(np.sum(np.asarray(cost)[window])) == float(exp_violation.sum())
    progress = np.array([r for _, _, r in expected])[window]
    np.testing.assert_allclose(
      np.asarray(reward)[window], progress + 1.0 * exp_reached[window], atol=1e-5
    )
    assert not np.asarray(truncated).any()

  def test_terminate_on_first_violation(self):
    env = ph.PointHazard()
    params = env.default_params.replace(terminate_on_violation=True)
    _, terminated, truncated, cost, violation, _, _ = _greedy_rollout(env, params, 20)
    first = int(np.argmax([v for v, _, _ in _numpy_greedy_episode(20)]))
    assert np.asarray(terminated)[first] and np.asarray(cost)[first] == 1.0
    assert not np.asarray(terminated)[:first].any()
    assert not np.asarray(violation)[:first].any()
    # After the auto-reset the robot starts again from the start: no violation right away.
    assert not np.asarray(violation)[first + 1]
    assert not np.asarray(truncated).any()

  def test_goal_reached_terminates_with_bonus(self):
    env = ph.PointHazard()
    params = env.default_params.replace(start=jnp.array([0.55, 0.7], jnp.float32))
    _, state = env.reset(jax.random.key(0), params)
    _, _, reward, terminated, truncated, info = env.step(
      jax.random.key(1), state, jnp.array([1.0, 0.0], jnp.float32), params
    )
    assert bool(terminated) and bool(info["goal_reached"]) and not bool(truncated)
    np.testing.assert_allclose(reward, 0.15 - 0.1 + 1.0, atol=1e-6)

  def test_truncation_counts_control_steps(self):
    env = ph.PointHazard()
    params = env.default_params.replace(max_steps_in_episode=3)
    _, state = env.reset(jax.random.key(0), params)
    flags = []
    for t in range(3):
      _, state, _, terminated, truncated, info = env.step(
        jax.random.key(t), state, jnp.zeros(2, jnp.float32), params
      )
      flags.append((bool(terminated), bool(truncated)))
    assert flags == [(False, False), (False, False), (False, True)]
    assert state.time == 0  # auto-reset
    np.testing.assert_allclose(info["final_observation"][:2], DEFAULT_START, atol=1e-6)

  def test_control_steps_per_decision_is_k_calls_of_step(self):
    # The two-rate rollout calls step K times per decision: K steps at constant velocity
    # move K * dt * u and advance the clock by K.
    env = ph.PointHazard()
    params = env.default_params.replace(control_steps_per_decision=4)
    _, state = env.reset(jax.random.key(0), params)
    action = jnp.array([0.5, 0.25], jnp.float32)
    for _ in range(params.control_steps_per_decision):
      _, state, *_ = env.step(jax.random.key(0), state, action, params)
    assert state.time == 4
    np.testing.assert_allclose(
      state.position, DEFAULT_START + 4 * 0.05 * np.array([0.5, 0.25]), atol=1e-6
    )

  def test_force_dynamics_and_wall(self):
    env = ph.PointHazard()
    params = env.default_params.replace(dynamics="force")
    _, state = env.reset(jax.random.key(0), params)
    a = jnp.array([1.0, -0.5], jnp.float32)
    obs, s1, *_ = env.step(jax.random.key(0), state, a, params)
    v1 = 0.05 * np.array([1.0, -0.5])
    np.testing.assert_allclose(s1.velocity, v1, atol=1e-7)
    np.testing.assert_allclose(s1.position, DEFAULT_START + 0.05 * v1, atol=1e-7)
    np.testing.assert_allclose(obs[2:4], v1, atol=1e-7)  # velocity is observed
    _, s2, *_ = env.step(jax.random.key(0), s1, a, params)
    np.testing.assert_allclose(s2.velocity, 2 * v1, atol=1e-7)
    # Moving into the wall: the position is clipped and that velocity component stops.
    at_wall = s2.replace(
      position=jnp.array([0.999, 0.0], jnp.float32), velocity=jnp.array([0.5, 0.5], jnp.float32)
    )
    _, s3, *_ = env.step(jax.random.key(0), at_wall, jnp.zeros(2, jnp.float32), params)
    np.testing.assert_allclose(s3.position, [1.0, 0.025], atol=1e-7)
    np.testing.assert_allclose(s3.velocity, [0.0, 0.5], atol=1e-7)

  def test_noise_is_deterministic_per_key(self):
    env = ph.PointHazard()
    params = env.default_params.replace(noise_std=0.005)
    _, state = env.reset(jax.random.key(0), params)
    action = jnp.array([0.3, 0.3], jnp.float32)
    p1 = env.step(jax.random.key(7), state, action, params)[1].position
    p2 = env.step(jax.random.key(7), state, action, params)[1].position
    p3 = env.step(jax.random.key(8), state, action, params)[1].position
    np.testing.assert_array_equal(p1, p2)
    assert not np.allclose(p1, p3)
    # Without noise the key does not matter.
    quiet = env.default_params
    q1 = env.step(jax.random.key(7), state, action, quiet)[1].position
    q2 = env.step(jax.random.key(8), state, action, quiet)[1].position
    np.testing.assert_array_equal(q1, q2)

  def test_randomised_layouts_respect_keep_out(self):
    env = ph.PointHazard()
    params = env.default_params.replace(
      randomize_start=True, randomize_goal=True, randomize_hazards=True
    )
    keys = jax.random.split(jax.random.key(3), 512)
    _, states = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    start = np.asarray(states.position, np.float64)
    goal = np.asarray(states.goal, np.float64)
    centers = np.asarray(states.hazard_centers, np.float64)
    clearance_start = np.linalg.norm(start[:, None] - centers, axis=-1) - DEFAULT_RADII
    clearance_goal = np.linalg.norm(goal[:, None] - centers, axis=-1) - DEFAULT_RADII
    assert clearance_start.min() >= 0.1 - 1e-6 and clearance_goal.min() >= 0.1 - 1e-6
    assert np.linalg.norm(start - goal, axis=-1).min() >= 0.5 - 1e-6
    assert np.abs(np.concatenate([start, goal, centers.reshape(-1, 2)])).max() <= 0.8
    assert np.unique(centers[:, 0, 0]).size > 500  # layouts differ across keys
    _, again = env.reset(keys[0], params)
    np.testing.assert_array_equal(again.hazard_centers, states.hazard_centers[0])

  def test_transition_gradients(self):
    env = ph.PointHazard()
    params = env.default_params
    _, state = env.reset(jax.random.key(0), params)

    def position_after(env_, action):
      return env_.step_env(jax.random.key(0), state, action, params)[1].position

    action = jnp.array([0.2, -0.3], jnp.float32)
    jac = jax.jacobian(lambda a: position_after(env.with_transition_gradients(), a))(action)
    np.testing.assert_allclose(jac, 0.05 * np.eye(2), atol=1e-7)
    np.testing.assert_array_equal(jax.jacobian(lambda a: position_after(env, a))(action), 0.0)

  def test_bad_params_and_actions(self):
    env = ph.PointHazard()
    params = env.default_params
    with pytest.raises(ValueError, match="control_steps_per_decision"):
      params.replace(control_steps_per_decision=0)
    with pytest.raises(ValueError, match="cost_type"):
      params.replace(cost_type="binary")
    with pytest.raises(ValueError, match="dynamics"):
      params.replace(dynamics="torque")
    with pytest.raises(ValueError, match="observation_type"):
      params.replace(observation_type="pixels")
    with pytest.raises(ValueError, match="randomize_goal"):
      params.replace(randomize_goal=1)
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(AssertionError):
      env.step(jax.random.key(0), state, jnp.zeros(3, jnp.float32), params)
    with pytest.raises(AssertionError):
      env.reset(jax.random.key(0), params.replace(hazard_radii=jnp.ones(2, jnp.float32)))


# ---------------------------------------------------------------------------------------------
# Chain1D
# ---------------------------------------------------------------------------------------------


class TestChain1D:
  @pytest.mark.parametrize(
    "x, gamma, k, q",
    [(0.5, 0.5, 5, 0.0625), (0.95, 0.5, 1, 1.0), (0.0, 0.9, 10, 0.387420), (0.7, 0.5, 3, 0.25)],
  )
  def test_closed_form_vectors(self, x, gamma, k, q):
    xs = jnp.asarray(x, jnp.float32)
    assert int(chain.steps_to_violation(xs, 1.0, 0.1)) == k
    np.testing.assert_allclose(chain.constant_velocity_qrisk(xs, 1.0, 0.1, gamma), q, atol=1e-6)

  def test_env_hits_hazard_after_exactly_k_steps(self):
    env = chain.Chain1D()
    params = env.default_params
    starts = np.concatenate([[0.7, 0.0, 0.5, 0.95, -1.0, 0.9, 0.3], np.linspace(-0.99, 0.99, 25)])
    k = chain.steps_to_violation(jnp.asarray(starts, jnp.float32), 1.0, 0.1)

    def first_violation(x0):
      state = chain.EnvState(x=x0, time=jnp.zeros((), jnp.int32))

      def body(carry, key):
        state, done, count, hit = carry
        _, state, _, terminated, _, info = env.step(key, state, jnp.ones(1), params)
        count = count + jnp.logical_not(done)
        hit = jnp.where(done, hit, info["violation"] & terminated)
        return (state, done | terminated, count, hit), None

      keys = jax.random.split(jax.random.key(0), 40)
      init = (state, jnp.array(False), jnp.array(0), jnp.array(False))
      (_, _, count, hit), _ = jax.lax.scan(body, init, keys)
      return count, hit

    count, hit = jax.jit(jax.vmap(first_violation))(jnp.asarray(starts, jnp.float32))
    expected = np.ceil(np.round((1.0 - starts) / 0.1, 6))  # float64 with rounding before ceil
    np.testing.assert_array_equal(count, np.maximum(expected, 1))
    np.testing.assert_array_equal(k, np.maximum(expected, 1))
    assert np.all(np.asarray(hit))

  def test_step_reward_wall_and_continue_mode(self):
    env = chain.Chain1D()
    params = env.default_params.replace(terminate_on_violation=False)
    state = chain.EnvState(x=jnp.float32(-0.95), time=jnp.zeros((), jnp.int32))
    obs, state, reward, terminated, _, info = env.step(
      jax.random.key(0), state, -jnp.ones(1), params
    )
    np.testing.assert_allclose(obs, [-1.0])  # wall at the lower bound
    np.testing.assert_allclose(reward, -0.05, atol=1e-6)
    assert not bool(info["violation"]) and info["cost"] == 0.0
    state = chain.EnvState(x=jnp.float32(0.95), time=jnp.zeros((), jnp.int32))
    costs = []
    for action in (0.5, 1.0, -0.5):
      _, state, reward, terminated, _, info = env.step(
        jax.random.key(0), state, jnp.full((1,), action), params
      )
      costs.append(float(info["cost"]))
      assert not bool(terminated)
    assert costs == [1.0, 1.0, 1.0]  # x = 1.0, 1.1, 1.05: every step inside costs 1
    np.testing.assert_allclose(state.x, 1.05, atol=1e-6)

  def test_grid_transitions_match_env(self):
    env = chain.Chain1D()
    params = env.default_params
    transitions = chain.grid_transition_matrices(params)
    positions = chain.grid_positions(params)
    cells = chain.num_grid_cells(params)
    assert cells == 20 and transitions.shape == (3, 21, 21)
    np.testing.assert_allclose(positions, -1.0 + 0.1 * np.arange(20), atol=1e-6)
    np.testing.assert_array_equal(transitions.sum(-1), 1.0)

    def step(x, u):
      state = chain.EnvState(x=x, time=jnp.zeros((), jnp.int32))
      _, next_state, _, _, info = env.step_env(jax.random.key(0), state, u[None], params)
      return next_state.x, info["violation"]

    moves = jnp.asarray(chain.GRID_ACTIONS, jnp.float32)
    next_x, violated = jax.vmap(lambda u: jax.vmap(lambda x: step(x, u))(positions))(moves)
    targets = np.argmax(np.asarray(transitions)[:, :cells], axis=-1)  # [3, N]
    np.testing.assert_array_equal(violated, targets == cells)
    safe = targets < cells
    np.testing.assert_allclose(
      np.asarray(next_x)[safe], np.asarray(positions)[targets[safe]], atol=1e-5
    )

  def test_grid_risk_values_deterministic(self):
    params = chain.EnvParams()
    transitions = chain.grid_transition_matrices(params)
    # Always move right: the closed form gamma^(k - 1) with k = N - n.
    right = jnp.zeros((20, 3)).at[:, 2].set(1.0)
    q, v = chain.grid_risk_values(transitions, right, 0.9)
    closed = chain.constant_velocity_qrisk(chain.grid_positions(params), 1.0, 0.1, 0.9)
    np.testing.assert_allclose(v, closed, rtol=1e-5)
    np.testing.assert_allclose(q[:, 2], closed, rtol=1e-5)

  @pytest.mark.parametrize("slip", [0.0, 0.25])
  def test_grid_risk_values_stochastic(self, slip):
    params = chain.EnvParams(slip_prob=slip)
    transitions = np.asarray(chain.grid_transition_matrices(params))
    cells = 20
    np.testing.assert_allclose(transitions.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(transitions[2, 5, 6], 1.0 - slip)
    np.testing.assert_allclose(transitions[2, 5, 5], slip)
    np.testing.assert_array_equal(transitions[1], np.eye(cells + 1))
    # A stochastic policy (left, stay, right), against float64 value iteration by hand.
    probs = np.array([0.3, 0.2, 0.5])
    gamma = 0.95
    v_ref = np.zeros(cells)
    for _ in range(3000):
      left = gamma * v_ref[np.maximum(np.arange(cells) - 1, 0)]  # the wall keeps cell 0
      right = np.append(gamma * v_ref[1:], 1.0)  # the last cell moves into the hazard
      stay = gamma * v_ref
      q_ref = np.stack(
        [(1 - slip) * left + slip * stay, stay, (1 - slip) * right + slip * stay], axis=1
      )
      v_ref = q_ref @ probs
    q, v = chain.grid_risk_values(
      jnp.asarray(transitions), jnp.tile(jnp.asarray(probs, jnp.float32), (cells, 1)), gamma
    )
    np.testing.assert_allclose(v, v_ref, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(q, q_ref, rtol=1e-4, atol=1e-6)

  def test_slip_frequency(self):
    env = chain.Chain1D()
    params = env.default_params.replace(slip_prob=0.25)
    state = chain.EnvState(x=jnp.float32(0.0), time=jnp.zeros((), jnp.int32))
    keys = jax.random.split(jax.random.key(0), 4096)
    next_x = jax.vmap(lambda k: env.step_env(k, state, jnp.ones(1), params)[1].x)(keys)
    stayed = np.isclose(np.asarray(next_x), 0.0)
    moved = np.isclose(np.asarray(next_x), 0.1)
    assert np.all(stayed | moved)
    assert abs(stayed.mean() - 0.25) < 0.03  # about 4.4 standard errors

  def test_reset_and_bad_inputs(self):
    env = chain.Chain1D()
    params = env.default_params.replace(randomize_start=True)
    obs, states = jax.vmap(env.reset, in_axes=(0, None))(
      jax.random.split(jax.random.key(0), 256), params
    )
    assert obs.shape == (256, 1)
    assert float(states.x.min()) >= -1.0 and float(states.x.max()) < 1.0
    obs, state = env.reset(jax.random.key(0), env.default_params)
    np.testing.assert_array_equal(obs, [0.0])
    with pytest.raises(ValueError, match="slip_prob"):
      chain.grid_transition_matrices(chain.EnvParams(slip_prob=1.5))
    with pytest.raises(ValueError, match="whole number"):
      chain.num_grid_cells(chain.EnvParams(dt=0.15))
    with pytest.raises(ValueError, match="gamma"):
      chain.constant_velocity_qrisk(jnp.zeros(3), 1.0, 0.1, 1.5)
    with pytest.raises(ValueError, match="velocity"):
      chain.steps_to_violation(jnp.zeros(3), -1.0, 0.1)
    with pytest.raises(ValueError, match="randomize_start"):
      chain.EnvParams(randomize_start="yes")
    with pytest.raises(AssertionError):
      env.step(jax.random.key(0), state, jnp.ones(2), env.default_params)
    with pytest.raises(AssertionError):
      chain.grid_risk_values(
        chain.grid_transition_matrices(chain.EnvParams()), jnp.ones((19, 3)) / 3, 0.9
      )


# ---------------------------------------------------------------------------------------------
# SafeCartPole
# ---------------------------------------------------------------------------------------------


def _numpy_cartpole_step(s, force, tau=0.02):
  """One Euler step of the classic CartPole equations in float64 (gym's constants)."""
  x, x_dot, theta, theta_dot = s
  gravity, masspole, total_mass, length = 9.8, 0.1, 1.1, 0.5
  polemass_length = masspole * length
  temp = (force + polemass_length * theta_dot**2 * np.sin(theta)) / total_mass
  theta_acc = (gravity * np.sin(theta) - np.cos(theta) * temp) / (
    length * (4.0 / 3.0 - masspole * np.cos(theta) ** 2 / total_mass)
  )
  x_acc = temp - polemass_length * theta_acc * np.cos(theta) / total_mass
  return np.array(
    [x + tau * x_dot, x_dot + tau * x_acc, theta + tau * theta_dot, theta_dot + tau * theta_acc]
  )


def _cart_state(x, x_dot=0.1, theta=0.02, theta_dot=-0.1):
  return sc.EnvState(
    x=jnp.float32(x),
    x_dot=jnp.float32(x_dot),
    theta=jnp.float32(theta),
    theta_dot=jnp.float32(theta_dot),
    time=jnp.zeros((), jnp.int32),
  )


class TestSafeCartPole:
  def test_continuous_force_matches_hand_dynamics_and_cartpole(self):
    env = sc.SafeCartPole()
    params = env.default_params
    state = _cart_state(0.3)
    obs, *_ = env.step(jax.random.key(0), state, jnp.array([0.5]), params)
    expected = _numpy_cartpole_step(np.array([0.3, 0.1, 0.02, -0.1]), force=5.0)
    np.testing.assert_allclose(obs, expected, atol=1e-6)
    base = cartpole.CartPole()
    base_params = base.default_params
    for cont, disc in ((1.0, 1), (-1.0, 0)):
      ours = env.step(jax.random.key(0), state, jnp.array([cont]), params)[0]
      theirs = base.step(jax.random.key(0), state, disc, base_params)[0]
      np.testing.assert_allclose(ours, theirs, atol=1e-6)
    discrete = sc.SafeCartPole("discrete")
    ours = discrete.step(jax.random.key(0), state, 1, params)[0]
    theirs = base.step(jax.random.key(0), state, 1, base_params)[0]
    np.testing.assert_array_equal(ours, theirs)
    assert discrete.num_actions == 2 and env.num_actions == 1
    assert env.action_space(params).shape == (1,)

  @pytest.mark.parametrize("terminate", [False, True])
  def test_cost_band_and_violation_semantics(self, terminate):
    env = sc.SafeCartPole()
    params = env.default_params.replace(terminate_on_violation=terminate)
    # x' = x + 0.02 * x_dot: 0.997 + 0.002 = 0.999 (inside), 0.999 + 0.002 = 1.001 (outside),
    # -0.999 - 0.002 = -1.001 (outside on the left).
    cases = ((0.997, 0.1, False), (0.999, 0.1, True), (-0.999, -0.1, True), (0.0, 0.1, False))
    for x, x_dot, violating in cases:
      out = env.step(jax.random.key(0), _cart_state(x, x_dot), jnp.zeros(1), params)
      _, _, reward, terminated, truncated, info = out
      assert bool(info["violation"]) == violating
      assert float(info["cost"]) == float(violating)
      assert bool(terminated) == (violating and terminate)
      assert float(info["discount"]) == float(not (violating and terminate))
      assert float(reward) == 1.0 and not bool(truncated)

  def test_cartpole_termination_is_kept(self):
    env = sc.SafeCartPole()
    params = env.default_params
    _, _, _, terminated, _, info = env.step(
      jax.random.key(0), _cart_state(2.399, x_dot=1.0), jnp.zeros(1), params
    )
    assert bool(terminated) and float(info["cost"]) == 1.0 and float(info["discount"]) == 0.0

  def test_bad_inputs(self):
    with pytest.raises(ValueError, match="action_type"):
      sc.SafeCartPole("box")
    env = sc.SafeCartPole()
    with pytest.raises(AssertionError):
      env.step(jax.random.key(0), _cart_state(0.0), jnp.zeros(2), env.default_params)


# ---------------------------------------------------------------------------------------------
# All three: jit + vmap over many environments in one compiled scan, determinism per key
# ---------------------------------------------------------------------------------------------


def _make_random_rollout(env, params, num_envs, steps):
  """One jitted function of a key: reset num_envs environments, scan random actions."""
  space = env.action_space(params)

  def run(key):
    key_reset, key_run = jax.random.split(key)
    obs, states = jax.vmap(env.reset, in_axes=(0, None))(
      jax.random.split(key_reset, num_envs), params
    )

    def body(states, key):
      key_act, key_step = jax.random.split(key)
      actions = jax.vmap(space.sample)(jax.random.split(key_act, num_envs))
      obs, states, reward, terminated, truncated, info = jax.vmap(
        env.step, in_axes=(0, 0, 0, None)
      )(jax.random.split(key_step, num_envs), states, actions, params)
      return states, (obs, reward, terminated, truncated, info["cost"], info["violation"])

    return jax.lax.scan(body, states, jax.random.split(key_run, steps))[1]

  return jax.jit(run)


@pytest.mark.parametrize(
  "make_env",
  [
    lambda: (ph.PointHazard(), ph.EnvParams(noise_std=0.005, randomize_start=True)),
    lambda: (chain.Chain1D(), chain.EnvParams(randomize_start=True)),
    lambda: (sc.SafeCartPole(), sc.EnvParams()),
  ],
  ids=["point_hazard", "chain", "safe_cartpole"],
)
def test_jit_vmap_scan_and_determinism(make_env):
  env, params = make_env()
  num_envs, steps = 2048, 16
  rollout = _make_random_rollout(env, params, num_envs, steps)
  first = rollout(jax.random.key(0))
  obs, reward, terminated, truncated, cost, violation = first
  chex.assert_shape([reward, terminated, truncated, cost, violation], (steps, num_envs))
  assert obs.shape[:2] == (steps, num_envs) and obs.dtype == jnp.float32
  assert cost.dtype == jnp.float32 and violation.dtype == jnp.bool_
  np.testing.assert_array_equal(cost > 0, violation)
  assert np.all(np.isfinite(np.asarray(obs)))
  again = rollout(jax.random.key(0))
  jax.tree.map(np.testing.assert_array_equal, first, again)
  other = rollout(jax.random.key(1))
  assert not np.array_equal(np.asarray(first[0]), np.asarray(other[0]))
