"""M-GRPO: fixed-size sub-agent batches from a variable number of sub-agent calls.

Hong et al. (Ant Group, Imperial College London), "Multi-Agent Deep Research: Training
Multi-Agent Systems with M-GRPO", arXiv 2511.13288. The paper's method section could not be
read; :func:`mgrpo_alignment` says what the rule rests on.
"""

from typing import NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks
from hrljax.losses.group_relative._segments import valid_or_all

Array = chex.Array


class Alignment(NamedTuple):
  index: Array  # int32 [K * D] row of the sub-agent batch filling each slot
  slot_valid: Array  # bool [K * D] False where the rollout had no sub-trajectory at all


def mgrpo_alignment(
  rollout_ids: Array,
  num_rollouts: int,
  slots_per_rollout: int,
  key: Array,
  *,
  valid: Optional[Array] = None,
) -> Alignment:
  """M-GRPO trajectory alignment: exactly ``D`` sub-agent slots per main rollout (batch-level).

  Hong et al., "Multi-Agent Deep Research: Training Multi-Agent Systems with M-GRPO",
  arXiv 2511.13288. **Reconstructed; the paper's equations could not be checked.** Only the
  title page, the abstract and the start of the introduction of the paper could be read, so no
  equation number can be cited. What the rule rests on:

  * the abstract: "a trajectory-alignment scheme that generates fixed-size batches despite
    variable sub-agent invocations";
  * two third-party summaries of the paper (a literature review and a public discussion
    thread), which agree on the scheme: a fixed number ``D_max`` of sub-agent slots per main
    rollout; a rollout with fewer sub-agent calls is padded by duplicating randomly chosen
    sub-trajectories, one with more has the extras dropped at random. One of them calls the
    duplicated trajectories "good" without saying what that means; here they are drawn
    uniformly among the rollout's own sub-trajectories. The same review gives the main agent's
    reward as ``R_M = alpha_1 * r_format + alpha_2 * r_correct`` (binary format reward);
  * the authors' released code (AQ-MedAI/MrlX at 0d04788, ``MrlX-DeepResearch``) has no
    alignment step: each sub-trajectory is pushed to a first-in-first-out queue with the main
    agent's score, and the sub-agent trainer pops them into fixed batches of 8 per group for
    its GRPO advantage, whatever rollout or query they came from. Its sub-agent reward is 0
    when the sub-agent's own format check fails, else 1 when the main agent's answer was
    correct and 0.1 otherwise.

  The rule here: rollout ``k`` with ``d_k`` sub-trajectories gets a uniformly random subset of
  ``D`` without replacement if ``d_k >= D``; every sub-trajectory once plus ``D - d_k`` uniform
  duplicates (with replacement) if ``0 < d_k < D``; invalid slots if ``d_k = 0`` (the
  summaries do not cover that case). Slot order within a rollout is random. ``D`` is static:
  it is the summaries' fixed ``D_max`` (a cap, not the batch's largest ``d_k``).

  Compute sub-agent statistics (:func:`grpo_advantages`) on the rows *before* alignment and
  gather them with ``index``: duplicates must not reweight the group statistics.

  Args:
    rollout_ids: int ``[M]`` in ``[0, num_rollouts)``: the main rollout of each sub-trajectory.
    num_rollouts: static ``K``.
    slots_per_rollout: static ``D``.
    key: PRNG key.
    valid: optional bool ``[M]``; invalid rows are never selected.

  Returns:
    ``Alignment(index, slot_valid)``; slot ``k * D + s`` belongs to rollout ``k``.
  """
  _checks.integer("num_rollouts", num_rollouts)
  _checks.integer("slots_per_rollout", slots_per_rollout)
  chex.assert_rank(rollout_ids, 1)
  chex.assert_type(rollout_ids, int)
  valid = valid_or_all(valid, rollout_ids)
  chex.assert_equal_shape([rollout_ids, valid])
  m = rollout_ids.shape[0]
  order_key, dup_key = jax.random.split(key)
  bucket = jnp.where(valid, rollout_ids, num_rollouts).astype(jnp.int32)
  sorted_bucket, _, perm = jax.lax.sort(
    (bucket, jax.random.uniform(order_key, (m,)), jnp.arange(m, dtype=jnp.int32)), num_keys=2
  )
  counts = jax.ops.segment_sum(jnp.ones((m,), jnp.int32), sorted_bucket, num_rollouts + 1)
  first = jnp.cumsum(counts) - counts
  slot = jnp.arange(slots_per_rollout)[None, :]
  d = counts[:num_rollouts, None]
  duplicate = jax.random.randint(dup_key, (num_rollouts, slots_per_rollout), 0, jnp.maximum(d, 1))
  offset = jnp.where(slot < d, slot, duplicate)
  position = jnp.clip(first[:num_rollouts, None] + offset, 0, m - 1)
  slot_valid = jnp.broadcast_to(d > 0, offset.shape)
  index = jnp.where(slot_valid, perm[position], 0)
  return Alignment(index.reshape(-1).astype(jnp.int32), slot_valid.reshape(-1))
