"""PPO-Lagrangian (projected gradient ascent on the multiplier, OmniSafe's Adam, lr 0.035) on
PointHazard-v0 with cost limit 5 per 200-step episode (settings as `ppo_pointhazard.py`).

The multiplier starts at 1 (safety-starter-agents' `penalty_init`) instead of OmniSafe's 0.001:
measured over 3 seeds, from 0.001 it grows too slowly and the policy settles on the straight path
through the hazard (episode cost 9.0, like unconstrained PPO) before the cost term matters.
From 1 the cost first drops to about 2.5, then the multiplier decays and the plain Lagrangian
overshoots back towards the straight path (the oscillation PID-Lagrangian damps).

Measured (3 seeds, last 10% of updates): return 2.904-2.907, episode cost 8.82 / 8.79 / 3.65,
22,000-44,000 violating steps during training.
"""

from experiments.configs import ppo_pointhazard
from hrljax.agents import ppo_lagrangian


def get_config():
  config = ppo_pointhazard.pointhazard_settings(ppo_lagrangian.get_config())
  config.multiplier = "lagrange"
  config.lagrange_init = 1.0
  return config
