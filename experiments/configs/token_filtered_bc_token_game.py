"""Online filtered BC on the common token game (`token_game_common.game_config`), from the BC start.

Same game, policy size and behaviour-cloned warm start as `archer_token_game.py`. Each iteration
plays 32 fresh games (at most 4 utterances each), keeps the won ones and takes 8 Adam steps
(lr 1e-4) of BC on batches of 64 of their utterances. The "success" filter is what the reference's
top-10% quantile filter keeps (rewards 1 for a win, 0 otherwise) whenever at least about 10% of
the games are won; below that the quantile threshold falls to 0 and it would keep every game.

Starts: the shared BC start's greedy success is 0.86 / 0.80 / 0.63 for the three seeds of
`jax.random.split(jax.random.key(0), 3)` (256 games); the 0.20 / 0.18 / 0.00 recorded here
before do not reproduce with the current tree. Curves and commands:
`experiments/results/ARCHER.md`.
"""

from experiments.configs.token_game_common import game_config
from hrljax.agents import token_filtered_bc


def get_config():
  config = game_config(token_filtered_bc.get_config())
  config.num_envs = 32
  config.filter = "success"
  config.bc_updates = 8
  config.batch_size = 64
  config.learning_rate = 1e-4
  config.total_timesteps = 32 * 4 * 200
  config.log_every = 10
  config.checkpoint_every = 50
  return config
