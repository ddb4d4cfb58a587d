"""Tests of hrljax.data.goal_sampler on a synthetic dataset (no ogbench needed).

Each observation is (row index, trajectory id), so a sampled batch reveals which rows it used.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.data import goal_sampler as gs
from hrljax.losses import goal_conditioned as gc

LENGTHS = (7, 30, 1, 12, 50)  # a one-row trajectory included


def synthetic_dataset():
  terminals = np.concatenate([np.eye(1, n, n - 1)[0] for n in LENGTHS]).astype(np.float32)
  traj_id = np.repeat(np.arange(len(LENGTHS)), LENGTHS).astype(np.float32)
  rows = np.arange(terminals.shape[0], dtype=np.float32)
  obs = np.stack([rows, traj_id], axis=1)
  next_obs = np.stack([rows + 1, traj_id], axis=1)
  actions = np.stack([rows, -rows], axis=1)
  return dict(observations=obs, next_observations=next_obs, actions=actions, terminals=terminals)


def reference_ends(terminals, idx):
  """OGBench's formula: terminal_locs[searchsorted(terminal_locs, idx)]."""
  locs = np.nonzero(terminals > 0)[0]
  return locs[np.searchsorted(locs, idx)]


VALUE = gs.GoalDistribution(0.2, 0.5, 0.3, True)
ACTOR = gs.GoalDistribution(0.0, 1.0, 0.0, False)
CONFIG = gs.SamplerConfig(value=VALUE, actor=ACTOR, gamma=0.9, subgoal_steps=5)


def test_trajectory_ends_match_ogbench_formula():
  data = synthetic_dataset()
  n = data["terminals"].shape[0]
  ends = np.asarray(gs.trajectory_ends(jnp.asarray(data["terminals"])))
  np.testing.assert_array_equal(ends, reference_ends(data["terminals"], np.arange(n)))


def test_from_arrays_rejects_a_dataset_without_final_terminal():
  data = synthetic_dataset()
  data["terminals"] = data["terminals"].copy()
  data["terminals"][-1] = 0
  with pytest.raises(ValueError, match="last entry is 1"):
    gs.from_arrays(data)
  bad = synthetic_dataset()
  bad["actions"] = bad["actions"][:-1]
  with pytest.raises(ValueError, match="actions"):
    gs.from_arrays(bad)


@pytest.mark.parametrize("geom", [True, False])
def test_future_indices_stay_in_the_trajectory(geom):
  data = gs.from_arrays(synthetic_dataset())
  idx = jnp.arange(data.traj_end.shape[0], dtype=jnp.int32)
  idx = jnp.tile(idx, 20)
  end = data.traj_end[idx]
  goal = np.asarray(gs.future_indices(jax.random.key(0), idx, end, geom_sample=geom, gamma=0.9))
  idx, end = np.asarray(idx), np.asarray(end)
  assert np.all(goal >= np.minimum(idx + 1, end)) and np.all(goal <= end)


def test_geometric_offsets_have_mean_one_over_one_minus_gamma():
  b = 20000
  idx = jnp.zeros((b,), jnp.int32)
  end = jnp.full((b,), 10**6, jnp.int32)  # no clipping
  goal = gs.future_indices(jax.random.key(1), idx, end, geom_sample=True, gamma=0.95)
  assert int(goal.min()) >= 1
  assert abs(float(goal.mean()) - 20.0) < 0.6  # std of the mean ≈ 19.5/√20000 ≈ 0.14


def test_uniform_future_reproduces_ogbench_rounded_interpolation():
  # round((i+1)·u + end·(1−u)) with i = 0, end = 4: the values 1..4 get 1/6, 1/3, 1/3, 1/6.
  b = 30000
  idx = jnp.zeros((b,), jnp.int32)
  end = jnp.full((b,), 4, jnp.int32)
  goal = np.asarray(gs.future_indices(jax.random.key(2), idx, end, geom_sample=False, gamma=0.9))
  freq = np.bincount(goal, minlength=5)[1:] / b
  np.testing.assert_allclose(freq, [1 / 6, 1 / 3, 1 / 3, 1 / 6], atol=0.015)


