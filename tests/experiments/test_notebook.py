"""The Colab quickstart `experiments/notebooks/quickstart.ipynb`, as committed and as CI runs it.

The committed notebook carries the outputs of one full run (every code cell, in order, with no
path of the machine it ran on). CI executes it again in a fresh `python3` kernel of this
interpreter (nbclient + ipykernel) with `HRLJAX_NOTEBOOK_SMALL=1` (tiny training budgets), JAX's
rank promotion set to "raise" and 2 CPU devices, so that the environments are scaled to the
device count and split over a mesh as over a TPU's cores (2 rather than a v2-8's 8: the same
code, compiled faster). Its install cell must find the installed package and skip; the install
itself is checked by running that cell alone with pip replaced.
"""

import ast
import base64
import glob
import importlib.metadata
import inspect
import os
import pathlib
import re
import subprocess
import sys
import tomllib

import nbclient
import nbformat
import pytest

import hrljax

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "experiments" / "notebooks" / "quickstart.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DEVICES = 2  # fake CPU devices of the executed notebook


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


def text_of(cell) -> str:
  """Every text a cell's outputs show (streams, plain-text data, errors); no image data."""
  texts = []
  for out in cell.outputs:
    if out.output_type == "stream":
      texts.append(out.text)
    elif out.output_type in ("display_data", "execute_result"):
      texts.append(out.data.get("text/plain", ""))
    elif out.output_type == "error":
      texts += [out.ename, out.evalue, *out.traceback]
  return "\n".join(texts)


def pngs_of(cell) -> list[bytes]:
  return [
    base64.b64decode(out.data["image/png"])
    for out in cell.outputs
    if out.output_type == "display_data" and "image/png" in out.data
  ]


# --- The committed notebook ----------------------------------------------------------------------


def test_committed_notebook_has_the_outputs_of_one_run_in_order():
  nb = read_notebook()
  nbformat.validate(nb)
  assert nb.metadata.kernelspec.name == "python3"
  cells = code_cells(nb)
  assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1))
  for cell in cells:
    assert cell.outputs, cell.source[:60]
    assert all(out.output_type != "error" for out in cell.outputs), cell.source[:60]


def test_committed_outputs_name_no_path_of_the_machine_they_ran_on():
  # An absolute path under a usual top-level folder of a machine, or an installed package's folder.
  local = re.compile(
    "|".join(
      [re.escape(str(ROOT))] + [f"/{top}/" for top in ("work", "tmp", "home", "root", "Users")]
    )
    + "|site-packages"
  )
  for cell in code_cells(read_notebook()):
    text = text_of(cell)
    assert not local.search(text), (cell.source[:60], text)
    # Pictures are not read back: `plot_options.plot_workdir` titles its picture with the
    # workdir's path, so the notebook draws the options with a title of its own.
    assert "plot_workdir(" not in cell.source


def test_committed_outputs_are_a_full_run_that_loads_and_acts():
  nb = read_notebook()
  assert "nothing to install" in stdout_of(code_cells(nb)[0])
  assert "num_envs: 16 per device x 1 device(s) = 16" in stdout_of(cell_with(nb, "make_mesh()"))
  # The full budgets: 2M env steps per run.
  assert "ppo: 976 updates x 2048 env steps" in stdout_of(cell_with(nb, 'run("ppo")'))
  assert "option_critic: 15625 updates x 128 env steps" in stdout_of(
    cell_with(nb, 'run("option_critic")')
  )
  assert len(pngs_of(cell_with(nb, "plot_curves("))) == 2
  assert len(pngs_of(cell_with(nb, "plot_options.draw("))) == 1
  acted = stdout_of(cell_with(nb, "hrljax.load_run(ppo_workdir)"))
  assert "loaded ppo at update 976 of 976" in acted
  assert re.search(r"^episode 0: return 1\.00 in \d+ steps$", acted, re.MULTILINE), acted
  assert "17 tokens" in stdout_of(cell_with(nb, "pg.clipped_surrogate_loss"))


