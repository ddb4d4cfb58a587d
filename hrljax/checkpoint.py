"""Checkpoints: orbax's CheckpointManager behind a small interface (save / restore / latest).

Saves are asynchronous and atomic (orbax writes to a temporary directory and renames it when the
write is complete), so a run killed mid-save restarts from the last complete checkpoint: the
half-written temporary directories of a killed run are removed when the next run opens the
directory, and a step directory without its state item is never restored. The directory is
probed with a small write when the checkpointer is created, and the first save of a checkpointer
is waited for, so an unwritable or full directory is reported at start-up or at the first save
as a `CheckpointError` naming the directory, instead of surfacing later inside orbax.
Restoring goes into an abstract tree (shapes, dtypes and shardings of a freshly initialised
state), so shardings and typed PRNG keys come back as they were saved. The experiment config is
saved as JSON beside the state.
"""

import os
import shutil
from typing import Any, Callable, Optional

import jax
import orbax.checkpoint as ocp


class CheckpointError(OSError):
  """The checkpoint directory cannot be written: unwritable, full, or a save failed."""


class CheckpointMismatch(ValueError):
  """A checkpoint on disk does not fit the run state the current config and code build."""


def probe_writable(directory: str) -> None:
  """Creates `directory` and writes and removes a small file in it; `CheckpointError` if it can't."""
  probe = os.path.join(directory, f".write_probe.{os.getpid()}")
  try:
    os.makedirs(directory, exist_ok=True)
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as error:
    raise CheckpointError(
      f"checkpoint directory {directory!r} is not writable: {error.strerror or error}"
    ) from error


def remove_half_written_saves(directory: str) -> None:
  """Removes the temporary directories of saves that never finished (a killed run's), before
  the directory is used. Done here, synchronously, rather than by orbax's own cleanup, which runs
  in a background thread of every manager opened on the directory: two managers (a run and a
  reader of its latest step, or the processes of one run) would remove the same tree at once
  and one of them fail. Concurrent removals here are harmless: what another removed is skipped."""
  for name in os.listdir(directory):
    if ocp.path.atomicity_types.TMP_DIR_SUFFIX in name:
      shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def _stored_shape(leaf: Any) -> tuple:
  """The shape `leaf` is written with: a typed PRNG key is stored as its raw key data."""
  if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):  # abstract leaves too (eval_shape)
    return tuple(jax.eval_shape(jax.random.key_data, leaf).shape)
  return tuple(leaf.shape)


class Checkpointer:
  """Keeps the `max_to_keep` newest checkpoints of a run under `directory`."""

  def __init__(self, directory: str, max_to_keep: int = 2):
    self.directory = os.path.abspath(directory)
    probe_writable(self.directory)
    remove_half_written_saves(self.directory)
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    # Handlers named up front, so that a fresh manager can read a checkpoint's metadata.
    handlers = {"state": ocp.StandardCheckpointHandler(), "metadata": ocp.JsonCheckpointHandler()}
    self._manager = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)
    self._saved_once = False

  def _reporting(self, what: str, call: Callable[[], Any]) -> Any:
    """Runs `call`, turning a failed write into a `CheckpointError` that names the directory."""
    try:
      return call()
    except (OSError, ValueError, RuntimeError) as error:
      raise CheckpointError(f"{what} in {self.directory} failed: {error}") from error

  def save(self, step: int, state: Any, metadata: Optional[dict] = None) -> None:
    """Starts an asynchronous save of `state` (and JSON `metadata`) as checkpoint `step`.

    The first save of a checkpointer is waited for, so that a directory that cannot take a
    checkpoint (full, unwritable) fails here; a later save's failure is raised by the next
    `save`, `wait` or `close`.
    """
    items = {"state": ocp.args.StandardSave(state)}
    if metadata is not None:
      items["metadata"] = ocp.args.JsonSave(metadata)
    self._reporting(
      f"saving checkpoint {step}",
      lambda: self._manager.save(step, args=ocp.args.Composite(**items), force=True),
    )
    if not self._saved_once:
      self._reporting(f"saving checkpoint {step}", self._manager.wait_until_finished)
      self._saved_once = True

  def latest_step(self) -> Optional[int]:
    """The newest complete checkpoint (one whose state item is on disk), or None."""
    steps = self.all_steps()
    return steps[-1] if steps else None

  def all_steps(self) -> list[int]:
    """The complete checkpoints, oldest first (half-written temporary directories excluded)."""
    return sorted(
      step
      for step in self._manager.all_steps()
      if os.path.isdir(os.path.join(self.directory, str(step), "state"))
    )

  def restore(self, like: Any, step: Optional[int] = None) -> Any:
    """Restores checkpoint `step` (the latest if None) into the structure and shardings of `like`."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    # Checked before reading: orbax finds a wrong shape only inside its asynchronous reads,
    # whose failure leaves tracebacks of its event loop on stderr.
    difference = self._first_difference(like, step)
    if difference is not None:
      raise CheckpointMismatch(
        f"checkpoint {step} in {self.directory} does not fit the run state this config "
        f"builds ({difference}); it was written with another config or an older hrljax. "
        f"Resume with the config saved beside it (config.json of the run), or start a new "
        f"--workdir"
      )
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    restored = self._manager.restore(
      step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract))
    )
    return restored.state

  def _first_difference(self, like: Any, step: int) -> Optional[str]:
    """The first array of `like` missing from, added to or shaped unlike checkpoint `step`."""
    stored = ocp.tree.to_flat_dict(self._manager.item_metadata(step)["state"].tree)
    wanted = {
      path: leaf
      for path, leaf in ocp.tree.to_flat_dict(
        ocp.tree.serialize_tree(like, keep_empty_nodes=True)
      ).items()
      if leaf is not None
    }
    unmatched = sorted(set(stored) ^ set(wanted))
    if unmatched:
      where = "in the checkpoint only" if unmatched[0] in stored else "not in the checkpoint"
      return f"{'/'.join(unmatched[0])}: {where}"
    for path, leaf in wanted.items():
      shape = _stored_shape(leaf)
      if stored[path] is not None and tuple(stored[path].shape) != shape:
        return (
          f"{'/'.join(path)}: shape {shape} in this run, "
          f"{tuple(stored[path].shape)} in the checkpoint"
        )
    return None

  def restore_metadata(self, step: Optional[int] = None) -> Optional[dict]:
    step = self.latest_step() if step is None else step
    restored = self._manager.restore(step, args=ocp.args.Composite(metadata=ocp.args.JsonRestore()))
    return restored.metadata

  def wait(self) -> None:
    """Blocks until every pending save is on disk."""
    self._reporting("writing a checkpoint", self._manager.wait_until_finished)

  def close(self) -> None:
    self.wait()
    self._manager.close()
