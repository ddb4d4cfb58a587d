"""Two agents in the four-rooms grid, rewarded as a team when both stand in their target rooms.

A cooperative two-agent navigation task with temporally extended structure, for hierarchical
multi-agent learners such as GMAH (Xu et al., arXiv:2408.11416): the map is the four-rooms grid
of Sutton, Precup, Singh, "Between MDPs and semi-MDPs: A framework for temporal abstraction in
reinforcement learning", Artificial Intelligence 112 (1999) (the 13 x 13 map of gymnax's
`FourRooms-misc`, imported through `hrljax.envs.four_rooms.free_cells`), and each agent must
cross a hallway and a neighbouring room to reach the room diagonally opposite its start. It is
hrljax's own task, not a published benchmark. `hrljax.envs` registers it as
`envs.make("TwoAgentFourRooms-v0", task=..., max_steps_in_episode=..., step_cost=...,
start_rooms=..., target_rooms=..., observe_others=..., shared_room_ends=...)`.

Three tasks share the map, the moves and the observation layout (`task`, default "own_rooms"):

- "own_rooms": each agent has its own target room; the team is rewarded once each stands in
  its own. The team reward splits into one goal per agent: nothing to coordinate.
- "split": both agents start in the same room and the goal set is two rooms; the team is
  rewarded once the agents stand in two *different* rooms of the set (both in one goal room is
  no success). The agents must agree on who goes where: a coordination task.
- "random_split": "split" with the rooms drawn per episode: both agents start in one uniformly
  drawn room, and the goal set is two rooms drawn uniformly among the other three (the third
  is left out), so the room each agent should take changes from episode to episode: no fixed
  room per agent serves every episode, a division of labour must read the goal set and the
  start room; `start_rooms` and `target_rooms` are not read. Twelve (start room, goal set)
  pairs, each equally likely.

- Rooms, numbered in row-major order of their first cell: 0 north-west, 1 north-east,
  2 south-west, 3 south-east; the four hallway cells (the doorways between two rooms) belong to
  no room. Both are derived from the imported map (`ROOM_MAP`, `HALLWAYS`).
- Reset: agent i starts in a uniformly drawn cell of room `start_rooms[i]` (the two draws are
  independent, so in one room the agents may start in the same cell). "own_rooms": default
  (0, 1), north-west and north-east; agent i's target room is `target_rooms[i]` (default the
  diagonally opposite room, 3 − start: south-east and south-west). "split": default (0, 0),
  both in the north-west; `target_rooms` is the goal set, two different rooms (default (2, 3),
  south-west and south-east), the same for both agents. "random_split": the start room and the
  goal set as above, drawn from the reset key.
- Actions `[2]` int32, one per agent: 0 up, 1 right, 2 down, 3 left (gymnax FourRooms' order),
  4 stay. Moves are deterministic; a move into a wall leaves the agent where it is; agents may
  share a cell (no collisions). Actions outside [0, 5) are clipped into it.
- Team reward (float32 scalar): 1 − `step_cost` at the step after which the team's goal holds,
  which terminates the episode ("own_rooms": agent i stands in room `target_rooms[i]`, for both
  i; "split": the agents stand in the two different rooms of the goal set, either way round);
  −`step_cost` at every other step (`step_cost` 0 by default: a sparse +1). The episode is
  truncated after `max_steps_in_episode` steps (default 100). With `shared_room_ends=True` (split
  tasks only, default False) the agents standing in one room of the goal set also terminate the
  episode, with −`step_cost` and no success: a failed division of labour is final, so a team
  cannot win by walking to the goal rooms together and letting one agent trail into the second.
- Observation `[2, 12]` float32, row i agent i's: its position (row, col) / 12, the other
  agent's position (row, col) / 12, then two 4-vectors over the rooms: "own_rooms", the one-hot
  of its target room and the one-hot of the other agent's; "split", the two-hot of the goal set
  (1 at both goal rooms) in both (no agent is assigned a room); "random_split" as "split".
  With `observe_others=False` (default True) the other agent's position reads (0, 0): each
  agent sees only itself and the goals, so its choice cannot condition on where the other is
  (the layout and the shape stay those above). The global state a mixer reads is
  `obs.reshape(-1)`.

The multi-agent API is that of `hrljax.envs.mpe` (observations `[n_agents, obs_dim]`, actions
`[n_agents]`, one team reward, terminated and truncated per environment, `env.num_agents`,
`env.action_space(params)` one agent's space).

Subgoals for hierarchical learners: `SUBGOAL_CELLS`, L = 8 fixed cells, the four room centres
(in room order; a room's centre is the cell at the rounded-down mean of its cells) then the four
hallways (row-major); `subgoal_offsets(obs)` `[..., N, L, 2]` gives each cell's position minus
the agent's, in the observation's units (cells / 12), from the observations alone.
"""

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from hrljax.envs.four_rooms import GRID_SIZE, free_cells

