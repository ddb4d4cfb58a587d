"""The training loop: init -> compiled chunks of updates -> log -> checkpoint -> evaluate.

An algorithm hands the loop a `Learner`: a pure `init(key)`, a pure `step(state)` that performs one
update and returns scalar metrics, and a pure `evaluate(state, key)`. The loop compiles
`log_every` steps into one `lax.scan` program placed on the device mesh, and between chunks
writes a JSONL record, prints a progress line, evaluates every `eval_every` updates, saves an
orbax checkpoint every `checkpoint_every` updates, and stops with a message if a metric or a
parameter became NaN or infinite (keeping the last good checkpoint). Started again with the same
workdir, it resumes from the latest checkpoint and reproduces the uninterrupted run exactly.
Checkpoints record the run's last update, so that `finished_update` tells a finished run from
its checkpoint's metadata alone, before any learner is built.

Seeds are an axis of the one program: with `config.seeds = (0, 1, 2)` the learner's `init`, `step`
and `evaluate` are `vmap`ped over the seeds and every record carries its `seed`. Seed `s` starts
from `jax.random.split(jax.random.key(s))[0]`, so a one-seed run is the run of that seed alone
(several seeds in one program can round differently from the runs one by one).

Hyperparameters are a grid on the same axis: `config.sweep.learning_rate = (1e-4, 3e-4)` with
`config.seeds = (0, 1)` trains four members (each value with each seed, value-major) in one
program. A member starts from its seed's key, and after `init` its values are written into the
optimizer states that inject them (`optax.inject_hyperparams`; `hrljax.sweep`). An agent
declares what it can sweep (its module's `SWEEPABLE`); every record carries the member's `seed`
and swept values.

The run-level config fields are defined here, once (`run_config`), and merged into every agent's
config; language-model agents, whose update runs host code, hand over a `HostLearner` instead and
`run` dispatches to `train_on_host`.
"""

import itertools
import json
import math
import os
import time
from typing import Any, Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from ml_collections import config_dict

from hrljax import checkpoint as ckpt
from hrljax import config_checks as checks
from hrljax import chunk_metrics, distributed, provenance
from hrljax import sweep as sweeps
from hrljax import warm_start as warm_starts
from hrljax.logging import MetricsLogger, write_environment

RUN_FIELDS = ("seeds", "sweep", "log_every", "eval_every", "checkpoint_every", "max_checkpoints")


def run_config(
  *,
  log_every: int = 10,
  eval_every: int = 0,
  checkpoint_every: int = 100,
  max_checkpoints: int = 2,
  seeds: tuple = (0,),
) -> ml_collections.ConfigDict:
  """The run-level fields every experiment config carries, with an agent's defaults.

  An agent's `get_config()` starts from this and adds its own fields.
  """
  config = ml_collections.ConfigDict()
  config.seeds = tuple(seeds)  # trained side by side in one program; --config.seeds=0,1,2
  # Values trained side by side, each with every seed, in the same program (None: not swept);
  # --config.sweep.learning_rate=1e-4,3e-4
  config.sweep = ml_collections.ConfigDict(
    {name: config_dict.placeholder(tuple) for name in sweeps.SWEEPABLE}
  )
  config.log_every = log_every  # updates per compiled chunk, JSONL record and progress line
  config.eval_every = eval_every  # updates between evaluations (a multiple of log_every), and one
  #                                 at update 0; 0: at the end only
  config.checkpoint_every = (
    checkpoint_every  # updates between checkpoints (a multiple of log_every)
  )
  config.max_checkpoints = max_checkpoints  # checkpoints kept
  return config


