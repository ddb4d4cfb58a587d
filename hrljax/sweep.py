"""Hyperparameter sweeps: the values `config.sweep` trains side by side with every seed, checked,
and written into the optimizer states that inject them (`hrljax.training` runs the members)."""

import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import optax

from hrljax import config_checks as checks

# What `config.sweep` can hold: learning rates (finite numbers > 0), which `set_hyperparameters`
# writes into the optimizer states after `init`.
SWEEPABLE = ("learning_rate",)


def sweep_values(config) -> dict:
  """`{name: values}` of the hyperparameters `config.sweep` gives values, in name order."""
  sweep = config.get("sweep") or {}
  return {name: tuple(sweep[name]) for name in sorted(sweep) if sweep[name] not in (None, ())}


def validate_sweep(config, sweepable: Optional[tuple]) -> None:
  """`ConfigError` naming the first `config.sweep` entry that cannot run: a name outside
  `SWEEPABLE` or the agent's `sweepable`, or values that are not distinct finite numbers > 0."""
  sweep = config.get("sweep") or {}
  for name in sorted(sweep):
    values, field = sweep[name], f"config.sweep.{name}"
    if values in (None, ()):
      continue
    if name not in SWEEPABLE:
      raise checks.ConfigError(
        f"{field}: not a sweepable hyperparameter; expected one of {list(SWEEPABLE)}"
      )
    if not (
      isinstance(values, tuple)
      and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for v in values
      )
      and len(set(values)) == len(values)
    ):
      raise checks.ConfigError(
        f"{field}: expected distinct finite numbers > 0 (e.g. 1e-4,3e-4), got {values!r}"
      )
    if sweepable is not None and name not in sweepable:
      raise checks.ConfigError(
        f"{field}: agent {config.get('agent')!r} cannot sweep it; sweepable: "
        f"{', '.join(sweepable) or 'nothing'}"
      )


_INJECTED_STATES = (optax.InjectHyperparamsState, optax.InjectStatefulHyperparamsState)


class NotInjected(ValueError):
  """`set_hyperparameters` found no optimizer state that injects a hyperparameter."""

  def __init__(self, name: str):
    super().__init__(f"no optimizer state injects {name!r} (optax.inject_hyperparams)")
    self.name = name


def set_hyperparameters(state: Any, values: dict) -> Any:
  """`state` with `hyperparams[name] = values[name]` in every optimizer state within it that
  injects `name` (`optax.inject_hyperparams`); `NotInjected` for a name none injects.

  The spine's one way into an agent's hyperparameters: it looks for the injected states in the
  run state's pytree and imports no agent code.
  """
  found = set()

  def set_in(node):
    if not isinstance(node, _INJECTED_STATES):
      return node
    hyperparams = dict(node.hyperparams)
    for name, value in values.items():
      if name in hyperparams:
        hyperparams[name] = jnp.asarray(value, jnp.result_type(hyperparams[name]))
        found.add(name)
    return node._replace(hyperparams=hyperparams)

  state = jax.tree.map(set_in, state, is_leaf=lambda node: isinstance(node, _INJECTED_STATES))
  for name in values:
    if name not in found:
      raise NotInjected(name)
  return state
