"""PPO: the flat on-policy baseline every hierarchical agent is compared against.

Schulman, Wolski, Dhariwal, Radford, Klimov. "Proximal Policy Optimization Algorithms",
arXiv:1707.06347. The defaults are PureJaxRL's CartPole-v1 settings (luchris429/purejaxrl,
`purejaxrl/ppo.py`), so the two can be compared side by side.

Deviations from PureJaxRL, each deliberate:
  * a time-limit truncation bootstraps from the true final observation (PureJaxRL treats it as
    termination, purejaxrl#20);
  * the policy's sampling noise for a whole rollout is drawn before the rollout loop in one
    batched call (Gumbel-max sampling), not one key per step: the same distribution, measured
    faster on CPU, where each small threefry call is a loop of its own;
  * Adam and gradient clipping run on one flat parameter vector (`optax.flatten`): the same
    arithmetic with fewer kernels.

The whole run is one XLA program: `make_train(config)(key)`. The experiment CLI instead drives
`make_learner(config)`, whose `step` is one PPO update, in compiled chunks between which it logs,
checkpoints and resumes.
"""

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
from hrljax.networks import ActorCritic, policy_noise, sample_with_noise
from hrljax.training import Learner
from hrljax.types import Array, Batch, EnvCarry, PyTree


def get_config() -> ml_collections.ConfigDict:
  """PPO hyperparameters; the defaults are PureJaxRL's PPO CartPole-v1 settings."""
  config = training.run_config(log_every=10, checkpoint_every=100)
  config.agent = "ppo"
  config.env_name = "CartPole-v1"
  config.env_kwargs = ml_collections.ConfigDict()
  config.total_timesteps = 500_000
  config.num_envs = 4
  config.num_steps = 128  # rollout length per update
  config.update_epochs = 4
  config.num_minibatches = 4
  config.learning_rate = 2.5e-4
  config.anneal_lr = True
  config.optimizer = "adam"  # or "sgd" (used by the multi-device equivalence tests)
  config.adam_eps = 1e-5
  config.max_grad_norm = 0.5
  config.gamma = 0.99
  config.gae_lambda = 0.95
  config.clip_epsilon = 0.2
  config.clip_value = True
  config.normalize_advantages = True
  config.entropy_coef = 0.01
  config.value_coef = 0.5
  config.hidden_sizes = (64, 64)
  config.activation = "tanh"
  config.rollout_unroll = 1  # unrolling was measured: no faster on CPU, slower to compile
  config.eval_episodes = 32
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(config, "total_timesteps", "num_envs", "num_steps", "update_epochs",
                      "num_minibatches", "eval_episodes", "rollout_unroll")
  checks.positive(config, "learning_rate", "max_grad_norm", "adam_eps")
  checks.non_negative(config, "clip_epsilon", "entropy_coef", "value_coef")
  checks.in_unit_interval(config, "gamma", "gae_lambda")
  checks.one_of(config, "optimizer", ("adam", "sgd"))
  checks.divisible(config, "num_envs", num_devices, "the device count")
  batch = config.num_envs * config.num_steps
  if batch % config.num_minibatches:
    raise checks.ConfigError(
        f"config.num_minibatches: expected a divisor of num_envs * num_steps ({batch}), "
        f"got {config.num_minibatches}")
  checks.at_least(config, "total_timesteps", batch, "one update of num_envs * num_steps")
  envs.make(config.env_name, **config.env_kwargs)  # unknown names and fields fail here


class PPOAgent(struct.PyTreeNode):
  """PPO's train state: parameters, optimizer state and an RNG key for minibatch shuffling."""

  params: PyTree
  opt_state: PyTree
  key: Array
  network: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env_spec: envs.EnvSpec, config) -> "PPOAgent":
    config = ml_collections.FrozenConfigDict(config)
    network = make_network(env_spec, config)
    init_key, key = jax.random.split(key)
    params = common.init_params(network, init_key, env_spec.observation_shape)
    tx = make_optimizer(config)
    return cls(params=params, opt_state=tx.init(params), key=key, network=network, tx=tx,
               config=config)

  def act(self, obs: PyTree, key: Array, deterministic: bool = False) -> Array:
    """Actions for a batch of observations (the mode of the policy if `deterministic`)."""
    dist, _ = self.network.apply(self.params, obs)
    return dist.mode() if deterministic else dist.sample(seed=key)

  def update(self, batch: Batch) -> tuple["PPOAgent", dict[str, Array]]:
    """`update_epochs` passes of shuffled minibatch steps over one flat rollout batch."""
    return common.minibatch_epochs(self, batch, _minibatch_step, self.config.num_minibatches,
                                   self.config.update_epochs)


def make_network(env_spec: envs.EnvSpec, config) -> ActorCritic:
  return ActorCritic(action_dim=env_spec.action_dim, discrete=env_spec.discrete,
                     observation_ndim=len(env_spec.observation_shape),
                     hidden_sizes=tuple(config.hidden_sizes), activation=config.activation)


