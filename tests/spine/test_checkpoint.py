"""Tests of hrljax.checkpoint: round trips of typed keys, shardings, metadata, pruning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from jax.sharding import PartitionSpec as P

from hrljax import distributed
from hrljax.checkpoint import Checkpointer


class State(struct.PyTreeNode):
  params: dict
  key: jax.Array
  per_env: jax.Array
  step: jax.Array


def _state(seed: int) -> State:
  return State(
    params={"w": jnp.arange(6.0).reshape(2, 3) * seed, "b": jnp.ones(3) * seed},
    key=jax.random.key(seed),
    per_env=jnp.arange(4) + seed,
    step=jnp.asarray(seed, jnp.int32),
  )


def test_round_trip_keeps_type_typed_key_and_sharding(tmp_path):
  mesh = distributed.make_mesh(1)
  state = _state(3)
  shardings = distributed.data_parallel_shardings(state, mesh, "per_env")
  state = distributed.place(state, shardings)
  checkpointer = Checkpointer(str(tmp_path / "ckpt"))
  checkpointer.save(7, state, metadata={"update": 7, "note": "x"})
  checkpointer.wait()
  like = distributed.place(_state(0), shardings)
  restored = checkpointer.restore(like)
  assert isinstance(restored, State)
  np.testing.assert_array_equal(jax.random.key_data(restored.key), jax.random.key_data(state.key))
  np.testing.assert_array_equal(restored.params["w"], state.params["w"])
  np.testing.assert_array_equal(restored.per_env, state.per_env)
  assert restored.per_env.sharding.spec == P("data")
  assert restored.params["w"].sharding.spec == P()
  assert checkpointer.restore_metadata() == {"update": 7, "note": "x"}
  checkpointer.close()


def test_keeps_only_the_newest_checkpoints(tmp_path):
  checkpointer = Checkpointer(str(tmp_path / "ckpt"), max_to_keep=2)
  for step in (1, 2, 3):
    checkpointer.save(step, _state(step))
  checkpointer.wait()
  assert checkpointer.all_steps() == [2, 3]
  assert checkpointer.latest_step() == 3
  assert int(checkpointer.restore(_state(0)).step) == 3
  assert int(checkpointer.restore(_state(0), step=2).step) == 2
  checkpointer.close()


def test_restore_without_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    Checkpointer(str(tmp_path / "empty")).restore(_state(0))


@pytest.mark.parametrize("change", ["extra field", "other shape"])
def test_restoring_into_another_state_names_the_checkpoint_in_one_line(tmp_path, change):
  checkpointer = Checkpointer(str(tmp_path / "ckpt"))
  checkpointer.save(7, _state(1))
  checkpointer.wait()
  if change == "extra field":  # e.g. a state field added by a newer hrljax
    like = {"state": _state(0), "new": jnp.zeros(2)}
  else:  # e.g. a wider network in the resuming config
    like = _state(0).replace(per_env=jnp.arange(5))
  with pytest.raises(ValueError) as raised:  # CheckpointMismatch is a ValueError
    checkpointer.restore(like)
  message = str(raised.value)
  assert type(raised.value).__name__ == "CheckpointMismatch"
  assert message.startswith(f"checkpoint 7 in {tmp_path / 'ckpt'} does not fit the run state")
  assert "\n" not in message and "new --workdir" in message


def test_restore_accepts_an_abstract_state_with_typed_keys(tmp_path):
  """`like` may be `jax.eval_shape` output (how the plotting tools restore an agent)."""
  checkpointer = Checkpointer(str(tmp_path / "ckpt"))
  checkpointer.save(3, _state(2))
  checkpointer.wait()
  restored = checkpointer.restore(jax.eval_shape(lambda: _state(0)))
  assert int(restored.step) == 2
  np.testing.assert_array_equal(
    jax.random.key_data(restored.key), jax.random.key_data(jax.random.key(2))
  )
