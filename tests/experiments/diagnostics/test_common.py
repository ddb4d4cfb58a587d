"""Tests of experiments/diagnostics/common.py: the seeds' keys are experiments.train's, and the
cached BC start equals the computed one."""

import os

import jax
import ml_collections
import numpy as np

from experiments.diagnostics import common
from hrljax.agents import archer


def test_keys_are_the_init_and_evaluation_keys_of_experiments_train():
  data = lambda keys: np.asarray(jax.random.key_data(keys))
  for seed, init_key, eval_key in zip(
    (0, 3), data(common.init_keys((0, 3))), data(common.eval_keys((0, 3)))
  ):
    want_init, want_eval = jax.random.split(jax.random.key(seed))
    np.testing.assert_array_equal(init_key, jax.random.key_data(want_init))
    np.testing.assert_array_equal(eval_key, jax.random.key_data(want_eval))


def test_warm_start_cache_returns_the_computed_start(tmp_path):
  """The cached BC start equals the computed one, and the cache file depends on the BC fields and
  the seeds."""
  config = archer.get_config()
  config.update(
    dict(
      env_kwargs=ml_collections.ConfigDict(dict(num_items=4, num_attributes=2, max_turns=3)),
      d_model=16,
      num_layers=1,
      num_heads=2,
      bc_steps=2,
      bc_batch_size=8,
      bc_dataset_episodes=4,
    )
  )
  computed = common.warm_start(config, (0, 1), str(tmp_path))
  path = common.warm_start_cache_path(str(tmp_path), config, (0, 1))
  assert os.path.exists(path)
  cached = common.warm_start(config, (0, 1), str(tmp_path))
  for a, b in zip(jax.tree.leaves(computed), jax.tree.leaves(cached)):
    np.testing.assert_array_equal(a, b)
  config.bc_steps = 3
  assert common.warm_start_cache_path(str(tmp_path), config, (0, 1)) != path
  assert common.warm_start_cache_path(
    str(tmp_path), config, (0, 2)
  ) != common.warm_start_cache_path(str(tmp_path), config, (0, 1))


def test_parse_seeds():
  assert common.parse_seeds("0,1,2") == (0, 1, 2)
  assert common.parse_seeds("7") == (7,)
