"""HIQL: latent subgoals, the low/high advantages and the two AWR actor losses.

"HIQL: Offline Goal-Conditioned RL with Latent States as Actions" (Park, Ghosh, Eysenbach,
Levine, arXiv:2307.11949, Sec. 4), as implemented in OGBench's `HIQLAgent` (arXiv:2410.20092).
OTA ("Option-aware Temporally Abstracted Value for Offline Goal-Conditioned Reinforcement
Learning", Ahn, Choi, Han, Moon, arXiv:2505.12737) uses the same actor losses with its
option-aware value.
"""

import math
from typing import Callable, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks
from hrljax.losses.goal_conditioned.awr import AWRExtras, awr_loss

Array = chex.Array


def length_normalize(x: Array, eps: float = 1e-12) -> Array:
  """Rescales the last axis to length √d: x·√d / ‖x‖ (HIQL's subgoal representation).

  See HIQL (Park et al., arXiv 2307.11949): the subgoal representation φ([s; g]) is
  length-normalised; the OGBench `LengthNormalize` layer and `sample_actions` apply x / ‖x‖ · √d.
  Elementwise over leading axes (rank 1 to 4). Deviation: `eps` is added under the square root
  so that x = 0 gives 0, not NaN (the reference has no eps; the difference is below float32
  resolution for ‖x‖² ≫ eps).

  Args:
      x: float array [..., d].
      eps: finite float >= 0 added to ‖x‖².

  Returns:
      An array of the shape of x whose last-axis norm is √d.
  """
  chex.assert_rank(x, {1, 2, 3, 4})
  chex.assert_type(x, float)
  checks.nonnegative("eps", eps)
  dim = x.shape[-1]
  sq_norm = jnp.sum(jnp.square(x), axis=-1, keepdims=True)
  return x * (math.sqrt(dim) * jax.lax.rsqrt(sq_norm + eps))


def _mean_head_difference(v_to: Array, v_from: Array) -> Array:
  chex.assert_rank([v_to, v_from], {1, 2})
  chex.assert_type([v_to, v_from], float)
  chex.assert_equal_shape([v_to, v_from])
  return jnp.mean(v_to, axis=-1) - jnp.mean(v_from, axis=-1)


def hiql_low_advantage(v_next_w: Array, v_w: Array) -> Array:
  """HIQL low-level advantage A^l = mean_E V(s', w) − mean_E V(s, w), without reward or γ.

  See HIQL (Park et al., arXiv 2307.11949), Sec. 4, low-level policy objective
  (A^l ≈ V(s_{t+1}, s_{t+k}) − V(s_t, s_{t+k})).
  w is the subgoal state s_{min(t+k, traj_end)}; V is the ONLINE value averaged over its heads
  (OGBench `low_actor_loss`). Per-example with the ensemble axis last: [E] -> scalar, or batched
  [B, E] -> [B]. Pure helper: returns the raw difference, with gradient; `awr_weights` /
  `awr_loss` / `hiql_low_actor_loss` stop it.

  Args:
      v_next_w: [E] or [B, E] online V(s', w).
      v_w: [E] or [B, E] online V(s, w).

  Returns:
      A scalar or [B] advantage.
  """
  return _mean_head_difference(v_next_w, v_w)


def hiql_high_advantage(v_subgoal_g: Array, v_g: Array) -> Array:
  """HIQL high-level advantage A^h = mean_E V(s_{t+k}, g) − mean_E V(s_t, g).

  See HIQL (Park et al., arXiv 2307.11949), Sec. 4, high-level policy objective. s_{t+k} is
  OGBench's `high_actor_targets`: s_{min(t+k, goal_idx)} for a trajectory goal,
  s_{min(t+k, traj_end)} for a random goal. The
  same online mean-of-heads difference as `hiql_low_advantage`; for OTA pass V^h (the
  option-aware high value) instead of V. Shapes [E] -> scalar or [B, E] -> [B].

  Args:
      v_subgoal_g: [E] or [B, E] online V(s_{t+k}, g).
      v_g: [E] or [B, E] online V(s_t, g).

  Returns:
      A scalar or [B] advantage.
  """
  return _mean_head_difference(v_subgoal_g, v_g)


def _latent_awr(
  log_prob_fn: Callable[[Array], Array],
  rep: Array,
  stop_rep: bool,
  advantage: Array,
  alpha: float,
  max_weight: Optional[float],
) -> Tuple[Array, AWRExtras]:
  """AWR on `log_prob_fn(rep)` [B] for a [B, R] representation, the [B] advantage and (when
  `stop_rep`) the representation under stop-gradient: the body of both HIQL actor losses."""
  chex.assert_rank(rep, 2)
  chex.assert_rank(advantage, 1)
  advantage = jax.lax.stop_gradient(advantage)
  if stop_rep:
    rep = jax.lax.stop_gradient(rep)
  log_prob = log_prob_fn(rep)
  chex.assert_equal_shape([log_prob, advantage])
  return awr_loss(log_prob, advantage, alpha, max_weight)


