"""The soft actor-critic learner core that `sac` and `recovery_rl` (its task policy) share.

A shared helper module of `hrljax.agents` (it defines no agent): SAC's hyperparameters and their
checks, the train state `SACAgent` (actor, K critics, target critics, temperature, their
optimizers) with its `create`, `act` and `update`, the networks (also Recovery RL's recovery
policy and risk critic, of other sizes), the behaviour policy with uniform exploration, and the
update loops on replayed batches (`sampled_updates`, `counted_updates`, and `when` for those
that wait for `learning_starts`). The agent itself, with its run, is `hrljax.agents.sac`; the
objectives are `hrljax.losses.soft_actor_critic`; the networks `hrljax.networks.continuous`.

Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905: within one
update the critics step first (Eq. 5), the actor then steps on the updated critics (Eq. 7), and
the temperature steps last on fresh samples of the updated actor (Eq. 18); the critic target and
the actor loss use the temperature from before the update (the order of softlearning and
CleanRL); the target critics follow by Polyak averaging every `target_update_interval` updates.
"""

import math
from typing import Any, Callable, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct
from ml_collections import config_dict

from hrljax import config_checks as checks
from hrljax import envs, replay, training
from hrljax.losses import soft_actor_critic as soft_ac
from hrljax.networks.continuous import (
  QEnsemble,
  TanhGaussianActor,
  action_bound_tuples,
  rescale_action,
)
from hrljax.types import Array, PyTree

# `actor_penalty_fn(obs [B, ...], action [B, |A|]) -> [B]`: an extra per-example actor loss term.
ActorPenaltyFn = Callable[[PyTree, Array], Array]


