"""The presets: one module per experiment, each with a `get_config()`.

They install with the package, so `--config=hrljax:NAME` names one from any directory
(`hrljax-train --config=hrljax:ppo_cartpole --workdir=runs/ppo`); `hrljax:NAME:ARGUMENT` passes
an argument to its `get_config`, as `FILE.py:ARGUMENT` does for a config file given by its path.
A path to any other config file works as well, and such a file may build on a preset
(`from experiments.configs import ppo_cartpole`). The modules without a `get_config`
(`pointhazard_layouts`, `token_game_common`) are pieces the presets share.
"""

import ast
import os

PREFIX = "hrljax:"
FOLDER = os.path.dirname(os.path.abspath(__file__))


def defines_get_config(path: str) -> bool:
  """Whether the module at `path` defines `get_config` at its top level (read, not imported)."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  return any(isinstance(node, ast.FunctionDef) and node.name == "get_config" for node in tree.body)


def preset_names() -> list:
  """The presets' names, sorted."""
  return sorted(
    name[: -len(".py")]
    for name in os.listdir(FOLDER)
    if name.endswith(".py") and defines_get_config(os.path.join(FOLDER, name))
  )


def preset_path(name: str) -> str:
  """The file of the preset `name`; ValueError naming it and listing the presets otherwise."""
  names = preset_names()
  if name not in names:
    raise ValueError(
      f"--config={PREFIX}{name}: no such preset; expected {PREFIX}NAME with NAME one of "
      f"{', '.join(names)}"
    )
  return os.path.join(FOLDER, f"{name}.py")


def resolve(config: str) -> str:
  """The config file `--config=` names: `hrljax:NAME[:ARGUMENT]` as the preset's path (with its
  argument), anything else unchanged."""
  if not config.startswith(PREFIX):
    return config
  name, colon, argument = config[len(PREFIX) :].partition(":")
  return preset_path(name) + colon + argument
