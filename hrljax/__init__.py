"""hrljax: a JAX functional reference implementation of hierarchical reinforcement learning.

The spine shared by every algorithm lives here (types, environments, rollouts, the device mesh,
checkpoints, logging, the training loop). The algorithms live in `hrljax.losses` (pure functions),
`hrljax.networks` (Flax modules) and `hrljax.agents` (train states, updates and whole runs).

`hrljax.load_run(workdir)` reads a trained run back (`hrljax.load`); it is imported on first use,
so `import hrljax` stays light.
"""

import importlib
import importlib.util
import sys
import types

__version__ = "0.1.0"  # the one place it is written: pyproject.toml and the wheel read it here


class _OnFirstUse(types.ModuleType):
  """Stands in for a module until something reads one of its attributes, which imports the real
  module (it takes this one's place in `sys.modules`) and reads the attribute there. The
  attributes the import system reads (`__spec__`, `__name__`) and `__file__` are this object's
  own, so `import name` binds it without importing anything."""

  def __getattr__(self, attribute: str):
    name = self.__name__
    if sys.modules.get(name) is self:
      del sys.modules[name]
    module = importlib.import_module(name)
    parent, _, child = name.rpartition(".")
    if parent:
      setattr(sys.modules[parent], child, module)
    return getattr(module, attribute)

  def __setattr__(self, attribute: str, value) -> None:
    if attribute.startswith("__"):
      super().__setattr__(attribute, value)
    else:
      setattr(importlib.import_module(self.__name__), attribute, value)


def _load_on_first_use(name: str) -> None:
  """Puts an `_OnFirstUse` in `sys.modules` for module `name`, unless it is imported already or
  not installed."""
  if name in sys.modules:
    return
  try:
    spec = importlib.util.find_spec(name)
  except (ImportError, ValueError):
    return
  if spec is None:
    return
  stand_in = _OnFirstUse(name)
  stand_in.__spec__ = spec
  stand_in.__file__ = spec.origin  # read by tools that scan sys.modules (hypothesis's plugin)
  sys.modules[name] = stand_in
  parent, _, child = name.rpartition(".")
  if parent:  # `import matplotlib.pyplot as plt` reads it as the package's attribute
    setattr(sys.modules[parent], child, stand_in)


# gymnax's environment modules import seaborn and matplotlib.pyplot at module level for their
# renderers: about 6 s of a fresh process's start, more than JAX's own import. They load when
# something first uses them (hrljax's plots, a renderer) instead.
for _name in ("seaborn", "matplotlib.pyplot"):
  _load_on_first_use(_name)

_LAZY = {"load_run": "hrljax.load", "Run": "hrljax.load"}


def __getattr__(name: str):
  if name in _LAZY:
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'hrljax' has no attribute {name!r}")


def __dir__() -> list:
  return sorted([*globals(), *_LAZY])