def test_first_cell_has_the_colab_badge_and_says_its_link_is_a_template():
  first = read_notebook().cells[0]
  assert first.cell_type == "markdown"
  badge = (
    "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
    "(https://colab.research.google.com/github/OWNER/REPO/blob/main/"
    "experiments/notebooks/quickstart.ipynb)"
  )
  assert badge in first.source
  assert "once `OWNER/REPO` in its link is replaced" in first.source
  assert "github.com" not in NOTEBOOK.read_text()  # the project has no public remote


# --- The install cell, run alone -----------------------------------------------------------------


def install_cell_source() -> str:
  return code_cells(read_notebook())[0].source


def cell_pins() -> dict:
  """The cell's `PINS = {...}`."""
  for node in ast.parse(install_cell_source()).body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PINS":
      return ast.literal_eval(node.value)
  raise AssertionError("the install cell has no PINS")


PINS = cell_pins()
REST = [f"{name}=={version}" for name, version in PINS.items() if name != "jax"]


def test_pins_are_the_constraints_of_the_dependencies_and_the_text_says_them():
  constraints = {}
  for line in (ROOT / "constraints.txt").read_text().splitlines():
    if "==" in line and not line.startswith("#"):
      name, version = line.split("#")[0].strip().split("==")
      constraints[name] = version
  with open(ROOT / "pyproject.toml", "rb") as f:
    dependencies = tomllib.load(f)["project"]["dependencies"]
  names = [re.match(r"[A-Za-z0-9_.-]+", dep).group(0) for dep in dependencies] + ["jaxlib"]
  assert PINS == {name: constraints[name] for name in constraints if name in names}
  text = "\n".join(cell.source for cell in read_notebook().cells)
  assert f"jax {PINS['jax']} as `jax[tpu]`" in text
  # The wheel's name and the requirement in the install text carry this hrljax's version.
  assert f"hrljax-{hrljax.__version__}-py3-none-any.whl" in text
  assert f"hrljax=={hrljax.__version__}" in text


def make_installed(folder, hrljax_version="0.1.0", **versions):
  """Makes `folder` pass for site-packages: an `hrljax` package and a dist-info per name."""
  (folder / "hrljax").mkdir(exist_ok=True)
  (folder / "hrljax" / "__init__.py").write_text(f"__version__ = {hrljax_version!r}\n")
  for name, version in versions.items():
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


# The install cell runs in `python -S` (no site-packages: hrljax does not import) from an empty
# folder, with `subprocess.run` replaced: `pip install` makes the folder pass for site-packages
# with the pinned versions, so nothing is downloaded or installed.
FAKE_RUN = f"""
import pathlib, subprocess, sys, types
CALLS = []

{inspect.getsource(make_installed)}

def fake_run(cmd, check=False, **kwargs):
  CALLS.append([str(c) for c in cmd])
  if cmd[1:4] == ["-m", "pip", "install"]:
    make_installed(pathlib.Path.cwd(), **{{"jax": {PINS["jax"]!r}, "numpy": {PINS["numpy"]!r}}})
  return subprocess.CompletedProcess(cmd, 0)

subprocess.run = fake_run
"""


