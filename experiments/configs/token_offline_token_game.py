"""Offline training on logged dialogues of the common token game (`token_game_common.game_config`).

The logging policy is the scripted questioner asking random questions (`dataset_random_question_prob`
1.0: about 59% of its games are won), 1,024 logged games; every objective starts from the BC
start cloned from the same questioner (`bc_random_question_prob` 1.0), which is A-LoL's
reference. `--config.objective=bc`, `filtered_bc`, `alol` (default) or `archer` (offline
ArCHer: an IQL utterance critic and an advantage-weighted actor). Table and commands:
`experiments/results/GROUP_RELATIVE.md`.
"""

from experiments.configs.token_game_common import game_config
from hrljax.agents import token_offline


def get_config():
  config = game_config(token_offline.get_config())
  config.bc_random_question_prob = 1.0  # the start clones the logging questioner
  config.dataset_random_question_prob = 1.0
  config.dataset_episodes = 1_024
  config.num_updates = 2_000
  config.batch_size = 64
  config.learning_rate = 1e-4
  config.log_every = 100
  config.eval_every = 200
  config.checkpoint_every = 1_000
  return config
