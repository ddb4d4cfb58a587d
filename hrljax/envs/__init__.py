"""Environments by name: gymnax's registry plus the environments hrljax owns.

Every environment follows gymnax's functional API (`reset(key, params)`,
`step(key, state, action, params)` returning terminated and truncated apart, gymnax >= 1.0).
"""

import importlib
from typing import Any, Callable

import gymnax

_OWN_ENVIRONMENTS: dict[str, Callable[..., Any]] = {}


def register(name: str, factory: Callable[..., Any]) -> None:
  """Makes `make(name, **kwargs)` call `factory(**kwargs) -> (env, env_params)`."""
  _OWN_ENVIRONMENTS[name] = factory


def _own_environment(name: str, module: str, factory: Callable[[dict], Any]) -> None:
  """Registers `name`, importing `hrljax.envs.<module>` only when the environment is made."""

  def make_own(**kwargs):
    env = factory(importlib.import_module(f"hrljax.envs.{module}"), kwargs)
    return env, _override_params(name, env.default_params, kwargs)

  register(name, make_own)


def _token_game(module, kwargs):
  # make_params keeps the time limit in step with max_turns; the env then uses them as defaults.
  return module.TokenGame(module.make_params(**kwargs))


_own_environment("TokenGame-v0", "token_game", _token_game)
_own_environment("PointHazard-v0", "point_hazard", lambda m, kw: m.PointHazard())
_own_environment("Chain1D-v0", "chain", lambda m, kw: m.Chain1D())
_own_environment(
  "SafeCartPole-v0", "safe_cartpole", lambda m, kw: m.SafeCartPole(action_type="continuous")
)
_own_environment(
  "SafeCartPole-discrete-v0", "safe_cartpole", lambda m, kw: m.SafeCartPole(action_type="discrete")
)


def _four_rooms_transfer(**kwargs):
  # Its factory takes arguments that are not env params (observation, transfer_*), so it is
  # registered as it is rather than through _own_environment.
  from hrljax.envs import four_rooms

  return four_rooms.make_four_rooms(**kwargs)


register("FourRoomsTransfer-v0", _four_rooms_transfer)


def _two_agent_rooms(**kwargs):
  # Its factory checks the values of its arguments (room indices, the time limit), so it is
  # registered as it is; observations and actions carry a leading agent axis.
  from hrljax.envs import two_agent_rooms

  return two_agent_rooms.make_two_agent_rooms(**kwargs)


register("TwoAgentFourRooms-v0", _two_agent_rooms)


def _minigrid(name: str) -> Callable[..., Any]:
  # xminigrid's MiniGrid tasks (the optional `[gridworld]` extra, imported when one is made).
  def make_minigrid(**kwargs):
    from hrljax.envs import minigrid

    return minigrid.make_minigrid(name, **kwargs)

  return make_minigrid


for _name in (
  "MiniGrid-DoorKey-5x5",
  "MiniGrid-DoorKey-6x6",
  "MiniGrid-DoorKey-8x8",
  "MiniGrid-LockedRoom",
):
  register(_name, _minigrid(_name))
del _name


def _mpe(name: str) -> Callable[..., Any]:
  # JaxMARL's multi-agent particle environments (the optional `[marl]` extra, imported when one
  # is made); observations and actions carry a leading agent axis (see hrljax.envs.mpe).
  def make_mpe(**kwargs):
    from hrljax.envs import mpe

    return mpe.make_mpe(name, **kwargs)

  return make_mpe


register("MPE_simple_spread_v3", _mpe("MPE_simple_spread_v3"))


def available() -> list[str]:
  """Every name `make` accepts."""
  return sorted(set(_OWN_ENVIRONMENTS) | set(gymnax.registered_envs))


def make(name: str, **kwargs):
  """Returns `(env, env_params)` for a gymnax or hrljax environment name.

  `kwargs` override fields of the environment's default params (e.g. `max_steps_in_episode`),
  except `snapshot_reset`, whose options wrap the environment in
  `hrljax.envs.snapshot_reset.SnapshotResetWrapper` (episodes that start from teacher states).
  Raises ValueError naming the environment or field when either is unknown.
  """
  if "snapshot_reset" in kwargs:
    from hrljax.envs import snapshot_reset

    options = kwargs.pop("snapshot_reset")
    return snapshot_reset.wrap(name, *make(name, **kwargs), options)
  if name in _OWN_ENVIRONMENTS:
    return _OWN_ENVIRONMENTS[name](**kwargs)
  if name not in gymnax.registered_envs:
    raise ValueError(
      f"env_name: unknown environment {name!r}; expected one of {', '.join(available())}"
    )
  env, params = gymnax.make(name)
  return env, _override_params(name, params, kwargs)


def _override_params(name: str, params, overrides: dict):
  fields = set(getattr(params, "__dataclass_fields__", {}))
  unknown = sorted(set(overrides) - fields)
  if unknown:
    raise ValueError(
      f"env_kwargs: {name} has no parameter {unknown[0]!r}; expected one of {sorted(fields)}"
    )
  return params.replace(**overrides) if overrides else params


class EnvSpec:
  """What a network needs to know about an environment: observation shape and action space."""

  def __init__(self, observation_shape: tuple, discrete: bool, action_dim: int):
    self.observation_shape = observation_shape
    self.discrete = discrete
    self.action_dim = action_dim

  def __repr__(self) -> str:
    return (
      f"EnvSpec(observation_shape={self.observation_shape}, discrete={self.discrete}, "
      f"action_dim={self.action_dim})"
    )


def spec(env, env_params) -> EnvSpec:
  """The `EnvSpec` of a gymnax-API environment (Discrete or Box action spaces)."""
  space = env.action_space(env_params)
  observation_shape = tuple(env.observation_space(env_params).shape)
  if hasattr(space, "n"):
    return EnvSpec(observation_shape, discrete=True, action_dim=int(space.n))
  return EnvSpec(observation_shape, discrete=False, action_dim=int(space.shape[0]))
