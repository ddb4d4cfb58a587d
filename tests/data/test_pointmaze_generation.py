"""Tests of hrljax.data.pointmaze: OGBench's navigate protocol (needs the `ogbench` extra).

Small: a few hundred transitions per generated dataset.
"""

import tempfile

import jax
import numpy as np
import pytest

from hrljax.data import goal_sampler, pointmaze


@pytest.fixture(scope="module")
def small(tmp_path_factory):
  train, val = pointmaze.generate(
    "pointmaze-medium-navigate-v0",
    num_episodes=2,
    max_episode_steps=150,
    seed=3,
    num_val_episodes=1,
  )
  path = str(tmp_path_factory.mktemp("pm") / "pointmaze-medium-navigate-v0.npz")
  pointmaze.save(path, train, val)
  return train, val, path


def test_raw_layout_and_episode_ends(small):
  train, val, _ = small
  assert set(train) == set(pointmaze.RAW_KEYS)
  assert train["observations"].shape == (300, 2) and train["observations"].dtype == np.float32
  assert train["actions"].shape == (300, 2) and train["terminals"].dtype == bool
  np.testing.assert_array_equal(np.nonzero(train["terminals"])[0], [149, 299])
  np.testing.assert_array_equal(np.nonzero(val["terminals"])[0], [149])
  assert train["qpos"].shape == (300, 2) and train["qvel"].shape == (300, 2)
  assert np.abs(train["actions"]).max() <= 1.0


def test_actions_move_the_point_and_follow_the_oracle(small):
  train = small[0]
  obs, actions, terminals = train["observations"], train["actions"], train["terminals"]
  within = ~terminals[:-1]
  displacement = (obs[1:] - obs[:-1])[within]
  # the point mass moves along its (noisy) action
  cos = np.sum(displacement * actions[:-1][within], 1) / (
    np.linalg.norm(displacement, axis=1) * np.linalg.norm(actions[:-1][within], axis=1) + 1e-9
  )
  assert np.mean(cos) > 0.5
  # the oracle makes progress: the episode covers more ground than a random walk of the noise
  assert np.linalg.norm(obs[149] - obs[0]) > 1.0 or np.linalg.norm(obs[299] - obs[150]) > 1.0


def test_generation_is_deterministic_per_seed(small):
  again, _ = pointmaze.generate(
    "pointmaze-medium-navigate-v0",
    num_episodes=2,
    max_episode_steps=150,
    seed=3,
    num_val_episodes=0,
  )
  other, _ = pointmaze.generate(
    "pointmaze-medium-navigate-v0",
    num_episodes=1,
    max_episode_steps=150,
    seed=4,
    num_val_episodes=0,
  )
  for key in pointmaze.RAW_KEYS:
    np.testing.assert_array_equal(again[key], small[0][key])
  assert not np.array_equal(other["observations"], small[0]["observations"][:150])


@pytest.mark.parametrize("name", ["pointmaze-medium-navigate-v0", "pointmaze-giant-navigate-v0"])
def test_oracle_table_matches_the_mazes_bfs(name):
  env = pointmaze.make_env(name)
  maze = env.unwrapped
  table = pointmaze.oracle_next_cells(maze.maze_map)
  free = pointmaze.free_cells(maze.maze_map)
  rng = np.random.default_rng(0)
  for _ in range(60):
    start = free[rng.integers(len(free))]
    goal = free[rng.integers(len(free))]
    # points anywhere inside the cells, as the agent and the noisy goal are
    xy = np.asarray(maze.ij_to_xy(start)) + rng.uniform(-1.9, 1.9, size=2)
    goal_xy = np.asarray(maze.ij_to_xy(goal)) + rng.uniform(-1.0, 1.0, size=2)
    expected, _ = maze.get_oracle_subgoal(xy, goal_xy)
    gi, gj = maze.xy_to_ij(goal_xy)
    i, j = maze.xy_to_ij(xy)
    np.testing.assert_array_equal(maze.ij_to_xy(tuple(table[gi, gj, i, j])), expected)
  env.close()


