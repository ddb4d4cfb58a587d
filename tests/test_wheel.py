"""The wheel, installed in a fresh venv, trains from a directory outside the repository.

`hrljax-train --config=hrljax:ppo_cartpole` runs the installed preset with the installed copy of
hrljax, and a user's config file of its own (the README's example, which registers an
environment) trains too. Nothing is downloaded or reinstalled: the wheel is built without build
isolation from a copy of the sources, and the venv sees this environment's packages through a
`.pth` file that only adds their folder to `sys.path` (the editable install's import hook, started
by a `.pth` file of its own in that folder, is not run there). The tiny PPO settings are those of
tests/experiments/test_train_cli.py, so the programs come from the persistent compilation cache.
"""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from typing import NamedTuple

import pytest

from hrljax.logging import read_jsonl
from tests.tiny_ppo import TINY_PPO_OVERRIDES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = TINY_PPO_OVERRIDES
USER_CONFIG = "my_cartpole.py"  # the README's example of a config file of one's own


def run(command, cwd, timeout=300):
  """`command` with pip's configuration files and PYTHONPATH left out; fails with its output."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["PIP_CONFIG_FILE"] = os.devnull
  result = subprocess.run(
    command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
  )
  assert result.returncode == 0, (
    f"{command} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
  )
  return result


def copy_sources(destination) -> None:
  """What the build reads: pyproject.toml, the readme, the license and the package folders (a
  copy, so the build leaves nothing in the repository and reads nothing stale from it)."""
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    pyproject = tomllib.load(f)
  files = ["pyproject.toml", pyproject["project"]["readme"], *pyproject["project"]["license-files"]]
  os.makedirs(destination)
  for name in files:
    shutil.copy(os.path.join(ROOT, name), destination)
  ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
  for folder in set(pyproject["tool"]["setuptools"]["package-dir"].values()):
    shutil.copytree(os.path.join(ROOT, folder), os.path.join(destination, folder), ignore=ignore)


def check_setuptools() -> None:
  """The build runs on this environment's setuptools (no build isolation, so no download)."""
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    (required,) = [r for r in tomllib.load(f)["build-system"]["requires"] if "setuptools" in r]
  minimum = int(required.split(">=")[1])
  installed = importlib.metadata.version("setuptools")
  assert int(installed.split(".")[0]) >= minimum, (
    f"setuptools {installed} is installed; the wheel build needs {required} (the dev extra): "
    "pip install -e '.[dev]'"
  )


