"""Recovery RL on PointHazard with the switch as a last resort and a hinge penalty of the safety
critic on the task actor: the variant of `recovery_rl_pointhazard.py` that meets the safety
thresholds of `experiments/results/SAFETY.md` (a 10x cut of the violations in training and at
evaluation, 80% of SAC's return).

ε_risk = 0.9 lets π_rec take over only where Q_risk is close to certain, so the switch no longer
holds the robot in front of the central hazard; ν·max(Q_risk(s, a) − 0.6, 0) on the task actor's
reparameterised action (the hinge form of the LR baseline of Thananjeyan et al.'s code and of
SQRL's constrained update) pushes only the actions the critic rates above 0.6. The linear term
pushes everywhere and stops the robot where the task critic is flat in the action.
"""

from experiments.configs import recovery_rl_pointhazard


def get_config(layout: str = "default"):
  """`layout`: a `pointhazard_layouts.LAYOUTS` name (`sac_pointhazard.get_config`)."""
  config = recovery_rl_pointhazard.get_config(layout)
  config.risk_epsilon = 0.9  # the switch as a last resort
  config.task_risk_penalty = "fixed"  # ν stays the agent's default 1
  config.task_risk_form = "hinge"  # ν·max(Q_risk − ε_task, 0)
  config.task_risk_limit = 0.6  # ε_task
  return config
