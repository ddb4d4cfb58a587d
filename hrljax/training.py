"""The training loop: init -> compiled chunks of updates -> log -> checkpoint -> evaluate.

An algorithm hands the loop a `Learner`: a pure `init(key)`, a pure `step(state)` that performs one
update and returns scalar metrics, and a pure `evaluate(state, key)`. The loop compiles
`log_every` steps into one `lax.scan` program placed on the device mesh, and between chunks
writes a JSONL record, prints a progress line, saves an orbax checkpoint every
`checkpoint_every` updates, and stops with a message if a metric or a parameter became NaN or
infinite (keeping the last good checkpoint). Started again with the same workdir, it resumes
from the latest checkpoint and reproduces the uninterrupted run exactly.
"""

import json
import math
import os
import time
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from hrljax import checkpoint as ckpt
from hrljax import distributed
from hrljax.logging import MetricsLogger, format_progress, write_environment


class Learner(NamedTuple):
  """What an algorithm gives the training loop."""

  init: Callable[[jax.Array], Any]  # key -> run state
  step: Callable[[Any], tuple[Any, dict]]  # run state -> (run state, scalar metrics)
  evaluate: Callable[[Any, jax.Array], dict]  # (run state, key) -> scalar metrics
  num_updates: int
  env_steps_per_update: int
  sharded_field: Optional[str] = None  # the run-state field holding per-environment data


def whole_run(learner: Learner) -> Callable[[jax.Array], tuple[Any, dict]]:
  """`train(key) -> (final state, per-update metrics)`: every update of a run in one `lax.scan`.

  The whole run is one XLA program with no host round trip: jit it, or
  `jax.jit(jax.vmap(train))(keys)` to train many seeds (or hyperparameters) at once.
  """
  def train(key: jax.Array) -> tuple[Any, dict]:
    return jax.lax.scan(lambda state, _: learner.step(state), learner.init(key), None,
                        length=learner.num_updates)
  return train


class TrainingDiverged(RuntimeError):
  """A metric or a parameter became NaN or infinite."""


def summarize(metric_sums: dict, num_updates: int) -> dict:
  """Turns the per-chunk sums of per-update metrics into one number each.

  `<name>_sum` metrics paired with an `episodes` count become `<name>` means over the episodes
  that ended in the chunk (NaN if none did); every other metric becomes its mean over the
  chunk's updates.
  """
  sums = {k: float(np.asarray(v)) for k, v in metric_sums.items()}
  episodes = sums.get("episodes")
  out = {}
  for key, value in sums.items():
    if key.endswith("_sum") and episodes is not None:
      out[key[:-4]] = value / episodes if episodes > 0 else math.nan
    elif key == "episodes":
      out[key] = value
    else:
      out[key] = value / num_updates
  return out


def undefined_episode_means(metric_sums: dict) -> tuple:
  """The metrics `summarize` leaves NaN because no episode ended in the chunk (every
  `<name>_sum` paired with an `episodes` count of 0): undefined, not diverged. Where an episode
  did end they stay checked, so a NaN episode cost still stops the run."""
  episodes = metric_sums.get("episodes")
  if episodes is None or float(np.asarray(episodes)) > 0:
    return ()
  return tuple(key[:-4] for key in metric_sums if key.endswith("_sum"))


def _float_leaves(state: Any) -> list:
  return [(path, leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
          if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)]


@jax.jit
def _all_finite_per_leaf(leaves: list) -> list:
  # Scalar reductions come back replicated, so every process of a multi-process run can read them.
  return [jnp.all(jnp.isfinite(leaf)) for leaf in leaves]


# Episode statistics some learners report directly (not as `_sum` + `episodes`), NaN when no
# episode ended.
NAN_WHEN_NO_EPISODE_ENDED = ("episode_return", "episode_length")


def first_non_finite(metrics: dict, state: Any,
                     ignore: tuple = NAN_WHEN_NO_EPISODE_ENDED) -> Optional[str]:
  """The name of the first NaN/inf metric, else the path of the first NaN/inf state leaf, else None.

  Episode statistics are NaN when no episode ended in a chunk: that is not a divergence.
  """
  for key, value in metrics.items():
    if key not in ignore and not math.isfinite(value):
      return f"metric {key!r} = {value}"
  leaves = _float_leaves(state)
  flags = jax.device_get(_all_finite_per_leaf([leaf for _, leaf in leaves]))
  for (path, _), finite in zip(leaves, flags):
    if not finite:
      return f"state leaf {jax.tree_util.keystr(path)}"
  return None


