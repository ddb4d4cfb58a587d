"""PPO behind a CBF shield (one linearised discrete-time CBF row per hazard, gamma 0.3, margin
0.03, exact projection including the action box) on PointHazard-v0; no multiplier (settings as
`ppo_pointhazard.py`).

Measured (3 seeds, last 10% of updates): return 2.903-2.907, no violating step in all of
training, the shield intervening at 43% of the steps (episodes of 44 steps instead of 27).
"""

from experiments.configs import ppo_pointhazard
from hrljax.agents import shielded_ppo


def get_config():
  return ppo_pointhazard.pointhazard_settings(shielded_ppo.get_config())
