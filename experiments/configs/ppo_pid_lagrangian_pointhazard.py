"""PID-Lagrangian PPO (Stooke et al. 2020, arXiv:2007.03964; OmniSafe CPPOPID's delay 10, EMAs
0.95, sum normalisation) on PointHazard-v0 with cost limit 1 per episode (settings in
`ppo_pointhazard.py`).

Gains K_P 0.2, K_I 0.02, K_D 0.02, twice OmniSafe's: the paper sets gains per experiment, and
OmniSafe's are for 500 multiplier updates while this run makes 150 (the sweep:
`experiments/results/SAFETY.md`).
"""

from experiments.configs import ppo_pointhazard
from hrljax.agents import ppo_lagrangian


def get_config():
  config = ppo_pointhazard.pointhazard_settings(ppo_lagrangian.get_config())
  config.multiplier = "pid"
  config.pid_kp = 0.2  # proportional gain
  config.pid_ki = 0.02  # integral gain
  config.pid_kd = 0.02  # derivative gain
  return config
