"""Tests of experiments.plot_subgoals: one greedy GMAH episode, its table and its picture.

The team is a freshly initialised one of the `gmah_simple_spread` smoke sizes (the episode and
the drawing do not depend on training; restoring a run is `hrljax.load`'s, tested there)."""

import json

import jax
import numpy as np
import pytest

from experiments import plot_subgoals
from hrljax.agents import gmah
from tests.experiments.preset_smoke import smoke_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def episode(request):
  config = smoke_config("gmah_simple_spread", request)
  agent = jax.jit(gmah.make_learner(config).init)(jax.random.key(0)).agent
  return plot_subgoals.greedy_episode(config, agent)


def test_positions_are_the_agents_and_the_landmarks_the_observations_show(episode):
  goals, positions, landmarks = episode["goals"], episode["positions"], episode["landmarks"]
  assert goals.shape == (25, 3) and positions.shape == (25, 3, 2) and landmarks.shape == (3, 2)
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
