"""PPO-Lagrangian (projected gradient ascent on the multiplier with OmniSafe's Adam) on
PointHazard-v0 with cost limit 1 per episode (settings and the choice of d in
`ppo_pointhazard.py`).

The multiplier starts at 1 (safety-starter-agents' `penalty_init`) instead of OmniSafe's 0.001:
measured at d = 5 over 3 seeds, from 0.001 it grows too slowly and the policy settles on the
straight path through the hazard (episode cost 9.0, like unconstrained PPO) before the cost term
matters.

Multiplier learning rate 0.2 instead of OmniSafe's 0.035: Adam moves lam by about the learning
rate per update while the sign of J_c - d holds, and less once the large early errors (episode
costs of 22-35 while the policy is still random) have filled Adam's second moment, so in the 150
updates of this run 0.035 leaves lam near 2-3 (OmniSafe makes 500 updates in 1e7 steps).
Measured at d = 1 (3 seeds, `experiments/safety_table.py`, all in
`experiments/results/SAFETY.md`): lr 0.035 cuts violations during training 5.0x against
unconstrained PPO and the greedy path still clips the hazard in 2 seeds (evaluation cost 0 / 4 /
4); 0.1 7.5x (cost 0 / 3 / 0); 0.2 13.1x (seeds 3-5: 15.6x) with evaluation cost 0 and the full
return (the detour); 0.3 15x but two seeds settle in front of the hazard (return 0.78, 0.25).
Plain SGD (`lagrange_optimizer="sgd"`) at 0.05 or 0.01 likewise overshoots in one to three
seeds.
"""

from experiments.configs import ppo_pointhazard
from hrljax.agents import ppo_lagrangian


def get_config():
  config = ppo_pointhazard.pointhazard_settings(ppo_lagrangian.get_config())
  config.multiplier = "lagrange"
  config.lagrange_init = 1.0
  config.lagrange_learning_rate = 0.2
  return config
