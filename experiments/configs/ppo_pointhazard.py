"""Unconstrained PPO on PointHazard-v0: the baseline the safe agents are compared against.

It runs `ppo_lagrangian` with `multiplier="none"`: the policy loss is exactly `agents/ppo.py`'s
(standardised reward advantages, no cost term); a cost critic is still fitted and the episode cost,
violations and cost rate are logged, which plain `ppo` cannot do (its rollout drops `info`).
The PointHazard task and budget (`pointhazard_settings`) are shared by every PPO-family
`*_pointhazard.py` config.

Measured (3 seeds, last 10% of updates): return 2.909, episode cost 9.0 (the straight
path through the central hazard), about 73,000 violating steps during training.
"""

from hrljax.agents import ppo_lagrangian


def pointhazard_settings(config):
  """The task, budget and cost limit every PPO-family PointHazard config runs with."""
  config.env_name = "PointHazard-v0"
  config.num_envs = 16
  config.num_steps = 100
  config.total_timesteps = 16 * 100 * 150
  config.learning_rate = 3e-4
  # Safety Gym's d = 25 (spec safety_critics.md §9.1; OmniSafe, safety-starter-agents) allows
  # 2.5% of the steps of its episodes, which always last 1000 steps. PointHazard episodes end at
  # the goal, after 27 control steps on the straight path and 46-52 around the central hazard, so
  # the same 2.5% is about 1 cost per episode: d = 1. (The 200-step cap gave d = 5 before, which
  # asked for at most a 2x cut of the baseline's 9 and was met by PPO-Lag/PID-Lag without leaving
  # the straight path; experiments/results/SAFETY.md.)
  config.cost_limit = 1.0
  config.log_every = 10
  config.checkpoint_every = 50
  return config


def get_config():
  config = pointhazard_settings(ppo_lagrangian.get_config())
  config.multiplier = "none"
  return config
