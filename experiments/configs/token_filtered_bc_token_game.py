"""Online filtered BC on the common token game (`token_game_common.game_config`), from the BC start.

Same game, policy size and behaviour-cloned warm start as `archer_token_game.py`. Each iteration
plays 32 fresh games, keeps the won ones and takes 8 Adam steps of BC on batches of their
utterances. The "success" filter keeps what the reference's top-10% quantile filter keeps (rewards
are 1 for a win, 0 otherwise) whenever at least about 10% of the games are won; below that the
quantile threshold falls to 0 and would keep every game. Curves and commands:
`experiments/results/ARCHER.md`.
"""

from experiments.configs.token_game_common import game_config
from hrljax.agents import token_filtered_bc


def get_config():
  config = game_config(token_filtered_bc.get_config())
  config.num_envs = 32  # games per iteration
  config.filter = "success"  # keep the won games
  config.bc_updates = 8  # BC steps per iteration
  config.batch_size = 64
  config.learning_rate = 1e-4
  config.total_timesteps = 32 * 4 * 200  # 25,600 utterances
  config.log_every = 10
  config.checkpoint_every = 50
  return config
