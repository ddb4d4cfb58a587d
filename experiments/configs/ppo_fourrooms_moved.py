"""PPO from scratch on four rooms with the goal moved: the flat baseline of
`latent_skills_fourrooms.py`.

`ppo_fourrooms.py` (the option-critic four-rooms task, PureJaxRL's PPO, no learning-rate
annealing) with the goal at the cell of the lower-right room that the transfer task's
`transfer_seed` 0 draws, (11, 8), from the first step (`--config.env_kwargs.goal="(r, c)"` for
another); greedy evaluations every 5 updates (10,240 environment steps) give the learning curve
that `experiments.steps_to_threshold` reads.
"""

from experiments.configs import ppo_fourrooms
from hrljax.envs import four_rooms


def get_config():
  config = ppo_fourrooms.get_config()
  config.env_kwargs.goal = tuple(four_rooms.transfer_goal_for_seed(0))  # the moved goal
  config.total_timesteps = 300_000
  config.log_every = 5
  config.eval_every = 5  # a greedy evaluation (32 episodes) every 10,240 environment steps
  config.checkpoint_every = 50
  return config
