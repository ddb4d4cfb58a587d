"""Generates an OGBench point-maze navigate dataset locally (no download).

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=data/pointmaze-medium-navigate-v0.npz [--num_episodes=100] [--seed=0]

Writes `<out>` and `<out minus .npz>-val.npz` in OGBench's layout (see `hrljax.data.pointmaze`);
`ogbench.make_env_and_datasets(name, dataset_path=...)` and `hrljax.data.pointmaze.load` both read
them. Needs the `ogbench` extra.
"""

import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("env", "pointmaze-medium-navigate-v0", "OGBench dataset name.")
  flags.DEFINE_string("out", None, "Output .npz path.", required=True)
  flags.DEFINE_integer("num_episodes", None, "Training episodes (default: OGBench's protocol).")
  flags.DEFINE_integer(
    "max_episode_steps", None, "Steps per episode (default: OGBench's protocol)."
  )
  flags.DEFINE_integer(
    "num_val_episodes", None, "Validation episodes (default num_episodes // 10)."
  )
  flags.DEFINE_float("noise", 0.5, "Standard deviation of the oracle's action noise.")
  flags.DEFINE_integer("seed", 0, "Seed of the whole dataset.")


def main(argv):
  del argv
  from hrljax.data import pointmaze

  try:
    pointmaze.parse_name(FLAGS.env)
    pointmaze.validation_path(FLAGS.out)
  except ValueError as error:
    print(f"error: --{error}", file=sys.stderr)
    sys.exit(2)
  start = time.perf_counter()
  train, val = pointmaze.generate(
    FLAGS.env,
    num_episodes=FLAGS.num_episodes,
    max_episode_steps=FLAGS.max_episode_steps,
    noise=FLAGS.noise,
    seed=FLAGS.seed,
    num_val_episodes=FLAGS.num_val_episodes,
    progress=pointmaze.print_progress,
  )
  seconds = time.perf_counter() - start
  pointmaze.save(FLAGS.out, train, val)
  steps = len(train["terminals"]) + len(val["terminals"])
  print(
    f"\nwrote {FLAGS.out} ({len(train['terminals'])} steps) and "
    f"{len(val['terminals'])} validation steps; {steps / seconds:.0f} steps/s",
    file=sys.stderr,
  )


def cli() -> None:
  """The `hrljax-make-dataset` command (`python -m experiments.make_dataset`)."""
  define_flags()
  app.run(main)


if __name__ == "__main__":
  cli()
