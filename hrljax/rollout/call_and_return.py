"""Rollouts of options executed call-and-return: the option running in each environment is state.

Sutton, Precup, Singh, "Between MDPs and semi-MDPs", Artificial Intelligence 1999, and Bacon,
Harb, Precup, "The Option-Critic Architecture", AAAI 2017, arXiv:1609.05140 (Algorithm 1): an
option runs until it terminates, and only then does the policy over options pick the next one.
So the option running in each of the `N` environments is part of the rollout state
(`OptionEnvCarry.option`), survives from one rollout to the next, and is `NO_OPTION` where an
episode has just started and an option must be drawn.

The acting policy is `policy_fn(params, obs, option_tm1, key) -> (action, OptionExtras)` over a
batch: it reads the running options `[N]` and returns the actions and the options now running.
Environments are stepped by `hrljax.rollout.plain.step`, so transitions keep terminated and
truncated apart and store the true successor in `next_obs`.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from hrljax.rollout import plain
from hrljax.types import Array, EnvCarry, PyTree, Transition

NO_OPTION = -1  # the option slot of an environment whose episode has just started


class OptionExtras(NamedTuple):
  """What acting records per step (`[N]` each, `[T, N]` in a rollout)."""

  option: Array  # int32, the option that chose the action
  switched: Array  # bool, a new option was drawn at this state (episode start or termination)
  terminated_option: Array  # bool, the running option terminated here (not an episode start)


OptionPolicyFn = Callable[[PyTree, PyTree, Array, Array], tuple[Array, OptionExtras]]


class OptionEnvCarry(struct.PyTreeNode):
  """Per-environment rollout state: the environments and the option running in each."""

  env: EnvCarry
  option: Array  # [N] int32, NO_OPTION at an episode start


def reset(env, env_params, key: Array, num_envs: int) -> OptionEnvCarry:
  """Resets `num_envs` environments, none with a running option."""
  return OptionEnvCarry(
    env=plain.reset(env, env_params, key, num_envs),
    option=jnp.full((num_envs,), NO_OPTION, jnp.int32),
  )


def _act_and_step(env, env_params, policy_fn, params, carry: OptionEnvCarry, key: Array):
  """One step of every environment; the running option is dropped where the episode ended."""
  key, policy_key, env_key = jax.random.split(key, 3)
  action, extras = policy_fn(params, carry.env.obs, carry.option, policy_key)
  env_carry, transition = plain.step(env, env_params, carry.env, action, env_key)
  option = jnp.where(transition.done, NO_OPTION, extras.option)
  return OptionEnvCarry(env=env_carry, option=option), key, transition, extras


def rollout(
  env,
  env_params,
  policy_fn: OptionPolicyFn,
  params: PyTree,
  carry: OptionEnvCarry,
  key: Array,
  num_steps: int,
  unroll: int = 1,
) -> tuple[OptionEnvCarry, Transition]:
  """`num_steps` steps of every environment; `[T, N]` transitions with `OptionExtras`."""

  def one_step(carry_and_key, _):
    carry, key, transition, extras = _act_and_step(
      env, env_params, policy_fn, params, *carry_and_key
    )
    return (carry, key), transition._replace(policy_extras=extras)

  (carry, _), transitions = jax.lax.scan(
    one_step, (carry, key), None, length=num_steps, unroll=unroll
  )
  return carry, transitions


def option_statistics(traj: Transition) -> dict[str, Array]:
  """How often running options terminate (per step, episode starts excluded)."""
  extras: OptionExtras = traj.policy_extras
  return {"option_termination_rate": extras.terminated_option.astype(jnp.float32).mean()}


def evaluate(
  env,
  env_params,
  policy_fn: OptionPolicyFn,
  params: PyTree,
  key: Array,
  num_options: int,
  num_episodes: int,
  max_steps: int,
) -> dict[str, Array]:
  """One episode per environment; steps to the end and per-option mean durations and usage.

  An option's duration is the number of steps from the state where it was drawn to the state
  where it terminated (or the episode ended); it is averaged over every execution of that option
  in the first episode of each environment. Options never executed get NaN.
  """
  reset_key, run_key = jax.random.split(key)
  carry = reset(env, env_params, reset_key, num_episodes)

  def one_step(state, _):
    carry, active, key = state
    carry, key, transition, extras = _act_and_step(env, env_params, policy_fn, params, carry, key)
    chosen = jax.nn.one_hot(extras.option, num_options) * active[:, None]
    record = (chosen, chosen * extras.switched[:, None], transition.reward * active)
    active = active & jnp.logical_not(transition.done)
    return (carry, active, key), record

  active = jnp.ones((num_episodes,), bool)
  (_, still_running, _), (steps, starts, rewards) = jax.lax.scan(
    one_step, (carry, active, run_key), None, length=max_steps
  )
  lengths = steps.sum(axis=(0, 2))  # [episodes]: steps until the first episode ended
  per_option_steps, per_option_starts = steps.sum(axis=(0, 1)), starts.sum(axis=(0, 1))
  duration = jnp.where(
    per_option_starts > 0, per_option_steps / jnp.maximum(per_option_starts, 1.0), jnp.nan
  )
  metrics = {
    "eval_length": lengths.mean(),
    "eval_return": rewards.sum(axis=0).mean(),
    "eval_success": (rewards.sum(axis=0) > 0).astype(jnp.float32).mean(),
    "eval_unfinished": still_running.astype(jnp.float32).mean(),
    "eval_option_duration": per_option_steps.sum() / jnp.maximum(per_option_starts.sum(), 1.0),
  }
  for w in range(num_options):
    metrics[f"eval_option_{w}_duration"] = duration[w]
    metrics[f"eval_option_{w}_usage"] = per_option_steps[w] / jnp.maximum(
      per_option_steps.sum(), 1.0
    )
  return metrics
