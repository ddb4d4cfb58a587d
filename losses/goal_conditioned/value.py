"""Goal-conditioned value learning: IQL's expectile and OGBench's IVL value loss.

The expectile regression of "Offline Reinforcement Learning with Implicit Q-Learning" (Kostrikov,
Nair, Levine, arXiv:2110.06169, Sec. 4.1) and the action-free goal-conditioned value loss of HIQL
("HIQL: Offline Goal-Conditioned RL with Latent States as Actions", Park, Ghosh, Eysenbach,
Levine, arXiv:2307.11949, Sec. 4) as implemented in OGBench ("OGBench: Benchmarking Offline
Goal-Conditioned RL", Park, Frans, Eysenbach, Levine, arXiv:2410.20092), which GCIVL, HIQL, OTA
and HILP share.
"""

import functools
from typing import NamedTuple, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks

Array = chex.Array
Numeric = chex.Numeric


def expectile_loss(diff: Array, expectile: float) -> Array:
  """Per-element asymmetric squared loss of IQL: |τ − 1[diff < 0]|·diff².

  See "Offline Reinforcement Learning with Implicit Q-Learning" by Kostrikov, Nair, Levine
  (arXiv 2110.06169), Sec. 4.1 (L₂^τ(u) = |τ − 1(u < 0)|·u²).

  `diff` is target − prediction (e.g. Q̄(s, a) − V(s)), any shape; the loss is elementwise, so it
  is per-example for any layout and the caller reduces. Positive residuals (prediction below the
  target) get weight τ, negative ones 1 − τ; diff = 0 contributes 0 whichever weight applies.
  There is no ½ factor: this equals `rlax.expectile_loss(predictions, targets, τ)` with
  diff = targets − predictions. It is NOT the goal-conditioned IVL value loss of OGBench/HIQL
  (`ivl_value_loss`), whose weight comes from a target-network advantage.

  Args:
      diff: float array of residuals target − prediction, any shape. No stop-gradient is applied:
          stop the target's gradient before forming diff if it must not be trained.
      expectile: τ, a Python float in (0, 1); 0.5 gives ½·diff².

  Returns:
      A float array of the shape of `diff`.
  """
  chex.assert_type(diff, float)
  checks.open_unit_interval("expectile", expectile)
  weight = jnp.where(diff < 0, 1.0 - expectile, expectile)
  return weight * jnp.square(diff)


class IVLExtras(NamedTuple):
  """Per-example IVL quantities (shapes for one example; the batch version adds a leading B)."""

  advantage: Array  # scalar A = r + γ·m·min_i v̄'_i − mean_i v̄_i (target networks only).
  weight: Array  # scalar expectile weight: τ if A >= 0 else 1 − τ.
  targets: Array  # [E] y_i = r + γ·m·v̄'_i.
  td_errors: Array  # [E] y_i − v_i.


