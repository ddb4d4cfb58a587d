"""Learning curves from JSONL: `python -m experiments.plot WORKDIR... [--out=curve.png] [--y=...]`."""

import sys

from absl import app, flags

from hrljax.logging import plot_curves

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("out", None, "PNG path (default: <first workdir>/curve.png).")
  flags.DEFINE_string("y", "episode_return", "Metric on the y axis.")
  flags.DEFINE_string("x", "env_steps", "Metric on the x axis.")
  flags.DEFINE_string("title", None, "Figure title.")
  flags.DEFINE_string(
    "statistic", "mean", "mean or iqm over the seeds of a run (95% bootstrap interval shaded)."
  )


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    print(
      "error: expected one or more workdirs: python -m experiments.plot WORKDIR...", file=sys.stderr
    )
    sys.exit(2)
  out = FLAGS.out or f"{workdirs[0].rstrip('/')}/curve.png"
  try:
    print(
      plot_curves(workdirs, out, y=FLAGS.y, x=FLAGS.x, title=FLAGS.title, statistic=FLAGS.statistic)
    )
  except (FileNotFoundError, ValueError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


def cli() -> None:
  """The `hrljax-plot` command (`python -m experiments.plot`)."""
  define_flags()
  app.run(main)


if __name__ == "__main__":
  cli()
