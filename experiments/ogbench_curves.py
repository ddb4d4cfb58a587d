r"""Success (or a `path_values` diagnostic) against updates from `experiments.ogbench_runs` JSON files.

  python -m experiments.ogbench_curves --runs=medium_ota.json,medium_hiql.json \
      --out=medium_curves.png [--y=success] [--table]

Each file contributes its mid-run evaluations (`--eval_every`) and, when the run finished, its final
evaluation. Files of the same agent on the same maze are one curve: a run continued in a second file
(e.g. resumed from its `--workdir` with a larger `--updates`, or the JSON of an earlier stop kept
aside) adds its points; where two files evaluated the same update, the evaluation with more episodes
per task is kept. The figure shows the mean over seeds (line) and each seed (dots); `--table`
prints the points as a markdown table (update, episodes per task, per-seed values, mean) for
`experiments/results/OGBENCH.md`.

`--y` is `success` (shown in %) or any per-seed number the evaluations record, e.g. `task3_success`
or `task1_vh_start` (OTA's V^h at task 1's start cell; see `ogbench_runs.path_values`).
"""

import json
import sys
from typing import NamedTuple, Sequence

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags; defined only when run as a script, so that importing this module
  in a test process next to other scripts' flags (`--out`) does not define a flag twice."""
  flags.DEFINE_list("runs", [], "JSON files written by experiments.ogbench_runs (comma-separated).")
  flags.DEFINE_string("out", "ogbench_curves.png", "PNG path.")
  flags.DEFINE_string("y", "success", "Per-seed evaluation number on the y axis.")
  flags.DEFINE_bool("table", False, "Also print the points as a markdown table.")


class Point(NamedTuple):
  """One evaluation of every seed of a run."""

  update: int
  episodes: int  # evaluation episodes per task and seed
  values: tuple  # the --y number of each seed, seed index order


def evaluation_points(record: dict, y: str) -> list:
  """The mid-run evaluations of one `ogbench_runs` record, then its final one if it finished."""
  evaluations = list(record.get("evaluations", []))
  if record.get("finished"):
    evaluations.append({"update": record["updates"], "seeds": record["seeds"],
                        "eval_episodes_per_task": record["eval_episodes_per_task"]})
  points = []
  for evaluation in evaluations:
    seeds = evaluation["seeds"]
    if any(y not in seed for seed in seeds):
      known = sorted(k for k in seeds[0] if isinstance(seeds[0][k], (int, float)))
      raise ValueError(f"y: {y!r} is not recorded by the evaluation at update "
                       f"{evaluation['update']}; expected one of {known}")
    points.append(Point(int(evaluation["update"]), int(evaluation["eval_episodes_per_task"]),
                        tuple(float(seed[y]) for seed in seeds)))
  return points


def merge_points(points: Sequence[Point]) -> list:
  """One point per update (the one with more episodes per task), in update order."""
  best = {}
  for point in points:
    if point.update not in best or point.episodes > best[point.update].episodes:
      best[point.update] = point
  return [best[u] for u in sorted(best)]


def curves(records: Sequence[dict], y: str) -> dict:
  """`{"<agent> <maze>": [Point, ...]}` over the records, one curve per agent and maze."""
  grouped = {}
  for record in records:
    label = f"{record['agent']} {record['env'].split('-')[1]}"
    grouped.setdefault(label, []).extend(evaluation_points(record, y))
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
      rows.append(f"| {label} | {p.update:,} | {p.episodes} | {per_seed} | "
                  f"{shown(sum(p.values) / len(p.values))} |")
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
    line, = ax.plot(updates, [k * sum(p.values) / len(p.values) for p in points], marker="o",
                    label=label)
    for p in points:
      ax.scatter([p.update] * len(p.values), [k * v for v in p.values], s=10, alpha=0.5,
                 color=line.get_color())
  ax.set_xlabel("updates")
  ax.set_ylabel(f"{y} (%)" if k != 1 else y)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(out, dpi=120)
  plt.close(fig)
  return out


def main(argv):
  if len(argv) > 1 or not FLAGS.runs:
    print("error: --runs: expected one or more JSON files of experiments.ogbench_runs, got "
          f"{FLAGS.runs or argv[1:]}", file=sys.stderr)
    sys.exit(2)
  records = []
  for path in FLAGS.runs:
    try:
      with open(path) as f:
        records.append(json.load(f))
    except (OSError, json.JSONDecodeError) as error:
      print(f"error: --runs: cannot read {path!r} ({error})", file=sys.stderr)
      sys.exit(2)
  try:
    grouped = curves(records, FLAGS.y)
  except ValueError as error:
    print(f"error: --{error}", file=sys.stderr)
    sys.exit(2)
  if FLAGS.table:
    print(markdown_table(grouped, FLAGS.y))
  print(plot(grouped, FLAGS.y, FLAGS.out))


if __name__ == "__main__":
  define_flags()
  app.run(main)
