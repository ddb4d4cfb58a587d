"""Safety: safety critics, Lagrange multipliers, action shields and recovery actions.

Pure functions of arrays, one concept per module (every public name is re-exported here, so
`from hrljax.losses import safety; safety.qrisk_loss(...)` works):

* `critics`: Recovery RL's twin-head Q_risk TD loss (also Bresa's reflex critic), SQRL's
  class-weighted soft-label cross-entropy and its Lagrangian pieces, the Conservative Safety
  Critic loss. Per-transition (the caller vmaps over the batch).
* `multipliers`: projected gradient ascent (plain or through an optax optimizer) and
  PID-Lagrangian multiplier updates, the augmented Lagrangian penalty, the PPO-Lag advantage,
  sum/diff normalisation and the SAC-Lag actor loss. Batch-level.
* `shields`: half-space (control-barrier-function) projection in closed form, polytope
  projection (exact active sets or Dykstra), the CBF shield of a single integrator among discs,
  the Dalal et al. safety layer and a priority-ordered hierarchical composition of shields.
  Per-example.
* `recovery`: the Recovery RL / Bresa threshold switch, and the search for the action nearest a
  nominal one that a safety critic accepts (critic-linearised projection or safe sampling), and a
  recovery policy's loss that follows the task critic among the safe actions.

Conventions: a constraint row `(a_i, b_i)` is satisfied when `a_i . u + b_i >= 0`; `discount_t`
is the cost discount times `(1 - terminated_t)` (a truncation keeps the discount).
"""

from hrljax.losses.safety.critics import (
  CSCExtras,
  QRiskExtras,
  SQRLExtras,
  csc_loss,
  qrisk_loss,
  qrisk_td_target,
  risk_value,
  sqrl_actor_penalty,
  sqrl_lambda_loss,
  sqrl_loss,
  sqrl_target,
)
from hrljax.losses.safety.multipliers import (
  AugmentedLagrangeState,
  LagrangeState,
  Normalisation,
  PIDLagrangeState,
  augmented_lagrangian_penalty,
  lagrange_init,
  lagrange_multiplier_loss,
  lagrange_update,
  lagrange_update_with_optimizer,
  lagrangian_combine,
  per_step_cost_budget,
  pid_lagrange_init,
  pid_lagrange_update,
  ppo_lag_advantage,
  sac_lag_actor_loss,
)
from hrljax.losses.safety.recovery import (
  RECOVERY_SEARCHES,
  critic_projection,
  nearest_safe_action,
  reflex_select,
  safe_sampling,
  sampling_offsets,
  task_recovery_loss,
)
from hrljax.losses.safety.shields import (
  MAX_EXACT_CONSTRAINTS,
  HierarchicalShieldInfo,
  ProjectionMethod,
  ShieldInfo,
  circle_cbf_constraint,
  circle_cbf_shield,
  dalal_safety_layer,
  halfspace_project,
  hierarchical_shield,
  polytope_project,
)

__all__ = [
  # critics
  "CSCExtras",
  "QRiskExtras",
  "SQRLExtras",
  "csc_loss",
  "qrisk_loss",
  "qrisk_td_target",
  "risk_value",
  "sqrl_actor_penalty",
  "sqrl_lambda_loss",
  "sqrl_loss",
  "sqrl_target",
  # multipliers
  "AugmentedLagrangeState",
  "LagrangeState",
  "Normalisation",
  "PIDLagrangeState",
  "augmented_lagrangian_penalty",
  "lagrange_init",
  "lagrange_multiplier_loss",
  "lagrange_update",
  "lagrange_update_with_optimizer",
  "lagrangian_combine",
  "per_step_cost_budget",
  "pid_lagrange_init",
  "pid_lagrange_update",
  "ppo_lag_advantage",
  "sac_lag_actor_loss",
  # recovery
  "RECOVERY_SEARCHES",
  "critic_projection",
  "nearest_safe_action",
  "reflex_select",
  "safe_sampling",
  "sampling_offsets",
  "task_recovery_loss",
  # shields
  "MAX_EXACT_CONSTRAINTS",
  "HierarchicalShieldInfo",
  "ProjectionMethod",
  "ShieldInfo",
  "circle_cbf_constraint",
  "circle_cbf_shield",
  "dalal_safety_layer",
  "halfspace_project",
  "hierarchical_shield",
  "polytope_project",
]
