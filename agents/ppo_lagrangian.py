"""PPO-Lagrangian and PID-Lagrangian PPO (and the cost-logging, optionally shielded, PPO beneath).

PPO-Lag: Ray, Achiam, Amodei, "Benchmarking Safe Exploration in Deep Reinforcement Learning"
(Safety Gym, 2019), Sec. 4, in OmniSafe's form (`ppo_lag.py`): a cost critic V_c regressed on
discounted cost returns, cost GAE, the combined advantage `(A_r - lam A_c) / (1 + lam)` fed to
PPO's clipped surrogate, and the multiplier updated once per update from the mean undiscounted
episodic cost J_c against `cost_limit`.
PID-Lag: Stooke, Achiam, Abbeel, "Responsive Safety in Reinforcement Learning by PID Lagrangian
Methods", ICML 2020, arXiv:2007.03964 (`multiplier="pid"`; update rule
`hrljax.losses.safety.pid_lagrange_update`, OmniSafe CPPOPID defaults).

Everything algorithmic is composed from `hrljax.losses.safety` (multipliers, combined advantage,
shield projection) and `hrljax.agents.ppo` (network, optimizer, PPO loss, episode statistics).

How costs reach the learner: the spine's rollout stores rewards but not `info`, so the
environment is wrapped by `SafetyWrapper`, whose observation is a `SafetyObservation` carrying
the wrapped observation together with the cost of the step that led to it, the episode's
cost so far and whether a shield changed the action. The rollout's `next_obs` (the true successor,
before auto-reset) therefore holds each step's cost, and at the last step of an episode its total.
Networks only ever see `SafetyObservation.obs`.

Config (`get_config`; defaults from spec `safety_critics.md` Sec. 5.5, OmniSafe PPOLag/CPPOPID):
  multiplier: "lagrange" (projected gradient ascent on lam, default), "pid", or "none" (plain PPO
    on the reward, costs only logged: the unconstrained baseline);
  lagrange_optimizer: "adam" (OmniSafe's default, lr 0.035, then clamped at 0) or "sgd"
    (`lam <- [lam + lr (J_c - d)]_+`, `safety.lagrange_update`);
  cost_limit d = 25 (Safety Gym's 1000-step episodes; PointHazard configs scale it to 200 steps);
  shield: "none" or "cbf" (see `agents/shielded_ppo.py`).

Deviations, each deliberate:
  * the multiplier is updated only when at least one episode ended in the rollout (J_c is
    undefined otherwise; OmniSafe's epochs always contain finished episodes);
  * advantages are standardised (A_r) / centred (A_c, OmniSafe) per minibatch, as `agents/ppo.py`
    standardises per minibatch (OmniSafe does it once per batch); with `multiplier="none"` the
    policy loss is then exactly `agents/ppo.py`'s;
  * one optimizer (PPO's: global-norm clip + Adam) over actor, reward critic and cost critic, the
    cost value loss weighted by `cost_value_coef` (OmniSafe uses a separate cost-critic
    optimizer); the cost critic is its own MLP, so it shares no features with the policy;
  * entropy coefficient stays PPO's 0.01 (OmniSafe PPOLag uses 0).
"""

from typing import Any, Callable, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct
from gymnax.environments import environment as gymnax_environment

from hrljax import config_checks as checks
from hrljax import envs, rollout
from hrljax.agents import common, ppo
from hrljax.losses import policy_gradient as pg
from hrljax.losses import safety
from hrljax.networks import MLP, ActorCritic, ValueHead, policy_noise, sample_with_noise
from hrljax.training import Learner
from hrljax.types import Array, Batch, PyTree

MULTIPLIERS = ("none", "lagrange", "pid")
LAGRANGE_OPTIMIZERS = ("adam", "sgd")
SHIELDS = ("none", "cbf")
SHIELDABLE_ENVS = ("PointHazard-v0",)


