"""Token-level PPO on the common token game (`token_game_common.game_config`), from the BC start.

The flat on-policy baseline of ArCHer's comparison: same game, policy size and behaviour-cloned
warm start as `archer_token_game.py`; environment interactions are utterances. 32 games x 4
utterances (one game length) per update, 4 epochs of 4 minibatches; policy lr 1e-4 (fine-tuning
the BC start), value lr 1e-3.

Measured (3 seeds vmapped, keys `jax.random.split(jax.random.key(0), 3)`, greedy success over
256 games every 10 updates; commands in `experiments/results/ARCHER.md`): the shared BC start wins
0.86 / 0.80 / 0.63 (mean 0.76); the 3-seed mean first reaches 0.90 after 60 updates (7,680
utterances per seed) and ends at 1.00 / 1.00 / 0.86 (mean 0.95) after 200 updates (25,600). The
0.20 / 0.18 / 0.00 starts recorded here before do not reproduce with the current tree.
"""

from experiments.configs.token_game_common import game_config
from hrljax.agents import token_ppo


def get_config():
  config = game_config(token_ppo.get_config())
  config.num_envs = 32
  config.num_steps = 4
  config.update_epochs = 4
  config.num_minibatches = 4
  config.learning_rate = 1e-4
  config.value_learning_rate = 1e-3
  config.total_timesteps = 32 * 4 * 200
  config.log_every = 10
  config.checkpoint_every = 50
  return config
