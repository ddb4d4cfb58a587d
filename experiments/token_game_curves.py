"""Greedy-success curves of token-game runs: a reader of `experiments.train` run directories.

  python -m experiments.train --config=experiments/configs/token_ppo_token_game.py \
      --workdir=runs/token_game/ppo --config.seeds=0,1,2 --config.log_every=5 --config.eval_every=5
  python -m experiments.token_game_curves runs/token_game/ppo runs/token_game/archer \
      --labels=PPO,ArCHer --bars=0.8,0.85,0.9 --png=runs/token_game/archer_vs_ppo.png

A run is one directory, or several joined by commas whose seeds together make the run (the
host-driven SmolLM2 agents train one seed per directory: `runs/a/s0,runs/a/s1,runs/a/s2`).
Each run directory holds `metrics.jsonl` with one evaluation record per seed every `eval_every`
updates (`phase` "eval", `seed`, `update`, `env_steps`, `eval_return`: the greedy success rate on
the learner's evaluation games). For every run this prints one row per evaluation (the
utterances per seed, each seed's success and their mean), then, per bar, the first evaluation at
which the mean reaches it and whether it stays at or above it at every later evaluation, and the
ratio of the first run's utterances to each other run's (< 1: the first run needs fewer). The
mean curves go to a PNG (`--png`).
"""

import math
import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line; defined only when run as a script (the tests import this module)."""
  flags.DEFINE_list("labels", None, "One label per run directory (default: directory names).")
  flags.DEFINE_list("bars", [], "Mean success levels whose first crossing is reported.")
  flags.DEFINE_string("png", None, "PNG of the mean greedy success vs utterances per seed.")
  flags.DEFINE_string("y", "eval_return", "The evaluation metric to read.")


class Curve:
  """One run's evaluations: `points` is a list of (update, env_steps, {seed: value}), by update."""

  def __init__(self, points: list):
    self.points = points

  @property
  def seeds(self) -> list:
    return sorted({seed for _, _, values in self.points for seed in values})

  def means(self) -> list:
    """(env_steps, mean over the seeds) per evaluation."""
    return [(steps, sum(values.values()) / len(values)) for _, steps, values in self.points]


def read_curve(workdir: str, y: str = "eval_return") -> Curve:
  """The evaluation records of `workdir/metrics.jsonl` grouped by update (a record without a
  `seed` field, from a one-seed run, counts as seed 0). `workdir` may also be several run
  directories joined by commas, one per seed (`hrljax.logging.read_seed_runs`). ValueError if a
  seed is in two of them or there is no such record."""
  from hrljax.logging import read_seed_runs

  by_update = {}
  for record in read_seed_runs(workdir):
    if record.get("phase") != "eval" or record.get(y) is None:
      continue
    _, values = by_update.setdefault(record["update"], (record["env_steps"], {}))
    values[record.get("seed", 0)] = float(record[y])
  if not by_update:
    raise ValueError(f"{workdir}: no evaluation record with {y!r} in metrics.jsonl")
  return Curve([(update, *by_update[update]) for update in sorted(by_update)])


def first_crossing(curve: Curve, bar: float):
  """(env_steps of the first evaluation whose mean is >= bar, the env_steps of the evaluation
  before it, whether the mean stays >= bar afterwards), or None if it never reaches the bar."""
  means = curve.means()
  for index, (steps, mean) in enumerate(means):
    if mean >= bar:
      before = means[index - 1][0] if index else 0
      stays = all(later >= bar for _, later in means[index + 1 :])
      return steps, before, stays
  return None


def table(label: str, curve: Curve) -> str:
  """One markdown row per evaluation: updates, utterances per seed, per-seed values, mean."""
  seeds = curve.seeds
  lines = [
    f"{label}:",
    "",
    f"| updates | utterances / seed | seeds {' / '.join(map(str, seeds))} | mean |",
    "|---|---|---|---|",
  ]
  for (update, steps, values), (_, mean) in zip(curve.points, curve.means()):
    per_seed = " / ".join(f"{values[s]:.3f}" if s in values else "-" for s in seeds)
    lines.append(f"| {update} | {steps:,} | {per_seed} | {mean:.3f} |")
  return "\n".join(lines)


def bars_table(labels: list, curves: list, bars: list) -> str:
  """Per bar: each run's first crossing ("stays" or not) and its ratio to the first run's."""
  header = ["bar", *labels, *(f"{labels[0]} / {label}" for label in labels[1:])]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for bar in bars:
    crossings = [first_crossing(curve, bar) for curve in curves]
    cells = [("-" if c is None else f"{c[0]:,}" + (" (stays)" if c[2] else "")) for c in crossings]
    ratios = [
      ("-" if c is None or crossings[0] is None or c[0] == 0 else f"{crossings[0][0] / c[0]:.2f}")
      for c in crossings[1:]
    ]
    lines.append(f"| {bar:g} | " + " | ".join(cells + ratios) + " |")
  return "\n".join(lines)


def plot(labels: list, curves: list, png: str, y: str) -> str:
  """The mean curves on one figure."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6.4, 4.0))
  for label, curve in zip(labels, curves):
    steps, means = zip(*curve.means())
    ax.plot(steps, means, marker="o", markersize=3, label=label)
  ax.set_xlabel("utterances per seed")
  ax.set_ylabel(f"{y.replace('_', ' ')} (mean over seeds)")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
  fig.savefig(png, dpi=120)
  plt.close(fig)
  return png


def fail(message: str) -> None:
  """One line on stderr, no traceback."""
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def parse_bars(values: list) -> list:
  try:
    bars = [float(value) for value in values]
  except ValueError:
    bars = [math.nan]
  if not all(0.0 <= bar <= 1.0 for bar in bars):
    fail(f"--bars: expected numbers in [0, 1], got {','.join(values)}")
  return bars


def default_label(run: str) -> str:
  """The name of a run's directory, or of the directory its per-seed directories share."""
  return os.path.basename(os.path.normpath(os.path.commonpath(run.split(","))))


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    fail("expected one or more run directories of experiments.train")
  labels = FLAGS.labels or [default_label(w) for w in workdirs]
  if len(labels) != len(workdirs):
    fail(f"--labels: expected {len(workdirs)} labels, got {len(labels)}")
  bars = parse_bars(FLAGS.bars)
  try:
    curves = [read_curve(workdir, FLAGS.y) for workdir in workdirs]
  except (FileNotFoundError, ValueError) as error:
    fail(str(error))
  for label, curve in zip(labels, curves):
    print(table(label, curve) + "\n")
  if bars:
    print(bars_table(labels, curves, bars))
  if FLAGS.png:
    print(plot(labels, curves, FLAGS.png, FLAGS.y))


if __name__ == "__main__":
  define_flags()
  app.run(main)
