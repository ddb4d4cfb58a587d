"""SAC (unconstrained) on PointHazard-v0: the baseline for Recovery RL and Bresa, and their base.

The run is `recovery_rl`'s with the safety layer off (`reflex=False`, no safety-critic updates),
one control step per decision and the task action executed: that run is exactly
`hrljax.agents.sac` with the same seed (tested bit for bit in `tests/agents/test_bresa.py`), and
it also logs the episode cost, violations and cost per step, which `sac`'s learner does not.
The task SAC tunes α (the SAC paper's default, target entropy −|A|) from α = 0.05: Recovery RL's
fixed α = 0.2 is too large for PointHazard's reward scale (at most 0.07 progress per step against
an entropy bonus of about 0.2·log 4 ≈ 0.28 per step for a uniform policy) and the agent never
reaches the goal in 30k steps with it; tuned from SAC's α = 1 it reached return 0.87 (no goal)
after 30k steps, tuned from 0.05 or 0.01 it reaches the goal (return 2.9) within 3k updates
(seed 0, one run each). Networks of 64 units and batches of 128 (instead of the paper's 256) keep the
PointHazard runs cheap on CPU; Recovery RL and Bresa derive from this config (same task agent,
same 30k control steps), so their returns and costs compare.

Measured (3 seeds, `experiments/safety_table.py --sequential`, `experiments/results/SAFETY.md`):
greedy evaluation return 2.890 / 2.941 / 2.936 with cost 9 (the straight path through the
central hazard), 7,508 / 8,340 / 8,492 violating control steps during training, episode cost
9.8-9.9 over the last 10% of updates.
"""

from experiments.configs import pointhazard_layouts
from hrljax.agents import recovery_rl


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name, given after the file name on the command
  line (`--config=experiments/configs/sac_pointhazard.py:random_hazards`)."""
  config = recovery_rl.get_config()
  config.env_name = "PointHazard-v0"
  config.autotune_alpha = True
  config.init_alpha = 0.05
  config.total_timesteps = 30_000
  config.buffer_size = 30_000
  config.learning_starts = 1000
  config.batch_size = 128
  config.hidden_sizes = (64, 64)
  config.log_every = 1000
  config.checkpoint_every = 5000
  # Unconstrained: no safety layer and no safety-critic training.
  config.reflex = False
  config.risk_updates_per_step = 0
  config.risk_pretrain_updates = 0
  config.risk_buffer_size = 1  # unused: nothing samples it
  return pointhazard_layouts.apply_layout(config, layout)
