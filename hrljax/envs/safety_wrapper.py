"""A wrapper that exposes an environment's per-step cost through the observation, optionally
behind an action shield.

The spine's rollouts store rewards but not `info`; wrapped by `SafetyWrapper`, an environment's
observation is a `SafetyObservation` carrying the wrapped observation together with the cost of
the step that led to it, the episode's cost and violating steps so far and whether the shield
changed the action. A rollout's `next_obs` (the true successor, before auto-reset) therefore
holds each step's cost, and at the last step of an episode its totals. Networks see only
`SafetyObservation.obs`.

A shield `shield_fn(env_state, action, params) -> (executed_action, intervened)` runs before the
wrapped step: the environment executes the shielded action while the learner keeps the proposed
one (the shield is part of the environment: option (a) of `docs/safety.md`, "How a loss treats
shielded actions").
"""

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment as gymnax_environment

from hrljax.types import Array, PyTree

ShieldFn = Callable[[Any, Array, Any], tuple[Array, Array]]


class SafetyObservation(NamedTuple):
  """What `SafetyWrapper` returns as the observation (all per environment)."""

  obs: PyTree  # the wrapped environment's observation: the only part networks see
  cost: Array  # float32: cost of the step that led here (0 after a reset)
  episode_cost: Array  # float32: cost accumulated by the episode up to here
  episode_violations: Array  # int32: steps with cost > 0 in the episode up to here
  intervened: Array  # bool: the shield changed the action of the step that led here


@struct.dataclass
class SafetyState:
  env_state: Any
  episode_cost: Array
  episode_violations: Array
  time: Array  # mirrors the wrapped state's clock (gymnax's EnvState field)


class SafetyWrapper(gymnax_environment.Environment):
  """Exposes `info["cost"]` through the observation and optionally shields the actions.

  `step` is gymnax's own (not overridden), so the spine's batched auto-reset applies unchanged.
  """

  def __init__(self, env, shield_fn: Optional[ShieldFn] = None):
    self.env = env
    self.shield_fn = shield_fn

  @property
  def default_params(self):
    return self.env.default_params

  def step_env(self, key, state: SafetyState, action, params):
    if self.shield_fn is None:
      executed, intervened = action, jnp.zeros((), bool)
    else:
      executed, intervened = self.shield_fn(state.env_state, action, params)
    obs, env_state, reward, terminated, info = self.env.step_env(
      key, state.env_state, executed, params
    )
    cost = jnp.asarray(info["cost"], jnp.float32)
    episode_cost = state.episode_cost + cost
    episode_violations = state.episode_violations + (cost > 0).astype(jnp.int32)
    next_state = SafetyState(
      env_state=env_state,
      episode_cost=episode_cost,
      episode_violations=episode_violations,
      time=env_state.time,
    )
    observation = SafetyObservation(
      obs=obs,
      cost=cost,
      episode_cost=episode_cost,
      episode_violations=episode_violations,
      intervened=intervened,
    )
    return observation, next_state, reward, terminated, info

  def reset_env(self, key, params):
    obs, env_state = self.env.reset_env(key, params)
    zero = jnp.zeros((), jnp.float32)
    zero_count = jnp.zeros((), jnp.int32)
    state = SafetyState(
      env_state=env_state, episode_cost=zero, episode_violations=zero_count, time=env_state.time
    )
    return SafetyObservation(
      obs=obs,
      cost=zero,
      episode_cost=zero,
      episode_violations=zero_count,
      intervened=jnp.zeros((), bool),
    ), state

  def is_truncated(self, state: SafetyState, params) -> Array:
    return self.env.is_truncated(state.env_state, params)

  def action_space(self, params):
    return self.env.action_space(params)

  def observation_space(self, params):
    return self.env.observation_space(params)


def reports_cost(env, env_params) -> bool:
  """Whether `env`'s `step_env` returns `info["cost"]` (checked on shapes only, nothing runs)."""
  key = jax.random.key(0)
  _, state = jax.eval_shape(env.reset_env, key, env_params)
  action = env.action_space(env_params).sample(key)
  info = jax.eval_shape(env.step_env, key, state, action, env_params)[-1]
  return "cost" in info
