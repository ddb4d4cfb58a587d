"""Plain rollouts: N environments stepped T steps in one `lax.scan`, and greedy evaluation.

A rollout steps `N` environments for `T` steps inside one `lax.scan`. The acting policy is a pure
function `policy_fn(params, obs, key) -> (action, extras)` over a batch of observations; whatever
it returns in `extras` (log-probs, values, options, ...) is stored per step. Terminated and
truncated are kept apart, and the true successor observation (before auto-reset) is stored in
`Transition.next_obs` so that truncated steps can bootstrap.
"""

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from gymnax.environments import environment as gymnax_environment

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


def step(
  env, env_params, carry: EnvCarry, action: Array, key: Array
) -> tuple[EnvCarry, Transition]:
  """Steps every environment once with the given batch of actions (auto-resetting ended ones)."""
  return step_with_keys(
    env, env_params, carry, action, jax.random.split(key, carry.running_return.shape[0])
  )


def step_with_keys(
  env, env_params, carry: EnvCarry, action: Array, keys: Array
) -> tuple[EnvCarry, Transition]:
  """`step` with one key per environment given (`[N]`), e.g. split for a whole rollout at once."""
  carry, transition, _ = step_with_info(env, env_params, carry, action, keys)
  return carry, transition


def step_with_info(
  env, env_params, carry: EnvCarry, action: Array, keys: Array
) -> tuple[EnvCarry, Transition, dict]:
  """`step_with_keys` that also returns the environment's `info` dict (leaves `[N, ...]`).

  For environments that use gymnax's own `step`, the info is `step_env`'s (the values at the
  step, before any reset).
  """
  return step_with_env_keys(env, env_params, carry, action, env_step_keys(env, keys))


def env_step_keys(env, keys: Array) -> Any:
  """The keys one step of `env` consumes, derived from one key per environment (`keys` may have
  any leading shape, e.g. `[T, N]` for a whole rollout): for gymnax's own auto-resetting step,
  its `(step keys, reset keys)` split as `Environment.step` splits them; otherwise `keys`.

  A rollout derives them for all its steps in one batched call before its loop: on CPU each
  threefry call is a small loop of its own, which would otherwise run at every step.
  """
  if not _uses_base_step(env):
    return keys
  pairs = jax.vmap(jax.random.split)(keys.reshape(-1)).reshape(keys.shape + (2,))
  return pairs[..., 0], pairs[..., 1]


def rollout_env_keys(env, key: Array, shape: tuple[int, ...]) -> Any:
  """`env_step_keys` for a whole rollout: `key` split into one key per environment and step
  (`shape`, e.g. `[T, N]`), then derived into what each step consumes, before the rollout's loop.
  """
  keys = jax.random.split(key, math.prod(shape)).reshape(shape)
  return env_step_keys(env, keys)


def step_with_env_keys(
  env, env_params, carry: EnvCarry, action: Array, env_keys: Any
) -> tuple[EnvCarry, Transition, dict]:
  """`step_with_info` given the step's slice of `env_step_keys(env, keys)`: a loop over steps
  derives its environments' keys once, before the loop, and passes each step its slice."""
  if _uses_base_step(env):
    obs, env_state, reward, terminated, truncated, final_obs, info = _batched_auto_reset_step(
      env, env_params, carry.env_state, action, *env_keys
    )
  else:
    obs, env_state, reward, terminated, truncated, info = jax.vmap(
      env.step, in_axes=(0, 0, 0, None)
    )(env_keys, carry.env_state, action, env_params)
    final_obs = info["final_observation"]
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
    next_obs=final_obs,
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
  return carry, transition, info


def _uses_base_step(env) -> bool:
  """Whether `env.step` is gymnax's own auto-resetting step (not overridden by the environment or
  a wrapper), so that `_batched_auto_reset_step` computes exactly what it would."""
  return getattr(type(env), "step", None) is gymnax_environment.Environment.step


def _batched_auto_reset_step(env, env_params, env_state, action, step_keys, reset_keys):
  """gymnax's `Environment.step` for a batch, resetting only when some environment is done:
  `(obs, state, reward, terminated, truncated, obs_st, info)`, where `obs_st` and `info` are
  `step_env`'s (the observation and info at the step, before any reset).

  gymnax computes a reset for every environment at every step and then selects it where the
  episode ended. Here the batch first steps (`step_env`); the resets run only if at least one
  environment ended (`lax.cond`), and are then selected where they apply, as gymnax does. The
  step and reset keys are `env_step_keys`'s split of the step's keys.

  With more than one device the batch may be sharded, and `any(done)` over a sharded axis is an
  all-reduce at every step (across processes, a network round trip per step: measured 20x slower
  on 2 local processes, `experiments/benchmarks/SCALING.md`). On a GPU or TPU a conditional reads
  its predicate back to the host at every step and splits the step's fused kernels. In both cases
  the resets are computed for every environment and selected, as gymnax does; the values are the
  same either way.
  """
  obs_st, state_st, reward, terminated, info = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
    step_keys, env_state, action, env_params
  )
  truncated = jax.vmap(env.is_truncated, in_axes=(0, None))(state_st, env_params)
  done = terminated | truncated

  def with_resets(_):
    obs_re, state_re = jax.vmap(env.reset_env, in_axes=(0, None))(reset_keys, env_params)
    pick = lambda reset_leaf, step_leaf: jnp.where(
      done.reshape(done.shape + (1,) * (step_leaf.ndim - 1)), reset_leaf, step_leaf
    )
    return jax.tree.map(pick, obs_re, obs_st), jax.tree.map(pick, state_re, state_st)

  if jax.device_count() > 1 or jax.default_backend() != "cpu":
    obs, state = with_resets(None)
  else:
    obs, state = jax.lax.cond(jnp.any(done), with_resets, lambda _: (obs_st, state_st), None)
  return obs, state, reward, terminated, truncated, obs_st, info