def test_goal_mixture_matches_its_probabilities():
  data = gs.from_arrays(synthetic_dataset())
  b = 20000
  idx = gs.uniform_indices(jax.random.key(3), b, data.traj_end.shape[0])
  draw = gs.sample_goal_indices(
    jax.random.key(4), idx, data.traj_end[idx], data.traj_end.shape[0], VALUE, gamma=0.9
  )
  is_cur, is_traj = np.asarray(draw.is_cur), np.asarray(draw.is_traj)
  assert abs(is_cur.mean() - 0.2) < 0.015
  assert abs(is_traj[~is_cur].mean() - 0.5 / 0.8) < 0.015
  # reward/mask follow index equality
  success = np.asarray(draw.goal_idx) == np.asarray(idx)
  np.testing.assert_array_equal(np.asarray(draw.mask), 1.0 - success)
  np.testing.assert_array_equal(np.asarray(draw.reward), success - 1.0)
  assert np.all(success[is_cur])


def test_p_cur_one_gives_the_current_row():
  idx = jnp.array([0, 5, 9], jnp.int32)
  end = jnp.array([6, 6, 9], jnp.int32)
  draw = gs.sample_goal_indices(
    jax.random.key(0), idx, end, 10, gs.GoalDistribution(1.0, 0.0, 0.0, True), gamma=0.99
  )
  np.testing.assert_array_equal(np.asarray(draw.goal_idx), [0, 5, 9])
  np.testing.assert_array_equal(np.asarray(draw.reward), [0.0, 0.0, 0.0])
  np.testing.assert_array_equal(np.asarray(draw.mask), [0.0, 0.0, 0.0])
  positive = gs.sample_goal_indices(
    jax.random.key(0),
    idx,
    end,
    10,
    gs.GoalDistribution(1.0, 0.0, 0.0, True),
    gamma=0.99,
    gc_negative=False,
  )
  np.testing.assert_array_equal(np.asarray(positive.reward), [1.0, 1.0, 1.0])


def test_batches_never_cross_an_episode_boundary():
  raw = synthetic_dataset()
  data = gs.from_arrays(raw)
  batch = jax.jit(gs.sample_hgc_batch, static_argnums=(2, 3))(jax.random.key(5), data, 4096, CONFIG)
  row, traj = np.asarray(batch["observations"]).T
  end = reference_ends(raw["terminals"], row.astype(int))
  for key in ("low_actor_goals", "high_actor_targets"):
    goal_row, goal_traj = np.asarray(batch[key]).T
    np.testing.assert_array_equal(goal_traj, traj)
    assert np.all(goal_row >= row) and np.all(goal_row <= end)
  np.testing.assert_array_equal(
    np.asarray(batch["low_actor_goals"])[:, 0], np.minimum(row + 5, end)
  )
  # actor goals are future rows (p_traj = 1): same trajectory, targets k rows ahead at most
  high_row, high_traj = np.asarray(batch["high_actor_goals"]).T
  np.testing.assert_array_equal(high_traj, traj)
  np.testing.assert_array_equal(
    np.asarray(batch["high_actor_targets"])[:, 0], np.minimum(row + 5, high_row)
  )
  # value goals: the current row, a future row of the same trajectory, or any row
  value_row = np.asarray(batch["value_goals"])[:, 0]
  np.testing.assert_array_equal(np.asarray(batch["masks"]), (value_row != row).astype(np.float32))
  np.testing.assert_array_equal(np.asarray(batch["next_observations"])[:, 0], row + 1)
  np.testing.assert_array_equal(np.asarray(batch["actions"])[:, 0], row)


def test_random_high_goals_target_the_subgoal_row():
  raw = synthetic_dataset()
  data = gs.from_arrays(raw)
  n = data.traj_end.shape[0]
  idx = jnp.arange(n, dtype=jnp.int32)
  goal, target = gs.high_actor_indices(
    jax.random.key(6),
    idx,
    data.traj_end,
    n,
    subgoal_steps=4,
    p_rand=1.0,
    geom_sample=False,
    gamma=0.9,
  )
  np.testing.assert_array_equal(
    np.asarray(target), np.minimum(np.arange(n) + 4, reference_ends(raw["terminals"], np.arange(n)))
  )
  assert 0 <= int(goal.min()) and int(goal.max()) < n


