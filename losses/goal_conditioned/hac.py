"""HAC: bounded Bellman targets and hindsight action, goal and subgoal-test transitions.

"Learning Multi-Level Hierarchies with Hindsight" (Levy, Konidaris, Platt, Saenko,
arXiv:1712.00948).
"""

from typing import Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks

Array = chex.Array


def hac_target(
  r_t: Array,
  terminal_t: Array,
  q_t: Array,
  gamma: float,
  horizon: int,
  stop_target_gradients: bool = True,
) -> Array:
  """HAC's bounded Bellman target y = clip(r + (1 − terminal)·γ·Q(s', g, π(s', g)), −H, 0).

  See "Learning Multi-Level Hierarchies with Hindsight" by Levy, Konidaris, Platt, Saenko
  (arXiv 1712.00948); reference andrew-j-levy/Hierarchical-Actor-Critc-HAC-
  `critic.py`. `terminal` is HAC's "finished" flag (goal achieved, or a subgoal-test penalty),
  so it stops the bootstrap; a time-out is not terminal. Q values are bounded to [−H, 0] by
  HAC's critic, so the clip only binds for out-of-range bootstraps. Elementwise (any shape).

  Args:
      r_t: float rewards (0 / −1, or −H for a subgoal-test penalty).
      terminal_t: bool or float "finished" flags.
      q_t: float bootstrap values Q(s', g, π(s', g)) (HAC: the online critic, no target net).
      gamma: discount in [0, 1] (0.98 in HAC).
      horizon: H = time_scale, an int >= 1 (10 in HAC).
      stop_target_gradients: stop the gradient of the target (default).

  Returns:
      Targets of the shape of r_t.
  """
  chex.assert_type([r_t, q_t], float)
  chex.assert_equal_shape([r_t, terminal_t, q_t])
  checks.discount("gamma", gamma)
  checks.integer("horizon", horizon)
  checks.boolean("stop_target_gradients", stop_target_gradients)
  not_terminal = 1.0 - jnp.asarray(terminal_t, r_t.dtype)
  target = jnp.clip(r_t + not_terminal * gamma * q_t, -float(horizon), 0.0)
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def hac_goal_reward(achieved: Array, goal: Array, thresholds: Array) -> Tuple[Array, Array]:
  """HAC goal test: (0, True) if |achieved − goal| <= thresholds in all dims, else (−1, False).

  See HAC (arXiv 1712.00948); reference `Layer.get_reward` (a dimension fails when its
  distance is strictly greater than its threshold). Elementwise over leading axes
  ([dg] -> scalars; [T, dg] recomputes a whole hindsight episode).

  Args:
      achieved: float [..., dg] achieved goal-space states.
      goal: float [..., dg] goals.
      thresholds: float [dg] (or [..., dg]) per-dimension tolerances.

  Returns:
      (reward float, terminal bool), of shape achieved.shape[:-1]. A NaN distance or threshold
      in a goal's dimensions gives reward NaN (the test cannot be decided; read as a number it
      would be a silent "not reached") and terminal False.
  """
  chex.assert_rank([achieved, goal], {1, 2})
  chex.assert_type([achieved, goal, thresholds], float)
  chex.assert_equal_shape([achieved, goal])
  chex.assert_equal_shape_suffix([achieved, thresholds], 1)
  thresholds = jnp.broadcast_to(thresholds, achieved.shape)
  distance = jnp.abs(achieved - goal)
  reached = jnp.all(distance <= thresholds, axis=-1)
  undecided = jnp.any(jnp.isnan(distance) | jnp.isnan(thresholds), axis=-1)
  reward = reached.astype(achieved.dtype) - 1.0
  return jnp.where(undecided, jnp.asarray(jnp.nan, reward.dtype), reward), reached


def hac_hindsight_action(
  proposed_subgoal: Array, achieved_subgoal: Array, subgoal_reached: Array
) -> Array:
  """HAC hindsight action: the proposed subgoal if it was reached, else the state reached.

  See HAC (arXiv 1712.00948) ("hindsight action transitions"); reference `Layer.train`. The
  achieved state is projected to subgoal space by the caller.

  Args:
      proposed_subgoal: float [dg] (or [B, dg]) the subgoal the level proposed.
      achieved_subgoal: float [dg] (or [B, dg]) the state the level below reached.
      subgoal_reached: bool scalar (or [B]) whether the level below reached the subgoal.

  Returns:
      [..., dg] the action stored in the hindsight transition.
  """
  chex.assert_type([proposed_subgoal, achieved_subgoal], float)
  chex.assert_type(subgoal_reached, bool)
  chex.assert_equal_shape([proposed_subgoal, achieved_subgoal])
  chex.assert_equal_shape([proposed_subgoal[..., 0], subgoal_reached])
  return jnp.where(subgoal_reached[..., None], proposed_subgoal, achieved_subgoal)


def hac_hindsight_goals(
  key: chex.PRNGKey, achieved: Array, num_goals: int = 3
) -> Tuple[Array, Array]:
  """HAC hindsight (HER) goals for one attempt: num_goals − 1 random achieved states + the last.

  See HAC (arXiv 1712.00948) ("hindsight goal transitions"); reference
  `Layer.finalize_goal_replay`: indices drawn uniformly with replacement, the final transition
  always included, the whole attempt relabelled with each goal (use `hac_goal_reward` on
  `achieved` to recompute rewards and terminals). Deviation: the reference lowers num_goals to
  the attempt length when the attempt is shorter; here the shape is static, so duplicates fill
  in.

  Args:
      key: PRNG key.
      achieved: [T, dg] states achieved after each transition of the attempt (goal space).
      num_goals: int >= 1 (3 in HAC).

  Returns:
      (goals [num_goals, dg] with the last row = achieved[-1], their indices [num_goals], sorted).
  """
  chex.assert_rank(achieved, 2)
  chex.assert_type(achieved, float)
  checks.integer("num_goals", num_goals)
  length = achieved.shape[0]
  random_idx = jax.random.randint(key, (num_goals - 1,), 0, length)
  idx = jnp.sort(jnp.concatenate([random_idx, jnp.array([length - 1])]))
  return achieved[idx], idx


def hac_subgoal_test_penalty(horizon: int, dtype=jnp.float32) -> Tuple[Array, Array]:
  """HAC subgoal-testing penalty transition (reward −H, terminal True) for a missed subgoal.

  See HAC (arXiv 1712.00948) ("subgoal testing transitions"); reference
  `Layer.penalize_subgoal` (`subgoal_penalty = −time_limit`).

  Returns:
      (reward scalar −H, terminal scalar True).
  """
  checks.integer("horizon", horizon)
  return jnp.asarray(-float(horizon), dtype), jnp.asarray(True)
