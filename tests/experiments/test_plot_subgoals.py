"""Tests of experiments.plot_subgoals: one greedy GMAH episode, its table and its picture, on MPE
simple_spread and on the two-agent four rooms.

The teams are freshly initialised ones of the presets' smoke sizes (the episode and the drawing
do not depend on training; restoring a run is `hrljax.load`'s, tested there)."""

import json

import jax
import numpy as np
import pytest

from experiments import plot_subgoals
from hrljax.agents import gmah
from hrljax.envs import two_agent_rooms as rooms
from tests.experiments.preset_smoke import smoke_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def greedy_episode(preset, request, target_rooms=None):
  config = smoke_config(preset, request)
  if target_rooms is not None:
    config.env_kwargs.target_rooms = target_rooms
  agent = jax.jit(gmah.make_learner(config).init)(jax.random.key(0)).agent
  return plot_subgoals.greedy_episode(config, agent)


@pytest.fixture(scope="module")
def episode(request):
  return greedy_episode("gmah_simple_spread", request)


def test_positions_are_the_agents_and_the_landmarks_the_observations_show(episode):
  goals, positions, landmarks = episode["goals"], episode["positions"], episode["subgoals"]
  assert goals.shape == (25, 3) and positions.shape == (26, 3, 2) and landmarks.shape == (3, 2)
  assert episode["names"] == ["L0", "L1", "L2"]
  assert np.isfinite(positions).all() and np.isfinite(episode["team_return"])
  assert ((goals >= 0) & (goals < 3)).all()
  # A subgoal is held for an option of c = 5 steps: it can change only at steps 0, 5, 10, ...
  changes = np.nonzero((goals[1:] != goals[:-1]).any(axis=1))[0] + 1
  assert all(t % 5 == 0 for t in changes), changes


def test_the_table_has_a_row_per_step_and_the_picture_is_a_png(episode, tmp_path):
  lines = plot_subgoals.subgoal_table(episode).splitlines()
  assert lines[0].split() == ["step", "a0", "a1", "a2"]  # simple_spread's 3 agents
  assert len(lines) == 1 + 25 + 1  # a row per step of the 25-step episode, then the return
  for t, line in enumerate(lines[1:-1]):
    step, *goals = line.split()
    assert int(step) == t and goals == [f"L{g}" for g in episode["goals"][t]]
  assert lines[-1] == f"team return {episode['team_return']:.2f}"
  out = plot_subgoals.draw(episode, str(tmp_path / "subgoals.png"))
  assert open(out, "rb").read(8) == PNG_MAGIC


def test_a_run_of_another_agent_is_a_clear_error(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps({"agent": "dqn"}))
  with pytest.raises(ValueError, match=r"expected a run of the agent 'gmah', got 'dqn'"):
    plot_subgoals.plot_workdir(str(tmp_path))


@pytest.fixture(scope="module")
def rooms_episode(request):
  return greedy_episode("gmah_two_agent_rooms_random_split", request)


def test_four_rooms_paths_move_over_free_cells_and_the_subgoals_are_centres_and_hallways(
  rooms_episode,
):
  goals, positions = rooms_episode["goals"], rooms_episode["positions"]
  steps = len(goals)
  assert 1 <= steps <= 100 and positions.shape == (steps + 1, 2, 2)
  cells = np.rint(positions * rooms.SCALE).astype(int)
  np.testing.assert_allclose(positions * rooms.SCALE, cells, atol=1e-5)  # whole cells
  assert rooms.FREE[cells[..., 0], cells[..., 1]].all()
  assert (np.abs(np.diff(cells, axis=0)).sum(-1) <= 1).all()  # one move (or none) per step
  np.testing.assert_allclose(
    rooms_episode["subgoals"] * rooms.SCALE, rooms.SUBGOAL_CELLS, atol=1e-5
  )
  assert rooms_episode["names"] == ["NW", "NE", "SW", "SE", "H0", "H1", "H2", "H3"]
  assert ((goals >= 0) & (goals < rooms.NUM_SUBGOALS)).all()
  # Both agents start in one room; the goal set is two of the other three rooms.
  start_rooms = rooms.ROOM_MAP[cells[0, :, 0], cells[0, :, 1]]
  goal_rooms = rooms_episode["goal_rooms"]
  assert start_rooms[0] == start_rooms[1] and len(goal_rooms) == 2
  assert start_rooms[0] not in goal_rooms
  assert np.isfinite(rooms_episode["team_return"])


def test_an_episode_that_ends_early_is_cut_at_its_end(request):
  """Own rooms with each agent's target its start room: the team succeeds after its first step
  (unless a move takes an agent into a hallway), and the episode stops there, its last position
  the one the success was scored in (before the reset)."""
  episode = greedy_episode("gmah_two_agent_rooms", request, target_rooms=(0, 1))
  cells = np.rint(episode["positions"] * rooms.SCALE).astype(int)
  final_rooms = rooms.ROOM_MAP[cells[-1, :, 0], cells[-1, :, 1]]
  assert len(episode["goals"]) < 100
  np.testing.assert_array_equal(final_rooms, [0, 1])
  np.testing.assert_array_equal(episode["goal_rooms"], [0, 1])  # own rooms: each agent's target
  assert episode["team_return"] == pytest.approx(1.0)


def test_four_rooms_table_uses_the_room_names_and_the_picture_is_a_png(rooms_episode, tmp_path):
  lines = plot_subgoals.subgoal_table(rooms_episode).splitlines()
  assert lines[0].split() == ["step", "a0", "a1"]
  assert len(lines) == 1 + len(rooms_episode["goals"]) + 1
  names = rooms_episode["names"]
  assert lines[1].split()[1:] == [names[g] for g in rooms_episode["goals"][0]]
  out = plot_subgoals.draw(rooms_episode, str(tmp_path / "rooms.png"))
  assert open(out, "rb").read(8) == PNG_MAGIC


def test_another_environment_is_a_clear_error(request):
  config = smoke_config("gmah_simple_spread", request)
  config.env_name = "CartPole-v1"
  with pytest.raises(
    ValueError, match=r"config.env_name: expected one of \['MPE_simple_spread_v3'"
  ):
    plot_subgoals.greedy_episode(config, None)
