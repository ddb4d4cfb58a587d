"""Pieces agents share: one optimizer step, minibatch epochs, network init; the group-relative
agents' outcome advantages, config checks and clipped surrogate of a config; and PPO's
hyperparameters, network, batch (per-environment GAE, flattened) and optimizer (the PPO-based
agents: `ppo`, `ppo_lagrangian`).

An agent here is a `flax.struct.PyTreeNode` with fields `params`, `opt_state`, `tx` (an
`optax.GradientTransformation`) and, for shuffled minibatches, `key`.
"""

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from hrljax import config_checks as checks
from hrljax import envs
from hrljax.losses import group_relative as gr
from hrljax.losses import policy_gradient as pg
from hrljax.networks import ActorCritic
from hrljax.types import Array, Batch, PyTree


def apply_gradients(agent: Any, grads: PyTree) -> Any:
  """The agent after one optimizer step on `grads` (params and optimizer state updated)."""
  updates, opt_state = agent.tx.update(grads, agent.opt_state, agent.params)
  return agent.replace(params=optax.apply_updates(agent.params, updates), opt_state=opt_state)


def gradient_step(
  agent: Any, loss_fn: Callable[..., tuple[Array, dict]], *args
) -> tuple[Any, dict[str, Array]]:
  """One optimizer step on `loss_fn(agent.params, *args) -> (loss, metrics)`."""
  grads, metrics = jax.grad(loss_fn, has_aux=True)(agent.params, *args)
  return apply_gradients(agent, grads), metrics


def accumulated_value_and_grad(
  loss_fn: Callable[[PyTree, PyTree], tuple[Array, PyTree]],
  params: PyTree,
  batch: PyTree,
  micro_batches: int,
) -> tuple[tuple[Array, PyTree], PyTree]:
  """`((loss, aux), grads)` of `loss_fn(params, micro_batch) -> (loss, aux)` summed over
  `micro_batches` consecutive equal slices of `batch`'s rows, one slice at a time (`lax.scan`),
  so that the backward pass holds one slice's activations. The sums are the whole batch's values
  when `loss_fn` makes the slices add up (a loss normalised by the whole batch's denominator,
  aux values that are sums or shares of it). With 1 micro-batch it is `jax.value_and_grad`."""
  value_and_grad = jax.value_and_grad(loss_fn, has_aux=True)
  if micro_batches == 1:
    return value_and_grad(params, batch)
  slices = jax.tree.map(lambda x: x.reshape((micro_batches, -1) + x.shape[1:]), batch)
  first = jax.tree.map(lambda x: x[0], slices)
  zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(value_and_grad, params, first))

  def add_slice(total, micro_batch):
    return jax.tree.map(jnp.add, total, value_and_grad(params, micro_batch)), None

  return jax.lax.scan(add_slice, zeros, slices)[0]


