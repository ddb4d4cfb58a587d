"""GMAH on the two-agent four rooms (2 agents, team reward +1 once both stand in their rooms).

Xu et al., arXiv:2408.11416, on `hrljax.envs.two_agent_rooms`: each agent starts in a random cell
of its room (north-west, north-east) and must reach the diagonally opposite one; the episode
terminates with a team reward of 1 when both are there at once, and is truncated after 100 steps.
Every 5 steps each agent picks a subgoal among the four room centres and the four hallways; the
agents' subgoal values are mixed by QMIX's monotonic mixer. `--config.mixer=none` is the ablation
(independent per-agent SMDP Q-learning on the team reward), `--config.mixer=vdn` the sum.

  python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms.py \\
      --workdir=runs/gmah_rooms/qmix_s0
  python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms.py \\
      --workdir=runs/gmah_rooms/none_s0 --config.mixer=none
"""

import ml_collections

from hrljax.agents import gmah


def get_config():
  config = gmah.get_config()
  config.env_name = "TwoAgentFourRooms-v0"  # hrljax.envs.two_agent_rooms
  config.env_kwargs = ml_collections.ConfigDict({"max_steps_in_episode": 100})  # time limit
  config.mixer = "qmix"  # monotonic hypernetwork mixer; "none": no mixer (the ablation)
  config.option_length = 5  # c: a subgoal every 5 steps (a hallway is 2 to 6 steps away)
  config.total_timesteps = 1_000_000  # team environment steps: 62,500 Learner steps of 16
  config.num_envs = 16  # environments stepped side by side
  config.num_steps = 1  # environment steps per environment per Learner step
  config.updates_per_step = 1  # gradient steps per Learner step, on each level
  config.buffer_size = 50_000  # replay capacity in team steps (10,000 options)
  config.learning_starts = 5_000  # environment steps before the first gradient step
  config.batch_size = 128  # team steps and options per gradient step
  config.learning_rate = 5e-4  # Adam, one state per level
  config.max_grad_norm = 10.0  # global-norm clip per level
  config.gamma = 0.99  # discount per step of the team reward: its +1 comes after 20-40 steps
  config.low_gamma = 0.9  # discount of the subgoal-reaching reward
  config.double_q = True  # the online networks pick the next subgoals and actions
  config.target_update_interval = 200  # gradient steps between target copies
  config.epsilon_start = 1.0  # ε-greedy subgoals and actions, linear...
  config.epsilon_end = 0.05  # ...down to 0.05...
  config.epsilon_decay_steps = 100_000  # ...over the first tenth of the run
  config.hidden_sizes = (64, 64)  # ReLU layers of the shared high-level network
  config.low_hidden_sizes = (64, 64)  # ReLU layers of the shared goal-conditioned low level
  config.mixer_embed_dim = 32  # QMIX's mixing layer
  config.hypernet_hidden = 64  # hidden layer of the weight hypernetworks
  config.mixer_init_scale = 1e-3  # the mixer starts near V(s)
  config.eval_episodes = 64  # greedy episodes per evaluation
  config.log_every = 500  # Learner steps (8,000 environment steps) per record
  config.eval_every = 5_000  # Learner steps (80,000 environment steps) between evaluations
  config.checkpoint_every = 5_000  # Learner steps between checkpoints
  return config
