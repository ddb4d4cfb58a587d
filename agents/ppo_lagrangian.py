"""PPO-Lagrangian, PID-Lagrangian PPO and shielded PPO (and the cost-logging PPO beneath).

PPO-Lag: Ray, Achiam, Amodei, "Benchmarking Safe Exploration in Deep Reinforcement Learning"
(Safety Gym, 2019), Sec. 4, in OmniSafe's form (`ppo_lag.py`): a cost critic V_c regressed on
discounted cost returns, cost GAE, the combined advantage `(A_r - lam A_c) / (1 + lam)` fed to
PPO's clipped surrogate, and the multiplier updated once per update from the mean undiscounted
episodic cost J_c against `cost_limit`.
PID-Lag: Stooke, Achiam, Abbeel, "Responsive Safety in Reinforcement Learning by PID Lagrangian
Methods", ICML 2020, arXiv:2007.03964 (`multiplier="pid"`; update rule
`hrljax.losses.safety.pid_lagrange_update`, OmniSafe CPPOPID defaults).

The formulas are `hrljax.losses.safety` (multipliers, combined advantage, shield projection)
and `hrljax.losses.policy_gradient` (clipped surrogate, value loss, GAE); costs reach the
learner through `hrljax.envs.safety_wrapper.SafetyWrapper`, whose observation carries each
step's cost and the episode's totals (networks see only `SafetyObservation.obs`), and which
also computes the safety metrics of its rollouts and evaluations.

Config (`get_config`, one comment per field): the defaults are OmniSafe's PPOLag and CPPOPID;
`cost_limit` d = 25 suits Safety Gym's 1000-step episodes (the PointHazard configs use 1,
`docs/safety.md`).

**Shielded PPO** (`shielded_config()`: `shield="cbf"`, `multiplier="none"`; any multiplier
combines with the shield): the executed actions pass through a control-barrier-function shield
(Ames et al., "Control Barrier Functions: Theory and Applications", arXiv:1903.11199),
`point_hazard_shield`: PointHazard's single integrator `p' = p + dt u` kept out of every hazard
disc by `losses.safety.circle_cbf_shield` (one linearised CBF row per hazard, projected exactly
together with the action box; without process noise no hazard is entered, tested). The shield
is part of the environment (option (a) of `docs/safety.md`, "How a loss treats shielded
actions"): the rollout stores the *proposed* action and its log-probability, so PPO's ratio is
always the policy's own, and the reward and cost are those of the executed action. The executed
action's log-probability can be near zero (its ratio would explode), and differentiating through
the projection suffers from action aliasing (arXiv:2509.12833), hence this choice; the policy
gets no gradient telling it why a proposal was replaced. The fraction of steps where the
projection changed the clipped proposal is logged as `intervention_rate`.

Deviations, each deliberate:
  * the multiplier is updated only when at least one episode ended in the rollout (J_c is
    undefined otherwise; OmniSafe's epochs always contain finished episodes);
  * advantages are standardised (A_r) / centred (A_c, OmniSafe) per minibatch, as PPO does
    (`agents/ppo.py`; OmniSafe does it once per batch); with `multiplier="none"` the policy loss
    is then exactly PPO's;
  * one optimizer (PPO's: global-norm clip + Adam) over actor, reward critic and cost critic, the
    cost value loss weighted by `cost_value_coef` (OmniSafe uses a separate cost-critic
    optimizer); the cost critic is its own MLP, so it shares no features with the policy;
  * entropy coefficient stays PPO's 0.01 (OmniSafe PPOLag uses 0).
"""

import functools
from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, rollout, training
from hrljax.agents import common
from hrljax.losses import policy_gradient as pg
from hrljax.losses import safety
from hrljax.envs import point_hazard
from hrljax.envs import safety_wrapper as sw
from hrljax.networks import ActorCritic, policy_noise, sample_with_noise
from hrljax.networks.state_value import StateValue
from hrljax.training import Learner
from hrljax.types import Array, Batch, EnvCarry, PyTree

MULTIPLIERS = ("none", "lagrange", "pid")
LAGRANGE_OPTIMIZERS = ("adam", "sgd")
SHIELDS = ("none", "cbf")
SHIELDABLE_ENVS = ("PointHazard-v0",)
SWEEPABLE = ("learning_rate",)  # config.sweep: ppo_optimizer's (not the multiplier's)


