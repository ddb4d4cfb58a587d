"""Bresa on PointHazard-v0: waypoint decisions every K = 10 control steps, a reflex at every step.

The task policy (SAC over decisions, SMDP discount γ^n per decision) places a waypoint in the arena
every 10 control steps; a saturated P controller tracks it; Q_risk gates every control step and the
recovery policy finishes a decision once the reflex fired. Same networks, batches, control steps,
γ_risk = 0.8 per control step, ε = 0.3, τ_risk and pre-training as `recovery_rl_pointhazard.py`,
so the two compare (the reflex horizon is the same in control steps). One risk update per control
step (10 per decision), as Recovery RL makes one per environment step; one task update per
decision.
"""

from hrljax.agents import bresa


def get_config():
  config = bresa.get_config()
  config.env_name = "PointHazard-v0"
  config.total_timesteps = 30_000
  config.buffer_size = 3_000
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
  config.risk_updates_per_step = bresa.CONTROL_STEPS
  config.log_every = 100
  config.checkpoint_every = 500
  return config
