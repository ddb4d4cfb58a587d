"""The two-rate data collection of the recovery agents (`recovery_rl`, and `bresa` its K > 1 case).

A shared helper module of `hrljax.agents` (it defines no agent): the controller that turns a
decision's command into control actions, the safety critic's switch as a `rollout.Reflex`, the
two-rate rollout of the configured reflex mode, greedy evaluation episodes, and what the task
buffer stores of a collected decision (its reward and action). The agent is duck-typed: a
`recovery_rl.RecoveryAgent` (`config`, `task`, `recovery_actor`, `risk`, `risk_score`,
`recovery_action_from_noise`).
"""

import jax
import jax.numpy as jnp

from hrljax import envs, rollout
from hrljax.envs import point_hazard
from hrljax.losses import safety
from hrljax.networks.continuous import rescale_action
from hrljax.rollout import two_rate_streams
from hrljax.types import Array


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
    policy_action = agent.recovery_action_from_noise(obs, noise, deterministic)
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


def episode_statistics(traj) -> dict[str, Array]:
  """The episode return and length sums of a collected stream (decision- or control-rate)."""
  if isinstance(traj, rollout.EndDecisionTrajectory):
    return {
      **two_rate_streams.control_episode_statistics(traj),
      "task_decisions": traj.valid.sum().astype(jnp.float32),
    }
  return rollout.rollout_statistics(traj.decision)


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
