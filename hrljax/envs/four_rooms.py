"""Four rooms with the option-critic paper's goal, start states and transfer experiment.

Bacon, Harb, Precup, "The Option-Critic Architecture", AAAI 2017, arXiv:1609.05140, section
"Four-rooms domain" (after Sutton, Precup, Singh 1999): the goal starts in the east doorway, every
episode starts in a uniformly drawn cell other than the goal, moves fail with probability 1/3,
reward +1 at the goal and 0 elsewhere; after a number of episodes the goal moves to a random cell
of the lower-right room. The reference script (jeanharb/option_critic @099763b,
`fourrooms/transfer.py`, `fourrooms/fourrooms.py`) puts the goal in cell 62 = (row 7, col 9) and
draws the new goal from the 21 cells of the lower-right room and its west doorway.

The dynamics are gymnax's `FourRooms-misc` (same map, `fail_prob = 1/3` realised as a uniformly
random action with probability 4/9, which moves elsewhere with probability 1/3); this module only
adds what the experiment needs, all in a jittable form:

- `EnvParams.goal` (the first goal) and `EnvParams.transfer_goal` (the goal after the move);
- a per-environment step counter `EnvState.total_steps` that survives auto-resets: every episode
  that *starts* once `total_steps >= transfer_after_steps` gets the new goal. Counting steps (not
  episodes) makes all parallel environments switch at the same update, since they step in lockstep;
- observations: `"one_hot"` (default), the agent's cell as a one-hot vector over the 13 x 13 grid
  (the paper's tabular state: the goal is not observed, so a moved goal must be re-learned), or
  `"coordinates"`, gymnax's `(row, col, goal_row, goal_col)`.

Differences from the reference script: gymnax's failure model (above) instead of the script's
"move, then with probability 1/3 slip to a random free neighbour"; episodes are truncated at
`max_steps_in_episode` (default 1000, the script's `--nsteps`).

`make_four_rooms(**kwargs) -> (env, params)` is the factory; `hrljax.envs` registers it as
`envs.make(ENV_NAME, ...)`.
"""

from collections import deque
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces
from gymnax.environments.misc import rooms

ENV_NAME = "FourRoomsTransfer-v0"
GRID_SIZE = 13
EAST_DOORWAY = (7, 9)  # jeanharb's cell 62
NEVER = np.iinfo(np.int32).max  # `transfer_after_steps` of a run without transfer
OBSERVATIONS = ("one_hot", "coordinates")


def lower_right_room_cells() -> np.ndarray:
  """`[21, 2]` (row, col) cells the goal may move to: the lower-right room and its west doorway."""
  free = np.asarray(rooms.string_to_bool_map(rooms.four_rooms_map))
  cells = [(r, c) for r in range(8, 12) for c in range(6, 12) if free[r, c]]
  return np.asarray(cells, np.int32)


def free_cells() -> np.ndarray:
  """`[104, 2]` (row, col) of every free cell, row by row (jeanharb's state numbering)."""
  free = np.asarray(rooms.string_to_bool_map(rooms.four_rooms_map))
  return np.argwhere(free).astype(np.int32)


@struct.dataclass
class EnvState:
  pos: jax.Array  # [2] int32 (row, col)
  goal: jax.Array  # [2] int32, the goal of the current episode
  time: jax.Array  # steps in the current episode
  total_steps: jax.Array  # steps of this environment since the first reset (not reset)


@struct.dataclass
class EnvParams:
  fail_prob: float = 1.0 / 3
  resample_init_pos: bool = True  # the paper: start anywhere but the goal
  max_steps_in_episode: int = 1000
  goal: jax.Array = struct.field(default_factory=lambda: jnp.asarray(EAST_DOORWAY, jnp.int32))
  transfer_goal: jax.Array = struct.field(
    default_factory=lambda: jnp.asarray(EAST_DOORWAY, jnp.int32)
  )
  transfer_after_steps: int = NEVER  # per-environment steps after which episodes use transfer_goal