def validate_run_config(config, sweepable: Optional[tuple] = None) -> None:
  """Raises `ConfigError` naming the first run-level field that cannot run.

  `sweepable`: the hyperparameters the config's agent can sweep (its module's `SWEEPABLE`),
  checked against `config.sweep` when given.
  """
  seeds = config.seeds
  if not (
    isinstance(seeds, tuple)
    and seeds
    and len(set(seeds)) == len(seeds)
    and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
  ):
    raise checks.ConfigError(
      f"config.seeds: expected distinct integers >= 0 (e.g. 0,1,2), got {seeds!r}"
    )
  checks.positive_int(config, "log_every", "checkpoint_every", "max_checkpoints")
  eval_every = config.eval_every
  if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 0:
    raise checks.ConfigError(
      f"config.eval_every: expected an integer >= 0 (0: evaluate at the "
      f"end only), got {eval_every!r}"
    )
  checks.divisible(config, "checkpoint_every", config.log_every, "config.log_every")
  checks.divisible(config, "eval_every", config.log_every, "config.log_every")
  sweeps.validate_sweep(config, sweepable)


def num_updates(total: int, per_update: int, field: str = "total_timesteps") -> int:
  """How many updates of `per_update` fit a budget of `total`: the one formula for it."""
  if total < per_update:
    raise checks.ConfigError(
      f"config.{field}: expected at least {per_update} (one update), got {total}"
    )
  return total // per_update


class Learner(NamedTuple):
  """What an algorithm gives the training loop."""

  init: Callable[[jax.Array], Any]  # key -> run state
  step: Callable[[Any], tuple[Any, dict]]  # run state -> (run state, scalar metrics)
  evaluate: Callable[[Any, jax.Array], dict]  # (run state, key) -> scalar metrics
  num_updates: int
  env_steps_per_update: int
  sharded_field: Optional[str] = None  # the run-state field holding per-environment data
  # Evaluation that cannot be compiled (a simulator driven from Python): (state of one seed,
  # seed) -> scalar metrics, run on the host after `evaluate` at every evaluation.
  host_evaluate: Optional[Callable[[Any, int], dict]] = None
  # A costly start of `init` that runs can share (`init(key, warm_start.compute(key))`); `train`
  # computes it separately and caches it when given a `warm_start_cache` directory.
  warm_start: Optional[warm_starts.WarmStart] = None


def whole_run(learner: Learner) -> Callable[[jax.Array], tuple[Any, dict]]:
  """`train(key) -> (final state, per-update metrics)`: every update of a run in one `lax.scan`.

  The whole run is one XLA program with no host round trip: jit it, or
  `jax.jit(jax.vmap(train))(keys)` to train many seeds (or hyperparameters) at once.
  """

  def train(key: jax.Array) -> tuple[Any, dict]:
    return jax.lax.scan(
      lambda state, _: learner.step(state), learner.init(key), None, length=learner.num_updates
    )

  return train


def zeros_like_shapes(shapes: Any) -> Any:
  """Zeros of the shapes and dtypes of a `jax.eval_shape` result."""
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def when(predicate: jax.Array, update_fn: Callable, state: Any, *args) -> tuple[Any, dict]:
  """`update_fn(state, *args) -> (state, metrics)` where the traced bool `predicate` holds, else
  `state` unchanged with zero metrics of the same shapes (`lax.cond` needs both branches to
  return one structure): updates that wait for `learning_starts` or a warm-up."""
  metric_shapes = jax.eval_shape(update_fn, state, *args)[1]
  skip = lambda state, *_: (state, zeros_like_shapes(metric_shapes))
  return jax.lax.cond(predicate, update_fn, skip, state, *args)


class TrainingDiverged(RuntimeError):
  """A metric or a parameter became NaN or infinite."""


def _chunk_fn(step: Callable, example_state: Any) -> Callable:
  """`chunk(state, n) -> (state, metric sums)`: n updates in one compiled loop.

  The trip count is a traced argument, so one compiled program serves every chunk length
  (a final partial chunk costs no second compile); metrics are summed in the loop carry.
  """
  metric_shapes = jax.eval_shape(step, example_state)[1]

  def chunk(state, num_updates):
    def body(_, carry):
      state, sums = carry
      state, metrics = step(state)
      return state, jax.tree.map(jnp.add, sums, metrics)

    return jax.lax.fori_loop(0, num_updates, body, (state, zeros_like_shapes(metric_shapes)))

  return chunk


