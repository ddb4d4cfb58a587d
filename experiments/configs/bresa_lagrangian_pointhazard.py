"""Bresa on PointHazard with the reflex as a last resort and the safety critic's Lagrangian on
the task actor: the variant of `bresa_pointhazard.py` that meets issue 7's three thresholds.

Changes against `bresa_pointhazard.py` (everything else is that config):
  * `eps_risk` 0.9 instead of 0.5: the control-rate reflex fires only where Q_risk is close to
    certain, so it no longer holds the robot in front of the central hazard;
  * `task_risk_penalty="fixed"`, `task_risk_nu=5`: ν·(Q_risk(s, c(s, w)) − ε) is added to the
    task actor's loss at the waypoint controller's first nominal action for its waypoint w
    (`agents.recovery_rl.task_risk_penalty_fn`; the LR baseline of Thananjeyan et al. 2021's
    code and SQRL's constrained update in its paper form, Srinivasan et al. 2020), so that the
    slow policy itself learns to route its waypoints round the hazard.

Measured (30k control steps, `experiments.safety_table --sequential`, seeds 0-17, against
two-rate SAC's seeds 0-2; `experiments/results/SAFETY.md`, "The safety critic's Lagrangian on
the task actor"): 15 of 18 seeds reach the goal, 84.5% of the return (seeds 0-8: 89.9%, 0-2:
99.6%), 15.1x fewer violating control steps in training, evaluation cost 0 in all 18 seeds.
ε = 0.9 without the penalty: 18 of 18 reach the goal but only 6.0x fewer violations and 6
greedy episodes violate; the penalty alone with the reflex off, ν = 5: 15 of 18, 84.9%, 11.0x.
Early in training it violates more than `bresa_pointhazard.py` (53 / 58 / 119 violating steps
over control steps 1,001-2,000, seeds 0-2), because the reflex lets more through while the
critic is young: `bresa_pointhazard.py` stays the config of Bresa's short learning test.
"""

from experiments.configs import bresa_pointhazard


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name (`sac_pointhazard.get_config`)."""
  config = bresa_pointhazard.get_config(layout)
  config.eps_risk = 0.9
  config.task_risk_penalty = "fixed"
  config.task_risk_nu = 5.0
  return config
