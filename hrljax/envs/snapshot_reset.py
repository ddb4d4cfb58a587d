"""Snapshot resets: episodes that start from states of a teacher's trajectories (Snapshot RL).

Zhao, Qian, Wang, Shan, Qin, "Snapshot Reinforcement Learning: Leveraging Prior Trajectories for
Efficiency", arXiv:2403.00673 (2024). SnapshotRL changes the environment, not the agent: in the
early phase of training a student's episodes may start from environment states ("snapshots")
that a teacher's trajectories visited, so that it sees more of the state space, and it is
evaluated in the original environment. Any agent that steps the environment therefore gets it,
here through the environment's options (`envs.make(name, snapshot_reset={...})`, i.e.
`config.env_kwargs.snapshot_reset`).

What this module follows: the paper's framework (reset to teacher states early in training, then
the environment's own reset; evaluate in the original environment), with the reset probability
written as a schedule over the environment's own step count t (steps since its first reset,
the reset counter carried in the wrapper's state):

  p(t) = p0 * max(0, 1 - t / T)       schedule "linear" (default)
  p(t) = p0 if t < T else 0           schedule "step": snapshots only in the first T steps
  p(t) = p0                           schedule "constant"

At every auto-reset (an episode ended inside `step`), with probability p(t) the next episode
starts from a teacher state drawn uniformly from the stored array, else from the environment's
own reset. The schedule is reconstructed: the paper describes the early phase and the switch to
the original environment, not a formula for p(t); "step" is the hard switch, "linear" the anneal.
Not implemented: S3RL's status classification (clustering the snapshots and picking among the
clusters) and student trajectory truncation (a shorter time limit for episodes started from a
snapshot).

Conventions of the wrapper:

- a fresh `reset` is the environment's own (p plays no part): an evaluation, which starts from
  `reset`, measures the original environment, and a rollout that keeps only each environment's
  first episode (grouped rollouts) sees no snapshot starts;
- a snapshot start is the teacher state with its clock fields (`CLOCK_FIELDS`: the episode's
  `time`, and four rooms' life-long `total_steps`) taken from the environment's own reset at the
  same moment, so that truncation counts the new episode's own steps; its observation is the
  environment's `get_obs` of that state;
- terminated and truncated are the wrapped environment's, unchanged;
- with p(t) = 0 the wrapper gives exactly the wrapped environment's observations, rewards and
  states for the same keys.

Teacher states are a pytree of the environment's state type whose every leaf has a leading axis K
of snapshots, stored in an .npz (`save_states`, `load_states`; `python -m
experiments.snapshot_states` collects them from a trained run).
"""

import json
import os
from collections.abc import Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment as gymnax_environment

from hrljax.config_checks import ConfigError
from hrljax.rollout import plain
from hrljax.types import Array, PyTree

OPTION = "snapshot_reset"  # the env_kwargs entry that turns the wrapper on
SCHEDULES = ("linear", "step", "constant")
CLOCK_FIELDS = ("time", "total_steps")  # taken from the environment's own reset, not the teacher
STATE_PREFIX = "state/"  # npz keys of the state leaves: "state/<leaf path>"
ENV_NAME_KEY = "env_name"
ENV_KWARGS_KEY = "env_kwargs"
_SNAPSHOT_STREAM = 0x5EED  # fold_in constant of the snapshot decisions' keys


def _fail(field: str, expected: str, value: Any) -> None:
  raise ConfigError(f"env_kwargs.{OPTION}.{field}: expected {expected}, got {value!r}")


def _is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)


# ----------------------------------------------------------------------------------------------
# The schedule.
# ----------------------------------------------------------------------------------------------


def validate_schedule(start_probability: float, anneal_steps: int, schedule: str) -> None:
  """Raises `ConfigError` naming the first of the schedule's arguments that cannot run."""
  if schedule not in SCHEDULES:
    _fail("schedule", f"one of {SCHEDULES}", schedule)
  if not (_is_number(start_probability) and 0.0 <= start_probability <= 1.0):
    _fail("start_probability", "a number in [0, 1]", start_probability)
  if isinstance(anneal_steps, bool) or not isinstance(anneal_steps, (int, np.integer)):
    _fail("anneal_steps", "an integer > 0 (per-environment steps)", anneal_steps)
  if anneal_steps < 1:
    _fail("anneal_steps", "an integer > 0 (per-environment steps)", anneal_steps)


