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
  * only the actor runs inside the sequential rollout loop; the critic evaluates the visited
    states and their successors afterwards, in batched calls (`make_batch`): the same values up
    to float32 rounding, at a fraction of the per-step cost;
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

from hrljax import envs, rollout, training
from hrljax.agents import common
from hrljax.networks import ActorCritic, policy_noise, sample_with_noise
from hrljax.training import Learner
from hrljax.types import Array, Batch, EnvCarry, PyTree

SWEEPABLE = ("learning_rate",)  # config.sweep: injected by common.ppo_optimizer


def get_config() -> ml_collections.ConfigDict:
  """PPO hyperparameters; the defaults are PureJaxRL's PPO CartPole-v1 settings."""
  config = training.run_config(log_every=10, checkpoint_every=100)
  config.agent = "ppo"
  return common.add_ppo_fields(config)


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  common.validate_ppo_fields(config, num_devices)


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
    network = common.actor_critic(env_spec, config)
    init_key, key = jax.random.split(key)
    params = common.init_params(network, init_key, env_spec.observation_shape)
    tx = common.ppo_optimizer(config, num_updates(config))
    return cls(
      params=params, opt_state=tx.init(params), key=key, network=network, tx=tx, config=config
    )

  def act(self, obs: PyTree, key: Array, deterministic: bool = False) -> Array:
    """Actions for a batch of observations (the mode of the policy if `deterministic`)."""
    dist, _ = self.network.apply(self.params, obs)
    return dist.mode() if deterministic else dist.sample(seed=key)

  def update(self, batch: Batch) -> tuple["PPOAgent", dict[str, Array]]:
    """`update_epochs` passes of shuffled minibatch steps over one flat rollout batch."""
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


def num_updates(config) -> int:
  return training.num_updates(config.total_timesteps, config.num_envs * config.num_steps)


def _minibatch_step(agent: PPOAgent, minibatch: Batch) -> tuple[PPOAgent, dict[str, Array]]:
  return common.gradient_step(agent, common.ppo_objective, agent.network, minibatch, agent.config)


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

  def policy(params, obs, noise):  # the actor alone: `make_batch` evaluates the critic batched
    dist = agent_network.apply(params, obs, method=ActorCritic.policy)
    return sample_with_noise(dist, noise)

  def noise(key, num_steps):
    shape = (num_steps, config.num_envs, env_spec.action_dim)
    return policy_noise(key, shape, env_spec.discrete)

  agent_network = common.actor_critic(env_spec, config)

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
    batch, episode_sums = make_batch(state.agent, traj, config)
    agent, metrics = state.agent.update(batch)
    metrics.update(episode_sums)
    return RunnerState(agent=agent, env=carry, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    def greedy(params, obs, _):
      dist, _ = agent_network.apply(params, obs)
      return dist.mode(), None

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


def make_batch(agent: PPOAgent, traj, config) -> tuple[Batch, dict[str, Array]]:
  """GAE over each environment's `[T]` slice, then a flat `[T * N]` batch, and the rollout's
  episode sums (`rollout.rollout_statistics`) taken from the same flattened arrays: with one
  shuffle shard on a mesh, the batch and the episodes' terms cross devices together, in the
  update's one collective (`common.ppo_batch`).

  The critic evaluates the visited states and their true successors here, in two batched calls
  over all `T * N` steps, with the parameters the rollout acted with: the sequential rollout runs
  only the actor (`experiments/benchmarks/README.md` measures the difference). A value equals
  the one the rollout loop would compute up to float32 rounding (the last bit, where XLA
  multiplies `[T * N]` rows in another kernel than `[N]`)."""
  log_prob = traj.policy_extras
  value = agent.network.apply(agent.params, traj.obs, method=ActorCritic.value)
  next_value = agent.network.apply(agent.params, traj.next_obs, method=ActorCritic.value)
  discount = config.gamma * (1.0 - traj.terminated.astype(jnp.float32))
  advantage = common.per_environment_gae(
    traj.reward, discount, value, next_value, traj.done, config.gae_lambda
  )
  fields = common.ppo_fields(traj.obs, traj.action, log_prob, value, advantage)
  ends = rollout.episode_end_terms(traj)
  if config.shuffle_shards == 1:  # the whole batch comes to every device: the terms ride along
    batch, ends = common.flatten_time_major((fields, ends))
  else:  # each device keeps its environments: its terms are summed where they are
    batch = common.flatten_time_major(fields, packed=False)
  return batch, jax.tree.map(jnp.sum, ends)


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
