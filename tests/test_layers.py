"""The layers import only downward: every module's imports are parsed and checked.

losses   -> jax, chex, rlax, distrax, optax, the standard library and each other
networks -> flax, jax, distrax, chex, numpy, the standard library, `hrljax.types` and each other
spine    -> (`hrljax.*` outside losses/networks/agents) nothing above it
agents   -> losses, networks, the spine, the shared agent helpers; no other agent
nothing outside `experiments/` imports `experiments`
"""

import ast
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALLED_AS = {"losses": "hrljax.losses", "networks": "hrljax.networks", "agents": "hrljax.agents"}
LOSS_DEPENDENCIES = {"jax", "chex", "rlax", "distrax", "optax"}
NETWORK_DEPENDENCIES = {"jax", "flax", "distrax", "chex", "numpy"}
SHARED_AGENT_HELPERS = {
  "common",
  "token_common",
  "llm_common",
  "text_game_common",
  "sac_common",
  "two_rate_common",
  "value_common",
}
UPPER_LAYERS = ("hrljax.losses", "hrljax.networks", "hrljax.agents")
STDLIB = set(sys.stdlib_module_names)


def module_name(relative_path: str) -> str:
  """The import name of a repository file (`losses/x.py` installs as `hrljax.losses.x`)."""
  parts = relative_path[: -len(".py")].split(os.sep)
  if parts[0] in INSTALLED_AS:
    parts = INSTALLED_AS[parts[0]].split(".") + parts[1:]
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(relative_path: str) -> list:
  """`[(line, module)]` for every import; `from pkg import sub` names `pkg.sub` for our packages."""
  path = os.path.join(ROOT, relative_path)
  tree = ast.parse(open(path).read(), path)
  package = module_name(relative_path)
  if not relative_path.endswith("__init__.py"):
    package = package.rpartition(".")[0]
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names += [(node.lineno, alias.name) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([node.module] if node.module else []))
      for alias in node.names:
        ours = base == "hrljax" or base in UPPER_LAYERS
        names.append((node.lineno, f"{base}.{alias.name}" if ours else base))
  return names


def _within(name: str, package: str) -> bool:
  return name == package or name.startswith(package + ".")


def violation(module: str, target: str):
  """Why importing `target` from `module` breaks the layering, or None."""
  top = target.split(".")[0]
  if top == "experiments" and not module.startswith("experiments"):
    return "nothing imports experiments"
  if _within(module, "hrljax.losses"):
    if top in STDLIB or top in LOSS_DEPENDENCIES or _within(target, "hrljax.losses"):
      return None
    return "losses import only jax, chex, rlax, distrax, optax and each other"
  if _within(module, "hrljax.networks"):
    if (
      top in STDLIB
      or top in NETWORK_DEPENDENCIES
      or _within(target, "hrljax.networks")
      or _within(target, "hrljax.types")
    ):
      return None
    return "networks import only flax, jax, distrax, chex, numpy and hrljax.types"
  if _within(module, "hrljax.agents"):
    if not _within(target, "hrljax.agents") or target == "hrljax.agents":
      return None
    agent, other = module.split(".")[2:3], target.split(".")[2]
    agent = agent[0] if agent else None
    if agent is None or other in SHARED_AGENT_HELPERS or other == agent:
      return None
    if agent in SHARED_AGENT_HELPERS:
      return "a shared agent helper imports no agent"
    return f"agents are leaves: {agent} imports the agent {other}"
  if _within(module, "hrljax") and any(_within(target, upper) for upper in UPPER_LAYERS):
    return "the spine imports nothing above it"
  return None


def python_files():
  for folder in ("hrljax", "losses", "networks", "agents", "experiments"):
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
      for name in sorted(files):
        if name.endswith(".py"):
          yield os.path.relpath(os.path.join(dirpath, name), ROOT)


def test_every_import_points_down_the_layers():
  problems = [
    f"{path}:{line}: imports {target}: {why}"
    for path in python_files()
    for line, target in imported_names(path)
    for why in [violation(module_name(path), target)]
    if why
  ]
  assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
  "module, target, expected",
  [
    ("hrljax.losses.safety", "hrljax.networks.heads", "losses import only"),
    ("hrljax.losses.safety", "numpy", "losses import only"),
    ("hrljax.losses.group_relative.gigpo", "hrljax.losses._checks", None),
    ("hrljax.networks.torsos", "hrljax.training", "networks import only"),
    ("hrljax.networks.torsos", "hrljax.types", None),
    ("hrljax.training", "hrljax.agents.ppo", "the spine imports nothing above it"),
    ("hrljax.data.goal_sampler", "hrljax.losses.goal_conditioned", "the spine imports"),
    ("hrljax.rollout.plain", "hrljax.types", None),
    (
      "hrljax.agents.hiql",
      "hrljax.agents.gcivl",
      "agents are leaves: hiql imports the agent gcivl",
    ),
    ("hrljax.agents.hiql", "hrljax.agents.common", None),
    (
      "hrljax.agents.recovery_rl",
      "hrljax.agents.sac",
      "agents are leaves: recovery_rl imports the agent sac",
    ),
    ("hrljax.agents.common", "hrljax.agents.ppo", "a shared agent helper imports no agent"),
    ("hrljax.agents.ppo", "experiments.configs", "nothing imports experiments"),
    ("experiments.train", "hrljax.agents.ppo", None),
  ],
)
def test_the_rules_catch_what_they_should(module, target, expected):
  why = violation(module, target)
  assert (why is None) if expected is None else (why is not None and expected in why)


def test_relative_and_from_imports_resolve_to_module_names():
  assert (
    module_name(os.path.join("losses", "group_relative", "__init__.py"))
    == "hrljax.losses.group_relative"
  )
  assert module_name(os.path.join("agents", "ppo.py")) == "hrljax.agents.ppo"
  names = [name for _, name in imported_names(os.path.join("hrljax", "training.py"))]
  assert "hrljax.checkpoint" in names and "jax" in names