def get_config() -> ml_collections.ConfigDict:
  """PPO's config plus the cost critic, the multiplier and the shield (spec Sec. 5.5 defaults)."""
  config = ppo.get_config()
  config.agent = "ppo_lagrangian"
  config.env_name = "PointHazard-v0"
  config.multiplier = "lagrange"
  config.cost_limit = 25.0
  config.cost_gamma = 0.99
  config.cost_gae_lambda = 0.95
  config.cost_value_coef = 0.5
  config.center_cost_advantages = True
  config.lagrange_init = 0.001
  config.lagrange_optimizer = "adam"
  config.lagrange_learning_rate = 0.035
  config.lagrange_upper_bound = -1.0  # < 0: no cap (OmniSafe's default has none)
  config.pid_kp = 0.1
  config.pid_ki = 0.01
  config.pid_kd = 0.01
  config.pid_delay = 10
  config.pid_p_ema_alpha = 0.95
  config.pid_d_ema_alpha = 0.95
  config.pid_normalisation = "sum"
  config.pid_penalty_max = 100.0
  config.shield = "none"
  config.shield_gamma = 0.3  # discrete-time CBF decay (spec Sec. 6.3 prototype)
  config.shield_margin = 0.03  # robustness margin added to each hazard radius (spec Sec. 6.3)
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """PPO's checks, then the safety fields; raises `ConfigError` naming the first bad field."""
  ppo.validate_config(config, num_devices)
  checks.one_of(config, "multiplier", MULTIPLIERS)
  checks.one_of(config, "lagrange_optimizer", LAGRANGE_OPTIMIZERS)
  checks.one_of(config, "pid_normalisation", ("sum", "diff", "none"))
  checks.one_of(config, "shield", SHIELDS)
  checks.non_negative(config, "cost_limit", "cost_value_coef", "lagrange_init", "pid_kp",
                      "pid_ki", "pid_kd", "pid_penalty_max", "shield_margin")
  checks.positive(config, "lagrange_learning_rate")
  checks.positive_int(config, "pid_delay")
  checks.in_unit_interval(config, "cost_gamma", "cost_gae_lambda", "shield_gamma")
  for field in ("pid_p_ema_alpha", "pid_d_ema_alpha"):
    value = config[field]
    if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
      raise checks.ConfigError(f"config.{field}: expected a number in [0, 1), got {value!r}")
  if config.shield != "none":
    if config.env_name not in SHIELDABLE_ENVS:
      raise checks.ConfigError(f"config.shield: the CBF shield needs one of "
                               f"{list(SHIELDABLE_ENVS)}, got env_name {config.env_name!r}")
    if config.env_kwargs.get("dynamics", "velocity") != "velocity":
      raise checks.ConfigError("config.shield: the CBF shield assumes single-integrator "
                               "dynamics, got env_kwargs.dynamics "
                               f"{config.env_kwargs.get('dynamics')!r}")
    if not 0.0 < config.shield_gamma:
      raise checks.ConfigError(
          f"config.shield_gamma: expected a number in (0, 1], got {config.shield_gamma!r}")
  env, env_params = make_env(config)
  _check_cost_info(env, env_params)


# ----------------------------------------------------------------------------------------------
# The environment seen by the learner: costs (and shield interventions) in the observation.
# ----------------------------------------------------------------------------------------------


class SafetyObservation(NamedTuple):
  """What `SafetyWrapper` returns as the observation (all per environment)."""

  obs: PyTree  # the wrapped environment's observation: the only part networks see
  cost: Array  # float32: cost of the step that led here (0 after a reset)
  episode_cost: Array  # float32: cost accumulated by the episode up to here
  episode_violations: Array  # int32: steps with cost > 0 in the episode up to here
  intervened: Array  # bool: the shield changed the action of the step that led here


@struct.dataclass
class SafetyState:
  env_state: Any
  episode_cost: Array
  episode_violations: Array
  time: Array  # mirrors the wrapped state's clock (gymnax's EnvState field)


ShieldFn = Callable[[Any, Array, Any], tuple[Array, Array]]


