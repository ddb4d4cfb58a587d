"""IPPO: independent PPO learners sharing one actor-critic, the flat on-policy multi-agent baseline.

de Witt, Gupta, Makoviichuk, Makoviychuk, Torr, Sun, Whiteson. "Is Independent Learning All You
Need in the StarCraft Multi-Agent Challenge?", arXiv:2011.09533: every agent learns with PPO
(Schulman et al. 2017, arXiv:1707.06347) from its own observation, with a decentralised critic
V(o_i), and all agents share the parameters of one actor-critic. The defaults are JaxMARL's
IPPO settings for MPE (Rutherford et al. 2023, arXiv:2311.10090, `baselines/IPPO/ippo_ff_mpe.py`
and its `config/ippo_ff_mpe.yaml`), which are PureJaxRL's PPO settings: 16 environments x 128
steps per update, 4 epochs of 4 minibatches, Adam 2.5e-4 annealed linearly, clip 0.2, entropy
0.01, tanh 64-64 torsos for the policy and the value.

The environment follows `hrljax.envs.mpe`'s multi-agent layout: observations `[n_agents,
obs_dim]`, actions `[n_agents]`, one team reward, terminated and truncated per environment. The
rollout is `hrljax.rollout`'s, with the shared network applied to every agent's row; the batch
has one row per agent, time step and environment (`N * T * num_envs`), as JaxMARL's "actors":
every agent is a PPO actor on the team reward, its advantages from GAE over its own `[T]`
values (`common.per_environment_gae` over the `num_envs * N` actor columns), and the loss is
`common.ppo_objective` on those rows.

Deviations from JaxMARL's IPPO, each deliberate:
  * every agent learns from the team reward (the sum of the agents' rewards, `hrljax.envs.mpe`);
    JaxMARL's IPPO gives each agent its own reward (on simple_spread that reward is half the
    shared landmark term and half the agent's own collisions, so the two differ in the
    collision terms and in scale);
  * a time-limit truncation bootstraps from the true final observation; JaxMARL treats every
    episode end of MPE (all of them time limits) as a termination;
  * `agent_ids=True` appends the agent's one-hot id to its observation (off by default, as in
    JaxMARL's IPPO; QMIX's and this library's `qmix` use it);
  * PPO's own deviations from PureJaxRL (`hrljax.agents.ppo`): the policy noise of a rollout
    drawn before its loop, Adam and the clipping on one flat parameter vector.

`make_learner(config)`'s `step` is one IPPO update (rollout, GAE, epochs of minibatch steps);
`make_train(config)(key)` is a whole run as one XLA program.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import envs, rollout, training
from hrljax.agents import common, value_common
from hrljax.networks import ActorCritic, policy_noise, sample_with_noise
from hrljax.training import Learner
from hrljax.types import Array, Batch, EnvCarry, PyTree

SWEEPABLE = ("learning_rate",)  # config.sweep: injected by common.ppo_optimizer


def get_config() -> ml_collections.ConfigDict:
  """IPPO hyperparameters; the defaults are JaxMARL's IPPO settings for MPE (its budget, 1e7
  environment steps, is smaller here: 1e6)."""
  config = training.run_config(log_every=10, checkpoint_every=100)
  config.agent = "ippo"
  common.add_ppo_fields(config)
  config.env_name = "MPE_simple_spread_v3"
  config.total_timesteps = 1_000_000  # team environment steps
  config.num_envs = 16  # environments stepped side by side
  config.num_steps = 128  # rollout length per update; the batch is n_agents times larger
  config.agent_ids = False  # append each agent's one-hot id to its observation
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run (PPO's fields, then a
  multi-agent environment with discrete actions)."""
  common.validate_ppo_fields(config, num_devices)
  value_common.multi_agent_spec(config)


def agent_spec(env_spec: envs.EnvSpec, config) -> envs.EnvSpec:
  """The spec of one agent's network input: its observation `[obs_dim]`, plus `n_agents` id
  features with `agent_ids`."""
  num_agents, obs_dim = env_spec.observation_shape
  width = obs_dim + num_agents if config.agent_ids else obs_dim
  return envs.EnvSpec((width,), env_spec.discrete, env_spec.action_dim)


def agent_inputs(obs: Array, config) -> Array:
  """The shared network's input `[..., N, d']` of observations `[..., N, d]`: each agent's own
  row, its one-hot id appended with `agent_ids`."""
  return value_common.with_agent_ids(obs) if config.agent_ids else obs


def to_actors(x: Array) -> Array:
  """`[T, num_envs, N, ...]` as `[T, num_envs * N, ...]`: every agent of every environment one
  actor column, an environment's agents consecutive."""
  return x.reshape(x.shape[:1] + (x.shape[1] * x.shape[2],) + x.shape[3:])