def run_install_cell(
  tmp_path, *, form=None, env_source=None, upload=None, installed=None, prelude="", stubs=()
):
  """Runs the install cell as described above; returns (returncode, stdout, stderr, calls).

  `form` sets the cell's form fields; `upload` (a file, or "" for a cancelled upload) makes a
  stub `google.colab.files.upload` that saves it in the current folder, as Colab's does;
  `installed` (versions) makes the folder pass for site-packages before the cell runs; `stubs`
  are empty modules (e.g. "libtpu") and `prelude` code run before the cell. PATH holds only a
  folder that the caller may put a fake `nvidia-smi` in (`tmp_path / "bin"`)."""
  source = install_cell_source()
  for name, value in (form or {}).items():
    line = re.search(rf"^{name} = .*$", source, re.MULTILINE).group(0)
    source = source.replace(line, f"{name} = {value!r}", 1)
  work = tmp_path / "work"
  work.mkdir()
  (tmp_path / "bin").mkdir(exist_ok=True)
  if installed is not None:
    make_installed(work, **installed)
  for name in stubs:
    (work / name).mkdir()
    (work / name / "__init__.py").write_text("")
  if upload is not None:
    (work / "google" / "colab").mkdir(parents=True)
    (work / "google" / "__init__.py").write_text("")
    save = f"  shutil.copy({str(upload)!r}, {upload.name!r})\n" if upload else ""
    result = f"{{{upload.name!r}: b''}}" if upload else "{}"
    (work / "google" / "colab" / "__init__.py").write_text(
      f"import shutil, types\ndef upload():\n{save}  return {result}\n"
      "files = types.SimpleNamespace(upload=upload)\n"
    )
  script = (
    FAKE_RUN + prelude + f"\nexec(compile({source!r}, 'install_cell', 'exec'))\nprint(CALLS)\n"
  )
  env = {k: v for k, v in os.environ.items() if k not in ("HRLJAX_SOURCE", "PYTHONPATH")}
  env["PATH"] = str(tmp_path / "bin")
  if env_source is not None:
    env["HRLJAX_SOURCE"] = str(env_source)
  done = subprocess.run(
    [sys.executable, "-S", "-c", script],
    check=False,
    cwd=work,
    env=env,
    capture_output=True,
    text=True,
    timeout=60,
  )
  calls = ast.literal_eval(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
  return done.returncode, done.stdout, done.stderr, calls


def pip_install(requirement, jax_requirement=None):
  return [
    sys.executable,
    "-m",
    "pip",
    "install",
    "--quiet",
    requirement,
    jax_requirement or f"jax=={PINS['jax']}",
    *REST,
  ]


def test_without_hrljax_or_a_source_the_cell_stops_with_one_line_saying_what_to_set(tmp_path):
  code, stdout, stderr, _ = run_install_cell(tmp_path)
  assert code != 0 and stdout == ""
  assert stderr.strip().splitlines()[-1] == (
    "RuntimeError: hrljax is not installed and HRLJAX_SOURCE is empty: set it (this cell's form "
    "field or the environment variable) to a wheel, an archive or a folder of the hrljax "
    "repository, a git URL or a requirement, then run this cell again"
  )


GIT = "https://git.example.invalid/someone/hrljax.git"


@pytest.mark.parametrize(
  "source, requirement",
  [
    ("dist/hrljax-0.1.0-py3-none-any.whl", "dist/hrljax-0.1.0-py3-none-any.whl"),
    ("hrljax.zip", "hrljax.zip"),
    ("/content/drive/MyDrive/hrljax", "/content/drive/MyDrive/hrljax"),
    (GIT, f"git+{GIT}"),
    (f"{GIT}@v0.1.0", f"git+{GIT}@v0.1.0"),
    (f"git+{GIT}@main", f"git+{GIT}@main"),
    ("hrljax==0.1.0", "hrljax==0.1.0"),
  ],
)
def test_the_source_goes_to_pip_with_the_pinned_versions(tmp_path, source, requirement):
  code, stdout, stderr, calls = run_install_cell(
    tmp_path, form={"HRLJAX_SOURCE": source, "ACCELERATOR": "cpu"}
  )
  assert code == 0, stderr
  assert calls == [pip_install(requirement)]
  assert f"installing hrljax from {source} with jax=={PINS['jax']}" in stdout
  assert f"hrljax 0.1.0, jax {PINS['jax']} (the tested version)" in stdout


def test_the_environment_variable_is_the_source_when_the_field_is_empty(tmp_path):
  code, _, stderr, calls = run_install_cell(
    tmp_path, env_source="hrljax==0.1.0", form={"ACCELERATOR": "cpu"}
  )
  assert code == 0, stderr
  assert calls == [pip_install("hrljax==0.1.0")]


@pytest.mark.parametrize(
  "accelerator, jax_requirement",
  [("tpu", "jax[tpu]"), ("gpu", "jax[cuda12]"), ("cpu", "jax")],
)
def test_the_accelerator_field_picks_the_jax_build(tmp_path, accelerator, jax_requirement):
  form = {"HRLJAX_SOURCE": "hrljax.zip", "ACCELERATOR": accelerator}
  code, _, stderr, calls = run_install_cell(tmp_path, form=form)
  assert code == 0, stderr
  assert calls == [pip_install("hrljax.zip", f"{jax_requirement}=={PINS['jax']}")]


@pytest.mark.parametrize("machine", ["gpu", "tpu", "cpu"])
def test_auto_finds_the_accelerator(tmp_path, machine):
  if machine == "cpu" and glob.glob("/dev/accel*"):
    pytest.skip("this machine has TPU chips")
  if machine == "gpu":  # nvidia-smi on the PATH
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
  stubs = ("libtpu",) if machine == "tpu" else ()  # the TPU runtime of a preinstalled jax[tpu]
  code, _, stderr, calls = run_install_cell(
    tmp_path, form={"HRLJAX_SOURCE": "hrljax.zip"}, stubs=stubs
  )
  assert code == 0, stderr
  extra = {"gpu": "[cuda12]", "tpu": "[tpu]", "cpu": ""}[machine]
  assert calls[0][6] == f"jax{extra}=={PINS['jax']}"


def test_on_colab_an_empty_source_asks_for_an_upload(tmp_path):
  wheel = tmp_path / "hrljax-0.1.0-py3-none-any.whl"
  wheel.write_bytes(b"")
  code, stdout, stderr, calls = run_install_cell(
    tmp_path, form={"ACCELERATOR": "cpu"}, upload=wheel
  )
  assert code == 0, stderr
  assert stdout.startswith("HRLJAX_SOURCE is empty: upload a wheel or a .zip / .tar.gz archive")
  assert (tmp_path / "work" / wheel.name).exists()
  assert calls == [pip_install(wheel.name)]


def test_a_cancelled_upload_stops_with_the_same_line(tmp_path):
  code, _, stderr, _ = run_install_cell(tmp_path, upload="")
  assert code != 0
  assert (
    stderr.strip()
    .splitlines()[-1]
    .startswith("RuntimeError: hrljax is not installed and HRLJAX_SOURCE is empty")
  )


def test_an_installed_hrljax_is_kept_and_another_jax_is_named(tmp_path):
  installed = {"hrljax_version": "0.1.0", "jax": "0.9.0"}
  code, stdout, stderr, calls = run_install_cell(
    tmp_path, form={"HRLJAX_SOURCE": GIT}, installed=installed
  )
  assert code == 0, stderr
  assert calls == []
  assert stdout.splitlines()[:2] == [
    "hrljax is installed: nothing to install",
    f"hrljax 0.1.0, jax 0.9.0 (tested: {PINS['jax']})",
  ]


def test_replacing_a_package_the_runtime_imported_asks_for_a_restart(tmp_path):
  # Colab imports numpy at start; pip then installs the pinned one beside it.
  prelude = "sys.modules['numpy'] = types.SimpleNamespace(__version__='1.26.4')\n"
  code, _, stderr, _ = run_install_cell(
    tmp_path, form={"HRLJAX_SOURCE": GIT, "ACCELERATOR": "cpu"}, prelude=prelude
  )
  assert code != 0
  assert stderr.strip().splitlines()[-1] == (
    "RuntimeError: pip replaced numpy, which this runtime had imported: restart it (Runtime > "
    "Restart runtime) and run all cells again; this cell then skips the install"
  )


# --- The notebook executed as CI does ------------------------------------------------------------


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
  nb = read_notebook()
  for cell in code_cells(nb):
    cell.outputs, cell.execution_count = [], None
  flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"
  env = dict(
    os.environ,
    XLA_FLAGS=flags.strip(),
    JAX_PLATFORMS="cpu",
    HRLJAX_NOTEBOOK_SMALL="1",
    HRLJAX_NOTEBOOK_WORKDIR=str(tmp_path_factory.mktemp("runs")),
    JAX_NUMPY_RANK_PROMOTION="raise",
  )
  env.pop("HRLJAX_SOURCE", None)
  client = nbclient.NotebookClient(
    nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
  )
  before = sorted(os.listdir(NOTEBOOK.parent))
  client.execute(env=env)  # raises CellExecutionError on the first failing cell
  assert sorted(os.listdir(NOTEBOOK.parent)) == before  # the runs went to the workdir
  return nb


@pytest.mark.multidevice
def test_every_cell_ran_without_error(executed):
  cells = code_cells(executed)
  assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1))
  errors = [out for cell in cells for out in cell.outputs if out.output_type == "error"]
  assert errors == []


