"""Bresa on PointHazard-v0: waypoint decisions every K = 10 control steps, a reflex at every step.

`recovery_rl_pointhazard.py`'s networks, batches, control-step budget, γ_risk = 0.8 per control
step, ε = 0.3, τ_risk and pre-training, so that the two compare (the reflex horizon is the same in
control steps), with Bresa's two-rate structure (`agents/bresa.py`): the task policy (SAC over
decisions, SMDP discount γ^n per decision) places a waypoint in the arena every 10 control steps,
a saturated P controller tracks it, Q_risk gates every control step and the recovery policy
finishes a decision once the reflex fired. One risk update per control step (10 per decision),
as Recovery RL makes one per environment step; one task update per decision.

Measured (3 seeds, last 10% of updates): return 2.90 / 0.35 / 2.57, episode cost 0 / 0 / 0.09;
304-430 violating control steps during training, of which 267-411 in the first 1,000 (random
waypoints, reflex off) and 18-37 after (SAC: 7,300-8,400). Seeds 0 and 2 learn the detour
(greedy evaluation: return 2.88, cost 0); seed 1 found it at 17k control steps and lost it again.
"""

from experiments.configs import recovery_rl_pointhazard
from hrljax.agents import bresa

TWO_RATE_FIELDS = ("control_steps", "controller", "reflex_mode", "risk_next_action")


def get_config():
  config = recovery_rl_pointhazard.get_config()
  two_rate = bresa.get_config()
  config.agent = "bresa"
  for field in TWO_RATE_FIELDS:
    config[field] = two_rate[field]
  config.buffer_size = 3_000  # decisions: the 30k control steps are 3k decisions
  config.risk_updates_per_step = bresa.CONTROL_STEPS
  # The reference's recovery objective (minimise Q_risk): Bresa's measured runs use it; the
  # latching reflex hands a whole decision to π_rec, where the task critic of the decision-level
  # SAC does not score low-level actions.
  config.recovery_objective = "risk"
  config.log_every = 100
  config.checkpoint_every = 500
  return config