def rollout(
  env,
  env_params,
  policy_fn: PolicyFn,
  params: PyTree,
  carry: EnvCarry,
  key: Array,
  num_steps: int,
  unroll: int = 1,
  noise_fn: Optional[Callable[[Array, int], PyTree]] = None,
) -> tuple[EnvCarry, Transition]:
  """Runs `num_steps` steps of `policy_fn` in every environment; returns `[T, N]` transitions.

  Every key the rollout needs is split before the loop in batched calls (`rollout_env_keys`), so
  the sequential loop body derives no keys. With `noise_fn(key, num_steps) -> noise` (leading
  axis T), the policy's randomness for all steps is drawn up front too, and
  `policy_fn(params, obs, noise[t])` gets its step's slice instead of a key (e.g. Gumbel noise
  for a categorical policy, see `hrljax.networks.sample_with_noise`): on CPU, JAX's threefry runs
  as a small loop per call, so one batched draw is much cheaper than one draw per step. `unroll`
  is passed to `lax.scan`.
  """
  num_envs = carry.running_return.shape[0]
  policy_key, env_key = jax.random.split(key)
  policy_inputs = (
    jax.random.split(policy_key, num_steps) if noise_fn is None else noise_fn(policy_key, num_steps)
  )

  def one_step(carry, inputs):
    policy_input, env_keys = inputs
    action, extras = policy_fn(params, carry.obs, policy_input)
    carry, transition, _ = step_with_env_keys(env, env_params, carry, action, env_keys)
    return carry, transition._replace(policy_extras=extras)

  inputs = (policy_inputs, rollout_env_keys(env, env_key, (num_steps, num_envs)))
  return jax.lax.scan(one_step, carry, inputs, unroll=unroll)


def episode_statistics(transitions: Transition) -> dict[str, Array]:
  """Mean return and length of the episodes that ended inside `transitions` (NaN if none)."""
  sums = rollout_statistics(transitions)
  count = sums["episodes"]
  mean = lambda total: total / jnp.maximum(count, 1.0) * jnp.where(count > 0, 1.0, jnp.nan)
  return {
    "episode_return": mean(sums["episode_return_sum"]),
    "episode_length": mean(sums["episode_length_sum"]),
    "episodes": count,
  }


def evaluate(
  env,
  env_params,
  policy_fn: PolicyFn,
  params: PyTree,
  key: Array,
  num_episodes: int,
  max_steps: int,
) -> dict[str, Array]:
  """Runs `num_episodes` episodes in parallel for `max_steps` steps; statistics of the first episode
  each environment finishes (environments still running at the end count with their partial
  return and length)."""
  reset_key, run_key = jax.random.split(key)
  carry = reset(env, env_params, reset_key, num_episodes)
  _, transitions = rollout(env, env_params, policy_fn, params, carry, run_key, max_steps)
  return _first_episode_statistics(transitions, max_steps)


def _first_episode_statistics(transitions: Transition, max_steps: int) -> dict[str, Array]:
  """`evaluate`'s statistics of `[max_steps, N]` transitions: mean and std of the return and
  mean length of each environment's first episode (partial if it never ends)."""
  done = transitions.done
  first = jnp.argmax(done, axis=0)  # first done step per env (0 if never: handled below)
  ever = done.any(axis=0)
  env_index = jnp.arange(done.shape[1])
  returns = jnp.where(
    ever, transitions.episode_return[first, env_index], transitions.reward.sum(axis=0)
  )
  lengths = jnp.where(ever, transitions.episode_length[first, env_index], max_steps)
  return {
    "eval_return": returns.mean(),
    "eval_return_std": returns.std(),
    "eval_length": lengths.astype(jnp.float32).mean(),
  }


def tree_index(tree: Any, index) -> Any:
  """`tree[index]` on every leaf."""
  return jax.tree.map(lambda x: x[index], tree)


def rollout_statistics(traj: Transition) -> dict[str, Array]:
  """Sums over the episodes that ended in this rollout (the loop turns them into means)."""
  return jax.tree.map(jnp.sum, episode_end_terms(traj))


def episode_end_terms(traj: Transition) -> dict[str, Array]:
  """Per step `[T, N]`, the terms `rollout_statistics` sums: each ended episode's return and
  length at its last step, and 1 there (0 at every other step)."""
  done = traj.done.astype(jnp.float32)
  return {
    "episode_return_sum": traj.episode_return * done,
    "episode_length_sum": traj.episode_length * done,
    "episodes": done,
  }
