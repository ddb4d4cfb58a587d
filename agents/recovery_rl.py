"""Recovery RL: a SAC task policy, a learned safety critic Q_risk and a model-free recovery policy.

Thananjeyan, Balakrishna, Nair, Luo, Srinivasan, Hwang, Gonzalez, Ibarz, Finn, Goldberg.
"Recovery RL: Safe Reinforcement Learning with Learned Recovery Zones", arXiv:2010.15920
(Sec. IV; Algorithm 1). Spec: `shared/specs/safety_critics.md` §2, read against the reference
code (`recovery_rl/qrisk.py`, `sac.py`, `experiment.py` in the authors' code base).

* The task policy is plain SAC (`hrljax.agents.sac`) on the task reward only, with the fixed
  temperature α = 0.2 of the reference; it never sees costs.
* Q_risk(s, a) ∈ (0, 1) is a twin MLP with sigmoid outputs, its value the pessimistic
  max(Q1, Q2) (`losses.safety.risk_value`), trained with the Recovery-RL TD loss
  (`losses.safety.qrisk_loss`) on the executed transitions: target
  c + γ_risk·(1 − terminated)·max(Q̄1, Q̄2)(s', a'), a' ~ π_task(·|s') (the reference samples the
  task policy), with `terminal_on_violation` so that a violation never bootstraps.
* At act time the executed action is the recovery policy's when max(Q1, Q2)(s, a_task) > ε_risk
  (strict, `losses.safety.reflex_select`), else a_task.
* The recovery policy is the reference's model-free variant (`--MF_recovery`): a tanh-Gaussian
  policy trained, on the critic's batches, to minimise max(Q1, Q2)(s, π_rec(s)) with a
  reparameterised sample and no entropy term.
* Action relabelling (the reference's default): the task buffer stores the *proposed* task
  action, the risk buffer the *executed* one; `action_relabeling=False` stores the executed
  action in both (the reference's `--disable_action_relabeling`, K = 1 only).
* `intervention_penalty` (default 0, the reference) subtracts a fixed penalty from the task
  reward of each decision in which the safety layer intervened (spec §6.4 (d), intervention as
  a cost, with a fixed weight): an option of this code base, not of the paper.
* `task_risk_penalty` (default "off", the paper's Recovery RL, in which π_task never sees
  Q_risk) adds the safety critic's Lagrangian ν·(Q_risk(s, c(s, a)) − ε) to the task actor's
  loss at its reparameterised action a (the reference code's LR baseline, spec §2.6; SQRL's
  constrained update in its paper form, §3.3), with ν fixed or learned by SQRL's multiplier loss;
  c is the controller, so for Bresa Q_risk scores the nominal control action of the waypoint at
  the decision's start state and the gradient passes through the waypoint tracker
  (`task_risk_penalty_fn`). Off until the critic has been pre-trained.

Run structure: the Learner step is a two-rate rollout (`hrljax.rollout.two_rate_rollout`) with a
controller and a per-control-step reflex; Recovery RL is the case K = 1 (one control step per
decision, the "direct" controller: the task action is executed as it is). `hrljax.agents.bresa`
uses the same machinery with K > 1 (task policy at the slow rate, reflex at the control rate).
`reflex_mode="end_decision"` (spec §1.3 option (b), described in `hrljax.agents.bresa`) runs
`rollout.two_rate_rollout_end_decision` instead: the reflex ends the task decision, and the task
buffer receives the variable number of decisions that ended (`replay.add_masked`). With the reflex
disabled (`config.reflex = False`), K = 1 and the direct controller, a run is exactly
`hrljax.agents.sac` with the same seed (same keys, same actions, same updates).

Deviations from the reference (each a config field):
  * no offline demonstrations: Q_risk and π_rec are pre-trained (`risk_pretrain_updates`) on the
    risk buffer filled by the uniform exploration of the first `learning_starts` steps, and the
    reflex is off during that exploration (an untrained sigmoid critic reads about 0.5 everywhere
    and would fire on every step); `random_steps` continues the uniform task actions behind the
    reflex after that (the reference's random start actions pass through its switch);
  * environments may continue after a violation (PointHazard's default); `terminal_on_violation`
    keeps Q_risk a probability (spec §2.2);
  * no stratified `pos_fraction` sampling (the reference's default is off too), no model-based
    recovery, and no Q-sampling recovery in the paper's form (the safest sampled action); instead
    `recovery_action` (default "policy": π_rec's action, the paper's model-free recovery) may
    execute the action nearest the task's that Q_risk accepts (`nearest_safe_action`: Dalal
    projections on the critic, or the nearest accepted sampled action), π_rec's as fallback;
  * the recovery policy acts with a sample while training and with its mode when evaluating (as
    the reference's `select_action(eval=...)`);
  * `recovery_objective="task"` (not the default; `recovery_rl_pointhazard.py` uses it) trains
    π_rec to maximise the task critic among the actions Q_risk rates safe
    (`recovery_task_loss`) instead of minimising Q_risk alone.
"""

import math
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct
from ml_collections import config_dict

from hrljax import config_checks as checks
from hrljax import envs, replay, rollout
from hrljax.agents import sac
from hrljax.rollout import rollout_statistics
from hrljax.envs import point_hazard
from hrljax.losses import safety
from hrljax.networks.continuous import QEnsemble, TanhGaussianActor
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree

CONTROLLERS = ("direct", "waypoint")
REFLEX_MODES = ("per_step", "latch", "end_decision")
RISK_NEXT_ACTIONS = ("task", "controller")
RECOVERY_OBJECTIVES = ("risk", "task")
RECOVERY_ACTIONS = ("policy", "critic_projection", "safe_sampling")
SAFETY_INFO_KEYS = ("cost", "violation")
TASK_RISK_PENALTIES = ("off", "fixed", "learned")
TASK_RISK_FORMS = ("linear", "hinge")


