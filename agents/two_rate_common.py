"""The two-rate data collection of the recovery agents (`recovery_rl`, and Bresa its K > 1 case).

A shared helper module of `hrljax.agents` (it defines no agent): the collection's config fields
and their checks, the controller that turns a decision's command into control actions, the safety
critic's switch as a `rollout.Reflex`, the two-rate rollout of the configured reflex mode, greedy
evaluation episodes, and what the replay buffers store of a collected stream (the task buffer's
decisions with their reward and action, the risk buffer's control steps, the SMDP batch the task
policy learns from). The agent is duck-typed: a `recovery_rl.RecoveryAgent` (`config`, `task`,
`recovery_actor`, `recovery_params`, `risk`, `risk_score`).
"""

import jax
import jax.numpy as jnp
import ml_collections

from hrljax import config_checks as checks
from hrljax import envs, replay, rollout
from hrljax.agents import sac_common
from hrljax.envs import point_hazard
from hrljax.losses import safety
from hrljax.networks.continuous import rescale_action
from hrljax.rollout import two_rate_streams
from hrljax.types import Array

CONTROLLERS = ("direct", "waypoint")
REFLEX_MODES = ("per_step", "latch", "end_decision")
RECOVERY_ACTIONS = ("policy",) + safety.RECOVERY_SEARCHES


