"""The smoke test of the online presets (PPO, option-critic, grouped): `preset_smoke`; and the
picture of a skills run (`experiments.plot_skills`), drawn from the distillation smoke run the
latent-skills presets read (trained once per worker: in this file it is not trained again)."""

import json

import numpy as np
import pytest

from experiments import plot_skills
from tests.experiments.preset_smoke import GROUPS, smoke_test, tiny_skill_run


@pytest.mark.parametrize("preset", GROUPS["online"])
def test_preset_trains_or_traces(preset, tmp_path, request):
  smoke_test(preset, tmp_path, request)


# ----------------------------------------------------------------------------------------------
# experiments.plot_skills: trajectories of the distilled skill model from prior samples.
# ----------------------------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STARTS = ("2:2", "10:10")


@pytest.fixture(scope="module")
def drawn(request, tmp_path_factory):
  """`(png path, trajectories)` of the tiny distillation run: 3 samples from 2 starts, 12 steps."""
  workdir = tiny_skill_run(request, "skill_run")
  out = str(tmp_path_factory.mktemp("skills") / "skills.png")
  return plot_skills.plot_workdir(workdir, out, samples=3, steps=12, starts=STARTS)


def test_trajectories_move_over_free_cells_from_their_starts_and_stop_at_the_goal(drawn):
  _, trajectories = drawn
  cells, length, reached = trajectories["cells"], trajectories["length"], trajectories["reached"]
  assert cells.shape == (2, 3, 13, 2) and length.shape == (2, 3) and reached.shape == (2, 3)
  np.testing.assert_array_equal(cells[:, :, 0], [[[2, 2]] * 3, [[10, 10]] * 3])
  assert plot_skills.walkable_map()[cells[..., 0], cells[..., 1]].all()
  assert (np.abs(np.diff(cells, axis=2)).sum(-1) <= 1).all()  # one move (or none) per step
  assert ((length >= 1) & (length <= 12)).all()
  for s, m in np.ndindex(length.shape):
    after = cells[s, m, length[s, m] :]
    assert (after == after[0]).all()  # the cell stays put once the episode has ended
    assert reached[s, m] == (tuple(after[0]) == (7, 9))  # the run's goal: the east doorway
    assert reached[s, m] or length[s, m] == 12


def test_the_picture_is_a_png(drawn):
  out, _ = drawn
  with open(out, "rb") as f:
    assert f.read(8) == PNG_MAGIC


def test_a_wrong_directory_or_start_is_a_one_line_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="expected a latent_skills distill run directory"):
    plot_skills.plot_workdir(str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps({"agent": "hi_agent"}))
  message = rf"{tmp_path}: expected a latent_skills distill run directory, got a 'hi_agent' run"
  with pytest.raises(ValueError, match=message):
    plot_skills.plot_workdir(str(tmp_path))
  with pytest.raises(ValueError, match=r"--starts: expected free cells .* '0:0' \(a wall\)"):
    plot_skills.plot_workdir(str(tmp_path), starts=("0:0",))
  with pytest.raises(ValueError, match=r"--starts: expected cells as row:col, got '2-2'"):
    plot_skills.parse_cells(["2-2"])