def get_config() -> ml_collections.ConfigDict:
  """Recovery RL's hyperparameters: SAC's (α = 0.2 fixed) plus the safety critic's (spec §2.5)."""
  config = sac.get_config()
  config.agent = "recovery_rl"
  config.env_name = "PointHazard-v0"
  config.autotune_alpha = False  # the reference's task SAC keeps α = 0.2
  config.init_alpha = 0.2
  config.learning_starts = 100  # the reference's start_steps of uniform random task actions
  # Uniform random task actions until this many control steps (counted from the start; no effect
  # below learning_starts). Unlike the first learning_starts steps, these pass through the reflex
  # and are learned from: the reference's start_steps of random actions behind the pre-trained
  # safety critic (spec safety_critics.md §2.3).
  config.random_steps = 0
  # The safety critic and the recovery policy.
  config.reflex = True  # False: no safety layer at all (plain SAC on the same data stream)
  config.gamma_risk = 0.5  # per control step
  config.eps_risk = 0.1  # intervene when max(Q1, Q2)(s, a) > eps_risk
  config.tau_risk = 2e-4  # the reference's (slow) Polyak rate for the risk target
  config.risk_learning_rate = 3e-4
  config.recovery_learning_rate = 3e-4
  config.risk_hidden_sizes = (256, 256)
  config.risk_batch_size = 256
  config.risk_buffer_size = 1_000_000
  config.risk_updates_per_step = 1
  config.risk_pretrain_updates = 10_000  # the reference's critic_safe_pretraining_steps
  config.terminal_on_violation = True
  config.risk_next_action = "task"  # a' ~ π_task(s') (reference) or "controller" (Bresa SARSA)
  # The two-rate structure (Recovery RL: one control step per decision, task action executed).
  config.control_steps = 1  # K
  config.controller = "direct"
  config.waypoint_gain = 10.0
  config.reflex_mode = "per_step"  # or "latch": after a reflex, recover until the decision ends
  # (spec safety_critics.md §1.3 option (a)); or "end_decision": the reflex ends the decision and
  # π_rec acts until the task policy proposes a command the reflex lets through (option (b),
  # `rollout.two_rate_rollout_end_decision`).
  # With "end_decision", what a decision the reflex ended contains: "reflex_state" (it ends at
  # the state where the reflex fired) or "recovery_step" (it also holds π_rec's control step).
  config.recovery_credit = "reflex_state"
  # π_rec's objective: "risk" (the reference's model-free recovery: minimise Q_risk) or "task"
  # (maximise the task critic subject to Q_risk <= recovery_risk_target, penalty form).
  config.recovery_objective = "risk"  # the reference; recovery_rl_pointhazard.py uses "task"
  config.recovery_risk_weight = 100.0
  config.recovery_risk_target = 0.1
  # The action executed where the reflex intervenes: "policy" (π_rec's, the paper), or the action
  # nearest the nominal one that Q_risk accepts (`nearest_safe_action`), found by a few
  # critic-linearised Dalal projections ("critic_projection") or among a fixed set of sampled
  # actions ("safe_sampling"); both fall back to π_rec's action where they find none.
  config.recovery_action = "policy"
  config.recovery_margin = 0.05  # the search aims at Q_risk <= eps_risk - margin
  config.projection_steps = 5  # "critic_projection": Dalal steps from the nominal action
  config.recovery_samples = 64  # "safe_sampling": candidate actions (half near the nominal one)
  # What the task buffer stores as the decision's action: the proposed task action (True, the
  # reference's action relabelling) or the executed one (False: the reference's
  # `--disable_action_relabeling`; only where the executed action is a task action, K = 1 and the
  # direct controller).
  config.action_relabeling = True
  # Subtracted from the task reward of every decision in which the safety layer intervened (in
  # the task buffer only; returns and evaluation keep the environment's reward). Spec
  # safety_critics.md §6.4 (d), "treat intervention as a cost", with a fixed weight instead of a
  # Lagrange multiplier: π_task learns that a proposal the reflex overrides is worse than one it
  # lets through. 0 (the reference: π_task never sees the intervention).
  config.intervention_penalty = 0.0
  # The safety critic's Lagrangian on the task actor (spec safety_critics.md §2.6 "LR", §3.3 SQRL
  # paper form): "off" (the reference Recovery RL: π_task never sees Q_risk), "fixed" or
  # "learned" adds ν·(Q_risk(s, c(s, π_task(s))) − ε_task) to the task actor loss, the gradient
  # flowing through the reparameterised task action and the controller c (the task action itself
  # for Recovery RL's "direct" controller; the nominal control action for the waypoint at the
  # decision's start state for Bresa's). "learned": log ν descends SQRL's multiplier loss
  # (`losses.safety.sqrl_lambda_loss`), so ν rises while the batch's geometric mean of the risk
  # exceeds ε_task.
  config.task_risk_penalty = "off"
  # "linear": ν·(Q_risk − ε_task), the LR/SQRL Lagrangian term (pushes the risk down everywhere);
  # "hinge": ν·max(Q_risk − ε_task, 0), the exact-penalty form of the per-state constraint
  # Q_risk(s, π(s)) <= ε_task (only actions above ε_task are pushed; as `recovery_task_loss`).
  config.task_risk_form = "linear"
  config.task_risk_nu = 1.0  # ν, or its initial value when learned (the reference: 5000 for nav)
  config.task_risk_limit = config_dict.placeholder(float)  # ε_task; None: eps_risk
  # Adam's learning rate for log ν; None: 0.1 × actor_learning_rate (the reference's LR).
  config.task_risk_nu_learning_rate = config_dict.placeholder(float)
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  sac.validate_config(config, num_devices)
  checks.positive_int(config, "risk_batch_size", "risk_buffer_size", "control_steps")
  for field in ("risk_updates_per_step", "risk_pretrain_updates", "random_steps"):
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      raise checks.ConfigError(f"config.{field}: expected an integer >= 0, got {value!r}")
  checks.positive(config, "risk_learning_rate", "recovery_learning_rate", "waypoint_gain")
  checks.in_unit_interval(config, "gamma_risk", "tau_risk")
  if not (isinstance(config.eps_risk, (int, float)) and 0.0 <= config.eps_risk <= 1.0):
    raise checks.ConfigError(f"config.eps_risk: expected a float in [0, 1], got {config.eps_risk!r}")
  for field in ("reflex", "terminal_on_violation", "action_relabeling"):
    if not isinstance(config[field], bool):
      raise checks.ConfigError(f"config.{field}: expected a bool, got {config[field]!r}")
  checks.one_of(config, "controller", CONTROLLERS)
  checks.one_of(config, "reflex_mode", REFLEX_MODES)
  checks.one_of(config, "recovery_credit", rollout.RECOVERY_CREDITS)
  if config.reflex_mode == "end_decision" and not config.action_relabeling:
    raise checks.ConfigError(
        "config.action_relabeling: False needs reflex_mode 'per_step' or 'latch' (with "
        "'end_decision' a task decision executes only its own nominal actions), got "
        f"reflex_mode={config.reflex_mode!r}")
  checks.one_of(config, "risk_next_action", RISK_NEXT_ACTIONS)
  checks.one_of(config, "recovery_objective", RECOVERY_OBJECTIVES)
  checks.one_of(config, "recovery_action", RECOVERY_ACTIONS)
  checks.positive_int(config, "projection_steps", "recovery_samples")
  # The search aims at Q_risk <= eps_risk − margin, which must leave some actions.
  if config.recovery_action != "policy" and not (
      isinstance(config.recovery_margin, (int, float))
      and 0.0 <= config.recovery_margin < config.eps_risk):
    raise checks.ConfigError(f"config.recovery_margin: expected a float in [0, eps_risk = "
                             f"{config.eps_risk!r}), got {config.recovery_margin!r}")
  if not config.action_relabeling and (config.control_steps != 1 or config.controller != "direct"):
    raise checks.ConfigError(
        "config.action_relabeling: False stores the executed low-level action as the task "
        "action, which needs control_steps=1 and controller='direct', got control_steps="
        f"{config.control_steps!r}, controller={config.controller!r}")
  checks.positive(config, "recovery_risk_weight")
  checks.non_negative(config, "intervention_penalty")
  checks.in_unit_interval(config, "recovery_risk_target")
  validate_task_risk_penalty(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  if not isinstance(env, point_hazard.PointHazard):
    raise checks.ConfigError(f"config.env_name: expected an environment with info['cost'] and "
                             f"info['violation'] (PointHazard-v0), got {config.env_name!r}")
  if config.controller == "waypoint" and env_params.observation_type != "relative":
    raise checks.ConfigError("config.controller: 'waypoint' reads the position from a "
                             "'relative' PointHazard observation, got observation_type "
                             f"{env_params.observation_type!r}")


def validate_task_risk_penalty(config: ml_collections.ConfigDict) -> None:
  """The `task_risk_*` fields (the safety critic's Lagrangian on the task actor)."""
  checks.one_of(config, "task_risk_penalty", TASK_RISK_PENALTIES)
  checks.one_of(config, "task_risk_form", TASK_RISK_FORMS)
  checks.positive(config, "task_risk_nu")
  limit = config.task_risk_limit
  if limit is not None and not (isinstance(limit, (int, float)) and 0.0 < limit < 1.0):
    raise checks.ConfigError(
        f"config.task_risk_limit: expected None (eps_risk) or a float in (0, 1), got {limit!r}")
  if limit is None and config.task_risk_penalty != "off" and not 0.0 < config.eps_risk < 1.0:
    raise checks.ConfigError(
        "config.task_risk_limit: None takes eps_risk, which the penalty needs in (0, 1), got "
        f"eps_risk={config.eps_risk!r}; set task_risk_limit")
  if config.task_risk_nu_learning_rate is not None:  # None: 0.1 × actor_learning_rate
    checks.positive(config, "task_risk_nu_learning_rate")


def task_risk_limit(config) -> float:
  """ε_task of the task actor's risk constraint: `task_risk_limit`, or the switch's `eps_risk`."""
  return float(config.eps_risk if config.task_risk_limit is None else config.task_risk_limit)


# ----------------------------------------------------------------------------------------------
# The agent: SAC task agent + twin sigmoid risk critic + model-free recovery policy.
# ----------------------------------------------------------------------------------------------


class RiskTransition(NamedTuple):
  """One executed control step (or a `[B]` batch), what the risk buffer stores."""

  obs: PyTree
  action: Array  # float32 [|A|]: the executed low-level action (environment scale)
  cost: Array  # float32 []
  terminated: Array  # bool []
  next_obs: PyTree  # true successor
  next_action: Array  # float32 [|A|]: the controller's nominal action at next_obs


class DecisionTransition(NamedTuple):
  """One task decision (or a `[B]` batch), what the task buffer stores."""

  obs: PyTree
  action: Array  # float32 [|A|]: the proposed task action in [-1, 1] (relabelled)
  reward: Array  # float32 []: summed over the decision's control steps
  terminated: Array  # bool []
  next_obs: PyTree
  num_substeps: Array  # int32 []: control steps executed (SMDP discount gamma ** num_substeps)


def smdp_sac_batch(batch: DecisionTransition, gamma: float) -> sac.Transition:
  """The SAC batch whose discount γ·(1 − terminated) equals the SMDP discount γ^n·(1 − terminated).

  `SACAgent.update` discounts with γ·(1 − terminated); passing the float
  `terminated' = 1 − γ^(n−1)·(1 − terminated)` makes that γ^n·(1 − terminated) for a decision of
  n control steps (Sutton, Precup, Singh 1999, SMDP Q-learning). For n = 1 it is `terminated`
  exactly. Batch-level, leaves `[B, ...]`.
  """
  continuation = (jnp.power(gamma, batch.num_substeps.astype(jnp.float32) - 1.0)
                  * (1.0 - batch.terminated.astype(jnp.float32)))
  return sac.Transition(obs=batch.obs, action=batch.action, reward=batch.reward,
                        terminated=1.0 - continuation, next_obs=batch.next_obs)


class RecoveryAgent(struct.PyTreeNode):
  """Train state: the SAC task agent, the risk critic (+ target), the recovery policy."""

  task: sac.SACAgent
  risk_params: PyTree
  target_risk_params: PyTree
  recovery_params: PyTree
  risk_opt_state: PyTree
  recovery_opt_state: PyTree
  log_nu: Array  # float32 scalar: log ν of the task actor's risk Lagrangian (`task_risk_penalty`)
  nu_opt_state: PyTree
  risk_critic: nn.Module = struct.field(pytree_node=False)
  recovery_actor: nn.Module = struct.field(pytree_node=False)
  risk_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  recovery_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  nu_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env_spec: envs.EnvSpec, config, action_bounds=None
             ) -> "RecoveryAgent":
    """`key` builds the SAC task agent exactly as `SACAgent.create(key, ...)` would; the safety
    networks are initialised from `fold_in(key, 1)`."""
    config = ml_collections.FrozenConfigDict(config)
    task = sac.SACAgent.create(key, env_spec, config, action_bounds)
    risk_critic, recovery_actor = make_safety_networks(env_spec, config)
    risk_key, recovery_key = jax.random.split(jax.random.fold_in(key, 1))
    obs = jnp.zeros((1,) + env_spec.observation_shape, jnp.float32)
    risk_params = risk_critic.init(risk_key, obs, jnp.zeros((1, env_spec.action_dim)))
    recovery_params = recovery_actor.init(recovery_key, obs)
    risk_tx = sac.make_optimizer(config, config.risk_learning_rate)
    recovery_tx = sac.make_optimizer(config, config.recovery_learning_rate)
    nu_rate = (0.1 * config.actor_learning_rate if config.task_risk_nu_learning_rate is None
               else config.task_risk_nu_learning_rate)
    nu_tx = sac.make_optimizer(config, nu_rate)
    log_nu = jnp.asarray(math.log(config.task_risk_nu), jnp.float32)
    return cls(task=task, risk_params=risk_params, target_risk_params=risk_params,
               recovery_params=recovery_params, risk_opt_state=risk_tx.init(risk_params),
               recovery_opt_state=recovery_tx.init(recovery_params), log_nu=log_nu,
               nu_opt_state=nu_tx.init(log_nu), risk_critic=risk_critic,
               recovery_actor=recovery_actor, risk_tx=risk_tx, recovery_tx=recovery_tx,
               nu_tx=nu_tx, config=config)

  def risk_heads(self, params: PyTree, obs: PyTree, action: Array) -> Array:
    """Both heads, sigmoid(Q_k(s, a)) ∈ (0, 1), float `[2, B]`."""
    return jax.nn.sigmoid(self.risk_critic.apply(params, obs, action))

  def risk(self, obs: PyTree, action: Array) -> Array:
    """The pessimistic risk max(Q1, Q2)(s, a), float `[B]`."""
    q = self.risk_heads(self.risk_params, obs, action)
    return safety.risk_value(q[0], q[1])

  def risk_score(self, obs: PyTree, action: Array) -> Array:
    """The pessimistic risk before its sigmoid, max of the two heads' logits `[B]`: `risk` is
    sigmoid(risk_score) (the sigmoid is monotone), and linearising the score in the action
    does not saturate where the risk is near 0 or 1 (`critic_projection`)."""
    q = self.risk_critic.apply(self.risk_params, obs, action)
    return safety.risk_value(q[0], q[1])

  def task_risk_score(self, obs: PyTree, command: Array) -> Array:
    """`risk_score` of the task command `[B, |A|]` (in [-1, 1]) at `obs`: the critic's logit at
    the controller's nominal control action for it (`make_controller`: the rescaled task action
    for "direct", the waypoint tracker's first action from `obs` for "waypoint"), `[B]`.
    Differentiable in `command` through the controller (the saturated P controller's rescaling
    to unit norm keeps the gradient of the direction to the waypoint)."""
    controller = make_controller(self.config, self.task.action_low, self.task.action_high)
    return self.risk_score(obs, controller(obs, command))

  def update_task_risk_multiplier(self, obs: PyTree, key: Array, enabled: Array
                                  ) -> tuple["RecoveryAgent", dict[str, Array]]:
    """Scores fresh reparameterised task actions at the `[B]` batch's observations with Q_risk
    and, with `task_risk_penalty="learned"` and the traced bool `enabled`, takes one optimizer
    step of log ν on the batch mean of SQRL's multiplier loss
    (`losses.safety.sqrl_lambda_loss`, Srinivasan et al. 2020, arXiv:2010.14603, Sec. 4: log ν
    rises while the batch's geometric mean of Q_risk exceeds ε_task, falls otherwise). The
    fresh samples of the updated actor follow SAC's temperature step (`sac.SACAgent.update`)."""
    config = self.config
    limit = task_risk_limit(config)
    command = self.task.actor.apply(self.task.actor_params, obs).sample(seed=key)
    logit = self.task_risk_score(obs, command)
    metrics = {"task_risk": jnp.mean(jax.nn.sigmoid(logit)), "task_risk_nu": jnp.exp(self.log_nu)}
    if config.task_risk_penalty != "learned":
      return self, metrics

    def objective(log_nu):
      return jnp.mean(jax.vmap(lambda l: safety.sqrl_lambda_loss(log_nu, l, target_safety=limit))(
          logit))
    grad = jax.grad(objective)(self.log_nu)
    updates, nu_opt_state = self.nu_tx.update(grad, self.nu_opt_state, self.log_nu)
    log_nu = optax.apply_updates(self.log_nu, updates)
    keep = lambda new, old: jnp.where(enabled, new, old)
    return self.replace(log_nu=keep(log_nu, self.log_nu),
                        nu_opt_state=jax.tree.map(keep, nu_opt_state, self.nu_opt_state)), metrics

  def recovery_action(self, obs: PyTree, key: Array, deterministic: bool = False) -> Array:
    """π_rec's environment action `[B, |A|]` (its mode if `deterministic`)."""
    dist = self.recovery_actor.apply(self.recovery_params, obs)
    normalized = dist.mode() if deterministic else dist.sample(seed=key)
    return self.task.to_env_action(normalized)

  def recovery_action_from_noise(self, obs: PyTree, noise: Array, deterministic: bool = False
                                 ) -> Array:
    """π_rec's environment action `[B, |A|]` from given standard-normal `noise` `[B, |A|]`
    (the reparameterised sample tanh(μ + σ·noise), or the mode if `deterministic`)."""
    dist = self.recovery_actor.apply(self.recovery_params, obs)
    gaussian = dist.distribution
    pre_squash = gaussian.loc if deterministic else gaussian.loc + gaussian.scale_diag * noise
    return self.task.to_env_action(dist.bijector.forward(pre_squash))

  def act(self, obs: PyTree, key: Array, deterministic: bool = False
          ) -> tuple[Array, Array, Array]:
    """Recovery RL's action for one control step: `(executed, proposed, intervened)`, `[B, ...]`.

    `proposed` is the task policy's action; `executed` is π_rec's where the risk of `proposed`
    exceeds `eps_risk` (strict), else `proposed`.
    """
    task_key, recovery_key = jax.random.split(key)
    proposed = self.task.act(obs, task_key, deterministic)
    recovery = self.recovery_action(obs, recovery_key, deterministic)
    executed, intervened = self.switch(obs, proposed, recovery)
    return executed, proposed, intervened

  def switch(self, obs: PyTree, proposed: Array, recovery: Array) -> tuple[Array, Array]:
    """The threshold switch on a batch: `(executed [B, |A|], intervened [B])` (spec §2.3)."""
    select = jax.vmap(lambda r, a, b: safety.reflex_select(r, a, b,
                                                           threshold=self.config.eps_risk))
    return select(self.risk(obs, proposed), proposed, recovery)

  def update_safety(self, batch: RiskTransition, key: Array) -> tuple["RecoveryAgent", dict]:
    """One step of Q_risk (TD loss, spec §2.2), then one of π_rec on the updated critic, then the
    Polyak step of the risk target (τ_risk, every step as the reference). `[B]` batch."""
    config = self.config
    if config.risk_next_action == "task":
      next_action = self.task.act(batch.next_obs, key)
    else:
      next_action = batch.next_action
    q_next = self.risk_heads(self.target_risk_params, batch.next_obs, next_action)
    discount = config.gamma_risk * (1.0 - batch.terminated.astype(jnp.float32))
    cost = batch.cost.astype(jnp.float32)

    def risk_objective(params):
      q = self.risk_heads(params, batch.obs, batch.action)
      loss, extras = jax.vmap(lambda *a: safety.qrisk_loss(
          *a, terminal_on_violation=config.terminal_on_violation))(
              q[0], q[1], cost, discount, q_next[0], q_next[1])
      return jnp.mean(loss), extras
    (risk_loss, extras), grads = jax.value_and_grad(risk_objective, has_aux=True)(
        self.risk_params)
    updates, risk_opt_state = self.risk_tx.update(grads, self.risk_opt_state, self.risk_params)
    risk_params = optax.apply_updates(self.risk_params, updates)

    def recovery_objective(params):
      normalized = self.recovery_actor.apply(params, batch.obs).sample(
          seed=jax.random.fold_in(key, 1))
      q = self.risk_heads(risk_params, batch.obs, self.task.to_env_action(normalized))
      risk = safety.risk_value(q[0], q[1])
      if config.recovery_objective == "risk":
        return jnp.mean(risk)
      return jnp.mean(recovery_task_loss(self.task, batch.obs, normalized, risk, config))
    recovery_loss, grads = jax.value_and_grad(recovery_objective)(self.recovery_params)
    updates, recovery_opt_state = self.recovery_tx.update(grads, self.recovery_opt_state,
                                                          self.recovery_params)
    recovery_params = optax.apply_updates(self.recovery_params, updates)
    target = optax.incremental_update(risk_params, self.target_risk_params, config.tau_risk)
    agent = self.replace(risk_params=risk_params, target_risk_params=target,
                         recovery_params=recovery_params, risk_opt_state=risk_opt_state,
                         recovery_opt_state=recovery_opt_state)
    return agent, {"risk_loss": risk_loss, "recovery_loss": recovery_loss,
                   "risk": jnp.mean(extras.risk_tm1)}