def hiql_low_actor_loss(
  log_prob_fn: Callable[[Array], Array],
  subgoal_rep: Array,
  v_next_w: Array,
  v_w: Array,
  alpha: float,
  max_weight: Optional[float] = 100.0,
  rep_grad: bool = False,
) -> Tuple[Array, AWRExtras]:
  """HIQL low-level actor loss: AWR on log π^l(a | s, φ([s; w])) with A^l = V(s', w) − V(s, w).

  See HIQL (Park et al., arXiv 2307.11949), Sec. 4; OGBench `HIQLAgent.low_actor_loss`.
  Batch-level (mean over B).

  Gradient routing (what the caller passes): `subgoal_rep` is φ([s; w]) computed with the ONLINE
  parameters and with gradient; `log_prob_fn(rep)` evaluates the low actor on (s, rep) and
  returns log π^l(a_dataset | s, rep), shape [B]. This function stops the gradient of
  `subgoal_rep` unless `rep_grad=True` (OGBench `low_actor_rep_grad`, default False; the README
  calls it crucial for pixels), so φ is trained by the value loss alone by default. The values
  are the online values; they are stop-gradiented here (OGBench evaluates them with the stored
  parameters, which carries no gradient either).

  Args:
      log_prob_fn: maps a [B, R] subgoal representation to [B] log-probabilities.
      subgoal_rep: [B, R] φ([s; w]).
      v_next_w, v_w: [B, E] online V(s', w), V(s, w).
      alpha: AWR inverse temperature (OGBench `low_alpha`, 3.0).
      max_weight: weight clip, 100 in OGBench.
      rep_grad: let the actor loss train φ (OGBench `low_actor_rep_grad`).

  Returns:
      (loss, AWRExtras).
  """
  checks.boolean("rep_grad", rep_grad)
  return _latent_awr(
    log_prob_fn, subgoal_rep, not rep_grad, hiql_low_advantage(v_next_w, v_w), alpha, max_weight
  )


def hiql_high_actor_loss(
  log_prob_fn: Callable[[Array], Array],
  target_rep: Array,
  v_subgoal_g: Array,
  v_g: Array,
  alpha: float,
  max_weight: Optional[float] = 100.0,
  stop_target_gradients: bool = True,
) -> Tuple[Array, AWRExtras]:
  """HIQL high-level actor loss: AWR on log π^h(φ([s; s_{t+k}]) | s, g) with A^h = ΔV(·, g).

  See HIQL (Park et al., arXiv 2307.11949), Sec. 4; OGBench `HIQLAgent.high_actor_loss`. OTA
  (arXiv 2505.12737) uses the same loss with its option-aware value V^h. Batch-level.

  Gradient routing: `target_rep` is the latent subgoal φ([s; s_{t+k}]); it is a regression
  target, so its gradient is stopped unless `stop_target_gradients=False` (OGBench evaluates it
  with the stored parameters: no gradient into φ). `log_prob_fn(rep)` returns
  log π^h(rep | s, g) [B] (e.g. `dist.log_prob` of the high actor's distribution). The values
  are online values and are stop-gradiented.

  Args:
      log_prob_fn: maps the [B, R] target latent to [B] log-probabilities under π^h(· | s, g).
      target_rep: [B, R] φ([s; s_{t+k}]).
      v_subgoal_g, v_g: [B, E] online V(s_{t+k}, g), V(s_t, g).
      alpha: AWR inverse temperature (OGBench `high_alpha`, 3.0).
      max_weight: weight clip, 100 in OGBench.
      stop_target_gradients: stop the gradient of `target_rep` (default, as in OGBench).

  Returns:
      (loss, AWRExtras).
  """
  checks.boolean("stop_target_gradients", stop_target_gradients)
  return _latent_awr(
    log_prob_fn,
    target_rep,
    stop_target_gradients,
    hiql_high_advantage(v_subgoal_g, v_g),
    alpha,
    max_weight,
  )


class HIQLActorExtras(NamedTuple):
  """Both actor losses of a HIQL hierarchy and their per-example AWR quantities."""

  low_actor_loss: Array  # scalar
  high_actor_loss: Array  # scalar
  low: AWRExtras
  high: AWRExtras

  def summary(self) -> dict:
    """Batch means worth logging: each level's loss, advantage, AWR weight and log-prob."""
    out = {"low_actor_loss": self.low_actor_loss, "high_actor_loss": self.high_actor_loss}
    for level, extras in (("low", self.low), ("high", self.high)):
      out[f"{level}_advantage"] = extras.advantage.mean()
      out[f"{level}_awr_weight"] = extras.weights.mean()
      out[f"{level}_bc_log_prob"] = extras.log_prob.mean()
    return out


def hiql_actor_losses(
  low_log_prob_fn: Callable[[Array], Array],
  subgoal_rep: Array,
  v_next_w: Array,
  v_w: Array,
  high_log_prob_fn: Callable[[Array], Array],
  target_rep: Array,
  v_subgoal_g: Array,
  v_g: Array,
  low_alpha: float,
  high_alpha: float,
  max_weight: Optional[float] = 100.0,
  rep_grad: bool = False,
) -> Tuple[Array, HIQLActorExtras]:
  """HIQL's two actor losses, `hiql_low_actor_loss` + `hiql_high_actor_loss`, unweighted.

  See HIQL (Park et al., arXiv 2307.11949), Sec. 4 (the low- and high-level policy objectives,
  trained jointly as in OGBench's `HIQLAgent.total_loss`); OTA (arXiv 2505.12737) passes its
  option-aware V^h as the high values. Batch-level; arguments as in the two losses.

  Returns:
      (low loss + high loss, HIQLActorExtras).
  """
  checks.nonnegative("low_alpha", low_alpha)
  checks.nonnegative("high_alpha", high_alpha)
  low_loss, low = hiql_low_actor_loss(
    low_log_prob_fn, subgoal_rep, v_next_w, v_w, low_alpha, max_weight, rep_grad=rep_grad
  )
  high_loss, high = hiql_high_actor_loss(
    high_log_prob_fn, target_rep, v_subgoal_g, v_g, high_alpha, max_weight
  )
  return low_loss + high_loss, HIQLActorExtras(
    low_actor_loss=low_loss, high_actor_loss=high_loss, low=low, high=high
  )
