"""Chain1D: a 1-D chain with a hazard at its right end and exact risk values.

A point on a line moves with a commanded velocity, `x' = max(x + dt * v_max * u, lower_bound)`,
u = clip(a, -1, 1), except that with probability `slip_prob` (0 by default) the move fails and
x stays put; the hazard is `x >= hazard_position`. The violation is counted on arrival
(`info["cost"] = 1`, `info["violation"] = True` for the step that lands in the hazard) and, by
default, ends the episode (`terminate_on_violation=True`, Recovery RL semantics). The reward is
the progress `x' - x`, so the task pulls towards the hazard.

Its purpose is testing safety critics without an RL loop, against exact values:

- `constant_velocity_qrisk`: under the fixed policy u = +1 (speed v), the number of steps to
  violation is `k(x) = ceil((hazard - x) / (v dt))` and the discounted violation probability is
  `Q_risk(x, +v) = gamma^(k - 1)`;
- `grid_transition_matrices` / `grid_risk_values`: on the grid `x_n = lower_bound + n v dt`, the
  actions u in {-1, 0, +1} move exactly one cell (or, with probability `slip_prob`, none), so the
  chain is a finite MDP with an absorbing violation state; `grid_risk_values` solves the Bellman
  equation of the discounted first-violation probability for any stochastic policy.

Floating point: a naive `ceil((1 - 0.7) / 0.1)` is 4, not 3. Both the
environment and the closed forms therefore treat `x >= hazard_position - tolerance` as a
violation (tolerance 1e-5 by default), which makes them agree on and off the grid, including
after float32 accumulation over a few hundred steps of size >= 0.01.

References: Thananjeyan et al., "Recovery RL: Safe Reinforcement Learning with Learned Recovery
Zones", arXiv 2010.15920 (Q_risk as the discounted probability of a future violation, episodes
terminating at the violation). The chain itself is hrljax's own test design, not a
published benchmark; the tests check the closed forms against hand-computed values.
"""

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

# Grid actions, in units of `max_velocity`: index 0 moves left, 1 stays, 2 moves right.
GRID_ACTIONS = (-1.0, 0.0, 1.0)


@struct.dataclass
class EnvState(environment.EnvState):
  x: jax.Array  # float32 scalar
  time: int


@struct.dataclass
class EnvParams(environment.EnvParams):
  """Chain1D parameters.

  dt, max_velocity: one step moves `dt * max_velocity * clip(a, -1, 1)`.
  slip_prob: probability that a step's move fails (x stays put); 0 gives deterministic dynamics.
  hazard_position: violation when `x >= hazard_position - tolerance`.
  lower_bound: a wall; positions are clipped from below.
  start: reset position unless `randomize_start` (then uniform in [lower_bound, hazard_position)).
  terminate_on_violation: end the episode at the violating step (default) or continue
    (then the chain is unbounded on the right and every step inside the hazard costs 1).
  max_steps_in_episode: time limit, reported as truncation.
  """

  dt: float = 0.1
  max_velocity: float = 1.0
  hazard_position: float = 1.0
  lower_bound: float = -1.0
  start: float = 0.0
  tolerance: float = 1e-5
  slip_prob: float = 0.0
  terminate_on_violation: bool = True
  max_steps_in_episode: int = 100
  randomize_start: bool = struct.field(pytree_node=False, default=False)

  def __post_init__(self):
    if not isinstance(self.randomize_start, bool):
      raise ValueError(f"randomize_start: expected a bool, got {self.randomize_start!r}")


def violation(x: chex.Array, params: EnvParams) -> chex.Array:
  """Whether positions `x` are in the hazard, `x >= hazard_position - tolerance`, elementwise."""
  return x >= params.hazard_position - params.tolerance


