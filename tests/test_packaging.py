"""pyproject.toml installs every package of the tree (a package left out is missing from a wheel
although an editable install still finds it)."""

import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tree_packages() -> set:
  """Every folder with an `__init__.py` under the installed folders, as its import name."""
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    package_dir = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
  names = set()
  for name, folder in package_dir.items():
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
      if "__init__.py" in files:
        relative = os.path.relpath(dirpath, os.path.join(ROOT, folder))
        names.add(name if relative == "." else f"{name}.{relative.replace(os.sep, '.')}")
  return names


def test_pyproject_lists_every_package_of_the_tree():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
  assert listed == tree_packages()
