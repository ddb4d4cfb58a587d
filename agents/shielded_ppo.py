"""Shielded PPO: PPO whose executed actions pass through a control-barrier-function shield.

**A configuration of `hrljax.agents.ppo_lagrangian`** (`shield="cbf"`, `multiplier="none"`; any
multiplier combines with the shield there), which holds the agent, the run and the shield
`ppo_lagrangian.point_hazard_shield`: for PointHazard's single integrator `p' = p + dt u`, one
linearised discrete-time CBF row per hazard, `2 dt (p - o_i).u + decay h_i(p) >= 0` with
`h_i = |p - o_i|^2 - (r_i + margin)^2` (`losses.safety.circle_cbf_constraint`; Ames et al.,
"Control Barrier Functions: Theory and Applications", arXiv:1903.11199), projected exactly
together with the action box (`losses.safety.polytope_project`). Without process noise the
executed actions keep the robot out of every hazard (tested).

The shield is part of the environment (option (a) of `docs/safety.md`, "How a loss treats
shielded actions"): the rollout stores the *proposed* action and its log-probability, so PPO's
ratio is always the policy's own, and the reward and cost are those of the executed action. The
executed action's log-probability can be near zero (its ratio would explode), and differentiating
through the projection suffers from action aliasing (arXiv:2509.12833), hence this choice; the
policy gets no gradient telling it why a proposal was replaced. The fraction of steps where the
projection changed the clipped proposal is logged as `intervention_rate`.
"""

import ml_collections

from hrljax.agents import ppo_lagrangian
from hrljax.agents.ppo_lagrangian import (
  PPOLagrangianAgent,
  make_learner,
  make_train,
  point_hazard_shield,
)
from hrljax.config_checks import ConfigError

SWEEPABLE = ppo_lagrangian.SWEEPABLE  # config.sweep

__all__ = [
  "get_config",
  "validate_config",
  "make_learner",
  "make_train",
  "PPOLagrangianAgent",
  "point_hazard_shield",
]


def get_config() -> ml_collections.ConfigDict:
  """`ppo_lagrangian`'s config with the CBF shield on and no multiplier."""
  config = ppo_lagrangian.get_config()
  config.agent = "shielded_ppo"
  config.shield = "cbf"
  config.multiplier = "none"
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """`ppo_lagrangian.validate_config`, and the shield must be on."""
  if config.shield == "none":
    raise ConfigError("config.shield: expected 'cbf' for shielded_ppo, got 'none'")
  ppo_lagrangian.validate_config(config, num_devices)