class Chain1D(environment.Environment[EnvState, EnvParams]):
  """1-D chain with a hazard at `x >= hazard_position`; gymnax 1.0 API, continuous action `[1]`.

  `step` returns `(obs, state, reward, terminated, truncated, info)` with `info["cost"]`
  (float32, 1 on the step that lands in the hazard) and `info["violation"]` (bool). The
  observation is `[x]` (float32).
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
    chex.assert_size(action, 1)
    command = jnp.clip(jnp.reshape(jnp.asarray(action, jnp.float32), ()), -1.0, 1.0)
    slipped = jax.random.bernoulli(key, params.slip_prob)
    move = jnp.where(slipped, 0.0, params.dt * params.max_velocity * command)
    x = jnp.maximum(state.x + move, params.lower_bound).astype(jnp.float32)
    violated = violation(x, params)
    terminated = violated & params.terminate_on_violation
    next_state = state.replace(x=x, time=state.time + 1)
    obs, next_state = self._apply_transition_gradient_policy(self.get_obs(next_state), next_state)
    info = {"cost": violated.astype(jnp.float32), "violation": violated}
    return obs, next_state, (x - state.x).astype(jnp.float32), terminated, info

  def reset_env(self, key: chex.PRNGKey, params: EnvParams) -> tuple[chex.Array, EnvState]:
    if params.randomize_start:
      x = jax.random.uniform(
        key, (), jnp.float32, params.lower_bound, params.hazard_position - params.tolerance
      )
    else:
      x = jnp.asarray(params.start, jnp.float32)
    state = EnvState(x=x, time=jnp.zeros((), jnp.int32))
    return self.get_obs(state), state

  def get_obs(self, state: EnvState, params: EnvParams | None = None, key=None) -> chex.Array:
    return jnp.reshape(state.x, (1,)).astype(jnp.float32)

  def is_terminated(self, state: EnvState, params: EnvParams) -> chex.Array:
    return violation(state.x, params) & params.terminate_on_violation

  @property
  def name(self) -> str:
    return "Chain1D-v0"

  @property
  def num_actions(self) -> int:
    """Dimension of the continuous action."""
    return 1

  def action_space(self, params: EnvParams | None = None) -> spaces.Box:
    return spaces.Box(low=-1.0, high=1.0, shape=(1,), dtype=jnp.float32)

  def observation_space(self, params: EnvParams) -> spaces.Box:
    return spaces.Box(
      low=params.lower_bound, high=jnp.finfo(jnp.float32).max, shape=(1,), dtype=jnp.float32
    )


# ---------------------------------------------------------------------------------------------
# Closed forms
# ---------------------------------------------------------------------------------------------


def steps_to_violation(
  x: chex.Array,
  velocity: float,
  dt: float,
  hazard_position: float = 1.0,
  tolerance: float = 1e-5,
) -> chex.Array:
  """Steps until a constant positive `velocity` reaches the hazard from `x` (elementwise, int32).

  `k(x) = max(ceil((hazard_position - tolerance - x) / (velocity * dt)), 1)`: the first j >= 1
  with `x + j velocity dt >= hazard_position - tolerance`, the environment's violation test.
  The tolerance resolves the float pitfall above (x = 0.7, dt = 0.1 gives 3, not 4).
  Requires `velocity > 0` and `dt > 0` (Python floats, checked).
  """
  _check_positive_float("velocity", velocity)
  _check_positive_float("dt", dt)
  x = jnp.asarray(x)
  chex.assert_type(x, float)
  steps = jnp.ceil((hazard_position - tolerance - x) / (velocity * dt))
  return jnp.maximum(steps, 1.0).astype(jnp.int32)


def constant_velocity_qrisk(
  x: chex.Array,
  velocity: float,
  dt: float,
  gamma: float,
  hazard_position: float = 1.0,
  tolerance: float = 1e-5,
) -> chex.Array:
  """True `Q_risk(x, +velocity) = gamma^(k(x) - 1)` under the fixed policy u = +velocity.

  Elementwise over `x` (float, any shape; states `x < hazard_position`). The
  violation is counted on arrival with cost 1 and ends the episode, so Q_risk is the discounted
  probability of the first violation (here, deterministic dynamics with `slip_prob = 0`, just
  the discount). `velocity` and `dt`
  are positive Python floats and `gamma` is in [0, 1]; `k` is `steps_to_violation`.
  """
  if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
    raise ValueError(f"gamma: expected a float in [0, 1], got {gamma!r}")
  steps = steps_to_violation(x, velocity, dt, hazard_position, tolerance)
  x = jnp.asarray(x)
  return jnp.power(jnp.asarray(gamma, x.dtype), (steps - 1).astype(x.dtype))


def _check_positive_float(name: str, value: Any) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0.0:
    raise ValueError(f"{name}: expected a finite float > 0, got {value!r}")


# ---------------------------------------------------------------------------------------------
# The finite grid version
# ---------------------------------------------------------------------------------------------


def num_grid_cells(params: EnvParams) -> int:
  """Number N of safe grid cells, `(hazard_position - lower_bound) / (max_velocity * dt)`.

  Needs concrete params, and raises `ValueError` unless that ratio is a whole number >= 1 (so
  that grid actions move exactly one cell and the wall and hazard sit on the grid).
  """
  step = float(params.max_velocity) * float(params.dt)
  ratio = (float(params.hazard_position) - float(params.lower_bound)) / step
  cells = round(ratio)
  if cells < 1 or abs(ratio - cells) > 1e-6 * max(1.0, ratio):
    raise ValueError(
      "params: expected (hazard_position - lower_bound) / (max_velocity * dt) to be a whole "
      f"number >= 1, got {ratio!r}"
    )
  return cells


def grid_positions(params: EnvParams) -> chex.Array:
  """Safe grid cells' positions `x_n = lower_bound + n * max_velocity * dt`, float32 `[N]`."""
  cells = num_grid_cells(params)
  step = float(params.max_velocity) * float(params.dt)
  return (float(params.lower_bound) + step * jnp.arange(cells, dtype=jnp.float32)).astype(
    jnp.float32
  )


