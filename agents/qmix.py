"""VDN and QMIX: a team Q-value factored over agents, learned from replay with a target network.

Sunehag et al., "Value-Decomposition Networks For Cooperative Multi-Agent Learning",
arXiv:1706.05296 (VDN, `mixer="vdn"`: Q_tot = Σ_i Q_i(o_i, a_i)); Rashid et al., "QMIX:
Monotonic Value Function Factorisation for Deep Multi-Agent Reinforcement Learning", ICML 2018,
arXiv:1803.11485 (QMIX, `mixer="qmix"`: Q_tot = |w2|ᵀ·ELU(|W1|ᵀ·q + b1) + V(s), the weights from
hypernetworks of the global state, `hrljax.losses.value_based.monotonic_mix`, so that the joint
greedy action is every agent's own greedy action). Both are trained on the team reward with the
TD loss on Q_tot:

  y = r + γ·(1 − terminated)·Q̄_tot(s', ā'),  ā'_i = argmax_a Q_i(o'_i, a; θ)  (double Q),

the per-agent values at ā' from the target network and mixed by the target mixer (van Hasselt
et al. 2016's Double DQN on the joint value, as pymarl's `double_q`; `double_q=False`: ā'_i from
the target network). The target is `value_based.smdp_target` over a one-step window (the flat
case of the SMDP target a hierarchy over options uses); the loss is `value_based.qmix_loss`
(QMIX) or `value_based.q_learning_loss` on the summed value (VDN).

The agents share one Q-network (`DiscreteQNetwork`) whose input is the agent's observation with
its id one-hot appended (parameter sharing with agent ids, QMIX's Appendix C and JaxMARL's
`CTRolloutManager`). The environment follows `hrljax.envs.mpe`'s multi-agent layout:
observations `[n_agents, obs_dim]`, actions `[n_agents]`, one team reward; the mixer's state is
the concatenation of the agents' observations; the hypernetworks' weight outputs start small
(`mixer_init_scale`, 1e-3: with the usual scale QMIX diverged on simple_spread, see
`experiments/results/MULTIAGENT.md`). Agents here are feed-forward (QMIX uses a GRU
over the action-observation history; MPE's observations hold the positions and velocities).

`make_learner(config)`'s `step` collects `num_envs * num_steps` team transitions with
independent ε-greedy agents into the spine's replay buffer and makes `updates_per_step` gradient
steps (none before `learning_starts` environment steps); `make_train(config)(key)` is a whole
run as one XLA program. Evaluation is greedy (ε = 0) and reports the team return.
"""

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import envs, replay, rollout, training
from hrljax.agents import common, value_common
from hrljax.agents.value_common import mixer_state, with_agent_ids
from hrljax.losses import value_based
from hrljax.networks.discrete_q import DiscreteQNetwork
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree

SWEEPABLE = ("learning_rate",)  # config.sweep: injected by value_common.make_optimizer
MIXERS = ("vdn", "qmix")


def get_config() -> ml_collections.ConfigDict:
  """VDN / QMIX hyperparameters, sized for MPE simple_spread on a CPU."""
  config = training.run_config(log_every=500, checkpoint_every=5_000)  # in Learner steps
  config.agent = "qmix"
  config.mixer = "qmix"  # or "vdn" (Q_tot = Σ_i Q_i)
  config.env_name = "MPE_simple_spread_v3"
  config.env_kwargs = ml_collections.ConfigDict()
  config.total_timesteps = 400_000  # team environment steps
  config.num_envs = 16
  config.num_steps = 1  # environment steps per environment per Learner step
  config.updates_per_step = 1  # gradient steps per Learner step
  config.buffer_size = 50_000  # team transitions
  config.learning_starts = 5_000  # environment steps before the first gradient step
  config.batch_size = 128
  config.learning_rate = 5e-4
  config.optimizer = "adam"  # or "sgd"
  config.adam_eps = 1e-8
  config.max_grad_norm = 10.0  # pymarl's grad_norm_clip; 0 switches it off
  config.gamma = 0.95
  config.double_q = True
  config.loss_type = "l2"  # or "huber"
  config.huber_delta = 1.0
  config.tau = 1.0  # Polyak rate of the target network; 1.0 copies it
  config.target_update_interval = 200  # gradient steps between target updates
  config.epsilon_start = 1.0
  config.epsilon_end = 0.05
  config.epsilon_decay_steps = 100_000  # environment steps
  config.hidden_sizes = (64, 64)  # the shared agent network
  config.activation = "relu"
  config.mixer_embed_dim = 32  # QMIX's mixing layer
  config.hypernet_hidden = 64  # hidden units of the weight hypernetworks (0: linear)
  config.mixer_init_scale = 1e-3  # orthogonal-init scale of the hypernetworks' weight outputs
  config.rollout_unroll = 1
  config.eval_episodes = 32
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run (a multi-agent environment
  with discrete actions needed)."""
  value_common.validate_value_fields(config, num_devices)
  value_common.validate_mixer_fields(config, MIXERS)
  value_common.multi_agent_spec(config)


class Transition(NamedTuple):
  """One replayed team transition (or a `[B]` batch); `next_obs` is the true successor."""

  obs: Array  # [N, d]
  action: Array  # int32 [N]
  reward: Array  # float32 [], the team reward
  terminated: Array  # bool []
  next_obs: Array  # [N, d]


def make_networks(env, env_spec: envs.EnvSpec, config):
  """The shared agent Q-network and, for QMIX, the mixer's hypernetwork (None for VDN)."""
  network = DiscreteQNetwork(
    num_actions=env_spec.action_dim,
    hidden_sizes=tuple(config.hidden_sizes),
    activation=config.activation,
  )
  return network, value_common.make_mixer(env.num_agents, config)


