"""Checkpoints: orbax's CheckpointManager behind a small interface (save / restore / latest).

Saves are asynchronous and atomic (orbax writes to a temporary directory and renames it when the
write is complete), so a run killed mid-save restarts from the last complete checkpoint.
Restoring goes into an abstract tree (shapes, dtypes and shardings of a freshly initialised
state), so shardings and typed PRNG keys come back as they were saved. The experiment config is
saved as JSON beside the state.
"""

import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp


class Checkpointer:
  """Keeps the `max_to_keep` newest checkpoints of a run under `directory`."""

  def __init__(self, directory: str, max_to_keep: int = 2):
    self.directory = os.path.abspath(directory)
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def save(self, step: int, state: Any, metadata: Optional[dict] = None) -> None:
    """Starts an asynchronous save of `state` (and JSON `metadata`) as checkpoint `step`."""
    items = {"state": ocp.args.StandardSave(state)}
    if metadata is not None:
      items["metadata"] = ocp.args.JsonSave(metadata)
    self._manager.save(step, args=ocp.args.Composite(**items), force=True)

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def restore(self, like: Any, step: Optional[int] = None) -> Any:
    """Restores checkpoint `step` (the latest if None) into the structure and shardings of `like`."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    restored = self._manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
    return restored.state

  def restore_metadata(self, step: Optional[int] = None) -> Optional[dict]:
    step = self.latest_step() if step is None else step
    restored = self._manager.restore(step, args=ocp.args.Composite(metadata=ocp.args.JsonRestore()))
    return restored.metadata

  def wait(self) -> None:
    """Blocks until every pending save is on disk."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()