def grid_transition_matrices(params: EnvParams) -> chex.Array:
  """Exact transition matrices of the grid chain, float32 `[3, N + 1, N + 1]`.

  `P[a, n, m]` is the probability of moving from cell n to cell m under grid action a
  (`GRID_ACTIONS[a]` = -1, 0, +1 times `max_velocity`); index N is the absorbing violation
  state (reached from cell N - 1 by moving right). The wall clips cell 0's left move. A move
  succeeds with probability `1 - slip_prob` and otherwise leaves the cell unchanged (needs a
  concrete `params.slip_prob`).
  """
  cells = num_grid_cells(params)
  index = jnp.arange(cells + 1)
  safe = index < cells
  moves = jnp.asarray([int(move) for move in GRID_ACTIONS], jnp.int32)
  # Safe cells move and clip at the wall; the violation state stays put.
  targets = jnp.where(
    safe[None, :], jnp.clip(index[None, :] + moves[:, None], 0, cells), cells
  )  # [3, N + 1]
  slip = float(params.slip_prob)
  if not 0.0 <= slip <= 1.0:
    raise ValueError(f"params.slip_prob: expected a float in [0, 1], got {slip!r}")
  moved = jax.nn.one_hot(targets, cells + 1, dtype=jnp.float32)
  stayed = jnp.eye(cells + 1, dtype=jnp.float32)[None]
  return (1.0 - slip) * moved + slip * stayed


def grid_risk_values(
  transitions: chex.Array, policy: chex.Array, gamma: chex.Numeric
) -> tuple[chex.Array, chex.Array]:
  """Exact discounted first-violation probabilities on the grid chain for a stochastic policy.

  Args:
    transitions: float `[A, N + 1, N + 1]` from `grid_transition_matrices` (index N = violation,
      absorbing; the violation is counted on arrival with cost 1 and nothing after it).
    policy: float `[N, A]`, each row a distribution over the grid actions.
    gamma: discount in [0, 1).
  Returns:
    `(q_risk [N, A], v_risk [N])` with
    `q(n, a) = P[a, n, N] + gamma * sum_{m < N} P[a, n, m] v(m)` and
    `v(n) = sum_a pi(a|n) q(n, a)`, obtained by solving `(I - gamma P_pi) v = p_pi` on the safe
    cells (float32 linear solve).
  Batch-level over the grid; jittable (N is static from the shapes).
  """
  chex.assert_rank([transitions, policy], [3, 2])
  chex.assert_type([transitions, policy], float)
  num_actions, num_states, _ = transitions.shape
  chex.assert_shape(transitions, (num_actions, num_states, num_states))
  chex.assert_shape(policy, (num_states - 1, num_actions))
  cells = num_states - 1
  to_safe = transitions[:, :cells, :cells]  # [A, N, N]
  to_violation = transitions[:, :cells, cells]  # [A, N]
  policy_t = policy.T  # [A, N]
  p_pi = jnp.sum(policy_t[:, :, None] * to_safe, axis=0)  # [N, N]
  violation_pi = jnp.sum(policy_t * to_violation, axis=0)  # [N]
  v_risk = jnp.linalg.solve(jnp.eye(cells, dtype=p_pi.dtype) - gamma * p_pi, violation_pi)
  q_risk = to_violation + gamma * jnp.einsum("anm,m->an", to_safe, v_risk)  # [A, N]
  return q_risk.T, v_risk