def task_risk_penalty_fn(agent: RecoveryAgent, enabled: Array) -> sac.ActorPenaltyFn:
  """The task actor's risk Lagrangian as `SACAgent.update`'s `actor_penalty_fn`: per example
  ν·(Q_risk(s, c(s, a)) − ε_task) at the reparameterised task action a
  (`losses.safety.sqrl_actor_penalty` on `RecoveryAgent.task_risk_score`), times the traced bool
  `enabled` (off until the critic has been pre-trained).

  Thananjeyan et al. 2021 (arXiv:2010.15920), the LR baseline of their code (spec
  `safety_critics.md` §2.6: `α·log π + ν·(max Q_risk(s, π(s)) − ε) − min Q(s, π(s))`), and SQRL's
  Lagrangian fine-tuning in its paper form, without the reference code's stop-gradient (§3.3):
  the gradient reaches the actor through the action (and, for Bresa, through the waypoint
  controller), pushing the task policy's command towards lower Q_risk. With
  `task_risk_form="hinge"` the term is ν·max(Q_risk − ε_task, 0), which pushes only the commands
  whose risk exceeds ε_task (a deviation from LR's linear term). ν and the critic receive no
  gradient here.
  """
  limit = task_risk_limit(agent.config)
  penalty = jax.vmap(lambda logit: safety.sqrl_actor_penalty(agent.log_nu, logit,
                                                             target_safety=limit))
  if agent.config.task_risk_form == "hinge":
    linear = penalty
    penalty = lambda logit: jnp.maximum(linear(logit), 0.0)  # ν > 0: ν·max(Q_risk − ε, 0)
  scale = enabled.astype(jnp.float32)
  return lambda obs, action: scale * penalty(agent.task_risk_score(obs, action))


