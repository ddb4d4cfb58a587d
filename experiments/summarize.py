"""A table of runs: per seed, a training metric over the last part of the run and the final evaluation.

  python -m experiments.summarize runs/ppo_cartpole [runs/other ...] \
      [--metric=episode_return] [--last=0.1 | --steps=600000:660000] [--eval=eval_return]

Reads `metrics.jsonl` of each run directory made by `python -m experiments.train` (several seeds in
one directory, or one directory per seed) and prints one line per seed and one line of means:
`--metric` averaged over the training records of the last `--last` fraction of the updates, or
of the environment steps in `(start, end]` with `--steps` (an episode statistic is weighted by the
episodes that ended in each record: the mean over those episodes), and the final evaluation's
`--eval` metrics.
"""

import math
import sys

from absl import app, flags

from hrljax.logging import read_jsonl

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("metric", "episode_return", "Training metric averaged over the run's end.")
  flags.DEFINE_float("last", 0.1, "Fraction of the updates, at the end, to average --metric over.")
  flags.DEFINE_string(
    "steps",
    None,
    "START:END: average --metric over the records whose env_steps "
    "are in (START, END] instead of the last updates.",
  )
  flags.DEFINE_list("eval", [], "Metrics of the final evaluation to show (default: every eval_*).")


def window_mean(records: list, metric: str) -> float:
  """The mean of `metric` over `records`; an episode statistic (records with an `episodes` count)
  is weighted by the episodes that ended in each record, so it is the mean over those episodes."""
  if not records:
    return math.nan
  weights = [r.get("episodes", 1.0) for r in records]
  if sum(weights) == 0:
    return math.nan
  return sum(w * r[metric] for w, r in zip(weights, records)) / sum(weights)


def seed_rows(workdir: str, metric: str, last: float, eval_fields, steps=None) -> list:
  """One dict per seed: run, seed, `<metric>` over the last updates (or over the env steps in
  `steps = (start, end]`) and the final evaluation."""
  records = read_jsonl(workdir)
  updates = max((r["update"] for r in records if r.get("phase") == "train"), default=0)
  start = updates * (1.0 - last)

  def in_window(record) -> bool:
    if steps is None:
      return record["update"] > start
    return steps[0] < record["env_steps"] <= steps[1]

  rows = []
  for seed in sorted({r.get("seed", 0) for r in records}):
    mine = [r for r in records if r.get("seed", 0) == seed]
    window = [
      r for r in mine if r.get("phase") == "train" and in_window(r) and r.get(metric) is not None
    ]
    final = [r for r in mine if r.get("phase") == "eval"]
    row = {"run": workdir, "seed": seed, metric: window_mean(window, metric)}
    if final:
      fields = eval_fields or [k for k in final[-1] if k.startswith("eval")]
      row.update({k: final[-1].get(k) for k in fields})
    rows.append(row)
  return rows


def mean_row(rows: list) -> dict:
  """The mean over the rows of every numeric column (a run column saying how many seeds)."""
  keys = [k for k in rows[0] if k not in ("run", "seed")]
  out = {"run": f"mean of {len(rows)}", "seed": "-"}
  for key in keys:
    values = [
      r[key] for r in rows if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])
    ]
    out[key] = sum(values) / len(values) if values else math.nan
  return out


def format_table(rows: list) -> str:
  keys = list(rows[0])
  cell = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)
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
    rows = [
      row for w in workdirs for row in seed_rows(w, FLAGS.metric, FLAGS.last, FLAGS.eval, steps)
    ]
  except FileNotFoundError as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  print(format_table(rows + ([mean_row(rows)] if len(rows) > 1 else [])))


if __name__ == "__main__":
  define_flags()
  app.run(main)
