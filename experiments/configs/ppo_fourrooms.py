"""PPO on the option-critic four-rooms task: the flat baseline for option_critic_fourrooms.py.

Same environment, observation, number of environments, budget and transfer flag
(`--config.transfer_after=<environment steps>`, summed over environments; 0: the goal never
moves). The learning rate is not annealed, so that PPO can still adapt after the goal moves.
"""

from hrljax.agents import ppo
from hrljax.envs import four_rooms


def get_config():
  config = ppo.get_config()
  config.env_name = four_rooms.ENV_NAME
  config.env_kwargs.observation = "one_hot"
  config.num_envs = 16
  config.total_timesteps = 2_000_000
  config.anneal_lr = False
  config.transfer_after = 0
  config.env_kwargs.transfer_after_steps = config.get_ref("transfer_after") // config.get_ref(
    "num_envs"
  )
  config.env_kwargs.transfer_seed = 0  # seed of the moved goal's draw (part of the task)
  return config