def recovery_task_loss(task: sac.SACAgent, obs: PyTree, normalized: Array, risk: Array,
                       config) -> Array:
  """`recovery_objective="task"`: the best task action among the safe ones, per example `[B]`.

  −min(Q1, Q2)_task(s, a) + λ·(max(Q1, Q2)_risk(s, a) − ε_rec)_+ with λ = `recovery_risk_weight`
  and ε_rec = `recovery_risk_target`: a penalty form of max_a Q_task(s, a) s.t. Q_risk(s, a) ≤
  ε_rec. Recovery RL's model-free recovery (arXiv:2010.15920, Sec. IV-B) minimises Q_risk alone,
  which on PointHazard pushes the robot back from the hazard edge and the task policy, which
  proposes the straight path again, stalls there (return 0.7-0.9 against SAC's 2.9); a recovery
  policy that keeps to the safe actions while following the task critic slides along the edge.
  This is a deviation from the paper (the reference has no such objective); the task critic is
  the one being trained (no gradient reaches it from here: only π_rec's parameters are updated).
  """
  q_task = task.critic.apply(task.critic_params, obs, normalized)
  excess = jnp.maximum(risk - config.recovery_risk_target, 0.0)
  return -jnp.min(q_task, axis=0) + config.recovery_risk_weight * excess


