"""P3O: pairwise proximal policy optimisation on trajectory-level ratios (relative feedback).

Wu, Zhu, Zhang, Wen, Ramchandran, Jiao, "Pairwise Proximal Policy Optimization: Harnessing
Relative Feedback for LLM Alignment", arXiv 2310.00212.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import (
  check_rows,
  safe_div,
  valid_or_all,
  with_nan,
)

Array = chex.Array


class P3oExtras(NamedTuple):
  ratio: Array  # [B] detached trajectory ratio pi_theta(y|x) / pi_old(y|x) (1 on invalid rows)
  pair_loss: Array  # [B, B] loss of pair (i, j), i < j in one group; 0 elsewhere
  pairs: Array  # bool [B, B] the pairs counted (i < j, same group, both valid)
  clip_fraction: Array  # scalar share of the clipped surrogate terms that took the clipped branch
  loss_sum: Array  # scalar numerator
  num_pairs: Array  # scalar denominator


_P3O_VARIANTS = ("separate", "joint")


def _clipped(ratio: Array, advantage: Array, epsilon: float) -> Tuple[Array, Array]:
  """PPO's ``-min(rho A, clip(rho) A)`` and whether the clipped branch is the smaller one."""
  unclipped = ratio * advantage
  clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon) * advantage
  return -jnp.minimum(unclipped, clipped), clipped < unclipped


