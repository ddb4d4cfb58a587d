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

Below the wrapper: the safety metrics of its rollouts (`safety_statistics`, `mean_episode_cost`,
`first_episode_cost`) and a greedy evaluation that also reports cost (`evaluate_with_cost`).
"""

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment as gymnax_environment

from hrljax import envs
from hrljax.rollout import grouped, plain
from hrljax.types import Array, PyTree, Transition

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


def make(name: str, env_kwargs, shield_fn: Optional[ShieldFn] = None):
  """`(SafetyWrapper, env_params)`: `envs.make(name, **env_kwargs)` wrapped, behind `shield_fn`.

  Sequence-valued `env_kwargs` (e.g. PointHazard's `start=(0.0, 0.0)`, which a config can only
  hold as a tuple) become float32 arrays, the form the environment's params hold.
  """
  kwargs = {
    field: jnp.asarray(value, jnp.float32) if isinstance(value, (tuple, list)) else value
    for field, value in env_kwargs.items()
  }
  env, env_params = envs.make(name, **kwargs)
  return SafetyWrapper(env, shield_fn), env_params


def reports_cost(env, env_params) -> bool:
  """Whether `env`'s `step_env` returns `info["cost"]` (checked on shapes only, nothing runs)."""
  key = jax.random.key(0)
  _, state = jax.eval_shape(env.reset_env, key, env_params)
  action = env.action_space(env_params).sample(key)
  info = jax.eval_shape(env.step_env, key, state, action, env_params)[-1]
  return "cost" in info


# ----------------------------------------------------------------------------------------------
# Rollouts of the wrapper: `[T, N]` transitions whose observations are `SafetyObservation`s.
# ----------------------------------------------------------------------------------------------


def safety_statistics(traj: Transition) -> dict[str, Array]:
  """Safety metrics of one rollout: sums over ended episodes (the loop makes them means) and
  per-step totals over the whole rollout (training-time safety, Safety Gym's cost rate)."""
  done = traj.done.astype(jnp.float32)
  succ = traj.next_obs
  steps = done.size
  return {
    "episode_cost_sum": (succ.episode_cost * done).sum(),
    "episode_violations_sum": (succ.episode_violations.astype(jnp.float32) * done).sum(),
    "violating_episode_sum": ((succ.episode_violations > 0).astype(jnp.float32) * done).sum(),
    "rollout_cost": succ.cost.sum(),
    "violating_steps": (succ.cost > 0).astype(jnp.float32).sum(),
    "cost_rate": succ.cost.sum() / steps,
    "intervention_rate": succ.intervened.astype(jnp.float32).sum() / steps,
  }


def mean_episode_cost(traj: Transition) -> tuple[Array, Array]:
  """`(J_c, valid)`: the mean undiscounted cost of the episodes that ended in `traj`, and
  whether any did (J_c is 0 then)."""
  done = traj.done.astype(jnp.float32)
  count = done.sum()
  return (traj.next_obs.episode_cost * done).sum() / jnp.maximum(count, 1.0), count > 0


def first_episode_cost(traj: Transition) -> dict[str, Array]:
  """Cost and violating steps of each environment's first episode, averaged over environments
  (an episode still running at the end counts with its cost so far): `eval_cost`,
  `eval_violations`, `eval_violation_rate` (share of episodes with a violation)."""
  valid = grouped.first_episode_mask(traj.done)
  cost = jnp.where(valid, traj.next_obs.cost, 0.0).sum(axis=0)
  violations = (valid & (traj.next_obs.cost > 0)).sum(axis=0).astype(jnp.float32)
  return {
    "eval_cost": cost.mean(),
    "eval_violations": violations.mean(),
    "eval_violation_rate": (violations > 0).astype(jnp.float32).mean(),
  }


def evaluate_with_cost(
  env: SafetyWrapper,
  env_params,
  policy_fn: plain.PolicyFn,
  params: PyTree,
  key: Array,
  num_episodes: int,
  max_steps: int,
) -> dict[str, Array]:
  """`plain.evaluate`'s metrics of `num_episodes` episodes plus their `first_episode_cost`.

  `plain.evaluate` keeps returns and lengths only, so the same episodes (same key, hence the
  same resets and actions) run again for their costs.
  """
  metrics = plain.evaluate(env, env_params, policy_fn, params, key, num_episodes, max_steps)
  reset_key, run_key = jax.random.split(key)
  carry = plain.reset(env, env_params, reset_key, num_episodes)
  _, traj = plain.rollout(env, env_params, policy_fn, params, carry, run_key, max_steps)
  return {**metrics, **first_episode_cost(traj)}