def make_safety_networks(env_spec: envs.EnvSpec, config) -> tuple[QEnsemble, TanhGaussianActor]:
  """Q_risk as two independent MLP heads on concat(s, a) (sigmoid applied by the agent) and π_rec,
  a tanh-Gaussian policy on [-1, 1]^|A|."""
  observation_ndim = len(env_spec.observation_shape)
  hidden = tuple(config.risk_hidden_sizes)
  return (QEnsemble(num_members=2, hidden_sizes=hidden, activation=config.activation,
                    observation_ndim=observation_ndim),
          TanhGaussianActor(action_dim=env_spec.action_dim, hidden_sizes=hidden,
                            activation=config.activation, observation_ndim=observation_ndim,
                            log_std_min=config.log_std_min, log_std_max=config.log_std_max))


def recovery_noise_fn(num_envs: int, action_dim: int):
  """`safety_noise_fn(key, (T, K)) -> noise [T, K, N, |A|]` for `rollout.two_rate_rollout`."""
  def draw(key, leading):
    return jax.random.normal(key, tuple(leading) + (num_envs, action_dim), jnp.float32)
  return draw


def make_controller(config, low: tuple, high: tuple):
  """`controller(obs [N, D], command [N, |A|]) -> low-level action [N, |A|]`.

  "direct": the command (in [-1, 1]) rescaled to the action bounds, exactly as SAC acts;
  "waypoint": the command is a waypoint in PointHazard's arena [-1, 1]^2, tracked by
  `point_hazard.waypoint_controller` from the position (the first two observation entries).
  """
  if config.controller == "direct":
    return lambda obs, command: sac.rescale_action(command, low, high)
  track = jax.vmap(lambda p, w: point_hazard.waypoint_controller(p, w, config.waypoint_gain))
  return lambda obs, command: track(obs[:, :2], command)


def critic_projection(score_fn, obs: PyTree, nominal: Array, limit: float, low: tuple,
                      high: tuple, num_steps: int) -> Array:
  """`num_steps` Dalal projections of `nominal` `[B, |A|]` onto score(s, a) <= `limit`, each on
  the score linearised at the current action, clipped to the action bounds `[low, high]`.

  Dalal, Dvijotham, Vecerik, Hester, Paduraru, Tassa, "Safe Exploration in Continuous Action
  Spaces", arXiv:1801.08757, Sec. 4: with the linear model score(s, a') ≈ c + g·a'
  (g = ∇_a score(s, a), c = score(s, a) − g·a) the closest action under the limit is
  a − [(score(s, a) − limit)/|g|²]_+ g (`losses.safety.dalal_safety_layer`). The score is the
  critic's logit (`RecoveryAgent.risk_score`), not its sigmoid: linearised, a sigmoid near 0 or 1
  has a vanishing gradient and the step overshoots to the box's boundary. An MLP's score is not
  linear in a either, so repeating the step from the new action is a Newton iteration towards
  {score = limit}; an action already under the limit stays. `score_fn(obs [B], action [B, |A|])
  -> [B]` must be row-wise (row b depends on row b only), so that the gradient of its sum is each
  row's own ∇_a score.
  """
  low_array, high_array = _bound_arrays(low, high, nominal.ndim)
  limits = jnp.full((1,), limit, jnp.float32)
  project = jax.vmap(lambda a, g, c: safety.dalal_safety_layer(a, g[None], c[None], limits)[0])

  def one_step(action, _):
    score, pullback = jax.vjp(lambda a: score_fn(obs, a), action)
    grad = pullback(jnp.ones_like(score))[0]
    offset = score - jnp.sum(grad * action, axis=-1)
    return jnp.clip(project(action, grad, offset), low_array, high_array), None

  action, _ = jax.lax.scan(one_step, nominal, None, length=num_steps)
  return action


def _bound_arrays(low: tuple, high: tuple, ndim: int) -> tuple[Array, Array]:
  """The action bounds as float32 arrays of rank `ndim` (trailing axis |A|), for broadcasting."""
  shape = (1,) * (ndim - 1) + (len(low),)
  return (jnp.asarray(low, jnp.float32).reshape(shape),
          jnp.asarray(high, jnp.float32).reshape(shape))


def sampling_offsets(num_samples: int, low: tuple, high: tuple) -> tuple[Array, Array]:
  """The fixed candidate set of "safe_sampling": `(offsets, points)`, each `[num_samples // 2 or
  the rest, |A|]`; offsets from the nominal action (Gaussian, σ a quarter of the action range,
  so that most candidates are near it) and points uniform in the action box (so that a safe
  action far from it can be found). Drawn once from a fixed key: the candidates are constants of
  the compiled rollout, and no randomness is taken from the rollout's keys."""
  low_array, high_array = _bound_arrays(low, high, 2)
  near_key, box_key = jax.random.split(jax.random.key(0))
  num_near = num_samples // 2
  offsets = 0.25 * (high_array - low_array) * jax.random.normal(near_key,
                                                                (num_near, len(low)))
  points = jax.random.uniform(box_key, (num_samples - num_near, len(low)), minval=low_array,
                              maxval=high_array)
  return offsets, points


def safe_sampling(score_fn, obs: PyTree, nominal: Array, limit: float, low: tuple, high: tuple,
                  num_samples: int) -> Array:
  """The candidate action nearest `nominal` `[B, |A|]` (Euclidean) among those whose risk score
  is at most `limit`: Recovery RL's Q-sampling recovery (Thananjeyan et al. 2021, arXiv:2010.15920,
  Sec. IV-B samples actions and keeps the safest) restricted to the safe set and ranked by the
  distance to the nominal action instead. Candidates: `sampling_offsets` around the nominal
  action and over the box, clipped to `[low, high]`. Where no candidate is under the limit the
  nominal action is returned (the caller's final check then falls back)."""
  offsets, points = sampling_offsets(num_samples, low, high)
  batch, action_dim = nominal.shape
  low_array, high_array = _bound_arrays(low, high, 3)
  near = jnp.clip(nominal[:, None, :] + offsets[None], low_array, high_array)
  candidates = jnp.concatenate([near, jnp.broadcast_to(points[None], (batch,) + points.shape)],
                               axis=1)  # [B, M, |A|]
  repeated = jax.tree.map(lambda x: jnp.repeat(x, num_samples, axis=0), obs)
  score = score_fn(repeated, candidates.reshape(batch * num_samples, action_dim)).reshape(
      batch, num_samples)
  distance = jnp.where(score <= limit, jnp.sum(jnp.square(candidates - nominal[:, None, :]), -1),
                       jnp.inf)
  best = jnp.take_along_axis(candidates, jnp.argmin(distance, axis=1)[:, None, None], 1)[:, 0]
  return jnp.where(jnp.isfinite(distance).any(axis=1)[:, None], best, nominal)