class SafetyWrapper(gymnax_environment.Environment):
  """Exposes `info["cost"]` through the observation and optionally shields the actions.

  `shield_fn(env_state, action, params) -> (executed_action, intervened)` runs before the
  wrapped step: the environment executes the shielded action while the learner keeps the
  proposed one (spec Sec. 6.4 option (a), "shield as part of the environment"). `step` is
  gymnax's own (not overridden), so the spine's batched auto-reset applies unchanged.
  """

  def __init__(self, env, shield_fn: Optional[ShieldFn] = None):
    self.env = env
    self.shield_fn = shield_fn

  @property
  def default_params(self):
    return self.env.default_params

  def step_env(self, key, state: SafetyState, action, params):
    if self.shield_fn is None:
      executed, intervened = action, jnp.zeros((), bool)
    else:
      executed, intervened = self.shield_fn(state.env_state, action, params)
    obs, env_state, reward, terminated, info = self.env.step_env(key, state.env_state, executed,
                                                                 params)
    cost = jnp.asarray(info["cost"], jnp.float32)
    episode_cost = state.episode_cost + cost
    episode_violations = state.episode_violations + (cost > 0).astype(jnp.int32)
    next_state = SafetyState(env_state=env_state, episode_cost=episode_cost,
                             episode_violations=episode_violations, time=env_state.time)
    observation = SafetyObservation(obs=obs, cost=cost, episode_cost=episode_cost,
                                    episode_violations=episode_violations, intervened=intervened)
    return observation, next_state, reward, terminated, info

  def reset_env(self, key, params):
    obs, env_state = self.env.reset_env(key, params)
    zero = jnp.zeros((), jnp.float32)
    zero_count = jnp.zeros((), jnp.int32)
    state = SafetyState(env_state=env_state, episode_cost=zero, episode_violations=zero_count,
                        time=env_state.time)
    return SafetyObservation(obs=obs, cost=zero, episode_cost=zero,
                             episode_violations=zero_count,
                             intervened=jnp.zeros((), bool)), state

  def is_truncated(self, state: SafetyState, params) -> Array:
    return self.env.is_truncated(state.env_state, params)

  def action_space(self, params):
    return self.env.action_space(params)

  def observation_space(self, params):
    return self.env.observation_space(params)


def point_hazard_shield(env_state, action: Array, params, *, gamma: float, margin: float
                        ) -> tuple[Array, Array]:
  """CBF shield for PointHazard's single integrator: the executed action and `intervened`.

  Per-example: `action` float `[2]`. The proposal is first clipped to the action box (the
  environment clips it anyway, so clipping alone is not an intervention); it is then projected
  onto `{u : a_i.u + b_i >= 0 for every hazard i, -1 <= u <= 1}` with one linearised
  discrete-time CBF row per hazard (`safety.circle_cbf_constraint` with radius `r_i + margin`)
  by the exact multi-constraint projection `safety.polytope_project` (spec Sec. 6.3: one sweep
  of single projections is not enough with several hazards, and clipping after projecting can
  break the guarantee, hence the box rows inside the projection). Because each h_i is convex the
  linearisation is conservative: from any state with every margin-inflated barrier >= 0 the next
  state keeps them >= (1 - gamma) h_i >= 0 (up to `feasibility_tol`), so without process noise
  the robot never enters a hazard.
  """
  from hrljax.envs import point_hazard  # the geometry lives with the environment
  centers, radii = point_hazard.hazards(env_state, params)
  position = env_state.position
  rows = jax.vmap(lambda centre, radius: safety.circle_cbf_constraint(
      position, centre, radius, dt=params.dt, gamma=gamma, margin=margin))(centers, radii)
  a, b = rows
  proposal = jnp.clip(action.astype(jnp.float32), -1.0, 1.0)
  ones = jnp.ones_like(proposal)
  executed, info = safety.polytope_project(proposal, a, b, lower=-ones, upper=ones)
  return executed, info.intervened


