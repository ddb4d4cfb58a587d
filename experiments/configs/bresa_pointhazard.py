"""Bresa on PointHazard-v0: waypoint decisions every K = 10 control steps, a reflex at every step.

`recovery_rl_pointhazard.py`'s networks, batches, control-step budget, γ_risk = 0.8 per control
step, τ_risk and pre-training, so that the two compare (the reflex horizon is the same in control
steps), with Bresa's two-rate structure (`agents/bresa.py`): the task policy (SAC over decisions,
SMDP discount γ^n per decision) places a waypoint in the arena every 10 control steps, a
saturated P controller tracks it, Q_risk gates every control step and the recovery policy
finishes a decision once the reflex fired (option (a) of spec §1.3). One risk update per control
step (10 per decision), as Recovery RL makes one per environment step; one task update per
decision.

The reflex threshold is ε = 0.5, not Recovery RL's (and the spec prototype's) 0.3: over seeds
0-17 (`experiments/safety_table.py`, 30k control steps, `experiments/results/SAFETY.md`) 13 of 18
seeds reach the goal with ε = 0.5 against 7 of 18 with 0.3, every seed whose outcome differs
(0, 1, 2, 12, 13, 16) in favour of 0.5, and both cut the violating control steps about 19x
against the reflex-off agent; mean greedy return 2.22 (76% of the reflex-off agent's 2.90)
against 1.38 (47%). ε = 0.4 reached the goal in 1 of seeds 0-2; ε = 0.6 in 13 of 18 (81% of the
return) but with violations in 3 greedy episodes (mean evaluation cost 1.33). The seeds that
fail stop in front of the central hazard (the detour problem in SAFETY.md).

Tried without a gain in the success rate (3-9 seeds each, table in SAFETY.md), all at ε = 0.3
unless stated: 10 task updates per decision, the reflex without latch (`reflex_mode="per_step"`),
5,000 uniform-random control steps behind the reflex (`random_steps=5000`), a penalty of 0.1 or
0.5 on the task reward of each decision the reflex took over (`intervention_penalty`), 60k
control steps (5 of 9 seeds), and option (b) of spec §1.3 (`reflex_mode="end_decision"`, the
reflex ends the decision; either `recovery_credit`; also at ε = 0.5). At ε = 0.5, the action
nearest the nominal one that Q_risk accepts in place of π_rec's (`recovery_action`, seeds 0-17):
"critic_projection" reaches the goal in 10 of 18 seeds (every failing seed of the config among
them, 65% of the return), "safe_sampling" in 9 of 18 with 3 violating greedy episodes; the
robot slides along the central hazard's edge and stops in the gap below it. At ε = 0.5, the
safety critic's Lagrangian on the task actor (`task_risk_penalty`: ν·(Q_risk − ε) at the
waypoint controller's first action, through the controller): fixed ν = 0.1 reaches the goal in
the same 13 of 18 seeds as without it (76.6% of the return); ν = 1 / 10 / 100 in 2 / 0 / 1 of
seeds 0-2, ν learned from 5000 in none and from 1 (log ν at lr 0.003, falling to 0 by 20k
control steps) in 2, the hinge ν·max(Q_risk − ε, 0) with ν = 1 / 10 in 1 of 3. With the reflex
as a last resort, ε = 0.9, and a fixed ν = 5 (`--config.eps_risk=0.9
--config.task_risk_penalty=fixed --config.task_risk_nu=5.0`) 15 of seeds 0-17 reach the goal:
84.5% of the return, 15.1x fewer violating steps, evaluation cost 0 in all 18, which meets the
three thresholds (ε = 0.9 without the penalty: 18 of 18 but only 6.0x fewer violating steps and
6 violating greedy episodes): that is `bresa_lagrangian_pointhazard.py`. Not this config's
default: over control steps 1,001-2,000 it violates 53 / 58 / 119 times (seeds 0-2), above the
learning test's threshold of 22.2 that this config meets (`tests/agents/test_bresa.py`).
"""

from experiments.configs import recovery_rl_pointhazard
from hrljax.agents import bresa

TWO_RATE_FIELDS = ("control_steps", "controller", "reflex_mode", "risk_next_action")


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name (`sac_pointhazard.get_config`)."""
  config = recovery_rl_pointhazard.get_config(layout)
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
  config.eps_risk = 0.5  # Recovery RL's 0.3 reaches the goal in fewer seeds (docstring)
  config.log_every = 100
  config.checkpoint_every = 500
  return config