def nearest_safe_action(score_fn, obs: PyTree, nominal: Array, fallback: Array, config,
                        low: tuple, high: tuple) -> Array:
  """The recovery action of `config.recovery_action` != "policy": the action nearest the nominal
  one `[B, |A|]` that the safety critic accepts, Q_risk(s, a) = sigmoid(score(s, a)) <= ε =
  `eps_risk` (`score_fn`: the critic's logit, `RecoveryAgent.risk_score`).

  A recovery that keeps the nominal action's progress where it can, instead of π_rec's, which
  minimises Q_risk and so backs straight off the hazard (on PointHazard the robot then stays in
  front of the central hazard instead of sliding round it: `experiments/results/SAFETY.md`, "The
  detour problem"). The search aims at Q_risk <= ε − `recovery_margin`, by critic-linearised
  Dalal projections (`critic_projection`, Dalal et al. 2018, arXiv:1801.08757) or among sampled
  actions (`safe_sampling`, after Recovery RL's Q-sampling, Thananjeyan et al. 2021,
  arXiv:2010.15920). A nominal action with Q_risk <= ε comes back unchanged (with a latching
  reflex the nominal action is re-checked at each control step of the decision), and where the
  search ends above ε the `fallback` (π_rec's action) is executed, so the result is never an
  action the switch would reject when π_rec's would pass.
  """
  search_limit = _logit(config.eps_risk - config.recovery_margin)
  if config.recovery_action == "critic_projection":
    found = critic_projection(score_fn, obs, nominal, search_limit, low, high,
                              config.projection_steps)
  elif config.recovery_action == "safe_sampling":
    found = safe_sampling(score_fn, obs, nominal, search_limit, low, high,
                          config.recovery_samples)
  else:
    raise ValueError(f"config.recovery_action: expected one of {RECOVERY_ACTIONS[1:]} here, got "
                     f"{config.recovery_action!r}")
  # Accepted as the switch accepts: sigmoid(score) <= ε (`losses.safety.reflex_select`).
  accepted = lambda action: jax.nn.sigmoid(score_fn(obs, action)) <= config.eps_risk
  action = jnp.where(accepted(found)[:, None], found, fallback)
  return jnp.where(accepted(nominal)[:, None], nominal, action)


def _logit(probability: float) -> float:
  """log(p / (1 − p)) of a Python float in [0, 1], ±inf at the ends."""
  if probability <= 0.0:
    return -math.inf
  if probability >= 1.0:
    return math.inf
  return math.log(probability / (1.0 - probability))


def make_reflex(agent_like: RecoveryAgent, deterministic: bool = False) -> rollout.Reflex:
  """The switch as a `rollout.Reflex` for `rollout.two_rate_rollout` (spec §2.3, §1.3).

  `safety_params = (agent, enabled)`: it uses `agent`'s critic and recovery policy and fires
  only where the traced bool `enabled` holds, on max(Q1, Q2)(s, a) > ε_risk (strict,
  `losses.safety.reflex_select`). The recovery action is π_rec's from the control step's
  standard-normal noise `[N, |A|]` (pass `recovery_noise_fn` as the rollout's `safety_noise_fn`),
  its mode if `deterministic`; with `recovery_action` "critic_projection" or "safe_sampling" it is
  the action nearest the nominal one that the critic accepts (`nearest_safe_action`, π_rec's
  action where none is found). With `reflex_mode="latch"` a reflex keeps the recovery in charge
  until the decision ends (spec §1.3 option (a)); the rollout then checks each decision's nominal
  actions in one batched critic call.
  """
  def trigger(safety_params, obs, proposed):
    agent, enabled = safety_params
    select = jax.vmap(lambda r, a: safety.reflex_select(r, a, a,
                                                        threshold=agent.config.eps_risk)[1])
    return select(agent.risk(obs, proposed), proposed) & enabled

  def recover(safety_params, obs, proposed, noise):
    agent, _ = safety_params
    policy_action = agent.recovery_action_from_noise(obs, noise, deterministic)
    if agent.config.recovery_action == "policy":
      return policy_action
    return nearest_safe_action(agent.risk_score, obs, proposed, policy_action, agent.config,
                               agent.task.action_low, agent.task.action_high)

  return rollout.Reflex(trigger_fn=trigger, recovery_fn=recover,
                        latch=agent_like.config.reflex_mode == "latch")


def make_safety_layer(agent_like: RecoveryAgent, deterministic: bool = False):
  """`make_reflex`'s layer as a per-control-step `safety_fn(safety_params, obs, proposed, noise,
  latched)` (`rollout.reflex_safety_fn`): the critic is consulted at every control step."""
  return rollout.reflex_safety_fn(make_reflex(agent_like, deterministic))


# ----------------------------------------------------------------------------------------------
# The run.
# ----------------------------------------------------------------------------------------------


class EpisodeCarry(struct.PyTreeNode):
  """Per-environment carry (leading axis N): the rollout's, plus the running episode cost."""

  env: EnvCarry
  cost: Array  # [N] float32: cost of the unfinished episode so far
  violated: Array  # [N] bool: the unfinished episode violated a constraint


class RunnerState(struct.PyTreeNode):
  """Everything a run carries; only `env` is split along the mesh's data axis."""

  agent: RecoveryAgent
  task_buffer: replay.ReplayBuffer
  risk_buffer: replay.ReplayBuffer
  env: EpisodeCarry
  key: Array
  update: Array