@pytest.mark.multidevice
def test_install_was_skipped(executed):
  text = stdout_of(code_cells(executed)[0])
  jax_version = importlib.metadata.version("jax")
  assert text.startswith("hrljax is installed: nothing to install\n")
  assert f"hrljax {hrljax.__version__}, jax {jax_version} (" in text


@pytest.mark.multidevice
def test_backend_mesh_and_environments_per_device_are_reported(executed):
  text = stdout_of(cell_with(executed, "make_mesh()"))
  assert f"backend: cpu, {DEVICES} device(s)" in text
  assert f"mesh: {{'data': {DEVICES}}}" in text
  assert f"num_envs: 16 per device x {DEVICES} device(s) = {16 * DEVICES}" in text


@pytest.mark.multidevice
def test_small_switch_shrinks_both_runs_and_the_envs_scale_with_the_devices(executed):
  # HRLJAX_NOTEBOOK_SMALL=1: PPO 6 updates of 16 envs x 16 steps per device, option-critic 40
  # of 16 x 8; the number of updates does not depend on the device count.
  envs = 16 * DEVICES
  assert f"ppo: 6 updates x {envs * 16} env steps ({envs} envs)" in stdout_of(
    cell_with(executed, 'run("ppo")')
  )
  assert f"option_critic: 40 updates x {envs * 8} env steps ({envs} envs)" in stdout_of(
    cell_with(executed, 'run("option_critic")')
  )