def make_env(config):
  """`(SafetyWrapper, env_params)` for `config.env_name`, shielded if `config.shield == "cbf"`.

  Sequence-valued `env_kwargs` (e.g. PointHazard's `start=(0.0, 0.0)`, which a config can only
  hold as a tuple) become float32 arrays, the form the environment's params hold.
  """
  kwargs = {name: jnp.asarray(value, jnp.float32) if isinstance(value, (tuple, list)) else value
            for name, value in config.env_kwargs.items()}
  env, env_params = envs.make(config.env_name, **kwargs)
  shield_fn = None
  if config.shield == "cbf":
    gamma, margin = float(config.shield_gamma), float(config.shield_margin)

    def shield_fn(env_state, action, params):
      return point_hazard_shield(env_state, action, params, gamma=gamma, margin=margin)
  return SafetyWrapper(env, shield_fn), env_params


def _check_cost_info(env: SafetyWrapper, env_params) -> None:
  key = jax.random.key(0)
  _, state = jax.eval_shape(env.env.reset_env, key, env_params)
  action = env.action_space(env_params).sample(key)
  info = jax.eval_shape(env.env.step_env, key, state, action, env_params)[-1]
  if "cost" not in info:
    raise checks.ConfigError(f"config.env_name: expected an environment reporting "
                             f"info['cost'], got {env.env.name!r}")


# ----------------------------------------------------------------------------------------------
# The agent.
# ----------------------------------------------------------------------------------------------


class CostCritic(nn.Module):
  """V_c(s): an MLP torso and a scalar head, separate from the actor-critic (OmniSafe layout)."""

  hidden_sizes: tuple = (64, 64)
  activation: str = "tanh"

  @nn.compact
  def __call__(self, obs: Array) -> Array:
    return ValueHead()(MLP(self.hidden_sizes, self.activation)(obs))


class CostBatch(NamedTuple):
  """A flat batch: PPO's reward part plus the cost critic's values, advantages and targets."""

  reward: Batch
  cost_value: Array
  cost_advantage: Array
  cost_target: Array


class PPOLagrangianAgent(struct.PyTreeNode):
  """Train state: parameters (actor-critic and cost critic), optimizer states, multiplier, key."""

  params: PyTree  # {"actor_critic": ..., "cost_critic": ...}
  opt_state: PyTree
  multiplier: PyTree  # safety.LagrangeState or safety.PIDLagrangeState
  multiplier_opt_state: PyTree  # Adam state of lam (empty unless lagrange_optimizer == "adam")
  key: Array
  network: nn.Module = struct.field(pytree_node=False)
  cost_network: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env_spec: envs.EnvSpec, config) -> "PPOLagrangianAgent":
    config = ml_collections.FrozenConfigDict(config)
    network = ppo.make_network(env_spec, config)
    cost_network = CostCritic(tuple(config.hidden_sizes), config.activation)
    actor_key, cost_key, key = jax.random.split(key, 3)
    shape = env_spec.observation_shape
    params = {"actor_critic": common.init_params(network, actor_key, shape),
              "cost_critic": common.init_params(cost_network, cost_key, shape)}
    tx = ppo.make_optimizer(config)
    multiplier = initial_multiplier(config)
    return cls(params=params, opt_state=tx.init(params), multiplier=multiplier,
               multiplier_opt_state=_multiplier_tx(config).init(multiplier.lam), key=key,
               network=network, cost_network=cost_network, tx=tx, config=config)

  @property
  def lam(self) -> Array:
    return self.multiplier.lam

  def act(self, obs: PyTree, key: Array, deterministic: bool = False) -> Array:
    """Actions for a batch of (unwrapped) observations; the policy's mode if `deterministic`."""
    dist = self.network.apply(self.params["actor_critic"], obs, method=ActorCritic.policy)
    return dist.mode() if deterministic else dist.sample(seed=key)

  def update_multiplier(self, episode_cost: Array, valid: Array) -> "PPOLagrangianAgent":
    """One multiplier step from the mean episodic cost J_c; kept as is where `valid` is False
    (no episode ended) or with `multiplier="none"`."""
    config = self.config
    if config.multiplier == "none":
      return self
    if config.multiplier == "pid":
      new = safety.pid_lagrange_update(
          self.multiplier, episode_cost, cost_limit=config.cost_limit, kp=config.pid_kp,
          ki=config.pid_ki, kd=config.pid_kd, p_ema_alpha=config.pid_p_ema_alpha,
          d_ema_alpha=config.pid_d_ema_alpha, normalisation=config.pid_normalisation,
          penalty_max=config.pid_penalty_max)
      opt_state = self.multiplier_opt_state
    elif config.lagrange_optimizer == "sgd":
      new = safety.lagrange_update(self.multiplier, episode_cost, cost_limit=config.cost_limit,
                                   learning_rate=config.lagrange_learning_rate,
                                   upper_bound=_upper_bound(config))
      opt_state = self.multiplier_opt_state
    else:
      new, opt_state = _adam_lagrange_step(self.multiplier, self.multiplier_opt_state,
                                           episode_cost, config)
    keep = lambda old, updated: jnp.where(valid, updated, old)
    return self.replace(multiplier=jax.tree.map(keep, self.multiplier, new),
                        multiplier_opt_state=jax.tree.map(keep, self.multiplier_opt_state,
                                                          opt_state))

  def update(self, batch: CostBatch) -> tuple["PPOLagrangianAgent", dict[str, Array]]:
    """`update_epochs` passes of shuffled minibatch steps at the current multiplier."""
    return common.minibatch_epochs(self, batch, _minibatch_step, self.config.num_minibatches,
                                   self.config.update_epochs)