class FourRoomsTransfer(rooms.FourRooms):
  """gymnax's FourRooms with a movable goal (see the module docstring)."""

  def __init__(self, observation: str = "one_hot"):
    if observation not in OBSERVATIONS:
      raise ValueError(f"observation: expected one of {OBSERVATIONS}, got {observation!r}")
    super().__init__()
    self.observation = observation

  @property
  def name(self) -> str:
    return ENV_NAME

  @property
  def default_params(self) -> EnvParams:
    return EnvParams()

  def goal_for_new_episode(self, total_steps: jax.Array, params: EnvParams) -> jax.Array:
    moved = total_steps >= params.transfer_after_steps
    return jnp.where(moved, params.transfer_goal, params.goal).astype(jnp.int32)

  def _start(
    self, key: jax.Array, goal: jax.Array, total_steps: jax.Array, params: EnvParams
  ) -> EnvState:
    drawn = rooms.reset_pos(key, self.coords, goal)
    pos = jnp.where(params.resample_init_pos, drawn, self.pos_fixed).astype(jnp.int32)
    return EnvState(
      pos=pos,
      goal=goal,
      time=jnp.zeros((), jnp.int32),
      total_steps=jnp.asarray(total_steps, jnp.int32),
    )

  def reset_env(self, key: jax.Array, params: EnvParams):
    zero = jnp.zeros((), jnp.int32)
    state = self._start(key, self.goal_for_new_episode(zero, params), zero, params)
    return self.get_obs(state), state

  def step_env(self, key, state: EnvState, action, params: EnvParams):
    # gymnax's dynamics and reward; it rebuilds its own state type, so carry our fields over.
    _, moved, reward, terminated, info = super().step_env(key, state, action, params)
    state = EnvState(
      pos=moved.pos.astype(jnp.int32),
      goal=state.goal,
      time=jnp.asarray(moved.time, jnp.int32),
      total_steps=state.total_steps + 1,
    )
    return jax.lax.stop_gradient(self.get_obs(state)), state, reward, terminated, info

  def step(self, key, state: EnvState, action, params: Optional[EnvParams] = None):
    """gymnax's step with auto-reset, except that the step counter survives the reset and the
    next episode's goal depends on it."""
    params = self.default_params if params is None else params
    key_step, key_reset = jax.random.split(key)
    obs_st, state_st, reward, terminated, info = self.step_env(key_step, state, action, params)
    truncated = self.is_truncated(state_st, params)
    done = jnp.logical_or(terminated, truncated)
    goal = self.goal_for_new_episode(state_st.total_steps, params)
    state_re = self._start(key_reset, goal, state_st.total_steps, params)
    obs_re = self.get_obs(state_re)
    state = jax.tree.map(lambda r, s: jax.lax.select(done, r, s), state_re, state_st)
    obs = jax.lax.select(done, obs_re, obs_st)
    info = {**info, "terminated": terminated, "truncated": truncated, "final_observation": obs_st}
    return obs, state, reward, terminated, truncated, info

  def get_obs(self, state: EnvState, params=None, key=None) -> jax.Array:
    if self.observation == "one_hot":
      return jax.nn.one_hot(
        state.pos[0] * GRID_SIZE + state.pos[1], GRID_SIZE * GRID_SIZE, dtype=jnp.float32
      )
    return jnp.concatenate([state.pos, state.goal]).astype(jnp.float32)

  def observation_space(self, params: EnvParams) -> spaces.Box:
    if self.observation == "one_hot":
      return spaces.Box(0.0, 1.0, (GRID_SIZE * GRID_SIZE,), jnp.float32)
    return spaces.Box(0.0, float(GRID_SIZE - 1), (4,), jnp.float32)


def transfer_goal_for_seed(seed: int) -> tuple[int, int]:
  """The moved goal of a run: a cell of the lower-right room drawn with NumPy from `seed`."""
  cells = lower_right_room_cells()
  return tuple(int(x) for x in cells[np.random.default_rng(seed).integers(len(cells))])


