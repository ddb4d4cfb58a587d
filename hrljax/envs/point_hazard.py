"""PointHazard: a 2-D point robot that must reach a goal among circular hazards.

The main safety test bed of hrljax (`docs/safety.md`). It follows gymnax's
functional API (gymnax >= 1.0): `env.reset(key, params)` and
`env.step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)`.

**One `step` is one control step.** For the two-rate (Bresa-style) hierarchy a task
policy decides every `params.control_steps_per_decision` (K) control steps; the two-rate rollout
calls `step` K times per decision (with a controller, e.g. `waypoint_controller`, and possibly a
reflex or shield in between). The environment itself never groups control steps, so
`params.max_steps_in_episode` counts control steps (default 200 = 20 decisions x K = 10, the
horizon of a two-rate prototype) and truncation can fall in the middle of a decision.

Per-step safety signals are in `info`, all evaluated at the position reached by the step (a
violation is counted on arrival, as in Recovery RL):

- `info["cost"]` (float32): `1[h(p) < 0]` (`cost_type="indicator"`, Safety Gym's
  `constrain_indicator`) or `sum_i (r_i - ||p - o_i||)_+` (`cost_type="graded"`, Safety-Gymnasium's
  hazard cost with coefficient 1);
- `info["violation"]` (bool): the robot is strictly inside a hazard, `h(p) < 0`, whatever the
  cost type (so `cost > 0` exactly when `violation`);
- `info["barrier"]` (float32): `h(p) = min_i (||p - o_i||^2 - r_i^2)`, for CBF shields and labels;
- `info["goal_reached"]` (bool).

The geometry that shields and critics need is exposed as pure, per-example functions:
`hazards`, `barrier_values`, `barrier`, `signed_distances`, `hazard_cost`, `lidar`, plus a
saturated proportional `waypoint_controller`.

References: Thananjeyan et al., "Recovery RL: Safe Reinforcement Learning with Learned Recovery
Zones", arXiv 2010.15920 (terminate-on-violation semantics); Ray, Achiam, Amodei, "Benchmarking
Safe Exploration in Deep Reinforcement Learning" (Safety Gym, 2019; indicator cost); Ji et al.,
"Safety-Gymnasium", arXiv 2310.12567 (graded hazard cost, checked in
`safety_gymnasium/assets/geoms/hazards.py`: `cost += coeff * (size - dist)` per hazard with
`dist <= size`); Zhang, Solak, Ajoudani, "Bresa", arXiv 2503.21989 (two-rate structure).
The environment itself is hrljax's own design.
"""

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

ARENA_HALF_WIDTH = 1.0
COST_TYPES = ("indicator", "graded")
DYNAMICS = ("velocity", "force")
OBSERVATION_TYPES = ("relative", "lidar")

# Default layout: the straight line from start to goal crosses the central hazard, so a greedy
# goal-seeking controller violates, while detours along either side stay clear.
DEFAULT_HAZARD_CENTERS = ((0.0, 0.0), (-0.35, 0.45), (0.45, -0.35))
DEFAULT_HAZARD_RADII = (0.3, 0.2, 0.2)
DEFAULT_START = (-0.7, -0.7)
DEFAULT_GOAL = (0.7, 0.7)

# Squared distances below this are floored before a square root, so that gradients at the
# exact centre of a hazard (or at the goal) are finite; it moves no distance above 1e-6.
_TINY_SQUARED = 1e-12


def _check_static_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
  if value not in allowed:
    raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")


def _check_positive_int(name: str, value: Any) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name}: expected an int >= 1, got {value!r}")


def _check_bool(name: str, value: Any) -> None:
  if not isinstance(value, bool):
    raise ValueError(f"{name}: expected a bool, got {value!r}")


@struct.dataclass
class EnvState(environment.EnvState):
  """PointHazard state.

  `goal` and `hazard_centers` live in the state (not only in the params) because they may be
  sampled per reset. In `dynamics="velocity"` mode `velocity` holds the velocity commanded at
  the last control step (the clipped action); in `"force"` mode it is the integrator's velocity.
  """

  position: jax.Array  # [2] float32
  velocity: jax.Array  # [2] float32
  goal: jax.Array  # [2] float32
  hazard_centers: jax.Array  # [H, 2] float32
  time: int


