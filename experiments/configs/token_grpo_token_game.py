"""GRPO on the common token game (`token_game_common.game_config`), from the BC start.

Same game, policy size and behaviour-cloned warm start as `archer_token_game.py`. Each update
plays 4 hidden targets x 8 games (a group shares its target), GRPO advantages of the returns,
one epoch of 2 minibatches of utterances, KL (k3) to the BC start, token-mean aggregation.
Curves and commands: `experiments/results/ARCHER.md`.
"""

from experiments.configs.token_game_common import game_config
from hrljax.agents import token_grpo


def get_config():
  config = game_config(token_grpo.get_config())
  config.num_groups = 4  # hidden targets per update
  config.group_size = 8  # games per target
  config.update_epochs = 1
  config.num_minibatches = 2
  config.learning_rate = 1e-4
  config.kl_coef = 0.01  # to the BC start
  config.total_timesteps = 32 * 4 * 200  # 25,600 utterances
  config.log_every = 10
  config.checkpoint_every = 50
  return config