def _write_config(workdir: str, config) -> None:
  """`config.json` and `environment.json` (code revision, package versions, CPU: what else the
  numbers need)."""
  with open(os.path.join(workdir, provenance.CONFIG_FILE), "w") as f:
    json.dump(provenance.config_json(config), f, indent=2, sort_keys=True)
  write_environment(workdir)


def _diverged(problem: str, update: int, checkpointer: ckpt.Checkpointer) -> TrainingDiverged:
  checkpointer.close()
  return TrainingDiverged(
    f"non-finite {problem} at update {update}; stopped without saving. "
    f"The last good checkpoint is update {checkpointer.latest_step()} in "
    f"{checkpointer.directory}."
  )


def _checkpoint_metadata(update: int, elapsed: float, learner) -> dict:
  """What a checkpoint records beside the state: its update, the wall time spent, and the run's
  last update (so a finished run is recognised without building its learner)."""
  return {"update": update, "wall_time": elapsed, "num_updates": learner.num_updates}


def finished_update(workdir: str, config, allow_config_change: bool = False) -> Optional[int]:
  """The last update of the run in `workdir` when its latest checkpoint is that update and
  `config` trains what the run's `config.json` says: nothing is left to do. None otherwise (no
  checkpoint, an unfinished run, a checkpoint that does not record its run's last update, or a
  config change that `allow_config_change` accepts, which may extend the run).

  Reads the checkpoint's metadata only; builds and compiles nothing. A config whose training
  fields differ raises `provenance.ConfigChanged` unless `allow_config_change`. Every process of
  a multi-process run opens the checkpoint directory here (creating it for a fresh run), as
  `train` does next, so that orbax's collective steps match across the processes.
  """
  checkpointer = ckpt.Checkpointer(os.path.join(workdir, "checkpoints"))
  try:
    update = checkpointer.latest_step()
    metadata = (checkpointer.restore_metadata(update) or {}) if update is not None else {}
  finally:
    checkpointer.close()
  last = metadata.get("num_updates")
  if last is None or update < last:
    return None
  if provenance.check_resumed_config(workdir, config, update, allow_config_change) is not None:
    return None
  return update


def _resume(
  checkpointer: ckpt.Checkpointer, state: Any, logger: MetricsLogger
) -> tuple[Any, int, float]:
  """`(state, updates done, wall seconds spent)` from the latest checkpoint, or from scratch."""
  update = checkpointer.latest_step()
  if update is None:  # a fresh run, or one killed before its first checkpoint: start the log anew
    logger.truncate_after(0)
    return state, 0, 0.0
  state = checkpointer.restore(like=state, step=update)
  elapsed = float((checkpointer.restore_metadata(update) or {}).get("wall_time", 0.0))
  logger.truncate_after(update)  # the records after the checkpoint will be written again
  logger.progress(f"resumed from the checkpoint at update {update} in {checkpointer.directory}")
  return state, update, elapsed