def get_config() -> ml_collections.ConfigDict:
  """PPO's fields plus the cost critic, the multiplier and the shield."""
  config = training.run_config(log_every=10, checkpoint_every=100)
  config.agent = "ppo_lagrangian"
  common.add_ppo_fields(config)
  config.env_name = "PointHazard-v0"
  config.multiplier = "lagrange"  # "lagrange", "pid" or "none" (costs only logged: PPO)
  config.cost_limit = 25.0  # d, on the undiscounted episode cost J_c
  config.cost_gamma = 0.99  # the cost critic's discount
  config.cost_gae_lambda = 0.95  # the cost advantage's GAE lambda
  config.cost_value_coef = 0.5  # weight of the cost critic's value loss
  config.center_cost_advantages = True  # centre A_c per minibatch (OmniSafe)
  config.lagrange_init = 0.001  # λ at the start
  config.lagrange_optimizer = "adam"  # then clamped at 0; "sgd": λ <- [λ + lr (J_c − d)]_+
  config.lagrange_learning_rate = 0.035
  config.lagrange_upper_bound = -1.0  # < 0: no cap (OmniSafe's default has none)
  config.pid_kp = 0.1  # PID gains (Stooke et al. 2020; OmniSafe CPPOPID)
  config.pid_ki = 0.01
  config.pid_kd = 0.01
  config.pid_delay = 10  # updates between the derivative's two cost EMAs
  config.pid_p_ema_alpha = 0.95  # EMA factor of the error (P term)
  config.pid_d_ema_alpha = 0.95  # EMA factor of the cost (D term)
  config.pid_normalisation = "sum"  # "sum", "diff" or "none" (`safety.lagrangian_combine`)
  config.pid_penalty_max = 100.0  # λ's cap, with pid_normalisation="none" only
  config.shield = "none"  # or "cbf": project every action onto the CBF-safe set (the shield)
  config.shield_decay = 0.3  # the discrete-time CBF's decay γ_cbf in (0, 1]
  config.shield_margin = 0.03  # robustness margin added to each hazard radius
  return config


def shielded_config() -> ml_collections.ConfigDict:
  """Shielded PPO (the module docstring): the CBF shield on, no multiplier."""
  config = get_config()
  config.shield = "cbf"
  config.multiplier = "none"
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """PPO's checks, then the safety fields; raises `ConfigError` naming the first bad field."""
  common.validate_ppo_fields(config, num_devices)
  checks.one_of(config, "multiplier", MULTIPLIERS)
  checks.one_of(config, "lagrange_optimizer", LAGRANGE_OPTIMIZERS)
  checks.one_of(config, "pid_normalisation", ("sum", "diff", "none"))
  checks.one_of(config, "shield", SHIELDS)
  checks.non_negative(config, "cost_limit", "cost_value_coef", "lagrange_init", "pid_kp")
  checks.non_negative(config, "pid_ki", "pid_kd", "pid_penalty_max", "shield_margin")
  checks.positive(config, "lagrange_learning_rate")
  checks.positive_int(config, "pid_delay")
  checks.in_unit_interval(config, "cost_gamma", "cost_gae_lambda", "shield_decay")
  for field in ("pid_p_ema_alpha", "pid_d_ema_alpha"):
    value = config[field]
    if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
      raise checks.ConfigError(f"config.{field}: expected a number in [0, 1), got {value!r}")
  if config.shield != "none":
    if config.env_name not in SHIELDABLE_ENVS:
      raise checks.ConfigError(
        f"config.shield: the CBF shield needs one of "
        f"{list(SHIELDABLE_ENVS)}, got env_name {config.env_name!r}"
      )
    if config.env_kwargs.get("dynamics", "velocity") != "velocity":
      raise checks.ConfigError(
        "config.shield: the CBF shield assumes single-integrator "
        "dynamics, got env_kwargs.dynamics "
        f"{config.env_kwargs.get('dynamics')!r}"
      )
    if not 0.0 < config.shield_decay:
      raise checks.ConfigError(
        f"config.shield_decay: expected a number in (0, 1], got {config.shield_decay!r}"
      )
  env, env_params = make_env(config)
  if not sw.reports_cost(env.env, env_params):
    raise checks.ConfigError(
      f"config.env_name: expected an environment reporting info['cost'], got {env.env.name!r}"
    )


# ----------------------------------------------------------------------------------------------
# The environment seen by the learner: costs (and shield interventions) in the observation.
# ----------------------------------------------------------------------------------------------


