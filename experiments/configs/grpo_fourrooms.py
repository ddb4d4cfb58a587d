"""GRPO on gymnax FourRooms with a random start and goal per group (the baseline of GiGPO).

Every update draws `num_groups` tasks (start cell and goal cell, uniformly over the open cells of
the Sutton et al. 1999 four-rooms map) and runs `group_size` episodes of each from the same start;
reward 1 on reaching the goal, which ends the episode; an episode succeeds when it reaches the goal
within `num_steps` steps (the environment's time limit is set to the same value). Actions slip
with the environment's default probability (a random action 4/9 of the time). Trajectories of a
group revisit the same cells, so GiGPO's anchor states give step-level credit that episode-level
GRPO lacks. `gigpo_fourrooms.py` is the same run with `estimator = "gigpo"` (the same budget).

Not the GiGPO scripts' values (the agent's defaults), chosen on short single-seed runs of both
estimators: episodes of 64 steps, Adam 3e-3, 4 epochs of 2 minibatches, entropy bonus 0.01, and no
KL penalty (the reference policy is the random initial one, which a KL would hold on to).
Measured (2.1M env steps, seeds 0-2, mean success over the last 10% of updates): GiGPO 0.86 /
0.85 / 0.89, GRPO 0.70 / 0.69 / 0.64; a uniform random policy about 0.19.
"""

from hrljax.agents import group_relative


def get_config():
  config = group_relative.get_config()
  config.estimator = "grpo"
  config.env_name = "FourRooms-misc"
  config.env_kwargs.resample_init_pos = True
  config.env_kwargs.resample_goal_pos = True
  config.num_steps = 64
  config.env_kwargs.max_steps_in_episode = config.get_ref("num_steps")
  config.observation_one_hot = 13  # (row, column) of agent and goal, each in 0..12
  config.num_groups = 16
  config.group_size = 8
  config.total_timesteps = 2_097_152  # 256 updates of 16 x 8 episodes x 64 steps
  config.update_epochs = 4
  config.num_minibatches = 2
  config.learning_rate = 3e-3
  config.kl_coef = 0.0
  config.entropy_coef = 0.01
  return config
