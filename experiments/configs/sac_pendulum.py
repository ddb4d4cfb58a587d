"""SAC on gymnax Pendulum-v1 with the paper's hyperparameters (arXiv:1812.05905, Appendix D).

Pendulum-v1 never terminates; every episode is truncated after 200 steps and bootstraps from its
final observation. 20k environment steps (100 episodes) are plenty: SAC usually gets close to the
best returns (about -150) within 10k.
"""

from hrljax.agents import sac


def get_config():
  config = sac.get_config()
  config.env_name = "Pendulum-v1"
  config.total_timesteps = 20_000  # 100 episodes
  config.buffer_size = 20_000  # the whole run fits
  config.log_every = 1000  # Learner steps (one environment step each) per record
  config.checkpoint_every = 5000
  return config