def initial_multiplier(config):
  if config.multiplier == "pid":
    return safety.pid_lagrange_init(lam_init=float(config.lagrange_init),
                                    delay=int(config.pid_delay))
  if config.multiplier == "none":
    return safety.lagrange_init(0.0)
  return safety.lagrange_init(float(config.lagrange_init))


def _upper_bound(config) -> Optional[float]:
  return None if config.lagrange_upper_bound < 0 else float(config.lagrange_upper_bound)


def _multiplier_tx(config) -> optax.GradientTransformation:
  if config.multiplier == "lagrange" and config.lagrange_optimizer == "adam":
    return optax.adam(config.lagrange_learning_rate)
  return optax.identity()


def _adam_lagrange_step(state: safety.LagrangeState, opt_state, episode_cost, config):
  """OmniSafe's `Lagrange`: Adam on `-lam (J_c - d)`, then the projection onto [0, bound]."""
  grad = jax.grad(safety.lagrange_multiplier_loss)(state.lam, episode_cost,
                                                   cost_limit=config.cost_limit)
  updates, opt_state = _multiplier_tx(config).update(grad, opt_state)
  lam = jnp.maximum(state.lam + updates, 0.0)
  bound = _upper_bound(config)
  if bound is not None:
    lam = jnp.minimum(lam, bound)
  return safety.LagrangeState(lam=lam), opt_state


def _loss_config(config) -> ml_collections.FrozenConfigDict:
  """The fields `ppo.ppo_loss` reads; advantages arrive already standardised and combined."""
  return ml_collections.FrozenConfigDict(dict(
      normalize_advantages=False, clip_epsilon=config.clip_epsilon, clip_value=config.clip_value,
      value_coef=config.value_coef, entropy_coef=config.entropy_coef))


