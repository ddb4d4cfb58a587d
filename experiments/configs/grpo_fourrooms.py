"""GRPO on gymnax FourRooms with a random start and goal per task: the baseline of GiGPO.

Every update draws `num_groups` tasks and runs `group_size` episodes of each from the same start;
reward 1 at the goal, which ends the episode. Trajectories of a task revisit the same cells, which
gives GiGPO's anchor states step-level credit that episode-level GRPO lacks. The values were
chosen on short single-seed runs of both estimators (`experiments/results/GROUP_RELATIVE.md`);
`gigpo_fourrooms.py` changes only the estimator.
"""

from hrljax.agents import group_relative


def get_config():
  config = group_relative.get_config()
  config.estimator = "grpo"  # episode-level group z-score of the return
  config.env_name = "FourRooms-misc"  # gymnax four rooms (Sutton et al. 1999 map), slippery moves
  config.env_kwargs.resample_init_pos = True  # a random start cell per task
  config.env_kwargs.resample_goal_pos = True  # and a random goal cell
  config.num_steps = 64  # episode window: an episode succeeds if it reaches the goal within it
  config.env_kwargs.max_steps_in_episode = config.get_ref("num_steps")  # time limit = the window
  config.observation_one_hot = 13  # (row, column) of agent and goal, each in 0..12
  config.num_groups = 16  # tasks per update
  config.group_size = 8  # episodes per task
  config.total_timesteps = 2_097_152  # 256 updates of 16 x 8 episodes x 64 steps
  config.update_epochs = 4  # passes over each update's episodes
  config.num_minibatches = 2  # of episodes, per pass
  config.learning_rate = 3e-3  # Adam
  config.kl_coef = 0.0  # the reference policy is the random initial one: no KL to it
  config.entropy_coef = 0.01  # keeps exploring while most episodes fail
  return config