@struct.dataclass
class EnvParams(environment.EnvParams):
  """PointHazard parameters.

  Array fields are pytree leaves (they can be traced or vmapped); fields that set shapes or
  select code paths are static (`pytree_node=False`) and validated at construction.

  Layout:
    hazard_centers: [H, 2] fixed hazard centres (used unless `randomize_hazards`).
    hazard_radii: [H] hazard radii (never randomised).
    start, goal: [2] fixed start position and goal (used unless `randomize_start`/`_goal`).
    randomize_start, randomize_goal, randomize_hazards: sample the corresponding part of the
      layout uniformly in `[-layout_extent, layout_extent]^2` at every reset, by rejection
      until start and goal are at least `keep_out` outside every hazard's edge and at least
      `min_start_goal_distance` apart (at most `max_layout_tries` proposals; with the defaults
      and all three randomised about a third of the proposals are accepted, so the cap is
      never reached in practice).
  Dynamics (`dynamics`):
    "velocity": single integrator, `p' = clip(p + dt * u + noise_std * xi)`, u = clip(a, -1, 1);
    "force": double integrator, `v' = clip(v + dt * u, -max_speed, max_speed)`,
      `p' = clip(p + dt * v' + noise_std * xi)`; a velocity component is zeroed when its
      position component hits the arena wall.
    Positions are clipped to the arena `[-1, 1]^2`; xi ~ N(0, I).
  Task: reward = `||p - g|| - ||p' - g||` (progress)
    + `goal_bonus * 1[||p' - g|| <= goal_radius]`; reaching the goal terminates the episode.
  Safety: `cost_type` ("indicator" | "graded"); `terminate_on_violation` ends the episode at the
    first violating step (Recovery RL / SQRL semantics) instead of continuing (Lagrangian /
    cost-limit semantics, the default).
  Observation (`observation_type`):
    "relative": `[p, (v if force), g - p, o_1 - p, ..., o_H - p]`, size 4 + 2H (+2);
    "lidar": `[p, (v if force), g - p, lidar_1..lidar_B]` with B = `num_lidar_bins` ray-cast
      closeness readings `clip(1 - t_hit / lidar_range, 0, 1)` (1 = touching or inside).
  Two-rate: `control_steps_per_decision` (K) is for the two-rate rollout; `step` always advances
    one control step and `max_steps_in_episode` counts control steps.
  """

  hazard_centers: jax.Array = struct.field(
    default_factory=lambda: jnp.asarray(DEFAULT_HAZARD_CENTERS, jnp.float32)
  )
  hazard_radii: jax.Array = struct.field(
    default_factory=lambda: jnp.asarray(DEFAULT_HAZARD_RADII, jnp.float32)
  )
  start: jax.Array = struct.field(default_factory=lambda: jnp.asarray(DEFAULT_START, jnp.float32))
  goal: jax.Array = struct.field(default_factory=lambda: jnp.asarray(DEFAULT_GOAL, jnp.float32))
  dt: float = 0.05
  noise_std: float = 0.0
  max_speed: float = 1.0
  goal_radius: float = 0.1
  goal_bonus: float = 1.0
  terminate_on_violation: bool = False
  layout_extent: float = 0.8
  keep_out: float = 0.1
  min_start_goal_distance: float = 0.5
  lidar_range: float = 1.0
  max_steps_in_episode: int = 200
  control_steps_per_decision: int = struct.field(pytree_node=False, default=10)
  cost_type: str = struct.field(pytree_node=False, default="indicator")
  dynamics: str = struct.field(pytree_node=False, default="velocity")
  observation_type: str = struct.field(pytree_node=False, default="relative")
  num_lidar_bins: int = struct.field(pytree_node=False, default=16)
  randomize_start: bool = struct.field(pytree_node=False, default=False)
  randomize_goal: bool = struct.field(pytree_node=False, default=False)
  randomize_hazards: bool = struct.field(pytree_node=False, default=False)
  max_layout_tries: int = struct.field(pytree_node=False, default=1000)

  def __post_init__(self):
    # Only static fields are checked: leaves may be tracers or vmap axis specs here.
    _check_positive_int("control_steps_per_decision", self.control_steps_per_decision)
    _check_positive_int("num_lidar_bins", self.num_lidar_bins)
    _check_positive_int("max_layout_tries", self.max_layout_tries)
    _check_static_choice("cost_type", self.cost_type, COST_TYPES)
    _check_static_choice("dynamics", self.dynamics, DYNAMICS)
    _check_static_choice("observation_type", self.observation_type, OBSERVATION_TYPES)
    _check_bool("randomize_start", self.randomize_start)
    _check_bool("randomize_goal", self.randomize_goal)
    _check_bool("randomize_hazards", self.randomize_hazards)