def make_optimizer(config) -> optax.GradientTransformation:
  """Global-norm clipping, then Adam (or SGD) with PureJaxRL's stepwise linear annealing."""
  num_updates = training.num_updates(config.total_timesteps, config.num_envs * config.num_steps)
  steps_per_update = config.num_minibatches * config.update_epochs

  def annealed(count):
    frac = 1.0 - (count // steps_per_update) / num_updates
    return config.learning_rate * frac

  learning_rate = annealed if config.anneal_lr else config.learning_rate
  if config.optimizer == "sgd":
    optimizer = optax.sgd(learning_rate)
  else:
    optimizer = optax.adam(learning_rate, eps=config.adam_eps)
  # One flat vector instead of one small kernel group per parameter leaf: the same arithmetic
  # (clipping and Adam are element-wise given the global norm), fewer kernels per step.
  return optax.flatten(optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optimizer))


def ppo_loss(params: PyTree, network: nn.Module, batch: Batch, config
             ) -> tuple[Array, dict[str, Array]]:
  """The PPO objective on one minibatch: clipped surrogate + value loss − entropy bonus."""
  dist, value = network.apply(params, batch.obs)
  log_prob = dist.log_prob(batch.action)
  advantage = batch.advantage
  if config.normalize_advantages:
    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
  policy_loss, extras = pg.clipped_surrogate_loss(log_prob, batch.log_prob, advantage,
                                                  epsilon=config.clip_epsilon)
  clip = config.clip_epsilon if config.clip_value else None
  v_loss = pg.value_loss(value, batch.target, batch.value, clip_epsilon=clip)
  entropy = dist.entropy()
  total = (policy_loss.mean() + config.value_coef * v_loss.mean()
           - config.entropy_coef * entropy.mean())
  return total, {
      "loss": total,
      "policy_loss": policy_loss.mean(),
      "value_loss": v_loss.mean(),
      "entropy": entropy.mean(),
      "approx_kl": extras.approx_kl.mean(),
      "clip_fraction": extras.clipped.mean(),
  }


def _minibatch_step(agent: PPOAgent, minibatch: Batch) -> tuple[PPOAgent, dict[str, Array]]:
  return common.gradient_step(agent, ppo_loss, agent.network, minibatch, agent.config)


# ----------------------------------------------------------------------------------------------
# The run: rollout -> GAE -> update, as a Learner (chunks for the CLI) and as one program.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: PPOAgent
  env: EnvCarry  # per-environment state: sharded along the mesh's data axis
  key: Array
  update: Array  # int32 count of updates done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one PPO update (rollout, GAE, epochs of minibatch steps)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = PPOAgent.create(agent_key, env_spec, config)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    return RunnerState(agent=agent, env=carry, key=key, update=jnp.zeros((), jnp.int32))

  def policy(params, obs, noise):
    dist, value = agent_network.apply(params, obs)
    action, log_prob = sample_with_noise(dist, noise)
    return action, (log_prob, value)

  def noise(key, num_steps):
    shape = (num_steps, config.num_envs, env_spec.action_dim)
    return policy_noise(key, shape, env_spec.discrete)

  agent_network = make_network(env_spec, config)

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key = jax.random.split(state.key)
    carry, traj = rollout.rollout(env, env_params, policy, state.agent.params, state.env,
                                  rollout_key, config.num_steps, unroll=config.rollout_unroll,
                                  noise_fn=noise)
    batch = make_batch(state.agent, traj, config)
    agent, metrics = state.agent.update(batch)
    metrics.update(rollout.rollout_statistics(traj))
    return RunnerState(agent=agent, env=carry, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    def greedy(params, obs, _):
      dist, _ = agent_network.apply(params, obs)
      return dist.mode(), None
    return rollout.evaluate(env, env_params, greedy, state.agent.params, key,
                            config.eval_episodes, env_params.max_steps_in_episode)

  steps_per_update = config.num_envs * config.num_steps
  return Learner(init=init, step=step, evaluate=evaluate,
                 num_updates=training.num_updates(config.total_timesteps, steps_per_update),
                 env_steps_per_update=steps_per_update,
                 sharded_field="env")


def make_batch(agent: PPOAgent, traj, config) -> Batch:
  """GAE over each environment's `[T]` slice (successor values in one batched call), then a flat
  `[T * N]` batch."""
  log_prob, value = traj.policy_extras
  next_value = agent.network.apply(agent.params, traj.next_obs, method=ActorCritic.value)
  discount = config.gamma * (1.0 - traj.terminated.astype(jnp.float32))
  def gae(reward, discount, value, next_value, done):
    return pg.generalized_advantage_estimation(reward, discount, value, next_value,
                                               config.gae_lambda, done)
  advantage = jax.vmap(gae, in_axes=1, out_axes=1)(
      traj.reward, discount, value, next_value, traj.done)
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  return Batch(obs=jax.tree.map(flat, traj.obs), action=flat(traj.action),
               log_prob=flat(log_prob), value=flat(value), advantage=flat(advantage),
               target=flat(advantage + value))


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
