"""GTPO: conflict-token protection and an entropy filter on top of group-relative advantages.

Simoni, Fontana, Rossolini, Saracino, Mori, "GTPO: Stabilizing Group Relative Policy Optimization
via Gradient and Entropy Control" (first versions titled "GTPO: Trajectory-Based Policy
Optimization in Large Language Models"), arXiv 2508.03772. Not the GTPO of Tan et al.,
"GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy Entropy", arXiv 2508.04349,
which is a different method under the same acronym.
"""

import math
from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import check_rows, safe_div, valid_or_all, with_nan

Array = chex.Array


class GtpoExtras(NamedTuple):
  per_token_loss: Array  # [B, T] -A'_i * lambda_it * r_it (0 on masked tokens and invalid rows)
  token_weights: Array  # [B, T] lambda_it (0 on masked tokens and invalid rows)
  conflict: Array  # bool [B, T] conflict tokens
  entropy: Array  # [B] mean token entropy <H>_i of each completion (detached)
  kept: Array  # bool [B] valid completions that pass the entropy filter (delta_i = 1)
  shaped_advantages: Array  # [B] delta_i * (A_i - entropy_coef * <H>_i), detached
  loss_sum: Array  # scalar numerator
  denominator: Array  # scalar denominator (valid completions, or 1 with normalization="code")


_GTPO_SCOPES = ("prefix_suffix", "position")


_GTPO_NORMALIZATIONS = ("paper", "code")


def _in_any_row_of_each_sign(
  token_ids: Array,
  position: Array,
  read: Array,
  positive: Array,
  negative: Array,
  group_ids: Array,
  num_groups: int,
) -> Array:
  """bool [B, T]: the token of a read entry of a signed row also sits at the same position in a
  positive and in a negative row of its group (the authors' bincount over (position, token),
  done here with one sort over (group, position, token) so it scales with B * T, not B^2 * T)."""
  b, t = token_ids.shape
  n = b * t
  signed = (positive | negative)[:, None] & read
  key_group = jnp.where(signed, group_ids[:, None], num_groups).astype(jnp.int32).reshape(n)
  key_pos = jnp.where(signed, position, 0).astype(jnp.int32).reshape(n)
  key_tok = jnp.where(signed, token_ids, 0).astype(jnp.int32).reshape(n)
  is_pos = jnp.broadcast_to(positive[:, None], (b, t)).astype(jnp.int32).reshape(n)
  is_neg = jnp.broadcast_to(negative[:, None], (b, t)).astype(jnp.int32).reshape(n)
  index = jnp.arange(n, dtype=jnp.int32)
  g, p, v, sp, sn, perm = jax.lax.sort(
    (key_group, key_pos, key_tok, is_pos, is_neg, index), num_keys=3
  )
  new = jnp.concatenate(
    [jnp.ones((1,), bool), (g[1:] != g[:-1]) | (p[1:] != p[:-1]) | (v[1:] != v[:-1])]
  )
  segment = jnp.cumsum(new.astype(jnp.int32)) - 1
  any_pos = jax.ops.segment_max(sp, segment, n)[segment] > 0
  any_neg = jax.ops.segment_max(sn, segment, n)[segment] > 0
  both = any_pos & any_neg & (g < num_groups)
  return jnp.zeros((n,), bool).at[perm].set(both).reshape(b, t)


def _initial_run(hit: Array, read: Array, reverse: bool) -> Array:
  """The read tokens of the unbroken run of hits that starts at the first (or last) read token."""
  ok = (hit | ~read).astype(jnp.int32)
  if reverse:
    ok = ok[:, ::-1]
  run = jnp.cumprod(ok, axis=1) > 0
  if reverse:
    run = run[:, ::-1]
  return run & read


