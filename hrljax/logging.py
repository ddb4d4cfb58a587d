"""Metric sinks, progress lines, plots.

One JSONL record per log step in `<workdir>/metrics.jsonl`, always. A resumed run first drops the
records written after its checkpoint, so the file of a killed-and-resumed run equals the file of
an uninterrupted one, up to wall-clock fields. External sinks (`TensorBoardSink` with tensorboardX,
`WandbSink` with wandb, both optional extras) get each record's numbers under `train/...` and
`eval/...` tags (`scalar_tags`); the JSONL keys stay as they are.
"""

import json
import math
import os
import sys
from typing import Any, Iterable, Optional, Protocol, Sequence

import numpy as np

from hrljax import provenance, stats

METRICS_FILE = "metrics.jsonl"
ENVIRONMENT_FILE = "environment.json"
WALL_CLOCK_FIELDS = ("wall_time", "env_steps_per_second", "compile_seconds")
NUMERIC_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint")
SWEPT_FIELDS = ("learning_rate",)  # hrljax.sweep.SWEEPABLE: with `seed`, a sweep's member
DEFAULT_HEADLINE = ("episode_return", "eval_return", "loss")  # a progress line's, by default
NOT_SCALARS = ("phase", "seed", "update")  # fields of a record that the sinks get no tag for


def _to_json_value(value: Any) -> Any:
  value = np.asarray(value).item() if np.ndim(value) == 0 else np.asarray(value).tolist()
  if isinstance(value, float) and not math.isfinite(value):
    return None if math.isnan(value) else (math.inf if value > 0 else -math.inf)
  return value


