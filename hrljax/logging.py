"""Metric sinks (JSONL always, TensorBoard when tensorboardX is installed), progress lines, plots.

One JSONL record per log step in `<workdir>/metrics.jsonl`. A resumed run first drops the
records written after its checkpoint, so the file of a killed-and-resumed run equals the file of
an uninterrupted one, up to wall-clock fields.
"""

import json
import math
import os
import sys
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from hrljax import provenance, stats

METRICS_FILE = "metrics.jsonl"
ENVIRONMENT_FILE = "environment.json"
WALL_CLOCK_FIELDS = ("wall_time", "env_steps_per_second", "compile_seconds")
NUMERIC_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint")


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


class MetricsLogger:
  """Writes records to `<workdir>/metrics.jsonl` (and TensorBoard if asked) and prints progress."""

  def __init__(self, workdir: str, tensorboard: bool = False, stream=None, enabled: bool = True):
    self.path = os.path.join(workdir, METRICS_FILE)
    self.stream = stream
    self.enabled = enabled
    self._tb = _tensorboard_writer(workdir) if (tensorboard and enabled) else None

  def truncate_after(self, update: int) -> None:
    """Drops the records a run resumed at `update` will write again (later updates, evaluations)."""
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
    if self._tb is not None:
      for key, value in record.items():
        if isinstance(value, (int, float)) and key != "update":
          self._tb.add_scalar(key, value, record.get("update", 0))
      self._tb.flush()
    return record

  def progress(self, text: str) -> None:
    if self.enabled:
      print(text, file=self.stream or sys.stdout, flush=True)


def _tensorboard_writer(workdir: str):
  try:
    from tensorboardX import SummaryWriter
  except ImportError as error:
    raise ImportError("tensorboard logging needs tensorboardX: pip install tensorboardX") from error
  return SummaryWriter(os.path.join(workdir, "tensorboard"))


def format_progress(record: dict, total_updates: int) -> str:
  """One console line: progress, env steps, speed, return and loss."""
  parts = [
    f"update {record['update']}/{total_updates}",
    f"env steps {record['env_steps']:,}",
    f"{record.get('env_steps_per_second', 0):,.0f} steps/s",
  ]
  for key in ("episode_return", "eval_return", "loss"):
    value = record.get(key)
    if isinstance(value, (int, float)):
      parts.append(f"{key} {value:.3g}")
  return " | ".join(parts)


def seed_curves(records: list, x: str, y: str) -> dict:
  """`{seed: (xs, ys)}` of the records holding both `x` and `y` (a record without a `seed` field
  counts as seed 0), in file order."""
  curves = {}
  for record in records:
    if record.get(y) is None or record.get(x) is None:
      continue
    xs, ys = curves.setdefault(record.get("seed", 0), ([], []))
    xs.append(record[x])
    ys.append(record[y])
  return curves


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
  percentile bootstrap interval over seeds shaded (`aggregate_curve`).
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
  for workdir, label in zip(workdirs, labels):
    curves = seed_curves(read_jsonl(workdir), x, y)
    if not curves:
      raise ValueError(f"y: no record in {workdir} has both {x!r} and {y!r}")
    if len(curves) == 1:
      ((xs, ys),) = curves.values()
      ax.plot(xs, ys, label=label)
      continue
    xs, center, low, high = aggregate_curve(curves, statistic)
    name = "IQM" if statistic == "iqm" else "mean"
    (line,) = ax.plot(xs, center, label=f"{label} ({name} of {len(curves)} seeds, 95% CI)")
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
