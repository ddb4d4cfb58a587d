"""Shared fixtures of the offline goal-conditioned agent tests: tiny OGBench-layout datasets."""

import numpy as np
import pytest


def write_random_walk(path, episodes=4, steps=60, seed=0):
  """A raw OGBench-layout file: 2-D positions moved by the clipped actions (no ogbench needed)."""
  rng = np.random.default_rng(seed)
  obs, actions, terminals = [], [], []
  for _ in range(episodes):
    pos = rng.uniform(0, 5, size=2)
    for t in range(steps):
      action = np.clip(rng.normal(0, 0.7, size=2), -1, 1)
      obs.append(pos.copy())
      actions.append(action)
      terminals.append(t == steps - 1)
      pos = pos + 0.1 * action
  np.savez_compressed(path, observations=np.asarray(obs, np.float32),
                      actions=np.asarray(actions, np.float32), terminals=np.asarray(terminals))
  return str(path)


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
def random_walk_path(tmp_path_factory):
  """4 random-walk episodes of 60 steps in OGBench's raw layout (a path to the .npz)."""
  return write_random_walk(tmp_path_factory.mktemp("walk") / "walk.npz")


@pytest.fixture(scope="session")
def indexed_walk_path(tmp_path_factory):
  """5 episodes of 40 steps whose observations are (raw row, episode)."""
  return write_indexed_walk(tmp_path_factory.mktemp("indexed") / "indexed.npz")
