"""Hi-Agent's two-level group-relative agent on four rooms with a random start and goal per task:
`gigpo_fourrooms.py`'s task, environment-step budget and optimisation values
(`experiments/results/HI_AGENT.md`).

Every update runs 16 main environments for 8 decisions; at each decision 4 subgoals x 4
segments of 4 steps branch from the saved state: 16 x 8 x 4 x 4 x 4 = 8,192 environment steps,
the 16 x 8 episodes x 64 steps of an update of `grpo_fourrooms.py`, so both reach the budget in
256 updates.
"""

from hrljax.agents import hi_agent


def get_config():
  config = hi_agent.get_config()
  config.env_name = "FourRooms-misc"  # gymnax four rooms (Sutton et al. 1999 map), slippery moves
  config.env_kwargs.resample_init_pos = True  # a random start cell per task
  config.env_kwargs.resample_goal_pos = True  # and a random goal cell
  config.env_kwargs.max_steps_in_episode = 64  # time limit, as grpo_fourrooms' episode window
  config.total_timesteps = 2_097_152  # 256 updates of 8,192 environment steps
  config.num_groups = 16  # main environments (tasks) per update
  config.num_decisions = 8  # decisions per main environment per update (32 steps of 64)
  config.num_subgoals = 4  # G: subgoals per decision state
  config.num_segments = 4  # K: low-level segments per subgoal
  config.segment_steps = 4  # H: steps per segment; reaches a subgoal 2 rows and 2 columns away
  config.subgoal_radius = 2  # 5 x 5 window of subgoal cells
  config.lam = 1.0  # foresight weight of the execution success
  config.execution_success = "task_progress"  # the segment ends closer to the goal
  config.update_epochs = 4  # as grpo_fourrooms
  config.num_minibatches = 2  # as grpo_fourrooms
  config.learning_rate = 3e-3  # as grpo_fourrooms
  config.entropy_coef = 0.01  # as grpo_fourrooms
  return config