def gtpo_loss(
  logp: Array,
  mask: Array,
  token_ids: Array,
  advantages: Array,
  entropies: Array,
  group_ids: Array,
  num_groups: int,
  *,
  old_logp: Optional[Array] = None,
  valid: Optional[Array] = None,
  conflict_weight: float = 2.0,
  entropy_coef: float = 0.1,
  entropy_threshold: float = math.log(2.0),
  initial_entropy: Optional[float] = None,
  conflict_scope: str = "prefix_suffix",
  normalization: str = "paper",
  log_ratio_clamp: float = 20.0,
) -> Tuple[Array, GtpoExtras]:
  """GTPO policy loss: conflict tokens protected, high-entropy completions filtered (batch-level).

  Simoni et al., arXiv 2508.03772 (see the module docstring; not Tan et al., arXiv 2508.04349).
  The objective is the one the authors state in their repository (winstonsmith1897/GTPO,
  README, @5d33811)::

    J = E[ 1/G sum_i delta_i (A_i - gamma <H>_i) / |o_i| sum_t r_it lambda_it ]

  with ``<H>_i`` the mean token entropy of completion ``i``, ``r_it`` the token ratio and
  ``lambda_it`` the conflict weight; the loss is ``-J``. The paper's equation numbers could not
  be read here (only the abstract and the repository were reachable); the definitions below
  follow the authors' code, ``gtpo/gtpo_training.py`` (``build_conflict_mask``,
  ``UnslothEfficientGTPO``) at @5d33811.

  * Conflict tokens: within a group, a token of a completion with a positive advantage is in
    conflict when a completion with a negative advantage has the same token id at the same
    position, and vice versa. With ``conflict_scope="prefix_suffix"`` (the authors' code) only
    the unbroken run of such positions counted from the first token, and the run counted from
    the last token (positions aligned on each completion's end), are conflicts: in effect the
    shared opening and closing (format) tokens. ``"position"`` marks every same-position match
    (the abstract's plain wording). Positions count a completion's unmasked tokens.
  * ``lambda_it``: ``conflict_weight`` (2) on a conflict token of a positive completion (the
    amplified update), 0 on one of a negative completion (the skipped update), 1 elsewhere. As in
    the authors' code the prefix and suffix weights multiply, so a token in both runs of a
    positive completion gets ``conflict_weight ** 2``. Completions with a zero advantage take no
    part in conflicts (weight 1).
  * Entropy filter ``delta_i``: 1 when ``<H>_i <= entropy_threshold``, else 0 (the code's
    filter). With ``initial_entropy`` (the model's mean entropy before training), the paper's
    rule: ``delta_i = 1`` whenever ``initial_entropy > entropy_threshold``. The paper's
    threshold is ``ln 2`` (the default); the code uses 0.7.
  * The entropy term: ``A'_i = delta_i * (A_i - entropy_coef * <H>_i)`` (code ``ENT_SCALE``
    0.1). The conflict signs come from ``A_i`` before this shaping, as in the code.
  * No KL term and no reference model. With ``old_logp=None`` the ratio is
    ``exp(logp - stop_gradient(logp))``: value 1, REINFORCE gradient, as in the authors' code
    (whose "old" log-probs are those of the adapter-free base model, used only for logging).
    With ``old_logp`` the unclipped ratio ``pi / pi_old`` of the stated objective is used.

  The advantages are the caller's; the authors' trainer uses ``r_i - mean_g r``
  (:func:`dr_grpo_advantages`, no std division).

  Deviations from the authors' code, each with a switch: ``normalization="paper"`` (default)
  averages the per-completion terms over the valid completions (the ``1/G`` of the stated
  objective); ``normalization="code"`` reproduces the code, which divides each completion's
  term by its number of conflict tokens (at least 1) and sums over completions, a scaling the
  stated objective does not have. ``conflict_scope`` and ``initial_entropy`` as above. The
  code's bincount over ``(position, token)`` keys (one per group, ``L * vocab`` bins) is
  replaced by one sort of the batch over ``(group, position, token)``, with the same result.

  Args:
    logp: float ``[B, T]`` log-probs of the sampled tokens under the policy being optimised.
    mask: ``[B, T]`` response mask (bool or 0/1). Masked tokens are not read, whatever
      ``logp``, ``old_logp``, ``entropies`` and ``token_ids`` hold there.
    token_ids: int ``[B, T]`` sampled token ids (compared for conflicts only).
    advantages: float ``[B]`` sequence advantages (detached).
    entropies: float ``[B, T]`` token entropies of the policy's distribution (detached; e.g.
      ``policy_gradient.categorical_entropy`` of the logits).
    group_ids: int ``[B]`` prompt of each completion, in ``[0, num_groups)``.
    num_groups: static number of groups.
    old_logp: optional float ``[B, T]`` behaviour-policy log-probs (see above).
    valid: optional bool ``[B]``; invalid rows (and rows whose group id is out of range under
      jit) take no part in conflicts, contribute 0 and are not counted.
    conflict_weight: the amplification of positive conflict tokens (>= 1; code ``W_RAW`` 2).
    entropy_coef: ``gamma`` (>= 0; code 0.1).
    entropy_threshold: the entropy cut-off (> 0; paper ``ln 2``, code 0.7).
    initial_entropy: optional scalar; see the entropy filter.
    conflict_scope: ``"prefix_suffix"`` or ``"position"``.
    normalization: ``"paper"`` or ``"code"``.
    log_ratio_clamp: clamp of ``logp - old_logp`` before ``exp``.

  Returns:
    ``(loss, GtpoExtras)``. A NaN in a read advantage or entropy makes the loss NaN (a filter
    would otherwise hide it).
  """
  _checks.integer("num_groups", num_groups)
  _checks.number("conflict_weight", conflict_weight, low=1.0)
  _checks.nonnegative("entropy_coef", entropy_coef)
  _checks.positive("entropy_threshold", entropy_threshold)
  _checks.number("initial_entropy", initial_entropy, optional=True, arrays=True, finite=False)
  _checks.choice("conflict_scope", conflict_scope, _GTPO_SCOPES)
  _checks.choice("normalization", normalization, _GTPO_NORMALIZATIONS)
  _checks.positive("log_ratio_clamp", log_ratio_clamp, finite=False)
  tokens = [logp, mask, token_ids, entropies] + ([old_logp] if old_logp is not None else [])
  chex.assert_rank(tokens, 2)
  chex.assert_equal_shape(tokens)
  chex.assert_type([logp, entropies], float)
  chex.assert_type(token_ids, int)
  if old_logp is not None:
    chex.assert_type(old_logp, float)
  named = [("advantages", advantages), ("group_ids", group_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, float_names=("advantages",), int_names=("group_ids",), bool_names=("valid",))
  chex.assert_equal_shape_prefix([logp, advantages], 1)
  valid = valid_or_all(valid, group_ids) & _checks.ids_in_range("group_ids", group_ids, num_groups)
  read = (jnp.asarray(mask) != 0) & valid[:, None]
  poisoned = jnp.any(valid & jnp.isnan(advantages)) | jnp.any(read & jnp.isnan(entropies))
  logp, entropies = _masking.zero_masked(read, logp, entropies)
  a = jax.lax.stop_gradient(jnp.where(valid, advantages, 0))
  m = read.astype(logp.dtype)
  n_tok = jnp.sum(m, axis=1)

  # Conflict tokens, on positions counted over each completion's read tokens.
  ids = jnp.where(read, token_ids, 0)
  rank = jnp.cumsum(read.astype(jnp.int32), axis=1) - 1
  length = jnp.sum(read.astype(jnp.int32), axis=1, keepdims=True)
  positive, negative = valid & (a > 0), valid & (a < 0)

  def hits(position):
    return _in_any_row_of_each_sign(ids, position, read, positive, negative, group_ids, num_groups)

  def weight(conflict):
    return jnp.where(conflict, jnp.where(positive[:, None], conflict_weight, 0.0), 1.0)

  if conflict_scope == "prefix_suffix":
    forward = _initial_run(hits(rank), read, reverse=False)
    backward = _initial_run(hits(length - 1 - rank), read, reverse=True)
    conflict = forward | backward
    lam = weight(forward) * weight(backward)
  else:
    conflict = hits(rank)
    lam = weight(conflict)
  lam = jnp.where(read, lam, 0.0).astype(logp.dtype)

  # Entropy filter and entropy-shaped advantages (all detached).
  entropies = jax.lax.stop_gradient(entropies)
  entropy = safe_div(jnp.sum(entropies * m, axis=1), n_tok)
  kept = valid & (entropy <= entropy_threshold)
  if initial_entropy is not None:
    kept = kept | (valid & (jnp.asarray(initial_entropy) > entropy_threshold))
  shaped = jnp.where(kept, a - entropy_coef * entropy, 0)

  if old_logp is None:
    ratio = jnp.exp(logp - jax.lax.stop_gradient(logp))
  else:
    (old,) = _masking.zero_masked(read, jax.lax.stop_gradient(old_logp))
    ratio = jnp.exp(jnp.clip(logp - old, -log_ratio_clamp, log_ratio_clamp))
  per_token = jnp.where(read, -shaped[:, None] * lam * ratio, 0)
  per_row = safe_div(jnp.sum(per_token, axis=1), n_tok)
  if normalization == "code":
    n_conflict = jnp.sum((conflict & read).astype(logp.dtype), axis=1)
    loss_sum = jnp.sum(per_row / jnp.maximum(n_conflict, 1.0))
    denominator = jnp.ones((), logp.dtype)
  else:
    loss_sum = jnp.sum(per_row)
    denominator = jnp.sum(valid).astype(logp.dtype)
  loss = with_nan(safe_div(loss_sum, denominator), poisoned)
  extras = GtpoExtras(per_token, lam, conflict & read, entropy, kept, shaped, loss_sum, denominator)
  return loss, extras