def test_oracle_table_on_a_small_maze():
  maze = np.array(
    [[1, 1, 1, 1, 1], [1, 0, 0, 0, 1], [1, 0, 1, 0, 1], [1, 0, 0, 0, 1], [1, 1, 1, 1, 1]]
  )
  table = pointmaze.oracle_next_cells(maze)
  # from (3, 3) to (1, 1) both ways round are 4 cells long: the first strictly closer neighbour
  # in the order up, left, down, right wins (up)
  np.testing.assert_array_equal(table[1, 1, 3, 3], [2, 3])
  np.testing.assert_array_equal(table[1, 1, 1, 1], [1, 1])  # at the goal: stay
  np.testing.assert_array_equal(table[1, 1, 2, 1], [1, 1])
  np.testing.assert_array_equal(table[1, 1, 1, 3], [1, 2])


def test_loader_matches_ogbench_and_feeds_the_sampler(small, tmp_path, monkeypatch):
  import ogbench

  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where OGBench leaves the maze's model
  _, _, path = small
  ours = pointmaze.load(path)
  _, train, val = ogbench.make_env_and_datasets("pointmaze-medium-navigate-v0", dataset_path=path)
  for key in ("observations", "actions", "next_observations", "terminals"):
    np.testing.assert_array_equal(ours[key], train[key])
  assert ours["observations"].shape == (298, 2)
  assert val["observations"].shape == (149, 2)
  data = goal_sampler.from_arrays(ours)
  np.testing.assert_array_equal(np.asarray(data.traj_end)[[0, 148, 149, 297]], [148, 148, 297, 297])
  config = goal_sampler.SamplerConfig(
    value=goal_sampler.GoalDistribution(0.2, 0.5, 0.3, True),
    actor=goal_sampler.GoalDistribution(0.0, 1.0, 0.0, False),
    gamma=0.99,
  )
  batch = goal_sampler.sample_gc_batch(jax.random.key(0), data, 16, config)
  assert batch["value_goals"].shape == (16, 2)


def test_maze_cells_follow_ogbench_rules():
  # 1 = wall. (1, 2) is a horizontal hallway, (2, 1) a vertical one; corners are goal cells.
  maze = np.array(
    [[1, 1, 1, 1, 1], [1, 0, 0, 0, 1], [1, 0, 1, 1, 1], [1, 0, 0, 1, 1], [1, 1, 1, 1, 1]]
  )
  assert pointmaze.free_cells(maze) == [(1, 1), (1, 2), (1, 3), (2, 1), (3, 1), (3, 2)]
  assert pointmaze.goal_cells(maze) == [(1, 1), (1, 3), (3, 1), (3, 2)]
  env = pointmaze.make_env("pointmaze-medium-navigate-v0")
  goals = pointmaze.goal_cells(env.unwrapped.maze_map)
  assert len(goals) < len(pointmaze.free_cells(env.unwrapped.maze_map))
  env.close()


def test_making_a_maze_leaves_no_temporary_file_and_restores_the_temporary_directory(
  tmp_path, monkeypatch
):
  """OGBench writes each maze's model to a temporary file and never deletes it; `make_env` makes
  the env inside a directory of its own that it removes, and the env still steps."""
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  env = pointmaze.make_env("pointmaze-medium-navigate-v0")
  assert list(tmp_path.iterdir()) == []
  assert tempfile.gettempdir() == str(tmp_path)
  env.reset(seed=0)
  observation, *_ = env.step(np.zeros(2, np.float32))
  assert np.all(np.isfinite(observation))
  env.close()


def test_bad_names_and_arguments():
  with pytest.raises(ValueError, match="env: expected one of"):
    pointmaze.parse_name("antmaze-medium-navigate-v0")
  with pytest.raises(ValueError, match="num_episodes"):
    pointmaze.generate("pointmaze-medium-navigate-v0", num_episodes=0)
  with pytest.raises(ValueError, match="path"):
    pointmaze.validation_path("data/x.npy")
  assert pointmaze.validation_path("d/x.npz") == "d/x-val.npz"
