"""IPPO on JaxMARL's MPE simple_spread (3 agents, 3 landmarks, 25-step episodes).

The hyperparameters are JaxMARL's IPPO settings for MPE (`baselines/IPPO/config/ippo_ff_mpe.yaml`);
the budget is that of `qmix_simple_spread` and `gmah_simple_spread`, so that the three compare at
the same number of environment steps (JaxMARL trains for 1e7). Every agent learns from the team
reward, the sum of the agents' rewards; every episode ends by its time limit (a truncation:
bootstrapped).
"""

from hrljax.agents import ippo


def get_config():
  config = ippo.get_config()
  config.env_name = "MPE_simple_spread_v3"  # hrljax.envs.mpe, the [marl] extra
  config.total_timesteps = 400_000  # team environment steps: 195 updates of 16 x 128
  config.num_envs = 16  # environments stepped side by side (JaxMARL's NUM_ENVS)
  config.num_steps = 128  # rollout length per update: 16 x 128 x 3 agent rows per batch
  config.update_epochs = 4  # passes over each batch
  config.num_minibatches = 4  # minibatches per pass (of 1,536 agent rows)
  config.learning_rate = 2.5e-4  # Adam, eps 1e-5...
  config.anneal_lr = True  # ...decayed linearly to 0 over the run
  config.max_grad_norm = 0.5  # global-norm clip
  config.gamma = 0.99  # discount
  config.gae_lambda = 0.95  # GAE's λ
  config.clip_epsilon = 0.2  # the surrogate's clip (and the value's)
  config.entropy_coef = 0.01  # entropy bonus
  config.value_coef = 0.5  # value loss weight
  config.hidden_sizes = (64, 64)  # separate policy and value torsos shared by the agents
  config.activation = "tanh"
  config.agent_ids = False  # the agent's own observation only, as JaxMARL's IPPO
  config.log_every = 5  # updates (10,240 environment steps) per record
  config.checkpoint_every = 50  # updates between checkpoints
  return config
