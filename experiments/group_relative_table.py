"""The GiGPO-vs-GRPO table of `experiments/results/GROUP_RELATIVE.md`, read from run directories.

  python -m experiments.group_relative_table runs/gigpo_fourrooms runs/grpo_fourrooms

For each run directory made by `python -m experiments.train` (one or several seeds), prints a
Markdown row: the estimator, the success rate of every seed averaged over the last `--fraction`
of its updates, and their mean +- standard deviation over seeds (ddof 1).
"""

import json
import os
import statistics
from typing import Sequence

from absl import app, flags

from hrljax import logging

FLAGS = flags.FLAGS


def define_flags() -> None:
  flags.DEFINE_float("fraction", 0.1, "Share of the last updates to average over.")
  flags.DEFINE_string("metric", "success_rate", "Training metric to average.")


def final_means(records: Sequence[dict], metric: str, fraction: float) -> dict:
  """{seed: mean of `metric` over the train records of the last `fraction` of the updates}.

  Records without a `seed` field come from a one-seed run and count as seed 0.
  """
  by_seed = {}
  for record in records:
    if record.get("phase") == "train" and metric in record:
      by_seed.setdefault(record.get("seed", 0), []).append(record)
  means = {}
  for seed, rows in sorted(by_seed.items()):
    last = max(r["update"] for r in rows)
    first = last - int(last * fraction)
    values = [r[metric] for r in rows if r["update"] > first]
    means[seed] = sum(values) / len(values)
  return means


def table_row(workdir: str, metric: str, fraction: float) -> str:
  with open(os.path.join(workdir, "config.json")) as f:
    estimator = json.load(f).get("estimator", os.path.basename(workdir))
  means = final_means(logging.read_jsonl(workdir), metric, fraction)
  if not means:
    raise ValueError(f"{workdir}: expected train records with {metric!r}, found none")
  values = list(means.values())
  spread = f" +- {statistics.stdev(values):.3f}" if len(values) > 1 else ""
  per_seed = " / ".join(f"{v:.2f}" for v in values)
  seeds = ",".join(str(s) for s in means)
  return (f"| {estimator} | seeds {seeds} | {per_seed} | "
          f"{statistics.fmean(values):.3f}{spread} |")


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("expected one or more run directories")
  print(f"| estimator | seeds | {FLAGS.metric}, last {FLAGS.fraction:.0%} of updates, per seed "
        "| mean +- std |")
  print("| --- | --- | --- | --- |")
  for workdir in workdirs:
    print(table_row(workdir, FLAGS.metric, FLAGS.fraction))


if __name__ == "__main__":
  define_flags()
  app.run(main)
