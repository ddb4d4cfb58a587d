"""Bresa on PointHazard-v0: waypoint decisions every K = 10 control steps, a reflex at every step.

`recovery_rl_pointhazard.py`'s networks, batches, control-step budget, γ_risk = 0.8 per control
step, ε = 0.3, τ_risk and pre-training, so that the two compare (the reflex horizon is the same in
control steps), with Bresa's two-rate structure (`agents/bresa.py`): the task policy (SAC over
decisions, SMDP discount γ^n per decision) places a waypoint in the arena every 10 control steps,
a saturated P controller tracks it, Q_risk gates every control step and the recovery policy
finishes a decision once the reflex fired. One risk update per control step (10 per decision),
as Recovery RL makes one per environment step; one task update per decision.

Measured (`experiments/results/SAFETY.md`, 30k control steps): with `experiments.train`, seeds
0 / 1 / 2 reach return 2.90 / 0.35 / 2.57 over the last 10% of updates (greedy evaluation 2.88 /
0.27 / 2.89, cost 0; 304-430 violating control steps in training, SAC: 7,500-8,500); with
`experiments/safety_table.py` (the whole run as one scan, which rounds differently and so gives
other runs of the same seeds) greedy 0.58 / 0.51 / -0.09, and 4 of seeds 0-8 learn the detour
(return 2.88-2.92, cost 0). Reflex off: return 2.90 and cost 12, the unconstrained agent's
straight path. Tried without a gain in the success rate (3-9 seeds each, table in SAFETY.md):
10 task updates per decision, the reflex without latch (`reflex_mode="per_step"`), 5,000
uniform-random control steps behind the reflex (`random_steps=5000`), a penalty of 0.1 or 0.5 on
the task reward of each decision the reflex took over (`intervention_penalty`: no seed of 0-2).
With 60k control steps 5 of seeds 0-8 reach the goal (mean greedy return 1.79, 62% of the
reflex-off agent's), against 4 of 9 at 30k. With `eps_risk=0.5`, 8 of seeds 0-11 reach the goal
at 30k against 5 of 12 with 0.3 (mean return 72% vs 50%; the gain is seeds 0-2 only; ε = 0.4:
1 of 3): a candidate, not confirmed.
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
