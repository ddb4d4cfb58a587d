"""HIRO: the fixed goal transition, the low-level reward and the off-policy goal correction.

"Data-Efficient Hierarchical Reinforcement Learning" (Nachum, Gu, Lee, Levine, arXiv:1805.08296),
"Parameterized rewards" and "Off-policy corrections".
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks

Array = chex.Array


def hiro_goal_transition(s_t: Array, g_t: Array, s_next: Array) -> Array:
  """HIRO's fixed goal transition h(s_t, g_t, s_{t+1}) = s_t + g_t − s_{t+1} (relative goals).

  See "Data-Efficient Hierarchical Reinforcement Learning" by Nachum, Gu, Lee, Levine
  (arXiv 1805.08296), "Parameterized rewards"; reference bhairavmehta95/data-efficient-hrl
  `Controller.hiro_subgoal_transition`. States are given in goal space (the caller slices the
  goal dimensions, e.g. `s[..., :dg]`). Elementwise over leading axes ([dg] per example).

  Args:
      s_t, g_t, s_next: float arrays [..., dg].

  Returns:
      g_{t+1} [..., dg].
  """
  chex.assert_rank([s_t, g_t, s_next], {1, 2})
  chex.assert_type([s_t, g_t, s_next], float)
  chex.assert_equal_shape([s_t, g_t, s_next])
  return s_t + g_t - s_next


def hiro_low_reward(s_t: Array, g_t: Array, s_next: Array) -> Array:
  """HIRO's low-level reward r^lo = −‖s_t + g_t − s_{t+1}‖₂ (states in goal space).

  See HIRO (arXiv 1805.08296), "Parameterized rewards"; reference `hiro` intrinsic reward.
  Elementwise over leading axes ([dg] -> scalar).
  """
  return -jnp.linalg.norm(hiro_goal_transition(s_t, g_t, s_next), axis=-1)


def hiro_candidate_goals(
  key: chex.PRNGKey,
  g_orig: Array,
  s_t: Array,
  s_tc: Array,
  scale: Array,
  num_random: int = 8,
  sigma: Optional[Array] = None,
) -> Array:
  """HIRO off-policy correction candidates: [g_orig, s_{t+c} − s_t, num_random Gaussian samples].

  See HIRO (arXiv 1805.08296), "Off-policy corrections" (recalled, not re-checked against the
  paper text: 8 samples from N(s_{t+c} − s_t, σ) plus the original goal and s_{t+c} − s_t, 10
  candidates). The PyTorch reference draws 10 samples (12 candidates) with σ = 0.5·scale;
  `num_random` selects either. As in the reference, only the random samples are clipped to
  [−scale, scale]. Per-example (one high-level transition); vmap with split keys.

  Args:
      key: PRNG key.
      g_orig: [dg] the stored goal g_t.
      s_t, s_tc: [dg] s_t and s_{t+c} in goal space.
      scale: [dg] (or scalar) goal range; candidates are clipped to ±scale.
      num_random: number of Gaussian candidates, int >= 0.
      sigma: [dg] or scalar std of the samples; None gives 0.5·scale (reference).

  Returns:
      [2 + num_random, dg] candidates; row 0 is g_orig, row 1 is s_{t+c} − s_t.
  """
  chex.assert_rank([g_orig, s_t, s_tc], 1)
  chex.assert_type([g_orig, s_t, s_tc], float)
  chex.assert_equal_shape([g_orig, s_t, s_tc])
  checks.integer("num_random", num_random, low=0)
  scale = jnp.broadcast_to(jnp.asarray(scale, g_orig.dtype), g_orig.shape)
  sigma = (
    0.5 * scale
    if sigma is None
    else jnp.broadcast_to(jnp.asarray(sigma, g_orig.dtype), g_orig.shape)
  )
  diff = s_tc - s_t
  noise = jax.random.normal(key, (num_random,) + g_orig.shape, g_orig.dtype)
  random_goals = jnp.clip(diff[None, :] + sigma[None, :] * noise, -scale[None, :], scale[None, :])
  return jnp.concatenate([g_orig[None, :], diff[None, :], random_goals], axis=0)


def hiro_propagate_goals(candidates: Array, s_seq: Array) -> Array:
  """Each candidate goal carried through h along the window: g̃_{t+i} = s_t + g̃ − s_{t+i}.

  See HIRO (arXiv 1805.08296), "Off-policy corrections"; reference
  `Controller.multi_subgoal_transition`. The caller evaluates its low-level policy μ^lo(s_{t+i},
  g̃_{t+i}) on the result and passes the actions to `hiro_relabel`. Per-example.

  Args:
      candidates: [C, dg] candidate goals for time t.
      s_seq: [c, dg] states s_t … s_{t+c−1} in goal space (the states the actions were taken in).

  Returns:
      [C, c, dg] goals g̃_{t+i} per candidate and step (row i = 0 is the candidate itself).
  """
  chex.assert_rank([candidates, s_seq], 2)
  chex.assert_type([candidates, s_seq], float)
  chex.assert_equal_shape_suffix([candidates, s_seq], 1)
  return candidates[:, None, :] + s_seq[None, 0:1, :] - s_seq[None, :, :]


class HIRORelabelExtras(NamedTuple):
  """Per-candidate scores of the HIRO off-policy correction."""

  log_likelihood: Array  # [C] −½ Σ_i ‖a_{t+i} − μ^lo(s_{t+i}, g̃_{t+i})‖².
  best_index: Array  # scalar int, the argmax (first index on ties).


def hiro_relabel(
  candidates: Array, policy_actions: Array, actions: Array, valid: Optional[Array] = None
) -> Tuple[Array, HIRORelabelExtras]:
  """HIRO off-policy goal correction: the candidate that best explains the low-level actions.

  See HIRO (arXiv 1805.08296), "Off-policy corrections": g̃ = argmax_g log μ^lo(a_{t:t+c−1} |
  s_{t:t+c−1}, g̃_{t:t+c−1}), with the Gaussian log-likelihood of a deterministic policy up to a
  constant, −½ Σ_i ‖a_{t+i} − μ^lo(s_{t+i}, g̃_{t+i})‖². Reference
  `Manager.off_policy_corrections`. Per-example (one high-level transition); the caller vmaps. The
  goals must be propagated with `hiro_propagate_goals` before evaluating μ^lo (the reference's
  comment "Doesn't include subgoal transitions" concerns exactly this; here propagation is
  explicit). Ties go to the first candidate, i.e. the original goal. The result carries no
  gradient.

  Args:
      candidates: [C, dg] candidate goals.
      policy_actions: [C, c, A] μ^lo(s_{t+i}, g̃_{t+i}) for every candidate and step.
      actions: [c, A] the stored low-level actions.
      valid: optional [c] bool, False for steps past the end of a short (terminated) window.

  Returns:
      (the relabelled goal [dg], HIRORelabelExtras).
  """
  chex.assert_rank([candidates, policy_actions, actions], [2, 3, 2])
  chex.assert_type([candidates, policy_actions, actions], float)
  chex.assert_equal_shape_prefix([candidates, policy_actions], 1)
  chex.assert_equal_shape_suffix([policy_actions, actions], 2)
  sq_err = jnp.sum(jnp.square(policy_actions - actions[None]), axis=-1)  # [C, c]
  if valid is not None:
    chex.assert_rank(valid, 1)
    chex.assert_type(valid, bool)
    chex.assert_equal_shape([valid, actions[:, 0]])
    sq_err = jnp.where(valid[None, :], sq_err, 0.0)
  log_likelihood = jax.lax.stop_gradient(-0.5 * jnp.sum(sq_err, axis=-1))
  best = jnp.argmax(log_likelihood)
  g_best = jax.lax.stop_gradient(candidates[best])
  return g_best, HIRORelabelExtras(log_likelihood=log_likelihood, best_index=best)