class _Members(NamedTuple):
  """The member axis of a compiled run: every seed of `config.seeds` for each combination of the
  swept values of `config.sweep` (value-major). One member runs the learner as it is, several
  `vmap` it."""

  labels: tuple  # per member: {"seed": seed, <swept name>: value, ...}
  values: dict  # per swept name: the members' values, [] for one member, [M] for several
  init_keys: jax.Array  # [] for one member, [M] for several; the keys of the member's seed
  eval_keys: jax.Array

  @classmethod
  def of(cls, config) -> "_Members":
    sweep = sweeps.sweep_values(config)
    labels = tuple(
      {"seed": seed, **dict(zip(sweep, combination))}
      for combination in itertools.product(*sweep.values())
      for seed in config.seeds
    )
    pairs = [jax.random.split(jax.random.key(label["seed"])) for label in labels]
    init_keys = jnp.stack([p[0] for p in pairs])
    eval_keys = jnp.stack([p[1] for p in pairs])
    values = {name: np.array([label[name] for label in labels], float) for name in sweep}
    if len(labels) == 1:
      init_keys, eval_keys = init_keys[0], eval_keys[0]
      values = {name: v[0] for name, v in values.items()}
    return cls(labels, values, init_keys, eval_keys)

  @property
  def batched(self) -> bool:
    return len(self.labels) > 1

  @property
  def ids(self) -> list:
    """Each member's key: its seed, or `(seed, *swept values)` in a sweep."""
    if not self.values:
      return [label["seed"] for label in self.labels]
    return [tuple(label.values()) for label in self.labels]

  def describe(self, i: int) -> str:
    """Member `i` in words: "seed 0, learning_rate 0.0003"."""
    return ", ".join(f"{k} {v}" for k, v in self.labels[i].items())

  def map(self, fn: Callable) -> Callable:
    return jax.vmap(fn) if self.batched else fn

  def init(self, init: Callable, warm: Any = None) -> tuple[Callable, tuple]:
    """`(fn, args)`: the members' run states are `fn(*args)`, the learner's `init` with each
    member's swept values written into its optimizer states after it. `warm` (optional): the
    members' precomputed warm starts, handed to `init` as its second argument."""
    warm_args = () if warm is None else (warm,)
    if not self.values:
      return self.map(init), (self.init_keys, *warm_args)

    def init_member(key, values, *warm_args):
      return sweeps.set_hyperparameters(init(key, *warm_args), values)

    return self.map(init_member), (self.init_keys, self.values, *warm_args)

  def warm_starts(self, learner: "Learner", cache_dir: str, logger: MetricsLogger) -> Any:
    """The members' warm starts (stacked when several), read from `cache_dir` or computed in a
    program of their own (vmapped, also for one member) and written there; None (`init` computes its own) for a learner without
    a warm start or without a cache directory."""
    if learner.warm_start is None or not cache_dir:
      return None
    keys = self.init_keys if self.batched else self.init_keys[None]
    starts = warm_starts.member_starts(
      learner.warm_start,
      keys,
      cache_dir,
      write=jax.process_index() == 0,
      progress=logger.progress,
    )
    return starts if self.batched else jax.tree.map(lambda x: x[0], starts)

  def split(self, tree: Any) -> list:
    """The members' slices of a batched tree, or the tree itself, in member order."""
    if not self.batched:
      return [tree]
    return [jax.tree.map(lambda x, i=i: x[i], tree) for i in range(len(self.labels))]

  def keys_at(self, keys: jax.Array, update: Optional[int]) -> jax.Array:
    """The evaluation keys at `update` (the final evaluation, `None`, uses the keys themselves)."""
    if update is None:
      return keys
    return self.map(lambda k: jax.random.fold_in(k, update))(keys)


def _chunk_records(
  members: _Members,
  metric_sums: dict,
  length: int,
  update: int,
  learner: Learner,
  elapsed: float,
  seconds: float,
) -> list:
  """One train record per member from a chunk's metric sums."""
  records = []
  for label, sums in zip(members.labels, members.split(metric_sums)):
    records.append(
      {
        "phase": "train",
        **label,
        "update": update,
        "env_steps": update * learner.env_steps_per_update,
        "wall_time": elapsed,
        "env_steps_per_second": length * learner.env_steps_per_update / max(seconds, 1e-9),
        **chunk_metrics.summarize(sums, length),
      }
    )
  return records


