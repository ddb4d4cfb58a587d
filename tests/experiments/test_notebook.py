"""Executes the Colab quickstart `experiments/notebooks/quickstart.ipynb` as CI does.

The notebook runs in a fresh `python3` kernel of this interpreter (nbclient + ipykernel) with
`HRLJAX_NOTEBOOK_SMALL=1` (tiny training budgets) and JAX's rank promotion set to "raise", from
the notebook's own folder, so its install cell must find the already-installed package and skip
the clone, and must find the repository's `experiments/` helpers by walking up.
"""

import ast
import base64
import inspect
import os
import pathlib
import shutil
import subprocess
import sys

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
  return "".join(
    out.get("text", "")
    for out in cell.outputs
    if out.output_type == "stream" and out.name == "stdout"
  )


def pngs_of(cell) -> list[bytes]:
  return [
    base64.b64decode(out.data["image/png"])
    for out in cell.outputs
    if out.output_type == "display_data" and "image/png" in out.data
  ]


@pytest.fixture(scope="module")
def executed():
  nb = read_notebook()
  env = dict(
    os.environ, HRLJAX_NOTEBOOK_SMALL="1", JAX_NUMPY_RANK_PROMOTION="raise", JAX_PLATFORMS="cpu"
  )
  client = nbclient.NotebookClient(
    nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
  )
  client.execute(env=env)  # raises CellExecutionError on the first failing cell
  return nb


def test_committed_notebook_is_valid_and_has_no_outputs():
  nb = read_notebook()
  nbformat.validate(nb)
  assert nb.metadata.kernelspec.name == "python3"
  for cell in code_cells(nb):
    assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def install_cell_source() -> str:
  return code_cells(read_notebook())[0].source


def test_install_cell_comes_first_with_an_empty_form_field_and_no_made_up_url():
  source = install_cell_source()
  assert source.startswith("# @title Install hrljax\n")
  assert 'HRLJAX_GIT_URL = ""  # @param {type:"string"}' in source
  assert 'UPLOAD_ARCHIVE = False  # @param {type:"boolean"}' in source
  assert 'os.environ.get("HRLJAX_GIT_URL", "")' in source
  assert "github.com" not in NOTEBOOK.read_text()  # the project has no public remote


STUB_FILES = ("pyproject.toml", "hrljax/__init__.py", "experiments/plot_options.py")


def make_stub_repository(folder: pathlib.Path) -> pathlib.Path:
  """A folder that passes for the repository: what the install cell looks for."""
  for name in STUB_FILES:
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("")
  return folder


# The install cell runs in `python -S` (no site-packages, so hrljax does not import) from an
# empty folder, with `subprocess.run` replaced: `git clone` makes a stub repository and
# `pip install` puts the folder on sys.path, so nothing is downloaded or installed.
FAKE_RUN = f"""
import pathlib, subprocess, sys
STUB_FILES = {STUB_FILES!r}
CALLS = []

{inspect.getsource(make_stub_repository)}

def fake_run(cmd, check=False, **kwargs):
  CALLS.append([str(c) for c in cmd])
  if cmd[:2] == ["git", "clone"]:
    make_stub_repository(pathlib.Path(cmd[-1]))
  elif cmd[1:4] == ["-m", "pip", "install"]:
    sys.path.insert(0, str(cmd[-1]))
  return subprocess.CompletedProcess(cmd, 0)

subprocess.run = fake_run
"""


