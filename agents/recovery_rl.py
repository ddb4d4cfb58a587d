"""Recovery RL: a SAC task policy, a learned safety critic Q_risk and a model-free recovery policy.

Thananjeyan, Balakrishna, Nair, Luo, Srinivasan, Hwang, Gonzalez, Ibarz, Finn, Goldberg,
"Recovery RL: Safe Reinforcement Learning with Learned Recovery Zones", arXiv:2010.15920
(Section IV, Algorithm 1), read against the authors' code (`recovery_rl/qrisk.py`, `sac.py`).

* The task policy is SAC on the task reward only (`sac_common.SACAgent`, α fixed at 0.2 as in
  the reference); it never sees costs.
* Q_risk(s, a) ∈ (0, 1) is a twin MLP with sigmoid outputs, its value the pessimistic max of the
  heads (`losses.safety.risk_value`), trained with the TD loss `losses.safety.qrisk_loss` on
  every executed control step: target c + γ_risk·(1 − terminated)·max(Q̄1, Q̄2)(s', a'),
  a' ~ π_task(·|s'), a violation never bootstrapping (`terminal_on_violation`).
* The executed action is the recovery policy's where max(Q1, Q2)(s, a_task) > ε_risk (strict,
  `losses.safety.reflex_select`), else a_task. π_rec is the reference's model-free one: a
  tanh-Gaussian policy trained on the critic's batches to minimise max(Q1, Q2)(s, π_rec(s)) with
  a reparameterised sample and no entropy term.
* The task buffer stores the *proposed* task action (the reference's action relabelling), the
  risk buffer the *executed* one.

The run is a two-rate rollout (`two_rate_common`) with a controller and a reflex at every control
step: Recovery RL is its case K = 1 with the "direct" controller (the task action executed as it
is), with the reflex off exactly `hrljax.agents.sac`'s run of the same seed; Bresa is the case
K > 1 (`bresa_config`). Deviations from the reference, each a config field (notes in
`docs/safety.md`): no offline demonstrations (Q_risk and π_rec are pre-trained,
`risk_pretrain_updates`, on the first `learning_starts` uniform-random steps, the reflex off
meanwhile); `random_steps`; `reflex_mode`; `recovery_objective="task"`
(`losses.safety.task_recovery_loss`); `recovery_action` (`losses.safety.nearest_safe_action`);
`intervention_penalty`; `task_risk_penalty`, the safety critic's Lagrangian on the task actor
(the reference code's LR baseline; SQRL's constrained update, Srinivasan et al.,
arXiv:2010.14603, Section 4).
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct
from ml_collections import config_dict

from hrljax import config_checks as checks
from hrljax import envs, replay, rollout, training
from hrljax.agents import sac_common, two_rate_common
from hrljax.losses import safety
from hrljax.networks.continuous import action_bound_tuples
from hrljax.rollout import two_rate_streams
from hrljax.training import Learner
from hrljax.types import Array, PyTree

RISK_NEXT_ACTIONS = ("task", "controller")
RECOVERY_OBJECTIVES = ("risk", "task")
TASK_RISK_PENALTIES = ("off", "fixed", "learned")
TASK_RISK_FORMS = ("linear", "hinge")


def get_config() -> ml_collections.ConfigDict:
  """SAC's fields (α = 0.2 fixed), the two-rate collection's at one rate
  (`two_rate_common.add_two_rate_fields`) and the safety critic's, at the reference's defaults."""
  config = sac_common.add_sac_fields(training.run_config(log_every=1000, checkpoint_every=10_000))
  config = two_rate_common.add_two_rate_fields(config)
  config.agent = "recovery_rl"
  config.env_name = "PointHazard-v0"
  config.autotune_alpha = False  # the reference's task SAC keeps α = 0.2
  config.init_alpha = 0.2
  config.learning_starts = 100  # the reference's start_steps of uniform random task actions
  config.random_steps = 0  # uniform task actions behind the reflex until this control step
  config.risk_gamma = 0.5  # Q_risk's discount per control step
  config.risk_epsilon = 0.1  # ε_risk: intervene where max(Q1, Q2)(s, a) > ε_risk
  config.risk_tau = 2e-4  # the reference's slow Polyak rate of the risk target
  config.risk_learning_rate = 3e-4
  config.recovery_learning_rate = 3e-4
  config.risk_hidden_sizes = (256, 256)
  config.risk_batch_size = 256
  config.risk_buffer_size = 1_000_000
  config.risk_updates_per_step = 1
  config.risk_pretrain_updates = 10_000  # the reference's critic_safe_pretraining_steps
  config.terminal_on_violation = True  # a violation never bootstraps Q_risk
  config.risk_next_action = "task"  # a' ~ π_task(s') (reference) or "controller" (SARSA)
  config.recovery_objective = "risk"  # π_rec minimises Q_risk ("risk") or follows Q_task
  config.recovery_risk_weight = 100.0  # λ of recovery_objective="task"
  config.recovery_risk_target = 0.1  # ε_rec of recovery_objective="task"
  config.task_risk_penalty = "off"  # the critic's Lagrangian on π_task: "fixed" or "learned" ν
  config.task_risk_form = "linear"  # ν·(Q_risk − ε_task), or "hinge": ν·max(Q_risk − ε_task, 0)
  config.task_risk_nu = 1.0  # ν, or its initial value when learned
  config.task_risk_limit = config_dict.placeholder(float)  # ε_task; None: risk_epsilon
  config.task_risk_nu_learning_rate = config_dict.placeholder(float)  # None: 0.1 × actor's
  return config


BRESA_CONTROL_STEPS = 10
BRESA_RISK_GAMMA_PER_DECISION = 0.5  # Recovery RL's default γ_risk, spread over the K control steps


def bresa_config() -> ml_collections.ConfigDict:
  """Bresa (Zhang, Solak, Ajoudani, "Bresa: Bio-inspired Reflexive Safe Reinforcement Learning
  for Contact-Rich Robotic Tasks", arXiv:2503.21989; its code unreleased, so the critic's loss
  and data follow Recovery RL): the task policy (SAC over decisions, each bootstrapped with the
  SMDP discount γ^n, n = K unless the episode ended inside it) picks a waypoint in PointHazard's
  arena every K = 10 control steps, tracked by a saturated P controller
  (`point_hazard.waypoint_controller`, the flowchart's trajectory controller); the reflex scores
  the nominal action at every control step and, above ε_risk, the recovery policy keeps control
  until the decision ends (`reflex_mode="latch"`, option (a); "end_decision", option (b), ends
  the decision); Q_risk learns SARSA-style on the control-rate stream (the controller's nominal
  next action) with γ_risk^(1/K) per control step (Recovery RL's 0.5 per decision).

  Left open by the paper: ε_risk (0.3 here; the preset `bresa_pointhazard` uses 0.5), K, Q_risk
  on (state, low-level action) only, option (a). Not done: a decision does not end when its
  waypoint is reached."""
  config = get_config()
  config.control_steps = BRESA_CONTROL_STEPS
  config.controller = "waypoint"
  config.reflex_mode = "latch"
  config.risk_next_action = "controller"  # SARSA on the control-rate stream
  config.risk_gamma = BRESA_RISK_GAMMA_PER_DECISION ** (1.0 / BRESA_CONTROL_STEPS)
  config.risk_epsilon = 0.3
  config.learning_starts = 100 * BRESA_CONTROL_STEPS  # 100 random decisions, in control steps
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  sac_common.validate_sac_fields(config, num_devices)
  checks.positive_int(config, "risk_batch_size", "risk_buffer_size")
  checks.non_negative_int(config, "risk_updates_per_step", "risk_pretrain_updates", "random_steps")
  checks.positive(config, "risk_learning_rate", "recovery_learning_rate", "recovery_risk_weight")
  checks.in_unit_interval(config, "risk_gamma", "risk_tau", "recovery_risk_target", "risk_epsilon")
  if not isinstance(config.terminal_on_violation, bool):
    raise checks.ConfigError(
      f"config.terminal_on_violation: expected a bool, got {config.terminal_on_violation!r}"
    )
  checks.one_of(config, "risk_next_action", RISK_NEXT_ACTIONS)
  checks.one_of(config, "recovery_objective", RECOVERY_OBJECTIVES)
  two_rate_common.validate_two_rate_fields(config)
  _validate_task_risk_penalty(config)


def _validate_task_risk_penalty(config: ml_collections.ConfigDict) -> None:
  """The `task_risk_*` fields (the safety critic's Lagrangian on the task actor)."""
  checks.one_of(config, "task_risk_penalty", TASK_RISK_PENALTIES)
  checks.one_of(config, "task_risk_form", TASK_RISK_FORMS)
  checks.positive(config, "task_risk_nu")
  limit = config.task_risk_limit
  if limit is not None and not (isinstance(limit, (int, float)) and 0.0 < limit < 1.0):
    raise checks.ConfigError(
      f"config.task_risk_limit: expected None (risk_epsilon) or a float in (0, 1), got {limit!r}"
    )
  if limit is None and config.task_risk_penalty != "off" and not 0.0 < config.risk_epsilon < 1.0:
    raise checks.ConfigError(
      "config.task_risk_limit: None takes risk_epsilon, which the penalty needs in (0, 1), "
      f"got risk_epsilon={config.risk_epsilon!r}; set task_risk_limit"
    )
  if config.task_risk_nu_learning_rate is not None:  # None: 0.1 × actor_learning_rate
    checks.positive(config, "task_risk_nu_learning_rate")


def task_risk_limit(config) -> float:
  """ε_task of the task actor's risk constraint: `task_risk_limit`, or the switch's ε_risk."""
  return float(config.risk_epsilon if config.task_risk_limit is None else config.task_risk_limit)


class RecoveryAgent(struct.PyTreeNode):
  """Train state: the SAC task agent, the risk critic (+ target), the recovery policy, and log ν
  of the task actor's risk Lagrangian."""

  task: sac_common.SACAgent
  risk_params: PyTree
  target_risk_params: PyTree
  recovery_params: PyTree
  risk_opt_state: PyTree
  recovery_opt_state: PyTree
  log_nu: Array  # float32 scalar
  nu_opt_state: PyTree
  risk_critic: nn.Module = struct.field(pytree_node=False)
  recovery_actor: nn.Module = struct.field(pytree_node=False)
  risk_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  recovery_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  nu_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(
    cls, key: Array, env_spec: envs.EnvSpec, config, action_bounds=None
  ) -> "RecoveryAgent":
    """`key` builds the SAC task agent exactly as `SACAgent.create(key, ...)` would; the safety
    networks are initialised from `fold_in(key, 1)`."""
    config = ml_collections.FrozenConfigDict(config)
    task = sac_common.SACAgent.create(key, env_spec, config, action_bounds)
    recovery_actor, risk_critic = sac_common.make_networks(
      env_spec, config, config.risk_hidden_sizes, num_critics=2
    )
    risk_key, recovery_key = jax.random.split(jax.random.fold_in(key, 1))
    obs = jnp.zeros((1,) + env_spec.observation_shape, jnp.float32)
    risk_params = risk_critic.init(risk_key, obs, jnp.zeros((1, env_spec.action_dim)))
    recovery_params = recovery_actor.init(recovery_key, obs)
    risk_tx = sac_common.make_optimizer(config, config.risk_learning_rate)
    recovery_tx = sac_common.make_optimizer(config, config.recovery_learning_rate)
    nu_rate = config.task_risk_nu_learning_rate  # None: 0.1 × the actor's
    nu_tx = sac_common.make_optimizer(
      config, 0.1 * config.actor_learning_rate if nu_rate is None else nu_rate
    )
    log_nu = jnp.asarray(math.log(config.task_risk_nu), jnp.float32)
    return cls(
      task=task,
      risk_params=risk_params,
      target_risk_params=risk_params,
      recovery_params=recovery_params,
      risk_opt_state=risk_tx.init(risk_params),
      recovery_opt_state=recovery_tx.init(recovery_params),
      log_nu=log_nu,
      nu_opt_state=nu_tx.init(log_nu),
      risk_critic=risk_critic,
      recovery_actor=recovery_actor,
      risk_tx=risk_tx,
      recovery_tx=recovery_tx,
      nu_tx=nu_tx,
      config=config,
    )

  def risk_heads(self, params: PyTree, obs: PyTree, action: Array) -> Array:
    """Both heads, sigmoid(Q_k(s, a)) ∈ (0, 1), float `[2, B]`."""
    return jax.nn.sigmoid(self.risk_critic.apply(params, obs, action))

  def risk(self, obs: PyTree, action: Array) -> Array:
    """The pessimistic risk max(Q1, Q2)(s, a), float `[B]`."""
    q = self.risk_heads(self.risk_params, obs, action)
    return safety.risk_value(q[0], q[1])

  def risk_score(self, obs: PyTree, action: Array) -> Array:
    """The pessimistic risk before its sigmoid, the max of the heads' logits `[B]` (`risk` is its
    sigmoid): the score `losses.safety.nearest_safe_action` linearises."""
    q = self.risk_critic.apply(self.risk_params, obs, action)
    return safety.risk_value(q[0], q[1])

  def task_risk_score(self, obs: PyTree, command: Array) -> Array:
    """`risk_score` of the task command `[B, |A|]` at the controller's nominal control action
    for it, `[B]`; differentiable in `command` through the controller."""
    controller = two_rate_common.make_controller(
      self.config, self.task.action_low, self.task.action_high
    )
    return self.risk_score(obs, controller(obs, command))

  def update_task_risk_multiplier(
    self, obs: PyTree, key: Array, enabled: Array
  ) -> tuple["RecoveryAgent", dict[str, Array]]:
    """With `task_risk_penalty="learned"` and the traced bool `enabled`, one optimizer step of
    log ν on SQRL's multiplier loss (`losses.safety.sqrl_lambda_loss`) at fresh task actions of
    the batch's observations: log ν rises while the batch's geometric mean of Q_risk exceeds
    ε_task. Logs the mean risk of those actions and ν either way."""
    config = self.config
    limit = task_risk_limit(config)
    command = self.task.actor.apply(self.task.actor_params, obs).sample(seed=key)
    logit = self.task_risk_score(obs, command)
    metrics = {"task_risk": jnp.mean(jax.nn.sigmoid(logit)), "task_risk_nu": jnp.exp(self.log_nu)}
    if config.task_risk_penalty != "learned":
      return self, metrics

    objective = lambda log_nu: jnp.mean(
      jax.vmap(lambda l: safety.sqrl_lambda_loss(log_nu, l, target_safety=limit))(logit)
    )
    log_nu, nu_opt_state = sac_common.optimizer_step(
      self.nu_tx, jax.grad(objective)(self.log_nu), self.nu_opt_state, self.log_nu, enabled
    )
    return self.replace(log_nu=log_nu, nu_opt_state=nu_opt_state), metrics

  def recovery_action(self, obs: PyTree, key: Array, deterministic: bool = False) -> Array:
    """π_rec's environment action `[B, |A|]` (its mode if `deterministic`)."""
    dist = self.recovery_actor.apply(self.recovery_params, obs)
    normalized = dist.mode() if deterministic else dist.sample(seed=key)
    return self.task.to_env_action(normalized)

  def act(self, obs: PyTree, key: Array, deterministic: bool = False) -> tuple[Array, Array, Array]:
    """One control step's `(executed, proposed, intervened)`, `[B, ...]`: π_rec's action where
    the risk of the task policy's proposal exceeds ε_risk (strict), else the proposal."""
    task_key, recovery_key = jax.random.split(key)
    proposed = self.task.act(obs, task_key, deterministic)
    recovery = self.recovery_action(obs, recovery_key, deterministic)
    executed, intervened = self.switch(obs, proposed, recovery)
    return executed, proposed, intervened

  def switch(self, obs: PyTree, proposed: Array, recovery: Array) -> tuple[Array, Array]:
    """The threshold switch on a batch: `(executed [B, |A|], intervened [B])`."""
    select = jax.vmap(
      lambda r, a, b: safety.reflex_select(r, a, b, threshold=self.config.risk_epsilon)
    )
    return select(self.risk(obs, proposed), proposed, recovery)

  def update_safety(
    self, batch: two_rate_streams.ControlTransition, key: Array
  ) -> tuple["RecoveryAgent", dict]:
    """One step of Q_risk (TD loss), then one of π_rec on the updated critic, then the Polyak
    step of the risk target (every step, as the reference). `[B]` batch."""
    config = self.config
    task_next = config.risk_next_action == "task"
    next_action = self.task.act(batch.next_obs, key) if task_next else batch.next_action
    q_next = self.risk_heads(self.target_risk_params, batch.next_obs, next_action)
    discount = config.risk_gamma * (1.0 - batch.terminated.astype(jnp.float32))
    cost = batch.cost.astype(jnp.float32)

    def risk_objective(params):
      q = self.risk_heads(params, batch.obs, batch.action)
      loss, extras = jax.vmap(
        lambda *a: safety.qrisk_loss(*a, terminal_on_violation=config.terminal_on_violation)
      )(q[0], q[1], cost, discount, q_next[0], q_next[1])
      return jnp.mean(loss), extras

    (risk_loss, extras), grads = jax.value_and_grad(risk_objective, has_aux=True)(self.risk_params)
    mean_risk = jnp.mean(extras.risk_tm1)
    risk_params, risk_opt_state = sac_common.optimizer_step(
      self.risk_tx, grads, self.risk_opt_state, self.risk_params
    )

    def recovery_objective(params):
      normalized = self.recovery_actor.apply(params, batch.obs).sample(
        seed=jax.random.fold_in(key, 1)
      )
      q = self.risk_heads(risk_params, batch.obs, self.task.to_env_action(normalized))
      risk = safety.risk_value(q[0], q[1])
      if config.recovery_objective == "risk":
        return jnp.mean(risk)
      q_task = self.task.critic.apply(self.task.critic_params, batch.obs, normalized)
      target, weight = config.recovery_risk_target, config.recovery_risk_weight
      return jnp.mean(
        safety.task_recovery_loss(q_task, risk, risk_target=target, risk_weight=weight)
      )

    recovery_loss, grads = jax.value_and_grad(recovery_objective)(self.recovery_params)
    recovery_params, recovery_opt_state = sac_common.optimizer_step(
      self.recovery_tx, grads, self.recovery_opt_state, self.recovery_params
    )
    target = optax.incremental_update(risk_params, self.target_risk_params, config.risk_tau)
    metrics = {"risk_loss": risk_loss, "recovery_loss": recovery_loss, "risk": mean_risk}
    return self.replace(
      risk_params=risk_params,
      target_risk_params=target,
      recovery_params=recovery_params,
      risk_opt_state=risk_opt_state,
      recovery_opt_state=recovery_opt_state,
    ), metrics


def task_risk_penalty_fn(agent: RecoveryAgent, enabled: Array) -> sac_common.ActorPenaltyFn:
  """The task actor's risk Lagrangian as SAC's `actor_penalty_fn`: per example
  ν·(Q_risk(s, c(s, a)) − ε_task), or with `task_risk_form="hinge"` ν·max(Q_risk − ε_task, 0),
  at the reparameterised task action a, c the controller (`losses.safety.sqrl_actor_penalty` on
  `RecoveryAgent.task_risk_score`), times the traced bool `enabled` (off until the critic has
  been pre-trained). The LR baseline of Thananjeyan et al.'s code and SQRL's constrained update
  in its paper form (Srinivasan et al., arXiv:2010.14603, Section 4): the gradient reaches the
  actor through the action (for Bresa, through the waypoint controller); ν and the critic get
  none."""
  limit = task_risk_limit(agent.config)
  hinge = agent.config.task_risk_form == "hinge"
  penalty = jax.vmap(
    lambda logit: safety.sqrl_actor_penalty(agent.log_nu, logit, target_safety=limit, hinge=hinge)
  )
  scale = enabled.astype(jnp.float32)
  return lambda obs, action: scale * penalty(agent.task_risk_score(obs, action))


# ----------------------------------------------------------------------------------------------
# The run.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries; only `env` is split along the mesh's data axis."""

  agent: RecoveryAgent
  task_buffer: replay.ReplayBuffer
  risk_buffer: replay.ReplayBuffer
  env: two_rate_streams.CostCarry
  key: Array
  update: Array


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` runs `num_steps` decisions of K control steps in `num_envs`
  environments, stores decisions in the task buffer and every executed control step in the risk
  buffer, then makes `updates_per_step` SAC updates and `risk_updates_per_step` safety updates
  (none before `learning_starts` control steps; at that point `risk_pretrain_updates` more)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)
  space = env.action_space(env_params)
  low, high = action_bound_tuples((space.low, space.high), env_spec.action_dim)
  policy = two_rate_common.behaviour_policy(sac_common.make_networks(env_spec, config)[0])
  steps_per_update = config.num_envs * config.num_steps * config.control_steps
  controller = two_rate_common.make_controller(config, low, high)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = RecoveryAgent.create(agent_key, env_spec, config, (low, high))
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    task_buffer, risk_buffer = two_rate_common.init_buffers(carry, env_spec.action_dim, config)
    return RunnerState(
      agent=agent,
      task_buffer=task_buffer,
      risk_buffer=risk_buffer,
      env=two_rate_streams.cost_carry(carry),
      key=key,
      update=jnp.zeros((), jnp.int32),
    )

  def task_updates(agent: RecoveryAgent, buffer, key, _):
    def update(task, batch, _):
      return task.update(two_rate_common.smdp_sac_batch(batch, config.gamma))

    task, metrics = sac_common.sampled_updates(
      update, agent.task, buffer, key, config.batch_size, config.updates_per_step
    )
    return agent.replace(task=task), metrics

  def penalised_task_updates(agent: RecoveryAgent, buffer, key, risk_ready):
    # `task_updates` with the risk Lagrangian in the actor loss and the multiplier's step after
    # each update; `risk_ready` (traced) holds once the critic has been pre-trained.
    def update(agent, batch, key):
      batch = two_rate_common.smdp_sac_batch(batch, config.gamma)
      task, metrics = agent.task.update(batch, task_risk_penalty_fn(agent, risk_ready))
      agent, nu_metrics = agent.replace(task=task).update_task_risk_multiplier(
        batch.obs, jax.random.fold_in(key, 1), risk_ready
      )
      return agent, {**metrics, **nu_metrics}

    return sac_common.sampled_updates(
      update, agent, buffer, key, config.batch_size, config.updates_per_step
    )

  def safety_updates(agent: RecoveryAgent, buffer, key, count):
    # `count` is traced: one compiled loop serves the pre-training and the regular updates.
    return sac_common.counted_updates(
      RecoveryAgent.update_safety, agent, buffer, key, config.risk_batch_size, count
    )

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    # The key use mirrors `sac.make_learner` so that the reflex-off K = 1 run equals SAC.
    key, rollout_key, update_key = jax.random.split(state.key, 3)
    # The reflex waits for the pre-trained critic; uniform actions may go on behind it.
    reflex_on = state.update * steps_per_update >= config.learning_starts
    uniform = state.update * steps_per_update < max(config.learning_starts, config.random_steps)
    carry, traj = two_rate_common.collect_two_rate(
      state.agent,
      env,
      env_params,
      policy,
      (state.agent.task.actor_params, uniform),
      controller,
      state.env.env,
      rollout_key,
      config.num_steps,
      reflex_on,
    )
    task_buffer, risk_buffer = two_rate_common.store(
      state.task_buffer, state.risk_buffer, traj, controller, low, high, config
    )
    learning = (state.update + 1) * steps_per_update >= config.learning_starts
    updates = task_updates if config.task_risk_penalty == "off" else penalised_task_updates
    agent, metrics = training.when(
      learning, updates, state.agent, task_buffer, update_key, reflex_on
    )
    first = learning & (state.update * steps_per_update < config.learning_starts)
    count = config.risk_updates_per_step + jnp.where(first, config.risk_pretrain_updates, 0)
    agent, safety_metrics = training.when(
      learning, safety_updates, agent, risk_buffer, jax.random.fold_in(update_key, 1), count
    )
    metrics.update(safety_metrics)
    tracked, episode_metrics = two_rate_common.episode_statistics(
      traj, state.env.replace(env=carry)
    )
    metrics.update(episode_metrics)
    return RunnerState(
      agent=agent,
      task_buffer=task_buffer,
      risk_buffer=risk_buffer,
      env=tracked,
      key=key,
      update=state.update + 1,
    ), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    return two_rate_streams.first_episode_statistics(
      two_rate_common.evaluation_episodes(state.agent, key, config.eval_episodes)
    )

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=training.num_updates(config.total_timesteps, steps_per_update),
    env_steps_per_update=steps_per_update,
    sharded_field="env",
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-Learner-step metrics)`: a whole run as one program."""
  return training.whole_run(make_learner(config))