def _first_problem(
  members: _Members, records: list, metric_sums: dict, state: Any
) -> Optional[str]:
  """The first non-finite metric (naming its member when there are several) or state leaf."""
  for i, (sums, record) in enumerate(zip(members.split(metric_sums), records)):
    metrics = {k: v for k, v in record.items() if k not in ("phase", "update", *members.labels[i])}
    problem = chunk_metrics.first_non_finite(
      metrics,
      {},
      ignore=chunk_metrics.NAN_WHEN_NO_EPISODE_ENDED + chunk_metrics.undefined_episode_means(sums),
    )
    if problem is not None:
      return f"{problem} ({members.describe(i)})" if members.batched else problem
  return chunk_metrics.first_non_finite({}, state)


class _Evaluator:
  """Compiled (`Learner.evaluate`) and host (`Learner.host_evaluate`) evaluation of every member."""

  def __init__(self, learner: Learner, members: _Members, mesh):
    self.learner, self.members = learner, members
    self.compiled = None
    if learner.evaluate is not None:
      self.compiled = distributed.jit_replicated_output(members.map(learner.evaluate), mesh)

  def __call__(self, state: Any, update: Optional[int]) -> list:
    """One dict of metrics per member, in member order."""
    results = [dict() for _ in self.members.labels]
    if self.compiled is not None:
      keys = self.members.keys_at(self.members.eval_keys, update)
      metrics = jax.device_get(self.compiled(state, keys))
      for i, m in enumerate(self.members.split(metrics)):
        results[i].update({k: float(v) for k, v in m.items()})
    if self.learner.host_evaluate is not None:
      for i, one in enumerate(self.members.split(state)):
        results[i].update(self.learner.host_evaluate(one, self.members.labels[i]["seed"]))
    return results


def _log_evaluation(
  logger: MetricsLogger,
  members: _Members,
  results: list,
  update: int,
  learner: Learner,
  elapsed: float,
) -> None:
  lines = []
  for i, (label, result) in enumerate(zip(members.labels, results)):
    record = logger.write(
      {
        "phase": "eval",
        **label,
        "update": update,
        "env_steps": update * learner.env_steps_per_update,
        "wall_time": elapsed,
        **result,
      }
    )
    shown = ", ".join(
      f"{k} {v:.4g}"
      for k, v in record.items()
      if k not in ("update", "env_steps", "wall_time", *label)
      and not k.startswith("task")
      and isinstance(v, (int, float))
    )
    lines.append(
      f"evaluation at update {update}"
      + (f" ({members.describe(i)})" if members.batched else "")
      + f": {shown}"
    )
  for line in lines:
    logger.progress(line)


def _progress_record(records: list) -> dict:
  """The record the progress line shows: the only seed's, or the mean over the seeds."""
  if len(records) == 1:
    return records[0]
  mean = dict(records[0])
  for key, value in records[0].items():
    if isinstance(value, float) and key != "wall_time":
      values = [r[key] for r in records if isinstance(r.get(key), float)]
      mean[key] = (
        float(np.nanmean(values)) if values and not all(map(math.isnan, values)) else math.nan
      )
  return mean


def _periodic_evaluation_due(config, update: int, num_updates: int, at_start: bool = False) -> bool:
  """Whether a periodic evaluation belongs at `update` (the final one is always made).

  At the start of a run (`at_start`) this also covers update 0, where a learning curve starts,
  and the update of the checkpoint a run resumes from: its evaluation record was written before
  the checkpoint and dropped by `MetricsLogger.truncate_after`, so it is made again (with the
  same key, so the same numbers).
  """
  if not config.eval_every or update % config.eval_every or update >= num_updates:
    return False
  return at_start or update > 0


