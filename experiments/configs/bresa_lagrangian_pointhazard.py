"""Bresa on PointHazard with the reflex as a last resort and the safety critic's Lagrangian on
the task actor: the variant of `bresa_pointhazard.py` that meets the safety thresholds of
`experiments/results/SAFETY.md`.

ε_risk = 0.9 lets the control-rate reflex fire only where Q_risk is close to certain, so it no
longer holds the robot in front of the central hazard; ν·(Q_risk(s, c(s, w)) − ε) at the waypoint
controller's first nominal action for the waypoint w (the LR baseline of Thananjeyan et al.'s
code, SQRL's constrained update in its paper form) makes the slow policy itself route its
waypoints round the hazard. `bresa_pointhazard.py` stays the config of Bresa's short learning
test: early in training this one violates more (the reflex lets more through while the critic
is young).
"""

from experiments.configs import bresa_pointhazard


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name (`sac_pointhazard.get_config`)."""
  config = bresa_pointhazard.get_config(layout)
  config.risk_epsilon = 0.9  # the reflex as a last resort
  config.task_risk_penalty = "fixed"
  config.task_risk_nu = 5.0  # ν
  return config
