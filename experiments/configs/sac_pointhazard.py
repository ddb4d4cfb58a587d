"""SAC (unconstrained) on PointHazard-v0: the baseline for Recovery RL and Bresa.

The task reward only (progress to the goal plus a goal bonus); costs are logged by the safe agents'
configs, not seen by this agent. The straight line from start to goal crosses the central hazard,
so an unconstrained agent violates. PointHazard continues after a violation (the environment's
default); an episode is 200 control steps. Networks of 64 units and batches of 128 (instead of the
paper's 256) keep the three PointHazard configs cheap on CPU; all three share them, and the same
30k control steps, so that their returns and costs compare.
"""

from hrljax.agents import sac


def get_config():
  config = sac.get_config()
  config.env_name = "PointHazard-v0"
  config.total_timesteps = 30_000
  config.buffer_size = 30_000
  config.learning_starts = 1000
  config.batch_size = 128
  config.hidden_sizes = (64, 64)
  config.log_every = 1000
  config.checkpoint_every = 5000
  return config
