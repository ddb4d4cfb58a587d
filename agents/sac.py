"""SAC: soft actor-critic with twin critics and automatic temperature tuning.

Haarnoja, Zhou, Hartikainen, Tucker, Ha, Tan, Kumar, Zhu, Gupta, Abbeel, Levine. "Soft
Actor-Critic Algorithms and Applications", arXiv:1812.05905 (Eq. 5-7: soft Q and policy
objectives; Eq. 17-18: the temperature objective with target entropy H̄; Appendix C: the tanh
squashing; Appendix D: hyperparameters). The defaults are the paper's: Adam with lr 3e-4 for the
actor, the critics and the temperature, τ = 0.005, γ = 0.99, batch 256, two hidden layers of 256
ReLU units, buffer 1e6, one gradient step per environment step, H̄ = −|A|. The objectives are
`hrljax.losses.soft_actor_critic`; the networks `hrljax.networks.continuous`.

Implementation choices, each deliberate (the references are the authors' softlearning code,
rail-berkeley/softlearning `softlearning/algorithms/sac.py`, and CleanRL's
`cleanrl/sac_continuous_action.py`):
  * a time-limit truncation bootstraps from the true final observation: the discount is
    γ·(1 − terminated), never γ·(1 − done);
  * the policy lives on [-1, 1]^|A| and its actions are rescaled affinely to the environment's
    bounds when acting (softlearning's normalised action spaces): the replay buffer, the critics
    and the target entropy −|A| all see the normalised action;
  * `alpha_loss_form="alpha"` differentiates the paper's Eq. 18, −α·(log π + H̄), with respect to
    log α (softlearning's current code; CleanRL); `"log_alpha"` uses −log α·(log π + H̄) (early
    softlearning, Stable-Baselines3), whose gradient lacks the factor α;
  * `actor_q_reduction="min"` trains the actor on min_k Q_k (the paper; CleanRL); softlearning's
    current code uses the mean over critics (`"mean"`);
  * within one update the critics step first, the actor then steps on the updated critics, and
    the temperature steps last on fresh samples of the updated actor; the critic target and the
    actor loss use the temperature from before the update (the order of softlearning and CleanRL);
  * the first `learning_starts` environment steps use uniform random actions and no gradient
    updates (softlearning's `n_initial_exploration_steps` = 1000).

`make_learner(config)`'s `step` collects `num_envs * num_steps` environment steps into the
replay buffer and then performs `updates_per_step` gradient updates on sampled batches;
`make_train(config)(key)` is a whole run as one XLA program.
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import struct

from hrljax import envs, replay, rollout, training
from hrljax.agents import sac_common
from hrljax.agents.sac_common import (
  SACAgent,
  Transition,
  behaviour_action,
  make_networks,
  sampled_updates,
)
from hrljax.networks.continuous import action_bound_tuples, rescale_action
from hrljax.rollout import rollout_statistics
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry


def get_config() -> ml_collections.ConfigDict:
  """SAC hyperparameters; the defaults are the paper's (arXiv:1812.05905, Appendix D)."""
  config = training.run_config(log_every=1000, checkpoint_every=10_000)  # in Learner steps
  config.agent = "sac"
  return sac_common.add_sac_fields(config)


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  sac_common.validate_sac_fields(config, num_devices)


# ----------------------------------------------------------------------------------------------
# The run: collect into the replay buffer -> sampled updates, as a Learner and as one program.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one Learner step to the next; checkpointed whole.

  Only `env` (per-environment state) is split along the mesh's data axis. The replay buffer is
  replicated: every device holds all of it and draws the same batches from the same key, so the
  updates are identical on every device and equal to the single-device run.
  """

  agent: SACAgent
  buffer: replay.ReplayBuffer
  env: EnvCarry
  key: Array
  update: Array  # int32 count of Learner steps done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` collects `num_envs * num_steps` transitions into the buffer, then
  makes `updates_per_step` gradient updates (none before `learning_starts` env steps)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)
  space = env.action_space(env_params)
  low, high = action_bound_tuples((space.low, space.high), env_spec.action_dim)
  actor, _ = make_networks(env_spec, config)
  steps_per_update = config.num_envs * config.num_steps
  num_updates = training.num_updates(config.total_timesteps, steps_per_update)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = SACAgent.create(agent_key, env_spec, config, (low, high))
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    example = Transition(
      obs=jax.tree.map(lambda x: x[0], carry.obs),
      action=jnp.zeros((env_spec.action_dim,), jnp.float32),
      reward=jnp.zeros((), jnp.float32),
      terminated=jnp.zeros((), bool),
      next_obs=jax.tree.map(lambda x: x[0], carry.obs),
    )
    return RunnerState(
      agent=agent,
      buffer=replay.init(example, config.buffer_size),
      env=carry,
      key=key,
      update=jnp.zeros((), jnp.int32),
    )

  def policy(params, obs, key):
    actor_params, explore = params
    normalized = behaviour_action(actor, actor_params, obs, key, explore)
    return rescale_action(normalized, low, high), normalized

  def gradient_updates(agent: SACAgent, buffer: replay.ReplayBuffer, key: Array):
    update = lambda agent, batch, _: agent.update(batch)
    return sampled_updates(update, agent, buffer, key, config.batch_size, config.updates_per_step)

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key, update_key = jax.random.split(state.key, 3)
    explore = state.update * steps_per_update < config.learning_starts
    carry, traj = rollout.rollout(
      env,
      env_params,
      policy,
      (state.agent.actor_params, explore),
      state.env,
      rollout_key,
      config.num_steps,
      unroll=config.rollout_unroll,
    )
    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    items = Transition(
      obs=jax.tree.map(flat, traj.obs),
      action=flat(traj.policy_extras),
      reward=flat(traj.reward),
      terminated=flat(traj.terminated),
      next_obs=jax.tree.map(flat, traj.next_obs),
    )
    buffer = replay.add(state.buffer, items)
    learning = (state.update + 1) * steps_per_update >= config.learning_starts
    agent, metrics = training.when(learning, gradient_updates, state.agent, buffer, update_key)
    metrics.update(rollout_statistics(traj))
    return RunnerState(
      agent=agent, buffer=buffer, env=carry, key=key, update=state.update + 1
    ), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    def greedy(params, obs, _):
      return rescale_action(actor.apply(params, obs).mode(), low, high), None

    return rollout.evaluate(
      env,
      env_params,
      greedy,
      state.agent.actor_params,
      key,
      config.eval_episodes,
      env_params.max_steps_in_episode,
    )

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=num_updates,
    env_steps_per_update=steps_per_update,
    sharded_field="env",
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
