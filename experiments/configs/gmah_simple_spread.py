"""GMAH on JaxMARL's MPE simple_spread (3 agents, 3 landmarks, 25-step episodes).

Xu et al., arXiv:2408.11416: every agent picks a landmark as its subgoal every 5 steps; the
agents' subgoal values are mixed by QMIX's monotonic mixer. The agent's defaults are these
settings, spelled out so that the preset reads as the experiment; the value-learning ones are
`qmix_simple_spread`'s, on the same budget. `--config.mixer=none` is the ablation (independent
per-agent SMDP Q-learning on the team reward), `--config.mixer=vdn` the sum of the agents' values.
"""

from hrljax.agents import gmah


def get_config():
  config = gmah.get_config()
  config.env_name = "MPE_simple_spread_v3"  # hrljax.envs.mpe, the [marl] extra
  config.mixer = "qmix"  # monotonic hypernetwork mixer; "none": no mixer (the ablation)
  config.option_length = 5  # c: a subgoal every 5 steps, five per episode
  config.total_timesteps = 400_000  # team environment steps: 25,000 Learner steps of 16
  config.num_envs = 16  # environments stepped side by side
  config.num_steps = 1  # environment steps per environment per Learner step
  config.updates_per_step = 1  # gradient steps per Learner step, on each level
  config.buffer_size = 50_000  # replay capacity in team steps (10,000 options)
  config.learning_starts = 5_000  # environment steps before the first gradient step
  config.batch_size = 128  # team steps and options per gradient step
  config.learning_rate = 5e-4  # Adam, one state per level
  config.max_grad_norm = 10.0  # global-norm clip per level
  config.gamma = 0.95  # discount per step of the team reward
  config.low_gamma = 0.9  # discount of the subgoal-reaching reward
  config.double_q = True  # the online networks pick the next subgoals and actions
  config.target_update_interval = 200  # gradient steps between target copies
  config.epsilon_start = 1.0  # ε-greedy subgoals and actions, linear...
  config.epsilon_end = 0.05  # ...down to 0.05...
  config.epsilon_decay_steps = 100_000  # ...over the first quarter of the run
  config.hidden_sizes = (64, 64)  # ReLU layers of the shared high-level network
  config.low_hidden_sizes = (64, 64)  # ReLU layers of the shared goal-conditioned low level
  config.mixer_embed_dim = 32  # QMIX's mixing layer
  config.hypernet_hidden = 64  # hidden layer of the weight hypernetworks
  config.mixer_init_scale = 1e-3  # the mixer starts near V(s), as qmix_simple_spread's
  config.log_every = 500  # Learner steps (8,000 environment steps) per record
  config.checkpoint_every = 5_000  # Learner steps between checkpoints
  return config