def _check_layout_shapes(params: EnvParams) -> None:
  chex.assert_rank(
    [params.hazard_centers, params.hazard_radii, params.start, params.goal], [2, 1, 1, 1]
  )
  chex.assert_shape(params.hazard_centers, (None, 2))
  chex.assert_shape([params.start, params.goal], (2,))
  chex.assert_equal_shape_prefix([params.hazard_centers, params.hazard_radii], 1)


def _check_geometry_args(position: chex.Array, centers: chex.Array, radii: chex.Array) -> None:
  chex.assert_rank([position, centers, radii], [1, 2, 1])
  chex.assert_shape(position, (2,))
  chex.assert_shape(centers, (None, 2))
  chex.assert_equal_shape_prefix([centers, radii], 1)
  chex.assert_type([position, centers, radii], float)


def _safe_norm(x: chex.Array) -> chex.Array:
  """Euclidean norm over the last axis with a finite gradient at zero."""
  return jnp.sqrt(jnp.maximum(jnp.sum(jnp.square(x), axis=-1), _TINY_SQUARED))


# ---------------------------------------------------------------------------------------------
# Geometry (pure, per-example functions: the caller vmaps over environments)
# ---------------------------------------------------------------------------------------------


def hazards(state: EnvState, params: EnvParams) -> tuple[chex.Array, chex.Array]:
  """The current hazard layout: centres `[H, 2]` (from the state) and radii `[H]` (params).

  Centres are taken from the state because `randomize_hazards` samples them per reset; with a
  fixed layout they equal `params.hazard_centers`. Per-example.
  """
  return state.hazard_centers, params.hazard_radii


def barrier_values(position: chex.Array, centers: chex.Array, radii: chex.Array) -> chex.Array:
  """Per-hazard barrier `h_i(p) = ||p - o_i||^2 - r_i^2`, float `[H]`; negative inside hazard i.

  Per-example: position `[2]`, centers `[H, 2]`, radii `[H]`. Smooth everywhere, with gradient
  `2 (p - o_i)`, which is what a discrete-time CBF shield linearises.
  """
  _check_geometry_args(position, centers, radii)
  offsets = position[None, :] - centers
  return jnp.sum(jnp.square(offsets), axis=-1) - jnp.square(radii)


def barrier(position: chex.Array, centers: chex.Array, radii: chex.Array) -> chex.Array:
  """Barrier `h(p) = min_i (||p - o_i||^2 - r_i^2)`, a float scalar; `h(p) < 0` iff violating.

  Per-example: position `[2]`, centers `[H, 2]`, radii `[H]`.
  """
  return jnp.min(barrier_values(position, centers, radii))


def signed_distances(position: chex.Array, centers: chex.Array, radii: chex.Array) -> chex.Array:
  """Signed distance to each hazard's edge, `||p - o_i|| - r_i`, float `[H]`; negative inside.

  Per-example: position `[2]`, centers `[H, 2]`, radii `[H]` (radii > 0). It is computed as
  `h_i / (||p - o_i|| + r_i)`, equal to `||p - o_i|| - r_i` up to rounding, so that its sign
  always agrees with `barrier_values` (and with the cost and violation flag) even within one
  rounding error of a hazard's edge; the gradient is finite at a hazard's centre.
  """
  values = barrier_values(position, centers, radii)
  return values / (_safe_norm(position[None, :] - centers) + radii)