def point_hazard_shield(
  env_state, action: Array, params, *, decay: float, margin: float
) -> tuple[Array, Array]:
  """CBF shield for PointHazard: the executed action and `intervened` (per-example: `action`
  float `[2]`), `safety.circle_cbf_shield` at the robot's position among the state's hazards,
  each radius inflated by `margin`."""
  centers, radii = point_hazard.hazards(env_state, params)
  return safety.circle_cbf_shield(
    env_state.position, action, centers, radii, dt=params.dt, gamma=decay, margin=margin
  )


def make_env(config):
  """`(SafetyWrapper, env_params)` for `config.env_name` (`safety_wrapper.make`), shielded by
  `point_hazard_shield` if `config.shield == "cbf"`."""
  shield_fn = None
  if config.shield == "cbf":
    shield_fn = functools.partial(
      point_hazard_shield, decay=float(config.shield_decay), margin=float(config.shield_margin)
    )
  return sw.make(config.env_name, config.env_kwargs, shield_fn)


# ----------------------------------------------------------------------------------------------
# The agent.
# ----------------------------------------------------------------------------------------------


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
    network = common.actor_critic(env_spec, config)
    cost_network = StateValue(tuple(config.hidden_sizes), config.activation)
    actor_key, cost_key, key = jax.random.split(key, 3)
    shape = env_spec.observation_shape
    params = {
      "actor_critic": common.init_params(network, actor_key, shape),
      "cost_critic": common.init_params(cost_network, cost_key, shape),
    }
    tx = common.ppo_optimizer(
      config, training.num_updates(config.total_timesteps, config.num_envs * config.num_steps)
    )
    multiplier = initial_multiplier(config)
    return cls(
      params=params,
      opt_state=tx.init(params),
      multiplier=multiplier,
      multiplier_opt_state=_multiplier_tx(config).init(multiplier.lam),
      key=key,
      network=network,
      cost_network=cost_network,
      tx=tx,
      config=config,
    )

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
        self.multiplier,
        episode_cost,
        cost_limit=config.cost_limit,
        kp=config.pid_kp,
        ki=config.pid_ki,
        kd=config.pid_kd,
        p_ema_alpha=config.pid_p_ema_alpha,
        d_ema_alpha=config.pid_d_ema_alpha,
        normalisation=config.pid_normalisation,
        penalty_max=config.pid_penalty_max,
      )
      opt_state = self.multiplier_opt_state
    elif config.lagrange_optimizer == "sgd":
      new = safety.lagrange_update(
        self.multiplier,
        episode_cost,
        cost_limit=config.cost_limit,
        learning_rate=config.lagrange_learning_rate,
        upper_bound=_upper_bound(config),
      )
      opt_state = self.multiplier_opt_state
    else:
      new, opt_state = safety.lagrange_update_with_optimizer(
        self.multiplier,
        self.multiplier_opt_state,
        episode_cost,
        _multiplier_tx(config),
        cost_limit=config.cost_limit,
        upper_bound=_upper_bound(config),
      )
    keep = lambda old, updated: jnp.where(valid, updated, old)
    return self.replace(
      multiplier=jax.tree.map(keep, self.multiplier, new),
      multiplier_opt_state=jax.tree.map(keep, self.multiplier_opt_state, opt_state),
    )

  def update(self, batch: CostBatch) -> tuple["PPOLagrangianAgent", dict[str, Array]]:
    """`update_epochs` passes of shuffled minibatch steps at the current multiplier."""
    config = self.config
    return common.minibatch_epochs(
      self,
      batch,
      _minibatch_step,
      config.num_minibatches,
      config.update_epochs,
      config.shuffle_shards,
      config.num_envs,
    )


def initial_multiplier(config):
  if config.multiplier == "pid":
    return safety.pid_lagrange_init(
      lam_init=float(config.lagrange_init), delay=int(config.pid_delay)
    )
  if config.multiplier == "none":
    return safety.lagrange_init(0.0)
  return safety.lagrange_init(float(config.lagrange_init))


def _upper_bound(config) -> Optional[float]:
  return None if config.lagrange_upper_bound < 0 else float(config.lagrange_upper_bound)


def _multiplier_tx(config) -> optax.GradientTransformation:
  if config.multiplier == "lagrange" and config.lagrange_optimizer == "adam":
    return optax.adam(config.lagrange_learning_rate)
  return optax.identity()