ENV_NAME = "TwoAgentFourRooms-v0"
NUM_AGENTS = 2
NUM_ROOMS = 4
ROOM_NAMES = ("north-west", "north-east", "south-west", "south-east")
TASKS = ("own_rooms", "split", "random_split")
SPLIT_TASKS = ("split", "random_split")  # rewarded when the agents take two different goal rooms
# (start, target); "random_split" draws both at reset, the defaults stand in the unread fields
DEFAULT_ROOMS = {
  "own_rooms": ((0, 1), None),
  "split": ((0, 0), (2, 3)),
  "random_split": ((0, 0), (2, 3)),
}
# (row, col) steps of the actions: gymnax FourRooms' up, right, down, left, then stay
MOVES = np.asarray([[-1, 0], [0, 1], [1, 0], [0, -1], [0, 0]], np.int32)
NUM_ACTIONS = len(MOVES)
SCALE = float(GRID_SIZE - 1)  # positions are observed as (row, col) / SCALE
OBS_DIM = 4 + 2 * NUM_ROOMS


def _layout() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`(free [13, 13] bool, room map [13, 13] int32 (−1: wall or hallway), hallways [4, 2])` of
  the four-rooms map: a hallway is a free cell between two walls (above and below, or left and
  right); the rooms are the 4-connected components of the other free cells."""
  free = np.zeros((GRID_SIZE, GRID_SIZE), bool)
  free[tuple(free_cells().T)] = True
  walled = lambda r, c, dr, dc: not free[r - dr, c - dc] and not free[r + dr, c + dc]
  hallways = [(r, c) for r, c in np.argwhere(free) if walled(r, c, 1, 0) or walled(r, c, 0, 1)]
  room_map = np.full((GRID_SIZE, GRID_SIZE), -1, np.int32)
  open_ = free.copy()
  open_[tuple(np.asarray(hallways).T)] = False
  rooms = 0
  for start in map(tuple, np.argwhere(open_)):  # row-major: rooms numbered by their first cell
    if room_map[start] >= 0:
      continue
    room_map[start], queue = rooms, deque([start])
    while queue:
      r, c = queue.popleft()
      for dr, dc in MOVES[:4]:
        cell = (r + dr, c + dc)
        if open_[cell] and room_map[cell] < 0:
          room_map[cell] = rooms
          queue.append(cell)
    rooms += 1
  if rooms != NUM_ROOMS or len(hallways) != NUM_ROOMS:
    raise RuntimeError(f"expected 4 rooms and 4 hallways in the map, got {rooms}, {len(hallways)}")
  return free, room_map, np.asarray(hallways, np.int32)


FREE, ROOM_MAP, HALLWAYS = _layout()
ROOM_SIZES = np.asarray([(ROOM_MAP == k).sum() for k in range(NUM_ROOMS)], np.int32)
# [4, max size, 2]: each room's cells in row-major order, padded with its first cell
ROOM_CELLS = np.stack(
  [
    np.concatenate([cells, np.repeat(cells[:1], ROOM_SIZES.max() - len(cells), axis=0)])
    for cells in (np.argwhere(ROOM_MAP == k).astype(np.int32) for k in range(NUM_ROOMS))
  ]
)
ROOM_CENTRES = np.asarray(
  [np.floor(np.argwhere(ROOM_MAP == k).mean(axis=0)) for k in range(NUM_ROOMS)], np.int32
)
SUBGOAL_CELLS = np.concatenate([ROOM_CENTRES, HALLWAYS])  # [8, 2] (row, col)
NUM_SUBGOALS = len(SUBGOAL_CELLS)


def subgoal_offsets(obs: jax.Array) -> jax.Array:
  """`[..., N, L, 2]`: each subgoal cell's position minus the agent's, in observation units
  (cells / 12), from observations `[..., N, 12]` (the agent's own position is `obs[..., :2]`)."""
  cells = jnp.asarray(SUBGOAL_CELLS / SCALE, obs.dtype)
  return cells.reshape((1,) * (obs.ndim - 1) + cells.shape) - obs[..., None, :2]


def room_of(pos: jax.Array) -> jax.Array:
  """The room index of (row, col) cells `[..., 2]` (−1 for a hallway or a wall)."""
  return jnp.asarray(ROOM_MAP)[pos[..., 0], pos[..., 1]]


@struct.dataclass
class EnvState:
  pos: jax.Array  # [2, 2] int32: (row, col) of each agent
  target: jax.Array  # [2] int32: each agent's target room ("own_rooms"); the goal set (split tasks)
  time: jax.Array  # int32: steps in the current episode


@struct.dataclass
class EnvParams:
  task: str = struct.field(pytree_node=False, default="own_rooms")  # one of TASKS (static)
  max_steps_in_episode: int = 100
  step_cost: float = 0.0  # subtracted from the team reward at every step
  start_rooms: jax.Array = struct.field(default_factory=lambda: jnp.asarray([0, 1], jnp.int32))
  target_rooms: jax.Array = struct.field(default_factory=lambda: jnp.asarray([3, 2], jnp.int32))
  observe_others: bool = struct.field(pytree_node=False, default=True)  # see the other's position
  # split tasks: both agents in one goal room end the episode unrewarded (static)
  shared_room_ends: bool = struct.field(pytree_node=False, default=False)


class TwoAgentFourRooms(environment.Environment):
  """The two-agent four-rooms task of the module docstring, gymnax's API with an agent axis."""

  num_agents = NUM_AGENTS

  @property
  def name(self) -> str:
    return ENV_NAME

  @property
  def default_params(self) -> EnvParams:
    return EnvParams()

  @property
  def num_actions(self) -> int:
    return NUM_ACTIONS

  def reset_env(self, key: jax.Array, params: EnvParams):
    rooms = jnp.asarray(params.start_rooms, jnp.int32)
    target = jnp.asarray(params.target_rooms, jnp.int32)
    if params.task == "random_split":  # the other tasks use the key as is: their episodes unchanged
      key, rooms, target = _draw_rooms(key)
    sizes = jnp.asarray(ROOM_SIZES)[rooms]
    index = jax.random.randint(key, (NUM_AGENTS,), 0, sizes)  # per agent in [0, its room's size)
    pos = jnp.asarray(ROOM_CELLS)[rooms, index]
    state = EnvState(pos=pos, target=target, time=jnp.zeros((), jnp.int32))
    return self.get_obs(state, params), state

  def step_env(self, key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    del key  # deterministic moves
    action = jnp.clip(jnp.asarray(action, jnp.int32), 0, NUM_ACTIONS - 1)
    moved = state.pos + jnp.asarray(MOVES)[action]
    blocked = ~jnp.asarray(FREE)[moved[:, 0], moved[:, 1]]
    pos = jnp.where(blocked[:, None], state.pos, moved)
    room = room_of(pos)
    # split tasks: two different rooms of the goal set (target's two are distinct)
    if params.task in SPLIT_TASKS:
      in_goal = jnp.any(room[:, None] == state.target[None], axis=1)
      arrived = jnp.all(in_goal) & (room[0] != room[1])
      terminated = arrived
      if params.shared_room_ends:  # a failed division of labour ends the episode
        terminated = arrived | (in_goal[0] & (room[0] == room[1]))
    else:
      arrived = terminated = jnp.all(room == state.target)
    reward = arrived.astype(jnp.float32) - jnp.asarray(params.step_cost, jnp.float32)
    state = EnvState(pos=pos, target=state.target, time=state.time + 1)
    return jax.lax.stop_gradient(self.get_obs(state, params)), state, reward, terminated, {}

  def get_obs(self, state: EnvState, params=None, key=None) -> jax.Array:
    """`[2, 12]`: own position, the other's position (both / 12; (0, 0) when `observe_others`
    is False), own and other's target (split tasks: the goal set's two-hot in both; without
    `params` the "own_rooms" encoding)."""
    pos = state.pos.astype(jnp.float32) / SCALE
    target = jax.nn.one_hot(state.target, NUM_ROOMS, dtype=jnp.float32)
    if params is not None and params.task in SPLIT_TASKS:
      target = jnp.broadcast_to(target.sum(axis=0), target.shape)
    other = jnp.asarray([1, 0])
    other_pos = pos[other]
    if params is not None and not params.observe_others:
      other_pos = jnp.zeros_like(other_pos)
    return jnp.concatenate([pos, other_pos, target, target[other]], axis=-1)

  def action_space(self, params=None) -> spaces.Discrete:
    """One agent's action space (both agents' are the same)."""
    return spaces.Discrete(NUM_ACTIONS)

  def observation_space(self, params=None) -> spaces.Box:
    return spaces.Box(0.0, 1.0, (NUM_AGENTS, OBS_DIM), jnp.float32)


def _draw_rooms(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`(key left, start rooms [2], goal set [2])` of a "random_split" episode: one start room for
  both agents, uniform over the four, and the goal set, the other three rooms but one left out
  uniformly (in increasing order)."""
  key, room_key, out_key = jax.random.split(key, 3)
  start = jax.random.randint(room_key, (), 0, NUM_ROOMS)
  left_out = (start + jax.random.randint(out_key, (), 1, NUM_ROOMS)) % NUM_ROOMS
  all_rooms = jnp.arange(NUM_ROOMS)
  goal = jnp.nonzero((all_rooms != start) & (all_rooms != left_out), size=2)[0]
  return key, jnp.full((NUM_AGENTS,), start, jnp.int32), goal.astype(jnp.int32)


def _bool(name: str, value) -> bool:
  """`value` if it is a bool, or a ValueError naming `name` (0 and 1 compare equal to False and
  True but are not bools)."""
  if not isinstance(value, (bool, np.bool_)):
    raise ValueError(f"{name}: expected a bool, got {value!r}")
  return bool(value)


def _rooms(name: str, value) -> jax.Array:
  """`value` as two room indices, or a ValueError naming `name`."""
  rooms = tuple(value) if isinstance(value, (tuple, list, np.ndarray)) else None
  if (
    rooms is None
    or len(rooms) != NUM_AGENTS
    or not all(
      isinstance(r, (int, np.integer)) and not isinstance(r, bool) and 0 <= r < NUM_ROOMS
      for r in rooms
    )
  ):
    raise ValueError(
      f"{name}: expected {NUM_AGENTS} room indices in [0, {NUM_ROOMS}) "
      f"({', '.join(f'{k} {n}' for k, n in enumerate(ROOM_NAMES))}), got {value!r}"
    )
  return jnp.asarray(rooms, jnp.int32)


def make_two_agent_rooms(**kwargs):
  """`(env, params)` of the task; `kwargs`: `task` (one of `TASKS`, default "own_rooms"),
  `max_steps_in_episode` (an integer > 0, default 100), `step_cost` (a number in [0, 1), default 0),
  `start_rooms` (two room indices, default (0, 1); "split" (0, 0)), `target_rooms` (two room
  indices, default the rooms diagonally opposite the starts; "split": the goal set, two
  different rooms, default (2, 3); neither is read by "random_split", which draws both per
  episode), `observe_others` (a bool, default True; False hides the other agent's position),
  `shared_room_ends` (a bool, default False; split tasks only: both agents in one goal room end
  the episode unrewarded). A bad name or value raises a ValueError naming it."""
  fields = sorted(EnvParams.__dataclass_fields__)
  unknown = sorted(set(kwargs) - set(fields))
  if unknown:
    raise ValueError(
      f"env_kwargs: {ENV_NAME} has no parameter {unknown[0]!r}; expected one of {fields}"
    )
  params = EnvParams()
  task = kwargs.get("task", params.task)
  if not isinstance(task, str) or task not in TASKS:
    raise ValueError(f"task: expected one of {list(TASKS)}, got {task!r}")
  default_start, default_target = DEFAULT_ROOMS[task]
  limit = kwargs.get("max_steps_in_episode", params.max_steps_in_episode)
  if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit <= 0:
    raise ValueError(f"max_steps_in_episode: expected an integer > 0, got {limit!r}")
  cost = kwargs.get("step_cost", params.step_cost)
  if (
    isinstance(cost, bool)
    or not isinstance(cost, (int, float, np.number))
    or not np.isfinite(cost)
    or not 0 <= cost < 1
  ):
    # below 1, so that the success step's reward 1 − step_cost is the only positive one
    raise ValueError(f"step_cost: expected a number in [0, 1), got {cost!r}")
  observe = _bool("observe_others", kwargs.get("observe_others", params.observe_others))
  shared_room_ends = _bool(
    "shared_room_ends", kwargs.get("shared_room_ends", params.shared_room_ends)
  )
  if shared_room_ends and task not in SPLIT_TASKS:
    raise ValueError(
      f"shared_room_ends: expected False for task {task!r} (only the split tasks have a goal "
      f"set to share), got True"
    )
  start = _rooms("start_rooms", kwargs.get("start_rooms", default_start))
  target = kwargs.get("target_rooms", default_target)
  target = NUM_ROOMS - 1 - start if target is None else _rooms("target_rooms", target)
  if task in SPLIT_TASKS and target[0] == target[1]:
    raise ValueError(
      f"target_rooms: the split task's goal set must be two different rooms, "
      f"got {kwargs['target_rooms']!r}"
    )
  params = params.replace(
    task=task,
    max_steps_in_episode=int(limit),
    step_cost=float(cost),
    start_rooms=start,
    target_rooms=target,
    observe_others=observe,
    shared_room_ends=shared_room_ends,
  )
  return TwoAgentFourRooms(), params
