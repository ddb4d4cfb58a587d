"""Tests of experiments.plot_hi_agent: one episode of Hi-Agent's hierarchy, its decision table
and its picture, read from a tiny run trained through the driver (the smoke sizes of
`hi_agent_fourrooms`: subgoal radius 1, a decision every 2 steps)."""

import json

import numpy as np
import pytest

from experiments import plot_hi_agent, plot_skills
from experiments import train as train_cli
from tests.experiments.preset_smoke import smoke_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def drawn(request, tmp_path_factory):
  """`(config, png path, episode)` of a greedy episode of a tiny `hi_agent` run."""
  config = smoke_config("hi_agent_fourrooms", request)
  workdir = str(tmp_path_factory.mktemp("hi_agent") / "run")
  train_cli.experiment(config, workdir)
  out = str(tmp_path_factory.mktemp("hi_agent") / "subgoals.png")
  return (config, *plot_hi_agent.plot_workdir(workdir, out))


def test_subgoals_are_chosen_every_segment_near_the_agent_on_its_path(drawn):
  config, _, episode = drawn
  cells, subgoals, decisions = episode["cells"], episode["subgoals"], episode["decisions"]
  length = episode["length"]
  assert 1 <= length <= config.env_kwargs.max_steps_in_episode
  assert cells.shape == (length + 1, 2) and subgoals.shape == decisions.shape + (2,)
  assert decisions.shape == (length,) and episode["goal"].shape == (2,)
  walkable = plot_skills.walkable_map()
  assert walkable[cells[:, 0], cells[:, 1]].all() and walkable[tuple(episode["goal"])]
  assert (np.abs(np.diff(cells, axis=0)).sum(-1) <= 1).all()  # one move (or none) per step
  h = config.segment_steps
  np.testing.assert_array_equal(np.nonzero(decisions)[0], np.arange(0, length, h))
  chosen = np.nonzero(decisions)[0]
  offset = np.abs(subgoals[chosen] - cells[chosen])
  assert (offset <= config.subgoal_radius).all()  # the window around the deciding cell
  held = np.repeat(subgoals[chosen], h, axis=0)[:length]
  np.testing.assert_array_equal(subgoals, held)  # a subgoal holds until the next decision
  assert episode["reached"] == (tuple(cells[-1]) == tuple(episode["goal"]))


def test_the_table_has_a_line_per_decision_and_the_picture_is_a_png(drawn):
  _, out, episode = drawn
  lines = plot_hi_agent.decision_table(episode).splitlines()
  assert len(lines) == 1 + int(episode["decisions"].sum()) + 1
  assert lines[1].split()[0] == "0" and f"in {episode['length']} steps" in lines[-1]
  with open(out, "rb") as f:
    assert f.read(8) == PNG_MAGIC


def test_a_wrong_directory_is_a_one_line_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="expected a hi_agent run directory"):
    plot_hi_agent.plot_workdir(str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps({"agent": "latent_skills"}))
  message = rf"{tmp_path}: expected a hi_agent run directory, got a 'latent_skills' run"
  with pytest.raises(ValueError, match=message):
    plot_hi_agent.plot_workdir(str(tmp_path))
