"""PPO on MiniGrid DoorKey-5x5 (xminigrid, the `[gridworld]` extra): the flat baseline for
option_critic_doorkey.py.

Same environment, observation and number of environments as the option-critic preset; an MLP
on the one-hot partial view (`hrljax.envs.minigrid`). PPO solves DoorKey-5x5 within about 1e5
environment steps, so its budget is a quarter of option-critic's (experiments/results/
GRIDWORLD.md compares the two over the same steps). The hyperparameters are those of
MiniGrid's rl-starter-files PPO (16 environments x 128 steps, 4 epochs, Adam 1e-3, entropy 0.01),
with 4 minibatches of 512 steps:

  python -m experiments.train --config=experiments/configs/ppo_doorkey.py \
      --workdir=runs/ppo_doorkey --config.seeds=0,1,2

Other sizes: --config.env_name=MiniGrid-DoorKey-8x8 (the time limit follows the grid size).
"""

from hrljax.agents import ppo


def get_config():
  config = ppo.get_config()
  config.env_name = "MiniGrid-DoorKey-5x5"  # or -6x6, -8x8, MiniGrid-LockedRoom
  config.env_kwargs.observation = "one_hot"  # tile and colour one-hots of the 7 x 7 view
  config.num_envs = 16  # environments stepped in parallel per seed
  config.num_steps = 128  # rollout length per update
  config.total_timesteps = 500_000  # environment steps per seed, summed over environments
  config.learning_rate = 1e-3  # Adam, annealed linearly to 0
  config.num_minibatches = 4  # of 16 x 128 / 4 = 512 steps
  config.update_epochs = 4  # passes over each rollout
  config.entropy_coef = 0.01  # exploration until the key, the door and the goal are found
  config.hidden_sizes = (64, 64)  # tanh MLP torso of the actor and the critic
  config.log_every = 5  # updates per record (10,240 environment steps)
  config.eval_episodes = 32  # greedy episodes per evaluation
  return config
