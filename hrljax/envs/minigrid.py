"""MiniGrid tasks of XLand-MiniGrid (`xminigrid`) behind gymnax's API, for every discrete agent.

Nikulin et al., "XLand-MiniGrid: Scalable Meta-Reinforcement Learning Environments in JAX",
arXiv:2312.12044 (package `xminigrid` 0.9.3, the `[gridworld]` extra): JAX ports of
Chevalier-Boisvert et al.'s MiniGrid. `hrljax.envs` registers

  MiniGrid-DoorKey-5x5, MiniGrid-DoorKey-6x6, MiniGrid-DoorKey-8x8: pick up the key, open the
    locked door in the wall, reach the goal in the other room (time limit 10 * height * width);
  MiniGrid-LockedRoom: the larger multi-room task (19 x 19, six rooms off a corridor): the key
    lies in one room and opens the locked room that holds the goal (time limit 10 * 19).

`envs.make("MiniGrid-DoorKey-5x5", observation=..., max_steps_in_episode=..., view_size=...)`.

What this module adds to xminigrid's `Environment`:

- gymnax's functional API (`reset(key, params)`, `step(key, state, action, params)`, gymnax's own
  auto-resetting `step`, so `hrljax.rollout` resets only when some environment ended);
- terminated kept apart from truncated: `terminated` is reaching the goal (xminigrid's discount
  0), `truncated` is the time limit (`step_num >= max_steps_in_episode`), as gymnax reports them
  (both true when the goal is reached on the last step; a terminated step never bootstraps);
- a flat float32 observation an MLP can read: the agent's partial view (`view_size` x
  `view_size` cells in front of it, aligned with its heading; xminigrid's transparent view, which
  sees through walls like MiniGrid's `see_through_walls=True`), its direction as a one-hot of 4,
  and what it carries (MiniGrid draws the carried object in the agent's own cell of the view;
  xminigrid leaves it out, so it is appended here). `observation="one_hot"` (default) one-hot codes each cell's
  tile (13) and colour (12), `view^2 * 25 + 4 + 25` features (1254 for the default 7 x 7 view);
  `observation="symbolic"` keeps the integer tile and colour ids as floats, `view^2 * 2 + 4 + 2`.

The step is xminigrid's `Environment.step` specialised to these tasks, which have no rules and an
agent-on-tile goal (checked when the environment is made): the generic step evaluates every rule
and goal type in a `lax.switch`, a program about 6x larger (268 kB vs 46 kB of HLO text) that
took 5 s instead of 1 s to compile under the tests' XLA flags, and random-action rollouts of 64
and 256 environments ran at 25k vs 46-60k steps/s on CPU.

Reward and dynamics are xminigrid's: six actions (forward, turn right, turn left, pick up, put
down, toggle; MiniGrid's seventh, "done", is absent), reward `1 - 0.9 * t / max_steps` on
reaching the goal and 0 otherwise. xminigrid's parameters are static (not pytree leaves); so are
this module's `EnvParams`, which cannot be vmapped over.

Without xminigrid installed, making one of these environments raises `MissingPackage`, one line
naming the install command (it is both an ImportError and a ValueError, the error class
`experiments.train` reports as one line).
"""

import importlib
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

PACKAGE = "xminigrid"
INSTALL = "pip install 'hrljax[gridworld]'"
# hrljax name -> xminigrid name (the same names as xminigrid's registry)
TASKS = {
  "MiniGrid-DoorKey-5x5": "MiniGrid-DoorKey-5x5",
  "MiniGrid-DoorKey-6x6": "MiniGrid-DoorKey-6x6",
  "MiniGrid-DoorKey-8x8": "MiniGrid-DoorKey-8x8",
  "MiniGrid-LockedRoom": "MiniGrid-LockedRoom",
}
OBSERVATIONS = ("one_hot", "symbolic")
NUM_DIRECTIONS = 4
# xminigrid.core.constants (0.9.3): tile and colour ids of a grid cell, and the action count.
NUM_TILES = 13
NUM_COLORS = 12
NUM_ACTIONS = 6
ACTIONS = ("forward", "right", "left", "pick_up", "put_down", "toggle")
AGENT_ON_TILE_GOAL = 2  # xminigrid.core.goals: AgentOnTileGoal's id (rule id 0: EmptyRule)


