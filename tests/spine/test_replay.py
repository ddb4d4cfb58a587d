"""Tests of hrljax.replay: ring-buffer order, sampling support, pytree items, jit/vmap, keys."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hrljax import replay


# Compiled once per item shape and shared by the tests (eager dispatch would compile every op).
add = jax.jit(replay.add)
sample = jax.jit(replay.sample, static_argnums=2)


def numbered_items(start: int, count: int) -> dict:
  """Items whose every leaf encodes the item's number (1-based, so 0 means 'never written')."""
  numbers = np.arange(start, start + count)
  return {
    "obs": np.stack([numbers, -numbers], axis=1).astype(np.float32),
    "tokens": (np.repeat(numbers[:, None], 3, axis=1).astype(np.int32),),
    "done": numbers % 2 == 0,
  }


EXAMPLE = jax.tree.map(lambda x: x[0], numbered_items(1, 1))


def reference_ring(adds: list[int], capacity: int) -> tuple[list[int], int, int]:
  """Slots after writing items 1, 2, ... one by one into a Python list ring."""
  slots, position, size, number = [0] * capacity, 0, 0, 1
  for count in adds:
    for _ in range(count):
      slots[position] = number
      position = (position + 1) % capacity
      size = min(size + 1, capacity)
      number += 1
  return slots, position, size


def test_init_allocates_zeros_with_item_shapes_and_dtypes():
  buffer = replay.init(EXAMPLE, capacity=7)
  assert buffer.capacity == 7
  assert buffer.storage["obs"].shape == (7, 2) and buffer.storage["obs"].dtype == jnp.float32
  assert buffer.storage["tokens"][0].shape == (7, 3)
  assert buffer.storage["tokens"][0].dtype == jnp.int32
  assert buffer.storage["done"].dtype == jnp.bool_
  assert int(buffer.size) == 0 and int(buffer.position) == 0
  assert all(not np.any(np.asarray(x)) for x in jax.tree.leaves(buffer.storage))
  abstract = replay.init({"tokens": jax.ShapeDtypeStruct((2, 3), jnp.int8)}, 4)
  assert abstract.storage["tokens"].shape == (4, 2, 3)
  assert abstract.storage["tokens"].dtype == jnp.int8


def test_add_wraps_around_overwriting_the_oldest_items():
  buffer = replay.init(EXAMPLE, capacity=5)
  buffer = add(buffer, numbered_items(1, 3))  # slots 0-2 <- items 1-3
  buffer = add(buffer, numbered_items(4, 4))  # slots 3, 4, 0, 1 <- items 4-7
  np.testing.assert_array_equal(buffer.storage["obs"][:, 0], [6, 7, 3, 4, 5])
  np.testing.assert_array_equal(buffer.storage["obs"][:, 1], [-6, -7, -3, -4, -5])
  np.testing.assert_array_equal(buffer.storage["tokens"][0][:, 2], [6, 7, 3, 4, 5])
  np.testing.assert_array_equal(buffer.storage["done"], [True, False, False, True, False])
  assert int(buffer.position) == 2 and int(buffer.size) == 5


@settings(max_examples=25, deadline=None)
@given(capacity=st.sampled_from([1, 4]), adds=st.lists(st.integers(0, 6), min_size=1, max_size=5))
def test_any_sequence_of_adds_matches_writing_items_one_by_one(capacity, adds):
  buffer, number = replay.init(EXAMPLE, capacity), 1
  for count in adds:
    buffer = add(buffer, numbered_items(number, count))
    number += count
  slots, position, size = reference_ring(adds, capacity)
  np.testing.assert_array_equal(buffer.storage["tokens"][0][:, 0], slots)
  assert (int(buffer.position), int(buffer.size)) == (position, size)


def test_sampling_never_returns_unwritten_slots():
  buffer = add(replay.init(EXAMPLE, capacity=10), numbered_items(1, 3))
  batch = sample(buffer, jax.random.key(0), 2000)
  numbers = np.asarray(batch["tokens"][0][:, 0])
  assert set(numbers.tolist()) == {1, 2, 3}  # slots 3-9 (zeros) never appear
  # Every leaf of one sampled item comes from the same slot.
  np.testing.assert_array_equal(batch["obs"][:, 0], numbers)
  np.testing.assert_array_equal(batch["done"], numbers % 2 == 0)


def test_sampling_is_uniform_over_stored_items_after_wrap_around():
  buffer = replay.init(EXAMPLE, capacity=4)
  buffer = add(buffer, numbered_items(1, 6))  # holds items 3, 4, 5, 6
  numbers = np.asarray(sample(buffer, jax.random.key(1), 8000)["tokens"][0][:, 0])
  counts = np.bincount(numbers, minlength=7)
  assert counts[:3].sum() == 0
  # 2000 expected per item; the binomial std is ~39, so 5 std is a loose bound.
  np.testing.assert_allclose(counts[3:], 2000, atol=200)


def test_same_key_same_sample_and_different_key_different_sample():
  buffer = add(replay.init(EXAMPLE, capacity=50), numbered_items(1, 50))
  first = sample(buffer, jax.random.key(3), 16)
  again = sample(buffer, jax.random.key(3), 16)
  other = sample(buffer, jax.random.key(4), 16)
  chex.assert_trees_all_equal(first, again)
  assert not np.array_equal(first["obs"], other["obs"])


