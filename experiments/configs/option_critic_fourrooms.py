"""Option-critic (batched, A2OC-style) on four rooms, with the option-critic paper's transfer task.

Bacon, Harb, Precup 2017 (arXiv:1609.05140), four-rooms experiment: 4 options, gamma 0.99,
epsilon-greedy policy over options (epsilon 0.01), goal in the east doorway, random start cells,
moves fail with probability 1/3; the goal moves to a random cell of the lower-right room once
`transfer_after` environment steps (summed over the parallel environments) have been taken:

  python -m experiments.train --config=experiments/configs/option_critic_fourrooms.py \
      --workdir=runs/oc --config.transfer_after=1000000

The step sizes, the temperature and xi differ from the tabular reference; see
`hrljax.agents.option_critic.get_config` for why.
"""

from hrljax.agents import option_critic


def get_config():
  config = option_critic.get_config()
  config.total_timesteps = 2_000_000
  config.transfer_after = 0  # environment steps before the goal moves; 0: it never moves
  return config
