"""Pieces the replay-based value learners share (`dqn`, `qmix`, `gmah`): the ε schedule, the
optimizer, the target network's update, the config checks of those fields, and the gradient steps
that wait for `learning_starts`; for the multi-agent learners (`qmix`, `gmah`), the agent ids,
the mixer's state, VDN's and QMIX's mixing and their TD loss on Q_tot.

Mnih et al., "Human-level control through deep reinforcement learning", Nature 518, 2015: ε
annealed linearly, a periodically updated target network, experience replay. Sunehag et al. 2017
(VDN, arXiv:1706.05296) and Rashid et al. 2018 (QMIX, arXiv:1803.11485): a team value mixed from
per-agent values of one shared network whose input carries the agent's id.
"""

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from hrljax import config_checks as checks
from hrljax import envs, replay, training
from hrljax.losses import value_based
from hrljax.networks.mixers import QMixHypernetwork
from hrljax.types import Array, PyTree


def validate_value_fields(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first shared value-learning field that cannot run."""
  checks.positive_int(
    config,
    "total_timesteps",
    "num_envs",
    "num_steps",
    "updates_per_step",
    "buffer_size",
    "batch_size",
    "target_update_interval",
    "eval_episodes",
    "rollout_unroll",
  )
  checks.non_negative_int(config, "learning_starts", "epsilon_decay_steps")
  checks.positive(config, "learning_rate", "adam_eps", "huber_delta")
  checks.non_negative(config, "max_grad_norm")
  checks.in_unit_interval(config, "gamma", "epsilon_start", "epsilon_end")
  tau = config.tau
  if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0.0 < tau <= 1.0:
    raise checks.ConfigError(
      f"config.tau: expected a number in (0, 1] (1: copy the online network), got {tau!r}"
    )
  checks.one_of(config, "loss_type", value_based.LOSS_TYPES)
  checks.one_of(config, "optimizer", ("adam", "sgd"))
  checks.divisible(config, "num_envs", num_devices, "the device count")
  checks.at_least(
    config,
    "total_timesteps",
    config.num_envs * config.num_steps,
    "one Learner step of num_envs * num_steps",
  )


def epsilon(env_steps: Array, config) -> Array:
  """ε of the behaviour policy after `env_steps` environment steps: linear from `epsilon_start`
  to `epsilon_end` over `epsilon_decay_steps`, then constant (Mnih et al. 2015; PureJaxRL's and
  CleanRL's `linear_schedule`)."""
  start, end = config.epsilon_start, config.epsilon_end
  if config.epsilon_decay_steps == 0:
    return jnp.full(jnp.shape(env_steps), end, jnp.float32)
  fraction = jnp.clip(jnp.asarray(env_steps, jnp.float32) / config.epsilon_decay_steps, 0.0, 1.0)
  return jnp.asarray(start + (end - start) * fraction, jnp.float32)


def epsilon_greedy_noise(key: Array, shape: tuple, num_actions: int) -> tuple[Array, Array]:
  """The ε-greedy draws of a whole rollout at once: a uniform number and a random action per
  entry of `shape` (steps, environments[, agents]); one batched draw instead of one per step."""
  uniform_key, action_key = jax.random.split(key)
  return (
    jax.random.uniform(uniform_key, shape),
    jax.random.randint(action_key, shape, 0, num_actions, dtype=jnp.int32),
  )


def make_optimizer(config) -> optax.GradientTransformation:
  """Adam (or SGD) with the learning rate injected (`optax.inject_hyperparams`, so that a sweep
  sets it per member), after a global-norm clip when `max_grad_norm > 0`."""

  def optimizer(learning_rate):
    if config.optimizer == "sgd":
      return optax.sgd(learning_rate)
    return optax.adam(learning_rate, eps=config.adam_eps)

  tx = optax.inject_hyperparams(optimizer)(learning_rate=config.learning_rate)
  if config.max_grad_norm > 0:
    tx = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), tx)
  return tx


