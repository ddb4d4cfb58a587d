"""PPO on CartPole-v1 with PureJaxRL's published settings (the project's flat baseline)."""

from hrljax.agents import ppo


def get_config():
  return ppo.get_config()
