"""Bresa: a slow task policy gated by a fast safety-critic reflex (two-rate reflexive safe RL).

Zhang, Solak, Ajoudani. "Bresa: Bio-inspired Reflexive Safe Reinforcement Learning for
Contact-Rich Robotic Tasks", arXiv:2503.21989 (abstract; project-page flowchart `method.jpg`).
Spec: `shared/specs/safety_critics.md` §1 (§1.2 critic and data, §1.3 the two-rate decision step);
the authors' code is unreleased, so the loss and data split follow their Recovery-RL fork
(`jack-sherman01/safe-RL`), as the spec infers.

What Bresa is here, composed from `hrljax.agents.recovery_rl` (which holds the shared machinery):
  * **Task policy at the slow rate**: SAC over decisions. Every K = `control_steps` control steps
    the task policy picks a command (a waypoint in PointHazard's arena), which a waypoint
    controller (`point_hazard.waypoint_controller`, the flowchart's trajectory controller) expands
    into K low-level actions. Each decision is one task transition
    `(s_k, a_k, R_k = Σ_j r_j, s_{k+1}, terminated, n)` bootstrapped with the SMDP discount γ^n
    (γ per control step; n = K unless the episode ended inside the decision).
  * **Reflex at the control rate**, inside the jitted two-rate rollout
    (`hrljax.rollout.two_rate_rollout`): at every control step the nominal action â is scored by
    Q_risk(ŝ, â) = max(Q1, Q2); if it exceeds ε_safe (strict) the recovery policy takes over, and
    with `reflex_mode="latch"` (default, the spec's option (a)) keeps control until the decision
    ends (option (b), below: the reflex ends the decision). By default the switch replaces the
    action by π_rec's; `recovery_action="critic_projection"` or "safe_sampling" executes instead
    the action nearest the nominal one that Q_risk accepts (`recovery_rl.nearest_safe_action`,
    after Dalal et al.'s safety layer, arXiv:1801.08757), falling back to π_rec's (measured on
    PointHazard: no gain, `experiments/results/SAFETY.md`). Because the latch makes the nominal
    actions up to the first reflex known in advance, the rollout scores a decision's K nominal
    control steps in one batched critic call and re-simulates from the first reflex
    (`rollout.Reflex`, `two_rate_rollout(lookahead=True)`: the same trajectory as a check at
    every control step, faster; `experiments/results/SAFETY.md`).
  * **Decoupled learning**: π_task is plain SAC on the task reward and never sees costs; Q_risk
    and π_rec learn from the cost signal on every executed control step (Recovery RL's TD loss,
    `losses.safety.qrisk_loss`, and its model-free recovery objective). The task buffer stores the
    proposed command (Recovery RL's action relabelling). Optionally (`task_risk_penalty`, default
    "off") the task actor also feels the critic: ν·(Q_risk(s, c(s, w)) − ε) is added to its loss,
    with c(s, w) the waypoint controller's first nominal action for the waypoint w at the
    decision's start state s, differentiated through the saturated P controller (its rescaling
    to unit norm keeps the gradient of the direction to the waypoint;
    `recovery_rl.task_risk_penalty_fn`; measured on PointHazard: no gain,
    `experiments/results/SAFETY.md`).
  * Q_risk's next action is the controller's nominal action at ŝ' under the same command
    (`risk_next_action="controller"`, the spec's SARSA-style choice for the control-rate stream);
    its discount is per control step, γ_risk,low = γ_risk^(1/K) with Recovery RL's γ_risk = 0.5.

With `reflex=False` Bresa is the unconstrained two-rate SAC agent; with K = 1 and the "direct"
controller it is exactly `hrljax.agents.sac` (same seed, same actions and returns).

Behaviour after a reflex (spec §1.3), `reflex_mode`:
  * "latch" (default, option (a)): π_rec finishes the decision; decisions last K control steps.
  * "end_decision" (option (b), the flowchart's arrow from the reflex back to the task level):
    the reflex ends the decision; π_rec executes that control step, and the task policy decides
    again at the next one; if its new command's first nominal action fires the reflex too, π_rec
    acts again (it holds control until the task proposes a command the reflex lets through, one
    control step at a time: the spec says the next decision comes from π_rec without fixing its
    length, and one control step hands control back as soon as the task policy has a safe
    proposal). Decisions are of variable length (`rollout.two_rate_rollout_end_decision`: one
    scan over control steps, the decisions written with a validity mask and stored with
    `replay.add_masked`), each bootstrapped with γ^n over its n control steps.
    `recovery_credit="reflex_state"` (the spec's wording) ends the decision at the state of the
    reflex (n = its nominal steps; a command rejected at its first control step is no
    decision); "recovery_step" lets the decision that was cut also hold π_rec's control step (the
    task's SMDP transition ends where the task decides again). A decision also ends at the end of
    each Learner step's rollout window (`num_steps` × K control steps). Measured on PointHazard
    (`experiments/results/SAFETY.md`, 30k control steps): neither credit helps with the detour
    round the central hazard; with "recovery_step" 1 of seeds 0-8 reaches the goal at ε = 0.3
    and 4 at ε = 0.5, against 4 and 7 with option (a).

Choices the paper leaves open (spec §1.2 "Unknown"), each a config field: ε_safe = 0.3 (the
spec's prototype; `experiments/configs/bresa_pointhazard.py` uses 0.5), K = 10, Q_risk sees
(ŝ, â) only (not the command), the reflex's option (a).
Not done: decisions do not end when the waypoint is reached (the flowchart's "action target
reached"), only at the end of K control steps, of the episode or (option (b)) at a reflex.
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
GAMMA_RISK_PER_DECISION = 0.5  # Recovery RL's default γ_risk, spread over the K control steps


def get_config() -> ml_collections.ConfigDict:
  """Bresa's hyperparameters: Recovery RL's, with the two-rate structure of spec §1.3."""
  config = recovery_rl.get_config()
  config.agent = "bresa"
  config.control_steps = CONTROL_STEPS
  config.controller = "waypoint"
  config.reflex_mode = "latch"
  config.risk_next_action = "controller"
  config.gamma_risk = GAMMA_RISK_PER_DECISION ** (1.0 / CONTROL_STEPS)
  config.eps_risk = 0.3
  config.learning_starts = 100 * CONTROL_STEPS  # 100 random decisions, counted in control steps
  return config
