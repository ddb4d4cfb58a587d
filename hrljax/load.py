"""A trained run read back from its workdir, to evaluate or act with.

  run = hrljax.load_run("runs/ppo")
  run.evaluate()  # {seed: metrics}: the run's final evaluation, made again
  action = run.seed_state().agent.act(obs, key, deterministic=True)

`load_run` rebuilds the config the run trained with (`config.json` over its agent's defaults),
the agent's learner, and the run state of the latest checkpoint (or of `step`; `step=0` is the
state every run starts from, rebuilt from its seeds: the policy before training). The agent comes
from the agent registry, the module named by `AGENT_REGISTRY` (its `get(config.agent)`), looked
up by name when `load_run` is called: the spine imports no agent module, and this lookup is the
one place where it reaches the agents.
"""

import importlib
import json
import os
from typing import Any, NamedTuple, Optional, Union

import ml_collections

from hrljax import checkpoint as ckpt
from hrljax import provenance, training

AGENT_REGISTRY = "hrljax.agents"  # a module with `get(name) -> agent module`


class Run(NamedTuple):
  """A run restored from its workdir."""

  config: ml_collections.ConfigDict  # the config it trained with
  learner: Union[training.Learner, training.HostLearner]  # its agent's `make_learner(config)`
  state: Any  # the run state of the checkpoint; with a leading seed axis for several seeds
  update: int  # the update of the checkpoint

  def seed_state(self, seed: Optional[int] = None) -> Any:
    """The run state of seed `seed` (the run's first seed by default); in a sweep, of the member
    `(seed, *swept values)` (the first member by default)."""
    states = dict(training.seed_states(self.config, self.state))
    seed = next(iter(states)) if seed is None else seed
    if seed not in states:
      raise ValueError(f"seed: expected one of the run's seeds {list(states)}, got {seed!r}")
    return states[seed]

  def evaluate(self) -> dict:
    """`{seed: metrics}`: the evaluation the run made at this state's update (`learner.evaluate`
    with the run's evaluation keys of that update, and the host evaluation where the agent has
    one): at its end, at update 0, or at an evaluation in between."""
    return training.final_evaluation(self.learner, self.config, self.state, update=self.update)


def _config_value(value: Any) -> Any:
  """A JSON value as a config holds it: lists become tuples (JSON has no tuples)."""
  if isinstance(value, list):
    return tuple(_config_value(v) for v in value)
  if isinstance(value, dict):
    return {k: _config_value(v) for k, v in value.items()}
  return value


def agent_module(name: str):
  """The agent module called `name`, from the registry `AGENT_REGISTRY`."""
  return importlib.import_module(AGENT_REGISTRY).get(name)


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config the run in `workdir` trained with: its `config.json` over the defaults of its
  agent (a field the agent gained after the run was saved has the value the run used)."""
  path = os.path.join(workdir, provenance.CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"workdir: expected a run directory with {path}, found none")
  with open(path) as f:
    saved = _config_value(json.load(f))
  if "agent" not in saved:
    raise ValueError(f"{path}: expected an `agent` field naming the run's agent, found none")
  defaults = agent_module(saved["agent"]).get_config().to_dict()
  return ml_collections.ConfigDict({**defaults, **saved})


def _checkpoint_update(workdir: str, step: Optional[int]) -> int:
  """`step`, or the latest checkpoint's update; FileNotFoundError naming the workdir if none.
  Update 0 needs no checkpoint (`load_run` rebuilds it)."""
  if step == 0:
    return 0
  directory = os.path.join(workdir, "checkpoints")
  steps = []
  if os.path.isdir(directory):
    checkpointer = ckpt.Checkpointer(directory)
    try:
      steps = checkpointer.all_steps()
    finally:
      checkpointer.close()
  if not steps:
    raise FileNotFoundError(f"workdir: expected a checkpoint in {workdir}, found none")
  if step is not None and step not in steps:
    raise ValueError(f"step: expected 0 or one of the checkpointed updates {steps}, got {step!r}")
  return steps[-1] if step is None else step


def with_overrides(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """`config` with the fields of `overrides` (dotted names: `"task.max_operand"`) set; a
  ValueError names a field the config does not have."""
  config = ml_collections.ConfigDict(config.to_dict())
  for name, value in overrides.items():
    *parents, field = name.split(".")
    node = config
    for parent in parents:
      node = node.get(parent) if isinstance(node, ml_collections.ConfigDict) else None
    if not isinstance(node, ml_collections.ConfigDict) or field not in node:
      raise ValueError(f"overrides: expected fields of the run's config, got {name!r}")
    node[field] = value
  return config


def load_run(workdir: str, step: Optional[int] = None, overrides: Optional[dict] = None) -> Run:
  """The config, learner and run state of the run in `workdir` (its latest checkpoint, the
  checkpoint of update `step`, or with `step=0` the state the run started from), ready to evaluate (`run.evaluate()`, or `run.learner.evaluate`
  with keys of one's own) or act with (`run.seed_state().agent`). `overrides` sets config
  fields that do not change the run state, such as the evaluation's size
  (`{"eval_episodes": 1024}`)."""
  config = load_config(workdir)
  if overrides:
    config = with_overrides(config, overrides)
  update = _checkpoint_update(workdir, step)
  learner = agent_module(config.agent).make_learner(config)
  if update == 0:
    state = training.initial_state(learner, config)
  else:
    state = training.restore(learner, config, workdir, step=update)
  return Run(config, learner, state, update)