def update_target(
  params: PyTree, target_params: PyTree, num_updates: Array, config
) -> tuple[PyTree, Array]:
  """The target parameters after gradient step `num_updates` (counted from 1): moved towards
  `params` by Polyak averaging with rate `tau` (1.0 copies, the paper) every
  `target_update_interval` gradient steps, else unchanged. Returns them and whether they moved."""
  if config.tau == 1.0:
    moved = params
  else:
    moved = optax.incremental_update(params, target_params, config.tau)
  update_now = num_updates % config.target_update_interval == 0
  new_target = jax.tree.map(lambda new, old: jnp.where(update_now, new, old), moved, target_params)
  return new_target, update_now


def gradient_steps_after_warmup(
  update: Callable[[PyTree, PyTree], tuple[PyTree, dict]],
  agent: PyTree,
  buffer: replay.ReplayBuffer,
  key: Array,
  learning: Array,
  config,
) -> tuple[PyTree, dict[str, Array]]:
  """`updates_per_step` calls of `update(agent, batch)` on batches of `batch_size` sampled from
  `buffer` (or a tuple of buffers: a tuple of batches, `sample_batches`) when `learning` (a bool scalar: `learning_starts` environment steps are in), else the
  agent unchanged; the metrics are averaged over the steps (zeros before learning starts)."""

  def gradient_steps(agent, buffer, key):
    def one(agent, key):
      return update(agent, sample_batches(buffer, key, config.batch_size))

    agent, metrics = jax.lax.scan(one, agent, jax.random.split(key, config.updates_per_step))
    return agent, jax.tree.map(jnp.mean, metrics)

  return training.when(learning, gradient_steps, agent, buffer, key)


def sample_batches(buffer, key: Array, batch_size: int) -> PyTree:
  """A batch of `batch_size` from `buffer`, or from each buffer of a tuple (one key each)."""
  if isinstance(buffer, replay.ReplayBuffer):
    return replay.sample(buffer, key, batch_size)
  keys = jax.random.split(key, len(buffer))
  return tuple(replay.sample(b, k, batch_size) for b, k in zip(buffer, keys))


def epsilon_greedy(q: Array, uniform: Array, random_choice: Array, eps: Array) -> Array:
  """int32 `[...]`: the argmax of `q [..., A]`, or `random_choice` where `uniform < eps`."""
  greedy = jnp.argmax(q, axis=-1)
  return jnp.where(uniform < eps, random_choice, greedy).astype(jnp.int32)


def greedy_values(q_target: Array, q_selector: Array) -> Array:
  """`q_target [..., A]` at the argmax of `q_selector [..., A]`: `[...]` (double Q when the
  selector is the online network, Q-learning's max when it is `q_target` itself)."""
  choice = jnp.argmax(q_selector, axis=-1)
  return jnp.take_along_axis(q_target, choice[..., None], axis=-1)[..., 0]


# ----------------------------------------------------------------------------------------------
# Multi-agent value mixing (qmix, gmah)
# ----------------------------------------------------------------------------------------------


def validate_mixer_fields(config: ml_collections.ConfigDict, mixers: tuple) -> None:
  """Raises `ConfigError` naming the first mixer field (`mixer`, its sizes) that cannot run."""
  checks.one_of(config, "mixer", mixers)
  checks.positive_int(config, "mixer_embed_dim")
  checks.positive(config, "mixer_init_scale")
  checks.non_negative_int(config, "hypernet_hidden")


def multi_agent_spec(config: ml_collections.ConfigDict) -> tuple:
  """`(env, env_params, spec)` of `config.env_name`; `ConfigError` naming `env_name` unless it
  is a multi-agent environment with discrete actions (observations `[n_agents, obs_dim]`)."""
  env, env_params = envs.make(config.env_name, **config.env_kwargs)  # unknown names fail here
  spec = envs.spec(env, env_params)
  if not hasattr(env, "num_agents") or len(spec.observation_shape) != 2 or not spec.discrete:
    raise checks.ConfigError(
      f"config.env_name: expected a multi-agent environment with discrete actions "
      f"(observations [n_agents, obs_dim], e.g. MPE_simple_spread_v3), got {config.env_name!r} "
      f"with {spec}"
    )
  return env, env_params, spec