def test_jit_matches_eager_and_works_inside_scan():
  def fill(buffer, start):
    return add(buffer, numbered_items_traced(start)), None

  def numbered_items_traced(start):
    numbers = start + jnp.arange(3)
    return {
      "obs": jnp.stack([numbers, -numbers], axis=1).astype(jnp.float32),
      "tokens": (numbers[:, None] * jnp.ones((1, 3), jnp.int32),),
      "done": numbers % 2 == 0,
    }

  starts = jnp.arange(1, 13, 3)  # 4 adds of 3 items into capacity 5
  scanned, _ = jax.jit(lambda b: jax.lax.scan(fill, b, starts))(replay.init(EXAMPLE, 5))
  eager = replay.init(EXAMPLE, 5)
  for start in [1, 4, 7, 10]:
    eager = replay.add(eager, numbered_items(start, 3))
  chex.assert_trees_all_equal(scanned, eager)


def test_vmap_over_independent_buffers():
  """One buffer per seed: vmapped add and sample act on each buffer separately."""
  single = replay.init(EXAMPLE, 4)
  buffers = jax.tree.map(lambda x: jnp.stack([x, x]), single)
  items = jax.tree.map(lambda a, b: np.stack([a, b]), numbered_items(1, 2), numbered_items(11, 2))
  buffers = jax.jit(jax.vmap(replay.add))(buffers, items)
  np.testing.assert_array_equal(buffers.size, [2, 2])
  np.testing.assert_array_equal(
    buffers.storage["tokens"][0][:, :, 0], [[1, 2, 0, 0], [11, 12, 0, 0]]
  )
  keys = jax.random.split(jax.random.key(0), 2)
  samples = jax.jit(jax.vmap(lambda b, k: sample(b, k, 64)))(buffers, keys)
  assert set(np.asarray(samples["tokens"][0][0, :, 0]).tolist()) <= {1, 2}
  assert set(np.asarray(samples["tokens"][0][1, :, 0]).tolist()) <= {11, 12}


def test_add_casts_to_the_storage_dtype():
  buffer = replay.init({"x": jnp.zeros((), jnp.float32)}, 3)
  buffer = add(buffer, {"x": np.arange(2, dtype=np.int32)})
  assert buffer.storage["x"].dtype == jnp.float32
  np.testing.assert_array_equal(buffer.storage["x"], [0.0, 1.0, 0.0])


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True])
def test_init_rejects_bad_capacity(capacity):
  with pytest.raises(ValueError, match="capacity: expected an integer > 0"):
    replay.init(EXAMPLE, capacity)


def test_init_rejects_an_empty_example():
  with pytest.raises(ValueError, match="example_item: expected a pytree with at least one"):
    replay.init({}, 4)


def test_add_rejects_wrong_item_shapes_and_structures():
  buffer = replay.init(EXAMPLE, 4)
  bad_shape = numbered_items(1, 2)
  bad_shape["obs"] = jnp.zeros((2, 5))
  with pytest.raises(ValueError, match=r"items: expected leaves shaped \[batch, \*\(2,\)\]"):
    add(buffer, bad_shape)
  unbatched = jax.tree.map(lambda x: x[0], numbered_items(1, 1))
  with pytest.raises(ValueError, match="items: expected leaves shaped"):
    add(buffer, unbatched)
  ragged = numbered_items(1, 2)
  ragged["done"] = jnp.zeros((3,), bool)
  with pytest.raises(ValueError, match="items: expected one leading batch size"):
    add(buffer, ragged)
  with pytest.raises(AssertionError):
    add(buffer, {"obs": jnp.zeros((2, 2))})


@pytest.mark.parametrize("batch_size", [0, -1, 3.0])
def test_sample_rejects_bad_batch_size(batch_size):
  buffer = replay.init(EXAMPLE, 4)
  with pytest.raises(ValueError, match="batch_size: expected an integer > 0"):
    sample(buffer, jax.random.key(0), batch_size)


def test_add_masked_stores_only_the_valid_items_in_order_and_wraps():
  buffer = replay.init(jnp.zeros((2,)), 5)
  items = jnp.arange(8.0).reshape(4, 2)
  buffer = replay.add_masked(buffer, items, jnp.asarray([True, False, True, True]))
  assert int(buffer.size) == 3 and int(buffer.position) == 3
  np.testing.assert_array_equal(buffer.storage[:3], [[0, 1], [4, 5], [6, 7]])
  buffer = replay.add_masked(buffer, items + 10, jnp.asarray([False, True, True, True]))
  # Slots 3, 4, then 0 (the oldest item is overwritten).
  assert int(buffer.size) == 5 and int(buffer.position) == 1
  np.testing.assert_array_equal(buffer.storage, [[16, 17], [4, 5], [6, 7], [12, 13], [14, 15]])
  unchanged = replay.add_masked(buffer, items, jnp.zeros((4,), bool))
  np.testing.assert_array_equal(unchanged.storage, buffer.storage)
  assert int(unchanged.position) == 1
  with pytest.raises(ValueError, match="capacity"):
    replay.add_masked(replay.init(jnp.zeros((2,)), 3), items, jnp.ones((4,), bool))
  with pytest.raises(ValueError, match="valid: expected shape"):
    replay.add_masked(replay.init(jnp.zeros((2,)), 5), items, jnp.ones((3,), bool))
