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

from hrljax.agents import ppo_lagrangian


def get_config():
  config = ppo_lagrangian.get_config()
  config.env_name = "PointHazard-v0"
  config.num_envs = 16
  config.num_steps = 100
  config.total_timesteps = 16 * 100 * 150
  config.learning_rate = 3e-4
  # Safety Gym's d = 25 is for 1000-step episodes; PointHazard episodes last at most 200 steps,
  # so the same 2.5% of steps in violation is d = 5.
  config.cost_limit = 5.0
  config.log_every = 10
  config.checkpoint_every = 50
  config.multiplier = "lagrange"
  config.lagrange_init = 1.0
  return config
