"""hrljax: a JAX functional reference implementation of hierarchical reinforcement learning.

The spine shared by every algorithm lives here (types, environments, rollouts, the device mesh,
checkpoints, logging, the training loop). The algorithms live in `hrljax.losses` (pure functions),
`hrljax.networks` (Flax modules) and `hrljax.agents` (train states, updates and whole runs).

`hrljax.load_run(workdir)` reads a trained run back (`hrljax.load`); it is imported on first use,
so `import hrljax` stays light.
"""

__version__ = "0.1.0"  # the one place it is written: pyproject.toml and the wheel read it here

_LAZY = {"load_run": "hrljax.load", "Run": "hrljax.load"}


def __getattr__(name: str):
  if name in _LAZY:
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'hrljax' has no attribute {name!r}")


def __dir__() -> list:
  return sorted([*globals(), *_LAZY])