def ppo_lagrangian_objective(
  params: PyTree, network: nn.Module, cost_network: nn.Module, batch: CostBatch, lam: Array, config
) -> tuple[Array, dict[str, Array]]:
  """PPO's loss (`policy_gradient.ppo_loss`) on `(A_r - lam A_c) / (1 + lam)` plus the cost
  critic's value loss.

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
  dist, value = network.apply(params["actor_critic"], batch.reward.obs)
  loss, parts = pg.ppo_loss(
    dist.log_prob(batch.reward.action),
    batch.reward.log_prob,
    combined,
    value,
    batch.reward.value,
    batch.reward.target,
    dist.entropy(),
    clip_epsilon=config.clip_epsilon,
    clip_value=config.clip_value,
    value_coef=config.value_coef,
    entropy_coef=config.entropy_coef,
  )
  cost_value = cost_network.apply(params["cost_critic"], batch.reward.obs)
  clip = config.clip_epsilon if config.clip_value else None
  cost_loss = pg.value_loss(
    cost_value, batch.cost_target, batch.cost_value, clip_epsilon=clip
  ).mean()
  total = loss + config.cost_value_coef * cost_loss
  return total, {**parts._asdict(), "loss": total, "cost_value_loss": cost_loss}


def _minibatch_step(agent: PPOLagrangianAgent, minibatch: CostBatch):
  return common.gradient_step(
    agent,
    ppo_lagrangian_objective,
    agent.network,
    agent.cost_network,
    minibatch,
    agent.lam,
    agent.config,
  )


# ----------------------------------------------------------------------------------------------
# The run.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: PPOLagrangianAgent
  env: EnvCarry  # per-environment state of the safety wrapper: sharded along the data axis
  key: Array
  update: Array  # int32 count of updates done


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
  advantage = common.per_environment_gae(
    traj.reward, config.gamma * not_terminated, value, next_value, traj.done, config.gae_lambda
  )
  cost_advantage = common.per_environment_gae(
    traj.next_obs.cost,
    config.cost_gamma * not_terminated,
    cost_value,
    next_cost_value,
    traj.done,
    config.cost_gae_lambda,
  )
  batch = CostBatch(
    reward=common.ppo_fields(obs, traj.action, log_prob, value, advantage),
    cost_value=cost_value,
    cost_advantage=cost_advantage,
    cost_target=cost_advantage + cost_value,
  )
  # packed (one all-gather on a mesh) when every device gathers the whole batch anyway
  return common.flatten_time_major(batch, packed=config.shuffle_shards == 1)


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one update: rollout, multiplier step, GAEs, PPO epochs."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = make_env(config)
  env_spec = envs.spec(env.env, env_params)
  steps_per_update = config.num_envs * config.num_steps
  actor_critic = common.actor_critic(env_spec, config)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = PPOLagrangianAgent.create(agent_key, env_spec, config)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    return RunnerState(agent=agent, env=carry, key=key, update=jnp.zeros((), jnp.int32))

  def policy(params, obs, noise):
    dist, value = actor_critic.apply(params["actor_critic"], obs.obs)
    action, log_prob = sample_with_noise(dist, noise)
    return action, (log_prob, value)

  def noise(key, num_steps):
    return policy_noise(key, (num_steps, config.num_envs, env_spec.action_dim), env_spec.discrete)

  def step(state: RunnerState):
    key, rollout_key = jax.random.split(state.key)
    carry, traj = rollout.rollout(
      env,
      env_params,
      policy,
      state.agent.params,
      state.env,
      rollout_key,
      config.num_steps,
      unroll=config.rollout_unroll,
      noise_fn=noise,
    )
    episode_cost, valid = sw.mean_episode_cost(traj)
    agent = state.agent.update_multiplier(episode_cost, valid)
    agent, metrics = agent.update(make_batch(agent, traj, config))
    metrics.update(rollout.rollout_statistics(traj))
    metrics.update(sw.safety_statistics(traj))
    metrics["lagrange_multiplier"] = agent.lam
    return RunnerState(agent=agent, env=carry, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    def greedy(params, obs, _):
      dist = actor_critic.apply(params["actor_critic"], obs.obs, method=ActorCritic.policy)
      return dist.mode(), None

    return sw.evaluate_with_cost(
      env,
      env_params,
      greedy,
      state.agent.params,
      key,
      config.eval_episodes,
      env_params.max_steps_in_episode,
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
  """`train(key) -> (final RunnerState, per-update metrics)`: the whole run as one program."""
  return training.whole_run(make_learner(config))