def add_two_rate_fields(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds the collection's fields to `config`, at Recovery RL's one rate (K = 1, the task action
  executed as it is, the reflex deciding every control step), and returns it."""
  config.reflex = True  # False: no safety layer (SAC on the same data stream)
  config.control_steps = 1  # K control steps per task decision
  config.controller = "direct"  # "direct": the task action; "waypoint": tracked waypoints
  config.waypoint_gain = 10.0  # P gain of the waypoint controller
  config.reflex_mode = "per_step"  # or "latch" (option (a)), "end_decision" (option (b))
  config.recovery_credit = "reflex_state"  # option (b): "reflex_state" or "recovery_step"
  config.recovery_action = "policy"  # or the nearest accepted action: RECOVERY_SEARCHES
  config.recovery_margin = 0.05  # the search aims at Q_risk <= ε_risk − margin
  config.projection_steps = 5  # "critic_projection": Dalal steps from the nominal action
  config.recovery_samples = 64  # "safe_sampling": candidate actions (half near the nominal)
  config.action_relabeling = True  # the task buffer stores the proposed action
  config.intervention_penalty = 0.0  # subtracted from a decision's task reward if intervened
  return config


def validate_two_rate_fields(config: ml_collections.ConfigDict) -> None:
  """Raises `ConfigError` naming the first collection field that cannot run (`risk_epsilon`,
  the switch's threshold, checked already), or an environment without the costs it reads."""
  checks.positive_int(config, "control_steps", "projection_steps", "recovery_samples")
  checks.positive(config, "waypoint_gain")
  for field in ("reflex", "action_relabeling"):
    if not isinstance(config[field], bool):
      raise checks.ConfigError(f"config.{field}: expected a bool, got {config[field]!r}")
  for field, choices in (
    ("controller", CONTROLLERS),
    ("reflex_mode", REFLEX_MODES),
    ("recovery_credit", rollout.RECOVERY_CREDITS),
    ("recovery_action", RECOVERY_ACTIONS),
  ):
    checks.one_of(config, field, choices)
  checks.non_negative(config, "intervention_penalty")
  _validate_combinations(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  if not isinstance(env, point_hazard.PointHazard):
    raise checks.ConfigError(
      f"config.env_name: expected an environment with info['cost'] and "
      f"info['violation'] (PointHazard-v0), got {config.env_name!r}"
    )
  if config.controller == "waypoint" and env_params.observation_type != "relative":
    raise checks.ConfigError(
      "config.controller: 'waypoint' reads the position from a "
      "'relative' PointHazard observation, got observation_type "
      f"{env_params.observation_type!r}"
    )


def _validate_combinations(config: ml_collections.ConfigDict) -> None:
  """Fields that only work together."""
  if config.reflex_mode == "end_decision" and not config.action_relabeling:
    raise checks.ConfigError(
      "config.action_relabeling: False needs reflex_mode 'per_step' or 'latch' (with "
      "'end_decision' a task decision executes only its own nominal actions), got "
      f"reflex_mode={config.reflex_mode!r}"
    )
  # The search aims at Q_risk <= risk_epsilon − margin, which must leave some actions.
  if config.recovery_action != "policy" and not (
    isinstance(config.recovery_margin, (int, float))
    and 0.0 <= config.recovery_margin < config.risk_epsilon
  ):
    raise checks.ConfigError(
      f"config.recovery_margin: expected a float in [0, risk_epsilon = "
      f"{config.risk_epsilon!r}), got {config.recovery_margin!r}"
    )
  if not config.action_relabeling and (config.control_steps != 1 or config.controller != "direct"):
    raise checks.ConfigError(
      "config.action_relabeling: False stores the executed low-level action as the task "
      "action, which needs control_steps=1 and controller='direct', got control_steps="
      f"{config.control_steps!r}, controller={config.controller!r}"
    )


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
    return lambda obs, command: rescale_action(command, low, high)
  track = jax.vmap(lambda p, w: point_hazard.waypoint_controller(p, w, config.waypoint_gain))
  return lambda obs, command: track(obs[:, :2], command)


def recovery_action_from_noise(agent, obs, noise: Array, deterministic: bool = False) -> Array:
  """π_rec's environment action `[N, |A|]` from the control step's standard-normal `noise`
  `[N, |A|]` (the reparameterised sample tanh(μ + σ·noise), or the mode if `deterministic`)."""
  dist = agent.recovery_actor.apply(agent.recovery_params, obs)
  gaussian = dist.distribution
  pre_squash = gaussian.loc if deterministic else gaussian.loc + gaussian.scale_diag * noise
  return agent.task.to_env_action(dist.bijector.forward(pre_squash))


def make_reflex(agent_like, deterministic: bool = False) -> rollout.Reflex:
  """The switch as a `rollout.Reflex` for the two-rate rollouts.

  `safety_params = (agent, enabled)`: it fires only where the traced bool `enabled` holds, on
  max(Q1, Q2)(s, a) > ε_risk (strict). The recovery action is π_rec's from the control step's
  standard-normal noise `[N, |A|]` (`recovery_noise_fn` as the rollout's `safety_noise_fn`), its
  mode if `deterministic`; with `recovery_action` "critic_projection" or "safe_sampling" the
  action nearest the nominal one that the critic accepts (`losses.safety.nearest_safe_action`,
  π_rec's where none is found). `reflex_mode="latch"` keeps the recovery in charge until the
  decision ends.
  """

  def trigger(safety_params, obs, proposed):
    agent, enabled = safety_params
    select = jax.vmap(
      lambda r, a: safety.reflex_select(r, a, a, threshold=agent.config.risk_epsilon)[1]
    )
    return select(agent.risk(obs, proposed), proposed) & enabled

  def recover(safety_params, obs, proposed, noise):
    agent, _ = safety_params
    policy_action = recovery_action_from_noise(agent, obs, noise, deterministic)
    config = agent.config
    if config.recovery_action == "policy":
      return policy_action
    return safety.nearest_safe_action(
      agent.risk_score,
      obs,
      proposed,
      policy_action,
      method=config.recovery_action,
      threshold=config.risk_epsilon,
      margin=config.recovery_margin,
      low=agent.task.action_low,
      high=agent.task.action_high,
      num_steps=config.projection_steps,
      num_samples=config.recovery_samples,
    )

  return rollout.Reflex(
    trigger_fn=trigger, recovery_fn=recover, latch=agent_like.config.reflex_mode == "latch"
  )


def behaviour_policy(actor):
  """SAC's behaviour policy (`sac_common.behaviour_action`) as the rollout's `policy_fn`, with
  params `(actor_params, explore)`: the command in [-1, 1], also returned as the extras that the
  task buffer stores (the controller maps it to control actions)."""

  def policy(params, obs, key):
    actor_params, explore = params
    normalized = sac_common.behaviour_action(actor, actor_params, obs, key, explore)
    return normalized, normalized

  return policy


def episode_statistics(
  traj, carry: two_rate_streams.CostCarry
) -> tuple[two_rate_streams.CostCarry, dict[str, Array]]:
  """The episode return and length sums of a collected stream (decision- or control-rate) and
  its episodes' costs and violations; `carry` (with the rollout's final environment carry) goes
  on with the costs of the unfinished episodes."""
  if isinstance(traj, rollout.EndDecisionTrajectory):
    returns = {
      **two_rate_streams.control_episode_statistics(traj),
      "task_decisions": traj.valid.sum().astype(jnp.float32),
    }
  else:
    returns = rollout.rollout_statistics(traj.decision)
  carry, cost_metrics = two_rate_streams.episode_cost_statistics(traj.control, carry)
  return carry, {**returns, **cost_metrics}


def collect_two_rate(
  agent,
  env,
  env_params,
  policy_fn,
  policy_params,
  controller,
  carry,
  key: Array,
  num_decisions: int,
  reflex_on: Array,
  deterministic: bool = False,
):
  """The two-rate rollout of `config.reflex_mode`: `rollout.two_rate_rollout` (no reflex,
  "per_step", "latch") or `rollout.two_rate_rollout_end_decision` ("end_decision", returning a
  `rollout.EndDecisionTrajectory`)."""
  config = agent.config
  noise_fn = recovery_noise_fn(carry.running_return.shape[0], agent.recovery_actor.action_dim)
  common = dict(
    info_keys=two_rate_streams.SAFETY_INFO_KEYS,
    unroll=config.rollout_unroll,
    safety_noise_fn=noise_fn,
  )
  if config.reflex and config.reflex_mode == "end_decision":
    return rollout.two_rate_rollout_end_decision(
      env,
      env_params,
      policy_fn,
      policy_params,
      controller,
      make_reflex(agent, deterministic),
      (agent, reflex_on),
      carry,
      key,
      num_decisions,
      config.control_steps,
      recovery_credit=config.recovery_credit,
      **common,
    )
  safety_fn = make_reflex(agent, deterministic) if config.reflex else rollout.no_safety_layer
  return rollout.two_rate_rollout(
    env,
    env_params,
    policy_fn,
    policy_params,
    controller,
    safety_fn,
    (agent, reflex_on),
    carry,
    key,
    num_decisions,
    config.control_steps,
    **common,
  )


def evaluation_episodes(agent, key: Array, num_envs: int):
  """`num_envs` fresh greedy episodes for the environment's whole time limit: the task policy's
  mode, π_rec's mode, the reflex as configured (control steps `[ceil(max_steps / K), K, N]`, a
  `rollout.TwoRateTrajectory` or with "end_decision" a `rollout.EndDecisionTrajectory`;
  `two_rate_streams.first_episode_statistics` reads both). What the learner's `evaluate` scores and
  `experiments.plot_safety` draws."""
  config = agent.config
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  controller = make_controller(config, agent.task.action_low, agent.task.action_high)
  actor = agent.task.actor

  def greedy(actor_params, obs, _):
    mode = actor.apply(actor_params, obs).mode()
    return mode, mode

  reset_key, run_key = jax.random.split(key)
  carry = rollout.reset(env, env_params, reset_key, num_envs)
  num_decisions = -(-env_params.max_steps_in_episode // config.control_steps)
  _, traj = collect_two_rate(
    agent,
    env,
    env_params,
    greedy,
    agent.task.actor_params,
    controller,
    carry,
    run_key,
    num_decisions,
    jnp.asarray(True),
    deterministic=True,
  )
  return traj


def task_rewards(traj, intervention_penalty: float) -> Array:
  """The decisions' rewards as the task buffer stores them: the environment's, minus
  `intervention_penalty` where the safety layer intervened in the decision (option (b): where
  the reflex ended it)."""
  return traj.decision.reward - intervention_penalty * traj.intervened.astype(jnp.float32)


def task_actions(traj, low: tuple, high: tuple, config) -> Array:
  """The decisions' actions for the task buffer, in [-1, 1]: with `action_relabeling` the
  proposed task action, else the executed action mapped back from the environment's bounds
  (the reference's `--disable_action_relabeling`; K = 1 and the direct controller only)."""
  if config.action_relabeling:
    return traj.decision.policy_extras
  executed = traj.control.action[:, 0]  # [T, N, |A|]: the only control step of each decision
  low = jnp.asarray(low, jnp.float32).reshape(1, 1, -1)
  high = jnp.asarray(high, jnp.float32).reshape(1, 1, -1)
  return jnp.clip(2.0 * (executed - low) / (high - low) - 1.0, -1.0, 1.0)


def init_buffers(carry, action_dim: int, config) -> tuple[replay.ReplayBuffer, replay.ReplayBuffer]:
  """The empty task and risk buffers, of `buffer_size` decisions and `risk_buffer_size` control
  steps, their items shaped after the first environment of the rollout's `carry`."""
  task_item, risk_item = two_rate_streams.example_transitions(
    jax.tree.map(lambda x: x[0], carry.obs), action_dim
  )
  return replay.init(task_item, config.buffer_size), replay.init(risk_item, config.risk_buffer_size)


def store(
  task_buffer: replay.ReplayBuffer,
  risk_buffer: replay.ReplayBuffer,
  traj,
  controller,
  low: tuple,
  high: tuple,
  config,
) -> tuple[replay.ReplayBuffer, replay.ReplayBuffer]:
  """A collected stream into the buffers: its decisions into the task buffer (option (b): only
  the valid decision slots), every control step into the risk buffer with the controller's
  nominal next action (for a SARSA target)."""
  items, valid = two_rate_streams.decision_transitions(
    traj,
    task_actions(traj, low, high, config),
    task_rewards(traj, config.intervention_penalty),
  )
  if valid is None:
    task_buffer = replay.add(task_buffer, items)
  else:
    task_buffer = replay.add_masked(task_buffer, items, valid)
  risk_buffer = replay.add(
    risk_buffer,
    two_rate_streams.control_transitions(
      traj.control, two_rate_streams.commands_in_force(traj), controller
    ),
  )
  return task_buffer, risk_buffer


def smdp_sac_batch(
  batch: two_rate_streams.DecisionTransition, gamma: float
) -> sac_common.Transition:
  """The SAC batch whose discount γ·(1 − terminated) equals the SMDP discount γ^n·(1 − terminated).

  SAC discounts with γ·(1 − terminated); the float `terminated' = 1 − γ^(n−1)·(1 − terminated)`
  makes that γ^n·(1 − terminated) for a decision of n control steps (Sutton, Precup, Singh,
  "Between MDPs and semi-MDPs", 1999: SMDP Q-learning). For n = 1 it is `terminated` exactly.
  """
  continuation = jnp.power(gamma, batch.num_substeps.astype(jnp.float32) - 1.0) * (
    1.0 - batch.terminated.astype(jnp.float32)
  )
  return sac_common.Transition(
    obs=batch.obs,
    action=batch.action,
    reward=batch.reward,
    terminated=1.0 - continuation,
    next_obs=batch.next_obs,
  )