def run_install_cell(tmp_path, *, env_url=None, form=None, upload=None):
  """Runs the install cell as described above; returns (returncode, stdout, stderr, calls).

  `form` sets the cell's string fields; `upload` (an archive) ticks UPLOAD_ARCHIVE and makes a
  stub `google.colab.files.upload` that saves it in the current folder, as Colab's does."""
  source = install_cell_source()
  for name, value in (form or {}).items():
    source = source.replace(f'{name} = ""', f"{name} = {value!r}", 1)
  work = tmp_path / "work"
  work.mkdir()
  if upload is not None:
    source = source.replace("UPLOAD_ARCHIVE = False", "UPLOAD_ARCHIVE = True", 1)
    (work / "google" / "colab").mkdir(parents=True)
    (work / "google" / "__init__.py").write_text("")
    (work / "google" / "colab" / "__init__.py").write_text(
      "import shutil, types\n"
      f"def upload():\n  shutil.copy({str(upload)!r}, {upload.name!r})\n"
      f"  return {{{upload.name!r}: b''}}\n"
      "files = types.SimpleNamespace(upload=upload)\n"
    )
  script = FAKE_RUN + f"exec(compile({source!r}, 'install_cell', 'exec'))\nprint(CALLS)\n"
  env = {k: v for k, v in os.environ.items() if k not in ("HRLJAX_GIT_URL", "PYTHONPATH")}
  if env_url is not None:
    env["HRLJAX_GIT_URL"] = str(env_url)
  done = subprocess.run(
    [sys.executable, "-S", "-c", script],
    cwd=work,
    env=env,
    capture_output=True,
    text=True,
    timeout=60,
  )
  calls = ast.literal_eval(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else []
  return done.returncode, done.stdout, done.stderr, calls


def pip_and_experiments(stdout, calls):
  """The folder pip installed and the folder experiments/ was found in."""
  assert calls[-1][1:5] == ["-m", "pip", "install", "--quiet"], calls
  found = [line for line in stdout.splitlines() if line.startswith("experiments/ from ")]
  return pathlib.Path(calls[-1][-1]), pathlib.Path(found[0].split(" from ", 1)[1])


def test_install_cell_without_hrljax_or_a_source_stops_saying_what_to_set(tmp_path):
  code, _, stderr, _ = run_install_cell(tmp_path)
  assert code != 0
  assert "RuntimeError: hrljax is not installed and no source is set. Set HRLJAX_GIT_URL" in stderr


@pytest.mark.parametrize("ref", ["", "v0.1"])
def test_install_cell_clones_the_git_url_of_the_form_field(tmp_path, ref):
  url = "https://git.example.invalid/someone/hrljax.git"
  code, stdout, stderr, calls = run_install_cell(
    tmp_path, form={"HRLJAX_GIT_URL": url, "HRLJAX_GIT_REF": ref}
  )
  assert code == 0, stderr
  branch = ["--branch", ref] if ref else []
  assert calls[0] == ["git", "clone", "--quiet", "--depth=1", *branch, url, "hrljax-src"]
  installed, found = pip_and_experiments(stdout, calls)
  assert installed == pathlib.Path("hrljax-src")
  assert found == tmp_path / "work" / "hrljax-src"


def test_install_cell_installs_a_local_folder_from_the_environment_variable(tmp_path):
  folder = make_stub_repository(tmp_path / "checkout")
  code, stdout, stderr, calls = run_install_cell(tmp_path, env_url=folder)
  assert code == 0, stderr
  assert len(calls) == 1  # no clone
  assert pip_and_experiments(stdout, calls) == (folder, folder)


@pytest.mark.parametrize("fmt, top", [("zip", "hrljax-main"), ("gztar", "")])
def test_install_cell_unpacks_an_archive(tmp_path, fmt, top):
  # A GitHub-style archive wraps the repository in one top folder; a plain one does not.
  stub = make_stub_repository(tmp_path / "stub" / top)
  archive = shutil.make_archive(str(tmp_path / "hrljax"), fmt, root_dir=tmp_path / "stub")
  code, stdout, stderr, calls = run_install_cell(tmp_path, env_url=archive)
  assert code == 0, stderr
  unpacked = pathlib.Path("hrljax-src", top) if top else pathlib.Path("hrljax-src")
  assert len(calls) == 1 and stub.exists()
  assert pip_and_experiments(stdout, calls) == (unpacked, tmp_path / "work" / unpacked)


def test_install_cell_installs_an_uploaded_archive(tmp_path):
  make_stub_repository(tmp_path / "stub")
  archive = pathlib.Path(
    shutil.make_archive(str(tmp_path / "mine"), "zip", root_dir=tmp_path / "stub")
  )
  code, stdout, stderr, calls = run_install_cell(tmp_path, upload=archive)
  assert code == 0, stderr
  assert (tmp_path / "work" / "mine.zip").exists()
  unpacked = pathlib.Path("hrljax-src")
  assert pip_and_experiments(stdout, calls) == (unpacked, tmp_path / "work" / unpacked)


def test_install_cell_names_a_missing_archive(tmp_path):
  code, _, stderr, _ = run_install_cell(tmp_path, env_url=tmp_path / "nowhere.zip")
  assert code != 0 and "HRLJAX_GIT_URL: no archive at" in stderr


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
    cell_with(executed, 'run("option_critic")')
  )


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