def hazard_cost(
  position: chex.Array,
  centers: chex.Array,
  radii: chex.Array,
  cost_type: str = "indicator",
) -> chex.Array:
  """Per-step hazard cost at `position`, a float scalar.

  Per-example: position `[2]`, centers `[H, 2]`, radii `[H]`.
  - "indicator": `1[h(p) < 0]`, i.e. 1 when strictly inside any hazard (Safety Gym's
    `constrain_indicator=True`); a point exactly on an edge costs 0.
  - "graded": `sum_i (r_i - ||p - o_i||)_+` (Safety-Gymnasium's hazard cost with coefficient 1;
    overlapping hazards add up).
  Either cost is positive exactly when `barrier(position, centers, radii) < 0`.
  """
  _check_static_choice("cost_type", cost_type, COST_TYPES)
  if cost_type == "indicator":
    return (barrier(position, centers, radii) < 0.0).astype(position.dtype)
  return jnp.sum(jax.nn.relu(-signed_distances(position, centers, radii)))


def lidar(
  position: chex.Array,
  centers: chex.Array,
  radii: chex.Array,
  num_bins: int,
  max_range: float,
) -> chex.Array:
  """Ray-cast hazard lidar: closeness `clip(1 - t / max_range, 0, 1)` along `num_bins` rays.

  Per-example: position `[2]`, centers `[H, 2]`, radii `[H]`; returns float `[num_bins]`.
  Ray k points at angle `2 pi k / num_bins` (k = 0 is +x, counter-clockwise); t is the distance
  to the nearest hazard edge along the ray (0 inside a hazard, +inf when the ray misses every
  hazard, which reads 0). Unlike Safety Gym's pseudo-lidar (binned by the angle to each object's
  centre, exponential fall-off) this is an exact ray cast against circles.
  """
  _check_geometry_args(position, centers, radii)
  if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 1:
    raise ValueError(f"num_bins: expected an int >= 1, got {num_bins!r}")
  angles = 2.0 * jnp.pi * jnp.arange(num_bins, dtype=position.dtype) / num_bins
  directions = jnp.stack([jnp.cos(angles), jnp.sin(angles)], axis=-1)  # [B, 2]
  to_centers = centers - position[None, :]  # [H, 2]
  along = directions @ to_centers.T  # [B, H] projection of each centre on each ray
  values = jnp.sum(jnp.square(to_centers), axis=-1) - jnp.square(radii)  # [H], = h_i(p)
  discriminant = jnp.square(along) - values[None, :]
  hits = (discriminant >= 0.0) & (along > 0.0)
  # The where-guarded sqrt keeps gradients finite for rays that miss.
  root = jnp.sqrt(jnp.where(hits, discriminant, 1.0))
  entry = jnp.where(hits, along - root, jnp.inf)
  entry = jnp.where(values[None, :] <= 0.0, 0.0, entry)
  nearest = jnp.min(entry, axis=-1)
  return jnp.clip(1.0 - nearest / max_range, 0.0, 1.0)


def waypoint_controller(
  position: chex.Array, waypoint: chex.Array, gain: float = 10.0
) -> chex.Array:
  """Saturated proportional controller: `u = g (w - p)`, rescaled so that `||u|| <= 1`.

  Per-example: position and waypoint float `[2]`; returns a velocity action `[2]` inside the
  action box. A simple `controller(p, a_high)` for the two-rate rollout when the task policy
  outputs a waypoint (with `waypoint = goal` it is a greedy goal-seeking controller). In velocity mode it converges without overshoot while
  `gain * dt <= 1`.
  """
  chex.assert_shape([position, waypoint], (2,))
  chex.assert_type([position, waypoint], float)
  command = gain * (waypoint - position)
  return command / jnp.maximum(1.0, _safe_norm(command))


# ---------------------------------------------------------------------------------------------
# Layout sampling
# ---------------------------------------------------------------------------------------------