def build_wheel(tmp) -> str:
  check_setuptools()
  copy_sources(tmp / "src")
  pip_wheel = ["pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
  run([sys.executable, "-m", *pip_wheel, "-w", str(tmp / "dist"), "."], cwd=tmp / "src")
  (wheel,) = os.listdir(tmp / "dist")
  return str(tmp / "dist" / wheel)


def make_venv(path) -> tuple[str, str]:
  """`(python, site-packages)` of a new venv that sees this environment's packages."""
  run([sys.executable, "-m", "venv", "--without-pip", str(path)], cwd=path.parent)
  python = os.path.join(path, "bin", "python")
  purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
  site_packages = run([python, "-c", purelib], cwd=path).stdout.strip()
  ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
  with open(os.path.join(site_packages, "hrljax_test_dependencies.pth"), "w") as f:
    f.write("".join(f"{folder}\n" for folder in sorted(ours)))
  return python, site_packages


class Installed(NamedTuple):
  python: str
  site_packages: str
  wheel: str

  def script(self, name: str) -> str:
    return os.path.join(os.path.dirname(self.python), name)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Installed:
  """The wheel installed in a fresh venv (pip runs on the venv's interpreter, so the console
  scripts start it; `--ignore-installed` leaves this environment's editable install alone)."""
  tmp = tmp_path_factory.mktemp("wheel")
  wheel = build_wheel(tmp)
  python, site_packages = make_venv(tmp / "venv")
  install = ["pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--quiet", wheel]
  run([python, "-m", *install], cwd=tmp)
  return Installed(python, site_packages, wheel)


@pytest.fixture
def elsewhere(tmp_path):
  """A working directory outside the repository."""
  path = tmp_path / "elsewhere"
  path.mkdir()
  return path


def test_the_wheel_holds_the_packages_the_presets_and_py_typed(venv):
  names = zipfile.ZipFile(venv.wheel).namelist()
  for expected in (
    "hrljax/py.typed",
    "hrljax/losses/__init__.py",
    "experiments/train.py",
    "experiments/configs/ppo_cartpole.py",
  ):
    assert expected in names
  for left_out in ("experiments/results/", "experiments/notebooks/", "experiments/benchmarks/"):
    assert not any(name.startswith(left_out) for name in names), left_out


def test_imports_resolve_to_the_installed_copy(venv, elsewhere):
  code = (
    "import importlib.metadata, hrljax, hrljax.losses, experiments.configs\n"
    "for module in (hrljax, hrljax.losses, experiments.configs): print(module.__file__)\n"
    "print(importlib.metadata.version('hrljax'), hrljax.__version__)"
  )
  *files, versions = run([venv.python, "-c", code], cwd=elsewhere).stdout.splitlines()
  for file in files:
    assert file.startswith(venv.site_packages + os.sep), file
  installed, written = versions.split()
  assert installed == written


def test_console_scripts_start_the_venv_python(venv):
  for script in ("hrljax-train", "hrljax-plot", "hrljax-make-dataset"):
    with open(venv.script(script)) as f:
      assert f.readline().strip() == f"#!{venv.python}", script


def test_hrljax_train_runs_a_preset_from_another_directory(venv, elsewhere):
  train = [venv.script("hrljax-train"), "--config=hrljax:ppo_cartpole", *TINY]
  result = run([*train, "--workdir=run"], cwd=elsewhere)
  assert "update 16/16" in result.stdout
  records = read_jsonl(str(elsewhere / "run"))
  assert [r["update"] for r in records if r["phase"] == "train"] == [4, 8, 12, 16]
  assert records[-1]["phase"] == "eval" and records[-1]["eval_return"] > 0
  run([venv.script("hrljax-plot"), "run", "--out=curve.png"], cwd=elsewhere)
  assert (elsewhere / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_unknown_preset_is_one_line_listing_the_presets(venv, elsewhere):
  result = subprocess.run(
    [venv.script("hrljax-train"), "--config=hrljax:nosuch", "--workdir=run"],
    cwd=elsewhere,
    capture_output=True,
    text=True,
  )
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert line.startswith("error: --config=hrljax:nosuch: no such preset; expected hrljax:NAME")
  assert "ppo_cartpole" in line and not (elsewhere / "run").exists()


def test_hrljax_make_dataset_checks_its_flags_from_another_directory(venv, elsewhere):
  command = [venv.script("hrljax-make-dataset"), "--env=nosuch", "--out=maze.npz"]
  result = subprocess.run(command, cwd=elsewhere, capture_output=True, text=True)
  assert result.returncode == 2
  assert result.stderr.strip().startswith("error: --env: expected one of ['pointmaze-medium")
  assert not (elsewhere / "maze.npz").exists()


def readme_user_config() -> str:
  """The README's example config file: the python block whose first line names USER_CONFIG."""
  with open(os.path.join(ROOT, "README.md")) as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.DOTALL)
  (block,) = [block for block in blocks if block.startswith(f"# {USER_CONFIG}")]
  return block


def test_a_users_config_file_registers_its_environment_and_trains(venv, elsewhere):
  (elsewhere / USER_CONFIG).write_text(readme_user_config())
  train = [venv.script("hrljax-train"), f"--config={USER_CONFIG}", *TINY]
  result = run([*train, "--workdir=mine"], cwd=elsewhere)
  assert "on MyCartPole-v0" in result.stdout
  records = read_jsonl(str(elsewhere / "mine"))
  assert records[-1]["phase"] == "eval" and records[-1]["update"] == 16
