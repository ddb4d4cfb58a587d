"""Environment steps until an evaluation metric first reaches a threshold, per seed and as the
mean (or IQM) over seeds with its 95 % bootstrap interval.

  python -m experiments.steps_to_threshold runs/a [runs/b ...] --metric=eval_length --at_most=25

Reads the evaluation records of each run directory made by `python -m experiments.train` with
`eval_every` set (one record per evaluation and seed; a run trained one seed per directory is
the directories joined by commas: `runs/a/s0,runs/a/s1,runs/a/s2`); `--at_most` for a metric
that falls as the agent learns (steps to the goal), `--at_least` for one that rises (a return). A
seed that never reaches the threshold counts as its run's last evaluation step and is marked with
`>`.
"""

import sys

import numpy as np
from absl import app, flags

from hrljax import stats
from hrljax.logging import read_seed_runs

_METRIC = flags.DEFINE_string("metric", "eval_length", "Evaluation metric to threshold.")
_AT_MOST = flags.DEFINE_float("at_most", None, "Reached when the metric is <= this.")
_AT_LEAST = flags.DEFINE_float("at_least", None, "Reached when the metric is >= this.")
_STATISTIC = flags.DEFINE_enum("statistic", "mean", list(stats.STATISTICS), "Over seeds.")


def steps_to_threshold(records: list, metric: str, reached) -> dict:
  """`{seed: (env_steps, reached)}`: the first evaluation whose `metric` satisfies `reached`, or
  the last evaluation's steps and False."""
  result = {}
  for record in sorted(
    (r for r in records if r.get("phase") == "eval" and metric in r), key=lambda r: r["env_steps"]
  ):
    seed = record.get("seed", 0)
    if seed in result and result[seed][1]:
      continue
    result[seed] = (record["env_steps"], bool(reached(record[metric])))
  return result


def main(argv):
  if (_AT_MOST.value is None) == (_AT_LEAST.value is None):
    sys.exit("give exactly one of --at_most and --at_least")
  if _AT_MOST.value is not None:
    reached, text = (lambda v: v <= _AT_MOST.value), f"{_METRIC.value} <= {_AT_MOST.value:g}"
  else:
    reached, text = (lambda v: v >= _AT_LEAST.value), f"{_METRIC.value} >= {_AT_LEAST.value:g}"
  print(f"| run | environment steps to {text}, per seed | {_STATISTIC.value} [95% CI] |")
  print("| --- | --- | --- |")
  for workdir in argv[1:]:
    try:
      records = read_seed_runs(workdir)
    except (FileNotFoundError, ValueError) as error:
      sys.exit(f"error: {error}")
    per_seed = steps_to_threshold(records, _METRIC.value, reached)
    if not per_seed:
      sys.exit(f"{workdir}: no evaluation records with {_METRIC.value!r} (set eval_every)")
    shown = ", ".join(
      f"{'' if ok else '>'}{steps:,}" for _, (steps, ok) in sorted(per_seed.items())
    )
    values = np.asarray([steps for steps, _ in per_seed.values()], float)
    value = float(stats.statistic_fn(_STATISTIC.value)(values))
    interval = ""
    if len(values) >= 2:
      low, high = stats.bootstrap_interval(values, _STATISTIC.value)
      interval = f" [{low:,.0f}, {high:,.0f}]"
    print(f"| {workdir} | {shown} | {value:,.0f}{interval} |")


if __name__ == "__main__":
  app.run(main)
