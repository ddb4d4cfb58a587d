"""HICRA: credit concentrated on planning tokens, and the planning-token matcher.

Wang et al., "Emergent Hierarchical Reasoning in LLMs through Reinforcement Learning",
arXiv 2509.03646. Token-level: ``[B, T]`` advantages and masks.
"""

from typing import Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import check_segment_args
from hrljax.losses.group_relative.normalize import segment_mean

Array = chex.Array


def hicra_advantages(token_advantages: Array, planning_mask: Array, *, alpha: float = 0.2) -> Array:
  """HICRA: amplify the advantage of planning tokens, ``A + alpha * |A| * 1[planning]``.

  Wang et al., "Emergent Hierarchical Reasoning in LLMs through Reinforcement Learning",
  arXiv 2509.03646 (TIGER-AI-Lab). Planning tokens get ``A * (1 + alpha)`` when ``A > 0`` and
  ``A * (1 - alpha)`` when ``A < 0``, so for ``alpha < 1`` the sign never flips; other tokens
  are unchanged; the clipped GRPO loss then uses the result. Elementwise (any shape).

  The formula and ``alpha = 0.2`` are those of two independent ports (textpolicy
  ``apply_hicra_amplification`` and TRL PR #4997's ``1 + alpha * sign(A)``); the paper's own
  equation could not be checked (only its abstract and summaries were reachable). The TRL PR
  applied the multiplier through chained boolean indexing, which writes into a temporary copy
  and is a no-op; this uses ``jnp.where``. The entropy- and length-gated variant that the TRL
  PR attributes to the authors' verl branch is not implemented (secondary source only).

  Args:
    token_advantages: float ``[...]`` (e.g. ``[B, T]``); treated as a constant.
    planning_mask: bool/0-1 of the same shape (e.g. :func:`planning_token_mask`).
    alpha: amplification in ``[0, 1]``.

  Returns:
    Amplified advantages under ``stop_gradient``.
  """
  _checks.number("alpha", alpha, low=0.0, high=1.0)
  chex.assert_equal_shape([token_advantages, planning_mask])
  chex.assert_type(token_advantages, float)
  a = jax.lax.stop_gradient(token_advantages)
  return jnp.where(planning_mask.astype(bool), a + alpha * jnp.abs(a), a)


def hicra_verl_port_advantages(
  sequence_advantages: Array,
  mask: Array,
  entropies: Array,
  group_ids: Array,
  num_groups: int,
  *,
  planning_mask: Optional[Array] = None,
  alpha: float = 0.2,
  top_fraction: float = 0.3,
  valid: Optional[Array] = None,
) -> Array:
  """HICRA as the TRL port (PR #4997) describes the authors' verl branch (batch-level).

  Secondary source only (the official repository snapshot holds a README): amplification
  ``A * (1 + alpha * sign(A))`` is applied only on responses that are "correct" (sequence
  advantage > 0) and longer than their group's mean length, and there only on high-entropy
  tokens (entropy strictly above the response's ``1 - top_fraction`` quantile, linear
  interpolation as ``torch.quantile``) or, when ``planning_mask`` is given, planning tokens.
  Prefer :func:`hicra_advantages` (the paper's formula) unless reproducing that branch.
  With constant entropies no token is "high-entropy" (strict ``>``), so only the planning mask
  acts; the PR's own tests missed that (its multiplier was also a no-op, see
  :func:`hicra_advantages`).

  Args:
    sequence_advantages: float ``[B]`` (e.g. :func:`grpo_advantages`).
    mask: ``[B, T]`` response mask; the length of a response is its mask sum. Masked tokens and
      invalid rows are not read (0 there, whatever the inputs hold).
    entropies: float ``[B, T]`` token entropies (treated as constants).
    group_ids: int ``[B]``; num_groups: static.
    planning_mask: optional ``[B, T]`` bool/0-1.
    alpha: amplification in ``[0, 1]``; top_fraction: in ``(0, 1]`` (the port's 0.3).
    valid: optional bool ``[B]``; invalid rows enter no group length mean and get 0.

  Returns:
    float ``[B, T]`` token advantages (0 off the mask), under ``stop_gradient``.
  """
  _checks.number("alpha", alpha, low=0.0, high=1.0)
  _checks.number("top_fraction", top_fraction, low=0.0, high=1.0, low_open=True)
  chex.assert_rank([sequence_advantages, mask, entropies], [1, 2, 2])
  chex.assert_equal_shape([mask, entropies])
  chex.assert_equal_shape_prefix([sequence_advantages, mask], 1)
  chex.assert_type(entropies, float)
  valid = check_segment_args(sequence_advantages, group_ids, num_groups, valid)
  m = mask.astype(bool)
  lengths = jnp.sum(m, axis=1).astype(jnp.float32)
  mean_length = segment_mean(lengths, group_ids, num_groups, valid=valid)[group_ids]
  eligible = valid & (sequence_advantages > 0) & (lengths > mean_length)

  # Per-response linear-interpolation quantile over its own (unmasked) tokens.
  ordered = jnp.sort(jnp.where(m, entropies, jnp.inf), axis=1)
  position = (1.0 - top_fraction) * jnp.maximum(lengths - 1, 0)
  below = jnp.floor(position).astype(jnp.int32)
  above = jnp.ceil(position).astype(jnp.int32)
  low = jnp.take_along_axis(ordered, below[:, None], axis=1)[:, 0]
  high = jnp.take_along_axis(ordered, above[:, None], axis=1)[:, 0]
  high = jnp.where(jnp.isfinite(high), high, low)
  threshold = low + (position - below) * (high - low)
  chosen = m & (entropies > threshold[:, None])
  if planning_mask is not None:
    chex.assert_equal_shape([planning_mask, mask])
    chosen = chosen | (planning_mask.astype(bool) & m)
  chosen = chosen & eligible[:, None]
  a = jnp.broadcast_to(jax.lax.stop_gradient(sequence_advantages)[:, None], m.shape)
  (a,) = _masking.zero_masked(m, a)
  amplified = a * (1 + alpha * jnp.sign(a))
  out = jnp.where(chosen, amplified, a)
  return jax.lax.stop_gradient(jnp.where(valid[:, None], out, 0))