def test_gc_batch_is_deterministic_per_key_and_jit_matches_eager():
  data = gs.from_arrays(synthetic_dataset())
  eager = gs.sample_gc_batch(jax.random.key(7), data, 64, CONFIG)
  jitted = jax.jit(gs.sample_gc_batch, static_argnums=(2, 3))(jax.random.key(7), data, 64, CONFIG)
  again = gs.sample_gc_batch(jax.random.key(7), data, 64, CONFIG)
  other = gs.sample_gc_batch(jax.random.key(8), data, 64, CONFIG)
  for key in eager:
    np.testing.assert_array_equal(np.asarray(eager[key]), np.asarray(jitted[key]))
    np.testing.assert_array_equal(np.asarray(eager[key]), np.asarray(again[key]))
  assert not np.array_equal(np.asarray(eager["observations"]), np.asarray(other["observations"]))
  # GCIVL actor goals (0/1/0, uniform future): same trajectory, strictly ahead unless at the end
  row, traj = np.asarray(eager["observations"]).T
  goal_row, goal_traj = np.asarray(eager["actor_goals"]).T
  np.testing.assert_array_equal(goal_traj, traj)
  assert np.all(goal_row >= row)


def test_subgoal_and_option_end_index_arithmetic():
  idx = jnp.array([10, 10, 97, 3], jnp.int32)
  end = jnp.array([100, 100, 100, 3], jnp.int32)
  np.testing.assert_array_equal(np.asarray(gs.subgoal_indices(idx, end, 25)), [35, 35, 100, 3])
  goal = jnp.array([40, 12, 100, 3], jnp.int32)
  in_trajectory, never_current = jnp.ones(4, bool), jnp.zeros(4, bool)
  option = gc.ota_option_indices(idx, end, goal, in_trajectory, never_current, 5)
  np.testing.assert_array_equal(np.asarray(option.option_idx), [15, 12, 100, 3])


def test_ota_goals_end_options_inside_the_trajectory():
  """The sampler's goal draw, with which branch each goal came from, feeds OTA's option end."""
  raw = synthetic_dataset()
  data = gs.from_arrays(raw)
  n = data.traj_end.shape[0]
  idx = jnp.tile(jnp.arange(n, dtype=jnp.int32), 30)
  end = data.traj_end[idx]
  draw = gs.sample_goal_indices(jax.random.key(9), idx, end, n, VALUE, 0.9)
  out = gc.ota_option_indices(idx, end, draw.drawn_idx, draw.is_traj, draw.is_cur, 5)
  i = np.asarray(idx)
  end = reference_ends(raw["terminals"], i)
  o = np.asarray(out.option_idx)
  assert np.all(o >= i) and np.all(o <= np.minimum(i + 5, end))
  success = np.asarray(out.goal_idx) == o
  np.testing.assert_array_equal(np.asarray(out.mask), 1.0 - success)


def test_bad_arguments_raise():
  with pytest.raises(ValueError, match="p_cur \\+ p_traj \\+ p_rand"):
    gs.GoalDistribution(0.2, 0.5, 0.5, True)
  with pytest.raises(ValueError, match="p_traj"):
    gs.GoalDistribution(0.2, -0.5, 1.3, True)
  with pytest.raises(ValueError, match="geom_sample"):
    gs.GoalDistribution(0.0, 1.0, 0.0, "yes")
  idx = jnp.zeros((3,), jnp.int32)
  with pytest.raises(ValueError, match="subgoal_steps"):
    gs.subgoal_indices(idx, idx, 0)
  with pytest.raises(ValueError, match="gamma"):
    gs.future_indices(jax.random.key(0), idx, idx, geom_sample=True, gamma=1.0)
  with pytest.raises(AssertionError):
    gs.future_indices(jax.random.key(0), idx.astype(jnp.float32), idx, geom_sample=True, gamma=0.9)
  with pytest.raises(AssertionError):
    gs.subgoal_indices(idx[:, None], idx[:, None], 3)
