"""Option-critic (batched, A2OC-style) on MiniGrid DoorKey-5x5 (xminigrid, the `[gridworld]`
extra): does a key-door-goal task, three sub-goals in a row, favour temporally extended options?

Same environment, observation and number of environments as ppo_doorkey.py, four times its
budget (option-critic first solves the task after about 1e6 steps). Unlike the
tabular four-rooms preset, the options share an MLP torso on the one-hot partial view
(`hrljax.envs.minigrid`), with biased, small-initialised heads; Adam rates are scaled down for
the deep network, and an entropy bonus on the intra-option policies (A2OC: 0.01) keeps them
exploring until the sparse goal reward is found:

  python -m experiments.train --config=experiments/configs/option_critic_doorkey.py \
      --workdir=runs/option_critic_doorkey --config.seeds=0,1,2
"""

import ml_collections

from hrljax.agents import option_critic


def get_config():
  config = option_critic.get_config()
  config.env_name = "MiniGrid-DoorKey-5x5"  # or -6x6, -8x8, MiniGrid-LockedRoom
  config.env_kwargs = ml_collections.ConfigDict({"observation": "one_hot"})  # 7 x 7 view one-hots
  config.transfer_after = 0  # four rooms' goal move; DoorKey has none
  config.num_envs = 16  # environments stepped in parallel per seed
  config.num_steps = 8  # rollout length per update
  config.n_step = 8  # longest option-aware return window
  config.total_timesteps = 2_000_000  # environment steps per seed, summed over environments
  config.num_options = 4  # the paper's count
  config.critic_learning_rate = 1e-3  # Adam, critic and the shared torso
  config.intra_option_learning_rate = 5e-4  # Adam, the option policies (the paper's 2:1 ratio)
  config.termination_learning_rate = 5e-4  # Adam, the terminations
  config.entropy_coef = 0.01  # A2OC's bonus on the intra-option policies
  config.hidden_sizes = (64, 64)  # shared torso
  config.activation = "tanh"  # as the PPO baseline's
  config.head_init_scale = 0.01  # small orthogonal heads: Q ~ 0, beta ~ 0.5, near-uniform pi
  config.head_bias = True  # a bias per head (no table to keep apart)
  config.eval_episodes = 32  # greedy episodes per evaluation (option epsilon 0.01)
  return config
