"""Advantage-weighted regression: the clipped exponential weight and the actor loss.

"Advantage-Weighted Regression: Simple and Scalable Off-Policy Reinforcement Learning" (Peng,
Kumar, Zhang, Levine, arXiv:1910.00177, Sec. 3), in the goal-conditioned form of OGBench's
GCIVL/HIQL/OTA actors (arXiv:2410.20092) and of Offline ArCHer.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks

Array = chex.Array


def awr_weights(advantage: Array, alpha: float, max_weight: Optional[float] = 100.0) -> Array:
  """Advantage-weighted-regression weights min(exp(α·A), w_max), without gradient.

  See "Advantage-Weighted Regression: Simple and Scalable Off-Policy Reinforcement Learning" by
  Peng, Kumar, Zhang, Levine (arXiv 1910.00177), Sec. 3 (weight exp(A/β), clipped by w_max in
  their implementation), with α = 1/β as in OGBench (`alpha`, "temperature").

  Elementwise (any shape). The advantage is wrapped in `stop_gradient`: AWR regresses the policy
  on fixed weights. OGBench (HIQL, GCIVL, OTA) clips at 100, hard-coded; Offline ArCHer does not
  clip (`max_weight=None`). Unclipped weights overflow to inf in float32 for α·A above about 88.

  Args:
      advantage: float array A, any shape.
      alpha: inverse temperature α, a Python float >= 0 (α = 0 gives weight 1: behaviour cloning).
      max_weight: clip w_max > 0, or None for no clip. Default 100 (OGBench).

  Returns:
      A float array of the shape of `advantage`.
  """
  chex.assert_type(advantage, float)
  checks.nonnegative("alpha", alpha)
  checks.positive("max_weight", max_weight, finite=False, optional=True)
  weights = jnp.exp(alpha * jax.lax.stop_gradient(advantage))
  if max_weight is not None:
    weights = jnp.minimum(weights, max_weight)
  return weights


class AWRExtras(NamedTuple):
  """Per-example AWR quantities, plus the sum and count behind the batch mean."""

  weights: Array  # [B] min(exp(α·A), w_max), no gradient.
  advantage: Array  # [B] the advantage the weights were computed from (stop-gradiented).
  log_prob: Array  # [B] log π(a | ·) as passed (or as computed by the caller's log_prob_fn).
  loss_sum: Array  # scalar Σ_B −w·log π, for normalising over a global batch.
  count: Array  # scalar B (float), the denominator of the mean.


def awr_loss(
  log_prob: Array, advantage: Array, alpha: float, max_weight: Optional[float] = 100.0
) -> Tuple[Array, AWRExtras]:
  """Advantage-weighted regression actor loss −mean_B[min(exp(α·A), w_max)·log π(a|·)].

  See "Advantage-Weighted Regression: Simple and Scalable Off-Policy Reinforcement Learning" by
  Peng, Kumar, Zhang, Levine (arXiv 1910.00177), Sec. 3; in the goal-conditioned form of OGBench
  (GCIVL/HIQL/OTA actors) and of Offline ArCHer.

  Batch-level: reduces over the batch axis (mean); `extras.loss_sum` and `extras.count` let a
  data-parallel caller normalise over the global batch instead. The weight carries no gradient
  (`awr_weights` stop-gradients the advantage); only `log_prob` is differentiated.

  Args:
      log_prob: [B] float log-probabilities of the dataset actions under the trained policy.
      advantage: [B] float advantages.
      alpha: inverse temperature α >= 0 (OGBench `alpha`: 3.0 for HIQL; ArCHer `inv_temp`).
      max_weight: clip of the weight, 100 (OGBench, hard-coded there) or None (Offline ArCHer).

  Returns:
      (loss, AWRExtras).
  """
  chex.assert_rank([log_prob, advantage], 1)
  chex.assert_type([log_prob, advantage], float)
  chex.assert_equal_shape([log_prob, advantage])
  weights = awr_weights(advantage, alpha, max_weight)
  loss_sum = -jnp.sum(weights * log_prob)
  count = jnp.asarray(log_prob.shape[0], dtype=log_prob.dtype)
  extras = AWRExtras(
    weights=weights,
    advantage=jax.lax.stop_gradient(advantage),
    log_prob=log_prob,
    loss_sum=loss_sum,
    count=count,
  )
  return loss_sum / count, extras