def _chunk_fn(learner: Learner, example_state: Any) -> Callable:
  """`chunk(state, n) -> (state, metric sums)`: n updates in one compiled loop.

  The trip count is a traced argument, so one compiled program serves every chunk length
  (a final partial chunk costs no second compile); metrics are summed in the loop carry.
  """
  metric_shapes = jax.eval_shape(learner.step, example_state)[1]

  def chunk(state, num_updates):
    def body(_, carry):
      state, sums = carry
      state, metrics = learner.step(state)
      return state, jax.tree.map(jnp.add, sums, metrics)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
    return jax.lax.fori_loop(0, num_updates, body, (state, zeros))
  return chunk


def _write_config(workdir: str, config) -> None:
  """`config.json` and `environment.json` (package versions, CPU: what else the numbers need)."""
  config_json = json.loads(config.to_json_best_effort()) if hasattr(config, "to_json_best_effort") \
      else dict(config)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump(config_json, f, indent=2, sort_keys=True)
  write_environment(workdir)


def _diverged(problem: str, update: int, checkpointer: ckpt.Checkpointer) -> TrainingDiverged:
  checkpointer.close()
  return TrainingDiverged(
      f"non-finite {problem} at update {update}; stopped without saving. "
      f"The last good checkpoint is update {checkpointer.latest_step()} in "
      f"{checkpointer.directory}.")


def _resume(checkpointer: ckpt.Checkpointer, state: Any, logger: MetricsLogger
            ) -> tuple[Any, int, float]:
  """`(state, updates done, wall seconds spent)` from the latest checkpoint, or from scratch."""
  update = checkpointer.latest_step()
  if update is None:
    return state, 0, 0.0
  state = checkpointer.restore(like=state, step=update)
  elapsed = float((checkpointer.restore_metadata(update) or {}).get("wall_time", 0.0))
  logger.truncate_after(update)  # the records after the checkpoint will be written again
  logger.progress(f"resumed from the checkpoint at update {update} in {checkpointer.directory}")
  return state, update, elapsed


def train(learner: Learner, config, workdir: str, mesh=None, logger: Optional[MetricsLogger] = None,
          log_every: int = 10, checkpoint_every: int = 100, max_checkpoints: int = 2,
          seed: int = 0) -> Any:
  """Runs (or resumes) a whole experiment in `workdir`; returns the final run state."""
  mesh = distributed.make_mesh() if mesh is None else mesh
  is_writer = jax.process_index() == 0
  logger = logger or MetricsLogger(workdir, enabled=is_writer)
  ckpt.probe_writable(workdir)  # a clear CheckpointError naming the workdir, before any work

  key = jax.random.key(seed)
  init_key, eval_key = jax.random.split(key)
  state = jax.jit(learner.init)(init_key)
  shardings = distributed.data_parallel_shardings(state, mesh, learner.sharded_field)
  state = distributed.place(state, shardings)

  checkpointer = ckpt.Checkpointer(os.path.join(workdir, "checkpoints"), max_checkpoints)
  state, update, elapsed = _resume(checkpointer, state, logger)
  if is_writer:  # after the resume: a checkpoint that does not fit keeps the config it came from
    _write_config(workdir, config)

  start = time.perf_counter()
  chunk = distributed.jit_step(_chunk_fn(learner, state), shardings, num_other_args=1)
  chunk = chunk.lower(state, jnp.int32(log_every)).compile()
  logger.progress(f"compiled the update loop in {time.perf_counter() - start:.1f} s")

  while update < learner.num_updates:
    length = min(log_every, learner.num_updates - update)
    start = time.perf_counter()
    state, metric_sums = chunk(state, jnp.int32(length))
    metric_sums = jax.device_get(metric_sums)
    metrics = summarize(metric_sums, length)
    seconds = time.perf_counter() - start
    update += length
    elapsed += seconds
    problem = first_non_finite(metrics, state, ignore=NAN_WHEN_NO_EPISODE_ENDED
                               + undefined_episode_means(metric_sums))
    if problem is not None:
      raise _diverged(f"{problem} in the chunk ending", update, checkpointer)
    record = {"phase": "train", "update": update,
              "env_steps": update * learner.env_steps_per_update, "wall_time": elapsed,
              "env_steps_per_second": length * learner.env_steps_per_update / max(seconds, 1e-9),
              **metrics}
    logger.progress(format_progress(logger.write(record), learner.num_updates))
    if update % checkpoint_every == 0 or update == learner.num_updates:
      checkpointer.save(update, state, metadata={"update": update, "wall_time": elapsed})

  checkpointer.close()
  evaluate = distributed.jit_replicated_output(learner.evaluate, mesh)
  evaluation = {k: float(v) for k, v in jax.device_get(evaluate(state, eval_key)).items()}
  record = logger.write({"phase": "eval", "update": update,
                         "env_steps": update * learner.env_steps_per_update,
                         "wall_time": elapsed, **evaluation})
  logger.progress("evaluation: " + ", ".join(f"{k} {v:.4g}" for k, v in record.items()
                                             if k.startswith("eval")))
  return state


