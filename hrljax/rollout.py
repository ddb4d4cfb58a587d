"""Jitted, vmapped rollouts of gymnax-API environments.

A rollout steps `N` environments for `T` steps inside one `lax.scan`. The acting policy is a pure
function `policy_fn(params, obs, key) -> (action, extras)` over a batch of observations; whatever
it returns in `extras` (log-probs, values, options, ...) is stored per step. Terminated and
truncated are kept apart, and the true successor observation (before auto-reset) is stored in
`Transition.next_obs` so that truncated steps can bootstrap.
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp

from hrljax.types import Array, EnvCarry, PyTree, Transition

PolicyFn = Callable[[PyTree, PyTree, Array], tuple[Array, PyTree]]


def reset(env, env_params, key: Array, num_envs: int) -> EnvCarry:
  """Resets `num_envs` environments with independent keys."""
  keys = jax.random.split(key, num_envs)
  obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
  return EnvCarry(
      env_state=env_state,
      obs=obs,
      running_return=jnp.zeros((num_envs,), jnp.float32),
      running_length=jnp.zeros((num_envs,), jnp.int32),
  )


def step(env, env_params, carry: EnvCarry, action: Array, key: Array
         ) -> tuple[EnvCarry, Transition]:
  """Steps every environment once with the given batch of actions (auto-resetting ended ones)."""
  num_envs = carry.running_return.shape[0]
  keys = jax.random.split(key, num_envs)
  obs, env_state, reward, terminated, truncated, info = jax.vmap(
      env.step, in_axes=(0, 0, 0, None))(keys, carry.env_state, action, env_params)
  reward = reward.astype(jnp.float32)
  done = terminated | truncated
  episode_return = carry.running_return + reward
  episode_length = carry.running_length + 1
  transition = Transition(
      obs=carry.obs,
      action=action,
      reward=reward,
      terminated=terminated,
      truncated=truncated,
      next_obs=info["final_observation"],
      policy_extras=None,
      episode_return=episode_return,
      episode_length=episode_length,
  )
  carry = EnvCarry(
      env_state=env_state,
      obs=obs,
      running_return=jnp.where(done, 0.0, episode_return),
      running_length=jnp.where(done, 0, episode_length),
  )
  return carry, transition


def rollout(env, env_params, policy_fn: PolicyFn, params: PyTree, carry: EnvCarry, key: Array,
            num_steps: int, unroll: int = 1) -> tuple[EnvCarry, Transition]:
  """Runs `num_steps` steps of `policy_fn` in every environment; returns `[T, N]` transitions.

  `unroll` is passed to `lax.scan`: on CPU, unrolling a few small steps per loop iteration saves
  loop overhead that dominates small-batch rollouts.
  """

  def one_step(carry_and_key, _):
    carry, key = carry_and_key
    key, policy_key, env_key = jax.random.split(key, 3)
    action, extras = policy_fn(params, carry.obs, policy_key)
    carry, transition = step(env, env_params, carry, action, env_key)
    return (carry, key), transition._replace(policy_extras=extras)

  (carry, _), transitions = jax.lax.scan(
      one_step, (carry, key), None, length=num_steps, unroll=unroll)
  return carry, transitions


def episode_statistics(transitions: Transition) -> dict[str, Array]:
  """Mean return and length of the episodes that ended inside `transitions` (NaN if none)."""
  done = transitions.done.astype(jnp.float32)
  count = done.sum()
  safe = jnp.maximum(count, 1.0)
  nan_if_none = jnp.where(count > 0, 1.0, jnp.nan)
  return {
      "episode_return": (transitions.episode_return * done).sum() / safe * nan_if_none,
      "episode_length": (transitions.episode_length * done).sum() / safe * nan_if_none,
      "episodes": count,
  }


def evaluate(env, env_params, policy_fn: PolicyFn, params: PyTree, key: Array,
             num_episodes: int, max_steps: int) -> dict[str, Array]:
  """Runs `num_episodes` episodes in parallel for `max_steps` steps; statistics of the first episode
  each environment finishes (environments still running at the end count with their partial
  return and length)."""
  reset_key, run_key = jax.random.split(key)
  carry = reset(env, env_params, reset_key, num_episodes)
  _, transitions = rollout(env, env_params, policy_fn, params, carry, run_key, max_steps)
  done = transitions.done
  first = jnp.argmax(done, axis=0)  # first done step per env (0 if never: handled below)
  ever = done.any(axis=0)
  env_index = jnp.arange(num_episodes)
  returns = jnp.where(ever, transitions.episode_return[first, env_index],
                      transitions.reward.sum(axis=0))
  lengths = jnp.where(ever, transitions.episode_length[first, env_index], max_steps)
  return {
      "eval_return": returns.mean(),
      "eval_return_std": returns.std(),
      "eval_length": lengths.astype(jnp.float32).mean(),
  }


def tree_index(tree: Any, index) -> Any:
  """`tree[index]` on every leaf."""
  return jax.tree.map(lambda x: x[index], tree)