class IPPOAgent(struct.PyTreeNode):
  """IPPO's train state: the shared parameters, optimizer state and a shuffling key."""

  params: PyTree
  opt_state: PyTree
  key: Array
  network: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env_spec: envs.EnvSpec, config) -> "IPPOAgent":
    """`env_spec` is the multi-agent environment's (observations `[n_agents, obs_dim]`)."""
    config = ml_collections.FrozenConfigDict(config)
    spec = agent_spec(env_spec, config)
    network = common.actor_critic(spec, config)
    init_key, key = jax.random.split(key)
    params = common.init_params(network, init_key, spec.observation_shape)
    tx = common.ppo_optimizer(config, num_updates(config))
    return cls(
      params=params, opt_state=tx.init(params), key=key, network=network, tx=tx, config=config
    )

  def act(self, obs: Array, key: Array, deterministic: bool = False) -> Array:
    """Every agent's action `[..., N]` of observations `[..., N, d]`, from the shared policy (its
    mode if `deterministic`)."""
    dist = self.network.apply(
      self.params, agent_inputs(obs, self.config), method=ActorCritic.policy
    )
    return dist.mode() if deterministic else dist.sample(seed=key)

  def update(self, batch: Batch) -> tuple["IPPOAgent", dict[str, Array]]:
    """`update_epochs` passes of shuffled minibatch steps over one flat `[T * num_envs * N]`
    batch of agent rows (`make_batch`); `shuffle_shards = k` shuffles within k groups of
    `num_envs / k` environments' agents."""
    config = self.config
    num_actors = jax.tree.leaves(batch)[0].shape[0] // config.num_steps
    return common.minibatch_epochs(
      self,
      batch,
      _minibatch_step,
      config.num_minibatches,
      config.update_epochs,
      config.shuffle_shards,
      num_actors,
    )


def num_updates(config) -> int:
  return training.num_updates(config.total_timesteps, config.num_envs * config.num_steps)


def _minibatch_step(agent: IPPOAgent, minibatch: Batch) -> tuple[IPPOAgent, dict[str, Array]]:
  return common.gradient_step(agent, common.ppo_objective, agent.network, minibatch, agent.config)


def make_batch(agent: IPPOAgent, traj, config) -> Batch:
  """The flat batch of a `[T, num_envs]` multi-agent rollout: one row per time step, environment
  and agent (`[T * num_envs * N, ...]`, time-major, an environment's agents consecutive), the
  team reward, terminations and episode ends given to each agent, and each agent's GAE over its
  own values."""
  log_prob, value = traj.policy_extras  # [T, num_envs, N]
  obs, next_obs = agent_inputs(traj.obs, config), agent_inputs(traj.next_obs, config)
  next_value = agent.network.apply(agent.params, next_obs, method=ActorCritic.value)
  per_agent = lambda x: to_actors(jnp.broadcast_to(x[..., None], value.shape))
  discount = config.gamma * (1.0 - traj.terminated.astype(jnp.float32))
  advantage = common.per_environment_gae(
    per_agent(traj.reward.astype(jnp.float32)),
    per_agent(discount),
    to_actors(value),
    to_actors(next_value),
    per_agent(traj.done),
    config.gae_lambda,
  )
  return common.ppo_batch(
    to_actors(obs),
    to_actors(traj.action),
    to_actors(log_prob),
    to_actors(value),
    advantage,
    config.shuffle_shards,
  )


# ----------------------------------------------------------------------------------------------
# The run: rollout -> per-agent GAE -> update, as a Learner (chunks for the CLI) and one program.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: IPPOAgent
  env: EnvCarry  # per-environment state: sharded along the mesh's data axis
  key: Array
  update: Array  # int32 count of updates done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one IPPO update (rollout, per-agent GAE, epochs of minibatch
  steps over the agents' rows)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params, env_spec = value_common.multi_agent_spec(config)
  num_agents = env_spec.observation_shape[0]
  network = common.actor_critic(agent_spec(env_spec, config), config)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = IPPOAgent.create(agent_key, env_spec, config)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    return RunnerState(agent=agent, env=carry, key=key, update=jnp.zeros((), jnp.int32))

  def policy(params, obs, noise):
    dist, value = network.apply(params, agent_inputs(obs, config))
    action, log_prob = sample_with_noise(dist, noise)
    return action, (log_prob, value)

  def noise(key, num_steps):
    shape = (num_steps, config.num_envs, num_agents, env_spec.action_dim)
    return policy_noise(key, shape, env_spec.discrete)

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
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
    batch = make_batch(state.agent, traj, config)
    agent, metrics = state.agent.update(batch)
    metrics.update(rollout.rollout_statistics(traj))
    return RunnerState(agent=agent, env=carry, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    def greedy(params, obs, _):
      return network.apply(
        params, agent_inputs(obs, config), method=ActorCritic.policy
      ).mode(), None

    return rollout.evaluate(
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
    num_updates=num_updates(config),
    env_steps_per_update=config.num_envs * config.num_steps,
    sharded_field="env",
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
