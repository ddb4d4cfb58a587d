r"""Success (or a `path_values` diagnostic) against updates, from offline run directories.

  python -m experiments.ogbench_curves runs/medium_ota runs/medium_hiql --out=medium.png \
      [--y=success] [--table]

Reads the evaluation records of each workdir written by `python -m experiments.train` with an
offline agent (`metrics.jsonl`, one record per seed at every `eval_every` updates and at the end;
`config.json` names the agent and the maze). Workdirs of the same agent on the same maze are one
curve (e.g. a run continued in a copy of its workdir); where two evaluated the same update, the
one with more episodes per task is kept. The figure shows the mean over seeds (line) and each
seed (dots); `--table` prints the points as markdown rows (update, episodes per task, per-seed
values, mean).

`--y` is `success` (shown in %) or any per-seed number the evaluations record, e.g.
`task3_success` or `task1_vh_start` (OTA's V^h at task 1's start cell; see
`hrljax.ogbench_evaluation.path_values`).
"""

import json
import os
import sys
from typing import NamedTuple, Sequence

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags; defined only when run as a script, so that importing this module
  in a test process next to other scripts' flags (`--out`) does not define a flag twice."""
  flags.DEFINE_string("out", "ogbench_curves.png", "PNG path.")
  flags.DEFINE_string("y", "success", "Per-seed evaluation number on the y axis.")
  flags.DEFINE_bool("table", False, "Also print the points as a markdown table.")


# Fields of an evaluation record that say where and when it was made, not how the policy did.
BOOKKEEPING = ("seed", "update", "env_steps", "wall_time", "eval_episodes_per_task", "eval_seconds")


class Point(NamedTuple):
  """One evaluation of every seed of a run."""

  update: int
  episodes: int  # evaluation episodes per task and seed
  values: tuple  # the --y number of each seed, in seed order


def read_run(workdir: str) -> tuple[str, list]:
  """`("<agent> <maze>", evaluation records)` of one workdir."""
  from hrljax.logging import read_jsonl

  with open(os.path.join(workdir, "config.json")) as f:
    config = json.load(f)
  label = f"{config['agent']} {config['env_name'].split('-')[1]}"
  return label, [r for r in read_jsonl(workdir) if r.get("phase") == "eval"]


def evaluation_points(records: Sequence[dict], y: str) -> list:
  """One point per evaluated update (the seeds' records grouped, in seed order) that has `y`."""
  by_update = {}
  for record in records:
    if "success" in record:  # an OGBench evaluation (not only the validation losses)
      by_update.setdefault(int(record["update"]), []).append(record)
  points = []
  for update in sorted(by_update):
    seeds = sorted(by_update[update], key=lambda r: r.get("seed", 0))
    if any(y not in seed for seed in seeds):
      known = sorted(
        k for k, v in seeds[0].items() if isinstance(v, (int, float)) and k not in BOOKKEEPING
      )
      raise ValueError(
        f"y: {y!r} is not recorded by the evaluation at update {update}; expected one of {known}"
      )
    points.append(
      Point(
        update, int(seeds[0]["eval_episodes_per_task"]), tuple(float(seed[y]) for seed in seeds)
      )
    )
  return points


def merge_points(points: Sequence[Point]) -> list:
  """One point per update (the one with more episodes per task), in update order."""
  best = {}
  for point in points:
    if point.update not in best or point.episodes > best[point.update].episodes:
      best[point.update] = point
  return [best[u] for u in sorted(best)]


def curves(runs: Sequence[tuple], y: str) -> dict:
  """`{"<agent> <maze>": [Point, ...]}` over `(label, records)` runs, one curve per label."""
  grouped = {}
  for label, records in runs:
    grouped.setdefault(label, []).extend(evaluation_points(records, y))
  return {label: merge_points(points) for label, points in grouped.items()}


def scale(y: str) -> float:
  """Success rates are shown in %, other numbers as recorded."""
  return 100.0 if y.endswith("success") else 1.0


def markdown_table(grouped: dict, y: str) -> str:
  """The points of every curve as markdown rows (success in whole %, other numbers 3 digits)."""
  k = scale(y)

  def shown(v: float) -> str:
    return f"{k * v:.0f}" if k != 1 else f"{v:.3g}"

  rows = [f"| run | update | episodes / task | {y} per seed | mean |", "|---|---|---|---|---|"]
  for label, points in grouped.items():
    for p in points:
      per_seed = " / ".join(shown(v) for v in p.values)
      rows.append(
        f"| {label} | {p.update:,} | {p.episodes} | {per_seed} | "
        f"{shown(sum(p.values) / len(p.values))} |"
      )
  return "\n".join(rows)


def plot(grouped: dict, y: str, out: str) -> str:
  """Mean over seeds as a line, each seed as dots, one colour per curve; writes the PNG."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  k = scale(y)
  fig, ax = plt.subplots(figsize=(6.4, 4.0))
  for label, points in grouped.items():
    updates = [p.update for p in points]
    (line,) = ax.plot(
      updates, [k * sum(p.values) / len(p.values) for p in points], marker="o", label=label
    )
    for p in points:
      ax.scatter(
        [p.update] * len(p.values),
        [k * v for v in p.values],
        s=10,
        alpha=0.5,
        color=line.get_color(),
      )
  ax.set_xlabel("updates")
  ax.set_ylabel(f"{y} (%)" if k != 1 else y)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(out, dpi=120)
  plt.close(fig)
  return out


def fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    fail("expected one or more run directories of python -m experiments.train")
  runs = []
  for workdir in workdirs:
    try:
      runs.append(read_run(workdir))
    except (OSError, json.JSONDecodeError, KeyError) as error:
      fail(f"cannot read the run directory {workdir!r} ({error})")
  try:
    grouped = curves(runs, FLAGS.y)
  except ValueError as error:
    fail(f"--{error}")
  if FLAGS.table:
    print(markdown_table(grouped, FLAGS.y))
  print(plot(grouped, FLAGS.y, FLAGS.out))


if __name__ == "__main__":
  define_flags()
  app.run(main)