def _propose_layout(key: chex.PRNGKey, params: EnvParams):
  key_start, key_goal, key_hazards = jax.random.split(key, 3)
  extent = params.layout_extent

  def uniform(k, shape):
    return jax.random.uniform(k, shape, jnp.float32, -extent, extent)

  start = uniform(key_start, (2,)) if params.randomize_start else params.start
  goal = uniform(key_goal, (2,)) if params.randomize_goal else params.goal
  centers = (
    uniform(key_hazards, params.hazard_centers.shape)
    if params.randomize_hazards
    else params.hazard_centers
  )
  return (
    jnp.asarray(start, jnp.float32),
    jnp.asarray(goal, jnp.float32),
    jnp.asarray(centers, jnp.float32),
  )


def layout_is_valid(
  start: chex.Array, goal: chex.Array, centers: chex.Array, params: EnvParams
) -> chex.Array:
  """Whether a layout satisfies the keep-out rules used by randomised resets (bool scalar).

  Start and goal must each be at least `params.keep_out` outside every hazard's edge, and at
  least `params.min_start_goal_distance` apart. Per-example.
  """
  radii = params.hazard_radii
  clear_start = signed_distances(start, centers, radii) >= params.keep_out
  clear_goal = signed_distances(goal, centers, radii) >= params.keep_out
  apart = jnp.linalg.norm(start - goal) >= params.min_start_goal_distance
  return jnp.all(clear_start) & jnp.all(clear_goal) & apart


def sample_layout(key: chex.PRNGKey, params: EnvParams):
  """A layout `(start [2], goal [2], hazard_centers [H, 2])` for one reset. Per-example.

  Fixed parts come from the params; randomised parts are drawn by rejection (a bounded
  `lax.while_loop`) until `layout_is_valid`. If `params.max_layout_tries` proposals are all
  rejected (only possible with infeasible keep-out settings) the last proposal is returned.
  """
  if not (params.randomize_start or params.randomize_goal or params.randomize_hazards):
    return _propose_layout(key, params)

  def keep_trying(carry):
    _, tries, _, valid = carry
    return jnp.logical_not(valid) & (tries < params.max_layout_tries)

  def propose(carry):
    key, tries, _, _ = carry
    key, key_proposal = jax.random.split(key)
    layout = _propose_layout(key_proposal, params)
    return key, tries + 1, layout, layout_is_valid(*layout, params)

  # The loop body always runs at least once: the initial layout is a placeholder marked invalid.
  placeholder = tuple(
    jnp.asarray(x, jnp.float32) for x in (params.start, params.goal, params.hazard_centers)
  )
  init = (key, jnp.asarray(0, jnp.int32), placeholder, jnp.asarray(False))
  _, _, layout, _ = jax.lax.while_loop(keep_trying, propose, init)
  return layout


# ---------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------


