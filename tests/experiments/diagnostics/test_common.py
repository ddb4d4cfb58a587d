"""Tests of experiments/diagnostics/common.py: the seeds' keys are experiments.train's, and the
cached BC start equals the computed one."""

import os

import jax
import ml_collections
import numpy as np

from experiments.diagnostics import common
from hrljax import warm_start as ws
from hrljax.agents import archer
from hrljax.agents import token_common as tc


def test_keys_are_the_init_and_evaluation_keys_of_experiments_train():
  data = lambda keys: np.asarray(jax.random.key_data(keys))
  for seed, init_key, eval_key in zip(
    (0, 3), data(common.init_keys((0, 3))), data(common.eval_keys((0, 3)))
  ):
    want_init, want_eval = jax.random.split(jax.random.key(seed))
    np.testing.assert_array_equal(init_key, jax.random.key_data(want_init))
    np.testing.assert_array_equal(eval_key, jax.random.key_data(want_eval))


def test_warm_start_cache_returns_the_computed_start(tmp_path):
  """The cached BC start equals the computed one, in the entries of the training loop's cache."""
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
  assert len(os.listdir(tmp_path)) == 2  # one entry per seed, as experiments.train writes them
  cached = common.warm_start(config, (0, 1), str(tmp_path))
  for a, b in zip(jax.tree.leaves(computed), jax.tree.leaves(cached), strict=True):
    np.testing.assert_array_equal(a, b)
  # The entries are the training loop's: named by the seed's init key and the BC fields.
  warm = tc.warm_start(config)
  for key in common.init_keys((0, 1)):
    assert os.path.exists(tmp_path / ws.entry_name(warm.fields, key))


def test_parse_seeds():
  assert common.parse_seeds("0,1,2") == (0, 1, 2)
  assert common.parse_seeds("7") == (7,)