def ppo_lagrangian_loss(params: PyTree, network: nn.Module, cost_network: nn.Module,
                        batch: CostBatch, lam: Array, config) -> tuple[Array, dict[str, Array]]:
  """PPO's loss on `(A_r - lam A_c) / (1 + lam)` plus the cost critic's value loss.

  A_r is standardised and A_c centred over the minibatch first (OmniSafe: A_c only centred).
  `lam` carries no gradient (`safety.ppo_lag_advantage` stops it).
  """
  adv_r = batch.reward.advantage
  if config.normalize_advantages:
    adv_r = (adv_r - adv_r.mean()) / (adv_r.std() + 1e-8)
  adv_c = batch.cost_advantage
  if config.center_cost_advantages:
    adv_c = adv_c - adv_c.mean()
  combined = safety.ppo_lag_advantage(adv_r, adv_c, lam)
  loss, metrics = ppo.ppo_loss(params["actor_critic"], network,
                               batch.reward._replace(advantage=combined), _loss_config(config))
  cost_value = cost_network.apply(params["cost_critic"], batch.reward.obs)
  clip = config.clip_epsilon if config.clip_value else None
  cost_loss = pg.value_loss(cost_value, batch.cost_target, batch.cost_value,
                            clip_epsilon=clip).mean()
  total = loss + config.cost_value_coef * cost_loss
  return total, {**metrics, "loss": total, "cost_value_loss": cost_loss}


def _minibatch_step(agent: PPOLagrangianAgent, minibatch: CostBatch):
  return common.gradient_step(agent, ppo_lagrangian_loss, agent.network, agent.cost_network,
                              minibatch, agent.lam, agent.config)


# ----------------------------------------------------------------------------------------------
# The run.
# ----------------------------------------------------------------------------------------------


def make_batch(agent: PPOLagrangianAgent, traj, config) -> CostBatch:
  """Reward GAE and cost GAE (gamma_c, lambda_c) over each environment's `[T]` slice, flattened.

  Both bootstrap from the true successor on truncation and not on termination; costs are the
  `SafetyObservation.cost` of the successor, i.e. of the step.
  """
  log_prob, value = traj.policy_extras
  obs, next_obs = traj.obs.obs, traj.next_obs.obs
  params = agent.params
  next_value = agent.network.apply(params["actor_critic"], next_obs, method=ActorCritic.value)
  cost_value = agent.cost_network.apply(params["cost_critic"], obs)
  next_cost_value = agent.cost_network.apply(params["cost_critic"], next_obs)
  not_terminated = 1.0 - traj.terminated.astype(jnp.float32)

  def gae(reward, discount, value, next_value, done, lambda_):
    return pg.generalized_advantage_estimation(reward, discount, value, next_value, lambda_, done)

  per_env = jax.vmap(gae, in_axes=(1, 1, 1, 1, 1, None), out_axes=1)
  advantage = per_env(traj.reward, config.gamma * not_terminated, value, next_value, traj.done,
                      config.gae_lambda)
  cost_advantage = per_env(traj.next_obs.cost, config.cost_gamma * not_terminated, cost_value,
                           next_cost_value, traj.done, config.cost_gae_lambda)
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  reward = Batch(obs=flat(obs), action=flat(traj.action), log_prob=flat(log_prob),
                 value=flat(value), advantage=flat(advantage), target=flat(advantage + value))
  return CostBatch(reward=reward, cost_value=flat(cost_value),
                   cost_advantage=flat(cost_advantage),
                   cost_target=flat(cost_advantage + cost_value))


def safety_statistics(traj) -> dict[str, Array]:
  """Spec Sec. 9 metrics of one rollout: sums over ended episodes (the loop makes them means)
  and per-step totals over the whole rollout (training-time safety, Safety Gym's cost rate)."""
  done = traj.done.astype(jnp.float32)
  succ = traj.next_obs
  steps = done.size
  return {
      "episode_cost_sum": (succ.episode_cost * done).sum(),
      "episode_violations_sum": (succ.episode_violations.astype(jnp.float32) * done).sum(),
      "violating_episode_sum": ((succ.episode_violations > 0).astype(jnp.float32) * done).sum(),
      "rollout_cost": succ.cost.sum(),
      "rollout_violations": (succ.cost > 0).astype(jnp.float32).sum(),
      "cost_rate": succ.cost.sum() / steps,
      "intervention_rate": succ.intervened.astype(jnp.float32).sum() / steps,
  }