def train(
  learner: Learner,
  config,
  workdir: str,
  mesh=None,
  logger: Optional[MetricsLogger] = None,
  allow_config_change: bool = False,
  warm_start_cache: Optional[str] = None,
) -> Any:
  """Runs (or resumes) a whole experiment in `workdir`; returns the final run state.

  Resuming with a config whose training fields differ from the workdir's `config.json` raises
  `provenance.ConfigChanged` before any work, unless `allow_config_change` (then the change is
  recorded in `config_history.jsonl`).

  The run-level fields come from `config` (`run_config`): `seeds`, `sweep`, `log_every`,
  `eval_every`, `checkpoint_every`, `max_checkpoints`. With several members (seeds, or swept
  values with each seed), the state has a leading member axis. `warm_start_cache`: a directory
  where the learner's `warm_start` (if it has one) is read from or saved to (`hrljax.warm_start`).
  """
  validate_run_config(config)
  members = _Members.of(config)
  init, init_args = members.init(learner.init)
  if members.values:  # before any work: a sweep of a hyperparameter the agent does not inject
    _check_injected(config, init, init_args)
  mesh = distributed.make_mesh() if mesh is None else mesh
  is_writer = jax.process_index() == 0
  logger = logger or MetricsLogger(workdir, enabled=is_writer)
  ckpt.probe_writable(workdir)  # a clear CheckpointError naming the workdir, before any work
  checkpointer = ckpt.Checkpointer(os.path.join(workdir, "checkpoints"), config.max_checkpoints)
  change = provenance.check_resumed_config(
    workdir, config, checkpointer.latest_step(), allow_config_change
  )  # before any compilation

  state, shardings = _initial_or_template(
    learner,
    members,
    mesh,
    resuming=checkpointer.latest_step() is not None,
    warm_start_cache=warm_start_cache,
    logger=logger,
  )
  state, update, elapsed = _resume(checkpointer, state, logger)
  if is_writer:  # after the resume: a checkpoint that does not fit keeps the config it came from
    provenance.record_config_change(workdir, change)
    _write_config(workdir, config)

  start = time.perf_counter()
  chunk = distributed.jit_step(
    _chunk_fn(members.map(learner.step), state), shardings, num_other_args=1
  )
  chunk = chunk.lower(state, jnp.int32(config.log_every)).compile()
  logger.progress(f"compiled the update loop in {time.perf_counter() - start:.1f} s")
  evaluate = _Evaluator(learner, members, mesh)
  if _periodic_evaluation_due(config, update, learner.num_updates, at_start=True):
    _log_evaluation(logger, members, evaluate(state, update), update, learner, elapsed)

  while update < learner.num_updates:
    length = min(config.log_every, learner.num_updates - update)
    start = time.perf_counter()
    state, metric_sums = chunk(state, jnp.int32(length))
    metric_sums = jax.device_get(metric_sums)
    seconds = time.perf_counter() - start
    update += length
    elapsed += seconds
    records = _chunk_records(members, metric_sums, length, update, learner, elapsed, seconds)
    problem = _first_problem(members, records, metric_sums, state)
    if problem is not None:
      raise _diverged(f"{problem} in the chunk ending", update, checkpointer)
    for record in records:
      logger.write(record)
    logger.progress(logger.format_progress(_progress_record(records), learner.num_updates))
    if _periodic_evaluation_due(config, update, learner.num_updates):
      _log_evaluation(logger, members, evaluate(state, update), update, learner, elapsed)
    if update % config.checkpoint_every == 0 or update == learner.num_updates:
      checkpointer.save(update, state, metadata=_checkpoint_metadata(update, elapsed, learner))

  checkpointer.close()
  _log_evaluation(logger, members, evaluate(state, None), update, learner, elapsed)
  return state


def _initial_or_template(
  learner: Learner,
  members: _Members,
  mesh,
  resuming: bool,
  warm_start_cache: Optional[str],
  logger: MetricsLogger,
) -> tuple[Any, Any]:
  """`(state, shardings)`: the members' initial state placed on the mesh, or, when a checkpoint
  will replace it, only its shapes with their shardings. A resumed run so never runs `init` nor
  computes the warm start (a behaviour-cloned start can take minutes)."""
  if resuming:
    init, init_args = members.init(learner.init)
    state = jax.eval_shape(init, *init_args)
  else:
    warm = members.warm_starts(learner, warm_start_cache, logger)
    init, init_args = members.init(learner.init, warm)
    state = jax.jit(init)(*init_args)
  shardings = distributed.data_parallel_shardings(
    state, mesh, learner.sharded_field, seed_axis=members.batched
  )
  if resuming:
    with_sharding = lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
    return jax.tree.map(with_sharding, state, shardings), shardings
  return distributed.place(state, shardings), shardings


