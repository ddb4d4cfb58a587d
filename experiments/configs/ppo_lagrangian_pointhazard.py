"""PPO-Lagrangian (projected gradient ascent on the multiplier with OmniSafe's Adam) on
PointHazard-v0 with cost limit 1 per episode (settings in `ppo_pointhazard.py`).

λ starts at 1 (safety-starter-agents' `penalty_init`) instead of OmniSafe's 0.001, and its
learning rate is 0.2 instead of 0.035: OmniSafe makes 500 multiplier updates in 1e7 steps, this
run 150, and a slower multiplier leaves the greedy path clipping the hazard, a faster one
settles seeds in front of it (the sweep: `experiments/results/SAFETY.md`).
"""

from experiments.configs import ppo_pointhazard
from hrljax.agents import ppo_lagrangian


def get_config():
  config = ppo_pointhazard.pointhazard_settings(ppo_lagrangian.get_config())
  config.multiplier = "lagrange"
  config.lagrange_init = 1.0  # λ at the start
  config.lagrange_learning_rate = 0.2  # Adam's step size on λ
  return config