def minibatch_epochs(
  agent: Any,
  batch: PyTree,
  minibatch_step: Callable[[Any, PyTree], tuple[Any, dict]],
  num_minibatches: int,
  update_epochs: int,
  shuffle_shards: int = 1,
  num_envs: int = 1,
) -> tuple[Any, dict[str, Array]]:
  """`update_epochs` passes over `batch` (leading axis = samples), each a fresh shuffle split into
  `num_minibatches` equal minibatches, one `minibatch_step` each; metrics averaged over all steps.

  The shuffle key is split off `agent.key`, so the agent's key advances once per epoch.

  `shuffle_shards = 1` shuffles the whole batch (a multi-device run then computes exactly the
  one-device update, but every device gathers the whole batch). With `shuffle_shards = k` the
  batch, a flattened `[T, num_envs]` rollout, is split into k shards of `num_envs / k`
  consecutive environments (a device's share when k is the device count), each shard is
  permuted on its own (`shard_permutations`), and every minibatch takes an equal slice of every
  shard: a device keeps its own data and only the gradient is reduced across devices. The
  result is the same for any number of devices that divides k.
  """
  num_samples = jax.tree.leaves(batch)[0].shape[0]
  if shuffle_shards > 1:
    batch = jax.tree.map(lambda x: to_shard_major(x, shuffle_shards, num_envs), batch)

  def epoch(agent, _):
    key, perm_key = jax.random.split(agent.key)
    if shuffle_shards == 1:
      perm = jax.random.permutation(perm_key, num_samples)
      minibatches = jax.tree.map(
        lambda x: jnp.take(x, perm, axis=0).reshape((num_minibatches, -1) + x.shape[1:]), batch
      )
    else:
      perms = shard_permutations(perm_key, shuffle_shards, num_samples // shuffle_shards)
      minibatches = jax.tree.map(lambda x: shard_minibatches(x, perms, num_minibatches), batch)
    return jax.lax.scan(minibatch_step, agent.replace(key=key), minibatches)

  agent, metrics = jax.lax.scan(epoch, agent, None, length=update_epochs)
  return agent, jax.tree.map(jnp.mean, metrics)


def to_shard_major(x: Array, shards: int, num_envs: int) -> Array:
  """A flattened `[T * num_envs, ...]` rollout as `[shards, T * num_envs / shards, ...]`: shard s
  holds environments `s * num_envs / shards` up to the next shard's, time-major. The shard axis
  is the environment axis's major part, so it keeps the environments' device sharding."""
  per_shard = num_envs // shards
  x = x.reshape((-1, shards, per_shard) + x.shape[1:])  # [T, shards, envs per shard, ...]
  x = jnp.swapaxes(x, 0, 1)  # [shards, T, envs per shard, ...]
  return x.reshape((shards, -1) + x.shape[3:])


def shard_permutations(key: Array, shards: int, per_shard: int) -> Array:
  """One permutation of `range(per_shard)` per shard, `[shards, per_shard]`, shard s's drawn with
  `fold_in(key, s)`."""
  return jax.vmap(lambda s: jax.random.permutation(jax.random.fold_in(key, s), per_shard))(
    jnp.arange(shards)
  )


def shard_minibatches(x: Array, perms: Array, num_minibatches: int) -> Array:
  """`[num_minibatches, samples / num_minibatches, ...]` from a shard-major `x` `[shards,
  per_shard, ...]`: each shard permuted by its row of `perms` (a gather within the shard, so a
  device reads only its own data), and minibatch m the m-th slice of every shard, shard by shard."""
  shards = x.shape[0]
  x = jax.vmap(lambda shard, perm: jnp.take(shard, perm, axis=0))(x, perms)
  x = x.reshape((shards, num_minibatches, -1) + x.shape[2:])
  x = jnp.swapaxes(x, 0, 1)  # [minibatch, shard, slice, ...]
  return x.reshape((num_minibatches, -1) + x.shape[3:])


def init_params(network: nn.Module, key: Array, observation_shape: tuple[int, ...]) -> PyTree:
  """Parameters of `network` for a batch of one float32 observation of `observation_shape`."""
  return network.init(key, jnp.zeros((1,) + tuple(observation_shape), jnp.float32))


def outcome_advantages(returns: Array, group_ids: Array, config) -> Array:
  """Group-relative advantages `[N]` of episode returns (`gr.outcome_advantages`) with the
  config fields `num_groups`, `estimator`, `grpo_scale`, `advantage_eps` and `singleton_mode` of
  the group-relative agents (`group_relative`, `token_grpo`)."""
  return gr.outcome_advantages(
    returns,
    group_ids,
    config.num_groups,
    config.estimator,
    scale=config.grpo_scale,
    eps=config.advantage_eps,
    singleton_mode=config.singleton_mode,
  )


GRPO_SCALES = ("group", "batch", "none")  # std of the group-relative z-score
SINGLETON_MODES = ("zero", "raw")  # advantage of a one-row group


def validate_group_relative_fields(
  config, sizes: tuple[str, ...] = (), non_negatives: tuple[str, ...] = ()
) -> None:
  """Raises `ConfigError` naming the first field that cannot run among those the critic-free
  group-relative agents share (`group_relative`, `token_grpo`, `hi_agent`): the positive sizes
  (the agent's `sizes` after `num_groups`), Adam and clipping, the non-negative coefficients (the
  agent's `non_negatives` first), and the z-score's `grpo_scale` and `singleton_mode`."""
  checks.positive_int(
    config,
    "total_timesteps",
    "num_groups",
    *sizes,
    "update_epochs",
    "num_minibatches",
    "eval_episodes",
    "rollout_unroll",
  )
  checks.positive(config, "learning_rate", "max_grad_norm", "adam_eps")
  checks.non_negative(
    config, *non_negatives, "clip_epsilon", "clip_epsilon_high", "entropy_coef", "advantage_eps"
  )
  checks.one_of(config, "grpo_scale", GRPO_SCALES)
  checks.one_of(config, "singleton_mode", SINGLETON_MODES)


def clipped_surrogate(log_prob: Array, batch: Any, config) -> tuple[Array, pg.SurrogateExtras]:
  """`pg.clipped_surrogate_loss` of `log_prob` against a batch's behaviour `log_prob`, with its
  `advantage` and `mask`, clipped at the config's `clip_epsilon` / `clip_epsilon_high`."""
  return pg.clipped_surrogate_loss(
    log_prob,
    batch.log_prob,
    batch.advantage,
    epsilon=config.clip_epsilon,
    epsilon_high=config.clip_epsilon_high,
    mask=batch.mask,
  )


def per_environment_gae(
  reward: Array, discount: Array, value: Array, next_value: Array, done: Array, gae_lambda: float
) -> Array:
  """GAE (Schulman et al. 2015, arXiv:1506.02438) over each environment's `[T]` slice of `[T, N]`
  rollout arrays (`policy_gradient.generalized_advantage_estimation` per column): advantages
  `[T, N]`. `discount` is gamma times (1 - terminated), so a truncation still bootstraps."""

  def gae(reward, discount, value, next_value, done, lambda_):
    return pg.generalized_advantage_estimation(reward, discount, value, next_value, lambda_, done)

  per_env = jax.vmap(gae, in_axes=(1, 1, 1, 1, 1, None), out_axes=1)
  return per_env(reward, discount, value, next_value, done, gae_lambda)


def ppo_fields(
  obs: PyTree, action: Array, log_prob: Array, value: Array, advantage: Array
) -> Batch:
  """PPO's batch of a `[T, N]` rollout, still `[T, N]`: the value targets `advantage + value`."""
  return Batch(
    obs=obs,
    action=action,
    log_prob=log_prob,
    value=value,
    advantage=advantage,
    target=advantage + value,
  )


def ppo_batch(
  obs: PyTree, action: Array, log_prob: Array, value: Array, advantage: Array, shuffle_shards: int
) -> Batch:
  """PPO's flat batch of a `[T, N]` rollout (`ppo_fields`): every array as `[T * N, ...]` rows
  (time-major).

  With one shuffle shard every minibatch mixes all environments, so on a mesh the whole batch
  comes to every device: its fields cross packed, in one all-gather (`flatten_time_major`). With
  several shards each field keeps its environments' device sharding (`minibatch_epochs`).
  """
  fields = ppo_fields(obs, action, log_prob, value, advantage)
  return flatten_time_major(fields, packed=shuffle_shards == 1)


def flatten_time_major(tree: PyTree, packed: bool = True) -> PyTree:
  """Every leaf `[T, N, ...]` of a rollout as `[T * N, ...]` rows (time-major), exactly as a
  reshape per leaf (which is what `packed=False` does).

  `packed`: the 32-bit leaves are reshaped packed, bit for bit, in one `[T, N, columns]` array.
  With the environments sharded over devices this reshape is where every device gathers the
  batch, so the batch crosses once per update instead of once per field (between CPU processes
  every collective is a round trip through gloo: `experiments/benchmarks/SCALING.md`).
  """
  leaves, treedef = jax.tree.flatten(tree)
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  if not packed:
    return jax.tree.unflatten(treedef, [flat(x) for x in leaves])
  words = [i for i, x in enumerate(leaves) if x.dtype.itemsize == 4]  # the 32-bit leaves
  out = [None if i in words else flat(x) for i, x in enumerate(leaves)]
  if words:
    columns = [jax.lax.bitcast_convert_type(leaves[i], jnp.uint32) for i in words]
    columns = [c.reshape(c.shape[:2] + (-1,)) for c in columns]
    table = flat(jnp.concatenate(columns, axis=-1))
    bounds = np.cumsum([c.shape[-1] for c in columns])[:-1]
    for i, part in zip(words, jnp.split(table, bounds, axis=-1)):
      part = part.reshape(part.shape[:1] + leaves[i].shape[2:])
      out[i] = jax.lax.bitcast_convert_type(part, leaves[i].dtype)
  return jax.tree.unflatten(treedef, out)


def ppo_objective(
  params: PyTree, network: nn.Module, batch: Batch, config
) -> tuple[Array, dict[str, Array]]:
  """The PPO objective on one minibatch (`policy_gradient.ppo_loss`), advantages normalised
  over the minibatch first if `config.normalize_advantages`."""
  dist, value = network.apply(params, batch.obs)
  advantage = batch.advantage
  if config.normalize_advantages:
    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
  loss, parts = pg.ppo_loss(
    dist.log_prob(batch.action),
    batch.log_prob,
    advantage,
    value,
    batch.value,
    batch.target,
    dist.entropy(),
    clip_epsilon=config.clip_epsilon,
    clip_value=config.clip_value,
    value_coef=config.value_coef,
    entropy_coef=config.entropy_coef,
  )
  return loss, {"loss": loss, **parts._asdict()}


def actor_critic(env_spec: envs.EnvSpec, config) -> ActorCritic:
  """PPO's actor-critic (separate torsos for the policy and the value) from `add_ppo_fields`'
  `hidden_sizes` and `activation`."""
  return ActorCritic(
    action_dim=env_spec.action_dim,
    discrete=env_spec.discrete,
    observation_ndim=len(env_spec.observation_shape),
    hidden_sizes=tuple(config.hidden_sizes),
    activation=config.activation,
  )


def add_ppo_fields(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds PPO's hyperparameters to `config`, with PureJaxRL's CartPole-v1 values (the defaults
  of every PPO-based agent), and returns it."""
  config.env_name = "CartPole-v1"
  config.env_kwargs = ml_collections.ConfigDict()
  config.total_timesteps = 500_000
  config.num_envs = 4
  config.num_steps = 128  # rollout length per update
  config.update_epochs = 4
  config.num_minibatches = 4
  config.shuffle_shards = 1  # 1: shuffle the whole batch; k: within k groups of environments
  config.learning_rate = 2.5e-4
  config.anneal_lr = True  # linear decay to 0, stepped once per update (PureJaxRL)
  config.optimizer = "adam"  # or "sgd" (used by the multi-device equivalence tests)
  config.adam_eps = 1e-5
  config.max_grad_norm = 0.5
  config.gamma = 0.99
  config.gae_lambda = 0.95
  config.clip_epsilon = 0.2
  config.clip_value = True  # clip the value update around the old value at clip_epsilon
  config.normalize_advantages = True  # per minibatch
  config.entropy_coef = 0.01
  config.value_coef = 0.5
  config.hidden_sizes = (64, 64)
  config.activation = "tanh"
  config.rollout_unroll = 1  # unrolling was measured: no faster on CPU, slower to compile
  config.eval_episodes = 32
  return config


def validate_ppo_fields(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first PPO field that cannot run."""
  checks.positive_int(
    config,
    "total_timesteps",
    "num_envs",
    "num_steps",
    "update_epochs",
    "num_minibatches",
    "eval_episodes",
    "rollout_unroll",
  )
  checks.positive(config, "learning_rate", "max_grad_norm", "adam_eps")
  checks.non_negative(config, "clip_epsilon", "entropy_coef", "value_coef")
  checks.in_unit_interval(config, "gamma", "gae_lambda")
  checks.one_of(config, "optimizer", ("adam", "sgd"))
  checks.divisible(config, "num_envs", num_devices, "the device count")
  batch = config.num_envs * config.num_steps
  if batch % config.num_minibatches:
    raise checks.ConfigError(
      f"config.num_minibatches: expected a divisor of num_envs * num_steps ({batch}), "
      f"got {config.num_minibatches}"
    )
  checks.positive_int(config, "shuffle_shards")
  checks.divisible(config, "num_envs", config.shuffle_shards, "shuffle_shards")
  per_minibatch_and_shard = batch // (config.num_minibatches * config.shuffle_shards)
  if per_minibatch_and_shard * config.num_minibatches * config.shuffle_shards != batch:
    raise checks.ConfigError(
      f"config.shuffle_shards: expected num_envs * num_steps ({batch}) to split into "
      f"num_minibatches ({config.num_minibatches}) x shuffle_shards equal parts, "
      f"got {config.shuffle_shards}"
    )
  checks.at_least(config, "total_timesteps", batch, "one update of num_envs * num_steps")
  envs.make(config.env_name, **config.env_kwargs)  # unknown names and fields fail here


def ppo_optimizer(config, num_updates: int) -> optax.GradientTransformation:
  """Global-norm clipping, then Adam (or SGD) with PureJaxRL's stepwise linear annealing over
  `num_updates` updates of `num_minibatches * update_epochs` gradient steps each.

  The learning rate is injected (`optax.inject_hyperparams`): the optimizer state holds it as
  `hyperparams["learning_rate"]` (the rate the annealing starts from), which a sweep sets per
  member (`hrljax.sweep.set_hyperparameters`); the numbers are those of the rate as a constant.
  """
  steps_per_update = config.num_minibatches * config.update_epochs

  def optimizer(learning_rate):
    def annealed(count):
      frac = 1.0 - (count // steps_per_update) / num_updates
      return learning_rate * frac

    rate = annealed if config.anneal_lr else learning_rate
    if config.optimizer == "sgd":
      return optax.sgd(rate)
    return optax.adam(rate, eps=config.adam_eps)

  injected = optax.inject_hyperparams(optimizer)(learning_rate=config.learning_rate)
  # One flat vector instead of one small kernel group per parameter leaf: the same arithmetic
  # (clipping and Adam are element-wise given the global norm), fewer kernels per step.
  return optax.flatten(optax.chain(optax.clip_by_global_norm(config.max_grad_norm), injected))
