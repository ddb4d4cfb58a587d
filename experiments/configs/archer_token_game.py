"""ArCHer on a small token game (16 items, 4 binary attributes, 6 turns), from a BC warm start.

The reference's structure and defaults (`agents/archer.py::get_config`: γ 0.95, τ 0.1 per
critic step, 50 critic steps and 3 actor steps per iteration, 20 critic-only warm-up iterations,
batch 256, replay 100k) on a game small enough for a CPU: the default 64-item game needs a larger
policy than a CPU trains in minutes. The warm start clones a scripted questioner that asks a random
question half of the time (`bc_random_question_prob = 0.5`).

Not yet validated: the learning rates and step counts are a first guess; no run of this config
has been measured to improve on its behaviour-cloned start.
"""

from hrljax.agents import archer


def get_config():
  config = archer.get_config()
  config.env_kwargs.num_items = 16
  config.env_kwargs.num_attributes = 4
  config.env_kwargs.num_values = 2
  config.env_kwargs.max_turns = 6
  config.d_model = 32
  config.num_layers = 1
  config.critic_d_model = 32
  config.critic_num_layers = 1
  config.num_envs = 32
  config.num_steps = 6
  config.batch_size = 64
  config.critic_updates = 10
  config.actor_updates = 2
  config.warmup_iters = 5
  config.bc_steps = 1000
  config.bc_batch_size = 32
  config.bc_dataset_episodes = 128
  config.actor_learning_rate = 3e-4
  config.critic_learning_rate = 1e-3
  config.total_timesteps = 32 * 6 * 200
  config.buffer_size = 20_000
  config.log_every = 10
  config.checkpoint_every = 50
  config.eval_episodes = 128
  return config