def with_agent_ids(obs: Array) -> Array:
  """`[..., N, d]` observations with each agent's one-hot id appended: `[..., N, d + N]`."""
  num_agents = obs.shape[-2]
  ids = jnp.broadcast_to(jnp.eye(num_agents, dtype=obs.dtype), obs.shape[:-1] + (num_agents,))
  return jnp.concatenate([obs, ids], axis=-1)


def mixer_state(obs: Array) -> Array:
  """The global state the mixer reads: the agents' observations `[..., N, d]` concatenated."""
  return obs.reshape(obs.shape[:-2] + (-1,))


def make_mixer(num_agents: int, config) -> nn.Module | None:
  """QMIX's hypernetwork for `config.mixer == "qmix"`; None for a mixer without parameters."""
  if config.mixer != "qmix":
    return None
  return QMixHypernetwork(
    num_agents=num_agents,
    embed_dim=config.mixer_embed_dim,
    hypernet_hidden=config.hypernet_hidden,
    init_scale=config.mixer_init_scale,
  )


def init_mixer(mixer: nn.Module | None, key: Array, state_dim: int) -> PyTree:
  """The mixer's parameters (`{}` for VDN's sum)."""
  return {} if mixer is None else mixer.init(key, jnp.zeros((state_dim,)))


def mix(mixer: nn.Module | None, mixer_params: PyTree, q_agents: Array, state: Array) -> Array:
  """Q_tot `[...]` of per-agent values `[..., N]` at global states `[..., S]`: VDN's sum
  (`mixer` None) or QMIX's `value_based.monotonic_mix` of the hypernetwork's outputs."""
  if mixer is None:
    return jnp.sum(q_agents, axis=-1)
  return value_based.monotonic_mix(q_agents, *mixer.apply(mixer_params, state))


def mixed_td_losses(
  mixer: nn.Module | None,
  mixer_params: PyTree,
  q: Array,
  action: Array,
  state: Array,
  target: Array,
  config,
) -> tuple[Array, Array, Array]:
  """`(losses, q_tot, td_error)`, each `[B]`: the TD loss of Q_tot at the agents' chosen
  actions `action [B, N]` (values `q [B, N, A]`, global states `state [B, S]`) against `target
  [B]`; `value_based.qmix_loss` for QMIX, DQN's loss on the summed value for VDN."""
  if mixer is None:
    q_tot = jnp.sum(jnp.take_along_axis(q, action[..., None], axis=-1)[..., 0], axis=-1)
    # Σ_i Q_i is a single joint value: DQN's TD loss with one "action" and y as its target.
    losses, extras = td_losses_to_targets(
      q_tot[:, None], jnp.zeros_like(q_tot, jnp.int32), target, config
    )
    return losses, q_tot, extras.td_error
  kwargs = {"loss_type": config.loss_type, "huber_delta": config.huber_delta}
  w1, b1, w2, b2 = mixer.apply(mixer_params, state)
  qmix = lambda *args: value_based.qmix_loss(*args, **kwargs)
  losses, extras = jax.vmap(qmix)(q, action, w1, b1, w2, b2, target)
  return losses, extras.q_tot, extras.td_error


def td_losses_to_targets(q: Array, action: Array, target: Array, config) -> tuple:
  """DQN's TD loss of `q [..., A]` at `action [...]` against targets `y [...]` that already hold
  their bootstrap (the loss with y as the reward and discount 0): `(losses [...], extras)`.
  Independent learners (one value and target per agent) and VDN's joint value use it."""
  kwargs = {"loss_type": config.loss_type, "huber_delta": config.huber_delta}
  zero = jnp.zeros((), jnp.float32)
  one = lambda q, a, y: value_based.q_learning_loss(q, a, y, zero, jnp.zeros_like(q), **kwargs)
  lead = action.shape
  flat = jax.vmap(one)(q.reshape((-1, q.shape[-1])), action.reshape(-1), target.reshape(-1))
  return jax.tree.map(lambda x: x.reshape(lead), flat)