def planning_token_mask(
  tokens: Array, patterns: Array, pattern_lengths: Array, mask: Optional[Array] = None
) -> Array:
  """Marks the tokens covered by any occurrence of any pattern (Strategic Gram) in a sequence.

  Exact token-id matching by sliding windows (as TRL PR #4997 does), jittable. Matches never
  extend over masked (padding / prompt / tool) tokens. Overlapping matches are or-ed.
  Subword pitfall: one phrase tokenises differently with and without a leading space; pass
  both tokenisations as separate patterns.

  Args:
    tokens: int ``[B, T]``.
    patterns: int ``[S, L]``; pattern ``s`` is ``patterns[s, :pattern_lengths[s]]`` (the tail
      is padding and ignored).
    pattern_lengths: int ``[S]`` in ``[1, L]``.
    mask: optional ``[B, T]`` bool/0-1; tokens outside it never match.

  Returns:
    bool ``[B, T]``.
  """
  chex.assert_rank([tokens, patterns, pattern_lengths], [2, 2, 1])
  chex.assert_type([tokens, patterns, pattern_lengths], int)
  chex.assert_equal_shape_prefix([patterns, pattern_lengths], 1)
  b, t = tokens.shape
  width = patterns.shape[1]
  mask = jnp.ones((b, t), bool) if mask is None else mask.astype(bool)
  chex.assert_shape(mask, (b, t))
  padded_tokens = jnp.pad(tokens, ((0, 0), (0, width)))
  padded_mask = jnp.pad(mask, ((0, 0), (0, width)))
  offsets = jnp.arange(width)
  starts = jnp.arange(t)[:, None] + offsets[None, :]  # [T, L]
  windows = padded_tokens[:, starts]  # [B, T, L]
  window_mask = padded_mask[:, starts]
  used = offsets[None, :] < pattern_lengths[:, None]  # [S, L]
  agree = (windows[:, :, None, :] == patterns[None, None]) & window_mask[:, :, None, :]
  match = jnp.all(agree | ~used[None, None], axis=-1) & (pattern_lengths > 0)[None, None]
  # Token p is covered if a match of pattern s starts at p - j for some j < len(s).
  covered = jnp.zeros((b, t), bool)
  for j in range(width):
    starts_here = jnp.any(match & used[None, None, :, j], axis=-1)  # [B, T] matches long enough
    covered = covered | jnp.pad(starts_here, ((0, 0), (j, 0)))[:, :t]
  return covered & mask
