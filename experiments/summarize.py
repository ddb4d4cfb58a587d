"""A table of runs: per seed, a training metric over the last part of the run and the final evaluation.

  python -m experiments.summarize runs/ppo_cartpole [runs/other ...] \
      [--metric=episode_return[,other]] [--last=0.1 | --steps=600000:660000] [--eval=eval_return] \
      [--evaluations=evaluations.jsonl]

Reads `metrics.jsonl` of each run directory made by `python -m experiments.train` (several seeds in
one directory, or one directory per seed; a sweep's members apart) and prints one line per seed,
and per run (and swept value) the mean or IQM over its seeds with a 95 % bootstrap interval:
each `--metric` averaged over the training records of the last `--last` fraction of the updates,
or of the environment steps in `(start, end]` with `--steps` (an episode statistic is weighted by
the episodes that ended in each record: the mean over those episodes), and the final evaluation's
`--eval` metrics. `--evaluations` reads the JSON lines of `python -m experiments.evaluate --out`
(a run evaluated again, e.g. on more problems) and uses them, per workdir and seed, in place of
the runs' own final evaluations.
"""

import json
import math
import sys

import numpy as np
from absl import app, flags

from hrljax import stats
from hrljax.logging import SWEPT_FIELDS, read_jsonl, swept_fields

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_list(
    "metric", ["episode_return"], "Training metrics, each averaged over the run's end."
  )
  flags.DEFINE_float("last", 0.1, "Fraction of the updates, at the end, to average --metric over.")
  flags.DEFINE_string(
    "steps",
    None,
    "START:END: average --metric over the records whose env_steps "
    "are in (START, END] instead of the last updates.",
  )
  flags.DEFINE_list("eval", [], "Metrics of the final evaluation to show (default: every eval_*).")
  flags.DEFINE_string(
    "evaluations",
    None,
    "JSON lines of `experiments.evaluate --out`: the final evaluation of each workdir and seed.",
  )
  flags.DEFINE_enum(
    "statistic", "mean", list(stats.STATISTICS), "Over seeds: the mean or the interquartile mean."
  )


def window_mean(records: list, metric: str) -> float:
  """The mean of `metric` over `records`; an episode statistic (records with an `episodes` count)
  is weighted by the episodes that ended in each record, so it is the mean over those episodes."""
  if not records:
    return math.nan
  weights = [r.get("episodes", 1.0) for r in records]
  if sum(weights) == 0:
    return math.nan
  return sum(w * r[metric] for w, r in zip(weights, records)) / sum(weights)


def seed_rows(workdir: str, metric, last: float, eval_fields, steps=None, evaluations=None) -> list:
  """One dict per seed: run, seed, each `metric` (a name or a list of names) over the last
  updates (or over the env steps in `steps = (start, end]`) and the final evaluation: the run's
  last, or the record of `evaluations` (`read_evaluations`) for this workdir and seed."""
  metrics = [metric] if isinstance(metric, str) else list(metric)
  records = read_jsonl(workdir)
  updates = max((r["update"] for r in records if r.get("phase") == "train"), default=0)
  start = updates * (1.0 - last)

  def in_window(record) -> bool:
    if steps is None:
      return record["update"] > start
    return steps[0] < record["env_steps"] <= steps[1]

  names = swept_fields(records)
  member = lambda r: (r.get("seed", 0), *(r.get(n) for n in names))
  rows = []
  for key in sorted({member(r) for r in records}, key=lambda k: (k[1:], k[0])):
    mine = [r for r in records if member(r) == key]
    row = {"run": workdir, "seed": key[0], **dict(zip(names, key[1:]))}
    for name in metrics:
      window = [
        r for r in mine if r.get("phase") == "train" and in_window(r) and r.get(name) is not None
      ]
      row[name] = window_mean(window, name)
    final = [r for r in mine if r.get("phase") == "eval"]
    if evaluations is not None and (workdir, key[0]) in evaluations:
      final = [evaluations[(workdir, key[0])]]
    if final:
      fields = eval_fields or [k for k in final[-1] if k.startswith("eval")]
      row.update({k: final[-1].get(k) for k in fields})
    rows.append(row)
  return rows


def read_evaluations(path: str) -> dict:
  """`{(workdir, seed): record}` from the JSON lines of `experiments.evaluate --out` (a later
  line for the same workdir and seed replaces an earlier one)."""
  evaluations = {}
  with open(path) as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      record = json.loads(line)
      if "workdir" not in record or "seed" not in record:
        raise ValueError(f"--evaluations: line {number} of {path} has no workdir and seed")
      evaluations[(record["workdir"].rstrip("/"), record["seed"])] = record
  return evaluations


def summary_rows(rows: list, statistic: str = "mean") -> list:
  """Per run and swept value, `statistic` ("mean" or "iqm") over the seeds of every numeric column,
  as `(value, low, high)` with the 95 % percentile bootstrap interval over seeds
  (`hrljax.stats`); one row per group of at least 2 seeds. Runs of one seed each (one directory
  per seed) are one group."""
  label = "IQM" if statistic == "iqm" else "mean"
  one_seed_runs = len({r["run"] for r in rows}) == len(rows)
  groups = {}
  for row in rows:
    swept = tuple((k, row[k]) for k in SWEPT_FIELDS if k in row)
    groups.setdefault((None if one_seed_runs else row["run"], swept), []).append(row)
  out = []
  for (run, swept), group in groups.items():
    if len(group) < 2:
      continue
    name = f"{run}: " if run is not None else ""
    summary = {"run": f"{name}{label} of {len(group)} [95% CI]", "seed": "-", **dict(swept)}
    for key in group[0]:
      if key in summary or key == "run":
        continue
      values = [
        r[key] for r in group if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])
      ]
      if len(values) < 2:
        summary[key] = values[0] if values else math.nan
        continue
      low, high = stats.bootstrap_interval(values, statistic)
      summary[key] = (float(stats.statistic_fn(statistic)(np.asarray(values))), low, high)
    out.append(summary)
  return out


def format_table(rows: list) -> str:
  keys = list(rows[0])

  def cell(v) -> str:
    if isinstance(v, tuple):
      return f"{v[0]:.4g} [{v[1]:.4g}, {v[2]:.4g}]"
    return f"{v:.4g}" if isinstance(v, float) else str(v)

  lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
  lines += ["| " + " | ".join(cell(r.get(k)) for k in keys) + " |" for r in rows]
  return "\n".join(lines)


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    print(
      "error: expected one or more run directories: python -m experiments.summarize RUN...",
      file=sys.stderr,
    )
    sys.exit(2)
  if not 0.0 < FLAGS.last <= 1.0:
    print(f"error: --last: expected a fraction in (0, 1], got {FLAGS.last}", file=sys.stderr)
    sys.exit(2)
  steps = None
  if FLAGS.steps is not None:
    try:
      steps = tuple(float(v) for v in FLAGS.steps.split(":"))
      assert len(steps) == 2 and steps[0] < steps[1]
    except (ValueError, AssertionError):
      print(
        f"error: --steps: expected START:END with START < END, got {FLAGS.steps!r}", file=sys.stderr
      )
      sys.exit(2)
  try:
    evaluations = read_evaluations(FLAGS.evaluations) if FLAGS.evaluations else None
    rows = [
      row
      for w in workdirs
      for row in seed_rows(w.rstrip("/"), FLAGS.metric, FLAGS.last, FLAGS.eval, steps, evaluations)
    ]
  except (FileNotFoundError, ValueError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  print(format_table(rows + summary_rows(rows, FLAGS.statistic)))


if __name__ == "__main__":
  define_flags()
  app.run(main)
