"""Recovery RL on PointHazard-v0 (one control step per decision, the task action executed).

The hyperparameters are the reference's navigation1 task (a 2-D single integrator, the closest to
PointHazard): γ_risk = 0.8, ε_risk = 0.3 (spec `safety_critics.md` §2.5), task SAC with α = 0.2
fixed. Changed for a short CPU run: networks of 64 units and batches of 128 (as the SAC config);
τ_risk = 0.005 instead of 2e-4, because with 2e-4 the risk target stays near its initial 0.5
(sigmoid) for the ~10^4 updates of this run and the reflex then fires everywhere; 1000 pre-training
updates (instead of 10^4) on the risk buffer filled by the first 1000 uniform-random steps.
"""

from hrljax.agents import recovery_rl


def get_config():
  config = recovery_rl.get_config()
  config.env_name = "PointHazard-v0"
  config.total_timesteps = 30_000
  config.buffer_size = 30_000
  config.risk_buffer_size = 30_000
  config.learning_starts = 1000
  config.batch_size = 128
  config.risk_batch_size = 128
  config.hidden_sizes = (64, 64)
  config.risk_hidden_sizes = (64, 64)
  config.gamma_risk = 0.8
  config.eps_risk = 0.3
  config.tau_risk = 0.005
  config.risk_pretrain_updates = 1000
  config.log_every = 1000
  config.checkpoint_every = 5000
  return config
