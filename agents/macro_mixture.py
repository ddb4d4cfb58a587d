"""A mixture of frozen DQN experts weighted by a trained hyper-agent (MacroHFT's high level).

Zong et al., "MacroHFT: Memory Augmented Context-aware Reinforcement Learning On High Frequency
Trading", KDD 2024, arXiv:2406.14537 (Section 4.3). K sub-agents are Q-networks trained each on
one sub-task and then frozen; a hyper-agent outputs K logits from the state, and acting and
learning use Q_mix(s, ·) = Σ_k softmax(logits)_k · Q_k(s, ·). The hyper-agent is trained with

  L = (Q_mix(s, a) − y)² + α·(Q_mix(s, a) − Q_mem(s, a))² + β·KL(demo ‖ mix),

y the double-DQN target of the mixture (online hyper-agent selects, a Polyak-averaged target
hyper-agent evaluates), Q_mem the kernel-weighted value of the episodic memory's nearest entries
with the same action, and the KL to a demonstration's action values as the authors' code
computes it. The losses are `hrljax.losses.value_based.expert_mixture*`,
`episodic_memory_lookup` and `demonstration_kl`; the code followed is the authors' release
(ZONG0004/MacroHFT @31e5ef4, `RL/agent/high_level.py`, `RL/util/memory.py`, `model/net.py`
`hyperagent`):

  * the hyper-agent's last layer is zero-initialised, so the mixture starts uniform;
  * the memory stores, for every collected transition, the encoding of s (the hyper-agent's
    first layer, re-encoded with the current parameters whenever it is read: the code
    re-encodes its memory after every round of updates), the action and the one-step estimate
    r + γ(1 − d)·max_a Q_mix(s', a); Q_mem is looked up when the transition is collected and
    stored with it in the replay buffer, the one-step estimate standing in when the memory has
    no neighbour with that action or fewer than k entries;
  * defaults from the code: α = 0.5, β = 5, k = 5, Polyak rate 0.005 after every gradient
    step, a global-norm clip of 1, Adam.

Deviations, each deliberate: the hyper-agent sees the observation only, not the previous action
(the authors embed the previous action because a trading position is part of the state; a
four-rooms cell is Markov on its own) and has no adaptive-LayerNorm conditioning on the market
class; the demonstration is a task's own optimal action values where the task has them
(`demonstration = "shortest_path"` on four rooms: minus the number of steps to the goal after
each move, the analogue of the authors' hindsight-optimal trading action; `"none"` drops the KL
term); ε follows DQN's linear schedule over environment steps.

`switch = "hard"` is the hard-switch baseline: the same hyper-agent, trained with the same loss,
but acting (while collecting and when evaluated) with the Q-values of the single expert of the
largest weight instead of the mixture.

The experts are restored from the DQN runs named by `config.expert_runs` through
`hrljax.load.load_run` (their first seed's network and parameters), or passed to `make_learner`
directly (`hrljax.networks.experts.Experts`). The hyper-agent's network is
`hrljax.networks.mixers.ExpertMixtureGate`, the memory a `hrljax.replay` ring of `MemoryEntry`,
the four-rooms demonstration `hrljax.envs.four_rooms.shortest_path_action_values`.
`make_train(config)(key)` is a whole run as one XLA program.
"""

from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, load, replay, rollout, training
from hrljax.agents import common, value_common
from hrljax.envs import four_rooms
from hrljax.losses import value_based
from hrljax.networks.discrete_q import DiscreteQNetwork
from hrljax.networks.experts import Experts, stack_experts
from hrljax.networks.mixers import ExpertMixtureGate
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree

SWEEPABLE = ("learning_rate",)  # config.sweep: injected by make_optimizer
SWITCHES = ("soft", "hard")
DEMONSTRATIONS = ("none", "shortest_path")


