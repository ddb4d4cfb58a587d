"""The one experiment entry point.

  python -m experiments.train --config=experiments/configs/ppo_cartpole.py --workdir=runs/ppo

Any hyperparameter is a `--config.<field>=` override (e.g. `--config.seed=3`). Started again with
the same workdir, a run resumes from its latest checkpoint. Writes `metrics.jsonl`,
`config.json` and `checkpoints/` in the workdir; `python -m experiments.plot WORKDIR` draws it.
"""

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Directory for metrics, config and checkpoints.", required=True)
flags.DEFINE_integer("num_devices", None, "Devices on the data axis of the mesh (default: all).")
flags.DEFINE_bool("tensorboard", False, "Also write TensorBoard events (needs tensorboardX).")
config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)


def fail(message: str, code: int = 2) -> None:
  """One line on stderr, no traceback."""
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(code)


def check_workdir(workdir: str) -> None:
  """Fails early, with one line, when the workdir cannot be written."""
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, ".write_probe")
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as error:
    fail(f"--workdir: cannot write to {workdir!r} ({error.strerror or error})")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every save step at INFO
  # Imports after flag parsing, so `--help` and flag errors are instant.
  import jax
  from hrljax import agents, distributed, training
  from hrljax.logging import MetricsLogger

  config = FLAGS.config
  if config is None:
    fail("--config: expected a config file, e.g. experiments/configs/ppo_cartpole.py")
  try:
    agent = agents.get(config.agent)
    mesh = distributed.make_mesh(FLAGS.num_devices)
    agent.validate_config(config, num_devices=mesh.size)
  except ValueError as error:
    fail(str(error))
  check_workdir(FLAGS.workdir)

  logger = MetricsLogger(FLAGS.workdir, tensorboard=FLAGS.tensorboard,
                         enabled=jax.process_index() == 0)
  logger.progress(f"{config.agent} on {config.env_name}: {mesh.size} device(s) "
                  f"({jax.devices()[0].platform}), workdir {FLAGS.workdir}")
  learner = agent.make_learner(config)
  try:
    training.train(learner, config, FLAGS.workdir, mesh=mesh, logger=logger,
                   log_every=config.log_every, checkpoint_every=config.checkpoint_every,
                   max_checkpoints=config.max_checkpoints, seed=config.seed)
  except training.TrainingDiverged as error:
    fail(str(error), code=1)


if __name__ == "__main__":
  app.run(main)
