"""Shared fixtures of the offline goal-conditioned agent tests (the random walk is in
`tests/conftest.py`, shared with the every-preset smoke test)."""

import numpy as np
import pytest


def write_indexed_walk(path, episodes=5, steps=40):
  """A raw file whose observation of row j is (j, episode of j): sampled observations reveal the
  dataset row they came from, so index arithmetic can be checked on a sampled batch."""
  rows = episodes * steps
  obs = np.stack([np.arange(rows), np.repeat(np.arange(episodes), steps)], 1).astype(np.float32)
  terminals = (np.arange(rows) % steps) == steps - 1
  actions = np.zeros((rows, 2), np.float32)
  np.savez_compressed(path, observations=obs, actions=actions, terminals=terminals)
  return str(path)


@pytest.fixture(scope="session")
def indexed_walk_path(tmp_path_factory):
  """5 episodes of 40 steps whose observations are (raw row, episode)."""
  return write_indexed_walk(tmp_path_factory.mktemp("indexed") / "indexed.npz")