def snapshot_probability(
  env_steps: Array, start_probability: float, anneal_steps: int, schedule: str = "linear"
) -> Array:
  """p(t): the probability that an episode starting after `env_steps` steps of its environment
  starts from a teacher state (float32, shape of `env_steps`; jittable in `env_steps`).

  "linear": p0 * max(0, 1 - t / T); "step": p0 while t < T, then 0; "constant": p0.
  """
  validate_schedule(start_probability, anneal_steps, schedule)
  t = jnp.asarray(env_steps, jnp.float32)
  p0 = jnp.float32(start_probability)
  if schedule == "constant":
    return jnp.full(t.shape, p0)
  if schedule == "step":
    return jnp.where(t < anneal_steps, p0, jnp.float32(0.0))
  return p0 * jnp.clip(1.0 - t / jnp.float32(anneal_steps), 0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# Teacher states: named leaves, validation against the environment's state, .npz storage.
# ----------------------------------------------------------------------------------------------


def _select(condition: Array, if_true: PyTree, if_false: PyTree) -> PyTree:
  return jax.tree.map(lambda a, b: jnp.where(condition, a, b), if_true, if_false)


def _key_name(key) -> str:
  for attribute in ("name", "key", "idx"):
    if hasattr(key, attribute):
      return str(getattr(key, attribute))
  return str(key)


def leaf_names(tree: PyTree) -> list[str]:
  """The "/"-joined path of every leaf of `tree`, in `jax.tree.leaves` order."""
  paths = jax.tree_util.tree_flatten_with_path(tree)[0]
  return ["/".join(_key_name(k) for k in path) for path, _ in paths]


def state_shapes(env, env_params) -> PyTree:
  """The environment's state as `ShapeDtypeStruct`s (from its reset; nothing runs)."""
  return jax.eval_shape(env.reset, jax.random.key(0), env_params)[1]


def validate_states(states: PyTree, env, env_params, source: str = "states") -> int:
  """The number K of snapshots in `states`; `ConfigError` naming `source` and the first leaf
  that is not the environment's state leaf with a leading axis K >= 1 (same leaves, trailing
  shapes and dtypes)."""
  expected = state_shapes(env, env_params)
  expected_names = leaf_names(expected)
  names = leaf_names(states)
  if names != expected_names:
    missing = sorted(set(expected_names) - set(names))
    extra = sorted(set(names) - set(expected_names))
    raise ConfigError(
      f"{source}: expected the state leaves {expected_names} of {type(env).__name__}, got "
      f"{names} (missing {missing}, unexpected {extra})"
    )
  count = None
  for name, leaf, want in zip(names, jax.tree.leaves(states), jax.tree.leaves(expected)):
    shape, dtype = tuple(np.shape(leaf)), np.dtype(getattr(leaf, "dtype", np.asarray(leaf).dtype))
    if len(shape) != len(want.shape) + 1 or shape[1:] != tuple(want.shape):
      raise ConfigError(
        f"{source}: leaf {name!r} expected shape (K, {', '.join(map(str, want.shape))}) "
        f"(a leading axis of snapshots), got {shape}"
      )
    if dtype != np.dtype(want.dtype):
      raise ConfigError(f"{source}: leaf {name!r} expected dtype {want.dtype}, got {dtype}")
    if count is not None and shape[0] != count:
      raise ConfigError(
        f"{source}: leaf {name!r} expected {count} snapshots (the first leaf's count), "
        f"got {shape[0]}"
      )
    count = shape[0]
  if not count:
    raise ConfigError(f"{source}: expected at least one snapshot, got 0")
  return count


def save_states(path: str, states: PyTree, env_name: str, env_kwargs: Mapping = ()) -> None:
  """Writes `states` (leaves with a leading snapshot axis) to the .npz `path`, with the name and
  keyword arguments of the environment they belong to."""
  arrays = {
    STATE_PREFIX + name: np.asarray(leaf)
    for name, leaf in zip(leaf_names(states), jax.tree.leaves(states))
  }
  kwargs = json.dumps(dict(env_kwargs), sort_keys=True, default=str)
  np.savez_compressed(
    path, **arrays, **{ENV_NAME_KEY: np.asarray(env_name), ENV_KWARGS_KEY: np.asarray(kwargs)}
  )


def load_states(path: str, env, env_params, env_name: str) -> PyTree:
  """The teacher states stored in the .npz `path` as a pytree of `env`'s state type, checked
  against it (`validate_states`) and against `env_name`."""
  source = f"env_kwargs.{OPTION}.path"
  if not isinstance(path, str) or not os.path.isfile(path):
    raise ConfigError(
      f"{source}: expected an .npz of teacher states (python -m experiments.snapshot_states), "
      f"got {path!r} (no such file)"
    )
  with np.load(path) as stored:
    arrays = {key: stored[key] for key in stored.files}
  stored_env = str(arrays.get(ENV_NAME_KEY, ""))
  if stored_env != env_name:
    raise ConfigError(f"{source}: expected states of {env_name!r}, got states of {stored_env!r}")
  expected = state_shapes(env, env_params)
  names = leaf_names(expected)
  stored_names = sorted(k[len(STATE_PREFIX) :] for k in arrays if k.startswith(STATE_PREFIX))
  if stored_names != sorted(names):
    raise ConfigError(
      f"{source}: expected the state leaves {names} of {env_name!r}, got {stored_names} in {path}"
    )
  leaves = [arrays[STATE_PREFIX + name] for name in names]
  states = jax.tree.unflatten(jax.tree.structure(expected), leaves)
  validate_states(states, env, env_params, source=f"{source} ({path})")
  return states


def collect_states(
  env, env_params, act_fn, memory: PyTree, key: Array, num_envs: int, num_steps: int
) -> PyTree:
  """The states a policy visits: `num_steps` steps of `num_envs` environments (auto-resetting),
  each step's state before it acts, as `[num_steps * num_envs, ...]` leaves (time-major).

  `act_fn(memory, obs, key) -> (actions, memory)` acts for the batch; `memory` (leaves `[N]`,
  e.g. option-critic's running options) goes back to its initial value where an episode ended.
  """
  for name, value in (("num_envs", num_envs), ("num_steps", num_steps)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
  reset_key, run_key = jax.random.split(key)
  carry = plain.reset(env, env_params, reset_key, num_envs)
  initial = memory

  def one_step(carry_and_memory, step_key):
    carry, memory = carry_and_memory
    act_key, env_key = jax.random.split(step_key)
    actions, memory = act_fn(memory, carry.obs, act_key)
    next_carry, transition = plain.step(env, env_params, carry, actions, env_key)
    memory = jax.tree.map(partial(_where_done, transition.done), initial, memory)
    return (next_carry, memory), carry.env_state

  keys = jax.random.split(run_key, num_steps)
  _, states = jax.lax.scan(one_step, (carry, memory), keys)
  return jax.tree.map(lambda x: x.reshape((num_steps * num_envs,) + x.shape[2:]), states)


def _where_done(done: Array, initial: Array, value: Array) -> Array:
  return jnp.where(done.reshape(done.shape + (1,) * (value.ndim - 1)), initial, value)


# ----------------------------------------------------------------------------------------------
# The wrapper.
# ----------------------------------------------------------------------------------------------


@struct.dataclass
class SnapshotState:
  """The wrapper's state: the wrapped state and the step counter that p(t) reads."""

  env_state: Any  # the wrapped environment's state
  total_steps: Array  # int32: steps of this environment since its fresh reset (survives resets)


def episode_start(teacher_state: Any, own_start: Any) -> Any:
  """`teacher_state` with the fields of `CLOCK_FIELDS` that it has taken from `own_start`."""
  fields = {f: getattr(own_start, f) for f in CLOCK_FIELDS if hasattr(teacher_state, f)}
  if not fields:
    return teacher_state
  if hasattr(teacher_state, "_replace"):
    return teacher_state._replace(**fields)
  return teacher_state.replace(**fields)


class SnapshotResetWrapper(gymnax_environment.Environment):
  """Starts the episodes after an auto-reset from teacher states with probability p(t) (see the
  module docstring). `step` is overridden (its reset needs the step counter), so rollouts step
  it through `env.step`."""

  def __init__(
    self,
    env,
    states: PyTree,
    start_probability: float,
    anneal_steps: int,
    schedule: str = "linear",
    env_params=None,
  ):
    validate_schedule(start_probability, anneal_steps, schedule)
    self.env = env
    env_params = env.default_params if env_params is None else env_params
    self.num_snapshots = validate_states(states, env, env_params)
    self.states = jax.tree.map(jnp.asarray, states)
    self.start_probability = float(start_probability)
    self.anneal_steps = int(anneal_steps)
    self.schedule = schedule

  @property
  def name(self) -> str:
    return getattr(self.env, "name", type(self.env).__name__)

  @property
  def default_params(self):
    return self.env.default_params

  def probability(self, env_steps: Array) -> Array:
    """p(t) of this wrapper's schedule."""
    return snapshot_probability(env_steps, self.start_probability, self.anneal_steps, self.schedule)

  def reset_env(self, key, params):
    obs, env_state = self.env.reset_env(key, params)
    return obs, SnapshotState(env_state=env_state, total_steps=jnp.zeros((), jnp.int32))

  def step_env(self, key, state: SnapshotState, action, params):
    """The wrapped step without any reset (the counter advances)."""
    obs, env_state, reward, terminated, info = self.env.step_env(
      key, state.env_state, action, params
    )
    return obs, SnapshotState(env_state, state.total_steps + 1), reward, terminated, info

  def is_truncated(self, state: SnapshotState, params) -> Array:
    return self.env.is_truncated(state.env_state, params)

  def step(self, key, state: SnapshotState, action, params=None):
    """The wrapped environment's step with its auto-reset (same key), then, where an episode
    ended, a snapshot start instead of the own reset with probability p(t)."""
    params = self.default_params if params is None else params
    obs, env_state, reward, terminated, truncated, info = self.env.step(
      key, state.env_state, action, params
    )
    total_steps = state.total_steps + 1
    choice_key, index_key = jax.random.split(jax.random.fold_in(key, _SNAPSHOT_STREAM))
    use = (terminated | truncated) & (
      jax.random.uniform(choice_key) < self.probability(total_steps)
    )
    index = jax.random.randint(index_key, (), 0, self.num_snapshots)
    start = episode_start(jax.tree.map(lambda x: x[index], self.states), env_state)
    start_obs = self.env.get_obs(start, params)
    obs = _select(use, start_obs, obs)
    env_state = _select(use, start, env_state)
    return obs, SnapshotState(env_state, total_steps), reward, terminated, truncated, info

  def action_space(self, params):
    return self.env.action_space(params)

  def observation_space(self, params):
    return self.env.observation_space(params)


# ----------------------------------------------------------------------------------------------
# From env_kwargs.
# ----------------------------------------------------------------------------------------------

FIELDS = ("path", "start_probability", "anneal_steps", "schedule")
DEFAULTS = {"schedule": "linear"}


def parse_options(options: Any) -> dict:
  """`env_kwargs.snapshot_reset` as a dict of `FIELDS`; `ConfigError` naming the first entry
  that is missing, unknown or of the wrong kind."""
  if hasattr(options, "to_dict"):
    options = options.to_dict()
  if not isinstance(options, Mapping):
    raise ConfigError(
      f"env_kwargs.{OPTION}: expected a mapping with the entries {FIELDS}, got {options!r}"
    )
  unknown = sorted(set(options) - set(FIELDS))
  if unknown:
    _fail(unknown[0], f"no such entry: the entries are {FIELDS}", options[unknown[0]])
  parsed = {**DEFAULTS, **options}
  missing = [field for field in FIELDS if field not in parsed]
  if missing:
    _fail(missing[0], "an entry (required)", None)
  if not isinstance(parsed["path"], str) or not parsed["path"]:
    _fail(
      "path", "the .npz of teacher states (python -m experiments.snapshot_states)", parsed["path"]
    )
  validate_schedule(parsed["start_probability"], parsed["anneal_steps"], parsed["schedule"])
  return parsed


def configure(
  config, path: str, anneal_env_steps: int, start_probability: float = 0.5, schedule: str = "linear"
) -> None:
  """Turns snapshot resets on in an experiment config (an `ml_collections.ConfigDict` with
  `env_kwargs` and `num_envs`): teacher states from `path`, p0 = `start_probability`, annealed by
  `schedule` over `config.snapshot_anneal = anneal_env_steps` environment steps summed over the
  environments. The wrapper counts each environment's own steps, so its `anneal_steps` is a
  reference to `snapshot_anneal // num_envs`, which follows either field set on the command line.
  """
  config.snapshot_anneal = anneal_env_steps
  config.env_kwargs[OPTION] = {
    "path": path,
    "start_probability": start_probability,
    "schedule": schedule,
  }
  config.env_kwargs[OPTION].anneal_steps = config.get_ref("snapshot_anneal") // config.get_ref(
    "num_envs"
  )


def wrap(name: str, env, env_params, options: Any) -> tuple[SnapshotResetWrapper, Any]:
  """`(SnapshotResetWrapper, env_params)` of `env` with the options of
  `env_kwargs.snapshot_reset`: `path` (.npz of teacher states), `start_probability` p0,
  `anneal_steps` T (per-environment steps) and `schedule` (default "linear")."""
  parsed = parse_options(options)
  states = load_states(parsed["path"], env, env_params, name)
  wrapped = SnapshotResetWrapper(
    env,
    states,
    parsed["start_probability"],
    parsed["anneal_steps"],
    parsed["schedule"],
    env_params,
  )
  return wrapped, env_params