class QMixAgent(struct.PyTreeNode):
  """The train state: online and target parameters (`{"agent": ..., "mixer": ...}`), optimizer
  state and the gradient-step count."""

  params: PyTree
  target_params: PyTree
  opt_state: PyTree
  num_updates: Array  # int32: gradient steps done (paces the target updates)
  network: nn.Module = struct.field(pytree_node=False)
  mixer: nn.Module | None = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env, env_spec: envs.EnvSpec, config) -> "QMixAgent":
    config = ml_collections.FrozenConfigDict(config)
    network, mixer = make_networks(env, env_spec, config)
    num_agents, obs_dim = env_spec.observation_shape
    agent_key, mixer_key = jax.random.split(key)
    params = {"agent": common.init_params(network, agent_key, (num_agents, obs_dim + num_agents))}
    params["mixer"] = value_common.init_mixer(mixer, mixer_key, num_agents * obs_dim)
    tx = value_common.make_optimizer(config)
    return cls(
      params=params,
      target_params=params,
      opt_state=tx.init(params),
      num_updates=jnp.zeros((), jnp.int32),
      network=network,
      mixer=mixer,
      tx=tx,
      config=config,
    )

  def agent_values(self, params: PyTree, obs: Array) -> Array:
    """Per-agent action values `[..., N, A]` of observations `[..., N, d]` (shared network)."""
    return self.network.apply(params["agent"], with_agent_ids(obs))

  def mix(self, params: PyTree, q_agents: Array, state: Array) -> Array:
    """Q_tot `[...]` of per-agent values `[..., N]` at global states `[..., S]`."""
    return value_common.mix(self.mixer, params["mixer"], q_agents, state)

  def act(self, obs: Array, key: Array, epsilon: Array = 0.0) -> Array:
    """Independent ε-greedy actions `[..., N]` (greedy with the default ε = 0)."""
    q = self.agent_values(self.params, obs)
    uniform, random = value_common.epsilon_greedy_noise(key, q.shape[:-1], q.shape[-1])
    return value_common.epsilon_greedy(q, uniform, random, epsilon)

  def targets(self, batch: Transition) -> Array:
    """y `[B]`: the team reward plus the discounted target Q_tot at the greedy joint action."""
    config = self.config
    q_next = self.agent_values(self.target_params, batch.next_obs)  # [B, N, A]
    selector = self.agent_values(self.params, batch.next_obs) if config.double_q else q_next
    q_next = value_common.greedy_values(q_next, selector)
    q_tot_next = self.mix(self.target_params, q_next, mixer_state(batch.next_obs))
    reward = jnp.asarray(batch.reward, jnp.float32)
    discount = config.gamma * (1.0 - jnp.asarray(batch.terminated, jnp.float32))
    one_step = lambda r, d, q: value_based.smdp_target(r[None], d[None], q)
    return jax.vmap(one_step)(reward, discount, q_tot_next)

  def loss(self, params: PyTree, batch: Transition) -> tuple[Array, dict[str, Array]]:
    """The mean TD loss on Q_tot over a `[B]` batch, and its metrics."""
    target = self.targets(batch)
    q = self.agent_values(params, batch.obs)  # [B, N, A]
    action = jnp.asarray(batch.action, jnp.int32)
    losses, q_tot, td_error = value_common.mixed_td_losses(
      self.mixer, params["mixer"], q, action, mixer_state(batch.obs), target, self.config
    )
    metrics = {"q_tot": jnp.mean(q_tot), "td_error_abs": jnp.mean(jnp.abs(td_error))}
    return jnp.mean(losses), metrics

  def update(self, batch: Transition) -> tuple["QMixAgent", dict[str, Array]]:
    """One gradient step on a `[B]` batch, then the target update every
    `target_update_interval` gradient steps (Polyak with `tau`; 1.0 copies)."""
    (loss, metrics), grads = jax.value_and_grad(self.loss, has_aux=True)(self.params, batch)
    agent = common.apply_gradients(self, grads)
    num_updates = self.num_updates + 1
    target_params, update_now = value_common.update_target(
      agent.params, self.target_params, num_updates, self.config
    )
    metrics = {"loss": loss, **metrics, "target_updates": update_now.astype(jnp.float32)}
    return agent.replace(target_params=target_params, num_updates=num_updates), metrics


