"""Token-level PPO on the common token game (`token_game_common.game_config`), from the BC start.

The flat on-policy baseline of ArCHer's comparison: same game, policy size and behaviour-cloned
warm start as `archer_token_game.py`; environment interactions are utterances. One full game per
environment per update, 4 epochs of 4 minibatches (16 gradient steps per 128 utterances); the
policy learning rate fine-tunes the BC start. Curves and commands: `experiments/results/ARCHER.md`.
"""

from experiments.configs.token_game_common import game_config
from hrljax.agents import token_ppo


def get_config():
  config = game_config(token_ppo.get_config())
  config.num_envs = 32  # games in parallel
  config.num_steps = 4  # one full game per environment per update
  config.update_epochs = 4
  config.num_minibatches = 4
  config.learning_rate = 1e-4  # policy: fine-tunes the BC start
  config.value_learning_rate = 1e-3  # the value network's own Adam
  config.total_timesteps = 32 * 4 * 200  # 25,600 utterances
  config.log_every = 10
  config.checkpoint_every = 50
  return config