def get_config() -> ml_collections.ConfigDict:
  """The hyper-agent's hyperparameters; the loss weights and target rate are the authors'."""
  config = training.run_config(log_every=100, checkpoint_every=1000)  # in Learner steps
  config.agent = "macro_mixture"
  config.env_name = four_rooms.ENV_NAME
  config.env_kwargs = ml_collections.ConfigDict()
  config.expert_runs = ()  # workdirs of the K trained DQN runs (the frozen experts)
  config.switch = "soft"  # "soft": act with the mixture; "hard": with the largest-weight expert
  config.total_timesteps = 40_000  # environment steps
  config.num_envs = 16
  config.num_steps = 1  # environment steps per environment per Learner step
  config.updates_per_step = 1  # gradient steps per Learner step
  config.buffer_size = 20_000
  config.learning_starts = 1_000  # environment steps before the first gradient step
  config.batch_size = 64
  config.learning_rate = 1e-3
  config.optimizer = "adam"
  config.adam_eps = 1e-8
  config.max_grad_norm = 1.0  # the authors' clip
  config.gamma = 0.95
  config.tau = 0.005  # the authors' Polyak rate of the target hyper-agent...
  config.target_update_interval = 1  # ...after every gradient step
  config.epsilon_start = 0.5
  config.epsilon_end = 0.05
  config.epsilon_decay_steps = 10_000
  config.hyper_hidden_size = 32  # the authors' hyper-agent width
  config.memory_coef = 0.5  # α, the authors' default
  config.kl_coef = 5.0  # β, the authors' default
  config.memory_size = 1_000  # episodic-memory slots (the authors': 4,320)
  config.num_neighbours = 5  # k of the memory lookup, the authors' 5
  config.demonstration = "shortest_path"  # or "none" (no KL term)
  config.rollout_unroll = 1
  config.eval_episodes = 32
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  # The shared value-learning checks also look at DQN's TD-loss switch, which the mixture's
  # loss (the authors' squared errors) does not have: check a copy that names DQN's default.
  shared = ml_collections.ConfigDict(config.to_dict())
  shared.loss_type, shared.huber_delta = "l2", 1.0
  value_common.validate_value_fields(shared, num_devices)
  checks.one_of(config, "switch", SWITCHES)
  checks.one_of(config, "demonstration", DEMONSTRATIONS)
  checks.positive_int(config, "hyper_hidden_size", "memory_size", "num_neighbours")
  checks.non_negative(config, "memory_coef", "kl_coef")
  if config.num_neighbours > config.memory_size:
    raise checks.ConfigError(
      f"config.num_neighbours: expected at most memory_size = {config.memory_size}, "
      f"got {config.num_neighbours!r}"
    )
  runs = tuple(config.expert_runs)
  if not runs or not all(isinstance(r, str) and r for r in runs):
    raise checks.ConfigError(
      f"config.expert_runs: expected one or more workdirs of trained DQN runs, got {runs!r}"
    )
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  if not envs.spec(env, env_params).discrete:
    raise checks.ConfigError(
      f"config.env_name: expected an environment with discrete actions, got {config.env_name!r}"
    )
  if config.demonstration == "shortest_path" and (
    config.env_name != four_rooms.ENV_NAME or env.observation != "one_hot"
  ):
    raise checks.ConfigError(
      f"config.demonstration: 'shortest_path' needs {four_rooms.ENV_NAME} with one-hot "
      f"observations, got {config.env_name!r} ({config.env_kwargs.to_dict()}); use 'none'"
    )


# ----------------------------------------------------------------------------------------------
# The frozen experts: trained DQN runs.
# ----------------------------------------------------------------------------------------------


def load_experts(runs: Sequence[str]) -> Experts:
  """The experts of the DQN runs in `runs` (their first seed's Q-network and parameters), through
  `load_run`; every run must have the same Q-network architecture."""
  networks, params = [], []
  for workdir in runs:
    run = load.load_run(workdir)
    if run.config.agent != "dqn":
      raise ValueError(
        f"expert_runs: expected workdirs of dqn runs, got {workdir!r} of agent {run.config.agent!r}"
      )
    agent = run.seed_state().agent
    networks.append(agent.network)
    params.append(agent.params)
  if any(n != networks[0] for n in networks):
    raise ValueError(f"expert_runs: expected runs of one Q-network architecture, got {networks}")
  return stack_experts(networks[0], params)


# ----------------------------------------------------------------------------------------------
# The agent.
# ----------------------------------------------------------------------------------------------


