"""Token-level PPO on the common token game (`token_game_common.game_config`), from the BC start.

The flat on-policy baseline of ArCHer's comparison: same game, policy size and behaviour-cloned
warm start as `archer_token_game.py`; environment interactions are utterances. 32 games x 6
utterances (one game length) per update, 4 epochs of 4 minibatches; policy lr 1e-4 (fine-tuning
the BC start), value lr 1e-3.

Measured so far (3 seeds vmapped, a curve driver outside the repository, greedy eval over 256
games): the shared BC start wins 0.20 / 0.18 / 0.00 (seeds 0 / 1 / 2); after 20 updates (3,840
utterances per seed) 0.07 / 0.11 / 0.12, after 40 (7,680) 0.08 / 0.15 / 0.00, below the start for
seeds 0 and 1. These settings are untuned first guesses.
"""

from experiments.configs.token_game_common import game_config
from hrljax.agents import token_ppo


def get_config():
  config = game_config(token_ppo.get_config())
  config.num_envs = 32
  config.num_steps = 6
  config.update_epochs = 4
  config.num_minibatches = 4
  config.learning_rate = 1e-4
  config.value_learning_rate = 1e-3
  config.total_timesteps = 32 * 6 * 200
  config.log_every = 10
  config.checkpoint_every = 50
  return config
