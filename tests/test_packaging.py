"""pyproject.toml installs every package of the tree (a package left out is missing from a wheel
although an editable install still finds it), the version is written once, the console scripts
name functions that exist, and the presets can be named from anywhere (`--config=hrljax:NAME`)."""

import ast
import os
import re
import tomllib

import pytest

import hrljax
from experiments import configs, train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Packages of the tree that stay in the repository: they compare against reference checkouts or
# read the repository's own runs, and are run from its root (`make bench`).
REPOSITORY_ONLY = {"experiments.benchmarks", "experiments.diagnostics"}


def pyproject() -> dict:
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)


def tree_packages() -> set:
  """Every folder with an `__init__.py` under the installed folders, as its import name."""
  package_dir = pyproject()["tool"]["setuptools"]["package-dir"]
  names = set()
  for name, folder in package_dir.items():
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
      if "__init__.py" in files:
        relative = os.path.relpath(dirpath, os.path.join(ROOT, folder))
        names.add(name if relative == "." else f"{name}.{relative.replace(os.sep, '.')}")
  return names


def installed_packages() -> set:
  return set(pyproject()["tool"]["setuptools"]["packages"])


def test_pyproject_lists_every_package_of_the_tree():
  assert installed_packages() == tree_packages() - REPOSITORY_ONLY
  assert REPOSITORY_ONLY <= tree_packages()


def test_the_version_is_written_once_in_hrljax():
  project = pyproject()["project"]
  assert "version" not in project and "version" in project["dynamic"]
  assert pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hrljax.__version__"}
  assert re.fullmatch(r"\d+\.\d+\.\d+", hrljax.__version__)
  with open(os.path.join(ROOT, "CITATION.cff")) as f:
    cited = re.search(r"^version: (\S+)$", f.read(), re.MULTILINE).group(1)
  assert cited == hrljax.__version__, "CITATION.cff's version differs from hrljax.__version__"


def test_py_typed_ships_with_hrljax():
  assert os.path.isfile(os.path.join(ROOT, "hrljax", "py.typed"))
  assert "py.typed" in pyproject()["tool"]["setuptools"]["package-data"]["hrljax"]


def module_functions(module: str) -> set:
  """The top-level functions of an installed module, read from its file (not imported)."""
  package_dir = pyproject()["tool"]["setuptools"]["package-dir"]
  package, _, name = module.rpartition(".")
  path = os.path.join(ROOT, package_dir[package], f"{name}.py")
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_console_scripts_name_functions_of_installed_modules():
  scripts = pyproject()["project"]["scripts"]
  assert set(scripts) == {"hrljax-train", "hrljax-plot", "hrljax-make-dataset"}
  for script, target in scripts.items():
    module, function = target.split(":")
    assert module.rpartition(".")[0] in installed_packages(), script
    assert function in module_functions(module), script


def experiments_imports(path: str) -> set:
  """The `experiments.*` modules a file imports (`from experiments.configs import x` names
  `experiments.configs`)."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
      names.add(node.module)
  return {name for name in names if name.split(".")[0] == "experiments"}


def test_presets_import_only_installed_packages():
  """Presets that build on each other import `experiments.configs`, which ships with them."""
  packages = installed_packages()
  for name in os.listdir(configs.FOLDER):
    if name.endswith(".py"):
      for module in experiments_imports(os.path.join(configs.FOLDER, name)):
        installed = module in packages or module.rpartition(".")[0] in packages
        assert installed, f"{name} imports {module}, which is not installed"


def test_preset_names_are_the_modules_with_get_config():
  names = configs.preset_names()
  assert "ppo_cartpole" in names and "option_critic_fourrooms" in names
  assert not {"__init__", "pointhazard_layouts", "token_game_common"} & set(names)


@pytest.mark.parametrize(
  "config, expected",
  [
    ("hrljax:ppo_cartpole", "{presets}/ppo_cartpole.py"),
    ("hrljax:bresa_pointhazard:random_hazards", "{presets}/bresa_pointhazard.py:random_hazards"),
    ("my_configs/ppo.py", "my_configs/ppo.py"),
    ("my_configs/ppo.py:large", "my_configs/ppo.py:large"),
  ],
)
def test_hrljax_prefix_names_an_installed_preset(config, expected):
  assert configs.resolve(config) == expected.format(presets=configs.FOLDER)


def test_unknown_preset_names_the_value_and_lists_the_presets():
  with pytest.raises(ValueError) as error:
    configs.resolve("hrljax:nosuch")
  message = str(error.value)
  assert message.startswith("--config=hrljax:nosuch: no such preset; expected hrljax:NAME")
  assert ", ".join(configs.preset_names()) in message


def test_the_driver_resolves_presets_in_both_flag_forms():
  argv = ["hrljax-train", "--config", "hrljax:ppo_cartpole", "--config=hrljax:sac_pendulum"]
  assert train.resolve_presets(argv) == [
    "hrljax-train",
    "--config",
    configs.preset_path("ppo_cartpole"),
    "--config=" + configs.preset_path("sac_pendulum"),
  ]


def test_the_driver_stops_on_an_unknown_preset_with_one_line(capsys):
  with pytest.raises(SystemExit) as exit_:
    train.resolve_presets(["hrljax-train", "--config=hrljax:nosuch"])
  assert exit_.value.code == 2
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line.startswith("error: --config=hrljax:nosuch: no such preset; expected hrljax:NAME")