class Transition(NamedTuple):
  """One replayed transition (or a `[B]` batch), with its memory value Q_mem(s, a)."""

  obs: PyTree
  action: Array  # int32 []
  reward: Array  # float32 []
  terminated: Array  # bool []
  next_obs: PyTree  # the true successor (before any auto-reset)
  q_memory: Array  # float32 []


class MemoryEntry(NamedTuple):
  """One entry of the episodic memory (a `hrljax.replay` ring of `memory_size` of them)."""

  obs: PyTree
  action: Array  # int32 []
  value: Array  # float32 [], the one-step estimate r + γ(1 − d)·max_a Q_mix(s', a)


class MixtureAgent(struct.PyTreeNode):
  """The hyper-agent's train state and the frozen experts' parameters."""

  params: PyTree  # the hyper-agent (trained)
  target_params: PyTree
  opt_state: PyTree
  num_updates: Array  # int32
  expert_params: PyTree  # [K, ...] frozen: no gradient, no optimizer state
  memory: replay.ReplayBuffer  # of MemoryEntry
  demo_table: Optional[Array]  # [cells, A] demonstration values, or None
  network: ExpertMixtureGate = struct.field(pytree_node=False)
  expert_network: DiscreteQNetwork = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(
    cls,
    key: Array,
    env_spec: envs.EnvSpec,
    config,
    experts: Experts,
    demo_table: Optional[np.ndarray] = None,
  ) -> "MixtureAgent":
    config = ml_collections.FrozenConfigDict(config)
    if not env_spec.discrete:
      raise ValueError(f"env_spec: expected discrete actions, got {env_spec}")
    if experts.network.num_actions != env_spec.action_dim:
      raise ValueError(
        f"experts: expected Q-networks of {env_spec.action_dim} actions, got "
        f"{experts.network.num_actions}"
      )
    network = ExpertMixtureGate(
      num_experts=experts.num_experts,
      hidden_size=config.hyper_hidden_size,
      observation_ndim=len(env_spec.observation_shape),
    )
    params = common.init_params(network, key, env_spec.observation_shape)
    tx = value_common.make_optimizer(config)
    example = jnp.zeros(tuple(env_spec.observation_shape), jnp.float32)
    return cls(
      params=params,
      target_params=params,
      opt_state=tx.init(params),
      num_updates=jnp.zeros((), jnp.int32),
      expert_params=experts.params,
      memory=replay.init(
        MemoryEntry(example, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)),
        config.memory_size,
      ),
      demo_table=None if demo_table is None else jnp.asarray(demo_table, jnp.float32),
      network=network,
      expert_network=experts.network,
      tx=tx,
      config=config,
    )

  @property
  def experts(self) -> Experts:
    return Experts(self.expert_network, self.expert_params)

  def mixture(self, params: PyTree, obs: PyTree) -> tuple[Array, Array, Array, Array]:
    """`(q_mix [B, A], weights [B, K], q_experts [B, K, A], logits [B, K])` at `obs`."""
    logits, _ = self.network.apply(params, obs)
    q_experts = self.experts.q_values(self.expert_params, obs)
    q_mix, weights = value_based.expert_mixture(logits, q_experts)
    return q_mix, weights, q_experts, logits

  def acting_q(self, params: PyTree, obs: PyTree) -> Array:
    """The action values the agent acts with: the mixture's, or with `switch = "hard"` those
    of the expert of the largest weight."""
    q_mix, weights, q_experts, _ = self.mixture(params, obs)
    if self.config.switch == "soft":
      return q_mix
    chosen = jnp.argmax(weights, axis=-1)
    return jnp.take_along_axis(q_experts, chosen[:, None, None], axis=-2)[:, 0]

  def act(self, obs: PyTree, key: Array, epsilon: Array = 0.0) -> Array:
    """ε-greedy actions `[B]` (greedy with the default ε = 0)."""
    q = self.acting_q(self.params, obs)
    uniform_key, action_key = jax.random.split(key)
    explore = jax.random.uniform(uniform_key, q.shape[:-1]) < epsilon
    random = jax.random.randint(action_key, q.shape[:-1], 0, q.shape[-1])
    return jnp.where(explore, random, jnp.argmax(q, axis=-1))

  def demonstration(self, obs: Array) -> Optional[Array]:
    """`[B, A]` demonstration action values at one-hot observations, or None without one."""
    if self.demo_table is None:
      return None
    return self.demo_table[jnp.argmax(obs, axis=-1)]

  def one_step_values(self, params: PyTree, batch) -> Array:
    """r + γ(1 − terminated)·max_a Q_mix(s', a): what the memory stores (the authors' `q`)."""
    q_next, _, _, _ = self.mixture(params, batch.next_obs)
    discount = self.config.gamma * (1.0 - jnp.asarray(batch.terminated, jnp.float32))
    return jnp.asarray(batch.reward, jnp.float32) + discount * jnp.max(q_next, axis=-1)

  def memory_values(self, obs: PyTree, action: Array, fallback: Array) -> tuple[Array, Array]:
    """`(q_mem [N], found [N])` of `episodic_memory_lookup` for `[N]` transitions, with every
    memory entry re-encoded by the current hyper-agent; `fallback` where nothing is found."""
    _, query = self.network.apply(self.params, obs)
    memory = self.memory.storage
    _, keys = self.network.apply(self.params, memory.obs)
    valid = jnp.arange(self.memory.capacity) < self.memory.size

    def one(q, a):
      return value_based.episodic_memory_lookup(
        q,
        a,
        keys,
        memory.action,
        memory.value,
        valid,
        num_neighbours=self.config.num_neighbours,
      )

    q_mem, found = jax.vmap(one)(query, action.astype(jnp.int32))
    return jnp.where(found, q_mem, fallback), found

  def loss(self, params: PyTree, batch: Transition) -> tuple[Array, value_based.MixtureExtras]:
    """The mean of `expert_mixture_loss` over a `[B]` batch: the target hyper-agent evaluates
    the next state, the online one (before this step) selects its action."""
    config = self.config
    discount = config.gamma * (1.0 - jnp.asarray(batch.terminated, jnp.float32))
    q_experts_next = self.experts.q_values(self.expert_params, batch.next_obs)
    logits_next_target, _ = self.network.apply(self.target_params, batch.next_obs)
    logits_next_online, _ = self.network.apply(self.params, batch.next_obs)
    target = jax.vmap(value_based.expert_mixture_target)(
      jnp.asarray(batch.reward, jnp.float32),
      discount,
      logits_next_target,
      logits_next_online,
      q_experts_next,
    )
    logits, _ = self.network.apply(params, batch.obs)
    q_experts = self.experts.q_values(self.expert_params, batch.obs)
    demo = self.demonstration(batch.obs)

    def one(logits, q_experts, action, target, q_memory, q_demo):
      return value_based.expert_mixture_loss(
        logits,
        q_experts,
        action,
        target,
        q_memory,
        q_demo,
        memory_coef=config.memory_coef,
        kl_coef=config.kl_coef,
      )

    action = jnp.asarray(batch.action, jnp.int32)
    q_memory = jnp.asarray(batch.q_memory, jnp.float32)
    # Without a demonstration `demo` is None, a pytree with no leaf: `one` then gets None too.
    losses, extras = jax.vmap(one)(logits, q_experts, action, target, q_memory, demo)
    return jnp.mean(losses), extras

  def update(self, batch: Transition) -> tuple["MixtureAgent", dict[str, Array]]:
    """One gradient step of the hyper-agent on a `[B]` batch, then its target update."""
    (loss, extras), grads = jax.value_and_grad(self.loss, has_aux=True)(self.params, batch)
    agent = common.apply_gradients(self, grads)
    num_updates = self.num_updates + 1
    target_params, _ = value_common.update_target(
      agent.params, self.target_params, num_updates, self.config
    )
    weights = extras.weights
    metrics = {
      "loss": loss,
      "q_value": jnp.mean(extras.q_value),
      "td_error_abs": jnp.mean(jnp.abs(extras.td_error)),
      "memory_error_abs": jnp.mean(jnp.abs(extras.memory_error)),
      "kl": jnp.mean(extras.kl),
      "weight_entropy": jnp.mean(-jnp.sum(weights * jnp.log(weights + 1e-12), axis=-1)),
    }
    for k in range(weights.shape[-1]):
      metrics[f"weight_{k}"] = jnp.mean(weights[:, k])
    return agent.replace(target_params=target_params, num_updates=num_updates), metrics


