"""PID-Lagrangian PPO (Stooke et al. 2020; OmniSafe CPPOPID gains K_P 0.1, K_I 0.01, K_D 0.01,
delay 10, EMAs 0.95, sum normalisation) on PointHazard-v0 with cost limit 5 per episode (settings
as `ppo_pointhazard.py`).

Measured (3 seeds, last 10% of updates): return 2.904-2.905, episode cost 4.19 / 4.80 / 5.46,
about 24,000 violating steps during training (unconstrained PPO: 9.0 and 73,000).
"""

from experiments.configs import ppo_pointhazard
from hrljax.agents import ppo_lagrangian


def get_config():
  config = ppo_pointhazard.pointhazard_settings(ppo_lagrangian.get_config())
  config.multiplier = "pid"
  return config