class HostLearner(NamedTuple):
  """A learner whose update runs host code between compiled programs.

  Language-model agents score their samples in Python (parsing text, checking answers), so one
  update cannot be a pure `step` compiled into `train`'s chunks. Their `step` is a host
  function calling jitted pieces; `train_on_host` gives it the same logging, checkpointing,
  resume and NaN stop as `train`.
  """

  init: Callable[[], Any]  # () -> run state (with an integer `update` field)
  step: Callable[[Any], tuple[Any, dict]]  # run state -> (run state, metrics); str values are
  #                                          examples shown in the progress line, never logged
  evaluate: Optional[Callable[[Any], dict]]  # run state -> scalar metrics, or None
  num_updates: int
  env_steps_per_update: int
  progress: Callable[[dict, dict], str]  # (logged record, str metrics) -> one progress line


def train_on_host(learner: HostLearner, config, workdir: str, logger: Optional[MetricsLogger] = None,
                  log_every: int = 1, checkpoint_every: int = 10, max_checkpoints: int = 2,
                  eval_every: int = 10) -> Any:
  """Runs (or resumes) a `HostLearner` in `workdir`; returns the final run state.

  Writes `config.json`, `metrics.jsonl` (an evaluation record with `phase="eval"` at update 0,
  every `eval_every` updates and at the end) and `checkpoints/`. A NaN or infinite metric or
  state leaf stops the run before it is saved, naming the update and the quantity.
  """
  os.makedirs(workdir, exist_ok=True)
  ckpt.probe_writable(workdir)
  logger = logger or MetricsLogger(workdir)
  checkpointer = ckpt.Checkpointer(os.path.join(workdir, "checkpoints"), max_checkpoints)
  state, update, elapsed = _resume(checkpointer, learner.init(), logger)
  _write_config(workdir, config)  # after the resume, as in `train`

  def log_evaluation():
    logger.write(dict(phase="eval", update=update, env_steps=update * learner.env_steps_per_update,
                      wall_time=elapsed, **learner.evaluate(state)))

  if learner.evaluate is not None and update == 0:
    log_evaluation()
  while update < learner.num_updates:
    start = time.perf_counter()
    state, metrics = learner.step(state)
    elapsed += time.perf_counter() - start
    update = int(state.update)
    texts = {k: v for k, v in metrics.items() if isinstance(v, str)}
    numbers = {k: float(v) for k, v in metrics.items() if k not in texts}
    problem = first_non_finite(numbers, state)
    if problem is not None:
      raise _diverged(problem, update, checkpointer)
    record = dict(phase="train", update=update,
                  env_steps=update * learner.env_steps_per_update, wall_time=elapsed, **numbers)
    if update % log_every == 0:
      logger.write(record)
      logger.progress(learner.progress(record, texts))
    if learner.evaluate is not None and (update % eval_every == 0
                                         or update == learner.num_updates):
      log_evaluation()
    if update % checkpoint_every == 0 or update == learner.num_updates:
      checkpointer.save(update, state, metadata={"update": update, "wall_time": elapsed})
  checkpointer.close()
  return state