class MissingPackage(ImportError, ValueError):
  """An environment needs an optional package that is not installed."""


def import_xminigrid(name: str):
  """The `xminigrid` module, or `MissingPackage` naming `name` and the install command."""
  try:
    return importlib.import_module(PACKAGE)
  except ImportError:
    raise MissingPackage(f"{name} needs {PACKAGE}, which is not installed: {INSTALL}") from None


@struct.dataclass
class EnvState:
  inner: Any  # xminigrid's State (grid, agent, step_num, ...)
  time: jax.Array  # steps in the current episode (= inner.step_num)


@struct.dataclass
class EnvParams:
  max_steps_in_episode: int = struct.field(pytree_node=False, default=250)  # time limit
  view_size: int = struct.field(pytree_node=False, default=7)  # odd, >= 3


class MiniGrid(environment.Environment):
  """An xminigrid MiniGrid task with gymnax's API (see the module docstring)."""

  def __init__(self, name: str, observation: str = "one_hot"):
    if name not in TASKS:
      raise ValueError(f"name: expected one of {sorted(TASKS)}, got {name!r}")
    if observation not in OBSERVATIONS:
      raise ValueError(f"observation: expected one of {OBSERVATIONS}, got {observation!r}")
    xminigrid = import_xminigrid(name)
    super().__init__()
    self._name = name
    self.observation = observation
    self._env, self._inner_params = xminigrid.make(TASKS[name])
    self._core = _core_functions(self._env)

  @property
  def name(self) -> str:
    return self._name

  @property
  def default_params(self) -> EnvParams:
    inner = self._inner_params
    return EnvParams(max_steps_in_episode=int(inner.max_steps), view_size=int(inner.view_size))

  @property
  def inner_env(self):
    """The wrapped xminigrid `Environment`."""
    return self._env

  def inner_params(self, params: EnvParams):
    """xminigrid's params with this module's time limit and view size."""
    return self._inner_params.replace(
      max_steps=params.max_steps_in_episode, view_size=params.view_size
    )

  def reset_env(self, key: jax.Array, params: EnvParams):
    timestep = self._env.reset(self.inner_params(params), key)
    state = EnvState(inner=timestep.state, time=jnp.asarray(timestep.state.step_num, jnp.int32))
    return self.encode(timestep.observation, state), state

  def step_env(self, key: jax.Array, state: EnvState, action, params: EnvParams):
    del key  # MiniGrid's dynamics are deterministic
    take_action, goal_check, field_of_view = self._core
    inner = state.inner
    action = jnp.asarray(action, jnp.int32)
    # xminigrid's Environment.step for a task without rules and with an agent-on-tile goal.
    grid, agent, changed_position = take_action(inner.grid, inner.agent, action)
    inner = inner.replace(grid=grid, agent=agent, step_num=inner.step_num + 1)
    terminated = goal_check(inner.goal_encoding)(grid, agent, action, changed_position)
    reward = jnp.where(
      terminated, 1.0 - 0.9 * (inner.step_num / params.max_steps_in_episode), 0.0
    ).astype(jnp.float32)
    state = EnvState(inner=inner, time=jnp.asarray(inner.step_num, jnp.int32))
    view = field_of_view(grid, agent, params.view_size, params.view_size)
    return self.encode(view, state), state, reward, terminated, {}

  def is_truncated(self, state: EnvState, params: EnvParams) -> jax.Array:
    return state.time >= params.max_steps_in_episode

  def encode(self, view: jax.Array, state: EnvState) -> jax.Array:
    """The flat float32 observation of a `[view, view, 2]` (tile, colour) view."""
    agent = state.inner.agent
    direction = jax.nn.one_hot(agent.direction, NUM_DIRECTIONS, dtype=jnp.float32)
    if self.observation == "one_hot":
      cells = jnp.concatenate(
        [
          jax.nn.one_hot(view[..., 0], NUM_TILES, dtype=jnp.float32),
          jax.nn.one_hot(view[..., 1], NUM_COLORS, dtype=jnp.float32),
        ],
        axis=-1,
      ).reshape(-1)
      pocket = jnp.concatenate(
        [
          jax.nn.one_hot(agent.pocket[0], NUM_TILES, dtype=jnp.float32),
          jax.nn.one_hot(agent.pocket[1], NUM_COLORS, dtype=jnp.float32),
        ]
      )
    else:
      cells = view.reshape(-1).astype(jnp.float32)
      pocket = agent.pocket.astype(jnp.float32)
    return jax.lax.stop_gradient(jnp.concatenate([cells, direction, pocket]))

  def observation_size(self, params: EnvParams) -> int:
    cells = params.view_size * params.view_size
    if self.observation == "one_hot":
      return cells * (NUM_TILES + NUM_COLORS) + NUM_DIRECTIONS + NUM_TILES + NUM_COLORS
    return cells * 2 + NUM_DIRECTIONS + 2

  def observation_space(self, params: EnvParams) -> spaces.Box:
    high = 1.0 if self.observation == "one_hot" else float(max(NUM_TILES, NUM_COLORS) - 1)
    return spaces.Box(0.0, high, (self.observation_size(params),), jnp.float32)

  def action_space(self, params: EnvParams = None) -> spaces.Discrete:
    return spaces.Discrete(NUM_ACTIONS)

  @property
  def num_actions(self) -> int:
    return NUM_ACTIONS