def add_sac_fields(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds SAC's hyperparameters to `config`, with the paper's values (arXiv:1812.05905, Appendix
  D), and returns it."""
  config.env_name = "Pendulum-v1"
  config.env_kwargs = ml_collections.ConfigDict()
  config.total_timesteps = 1_000_000  # environment steps
  config.num_envs = 1
  config.num_steps = 1  # environment steps per environment per Learner step
  config.updates_per_step = 1  # gradient updates per Learner step
  config.buffer_size = 1_000_000
  config.learning_starts = 1000  # env steps of uniform random actions before any update
  config.batch_size = 256
  config.actor_learning_rate = 3e-4
  config.critic_learning_rate = 3e-4
  config.alpha_learning_rate = 3e-4
  config.optimizer = "adam"  # or "sgd" (multi-device equivalence checks)
  config.gamma = 0.99
  config.tau = 0.005  # Polyak rate of the target critics
  config.target_update_interval = 1  # gradient updates between Polyak averagings
  config.autotune_alpha = True  # the temperature descends J(α) (Eq. 18)
  config.init_alpha = 1.0  # α at the start (fixed when autotune_alpha is False)
  config.target_entropy = config_dict.placeholder(float)  # H̄; None: −action_dim
  config.alpha_loss_form = "alpha"  # or "log_alpha" (`soft_actor_critic.temperature_loss`)
  config.actor_q_reduction = "min"  # or "mean" over the critics
  config.num_critics = 2
  config.hidden_sizes = (256, 256)
  config.activation = "relu"
  config.log_std_min = -20.0  # the actor's log-std clip (softlearning's bounds)
  config.log_std_max = 2.0
  config.rollout_unroll = 1
  config.eval_episodes = 16
  return config


def validate_sac_fields(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first SAC field that cannot run (continuous actions
  needed)."""
  checks.positive_int(
    config,
    "total_timesteps",
    "num_envs",
    "num_steps",
    "updates_per_step",
    "buffer_size",
    "batch_size",
    "target_update_interval",
    "num_critics",
    "eval_episodes",
    "rollout_unroll",
  )
  if (
    isinstance(config.learning_starts, bool)
    or not isinstance(config.learning_starts, int)
    or config.learning_starts < 0
  ):
    raise checks.ConfigError(
      f"config.learning_starts: expected an integer >= 0, got {config.learning_starts!r}"
    )
  checks.positive(
    config, "actor_learning_rate", "critic_learning_rate", "alpha_learning_rate", "init_alpha"
  )
  checks.in_unit_interval(config, "gamma", "tau")
  checks.one_of(config, "optimizer", ("adam", "sgd"))
  checks.one_of(config, "alpha_loss_form", soft_ac.ALPHA_LOSS_FORMS)
  checks.one_of(config, "actor_q_reduction", soft_ac.Q_REDUCTIONS)
  if config.target_entropy is not None and not math.isfinite(config.target_entropy):
    raise checks.ConfigError(
      f"config.target_entropy: expected None (−action_dim) or a finite number, "
      f"got {config.target_entropy!r}"
    )
  if config.log_std_min >= config.log_std_max:
    raise checks.ConfigError(
      f"config.log_std_min: expected less than config.log_std_max "
      f"({config.log_std_max}), got {config.log_std_min!r}"
    )
  checks.divisible(config, "num_envs", num_devices, "the device count")
  checks.at_least(
    config,
    "total_timesteps",
    config.num_envs * config.num_steps,
    "one Learner step of num_envs * num_steps",
  )
  env, env_params = envs.make(config.env_name, **config.env_kwargs)  # unknown names fail here
  if envs.spec(env, env_params).discrete:
    raise checks.ConfigError(
      f"config.env_name: expected an environment with continuous (Box) "
      f"actions, got {config.env_name!r} with discrete actions"
    )


class Transition(NamedTuple):
  """One replayed transition (or a `[B]` batch): what the buffer stores.

  `action` is the normalised action in [-1, 1]^|A| the policy produced; `next_obs` is the true
  successor (before any auto-reset), so a truncated step still bootstraps from it.
  """

  obs: PyTree
  action: Array  # float32 [|A|]
  reward: Array  # float32 []
  terminated: Array  # bool []: natural end, no bootstrap
  next_obs: PyTree


class SACAgent(struct.PyTreeNode):
  """SAC's train state: actor, critics, target critics, temperature, their optimizers, a key."""

  actor_params: PyTree
  critic_params: PyTree
  target_critic_params: PyTree
  log_alpha: Array  # float32 scalar
  actor_opt_state: PyTree
  critic_opt_state: PyTree
  alpha_opt_state: PyTree
  key: Array
  num_updates: Array  # int32: gradient updates done (paces the target averaging)
  actor: nn.Module = struct.field(pytree_node=False)
  critic: nn.Module = struct.field(pytree_node=False)
  actor_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  critic_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  alpha_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  action_low: tuple = struct.field(pytree_node=False)  # environment bounds, one per dimension
  action_high: tuple = struct.field(pytree_node=False)
  target_entropy: float = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(
    cls, key: Array, env_spec: envs.EnvSpec, config, action_bounds: Optional[tuple[Any, Any]] = None
  ) -> "SACAgent":
    """Builds networks and optimizers. `action_bounds = (low, high)` (scalars or `[|A|]`) are the
    environment's action bounds (default [-1, 1]); the policy itself always acts on [-1, 1]."""
    config = ml_collections.FrozenConfigDict(config)
    if env_spec.discrete:
      raise ValueError(f"env_spec: expected continuous actions, got {env_spec}")
    action_dim = env_spec.action_dim
    low, high = action_bound_tuples(action_bounds, action_dim)
    actor, critic = make_networks(env_spec, config)
    actor_key, critic_key, key = jax.random.split(key, 3)
    obs = jnp.zeros((1,) + env_spec.observation_shape, jnp.float32)
    actor_params = actor.init(actor_key, obs)
    critic_params = critic.init(critic_key, obs, jnp.zeros((1, action_dim), jnp.float32))
    log_alpha = jnp.asarray(math.log(config.init_alpha), jnp.float32)
    actor_tx = make_optimizer(config, config.actor_learning_rate)
    critic_tx = make_optimizer(config, config.critic_learning_rate)
    alpha_tx = make_optimizer(config, config.alpha_learning_rate)
    target_entropy = (
      -float(action_dim) if config.target_entropy is None else float(config.target_entropy)
    )
    return cls(
      actor_params=actor_params,
      critic_params=critic_params,
      target_critic_params=critic_params,
      log_alpha=log_alpha,
      actor_opt_state=actor_tx.init(actor_params),
      critic_opt_state=critic_tx.init(critic_params),
      alpha_opt_state=alpha_tx.init(log_alpha),
      key=key,
      num_updates=jnp.zeros((), jnp.int32),
      actor=actor,
      critic=critic,
      actor_tx=actor_tx,
      critic_tx=critic_tx,
      alpha_tx=alpha_tx,
      action_low=low,
      action_high=high,
      target_entropy=target_entropy,
      config=config,
    )

  def act(self, obs: PyTree, key: Array, deterministic: bool = False) -> Array:
    """Environment actions `[..., |A|]` for a batch of observations (the squashed mean if
    `deterministic`)."""
    dist = self.actor.apply(self.actor_params, obs)
    normalized = dist.mode() if deterministic else dist.sample(seed=key)
    return self.to_env_action(normalized)

  def to_env_action(self, normalized: Array) -> Array:
    """Maps actions in [-1, 1]^|A| (trailing axis) affinely onto the environment's bounds."""
    return rescale_action(normalized, self.action_low, self.action_high)

  @property
  def alpha(self) -> Array:
    return jnp.exp(self.log_alpha)

  def update(
    self, batch: Transition, actor_penalty_fn: Optional[ActorPenaltyFn] = None
  ) -> tuple["SACAgent", dict[str, Array]]:
    """One gradient step of the critics, the actor and the temperature on a `[B]` batch, then
    Polyak averaging of the target critics every `target_update_interval` updates.

    `actor_penalty_fn(obs, action) -> [B]`, if given, adds the batch mean of its value at the
    actor's reparameterised action (normalised, [-1, 1]^|A|) to the actor loss, so that its
    gradient reaches the actor through the action (a Lagrangian constraint term such as Recovery
    RL's LR baseline, `recovery_rl.task_risk_penalty_fn`); its mean is logged as
    "actor_penalty". Without it the update is the paper's, unchanged."""
    config = self.config
    key, target_key, actor_key, alpha_key = jax.random.split(self.key, 4)
    alpha = self.alpha
    reward = jnp.asarray(batch.reward, jnp.float32)
    discount = config.gamma * (1.0 - jnp.asarray(batch.terminated, jnp.float32))

    next_dist = self.actor.apply(self.actor_params, batch.next_obs)
    next_action, next_log_prob = next_dist.sample_and_log_prob(seed=target_key)
    next_q = self.critic.apply(self.target_critic_params, batch.next_obs, next_action)
    target = soft_ac.soft_q_target(reward, discount, next_q, next_log_prob, alpha)

    def critic_objective(params):
      return soft_ac.critic_loss(self.critic.apply(params, batch.obs, batch.action), target)

    (q_loss, q_extras), grads = jax.value_and_grad(critic_objective, has_aux=True)(
      self.critic_params
    )
    critic_params, critic_opt_state = optimizer_step(
      self.critic_tx, grads, self.critic_opt_state, self.critic_params
    )

    def actor_objective(params):
      dist = self.actor.apply(params, batch.obs)
      action, log_prob = dist.sample_and_log_prob(seed=actor_key)
      q_value = self.critic.apply(critic_params, batch.obs, action)
      loss, extras = soft_ac.actor_loss(log_prob, q_value, alpha, config.actor_q_reduction)
      if actor_penalty_fn is None:
        return loss, (extras, None)
      penalty = jnp.mean(actor_penalty_fn(batch.obs, action))
      return loss + penalty, (extras, penalty)

    (pi_loss, (pi_extras, penalty)), grads = jax.value_and_grad(actor_objective, has_aux=True)(
      self.actor_params
    )
    actor_params, actor_opt_state = optimizer_step(
      self.actor_tx, grads, self.actor_opt_state, self.actor_params
    )

    _, fresh_log_prob = self.actor.apply(actor_params, batch.obs).sample_and_log_prob(
      seed=alpha_key
    )

    def alpha_objective(log_alpha):
      return soft_ac.temperature_loss(
        log_alpha, fresh_log_prob, self.target_entropy, config.alpha_loss_form
      )

    (a_loss, _), grad = jax.value_and_grad(alpha_objective, has_aux=True)(self.log_alpha)
    log_alpha, alpha_opt_state = self.log_alpha, self.alpha_opt_state
    if config.autotune_alpha:
      log_alpha, alpha_opt_state = optimizer_step(self.alpha_tx, grad, alpha_opt_state, log_alpha)

    num_updates = self.num_updates + 1
    averaged = optax.incremental_update(critic_params, self.target_critic_params, config.tau)
    average_now = num_updates % config.target_update_interval == 0
    target_critic_params = jax.tree.map(
      lambda new, old: jnp.where(average_now, new, old), averaged, self.target_critic_params
    )

    agent = self.replace(
      actor_params=actor_params,
      critic_params=critic_params,
      target_critic_params=target_critic_params,
      log_alpha=log_alpha,
      actor_opt_state=actor_opt_state,
      critic_opt_state=critic_opt_state,
      alpha_opt_state=alpha_opt_state,
      key=key,
      num_updates=num_updates,
    )
    metrics = {
      "critic_loss": q_loss,
      "actor_loss": pi_loss,
      "alpha_loss": a_loss,
      "alpha": alpha,
      "entropy": -jnp.mean(pi_extras.log_prob),
      "q_value": jnp.mean(q_extras.q_value),
      "td_error_abs": jnp.mean(jnp.abs(q_extras.td_error)),
    }
    if penalty is not None:
      metrics["actor_penalty"] = penalty
    return agent, metrics


def make_networks(
  env_spec: envs.EnvSpec,
  config,
  hidden_sizes: Optional[tuple] = None,
  num_critics: Optional[int] = None,
) -> tuple[TanhGaussianActor, QEnsemble]:
  """The actor on [-1, 1]^|A| and the K-critic ensemble, of the config's `hidden_sizes` and
  `num_critics` unless given (Recovery RL's recovery policy and twin risk critic)."""
  observation_ndim = len(env_spec.observation_shape)
  hidden = tuple(config.hidden_sizes if hidden_sizes is None else hidden_sizes)
  actor = TanhGaussianActor(
    action_dim=env_spec.action_dim,
    hidden_sizes=hidden,
    activation=config.activation,
    observation_ndim=observation_ndim,
    log_std_min=config.log_std_min,
    log_std_max=config.log_std_max,
  )
  critic = QEnsemble(
    num_members=config.num_critics if num_critics is None else num_critics,
    hidden_sizes=hidden,
    activation=config.activation,
    observation_ndim=observation_ndim,
  )
  return actor, critic


def make_optimizer(config, learning_rate: float) -> optax.GradientTransformation:
  return optax.sgd(learning_rate) if config.optimizer == "sgd" else optax.adam(learning_rate)


def optimizer_step(
  tx: optax.GradientTransformation,
  grads: PyTree,
  opt_state: PyTree,
  params: PyTree,
  enabled: Optional[Array] = None,
) -> tuple[PyTree, PyTree]:
  """One step of `tx` on `params`: `(new params, new optimizer state)`; where the traced bool
  `enabled` is given and false, both as they were."""
  updates, new_state = tx.update(grads, opt_state, params)
  new_params = optax.apply_updates(params, updates)
  if enabled is None:
    return new_params, new_state
  keep = lambda new, old: jnp.where(enabled, new, old)
  return jax.tree.map(keep, new_params, params), jax.tree.map(keep, new_state, opt_state)


def behaviour_action(
  actor: TanhGaussianActor, actor_params: PyTree, obs: PyTree, key: Array, explore: Array
) -> Array:
  """The acting policy's normalised action `[B, |A|]`: a sample of the actor, or, where the
  traced bool `explore` holds (the first `learning_starts` steps), uniform in [-1, 1]^|A|."""
  sample_key, uniform_key = jax.random.split(key)
  normalized = actor.apply(actor_params, obs).sample(seed=sample_key)
  uniform = jax.random.uniform(uniform_key, normalized.shape, minval=-1.0, maxval=1.0)
  return jnp.where(explore, uniform, normalized)


# ----------------------------------------------------------------------------------------------
# The update loops of the off-policy learners: replayed batches, averaged metrics.
# ----------------------------------------------------------------------------------------------

# `update_fn(agent, batch, key) -> (agent, metrics)`: one update on a replayed `[B]` batch.
UpdateFn = Callable[[PyTree, PyTree, Array], tuple[PyTree, dict]]


def sampled_updates(
  update_fn: UpdateFn,
  agent: PyTree,
  buffer: replay.ReplayBuffer,
  key: Array,
  batch_size: int,
  num_updates: int,
) -> tuple[PyTree, dict]:
  """`num_updates` calls of `update_fn` in a `lax.scan`, each on a batch of `batch_size` sampled
  from `buffer` with its own key (which `update_fn` receives as well, to fold for more draws);
  the metrics averaged over the calls."""

  def one(agent, key):
    return update_fn(agent, replay.sample(buffer, key, batch_size), key)

  agent, metrics = jax.lax.scan(one, agent, jax.random.split(key, num_updates))
  return agent, jax.tree.map(jnp.mean, metrics)


def counted_updates(
  update_fn: UpdateFn,
  agent: PyTree,
  buffer: replay.ReplayBuffer,
  key: Array,
  batch_size: int,
  count: Array,
) -> tuple[PyTree, dict]:
  """`count` (a traced int) calls of `update_fn` in a `lax.fori_loop`, each on a batch of
  `batch_size` sampled from `buffer`; the metrics averaged over the calls (zeros for none). One
  compiled loop serves every count, such as a pre-training burst and the regular updates."""
  metric_shapes = jax.eval_shape(update_fn, agent, replay.sample(buffer, key, batch_size), key)[1]

  def one(i, carry):
    agent, sums = carry
    sample_key, update_key = jax.random.split(jax.random.fold_in(key, i))
    agent, metrics = update_fn(agent, replay.sample(buffer, sample_key, batch_size), update_key)
    return agent, jax.tree.map(jnp.add, sums, metrics)

  agent, sums = jax.lax.fori_loop(0, count, one, (agent, training.zeros_like_shapes(metric_shapes)))
  return agent, jax.tree.map(lambda x: x / jnp.maximum(count, 1), sums)