def read_jsonl(path: str) -> list[dict]:
  """Every record of a JSONL file (a workdir is accepted and its metrics file read)."""
  if os.path.isdir(path):
    path = os.path.join(path, METRICS_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no metrics file at {path}")
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def read_seed_runs(runs: str) -> list[dict]:
  """The records of one run directory, or of several joined by commas that together make one run
  with one seed each (a host-driven agent trains one seed per directory). A record without a
  `seed` field counts as seed 0; a seed found in two directories is a ValueError."""
  records, found_in = [], {}
  for run in runs.split(","):
    for record in read_jsonl(run):
      seed = record.get("seed", 0)
      if found_in.setdefault(seed, run) != run:
        raise ValueError(
          f"{run}: seed {seed} is also in {found_in[seed]}; expected one run per seed"
        )
      records.append(record)
  return records


def cpu_model() -> str:
  """The CPU's model name from /proc/cpuinfo (the machine's architecture where there is none)."""
  import platform

  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.machine()


def environment() -> dict:
  """What a run's numbers depend on besides the config: the code's version and commit, package
  versions, CPU, devices.

  Long chaotic programs (thousands of gradient steps) are bitwise reproducible on one machine and
  library set, but not across them (floating-point rounding differs), so results record this.
  """
  import importlib.metadata
  import platform
  import jax

  versions = {}
  for name in NUMERIC_PACKAGES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = None
  return {
    "python": platform.python_version(),
    "packages": versions,
    "cpu": cpu_model(),
    "cpu_count": os.cpu_count(),
    "devices": [d.device_kind for d in jax.devices()],
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
    **provenance.source_revision(),
  }


def write_environment(path: str) -> None:
  """Writes `environment()` as JSON to `path` (a directory takes `ENVIRONMENT_FILE` inside it)."""
  if os.path.isdir(path):
    path = os.path.join(path, ENVIRONMENT_FILE)
  with open(path, "w") as f:
    json.dump(environment(), f, indent=2, sort_keys=True)


class SinkError(RuntimeError):
  """An external sink could not start (e.g. W&B online without a login)."""


class Sink(Protocol):
  """Where `MetricsLogger` sends a record's scalars besides `metrics.jsonl`.

  `write(step, scalars)` gets the record's update and its numbers under namespaced tags
  (`scalar_tags`); `close()` flushes and releases the sink. A sink may also define
  `truncate_after(step)`, called when a run resumes from the checkpoint at `step`.
  """

  def write(self, step: int, scalars: dict) -> None: ...

  def close(self) -> None: ...


def _import_optional(module: str, what: str, extra: str):
  import importlib

  try:
    return importlib.import_module(module)
  except ImportError as error:
    raise ImportError(f"{what} needs {module}: pip install 'hrljax[{extra}]'") from error


class TensorBoardSink:
  """TensorBoard event files in `logdir`, written with tensorboardX.

  The writer opens at the first write, so that a run resumed from the checkpoint at update U
  (`truncate_after(U)`) opens it with `purge_step=U + 1`: TensorBoard then hides the events a
  killed run wrote after U, which the resumed run writes again.
  """

  def __init__(self, logdir: str):
    self._summary_writer = _import_optional("tensorboardX", "TensorBoard logging", "tensorboard")
    self.logdir = logdir
    self._writer = None
    self._purge_step = None

  def truncate_after(self, step: int) -> None:
    if self._writer is None:
      self._purge_step = step + 1

  def write(self, step: int, scalars: dict) -> None:
    if self._writer is None:
      self._writer = self._summary_writer.SummaryWriter(self.logdir, purge_step=self._purge_step)
    for tag, value in scalars.items():
      self._writer.add_scalar(tag, value, step)
    self._writer.flush()

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._writer = None


class WandbSink:
  """One Weights & Biases run (`wandb.init`): each record is logged at its update as the step.

  `mode` is "online", "offline" (files under `directory`, uploaded later by `wandb sync`) or
  "disabled"; None leaves it to wandb (the `WANDB_MODE` variable, else online). `directory`
  None is wandb's own default (`WANDB_DIR`, else the current directory). `config` (a dict) is
  shown as the run's config.
  """

  def __init__(
    self,
    project: str,
    name: Optional[str] = None,
    entity: Optional[str] = None,
    mode: Optional[str] = None,
    directory: Optional[str] = None,
    config: Optional[dict] = None,
  ):
    wandb = _import_optional("wandb", "W&B logging", "wandb")
    try:
      self.run = wandb.init(
        project=project, entity=entity, name=name, mode=mode, dir=directory, config=config
      )
    except Exception as error:  # no login for an online run, a bad project name, ...
      raise SinkError(
        f"W&B could not start a run ({type(error).__name__}: {error}); "
        "WANDB_MODE=offline logs without an account"
      ) from error

  def write(self, step: int, scalars: dict) -> None:
    self.run.log(scalars, step=step)

  def close(self) -> None:
    if self.run is not None:
      self.run.finish()
      self.run = None


def scalar_tags(record: dict, per_seed: bool = False) -> dict:
  """The numbers of a `metrics.jsonl` record under the tags the external sinks show.

  A training record's `loss` is `train/loss`; an evaluation record's (`phase="eval"`)
  `eval_return` is `eval/return` (the `eval_` prefix dropped where no other field of the record
  has that name) and its `success` is `eval/success`. `phase`, `seed` and `update` (the step)
  are not scalars, nor are an evaluation's `env_steps` and `wall_time`, nor a NaN (None in the
  record). With `per_seed`, each tag ends with `/seed_<seed>`, so the seeds of a run are
  separate curves.
  """
  phase = record.get("phase", "train")
  suffix = f"/seed_{record['seed']}" if per_seed and "seed" in record else ""
  tags = {}
  for key, value in record.items():
    if key in NOT_SCALARS or not isinstance(value, (int, float)) or isinstance(value, bool):
      continue
    name = key
    if phase == "eval":
      if key in ("env_steps", "wall_time"):
        continue
      if key.startswith("eval_") and key[len("eval_") :] not in record:
        name = key[len("eval_") :]
    tags[f"{phase}/{name}{suffix}"] = value
  return tags


class MetricsLogger:
  """Writes records to `<workdir>/metrics.jsonl`, hands their scalars to the external sinks and
  prints progress.

  `sinks`: objects with `write(step, scalars)` and `close()` (`TensorBoardSink`, `WandbSink`,
  or your own), each given every record's `scalar_tags` at its update; `tensorboard=True` adds a
  `TensorBoardSink` writing to `<workdir>/tensorboard`. `headline`: the metric names the progress
  line shows (the agent's headline metrics; a name missing from a training record is taken from
  the latest evaluation when it has it); None shows the default ones. `samples`: the run counts
  dataset samples, not environment steps (offline agents). `seeds`: the run's seeds (tags are
  per seed when there are several). Not `enabled` (processes other than process 0 of a
  multi-process run), it writes and prints nothing.
  """

  def __init__(
    self,
    workdir: str,
    tensorboard: bool = False,
    stream=None,
    enabled: bool = True,
    sinks: Sequence[Sink] = (),
    headline: Optional[Sequence[str]] = None,
    samples: bool = False,
    seeds: Sequence[int] = (),
  ):
    self.path = os.path.join(workdir, METRICS_FILE)
    self.stream = stream
    self.enabled = enabled
    self.sinks = list(sinks) if enabled else []
    if tensorboard and enabled:
      self.sinks.append(TensorBoardSink(os.path.join(workdir, "tensorboard")))
    self.headline = None if headline is None else tuple(headline)
    self.samples = samples
    self.per_seed = len(seeds) > 1
    self._evaluation = (None, {})  # (update, {name: [value of each seed]}) of the latest one

  def truncate_after(self, update: int) -> None:
    """Drops the records a run resumed at `update` will write again (later updates, evaluations)."""
    for sink in self.sinks:
      if hasattr(sink, "truncate_after"):
        sink.truncate_after(update)
    if not (self.enabled and os.path.exists(self.path)):
      return
    kept = [
      r
      for r in read_jsonl(self.path)
      if r.get("update", 0) < update or (r.get("update", 0) == update and r.get("phase") != "eval")
    ]
    with open(self.path, "w") as f:
      for record in kept:
        f.write(json.dumps(record) + "\n")

  def write(self, record: dict) -> dict:
    record = {k: _to_json_value(v) for k, v in record.items()}
    if not self.enabled:
      return record
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    if record.get("phase") == "eval":
      self._remember_evaluation(record)
    if self.sinks:
      tags = scalar_tags(record, self.per_seed)
      for sink in self.sinks:
        sink.write(record.get("update", 0), tags)
    return record

  def _remember_evaluation(self, record: dict) -> None:
    update, values = self._evaluation
    if record.get("update") != update:
      update, values = record.get("update"), {}
    for key, value in record.items():
      if isinstance(value, (int, float)) and not isinstance(value, bool):
        values.setdefault(key, []).append(value)
    self._evaluation = (update, values)

  def format_progress(self, record: dict, total_updates: int) -> str:
    """`format_progress` with this run's headline metrics and step count; a headline name the
    training record lacks is the mean over the seeds of the latest evaluation, if it has one."""
    if self.headline is not None:
      latest = self._evaluation[1]
      missing = [n for n in self.headline if record.get(n) is None and latest.get(n)]
      record = {**record, **{n: float(np.mean(latest[n])) for n in missing}}
    return format_progress(record, total_updates, self.headline, self.samples)

  def progress(self, text: str) -> None:
    """Prints a line (a training record's is `MetricsLogger.format_progress`)."""
    if self.enabled:
      print(text, file=self.stream or sys.stdout, flush=True)

  def close(self) -> None:
    """Closes every sink (metrics.jsonl is closed after each record)."""
    sinks, self.sinks = self.sinks, []
    for sink in sinks:
      sink.close()

  def __enter__(self) -> "MetricsLogger":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


def format_progress(
  record: dict,
  total_updates: int,
  headline: Optional[Sequence[str]] = None,
  samples: bool = False,
) -> str:
  """One console line: progress, env steps (dataset samples when `samples`), speed, then the
  `headline` metrics the record has (by default `DEFAULT_HEADLINE`)."""
  unit = "samples" if samples else "env steps"
  parts = [
    f"update {record['update']}/{total_updates}",
    f"{unit} {record['env_steps']:,}",
    f"{record.get('env_steps_per_second', 0):,.0f} {'samples' if samples else 'steps'}/s",
  ]
  for key in DEFAULT_HEADLINE if headline is None else headline:
    value = record.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      parts.append(f"{key} {value:.3g}")
  return " | ".join(parts)


def seed_curves(records: list, x: str, y: str) -> dict:
  """`{seed: (xs, ys)}` of the records holding both `x` and `y` (a record without a `seed` field
  counts as seed 0), in file order; a sweep's members are `(seed, *swept values)`."""
  curves = {}
  for record in records:
    if record.get(y) is None or record.get(x) is None:
      continue
    swept = tuple(record[k] for k in SWEPT_FIELDS if k in record)
    member = (record.get("seed", 0), *swept) if swept else record.get("seed", 0)
    xs, ys = curves.setdefault(member, ([], []))
    xs.append(record[x])
    ys.append(record[y])
  return curves


def sweep_groups(curves: dict) -> dict:
  """`{swept values: {seed: curve}}` of `seed_curves`' members (`()` for a run without a sweep),
  so each swept value is aggregated over its own seeds only."""
  groups = {}
  for member, curve in curves.items():
    seed, values = (member[0], tuple(member[1:])) if isinstance(member, tuple) else (member, ())
    groups.setdefault(values, {})[seed] = curve
  return groups


def swept_fields(records: list) -> tuple:
  """The swept hyperparameters the records carry (`SWEPT_FIELDS` order), `()` without a sweep."""
  return tuple(k for k in SWEPT_FIELDS if any(k in r for r in records))


def aggregate_curve(curves: dict, statistic: str = "mean", confidence: float = 0.95) -> tuple:
  """`(xs, center, low, high)` over the seeds of `curves` (at least 2) at the x values every seed
  has: `statistic` ("mean" or "iqm") of the seeds at each x, and its percentile bootstrap
  interval over seeds at `confidence` (`hrljax.stats.bootstrap_interval`)."""
  common = sorted(set.intersection(*(set(xs) for xs, _ in curves.values())))
  values = np.array(
    [[dict(zip(xs, ys))[v] for v in common] for xs, ys in curves.values()], dtype=float
  )
  center = stats.statistic_fn(statistic)(values, axis=0)
  low, high = stats.bootstrap_interval(values, statistic, confidence)
  return np.asarray(common), center, low, high


def plot_curves(
  workdirs: Sequence[str],
  out: str,
  y: str = "episode_return",
  x: str = "env_steps",
  labels: Optional[Iterable[str]] = None,
  title: Optional[str] = None,
  statistic: str = "mean",
) -> str:
  """Draws `y` against `x` for each run's JSONL on one figure and writes a PNG to `out`.

  A run of several seeds is drawn as `statistic` ("mean" or "iqm") over its seeds, with the 95 %
  percentile bootstrap interval over seeds shaded (`aggregate_curve`); a sweep's values are drawn
  as separate lines, each over its own seeds.
  """
  stats.statistic_fn(statistic)  # a bad name fails before any file is read
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  labels = (
    list(labels)
    if labels is not None
    else [os.path.basename(os.path.normpath(w)) for w in workdirs]
  )
  fig, ax = plt.subplots(figsize=(6.4, 4.0))
  for workdir, run_label in zip(workdirs, labels):
    records = read_jsonl(workdir)
    curves = seed_curves(records, x, y)
    if not curves:
      raise ValueError(f"y: no record in {workdir} has both {x!r} and {y!r}")
    names = swept_fields(records)
    for values, group in sweep_groups(curves).items():
      label = " ".join([run_label] + [f"{n}={v:g}" for n, v in zip(names, values)])
      if len(group) == 1:
        ((xs, ys),) = group.values()
        ax.plot(xs, ys, label=label)
        continue
      xs, center, low, high = aggregate_curve(group, statistic)
      name = "IQM" if statistic == "iqm" else "mean"
      (line,) = ax.plot(xs, center, label=f"{label} ({name} of {len(group)} seeds, 95% CI)")
      ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
  ax.set_xlabel(x.replace("_", " "))
  ax.set_ylabel(y.replace("_", " "))
  ax.set_title(title or y.replace("_", " "))
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=120)
  plt.close(fig)
  return out
