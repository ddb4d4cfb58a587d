"""Bresa: a slow task policy gated by a fast safety-critic reflex (two-rate reflexive safe RL).

Zhang, Solak, Ajoudani, "Bresa: Bio-inspired Reflexive Safe Reinforcement Learning for
Contact-Rich Robotic Tasks", arXiv:2503.21989 (abstract and the project page's flowchart; the
authors' code is unreleased, so the critic's loss and data follow their Recovery RL fork).

**A configuration of `hrljax.agents.recovery_rl`**, which holds the agent, its update and the
run; this module sets Bresa's two-rate structure:

* the task policy (SAC over decisions) picks a waypoint in PointHazard's arena every K =
  `control_steps` control steps, and a saturated P controller
  (`point_hazard.waypoint_controller`, the flowchart's trajectory controller) tracks it; each
  decision is one task transition bootstrapped with the SMDP discount γ^n (n = K unless the
  episode ended inside the decision);
* the reflex runs at the control rate inside the jitted two-rate rollout: at every control step
  the nominal action is scored by Q_risk = max(Q1, Q2); above ε_risk (strict) the recovery policy
  takes over and, with `reflex_mode="latch"` (option (a)), keeps control until the decision ends
  (`reflex_mode="end_decision"`, option (b): the reflex ends the decision; `docs/safety.md`);
* learning is decoupled: π_task is SAC on the task reward; Q_risk (Recovery RL's TD loss on
  every executed control step, its next action the controller's nominal action under the same
  command) and π_rec learn from the cost signal; the task buffer stores the proposed command;
* Q_risk's discount is per control step, γ_risk^(1/K) with Recovery RL's γ_risk = 0.5 per
  decision.

With `reflex=False` Bresa is the unconstrained two-rate SAC agent; with K = 1 and the "direct"
controller it is exactly `hrljax.agents.sac`. Choices the paper leaves open, each a config
field: ε_risk (0.3 here, the value of a two-rate prototype; `bresa_pointhazard.py` uses 0.5),
K = 10, Q_risk sees (state, low-level action) only, option (a). Not done: a decision does not end
when its waypoint is reached (the flowchart's "action target reached").
"""

import ml_collections

from hrljax.agents import recovery_rl

# Shared with Recovery RL: the agent, its update and the run.
RecoveryAgent = recovery_rl.RecoveryAgent
RunnerState = recovery_rl.RunnerState
make_learner = recovery_rl.make_learner
make_train = recovery_rl.make_train
validate_config = recovery_rl.validate_config

CONTROL_STEPS = 10
RISK_GAMMA_PER_DECISION = 0.5  # Recovery RL's default γ_risk, spread over the K control steps


def get_config() -> ml_collections.ConfigDict:
  """Recovery RL's fields with Bresa's two-rate structure."""
  config = recovery_rl.get_config()
  config.agent = "bresa"
  config.control_steps = CONTROL_STEPS
  config.controller = "waypoint"
  config.reflex_mode = "latch"
  config.risk_next_action = "controller"  # SARSA on the control-rate stream
  config.risk_gamma = RISK_GAMMA_PER_DECISION ** (1.0 / CONTROL_STEPS)
  config.risk_epsilon = 0.3
  config.learning_starts = 100 * CONTROL_STEPS  # 100 random decisions, counted in control steps
  return config
