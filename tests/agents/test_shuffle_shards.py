"""The per-shard minibatch shuffle of the PPO-based agents (`shuffle_shards`): each minibatch takes
an equal slice of every group of environments, each group is permuted on its own, one shard is
the whole-batch shuffle, and bad values are one-line errors. That an 8-device run with 8 shards
gathers no batch and equals the one-device run is checked in `tests/agents/test_eight_devices.py`.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from hrljax.agents import common, ppo
from hrljax.config_checks import ConfigError

T, NUM_ENVS, SHARDS, MINIBATCHES = 6, 8, 4, 3


def test_shard_major_order_puts_each_group_of_environments_together():
  # sample t * NUM_ENVS + e carries its environment e and its time t
  t, e = np.meshgrid(np.arange(T), np.arange(NUM_ENVS), indexing="ij")
  flat = jnp.asarray(np.stack([t, e], -1).reshape(T * NUM_ENVS, 2))
  shards = np.asarray(common.to_shard_major(flat, SHARDS, NUM_ENVS))
  per_shard = NUM_ENVS // SHARDS
  assert shards.shape == (SHARDS, T * per_shard, 2)
  for shard, block in enumerate(shards):
    assert set(block[:, 1]) == set(range(shard * per_shard, (shard + 1) * per_shard))
    # within a shard: time-major, then environment
    np.testing.assert_array_equal(block[:, 0], np.repeat(np.arange(T), per_shard))


def test_every_minibatch_takes_an_equal_slice_of_every_shard_and_each_shard_is_permuted():
  per_shard = T * NUM_ENVS // SHARDS
  perms = np.asarray(common.shard_permutations(jax.random.key(3), SHARDS, per_shard))
  assert perms.shape == (SHARDS, per_shard)
  for perm in perms:
    assert sorted(perm) == list(range(per_shard))
    assert not np.array_equal(perm, np.arange(per_shard))  # a real shuffle
  assert not np.array_equal(perms[0], perms[1])  # each shard its own
  # sample (shard s, position p) carries the value 1000 s + p
  x = jnp.asarray(1000 * np.arange(SHARDS)[:, None] + np.arange(per_shard)[None, :])
  minibatches = np.asarray(common.shard_minibatches(x, jnp.asarray(perms), MINIBATCHES))
  slice_size = per_shard // MINIBATCHES
  assert minibatches.shape == (MINIBATCHES, SHARDS * slice_size)
  for m, minibatch in enumerate(minibatches):
    for shard, part in enumerate(minibatch.reshape(SHARDS, slice_size)):
      np.testing.assert_array_equal(
        part, 1000 * shard + perms[shard, m * slice_size : (m + 1) * slice_size]
      )


def test_one_shard_is_the_whole_batch_shuffle():
  """`shuffle_shards=1` takes the whole-batch path: the minibatches are those of
  `jax.random.permutation` of all samples (what the equality with one device rests on)."""
  batch = jnp.arange(T * NUM_ENVS, dtype=jnp.float32)

  class Agent(struct.PyTreeNode):
    key: jax.Array
    seen: jax.Array  # the minibatches, in the order the steps get them
    step: jax.Array

  def step(agent, minibatch):
    seen = agent.seen.at[agent.step].set(minibatch)
    return agent.replace(seen=seen, step=agent.step + 1), {"x": jnp.sum(minibatch)}

  start = Agent(
    key=jax.random.key(5), seen=jnp.zeros((MINIBATCHES, T * NUM_ENVS // MINIBATCHES)), step=0
  )
  agent, _ = common.minibatch_epochs(start, batch, step, MINIBATCHES, 1)
  _, perm_key = jax.random.split(jax.random.key(5))
  expected = jax.random.permutation(perm_key, T * NUM_ENVS).reshape(MINIBATCHES, -1)
  np.testing.assert_array_equal(np.asarray(agent.seen), np.asarray(expected))


def tiny_config(**overrides):
  config = ppo.get_config()
  config.update(num_envs=NUM_ENVS, num_steps=T, total_timesteps=T * NUM_ENVS * 2)
  config.update(num_minibatches=MINIBATCHES, update_epochs=1, hidden_sizes=(8,))
  config.update(overrides)
  return config


def test_a_sharded_update_trains_on_every_sample_once_per_epoch():
  """The same minibatch losses in another order: the sharded and the whole-batch update start from
  the same parameters, so their first-epoch mean loss over all samples agrees when the gradient
  steps are too small to matter."""
  results = {}
  for shards in (1, SHARDS):
    config = tiny_config(shuffle_shards=shards, learning_rate=1e-12)
    ppo.validate_config(config)
    learner = ppo.make_learner(config)
    _, metrics = jax.jit(learner.step)(learner.init(jax.random.key(0)))
    results[shards] = float(metrics["value_loss"])
  assert results[SHARDS] == pytest.approx(results[1], rel=1e-4)


def test_flattening_a_rollout_packed_equals_a_reshape_per_leaf_bit_for_bit():
  """`flatten_time_major` moves the 32-bit leaves through one packed array: every leaf, of every
  dtype and trailing shape, comes out as its own reshape (as `packed=False` gives it), NaN
  payloads and -0.0 included."""
  rng = np.random.default_rng(0)
  values = rng.normal(size=(T, NUM_ENVS, 3)).astype(np.float32)
  values[0, 0, 0], values[1, 2, 1] = np.nan, -0.0
  tree = {
    "obs": {"x": jnp.asarray(values), "f16": jnp.asarray(values[..., :2], jnp.float16)},
    "action": jnp.asarray(rng.integers(-5, 5, (T, NUM_ENVS)), jnp.int32),
    "mask": jnp.asarray(rng.random((T, NUM_ENVS)) < 0.5),
    "code": jnp.asarray(rng.integers(0, 2**32, (T, NUM_ENVS, 2, 2)), jnp.uint32),
  }
  flat = jax.jit(common.flatten_time_major)(tree)
  unpacked = jax.jit(common.flatten_time_major, static_argnums=1)(tree, False)
  for leaves in zip(jax.tree.leaves(flat), jax.tree.leaves(unpacked), jax.tree.leaves(tree)):
    *got, leaf = leaves
    want = np.asarray(leaf).reshape((T * NUM_ENVS,) + leaf.shape[2:])
    for x in got:
      assert x.dtype == leaf.dtype and x.shape == want.shape
      np.testing.assert_array_equal(np.asarray(x).view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize(
  "overrides, message",
  [
    ({"shuffle_shards": 0}, "config.shuffle_shards: expected an integer > 0, got 0"),
    ({"shuffle_shards": 3}, "config.num_envs: expected a multiple of shuffle_shards (3), got 8"),
    (
      {"shuffle_shards": 8, "num_minibatches": 4},
      "config.shuffle_shards: expected num_envs * num_steps (48) to split into num_minibatches (4)",
    ),
  ],
)
def test_bad_shard_counts_are_one_line_errors(overrides, message):
  with pytest.raises(ConfigError, match=re.escape(message)):
    ppo.validate_config(tiny_config(**overrides))