def p3o_loss(
  logp: Array,
  old_logp: Array,
  mask: Array,
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  variant: str = "separate",
  epsilon: float = 0.2,
  log_ratio_clamp: float = 20.0,
) -> Tuple[Array, P3oExtras]:
  """P3O: a clipped pairwise policy gradient over the responses of each prompt (batch-level).

  Wu et al., arXiv 2310.00212. What could be verified (the abstract, the opening of the
  authors' BAIR blog post "Rethinking the Role of PPO in RLHF", 2023-10-16, and a third-party
  summary of that post; no code was released): the pairwise policy gradient for two responses
  ``y1, y2`` of a prompt::

    E_{y1, y2 ~ pi}[ (r(y1|x) - r(y2|x)) * grad(log pi(y1|x) - log pi(y2|x)) / 2 ]

  (the summary renders the last factor as a product of the two likelihoods, whose expectation
  against the antisymmetric reward difference would vanish; the difference is the form that
  makes sense), made off-policy with importance sampling from ``pi_old`` and clipped as in PPO,
  in two versions, V1 "separate clipping" and V2 "joint clipping"; it depends on rewards only
  through differences, so it is invariant to reward shifts ``r(y|x) + delta(x)``.

  Reconstructed (the paper's equations could not be read; revisit against them): with the
  trajectory ratio ``rho_k = pi_theta(y_k|x) / pi_old(y_k|x)`` (sum of token log-ratios) and
  ``a = (r1 - r2) / 2``,

  * ``variant="separate"`` (V1): PPO's clipped surrogate on each response of the pair with
    advantage ``+a`` for ``y1`` and ``-a`` for ``y2``:
    ``L = -min(rho_1 a, clip(rho_1) a) - min(-rho_2 a, -clip(rho_2) a)``;
  * ``variant="joint"`` (V2): one clipped surrogate on the pair's ratio
    ``rho = rho_1 / rho_2``: ``L = -min(rho a, clip(rho) a)``, with the pair taken winner first
    (``r1 >= r2``, so ``a >= 0``): PPO's clip is not symmetric under swapping the pair
    (``rho -> 1 / rho``, ``a -> -a``), and this order makes the loss independent of the order of
    the rows (the paper samples its pairs unordered).

  Both have the pairwise policy gradient above at ``theta = theta_old``. No importance factor
  for the other response of the pair and no KL term are included; the paper's KL control
  (e.g. ``beta * (log pi_old - log pi_ref)(y)`` subtracted from each reward before the call) is
  the caller's. A group of ``n`` responses contributes all its ``n (n - 1) / 2`` pairs; the
  loss is the mean over every pair of the batch.

  Args:
    logp: float ``[B, T]`` token log-probs under the policy being optimised.
    old_logp: float ``[B, T]`` under the sampling policy (no gradient).
    mask: ``[B, T]`` response mask; masked tokens are not read.
    rewards: float ``[B]`` rewards (detached; any per-prompt shift cancels).
    group_ids: int ``[B]`` prompt of each response, in ``[0, num_groups)``.
    num_groups: static number of prompts.
    valid: optional bool ``[B]``; invalid rows (and, under jit, rows whose group id is out of
      range) are in no pair.
    variant: ``"separate"`` (V1) or ``"joint"`` (V2).
    epsilon: the clip range (> 0).
    log_ratio_clamp: clamp of each trajectory log-ratio (and of the joint one) before ``exp``.

  Returns:
    ``(loss, P3oExtras)``. Dense ``[B, B]`` pairs: memory grows as ``B^2``. A NaN in a read
    input makes the loss NaN, even in a row that is in no pair.
  """
  _checks.integer("num_groups", num_groups)
  _checks.choice("variant", variant, _P3O_VARIANTS)
  _checks.positive("epsilon", epsilon)
  _checks.positive("log_ratio_clamp", log_ratio_clamp, finite=False)
  chex.assert_rank([logp, old_logp, mask], 2)
  chex.assert_equal_shape([logp, old_logp, mask])
  chex.assert_type([logp, old_logp], float)
  named = [("rewards", rewards), ("group_ids", group_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, float_names=("rewards",), int_names=("group_ids",), bool_names=("valid",))
  chex.assert_equal_shape_prefix([logp, rewards], 1)
  valid = valid_or_all(valid, group_ids) & _checks.ids_in_range("group_ids", group_ids, num_groups)
  read = (jnp.asarray(mask) != 0) & valid[:, None]
  poisoned = jnp.any(valid & jnp.isnan(rewards)) | jnp.any(
    read & (jnp.isnan(logp) | jnp.isnan(old_logp))
  )
  logp, old_logp = _masking.zero_masked(read, logp, jax.lax.stop_gradient(old_logp))
  m = read.astype(logp.dtype)
  log_ratio = jnp.sum((logp - old_logp) * m, axis=1)
  r = jax.lax.stop_gradient(jnp.where(valid, rewards, 0))

  b = logp.shape[0]
  index = jnp.arange(b)
  pairs = (
    (group_ids[:, None] == group_ids[None, :])
    & valid[:, None]
    & valid[None, :]
    & (index[:, None] < index[None, :])
  )
  half_diff = jnp.where(pairs, (r[:, None] - r[None, :]) / 2, 0)
  if variant == "separate":
    rho = jnp.exp(jnp.clip(log_ratio, -log_ratio_clamp, log_ratio_clamp))
    first, first_clipped = _clipped(rho[:, None], half_diff, epsilon)
    second, second_clipped = _clipped(rho[None, :], -half_diff, epsilon)
    pair_loss = first + second
    clipped_terms = jnp.sum(pairs & first_clipped) + jnp.sum(pairs & second_clipped)
    terms = 2 * jnp.sum(pairs)
  else:
    # Each pair is taken winner first (a >= 0), so the term does not depend on row order.
    winner_first = jnp.where(half_diff >= 0, 1.0, -1.0)
    joint = winner_first * (log_ratio[:, None] - log_ratio[None, :])
    rho = jnp.exp(jnp.clip(joint, -log_ratio_clamp, log_ratio_clamp))
    pair_loss, joint_clipped = _clipped(rho, jnp.abs(half_diff), epsilon)
    clipped_terms = jnp.sum(pairs & joint_clipped)
    terms = jnp.sum(pairs)
  pair_loss = jnp.where(pairs, pair_loss, 0)
  loss_sum = jnp.sum(pair_loss)
  num_pairs = jnp.sum(pairs).astype(logp.dtype)
  ratio = jax.lax.stop_gradient(jnp.exp(jnp.clip(log_ratio, -log_ratio_clamp, log_ratio_clamp)))
  clip_fraction = safe_div(clipped_terms.astype(logp.dtype), terms.astype(logp.dtype))
  extras = P3oExtras(ratio, pair_loss, pairs, clip_fraction, loss_sum, num_pairs)
  return with_nan(safe_div(loss_sum, num_pairs), poisoned), extras
