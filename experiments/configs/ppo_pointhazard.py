"""Unconstrained PPO on PointHazard-v0: the baseline the on-policy safe agents are compared to.

It runs `ppo_lagrangian` with `multiplier="none"`: the policy loss is exactly PPO's (standardised
reward advantages, no cost term); a cost critic is still fitted and the episode cost, violations
and cost rate are logged. The PointHazard task and budget (`pointhazard_settings`) are shared by
every PPO-family `*_pointhazard.py` config.
"""

from hrljax.agents import ppo_lagrangian


def pointhazard_settings(config):
  """The task, budget and cost limit every PPO-family PointHazard config runs with.

  Safety Gym's cost limit d = 25 allows 2.5% of the steps of its 1000-step episodes; a
  PointHazard episode that reaches the goal lasts 27 (straight) to 46-52 (detour) control steps,
  so the same 2.5% is about one cost per episode: d = 1 (`docs/safety.md`).
  """
  config.env_name = "PointHazard-v0"
  config.num_envs = 16
  config.num_steps = 100
  config.total_timesteps = 16 * 100 * 150  # 150 updates
  config.learning_rate = 3e-4
  config.cost_limit = 1.0  # d per episode
  config.log_every = 5  # updates per record (divides the last 10%: updates 135-150)
  config.checkpoint_every = 50
  return config


def get_config():
  config = pointhazard_settings(ppo_lagrangian.get_config())
  config.multiplier = "none"  # unconstrained: costs only logged
  return config
