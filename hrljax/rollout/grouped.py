"""Grouped rollouts: G tasks x K samples, one whole episode per sample (GRPO, GiGPO, RLOO)."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from hrljax.rollout.plain import PolicyFn, rollout
from hrljax.types import Array, EnvCarry, PyTree, Transition


class GroupedEpisodes(NamedTuple):
  """One fixed-length episode per environment, environments grouped by task.

  Environment `n` belongs to group `group_ids[n]`; every member of a group started from the same
  reset key, hence the same task and initial state. Steps after an environment's first `done`
  (the auto-reset continuation) are outside the episode: `valid` is False there.
  """

  transitions: Transition  # [T, N] time-major, as returned by `rollout`
  valid: Array  # [T, N] bool: the step belongs to the environment's first episode
  group_ids: Array  # [N] int32 in [0, num_groups)


class EpisodeSummary(NamedTuple):
  """Per-environment summary of the first episode of a `GroupedEpisodes` (all `[N]`)."""

  episode_return: Array  # float32: sum of the rewards of the valid steps
  length: Array  # int32: number of valid steps
  terminated: Array  # bool: the episode reached a terminal state within the T steps
  ended: Array  # bool: terminated or truncated by the environment within the T steps


def _check_positive_int(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name}: expected a Python int >= 1, got {value!r}")


def grouped_ids(num_groups: int, group_size: int) -> Array:
  """Group ids `[num_groups * group_size]` of the contiguous layout `n = g * group_size + k`."""
  _check_positive_int("num_groups", num_groups)
  _check_positive_int("group_size", group_size)
  return jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), group_size)


def reset_groups(env, env_params, key: Array, group_ids: Array) -> EnvCarry:
  """Resets one environment per entry of `group_ids`, all members of a group with one key.

  The reset key of environment `n` is `fold_in(key, group_ids[n])`: equal group ids give equal
  initial states, different ones independent tasks. Written elementwise over `group_ids` so that a
  `group_ids` array sharded along the mesh's data axis shards the environments with it.
  """
  if group_ids.ndim != 1 or not jnp.issubdtype(group_ids.dtype, jnp.integer):
    raise ValueError(
      f"group_ids: expected a rank-1 integer array, got shape {group_ids.shape} "
      f"and dtype {group_ids.dtype}"
    )
  keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, group_ids)
  obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
  num_envs = group_ids.shape[0]
  return EnvCarry(
    env_state=env_state,
    obs=obs,
    running_return=jnp.zeros((num_envs,), jnp.float32),
    running_length=jnp.zeros((num_envs,), jnp.int32),
  )


def grouped_reset(
  env, env_params, key: Array, num_groups: int, group_size: int
) -> tuple[EnvCarry, Array]:
  """`num_groups` tasks x `group_size` samples: `(EnvCarry [G * K], group_ids [G * K])`.

  Samples of a group share the reset key (same task, same initial state); the environment noise
  and the policy's samples still differ between them once they step.
  """
  group_ids = grouped_ids(num_groups, group_size)
  return reset_groups(env, env_params, key, group_ids), group_ids


def first_episode_mask(done: Array) -> Array:
  """`[T, N]` bool: the steps up to and including each column's first `done`."""
  done = done.astype(jnp.int32)
  return (jnp.cumsum(done, axis=0) - done) == 0


def grouped_episodes(
  env,
  env_params,
  policy_fn: PolicyFn,
  params: PyTree,
  key: Array,
  group_ids: Array,
  num_steps: int,
  unroll: int = 1,
) -> GroupedEpisodes:
  """Resets every group to a fresh task and runs `num_steps` steps: one episode per environment.

  The episodes are collected with fixed length `T = num_steps` (one `lax.scan`, static shapes);
  an environment whose episode ends early keeps stepping (auto-reset) and those steps are masked
  out by `valid`. An episode still running after `T` steps is cut there (it is neither terminated
  nor truncated in `transitions`; `EpisodeSummary.ended` tells which ones ended). Set the
  environment's time limit to at most `T` to make every episode end inside the window.
  """
  _check_positive_int("num_steps", num_steps)
  reset_key, run_key = jax.random.split(key)
  carry = reset_groups(env, env_params, reset_key, group_ids)
  _, transitions = rollout(
    env, env_params, policy_fn, params, carry, run_key, num_steps, unroll=unroll
  )
  return GroupedEpisodes(
    transitions=transitions, valid=first_episode_mask(transitions.done), group_ids=group_ids
  )


def summarize_episodes(episodes: GroupedEpisodes) -> EpisodeSummary:
  """Return, length and outcome of each environment's first episode (`[N]` each)."""
  valid = episodes.valid
  transitions = episodes.transitions
  return EpisodeSummary(
    episode_return=jnp.where(valid, transitions.reward, 0.0).sum(axis=0),
    length=valid.astype(jnp.int32).sum(axis=0),
    terminated=(transitions.terminated & valid).any(axis=0),
    ended=(transitions.done & valid).any(axis=0),
  )


def episode_sums(episodes: GroupedEpisodes) -> dict[str, Array]:
  """Sums of the first episodes' returns and lengths, and their count (the experiment loop turns
  each `*_sum` into a mean over `episodes`)."""
  summary = summarize_episodes(episodes)
  return {
    "episode_return_sum": summary.episode_return.sum(),
    "episode_length_sum": summary.length.astype(jnp.float32).sum(),
    "episodes": jnp.asarray(summary.length.shape[0], jnp.float32),
  }
