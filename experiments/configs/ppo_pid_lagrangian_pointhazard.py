"""PID-Lagrangian PPO (Stooke et al. 2020, arXiv:2007.03964; OmniSafe CPPOPID's delay 10, EMAs
0.95, sum normalisation) on PointHazard-v0 with cost limit 1 per episode (settings and the choice
of d in `ppo_pointhazard.py`).

Gains K_P 0.2, K_I 0.02, K_D 0.02: twice OmniSafe's (0.1, 0.01, 0.01). The paper sets
gains per experiment, and OmniSafe's are for 500 multiplier updates (1e7 steps, 20k per epoch)
while this run makes 150. Measured at d = 1 (3 seeds, `experiments/safety_table.py`, all in
`experiments/results/SAFETY.md`): OmniSafe's gains cut violations during training 5.7x against
unconstrained PPO but the greedy path still clips the central hazard (evaluation cost 4 / 2 / 3);
twice the gains 15.9x (seeds 3-5: 14.7x), evaluation cost 0 and the full return (2.91-2.93,
the detour); five times the gains 22x but seed 0 settles in front of the hazard (return 0.80,
also after 480k steps).
"""

from experiments.configs import ppo_pointhazard
from hrljax.agents import ppo_lagrangian


def get_config():
  config = ppo_pointhazard.pointhazard_settings(ppo_lagrangian.get_config())
  config.multiplier = "pid"
  config.pid_kp = 0.2
  config.pid_ki = 0.02
  config.pid_kd = 0.02
  return config