@pytest.mark.multidevice
def test_learning_curves_and_option_maps_are_displayed(executed):
  curves = pngs_of(cell_with(executed, "plot_curves("))
  maps = pngs_of(cell_with(executed, "plot_options.draw("))
  assert len(curves) == 2 and len(maps) == 1
  for png in curves + maps:
    assert png[:8] == PNG_MAGIC and len(png) > 10_000
  evaluations = stdout_of(cell_with(executed, "plot_curves("))
  envs = 16 * DEVICES
  assert f"PPO: evaluation after {6 * envs * 16:,} env steps" in evaluations
  assert f"option-critic: evaluation after {40 * envs * 8:,} env steps" in evaluations


@pytest.mark.multidevice
def test_the_trained_run_is_loaded_from_its_checkpoint_and_plays_episodes(executed):
  text = stdout_of(cell_with(executed, "hrljax.load_run(ppo_workdir)"))
  envs = 16 * DEVICES
  assert f"loaded ppo at update 6 of 6 ({envs} envs, {6 * envs * 16:,} env steps)" in text
  # Four rooms' reward is 1 at the goal; a small run's episodes time out after 100 steps.
  episode = re.search(r"^episode 0: return ([01])\.00 in (\d+) steps$", text, re.MULTILINE)
  assert episode and 1 <= int(episode.group(2)) <= 100, text
  assert re.search(
    r"^64 episodes: mean return [01]\.\d\d, mean length \d+\.\d steps$", text, re.MULTILINE
  )


@pytest.mark.multidevice
def test_loss_cell_jits_and_differentiates_a_library_loss(executed):
  text = stdout_of(cell_with(executed, "pg.clipped_surrogate_loss"))
  # Lengths 6 + 4 + 5 + 2 unmasked tokens; padding gets no gradient.
  assert "17 tokens" in text and "zero on padding: True" in text