# ----------------------------------------------------------------------------------------------
# The run: ε-greedy team transitions into the replay buffer -> sampled updates, as a Learner and
# as one program.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one Learner step to the next; checkpointed whole. Only `env`
  is split along the mesh's data axis; the replay buffer is replicated."""

  agent: QMixAgent
  buffer: replay.ReplayBuffer
  env: EnvCarry
  key: Array
  update: Array  # int32 count of Learner steps done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` collects `num_envs * num_steps` ε-greedy team transitions into the
  buffer, then makes `updates_per_step` gradient steps (none before `learning_starts`)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)
  num_agents = env_spec.observation_shape[0]
  network, _ = make_networks(env, env_spec, config)
  steps_per_update = config.num_envs * config.num_steps
  num_updates = training.num_updates(config.total_timesteps, steps_per_update)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = QMixAgent.create(agent_key, env, env_spec, config)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    one_obs = carry.obs[0]
    example = Transition(
      obs=one_obs,
      action=jnp.zeros((num_agents,), jnp.int32),
      reward=jnp.zeros((), jnp.float32),
      terminated=jnp.zeros((), bool),
      next_obs=one_obs,
    )
    return RunnerState(
      agent=agent,
      buffer=replay.init(example, config.buffer_size),
      env=carry,
      key=key,
      update=jnp.zeros((), jnp.int32),
    )

  def greedy_actions(agent_params, obs):
    return jnp.argmax(network.apply(agent_params, with_agent_ids(obs)), axis=-1)

  def policy(params, obs, noise):
    agent_params, eps = params
    q = network.apply(agent_params, with_agent_ids(obs))
    return value_common.epsilon_greedy(q, *noise, eps), None

  def noise(key, num_steps):
    shape = (num_steps, config.num_envs, num_agents)
    return value_common.epsilon_greedy_noise(key, shape, env_spec.action_dim)

  def update(agent: QMixAgent, batch: Transition):
    return agent.update(batch)

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key, update_key = jax.random.split(state.key, 3)
    eps = value_common.epsilon(state.update * steps_per_update, config)
    carry, traj = rollout.rollout(
      env,
      env_params,
      policy,
      (state.agent.params["agent"], eps),
      state.env,
      rollout_key,
      config.num_steps,
      unroll=config.rollout_unroll,
      noise_fn=noise,
    )
    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    items = Transition(
      obs=flat(traj.obs),
      action=flat(traj.action),
      reward=flat(traj.reward),
      terminated=flat(traj.terminated),
      next_obs=flat(traj.next_obs),
    )
    buffer = replay.add(state.buffer, items)
    learning = (state.update + 1) * steps_per_update >= config.learning_starts
    agent, metrics = value_common.gradient_steps_after_warmup(
      update, state.agent, buffer, update_key, learning, config
    )
    metrics["epsilon"] = eps
    metrics.update(rollout.rollout_statistics(traj))
    return RunnerState(
      agent=agent, buffer=buffer, env=carry, key=key, update=state.update + 1
    ), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    def greedy(agent_params, obs, _):
      return greedy_actions(agent_params, obs), None

    return rollout.evaluate(
      env,
      env_params,
      greedy,
      state.agent.params["agent"],
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