def _check_injected(config, init: Callable, init_args: tuple) -> None:
  """`ConfigError` for a swept hyperparameter that no optimizer state of the run injects (the
  members' `init` traced, not run)."""
  try:
    jax.eval_shape(init, *init_args)
  except sweeps.NotInjected as error:
    raise checks.ConfigError(
      f"config.sweep.{error.name}: agent {config.get('agent')!r} cannot sweep it (no optimizer "
      f"state of its run injects it)"
    ) from None


def restore(
  learner: "Union[Learner, HostLearner]", config, workdir: str, step: Optional[int] = None
) -> Any:
  """The run state saved in `workdir` (the latest checkpoint, or `step`), with its member axis.

  A compiled learner's state is read into the shapes of its `init` (traced, not run); a host
  learner's into the state its `init` builds for the run's seed.
  """
  if isinstance(learner, HostLearner):
    like = learner.init(config.seeds[0])
  else:
    init, init_args = _Members.of(config).init(learner.init)
    like = jax.eval_shape(init, *init_args)
  checkpointer = ckpt.Checkpointer(os.path.join(workdir, "checkpoints"))
  try:
    return checkpointer.restore(like=like, step=step)
  finally:
    checkpointer.close()


def final_evaluation(
  learner: "Union[Learner, HostLearner]",
  config,
  state: Any,
  mesh=None,
  update: Optional[int] = None,
) -> dict:
  """`{seed: metrics}`: the evaluation `train` (or `train_on_host`) makes at the end of a run, of
  a state it returned or `restore` read (the same evaluation keys, so the same numbers); with
  `update` before the run's last, the evaluation it makes at that update (that update's keys).
  In a sweep each member is keyed `(seed, *swept values)` (the values in the order of their
  names)."""
  if isinstance(learner, HostLearner):
    return {config.seeds[0]: learner.evaluate(state) if learner.evaluate is not None else {}}
  members = _Members.of(config)
  mesh = distributed.make_mesh() if mesh is None else mesh
  at = None if update is None or update >= learner.num_updates else update
  return dict(zip(members.ids, _Evaluator(learner, members, mesh)(state, at)))


def initial_state(learner: "Union[Learner, HostLearner]", config) -> Any:
  """The run state before the first update, as `train` (or `train_on_host`) builds it from the
  run's seeds (with its member axis): every run starts there, and no checkpoint keeps it."""
  if isinstance(learner, HostLearner):
    return learner.init(config.seeds[0])
  init, init_args = _Members.of(config).init(learner.init)
  return jax.jit(init)(*init_args)


def seed_states(config, state: Any) -> list:
  """`[(seed, run state of that seed)]` of a state `train` returned or `restore` read; in a sweep
  `[((seed, *swept values), run state of that member)]`."""
  members = _Members.of(config)
  return list(zip(members.ids, members.split(state)))


class HostLearner(NamedTuple):
  """A learner whose update runs host code between compiled programs.

  Language-model agents score their samples in Python (parsing text, checking answers), so one
  update cannot be a pure `step` compiled into `train`'s chunks. Their `step` is a host
  function calling jitted pieces; `train_on_host` gives it the same logging, checkpointing,
  resume and NaN stop as `train`. A host-driven run trains one seed.
  """

  init: Callable[[int], Any]  # seed -> run state (with an integer `update` field)
  step: Callable[[Any], tuple[Any, dict]]  # run state -> (run state, metrics); str values are
  #                                          examples shown in the progress line, never logged
  evaluate: Optional[Callable[[Any], dict]]  # run state -> scalar metrics, or None
  num_updates: int
  env_steps_per_update: int
  progress: Callable[[dict, dict], str]  # (logged record, str metrics) -> one progress line


