"""A device-resident replay buffer: a ring buffer held in a pytree, with jittable add and sample.

The buffer stores items of any pytree structure (transitions, utterance-level transitions, token
arrays, goals): every leaf of an example item gets a storage array `[capacity, *leaf.shape]`.
`add` writes a batch of items (leading axis = batch) at the insert position, wrapping around and
overwriting the oldest items once full (`add_masked`: only the items a mask selects); `sample`
draws a batch uniformly, with replacement, from the items written so far. All these functions are
pure, so they run under `jit`, `vmap` (one buffer per seed) and inside `lax.scan`, and the buffer
checkpoints with the rest of a run state.

Placement on a mesh: the buffer is ordinary run-state data. Replicating it (every device holds
the whole buffer and draws the same sample from the same key) is always correct; off-policy
agents in hrljax do that and shard only the per-environment carry.
"""

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from hrljax.types import Array, PyTree


class ReplayBuffer(struct.PyTreeNode):
  """Ring-buffer storage and its two counters.

  `storage` has the structure of one item with every leaf `[capacity, ...]`; `position` (int32
  scalar) is the slot the next item goes to and `size` (int32 scalar) the number of slots written
  so far (at most `capacity`). Slots at or beyond `size` hold zeros and are never sampled.
  """

  storage: PyTree
  position: Array
  size: Array

  @property
  def capacity(self) -> int:
    return jax.tree.leaves(self.storage)[0].shape[0]


def init(example_item: PyTree, capacity: int) -> ReplayBuffer:
  """An empty buffer for `capacity` items shaped like `example_item` (one item, no batch axis).

  Only the shapes and dtypes of `example_item` matter (arrays or `jax.ShapeDtypeStruct`s).
  """
  if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
    raise ValueError(f"capacity: expected an integer > 0, got {capacity!r}")
  leaves = jax.tree.leaves(example_item)
  if not leaves:
    raise ValueError(
      f"example_item: expected a pytree with at least one array leaf, got {example_item!r}"
    )
  storage = jax.tree.map(
    lambda x: jnp.zeros((capacity,) + tuple(jnp.shape(x)), _dtype(x)), example_item
  )
  return ReplayBuffer(
    storage=storage, position=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32)
  )


def add(buffer: ReplayBuffer, items: PyTree) -> ReplayBuffer:
  """Writes a batch of items (every leaf `[B, ...]`) at the insert position, oldest first.

  Items go to slots `position, position + 1, ...` modulo the capacity, so once the buffer is full
  the oldest items are overwritten. A batch larger than the capacity keeps only its last
  `capacity` items (what writing them one by one would leave). Dtypes are cast to the storage's.
  """
  chex.assert_trees_all_equal_structs(items, buffer.storage)
  batch_size = _batch_size(items, buffer.storage)
  capacity = buffer.capacity
  kept = min(batch_size, capacity)
  # Slots of the kept items: the ones the last `kept` writes of a one-by-one loop would hit.
  first = buffer.position + (batch_size - kept)
  slots = (first + jnp.arange(kept, dtype=jnp.int32)) % capacity
  storage = jax.tree.map(
    lambda store, x: store.at[slots].set(x[batch_size - kept :].astype(store.dtype)),
    buffer.storage,
    items,
  )
  return ReplayBuffer(
    storage=storage,
    position=((buffer.position + batch_size) % capacity).astype(jnp.int32),
    size=jnp.minimum(buffer.size + batch_size, capacity).astype(jnp.int32),
  )


def add_masked(buffer: ReplayBuffer, items: PyTree, valid: Array) -> ReplayBuffer:
  """`add` of only the items where `valid` (`[B]` bool), in their order; the others are dropped.

  For producers that emit a variable number of items into fixed `[B]` slots with a mask (the
  two-rate rollout's option (b), whose decisions end at the reflex). Valid items go to
  consecutive slots (their rank among the valid ones); invalid ones to an out-of-range slot that
  the scatter drops. `B` may not exceed the capacity (the kept items would be ambiguous).
  """
  chex.assert_trees_all_equal_structs(items, buffer.storage)
  batch_size = _batch_size(items, buffer.storage)
  if batch_size > buffer.capacity:
    raise ValueError(
      f"items: expected at most the buffer's capacity ({buffer.capacity}) items "
      f"per masked add, got {batch_size}"
    )
  if valid.shape != (batch_size,):
    raise ValueError(f"valid: expected shape ({batch_size},), got {valid.shape}")
  count = valid.sum(dtype=jnp.int32)
  rank = jnp.cumsum(valid.astype(jnp.int32)) - 1
  slots = jnp.where(valid, (buffer.position + rank) % buffer.capacity, buffer.capacity)
  storage = jax.tree.map(
    lambda store, x: store.at[slots].set(x.astype(store.dtype), mode="drop"), buffer.storage, items
  )
  return ReplayBuffer(
    storage=storage,
    position=((buffer.position + count) % buffer.capacity).astype(jnp.int32),
    size=jnp.minimum(buffer.size + count, buffer.capacity).astype(jnp.int32),
  )


def sample(buffer: ReplayBuffer, key: Array, batch_size: int) -> PyTree:
  """`batch_size` items drawn uniformly with replacement from the `size` items written so far.

  Returns a pytree shaped like the storage with leading axis `batch_size`. Sampling from an empty
  buffer returns the zeros of slot 0 (it cannot raise under `jit`); callers wait until
  `buffer.size` is large enough, e.g. with a `learning_starts` count.
  """
  indices = sample_indices(buffer, key, batch_size)
  return jax.tree.map(lambda store: store[indices], buffer.storage)


def sample_indices(buffer: ReplayBuffer, key: Array, batch_size: int) -> Array:
  """The int32 `[batch_size]` slot indices `sample` reads: uniform over `[0, size)`."""
  if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
    raise ValueError(f"batch_size: expected an integer > 0, got {batch_size!r}")
  upper = jnp.maximum(buffer.size, 1)
  return jax.random.randint(key, (batch_size,), 0, upper, dtype=jnp.int32)


def _dtype(x: Any):
  return x.dtype if hasattr(x, "dtype") else jnp.asarray(x).dtype


def _batch_size(items: PyTree, storage: PyTree) -> int:
  """The common leading axis of `items`, after checking each leaf's trailing shape."""
  sizes = set()
  for item, store in zip(jax.tree.leaves(items), jax.tree.leaves(storage)):
    shape = jnp.shape(item)
    if len(shape) != store.ndim or tuple(shape[1:]) != tuple(store.shape[1:]):
      raise ValueError(
        f"items: expected leaves shaped [batch, *{tuple(store.shape[1:])}] "
        f"like the buffer's items, got a leaf of shape {tuple(shape)}"
      )
    sizes.add(shape[0])
  if len(sizes) != 1:
    raise ValueError(f"items: expected one leading batch size for every leaf, got {sorted(sizes)}")
  return sizes.pop()
