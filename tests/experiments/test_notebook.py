"""Executes the Colab quickstart `experiments/notebooks/quickstart.ipynb` as CI does.

The notebook runs in a fresh `python3` kernel of this interpreter (nbclient + ipykernel) with
`HRLJAX_NOTEBOOK_SMALL=1` (tiny training budgets) and JAX's rank promotion set to "raise", from
the notebook's own folder, so its install cell must find the already-installed package and skip
the clone, and must find the repository's `experiments/` helpers by walking up.
"""

import base64
import os
import pathlib

import nbclient
import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "experiments" / "notebooks" / "quickstart.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def read_notebook():
  return nbformat.read(NOTEBOOK, as_version=4)


def code_cells(nb):
  return [cell for cell in nb.cells if cell.cell_type == "code"]


def cell_with(nb, text):
  """The one code cell whose source contains `text`."""
  matches = [cell for cell in code_cells(nb) if text in cell.source]
  assert len(matches) == 1, (text, len(matches))
  return matches[0]


def stdout_of(cell) -> str:
  return "".join(out.get("text", "") for out in cell.outputs
                 if out.output_type == "stream" and out.name == "stdout")


def pngs_of(cell) -> list[bytes]:
  return [base64.b64decode(out.data["image/png"]) for out in cell.outputs
          if out.output_type == "display_data" and "image/png" in out.data]


@pytest.fixture(scope="module")
def executed():
  nb = read_notebook()
  env = dict(os.environ, HRLJAX_NOTEBOOK_SMALL="1", JAX_NUMPY_RANK_PROMOTION="raise",
             JAX_PLATFORMS="cpu")
  client = nbclient.NotebookClient(
      nb, kernel_name="python3", timeout=300,
      resources={"metadata": {"path": str(NOTEBOOK.parent)}})
  client.execute(env=env)  # raises CellExecutionError on the first failing cell
  return nb


def test_committed_notebook_is_valid_and_has_no_outputs():
  nb = read_notebook()
  nbformat.validate(nb)
  assert nb.metadata.kernelspec.name == "python3"
  for cell in code_cells(nb):
    assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_install_cell_comes_first_and_installs_from_the_git_url():
  first = code_cells(read_notebook())[0]
  assert first.source.startswith("HRLJAX_GIT_URL = ")
  assert 'importlib.util.find_spec("hrljax") is None' in first.source
  assert '"pip", "install"' in first.source and "HRLJAX_GIT_URL" in first.source.split(
      "subprocess.run", 1)[1]


def test_every_cell_ran_without_error(executed):
  cells = code_cells(executed)
  assert all(cell.execution_count is not None for cell in cells)
  errors = [out for cell in cells for out in cell.outputs if out.output_type == "error"]
  assert errors == []


def test_install_was_skipped_and_the_repository_found(executed):
  text = stdout_of(code_cells(executed)[0])
  assert f"experiments/ from {ROOT}" in text
  assert not (NOTEBOOK.parent / "hrljax-src").exists()


def test_backend_and_mesh_are_reported(executed):
  text = stdout_of(cell_with(executed, "make_mesh()"))
  assert "backend: cpu, 1 device(s)" in text and "mesh: {'data': 1}" in text


def test_small_switch_shrinks_both_runs(executed):
  # HRLJAX_NOTEBOOK_SMALL=1: PPO 6 updates of 16 x 128 steps, option-critic 40 of 16 x 8.
  assert "ppo: 6 updates x 2048 env steps" in stdout_of(cell_with(executed, 'run("ppo")'))
  assert "option_critic: 40 updates x 128 env steps" in stdout_of(
      cell_with(executed, 'run("option_critic")'))


def test_learning_curves_and_option_maps_are_displayed(executed):
  curves = pngs_of(cell_with(executed, "plot_curves("))
  maps = pngs_of(cell_with(executed, "plot_options.plot_workdir"))
  assert len(curves) == 2 and len(maps) == 1
  for png in curves + maps:
    assert png[:8] == PNG_MAGIC and len(png) > 10_000
  evaluations = stdout_of(cell_with(executed, "plot_curves("))
  assert "PPO: evaluation after 12,288 env steps" in evaluations
  assert "option-critic: evaluation after 5,120 env steps" in evaluations


def test_loss_cell_jits_and_differentiates_a_library_loss(executed):
  text = stdout_of(cell_with(executed, "pg.clipped_surrogate_loss"))
  # Lengths 6 + 4 + 5 + 2 unmasked tokens; padding gets no gradient.
  assert "17 tokens" in text and "zero on padding: True" in text
