"""Exact grouping of rows by key on device: the machinery behind the anchor states (private).

Rows are grouped by bit-exact keys (observation words, group, validity) with hash tables or a
sort, or, for small integer observations, by direct addressing into per-group boxes. The hashes
only decide speed: every result is checked word for word.
"""

from typing import Callable, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks
from hrljax.losses.group_relative._segments import valid_or_all

Array = chex.Array

ANCHOR_METHODS = ("hash", "sort")
GOLDEN = 0x9E3779B9  # 2**32 / golden ratio: odd, so multiplying by it permutes uint32


def fmix32(h: Array) -> Array:
  """MurmurHash3's 32-bit finaliser: a bijection on uint32 with good avalanche."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def anchor_keys(
  words: Array, group_ids: Array, valid: Optional[Array], hash_fn: Callable[[Array], Array]
) -> Tuple[Array, Array]:
  """Checks the arguments; returns the exact row keys ``[N, D + 2]`` and the row hashes ``[N]``.

  A row's key is its observation words ``[N, D]`` followed by its group and its validity, so
  two rows share an anchor iff their keys are equal.
  """
  n = words.shape[0]
  chex.assert_rank(group_ids, 1)
  chex.assert_type(group_ids, int)
  chex.assert_shape(group_ids, (n,))
  valid = valid_or_all(valid, group_ids)
  chex.assert_shape(valid, (n,))
  chex.assert_type(valid, bool)
  hashes = jnp.asarray(hash_fn(words))
  chex.assert_shape(hashes, (n,))
  chex.assert_type(hashes, int)
  group = jax.lax.bitcast_convert_type(group_ids.astype(jnp.int32), jnp.uint32)
  keys = jnp.concatenate([words, group[:, None], valid.astype(jnp.uint32)[:, None]], axis=1)
  return keys, hashes.astype(jnp.uint32)


def heads_by_sort(keys: Array, hashes: Array) -> Array:
  """Lowest row index of each row's key, by sorting rows on ``(valid, group, hash)``.

  Within each run of equal sort keys, the rows equal to the run's first unresolved row take it
  as head, until every row is resolved (one pass when the hash has no collision in a group).
  """
  n = keys.shape[0]
  order = jnp.arange(n, dtype=jnp.int32)
  # Invalid rows form their own pseudo-group, sorted after every valid row. The stable sort
  # keeps equal keys in row order, so a run's first row of a key is its lowest row index.
  key_valid, key_group, key_hash, perm = jax.lax.sort(
    (1 - keys[:, -1].astype(jnp.int32), keys[:, -2], hashes, order), num_keys=3, is_stable=True
  )
  sorted_keys = keys[perm]
  new_run = jnp.concatenate(
    [
      jnp.ones((1,), bool),
      (key_valid[1:] != key_valid[:-1])
      | (key_group[1:] != key_group[:-1])
      | (key_hash[1:] != key_hash[:-1]),
    ]
  )
  run_id = jnp.cumsum(new_run) - 1

  def unresolved(head):
    return jnp.any(head < 0)

  def resolve_one_per_run(head):
    pending = head < 0
    first_pending = jax.ops.segment_min(jnp.where(pending, order, n), run_id, n)[run_id]
    first_pending = jnp.minimum(first_pending, n - 1)
    same = jnp.all(sorted_keys == sorted_keys[first_pending], axis=1)
    return jnp.where(pending & same, first_pending, head)

  head = jax.lax.while_loop(unresolved, resolve_one_per_run, jnp.full((n,), -1, jnp.int32))
  return jnp.zeros((n,), jnp.int32).at[perm].set(perm[head])


def key_fingerprint(keys: Array) -> Array:
  """A second 32-bit hash of the full key, independent of ``observation_hash`` (other salts)."""
  salt = fmix32(
    jnp.arange(1, keys.shape[1] + 1, dtype=jnp.uint32) * jnp.uint32(0x85EBCA77)
    + jnp.uint32(0x27D4EB2F)
  )
  mixed = fmix32(keys ^ salt[None, :])
  return fmix32(jnp.sum(mixed * jnp.uint32(0xC2B2AE3D), axis=1, dtype=jnp.uint32))


def heads_by_table(keys: Array, hashes: Array, fingerprints: Array, max_probe_rounds: int) -> Array:
  """Lowest row index of each row's key by rounds of hash tables (-1 where unresolved).

  Round ``k`` hashes every unresolved row to a slot of a fresh table of ``2**ceil(log2(4 N))``
  slots (its hash, scoped by group and validity, rehashed with ``k``; a load of at most 1/4
  even if every row is its own key) and scatter-mins its row index there; a row whose slot
  owner has the same fingerprint takes the owner as head, the others try again next round.
  The rows of one key hash alike, so they always resolve together and the owner they find is
  their lowest row index. A fresh table each round (instead of
  probing further in one table) keeps later rounds almost collision-free, since only the few
  unresolved keys bid. Equal fingerprints are only a candidate match: the caller compares the
  keys exactly. Stops after ``max_probe_rounds`` rounds.
  """
  n = keys.shape[0]
  size = 1 << (4 * n - 1).bit_length()
  rows = jnp.arange(n, dtype=jnp.int32)
  # The group and validity are mixed in so that one observation in many groups spreads over
  # the table instead of piling on one slot.
  scope = fmix32(keys[:, -2] * jnp.uint32(GOLDEN) + keys[:, -1])
  key_hash = fmix32(hashes ^ scope)

  def probe(rounds, head):
    pending = head < 0
    slot = (
      fmix32(key_hash + rounds.astype(jnp.uint32) * jnp.uint32(GOLDEN)) & jnp.uint32(size - 1)
    ).astype(jnp.int32)
    table = (
      jnp.full((size,), n, jnp.int32).at[jnp.where(pending, slot, size)].min(rows, mode="drop")
    )
    owner = jnp.minimum(table[slot], n - 1)
    same = pending & (fingerprints[owner] == fingerprints)
    return jnp.where(same, owner, head)

  def more_rounds(state):
    rounds, head = state
    return (rounds < max_probe_rounds) & jnp.any(head < 0)

  def next_round(state):
    rounds, head = state
    return rounds + 1, probe(rounds, head)

  head = probe(jnp.int32(0), jnp.full((n,), -1, jnp.int32))
  return jax.lax.while_loop(more_rounds, next_round, (jnp.int32(1), head))[1]


def anchor_heads(
  words: Array,
  group_ids: Array,
  valid: Optional[Array],
  hash_fn: Callable[[Array], Array],
  method: str,
  max_probe_rounds: int,
) -> Array:
  """Row index of the first row (lowest index) with the same anchor key, for every row.

  ``words`` are the rows' observation words ``[N, D]`` (``anchors.observation_words``).
  """
  _checks.choice("method", method, ANCHOR_METHODS)
  _checks.integer("max_probe_rounds", max_probe_rounds)
  keys, hashes = anchor_keys(words, group_ids, valid, hash_fn)
  if method == "sort":
    return heads_by_sort(keys, hashes)
  head = heads_by_table(keys, hashes, key_fingerprint(keys), max_probe_rounds)
  # Exact check: a fingerprint collision or unresolved rows (only with a badly colliding
  # hash_fn, or ~2**-32 per colliding pair) fall back to the sort, so the result is exact.
  exact = jnp.all((head >= 0) & jnp.all(keys[jnp.maximum(head, 0)] == keys, axis=1))
  return jax.lax.cond(exact, lambda: head, lambda: heads_by_sort(keys, hashes))


class DirectLayout(NamedTuple):
  low: Array  # uint32 [G, D] smallest word of each column over the group's valid rows
  stride: Array  # uint32 [G, D] mixed-radix place value of each column in the group's block
  offset: Array  # uint32 [G] first slot of the group's block
  fits: Array  # bool scalar: every group's block fits, side by side, in `capacity` slots


# Largest direct-address table: sizes are checked in float32, exact for integers below 2**24.
MAX_DIRECT_CAPACITY = 1 << 23


def direct_anchor_layout(
  words: Array, group_ids: Array, valid: Array, num_groups: int, capacity: int
) -> DirectLayout:
  """Per-group bounding boxes of the observation words, laid out side by side in one table.

  ``words`` uint32 ``[T, N, D]`` (time-major grid), ``group_ids`` ``[N]``, ``valid`` ``[T, N]``.
  A group's valid rows have column ``c`` in ``[low_c, high_c]``; numbering the box's cells in
  mixed radix (place values ``stride``) and giving each group its own block of
  ``prod_c (high_c - low_c + 1)`` slots makes ``(group, words) -> slot`` injective on the
  valid rows: a perfect hash, so rows share a slot iff their keys are equal. Grid-world
  observations (small integers, a goal fixed within a task) give small boxes.
  Empty groups take no slot.
  """
  chex.assert_rank(words, 3)
  top = jnp.uint32(0xFFFFFFFF)
  mask = valid[:, :, None]
  low = jax.ops.segment_min(jnp.min(jnp.where(mask, words, top), axis=0), group_ids, num_groups)
  high = jax.ops.segment_max(jnp.max(jnp.where(mask, words, 0), axis=0), group_ids, num_groups)
  present = jnp.all(high >= low, axis=1)
  span = jnp.where(present[:, None], (high - low).astype(jnp.float32) + 1, 1)
  # Float32 place values: exact while the products stay below 2**24 (the only case used);
  # an overflow only makes `fits` False.
  place = jnp.cumprod(span, axis=1)
  size = jnp.where(present, place[:, -1] if span.shape[1] else 1.0, 0)
  stride = jnp.concatenate([jnp.ones_like(span[:, :1]), place[:, :-1]], axis=1)
  offset = jnp.cumsum(size) - size
  fits = jnp.sum(size) <= capacity
  # Where the layout does not fit, these integers are never used.
  stride = jnp.where(fits, stride, 0).astype(jnp.uint32)
  offset = jnp.where(fits, offset, 0).astype(jnp.uint32)
  return DirectLayout(jnp.where(present[:, None], low, 0), stride, offset, fits)


def direct_anchor_index(
  words: Array, group_ids: Array, valid: Array, layout: DirectLayout
) -> Array:
  """Slot ``[T, N]`` int32 of each row in the layout's table; 0 on invalid rows."""
  low = layout.low[group_ids][None]
  stride = layout.stride[group_ids][None]
  # uint32 arithmetic wraps only on invalid rows (outside the box), which are masked.
  slot = layout.offset[group_ids][None, :] + jnp.sum(
    (words - low) * stride, axis=2, dtype=jnp.uint32
  )
  return jnp.where(valid, slot, 0).astype(jnp.int32)