def ivl_value_loss(
  v_tm1: Array,
  v_tgt_tm1: Array,
  v_tgt_t: Array,
  r_t: Numeric,
  discount_t: Numeric,
  expectile: float,
  stop_target_gradients: bool = True,
) -> Tuple[Array, IVLExtras]:
  """OGBench's goal-conditioned IVL value loss for one example: Σ_i w·(y_i − v_i)².

  See "HIQL: Offline Goal-Conditioned RL with Latent States as Actions" by Park, Ghosh, Eysenbach,
  Levine (arXiv 2307.11949), Sec. 4 (action-free IQL value loss; "Eq. 4" in seohongpark/HIQL
  issue #6), as implemented in OGBench
  ("OGBench: Benchmarking Offline Goal-Conditioned RL", Park et al., arXiv 2410.20092,
  `impls/agents/{gcivl,hiql}.py`); HILP (arXiv 2402.15567) and OTA (arXiv 2505.12737) reuse it.

  Per-example (one (s, s', g) triple with an ensemble axis E, usually 2); `jax.vmap` over a batch
  and average, or use `ivl_value_loss_batch`. With V_i the online heads and V̄_i the target heads:

    A   = r + γ·m·min_i V̄_i(s', g) − mean_i V̄_i(s, g)      (decides the weight only)
    w   = τ if A >= 0 else 1 − τ                               (ties go to τ)
    y_i = r + γ·m·V̄_i(s', g)                                   (head i regresses on head i)
    L   = Σ_i w·(y_i − V_i(s, g))²

  Deviations from the paper and differences from IQL (all follow the OGBench reference):
    * The paper weights by the sign of the residual y − V (IQL style, as `expectile_loss` and
      `rlax.expectile_loss` do per head); the reference weights all heads by the sign of the
      target-network advantage A ("double-DQN-like"; seohongpark/HIQL issue #6). On the vector
      of `tests/losses/test_goal_conditioned.py` the two give 0.556855 (this function) vs
      0.635475.
    * A uses min over target heads at s' but the mean of target heads at s.
    * Heads are summed, not averaged; no ½ factor.
  `discount_t` = γ·mask folds in goal reaching (mask = 0 when the goal is reached, the relabelled
  analogue of termination). A time-limit truncation is not a goal success: pass mask = 1 there so
  the target bootstraps from the true next state.

  Args:
      v_tm1: [E] online values V_i(s, g) (the only differentiated input by default).
      v_tgt_tm1: [E] target-network values V̄_i(s, g).
      v_tgt_t: [E] target-network values V̄_i(s', g).
      r_t: scalar reward (OGBench gc_negative: 0 at the goal, −1 otherwise).
      discount_t: scalar γ·mask.
      expectile: τ in (0, 1) (0.7 for HIQL/OTA, 0.95 for HILP).
      stop_target_gradients: if True (default) the targets and the advantage carry no gradient.

  Returns:
      (scalar loss, IVLExtras).
  """
  chex.assert_rank([v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t], [1, 1, 1, 0, 0])
  chex.assert_type([v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t], float)
  chex.assert_equal_shape([v_tm1, v_tgt_tm1, v_tgt_t])
  checks.open_unit_interval("expectile", expectile)
  checks.boolean("stop_target_gradients", stop_target_gradients)

  targets = r_t + discount_t * v_tgt_t
  advantage = r_t + discount_t * jnp.min(v_tgt_t) - jnp.mean(v_tgt_tm1)
  if stop_target_gradients:
    targets = jax.lax.stop_gradient(targets)
    advantage = jax.lax.stop_gradient(advantage)
  weight = jnp.where(advantage >= 0, expectile, 1.0 - expectile)
  td_errors = targets - v_tm1
  loss = jnp.sum(weight * jnp.square(td_errors))
  return loss, IVLExtras(advantage=advantage, weight=weight, targets=targets, td_errors=td_errors)


class IVLBatchExtras(NamedTuple):
  """Per-example IVL quantities for a batch, plus the sum and count behind the batch mean."""

  advantage: Array  # [B]
  weight: Array  # [B]
  targets: Array  # [B, E]
  td_errors: Array  # [B, E]
  loss_per_example: Array  # [B] Σ_i w·(y_i − v_i)².
  loss_sum: Array  # scalar Σ_B loss_per_example.
  count: Array  # scalar B (float).


def ivl_value_loss_batch(
  v_tm1: Array,
  v_tgt_tm1: Array,
  v_tgt_t: Array,
  r_t: Array,
  discount_t: Array,
  expectile: float,
  stop_target_gradients: bool = True,
) -> Tuple[Array, IVLBatchExtras]:
  """Batch-mean of `ivl_value_loss` (OGBench's value loss on a batch): Σ_i mean_B[w·(y_i − v_i)²].

  Batch-level wrapper with a leading batch axis: `jax.vmap(ivl_value_loss)` over B, then the mean.
  Networks that return the ensemble first ([E, B], e.g. a Flax `nn.vmap` ensemble) pass `v.T`.
  See `ivl_value_loss` for the formula, the paper and the deviations.

  Args:
      v_tm1, v_tgt_tm1, v_tgt_t: [B, E] float online V(s, g), target V̄(s, g), target V̄(s', g).
      r_t, discount_t: [B] float rewards and γ·mask.
      expectile, stop_target_gradients: as in `ivl_value_loss`.

  Returns:
      (scalar loss, IVLBatchExtras).
  """
  chex.assert_rank([v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t], [2, 2, 2, 1, 1])
  chex.assert_equal_shape([v_tm1, v_tgt_tm1, v_tgt_t])
  chex.assert_equal_shape([r_t, discount_t, v_tm1[:, 0]])
  checks.open_unit_interval("expectile", expectile)
  checks.boolean("stop_target_gradients", stop_target_gradients)

  per_example = functools.partial(
    ivl_value_loss, expectile=expectile, stop_target_gradients=stop_target_gradients
  )
  losses, extras = jax.vmap(per_example)(v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t)
  loss_sum = jnp.sum(losses)
  count = jnp.asarray(losses.shape[0], dtype=losses.dtype)
  return loss_sum / count, IVLBatchExtras(
    advantage=extras.advantage,
    weight=extras.weight,
    targets=extras.targets,
    td_errors=extras.td_errors,
    loss_per_example=losses,
    loss_sum=loss_sum,
    count=count,
  )