def make_four_rooms(
  observation: str = "one_hot",
  transfer_after_steps: int = 0,
  transfer_goal: Optional[tuple] = None,
  transfer_seed: int = 0,
  goal: tuple = EAST_DOORWAY,
  **param_overrides,
):
  """`(env, params)` of the four-rooms transfer task.

  Args:
    observation: "one_hot" (agent cell, goal unobserved) or "coordinates" (gymnax's).
    transfer_after_steps: per-environment steps after which new episodes use the moved goal;
      0 (default) keeps the first goal for ever.
    transfer_goal: the moved goal (row, col); default a lower-right-room cell drawn from
      `transfer_seed` (the paper draws it at random once per run).
    transfer_seed: seed of that draw.
    goal: the first goal, default the east doorway (7, 9).
    **param_overrides: other `EnvParams` fields (`fail_prob`, `resample_init_pos`,
      `max_steps_in_episode`).
  """
  if (
    isinstance(transfer_after_steps, bool)
    or not isinstance(transfer_after_steps, int)
    or transfer_after_steps < 0
  ):
    raise ValueError(
      f"transfer_after_steps: expected an integer >= 0 (0: no transfer), "
      f"got {transfer_after_steps!r}"
    )
  free = {tuple(c) for c in free_cells().tolist()}
  if transfer_goal is None:
    transfer_goal = transfer_goal_for_seed(transfer_seed)
  for name, cell in (("goal", goal), ("transfer_goal", transfer_goal)):
    if tuple(int(x) for x in cell) not in free:
      raise ValueError(
        f"{name}: expected a free (row, col) cell of the four-rooms map, got {tuple(cell)!r}"
      )
  env = FourRoomsTransfer(observation)
  fields = set(EnvParams.__dataclass_fields__) - {"goal", "transfer_goal", "transfer_after_steps"}
  unknown = sorted(set(param_overrides) - fields)
  if unknown:
    raise ValueError(
      f"env_kwargs: {ENV_NAME} has no parameter {unknown[0]!r}; expected one of "
      f"{sorted(fields | {'observation', 'transfer_after_steps', 'transfer_goal', 'transfer_seed', 'goal'})}"
    )
  params = env.default_params.replace(
    goal=jnp.asarray(goal, jnp.int32),
    transfer_goal=jnp.asarray(transfer_goal, jnp.int32),
    transfer_after_steps=transfer_after_steps if transfer_after_steps > 0 else NEVER,
    **param_overrides,
  )
  return env, params


def current_task_params(env_params, env_steps):
  """`env_params` whose every episode has the goal that training episodes starting after
  `env_steps` per-environment steps have (the first goal, or the moved one once
  `transfer_after_steps` are done): an evaluation then measures the task being learned. Params
  of an environment without a moving goal are returned as they are."""
  if not hasattr(env_params, "transfer_after_steps"):
    return env_params
  moved = env_steps >= env_params.transfer_after_steps
  return env_params.replace(
    transfer_after_steps=jnp.where(moved, 0, env_params.transfer_after_steps)
  )


def shortest_path_action_values(goal) -> np.ndarray:
  """`[13 * 13, 4]` optimal action values of reaching `goal` at a cost of 1 per step: minus the
  number of steps from the cell each move leads to (a move into a wall stays) to `goal`, by
  breadth-first search on the map; indexed by the one-hot observation's cell (a demonstration
  for the expert mixture of `agents/macro_mixture.py`)."""
  free = {tuple(c) for c in free_cells().tolist()}
  directions = ((-1, 0), (0, 1), (1, 0), (0, -1))  # gymnax FourRooms' action order
  goal = tuple(int(x) for x in np.asarray(goal))
  distance = {goal: 0}
  queue = deque([goal])
  while queue:
    r, c = queue.popleft()
    for dr, dc in directions:
      cell = (r + dr, c + dc)
      if cell in free and cell not in distance:
        distance[cell] = distance[(r, c)] + 1
        queue.append(cell)
  table = np.zeros((GRID_SIZE * GRID_SIZE, len(directions)), np.float32)
  for r, c in free:
    for a, (dr, dc) in enumerate(directions):
      cell = (r + dr, c + dc) if (r + dr, c + dc) in free else (r, c)
      table[r * GRID_SIZE + c, a] = -float(distance[cell])
  return table