def episode_cost_statistics(control: rollout.ControlSteps, carry: EpisodeCarry
                            ) -> tuple[EpisodeCarry, dict[str, Array]]:
  """Per-episode cost and violation sums of the episodes that ended in a `[T, K, N]` stream."""
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  active, done = flat(control.active), flat(control.terminated | control.truncated)
  cost = flat(control.info["cost"]) * active
  violation = flat(control.info["violation"]) & active

  def one(state, inputs):
    running_cost, violated = state
    cost, violation, done = inputs
    running_cost, violated = running_cost + cost, violated | violation
    ended = (jnp.where(done, running_cost, 0.0), done & violated)
    return (jnp.where(done, 0.0, running_cost), violated & ~done), ended

  (running_cost, violated), (ended_cost, ended_violated) = jax.lax.scan(
      one, (carry.cost, carry.violated), (cost, violation, done & active))
  metrics = {"episode_cost_sum": ended_cost.sum(),
             "episode_violation_sum": ended_violated.astype(jnp.float32).sum(),
             "cost_per_step": cost.sum() / jnp.maximum(active.sum(), 1),
             "intervention_rate": (flat(control.intervened) & active).sum()
                                  / jnp.maximum(active.sum(), 1)}
  return carry.replace(cost=running_cost, violated=violated), metrics


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` runs `num_steps` decisions of K control steps in `num_envs`
  environments (two-rate rollout with the reflex), stores decisions in the task buffer and every
  executed control step in the risk buffer, then makes `updates_per_step` SAC updates and
  `risk_updates_per_step` safety updates (none before `learning_starts` env steps; at that point
  `risk_pretrain_updates` safety updates once)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)
  space = env.action_space(env_params)
  low, high = sac.action_bound_tuples((space.low, space.high), env_spec.action_dim)
  actor, _ = sac.make_networks(env_spec, config)
  K = config.control_steps
  steps_per_update = config.num_envs * config.num_steps * K
  num_updates = config.total_timesteps // steps_per_update
  controller = make_controller(config, low, high)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = RecoveryAgent.create(agent_key, env_spec, config, (low, high))
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    one_obs = jax.tree.map(lambda x: x[0], carry.obs)
    action = jnp.zeros((env_spec.action_dim,), jnp.float32)
    scalar = jnp.zeros((), jnp.float32)
    task_item = DecisionTransition(obs=one_obs, action=action, reward=scalar,
                                   terminated=jnp.zeros((), bool), next_obs=one_obs,
                                   num_substeps=jnp.zeros((), jnp.int32))
    risk_item = RiskTransition(obs=one_obs, action=action, cost=scalar,
                               terminated=jnp.zeros((), bool), next_obs=one_obs,
                               next_action=action)
    tracked = EpisodeCarry(env=carry, cost=jnp.zeros((config.num_envs,), jnp.float32),
                           violated=jnp.zeros((config.num_envs,), bool))
    return RunnerState(agent=agent, task_buffer=replay.init(task_item, config.buffer_size),
                       risk_buffer=replay.init(risk_item, config.risk_buffer_size),
                       env=tracked, key=key, update=jnp.zeros((), jnp.int32))

  def policy(params, obs, key):
    # SAC's behaviour policy, returning the command in [-1, 1] (the controller maps it).
    actor_params, explore = params
    sample_key, uniform_key = jax.random.split(key)
    normalized = actor.apply(actor_params, obs).sample(seed=sample_key)
    uniform = jax.random.uniform(uniform_key, normalized.shape, minval=-1.0, maxval=1.0)
    normalized = jnp.where(explore, uniform, normalized)
    return normalized, normalized

  def collect(agent, carry, key, uniform, reflex_on):
    return collect_two_rate(agent, env, env_params, policy, (agent.task.actor_params, uniform),
                            controller, carry, key, config.num_steps, reflex_on)

  def task_updates(agent: RecoveryAgent, buffer, key):
    def one(task, key):
      batch = smdp_sac_batch(replay.sample(buffer, key, config.batch_size), config.gamma)
      return task.update(batch)
    task, metrics = jax.lax.scan(one, agent.task, jax.random.split(key, config.updates_per_step))
    return agent.replace(task=task), jax.tree.map(jnp.mean, metrics)

  def penalised_task_updates(agent: RecoveryAgent, buffer, key, risk_ready):
    # `task_updates` with the risk Lagrangian in the actor loss and the multiplier's step after
    # each update; `risk_ready` (traced) holds once the critic has been pre-trained.
    def one(agent, key):
      batch = smdp_sac_batch(replay.sample(buffer, key, config.batch_size), config.gamma)
      task, metrics = agent.task.update(batch, task_risk_penalty_fn(agent, risk_ready))
      agent, nu_metrics = agent.replace(task=task).update_task_risk_multiplier(
          batch.obs, jax.random.fold_in(key, 1), risk_ready)
      return agent, {**metrics, **nu_metrics}
    agent, metrics = jax.lax.scan(one, agent, jax.random.split(key, config.updates_per_step))
    return agent, jax.tree.map(jnp.mean, metrics)

  def safety_updates(agent: RecoveryAgent, buffer, key, count):
    # `count` is traced (one compiled loop serves the pre-training and the regular updates).
    metric_shapes = jax.eval_shape(agent.update_safety, replay.sample(
        buffer, key, config.risk_batch_size), key)[1]

    def one(i, carry):
      agent, sums = carry
      sample_key, update_key = jax.random.split(jax.random.fold_in(key, i))
      agent, metrics = agent.update_safety(
          replay.sample(buffer, sample_key, config.risk_batch_size), update_key)
      return agent, jax.tree.map(jnp.add, sums, metrics)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
    agent, sums = jax.lax.fori_loop(0, count, one, (agent, zeros))
    return agent, jax.tree.map(lambda x: x / jnp.maximum(count, 1), sums)

  def maybe(predicate, fn, agent, *args):
    shapes = jax.eval_shape(fn, agent, *args)[1]
    zeros = lambda *_: (agent, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))
    return jax.lax.cond(predicate, fn, zeros, agent, *args)

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    # The key use mirrors `sac.make_learner` so that the reflex-off K = 1 run equals SAC.
    key, rollout_key, update_key = jax.random.split(state.key, 3)
    # The reflex waits for the pre-trained critic; uniform actions may go on behind it.
    reflex_on = state.update * steps_per_update >= config.learning_starts
    uniform = state.update * steps_per_update < max(config.learning_starts, config.random_steps)
    carry, traj = collect(state.agent, state.env.env, rollout_key, uniform, reflex_on)
    ends_decisions = isinstance(traj, rollout.EndDecisionTrajectory)
    # [T, N] decisions, or [T, K, N] decision slots of which the valid ones are stored.
    decision_axes = traj.num_substeps.ndim
    flat = lambda x: x.reshape((-1,) + x.shape[decision_axes:])
    decision = traj.decision
    task_items = DecisionTransition(
        obs=jax.tree.map(flat, decision.obs), action=flat(task_actions(traj, low, high, config)),
        reward=flat(task_rewards(traj, config.intervention_penalty)),
        terminated=flat(decision.terminated),
        next_obs=jax.tree.map(flat, decision.next_obs), num_substeps=flat(traj.num_substeps))
    if ends_decisions:
      task_buffer = replay.add_masked(state.task_buffer, task_items, flat(traj.valid))
      commands = traj.command
    else:
      task_buffer = replay.add(state.task_buffer, task_items)
      commands = jnp.broadcast_to(decision.action[:, None], traj.control.action.shape)
    risk_buffer = replay.add(state.risk_buffer, _risk_items(traj.control, commands, controller))
    learning = (state.update + 1) * steps_per_update >= config.learning_starts
    if config.task_risk_penalty == "off":
      agent, metrics = maybe(learning, task_updates, state.agent, task_buffer, update_key)
    else:
      agent, metrics = maybe(learning, penalised_task_updates, state.agent, task_buffer,
                             update_key, reflex_on)
    safety_key = jax.random.fold_in(update_key, 1)
    first = learning & (state.update * steps_per_update < config.learning_starts)
    count = config.risk_updates_per_step + jnp.where(first, config.risk_pretrain_updates, 0)
    agent, safety_metrics = maybe(learning, safety_updates, agent, risk_buffer, safety_key, count)
    metrics.update(safety_metrics)
    tracked, cost_metrics = episode_cost_statistics(traj.control, state.env.replace(env=carry))
    if ends_decisions:
      metrics.update(control_episode_statistics(traj))
      metrics["task_decisions"] = traj.valid.sum().astype(jnp.float32)
    else:
      metrics.update(rollout_statistics(decision))
    metrics.update(cost_metrics)
    return RunnerState(agent=agent, task_buffer=task_buffer, risk_buffer=risk_buffer,
                       env=tracked, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    return first_episode_statistics(evaluation_episodes(state.agent, key, config.eval_episodes))

  return Learner(init=init, step=step, evaluate=evaluate, num_updates=num_updates,
                 env_steps_per_update=steps_per_update, sharded_field="env")


def collect_two_rate(agent: RecoveryAgent, env, env_params, policy_fn, policy_params, controller,
                     carry: EnvCarry, key: Array, num_decisions: int, reflex_on: Array,
                     deterministic: bool = False):
  """The two-rate rollout of `config.reflex_mode`: `rollout.two_rate_rollout` (no reflex,
  "per_step", "latch": option (a)) or `rollout.two_rate_rollout_end_decision` ("end_decision":
  option (b), returning a `rollout.EndDecisionTrajectory`)."""
  config = agent.config
  noise_fn = recovery_noise_fn(carry.running_return.shape[0], agent.recovery_actor.action_dim)
  if config.reflex and config.reflex_mode == "end_decision":
    return rollout.two_rate_rollout_end_decision(
        env, env_params, policy_fn, policy_params, controller, make_reflex(agent, deterministic),
        (agent, reflex_on), carry, key, num_decisions, config.control_steps,
        info_keys=SAFETY_INFO_KEYS, unroll=config.rollout_unroll, safety_noise_fn=noise_fn,
        recovery_credit=config.recovery_credit)
  safety_fn = make_reflex(agent, deterministic) if config.reflex else rollout.no_safety_layer
  return rollout.two_rate_rollout(
      env, env_params, policy_fn, policy_params, controller, safety_fn, (agent, reflex_on), carry,
      key, num_decisions, config.control_steps, info_keys=SAFETY_INFO_KEYS,
      unroll=config.rollout_unroll, safety_noise_fn=noise_fn)


def control_episode_statistics(traj: rollout.EndDecisionTrajectory) -> dict[str, Array]:
  """`rollout.rollout_statistics` read at the control rate: sums over the episodes that ended in the
  rollout (in option (b) an episode may end at a control step that ends no task decision)."""
  done = (traj.control.terminated | traj.control.truncated).astype(jnp.float32)
  return {"episode_return_sum": (traj.episode_return * done).sum(),
          "episode_length_sum": (traj.episode_length * done).sum(),
          "episodes": done.sum()}


def evaluation_episodes(agent: RecoveryAgent, key: Array, num_envs: int):
  """`num_envs` fresh greedy episodes: the task policy's mode, the recovery policy's mode, the
  reflex as configured (`config.reflex`, `config.reflex_mode`), for the environment's whole time
  limit (control steps `[ceil(max_steps / K), K, N]`; a `rollout.TwoRateTrajectory`, whose
  environments' first episodes `rollout.first_episode_mask(traj.decision.done)` masks, or with
  "end_decision" a `rollout.EndDecisionTrajectory`; `first_episode_statistics` reads both). What
  the learner's `evaluate` scores and `experiments.plot_safety` draws."""
  config = agent.config
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  space = env.action_space(env_params)
  action_dim = envs.spec(env, env_params).action_dim
  low, high = sac.action_bound_tuples((space.low, space.high), action_dim)
  controller = make_controller(config, low, high)
  actor = agent.task.actor

  def greedy(actor_params, obs, _):
    mode = actor.apply(actor_params, obs).mode()
    return mode, mode

  K = config.control_steps
  reset_key, run_key = jax.random.split(key)
  carry = rollout.reset(env, env_params, reset_key, num_envs)
  _, traj = collect_two_rate(agent, env, env_params, greedy, agent.task.actor_params, controller,
                             carry, run_key, -(-env_params.max_steps_in_episode // K),
                             jnp.asarray(True), deterministic=True)
  return traj


def task_rewards(traj: rollout.TwoRateTrajectory, intervention_penalty: float) -> Array:
  """The decisions' rewards as the task buffer stores them, `[T, N]` (option (b): `[T, K, N]`
  decision slots): the environment's, minus `intervention_penalty` where the safety layer
  intervened in the decision (spec §6.4 (d); option (b): where the reflex ended it)."""
  return traj.decision.reward - intervention_penalty * traj.intervened.astype(jnp.float32)


def task_actions(traj: rollout.TwoRateTrajectory, low: tuple, high: tuple, config) -> Array:
  """The decisions' actions for the task buffer, `[T, N, |A|]` in [-1, 1] (option (b): `[T, K, N,
  |A|]` decision slots, always the proposed command).

  With `action_relabeling` (the reference code's default, spec `safety_critics.md` §2.4) the
  proposed task action, so that π_task learns what proposing it led to; without,
  the executed action mapped back from the environment's bounds (the reference's
  `--disable_action_relabeling`), so that the task critic learns from the recovery policy's
  actions as from its own (K = 1, direct controller: the executed action is a task action).
  """
  if config.action_relabeling:
    return traj.decision.policy_extras
  executed = traj.control.action[:, 0]  # [T, N, |A|]: the only control step of each decision
  low = jnp.asarray(low, jnp.float32).reshape(1, 1, -1)
  high = jnp.asarray(high, jnp.float32).reshape(1, 1, -1)
  return jnp.clip(2.0 * (executed - low) / (high - low) - 1.0, -1.0, 1.0)


def _risk_items(control: rollout.ControlSteps, commands: Array, controller) -> RiskTransition:
  """Every control step of a `[T, K, N]` stream as flat `[T*K*N]` risk transitions; `commands`
  `[T, K, N, |A|]` is the task command in force at each (for the SARSA next action).

  The control steps an environment skipped after its episode ended mid-decision are stored too:
  their observation is the reset state and their successor and cost come from stepping it, so
  they are true (simulated, not executed) transitions, and the shapes stay static.
  """
  flat = lambda x: x.reshape((-1,) + x.shape[3:])
  next_obs = jax.tree.map(flat, control.next_obs)
  return RiskTransition(obs=jax.tree.map(flat, control.obs), action=flat(control.action),
                        cost=flat(control.info["cost"]), terminated=flat(control.terminated),
                        next_obs=next_obs, next_action=controller(next_obs, flat(commands)))


def first_episode_statistics(traj) -> dict[str, Array]:
  """Return, cost, violation and length of each environment's first episode, averaged (a
  `rollout.TwoRateTrajectory` or a `rollout.EndDecisionTrajectory`)."""
  if isinstance(traj, rollout.EndDecisionTrajectory):
    return _first_episode_control_statistics(traj.control)
  decision = traj.decision
  valid = rollout.first_episode_mask(decision.done)  # [D, N]
  control_valid = valid[:, None, :] & traj.control.active  # [D, K, N]
  cost = jnp.where(control_valid, traj.control.info["cost"], 0.0).sum(axis=(0, 1))
  violated = (traj.control.info["violation"] & control_valid).any(axis=(0, 1))
  interventions = (traj.control.intervened & control_valid).sum(axis=(0, 1))
  returns = jnp.where(valid, decision.reward, 0.0).sum(axis=0)
  return {"eval_return": returns.mean(), "eval_return_std": returns.std(),
          "eval_cost": cost.mean(), "eval_violation_rate": violated.astype(jnp.float32).mean(),
          "eval_interventions": interventions.astype(jnp.float32).mean(),
          "eval_length": control_valid.sum(axis=(0, 1)).astype(jnp.float32).mean()}


def _first_episode_control_statistics(control: rollout.ControlSteps) -> dict[str, Array]:
  """`first_episode_statistics` of a `[T, K, N]` control stream in which every control step is
  executed (option (b): episodes need not end with a decision)."""
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  valid = rollout.first_episode_mask(flat(control.terminated | control.truncated))  # [T*K, N]
  cost = jnp.where(valid, flat(control.info["cost"]), 0.0).sum(axis=0)
  violated = (flat(control.info["violation"]) & valid).any(axis=0)
  interventions = (flat(control.intervened) & valid).sum(axis=0)
  returns = jnp.where(valid, flat(control.reward), 0.0).sum(axis=0)
  return {"eval_return": returns.mean(), "eval_return_std": returns.std(),
          "eval_cost": cost.mean(), "eval_violation_rate": violated.astype(jnp.float32).mean(),
          "eval_interventions": interventions.astype(jnp.float32).mean(),
          "eval_length": valid.sum(axis=0).astype(jnp.float32).mean()}


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-Learner-step metrics)`: a whole run as one program."""
  learner = make_learner(config)

  def train(key: Array) -> tuple[RunnerState, dict[str, Any]]:
    return jax.lax.scan(lambda state, _: learner.step(state), learner.init(key), None,
                        length=learner.num_updates)

  return train
