"""Discounted step returns of ragged trajectories, the step return of GiGPO (Eq. 5).

Critic-free: no bootstrap at the end of a trajectory, terminated or truncated alike.
"""

from typing import Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks
from hrljax.losses.group_relative._segments import check_rows, valid_or_all

Array = chex.Array


def _sorted_step_returns(
  rewards: Array, traj_ids: Array, step_index: Array, valid: Array, gamma: float
) -> Array:
  """Discounted returns of rows in any order: sort by ``(traj, step)``, then a segmented scan."""
  n = rewards.shape[0]
  key_valid = jnp.where(valid, 0, 1).astype(jnp.int32)
  _, traj, step, perm = jax.lax.sort(
    (
      key_valid,
      traj_ids.astype(jnp.int32),
      step_index.astype(jnp.int32),
      jnp.arange(n, dtype=jnp.int32),
    ),
    num_keys=3,
  )
  r = jnp.where(valid[perm], rewards[perm], 0)
  next_same = jnp.concatenate(
    [(traj[1:] == traj[:-1]) & valid[perm][1:] & valid[perm][:-1], jnp.zeros((1,), bool)]
  )
  gap = jnp.concatenate([step[1:] - step[:-1], jnp.zeros((1,), jnp.int32)])
  decay = jnp.where(next_same, jnp.power(jnp.asarray(gamma, r.dtype), gap.astype(r.dtype)), 0)

  def compose(later, current):
    # Affine maps G -> b + a * G composed right to left (later steps were folded first).
    a_later, b_later = later
    a_cur, b_cur = current
    return a_cur * a_later, b_cur + a_cur * b_later

  _, returns_sorted = jax.lax.associative_scan(compose, (decay[::-1], r[::-1]))
  returns = jnp.zeros_like(rewards).at[perm].set(returns_sorted[::-1])
  return jnp.where(valid, returns, 0)


def _grid_step_returns(rewards: Array, valid: Array, gamma: float) -> Array:
  """Discounted returns on the time-major grid ``[T, num_traj]``: one reverse scan over time.

  An invalid step adds no reward but still discounts, which is the ``gamma^gap`` of a gap in
  the step indices.
  """
  discount = jnp.asarray(gamma, rewards.dtype)

  def backwards(later, step):
    r_t, valid_t = step
    running = jnp.where(valid_t, r_t, 0) + discount * later
    return running, jnp.where(valid_t, running, 0)

  _, returns = jax.lax.scan(backwards, jnp.zeros_like(rewards[0]), (rewards, valid), reverse=True)
  return returns


def _is_time_major_grid(traj_ids: Array, step_index: Array, num_traj: int) -> Array:
  """Whether row ``t * num_traj + n`` holds trajectory ``n`` at step ``t`` for every row."""
  num_steps = traj_ids.shape[0] // num_traj
  traj = jnp.arange(num_traj, dtype=traj_ids.dtype)[None, :]
  step = jnp.arange(num_steps, dtype=step_index.dtype)[:, None]
  return jnp.all(traj_ids.reshape(num_steps, num_traj) == traj) & jnp.all(
    step_index.reshape(num_steps, num_traj) == step
  )


def discounted_step_returns(
  rewards: Array,
  traj_ids: Array,
  step_index: Array,
  *,
  gamma: float,
  valid: Optional[Array] = None,
  num_traj: Optional[int] = None,
) -> Array:
  """Per-trajectory discounted returns ``R_t = sum_{k >= t} gamma^(k - t) r_k`` (batch-level).

  GiGPO Eq. 5 (arXiv 2505.10978). Rows are one environment step each, in any order; trajectories
  are ragged. Computed as a segmented reverse linear recurrence ``R_t = r_t + d_t R_{t+1}`` with
  ``d_t = gamma^(k_next - k_t)`` inside a trajectory and 0 at its last valid row, solved by
  ``lax.associative_scan`` after sorting rows by ``(traj, step)``.

  Fast path: with ``num_traj`` given, if the rows turn out (checked at run time) to be the
  time-major grid of a grouped rollout, row ``t * num_traj + n`` = trajectory ``n`` at step
  ``t`` (``x.reshape(-1)`` of a ``[T, num_traj]`` array), the sort is skipped and the returns
  come from one reverse ``lax.scan`` over time (:func:`discounted_grid_returns`); ~100x
  faster on CPU at 262144 rows. Both paths give the same returns up to float rounding.

  There is no bootstrap: the return of the last observed step is its reward whether the
  trajectory terminated or was truncated (GiGPO is critic-free and has no value to bootstrap
  from). Callers that want truncation to bootstrap must add ``gamma * V(s_T)`` to the last
  reward themselves.

  Args:
    rewards: float ``[N]`` per-step rewards.
    traj_ids: int ``[N]`` trajectory of each row (any integers).
    step_index: int ``[N]`` time step within the trajectory; unique per trajectory. Gaps are
      discounted by their length.
    gamma: discount in ``[0, 1]`` (verl-agent scripts: 0.95).
    valid: optional bool ``[N]``; invalid rows are skipped and get 0.
    num_traj: optional static number of trajectories; enables the grid check.

  Returns:
    ``[N]`` returns in the original row order, dtype of ``rewards``.
  """
  _checks.discount("gamma", gamma)
  if num_traj is not None:
    _checks.integer("num_traj", num_traj)
  named = [("rewards", rewards), ("traj_ids", traj_ids), ("step_index", step_index)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(
    named, float_names=("rewards",), int_names=("traj_ids", "step_index"), bool_names=("valid",)
  )
  valid = valid_or_all(valid, rewards)
  n = rewards.shape[0]
  if num_traj is None or n % num_traj:
    return _sorted_step_returns(rewards, traj_ids, step_index, valid, gamma)
  grid = (n // num_traj, num_traj)
  return jax.lax.cond(
    _is_time_major_grid(traj_ids, step_index, num_traj),
    lambda: _grid_step_returns(rewards.reshape(grid), valid.reshape(grid), gamma).reshape(n),
    lambda: _sorted_step_returns(rewards, traj_ids, step_index, valid, gamma),
  )


def discounted_grid_returns(
  rewards: Array, *, gamma: float, valid: Optional[Array] = None
) -> Array:
  """Discounted returns of the trajectories of a time-major grid ``[T, num_traj]``.

  :func:`discounted_step_returns` for a grouped rollout laid out as it comes (batch-level).

  Column ``n`` is trajectory ``n``, row ``t`` its step ``t`` (the layout of
  ``hrljax.rollout.grouped_episodes``). Invalid steps (e.g. after the episode's end) get 0 and
  add no reward; a valid step after invalid ones is discounted by the full time gap, as in the
  row version. One reverse ``lax.scan`` over time, no sort.

  Args:
    rewards: float ``[T, num_traj]``.
    gamma: discount in ``[0, 1]``.
    valid: optional bool ``[T, num_traj]``.

  Returns:
    ``[T, num_traj]`` returns, dtype of ``rewards``.
  """
  _checks.discount("gamma", gamma)
  chex.assert_rank(rewards, 2)
  chex.assert_type(rewards, float)
  valid = valid_or_all(valid, rewards)
  chex.assert_equal_shape([rewards, valid])
  chex.assert_type(valid, bool)
  return _grid_step_returns(rewards, valid, gamma)
