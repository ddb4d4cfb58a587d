"""DQN on CartPole-v1 with PureJaxRL's DQN settings (purejaxrl/dqn.py, CleanRL's CartPole config).

The agent's defaults are these settings; they are spelled out here so that the preset reads as
the experiment. CartPole-v1 ends an episode by termination (the pole falls: no bootstrap) or by
truncation at 500 steps (bootstrapped from the final observation).
"""

from hrljax.agents import dqn


def get_config():
  config = dqn.get_config()
  config.env_name = "CartPole-v1"  # gymnax
  config.total_timesteps = 500_000  # environment steps: 50,000 Learner steps of 10
  config.num_envs = 10  # environments stepped side by side
  config.num_steps = 1  # environment steps per environment per Learner step
  config.updates_per_step = 1  # gradient steps per Learner step (one per 10 env steps)
  config.buffer_size = 10_000  # replay capacity, transitions
  config.learning_starts = 10_000  # environment steps before the first gradient step
  config.batch_size = 128  # transitions per gradient step
  config.learning_rate = 2.5e-4  # Adam
  config.gamma = 0.99  # discount
  config.double_q = False  # DQN's target; True: Double DQN's
  config.loss_type = "l2"  # ½·td² (PureJaxRL: mean td²)
  config.tau = 1.0  # the target network is copied...
  config.target_update_interval = 50  # ...every 50 gradient steps (500 environment steps)
  config.epsilon_start = 1.0  # ε-greedy exploration, linear...
  config.epsilon_end = 0.05  # ...down to 0.05...
  config.epsilon_decay_steps = 250_000  # ...over the first half of the run
  config.hidden_sizes = (120, 84)  # ReLU layers of the Q-network
  config.log_every = 1000  # Learner steps (10,000 environment steps) per record
  config.checkpoint_every = 10_000  # Learner steps between checkpoints
  return config
