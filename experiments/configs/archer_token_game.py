"""ArCHer on the common token game (`token_game_common.game_config`), from the shared BC start.

The reference's loop (γ 0.95, per-step Polyak τ, several critic steps per actor step, a
critic-only warm-up) at CPU scale: 64 games of one full episode (4 utterances) per iteration.
The critic settings are those that separated outcomes best on fresh games (its encoder from the
BC policy's trunk, causal, last-token readout, lr 1e-3, 50 steps per iteration); the actor
settings (Adam 1e-5 x 2 per iteration, batch-standardised advantage, warm-up 6 iterations and a
q_gap gate of 0.4) were not shown to improve on the BC start. The best measured ArCHer settings
(`--config.actor_learning_rate=1e-4 --config.actor_updates=16
--config.actor_baseline_samples=4 --config.critic_updates=100`), the comparison with token PPO
and the commands: `experiments/results/ARCHER.md`.
"""

from experiments.configs import token_game_common
from hrljax.agents import archer


def get_config():
  config = archer.get_config()
  token_game_common.game_config(config)
  config.critic_d_model = 64  # = d_model: the critic starts from the policy's trunk
  config.critic_num_layers = 2  # = num_layers
  config.num_envs = 64
  config.num_steps = 4  # one full game per environment per iteration
  config.batch_size = 128
  config.critic_updates = 50
  config.actor_updates = 2
  config.warmup_iters = 6  # 300 critic steps before the first actor step
  config.warmup_q_gap = 0.4
  config.critic_utterance_encoding = "joint"  # separated outcomes faster than "separate"
  config.critic_init = "policy"
  config.critic_causal = True
  config.critic_readout = "last"
  config.advantage_normalization = "batch"
  config.actor_learning_rate = 1e-5  # 3e-5 and 1e-4 x 2 drifted below the BC start
  config.critic_learning_rate = 1e-3
  config.total_timesteps = 64 * 4 * 150  # 38,400 utterances
  config.buffer_size = 20_000
  config.log_every = 5
  config.checkpoint_every = 50
  config.train_eval_episodes = 64  # greedy games inside every iteration (eval_return)
  return config