def first_episode_cost(traj) -> dict[str, Array]:
  """Cost and violating steps of each environment's first episode in a `[T, N]` rollout of the
  safety wrapper, averaged over environments (an episode still running at the end counts with
  its cost so far): `eval_cost`, `eval_violations`, `eval_violation_rate` (share of episodes
  with a violation)."""
  valid = rollout.first_episode_mask(traj.done)
  cost = jnp.where(valid, traj.next_obs.cost, 0.0).sum(axis=0)
  violations = (valid & (traj.next_obs.cost > 0)).sum(axis=0).astype(jnp.float32)
  return {"eval_cost": cost.mean(), "eval_violations": violations.mean(),
          "eval_violation_rate": (violations > 0).astype(jnp.float32).mean()}


def mean_episode_cost(traj) -> tuple[Array, Array]:
  """`(J_c, valid)`: the mean undiscounted cost of the episodes that ended in `traj`, and
  whether any did (J_c is 0 then)."""
  done = traj.done.astype(jnp.float32)
  count = done.sum()
  return (traj.next_obs.episode_cost * done).sum() / jnp.maximum(count, 1.0), count > 0


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one update: rollout, multiplier step, GAEs, PPO epochs."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = make_env(config)
  env_spec = envs.spec(env.env, env_params)
  num_updates = config.total_timesteps // (config.num_envs * config.num_steps)
  actor_critic = ppo.make_network(env_spec, config)

  def init(key: Array) -> ppo.RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = PPOLagrangianAgent.create(agent_key, env_spec, config)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    return ppo.RunnerState(agent=agent, env=carry, key=key, update=jnp.zeros((), jnp.int32))

  def policy(params, obs, noise):
    dist, value = actor_critic.apply(params["actor_critic"], obs.obs)
    action, log_prob = sample_with_noise(dist, noise)
    return action, (log_prob, value)

  def noise(key, num_steps):
    return policy_noise(key, (num_steps, config.num_envs, env_spec.action_dim), env_spec.discrete)

  def step(state: ppo.RunnerState):
    key, rollout_key = jax.random.split(state.key)
    carry, traj = rollout.rollout(env, env_params, policy, state.agent.params, state.env,
                                  rollout_key, config.num_steps, unroll=config.rollout_unroll,
                                  noise_fn=noise)
    episode_cost, valid = mean_episode_cost(traj)
    agent = state.agent.update_multiplier(episode_cost, valid)
    agent, metrics = agent.update(make_batch(agent, traj, config))
    metrics.update(rollout.rollout_statistics(traj))
    metrics.update(safety_statistics(traj))
    metrics["lagrange_multiplier"] = agent.lam
    return ppo.RunnerState(agent=agent, env=carry, key=key, update=state.update + 1), metrics

  def evaluate(state: ppo.RunnerState, key: Array) -> dict[str, Array]:
    def greedy(params, obs, _):
      dist = actor_critic.apply(params["actor_critic"], obs.obs, method=ActorCritic.policy)
      return dist.mode(), None
    metrics = rollout.evaluate(env, env_params, greedy, state.agent.params, key,
                               config.eval_episodes, env_params.max_steps_in_episode)
    # The same episodes again (same key) for their cost, which `rollout.evaluate` does not see.
    reset_key, run_key = jax.random.split(key)
    carry = rollout.reset(env, env_params, reset_key, config.eval_episodes)
    _, traj = rollout.rollout(env, env_params, greedy, state.agent.params, carry, run_key,
                              env_params.max_steps_in_episode)
    return {**metrics, **first_episode_cost(traj)}

  return Learner(init=init, step=step, evaluate=evaluate, num_updates=num_updates,
                 env_steps_per_update=config.num_envs * config.num_steps, sharded_field="env")


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: the whole run as one program."""
  learner = make_learner(config)

  def train(key: Array):
    return jax.lax.scan(lambda state, _: learner.step(state), learner.init(key), None,
                        length=learner.num_updates)

  return train