def _core_functions(env):
  """xminigrid's action, goal check and field of view for `env`'s task, after checking that the
  task has no rules and an agent-on-tile goal (what `MiniGrid.step_env` computes)."""
  actions, goals, observation = (
    importlib.import_module(f"{PACKAGE}.core.{part}")
    for part in ("actions", "goals", "observation")
  )
  task = importlib.import_module(type(env).__module__)
  goal = int(task._goal_encoding[0])
  rules = [int(r) for r in task._rule_encoding[:, 0]]
  if goal != AGENT_ON_TILE_GOAL or any(rules):
    raise ValueError(
      f"{type(env).__name__}: expected an agent-on-tile goal and no rules, got goal {goal} and "
      f"rules {rules}"
    )
  return (
    actions.take_action,
    goals.AgentOnTileGoal.decode,
    observation.transparent_field_of_view,
  )


def make_minigrid(name: str, observation: str = "one_hot", **param_overrides):
  """`(env, params)` of the MiniGrid task `name` (a key of `TASKS`).

  Args:
    name: e.g. "MiniGrid-DoorKey-5x5".
    observation: "one_hot" (default) or "symbolic" (see the module docstring).
    **param_overrides: `EnvParams` fields, `max_steps_in_episode` (default xminigrid's, MiniGrid's
      formula) and `view_size` (default 7).
  """
  env = MiniGrid(name, observation)
  fields = set(EnvParams.__dataclass_fields__)
  unknown = sorted(set(param_overrides) - fields)
  if unknown:
    raise ValueError(
      f"env_kwargs: {name} has no parameter {unknown[0]!r}; expected one of "
      f"{sorted(fields | {'observation'})}"
    )
  params = env.default_params.replace(**param_overrides)
  for field in sorted(fields):
    value = getattr(params, field)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"env_kwargs: {name}'s {field} must be an integer >= 1, got {value!r}")
  if params.view_size < 3 or params.view_size % 2 == 0:
    raise ValueError(
      f"env_kwargs: {name}'s view_size must be odd and >= 3, got {params.view_size!r}"
    )
  return env, params
