"""SAC (unconstrained) on PointHazard-v0: the baseline of Recovery RL and Bresa.

It runs `recovery_rl` with the safety layer off and no safety-critic updates, one control step
per decision and the task action executed: exactly `hrljax.agents.sac` with the same seed
(tested bit for bit), plus the episode cost and violation metrics `sac` does not log. The task
SAC tunes α from 0.05 (Recovery RL's fixed 0.2 outweighs PointHazard's reward scale, and from
SAC's α = 1 it did not reach the goal in 30k steps: `experiments/results/SAFETY.md`); networks
of 64 units and batches of 128 keep the runs cheap on CPU. Recovery RL and Bresa derive from this
config, so their returns and costs compare.
"""

from experiments.configs import pointhazard_layouts
from hrljax.agents import recovery_rl


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name, given after the file name on the command
  line (`--config=experiments/configs/sac_pointhazard.py:random_hazards`)."""
  config = recovery_rl.get_config()
  config.env_name = "PointHazard-v0"
  config.autotune_alpha = True  # SAC's temperature tuning, target entropy −|A|
  config.init_alpha = 0.05  # α at the start
  config.total_timesteps = 30_000  # control steps
  config.buffer_size = 30_000  # the whole run fits
  config.learning_starts = 1000  # uniform-random control steps before the first update
  config.batch_size = 128
  config.hidden_sizes = (64, 64)
  config.log_every = 1000  # Learner steps (one control step each) per record
  config.checkpoint_every = 5000
  config.reflex = False  # unconstrained: no safety layer
  config.risk_updates_per_step = 0  # and no safety-critic training
  config.risk_pretrain_updates = 0
  config.risk_buffer_size = 1  # unused: nothing samples it
  return pointhazard_layouts.apply_layout(config, layout)