# ----------------------------------------------------------------------------------------------
# The run.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one Learner step to the next; checkpointed whole."""

  agent: MixtureAgent
  buffer: replay.ReplayBuffer
  env: EnvCarry
  key: Array
  update: Array  # int32 count of Learner steps done


def make_learner(config: ml_collections.ConfigDict, experts: Optional[Experts] = None) -> Learner:
  """A `Learner` whose `step` collects `num_envs * num_steps` ε-greedy transitions (with their
  memory values) into the buffer and the memory, then makes `updates_per_step` gradient steps
  (none before `learning_starts`). `experts`: the frozen Q-networks; default those of
  `config.expert_runs`."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)
  if experts is None:
    experts = load_experts(tuple(config.expert_runs))
  demo_table = None
  if config.demonstration == "shortest_path":
    demo_table = four_rooms.shortest_path_action_values(env_params.goal)
  steps_per_update = config.num_envs * config.num_steps
  num_updates = training.num_updates(config.total_timesteps, steps_per_update)

  def create(key):
    return MixtureAgent.create(key, env_spec, config, experts, demo_table)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = create(agent_key)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    one_obs = jax.tree.map(lambda x: x[0], carry.obs)
    example = Transition(
      obs=one_obs,
      action=jnp.zeros((), jnp.int32),
      reward=jnp.zeros((), jnp.float32),
      terminated=jnp.zeros((), bool),
      next_obs=one_obs,
      q_memory=jnp.zeros((), jnp.float32),
    )
    return RunnerState(
      agent=agent,
      buffer=replay.init(example, config.buffer_size),
      env=carry,
      key=key,
      update=jnp.zeros((), jnp.int32),
    )

  def policy(params, obs, noise):
    agent, eps = params
    uniform, random_action = noise
    greedy = jnp.argmax(agent.acting_q(agent.params, obs), axis=-1)
    return jnp.where(uniform < eps, random_action, greedy).astype(jnp.int32), None

  def noise(key, num_steps):
    return value_common.epsilon_greedy_noise(key, (num_steps, config.num_envs), env_spec.action_dim)

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key, update_key = jax.random.split(state.key, 3)
    eps = value_common.epsilon(state.update * steps_per_update, config)
    agent = state.agent
    carry, traj = rollout.rollout(
      env,
      env_params,
      policy,
      (agent, eps),
      state.env,
      rollout_key,
      config.num_steps,
      unroll=config.rollout_unroll,
      noise_fn=noise,
    )
    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    obs, next_obs = jax.tree.map(flat, traj.obs), jax.tree.map(flat, traj.next_obs)
    action, reward, terminated = flat(traj.action), flat(traj.reward), flat(traj.terminated)
    collected = Transition(obs, action, reward, terminated, next_obs, jnp.zeros_like(reward))
    one_step = agent.one_step_values(agent.params, collected)
    q_memory, found = agent.memory_values(obs, action, one_step)
    buffer = replay.add(state.buffer, collected._replace(q_memory=q_memory))
    agent = agent.replace(memory=replay.add(agent.memory, MemoryEntry(obs, action, one_step)))
    learning = (state.update + 1) * steps_per_update >= config.learning_starts
    agent, metrics = value_common.gradient_steps_after_warmup(
      lambda a, b: a.update(b), agent, buffer, update_key, learning, config
    )
    metrics["epsilon"] = eps
    metrics["memory_found"] = jnp.mean(found.astype(jnp.float32))
    metrics.update(rollout.rollout_statistics(traj))
    return RunnerState(
      agent=agent, buffer=buffer, env=carry, key=key, update=state.update + 1
    ), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    def greedy(agent, obs, _):
      return jnp.argmax(agent.acting_q(agent.params, obs), axis=-1), None

    return rollout.evaluate(
      env,
      env_params,
      greedy,
      state.agent,
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


def make_train(config: ml_collections.ConfigDict, experts: Optional[Experts] = None):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program."""
  return training.whole_run(make_learner(config, experts))