class PointHazard(environment.Environment[EnvState, EnvParams]):
  """2-D point robot reaching a goal among circular hazards; step = control step.

  `step` returns gymnax 1.0's `(obs, state, reward, terminated, truncated, info)` with
  `info["cost"]`, `info["violation"]`, `info["barrier"]`, `info["goal_reached"]` (per control
  step, evaluated at the new position) plus gymnax's `terminated`, `truncated`,
  `final_observation`. `terminated` is the natural end only (goal reached, or a violation when
  `terminate_on_violation`); the time limit (`max_steps_in_episode` control steps) is reported
  as `truncated` by the gymnax base class, which also auto-resets.

  Transition gradients (gymnax `with_transition_gradients()`) are supported: the dynamics are
  differentiable in the action away from the clipping boundaries.
  """

  _supports_transition_gradients = True

  @property
  def default_params(self) -> EnvParams:
    return EnvParams()

  def step_env(
    self,
    key: chex.PRNGKey,
    state: EnvState,
    action: chex.Array,
    params: EnvParams,
  ) -> tuple[chex.Array, EnvState, chex.Array, chex.Array, dict[str, chex.Array]]:
    """Advance ONE control step."""
    _check_layout_shapes(params)
    chex.assert_shape(action, (2,))
    command = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
    noise = params.noise_std * jax.random.normal(key, (2,), jnp.float32)

    if params.dynamics == "velocity":
      velocity = command
      moved = state.position + params.dt * velocity + noise
      position = jnp.clip(moved, -ARENA_HALF_WIDTH, ARENA_HALF_WIDTH)
    else:
      velocity = jnp.clip(state.velocity + params.dt * command, -params.max_speed, params.max_speed)
      moved = state.position + params.dt * velocity + noise
      position = jnp.clip(moved, -ARENA_HALF_WIDTH, ARENA_HALF_WIDTH)
      # An inelastic wall: motion into it stops.
      velocity = jnp.where(moved == position, velocity, 0.0)

    centers, radii = state.hazard_centers, params.hazard_radii
    previous_distance = _safe_norm(state.position - state.goal)
    distance = _safe_norm(position - state.goal)
    goal_reached = distance <= params.goal_radius
    reward = previous_distance - distance + params.goal_bonus * goal_reached

    barrier_value = barrier(position, centers, radii)
    violation = barrier_value < 0.0
    cost = hazard_cost(position, centers, radii, params.cost_type)
    terminated = goal_reached | (violation & params.terminate_on_violation)

    next_state = state.replace(position=position, velocity=velocity, time=state.time + 1)
    obs, next_state = self._apply_transition_gradient_policy(
      self.get_obs(next_state, params), next_state
    )
    info = {
      "cost": cost.astype(jnp.float32),
      "violation": violation,
      "barrier": barrier_value.astype(jnp.float32),
      "goal_reached": goal_reached,
    }
    return obs, next_state, reward.astype(jnp.float32), terminated, info

  def reset_env(self, key: chex.PRNGKey, params: EnvParams) -> tuple[chex.Array, EnvState]:
    _check_layout_shapes(params)
    start, goal, centers = sample_layout(key, params)
    state = EnvState(
      position=start,
      velocity=jnp.zeros((2,), jnp.float32),
      goal=goal,
      hazard_centers=centers,
      time=jnp.zeros((), jnp.int32),
    )
    return self.get_obs(state, params), state

  def get_obs(self, state: EnvState, params: EnvParams | None = None, key=None) -> chex.Array:
    """Flat float32 observation (layout in `EnvParams`' docstring)."""
    if params is None:
      params = self.default_params
    parts = [state.position]
    if params.dynamics == "force":
      parts.append(state.velocity)
    parts.append(state.goal - state.position)
    if params.observation_type == "relative":
      parts.append((state.hazard_centers - state.position[None, :]).reshape(-1))
    else:
      parts.append(
        lidar(
          state.position,
          state.hazard_centers,
          params.hazard_radii,
          params.num_lidar_bins,
          params.lidar_range,
        )
      )
    return jnp.concatenate(parts).astype(jnp.float32)

  def is_terminated(self, state: EnvState, params: EnvParams) -> chex.Array:
    """Natural end of the episode at `state`: goal reached, or violation if it terminates."""
    goal_reached = _safe_norm(state.position - state.goal) <= params.goal_radius
    violation = barrier(state.position, state.hazard_centers, params.hazard_radii) < 0.0
    return goal_reached | (violation & params.terminate_on_violation)

  @property
  def name(self) -> str:
    return "PointHazard-v0"

  @property
  def num_actions(self) -> int:
    """Dimension of the continuous action."""
    return 2

  def action_space(self, params: EnvParams | None = None) -> spaces.Box:
    return spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=jnp.float32)

  def observation_space(self, params: EnvParams) -> spaces.Box:
    num_hazards = params.hazard_radii.shape[0]
    size = 4 + (2 if params.dynamics == "force" else 0)
    size += 2 * num_hazards if params.observation_type == "relative" else params.num_lidar_bins
    bound = jnp.maximum(2.0 * ARENA_HALF_WIDTH + params.layout_extent, params.max_speed)
    return spaces.Box(low=-bound, high=bound, shape=(size,), dtype=jnp.float32)