def train_on_host(
  learner: HostLearner,
  config,
  workdir: str,
  logger: Optional[MetricsLogger] = None,
  allow_config_change: bool = False,
) -> Any:
  """Runs (or resumes) a `HostLearner` in `workdir`; returns the final run state.

  Writes `config.json`, `metrics.jsonl` (an evaluation record with `phase="eval"` at update 0,
  every `eval_every` updates and at the end) and `checkpoints/`. A NaN or infinite metric or
  state leaf stops the run before it is saved, naming the update and the quantity.
  """
  validate_run_config(config)
  if len(config.seeds) != 1:
    raise checks.ConfigError(
      f"config.seeds: a host-driven agent trains one seed per run (one "
      f"workdir each), got {config.seeds!r}"
    )
  if sweeps.sweep_values(config):
    name = next(iter(sweeps.sweep_values(config)))
    raise checks.ConfigError(
      f"config.sweep.{name}: a host-driven agent trains one run per workdir and cannot sweep"
    )
  seed = config.seeds[0]
  os.makedirs(workdir, exist_ok=True)
  ckpt.probe_writable(workdir)
  logger = logger or MetricsLogger(workdir)
  checkpointer = ckpt.Checkpointer(os.path.join(workdir, "checkpoints"), config.max_checkpoints)
  change = provenance.check_resumed_config(
    workdir, config, checkpointer.latest_step(), allow_config_change
  )
  state, update, elapsed = _resume(checkpointer, learner.init(seed), logger)
  provenance.record_config_change(workdir, change)
  _write_config(workdir, config)  # after the resume, as in `train`

  def log_evaluation():
    logger.write(
      dict(
        phase="eval",
        seed=seed,
        update=update,
        env_steps=update * learner.env_steps_per_update,
        wall_time=elapsed,
        **learner.evaluate(state),
      )
    )

  def evaluation_due(at_start: bool = False) -> bool:
    """At the start: update 0, or the evaluation of the resumed checkpoint's update (dropped
    with the records after it); then every `eval_every` updates and at the end."""
    if learner.evaluate is None:
      return False
    return (
      update == 0
      and at_start
      or update == learner.num_updates
      or _periodic_evaluation_due(config, update, learner.num_updates, at_start)
    )

  if evaluation_due(at_start=True):
    log_evaluation()
  while update < learner.num_updates:
    start = time.perf_counter()
    state, metrics = learner.step(state)
    elapsed += time.perf_counter() - start
    update = int(state.update)
    texts = {k: v for k, v in metrics.items() if isinstance(v, str)}
    numbers = {k: float(v) for k, v in metrics.items() if k not in texts}
    problem = chunk_metrics.first_non_finite(numbers, state)
    if problem is not None:
      raise _diverged(problem, update, checkpointer)
    record = dict(
      phase="train",
      seed=seed,
      update=update,
      env_steps=update * learner.env_steps_per_update,
      wall_time=elapsed,
      **numbers,
    )
    if update % config.log_every == 0:
      logger.write(record)
      logger.progress(learner.progress(record, texts))
    if evaluation_due():
      log_evaluation()
    if update % config.checkpoint_every == 0 or update == learner.num_updates:
      checkpointer.save(update, state, metadata=_checkpoint_metadata(update, elapsed, learner))
  checkpointer.close()
  return state


def run(
  learner: Union[Learner, HostLearner],
  config,
  workdir: str,
  mesh=None,
  logger: Optional[MetricsLogger] = None,
  allow_config_change: bool = False,
  warm_start_cache: Optional[str] = None,
) -> Any:
  """Trains either kind of learner in `workdir` (`train` or `train_on_host`; a host learner has
  no `warm_start`)."""
  if isinstance(learner, HostLearner):
    return train_on_host(learner, config, workdir, logger, allow_config_change)
  return train(learner, config, workdir, mesh, logger, allow_config_change, warm_start_cache)
