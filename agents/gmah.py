"""GMAH: per-agent subgoals every c steps, a goal-conditioned low level, high-level values mixed.

Xu et al., "Subgoal-based multi-agent hierarchical reinforcement learning" (GMAH), IEEE TSMC
2025, arXiv:2408.11416: each agent's high level picks a subgoal, a goal-conditioned low level
reaches it on an intrinsic reward, and a monotonic mixer (their goal-mixing network, not in their
release) combines the agents' high-level values Q_i(o_i, g_i) into Q_tot, trained on the team
reward. The mixer is QMIX's (Rashid et al. 2018, arXiv:1803.11485, `value_based.monotonic_mix`)
or VDN's sum (Sunehag et al. 2017, arXiv:1706.05296), over the options of the semi-MDP (Sutton,
Precup, Singh 1999), with `value_based.smdp_target` over the option's k ≤ c team rewards (k < c
when the episode ends first; a termination drops the bootstrap):

  high: y = Σ_{i<k} γ^i r_{t+i} + γ^k·Q̄_tot(s_{t+k}, ḡ),  ḡ_j = argmax_g Q_j(o_j, g; θ) (double Q),

and `value_based.qmix_loss` (QMIX) or DQN's loss on the sum (VDN). `mixer="none"` is the
ablation: independent per-agent SMDP Q-learning, y_j = Σ γ^i r_{t+i} + γ^k·Q̄_j(o'_j, ḡ_j).

  low: y = r^g_t + γ_g·Q̄(o_{t+1}, g, ā),  r^g_t = −‖p(subgoal g) − p(agent)‖ after the step,

double DQN with the subgoal held fixed (h-DQN's intrinsic critic, Kulkarni et al. 2016,
arXiv:1604.06057). A subgoal is one of L positions that the environment's observations locate:
`SUBGOAL_OFFSETS` maps each environment GMAH runs on to the function giving, from observations
`[..., N, d]`, the offsets `[..., N, L, 2]` of the L subgoals from each agent. On MPE
simple_spread (`hrljax.envs.mpe`) the subgoals are the landmarks, whose offsets are in the
observations (`landmark_offsets`); on the two-agent four rooms (`hrljax.envs.two_agent_rooms`,
the map of Sutton, Precup, Singh 1999) they are the four room centres and the four hallways
(`two_agent_rooms.subgoal_offsets`). Both levels share one network across agents with one-hot
agent ids (`DiscreteQNetwork` over subgoals; `GoalConditionedQNetwork` over moves, fed the
subgoal's one-hot and offset). The agents choose subgoals together, every c steps or when the
episode ends; `Learner.step` collects `num_envs * num_steps` team steps into two replay buffers
(steps, finished options) and makes `updates_per_step` gradient steps on both levels. The
evaluation plays `eval_episodes` greedy episodes and reports each one's first episode (return,
length, and `eval_success`: the fraction that reached the team's goal, i.e. ended on a step of
positive team reward (the four rooms' success pays 1 − step_cost > 0, its other ends −step_cost;
0 on MPE, whose episodes only end by their time limit).
"""

from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import replay, rollout, training
from hrljax.agents import common, value_common
from hrljax.agents.value_common import mixer_state, with_agent_ids
from hrljax.envs import two_agent_rooms
from hrljax.losses import value_based
from hrljax.networks.discrete_q import DiscreteQNetwork, GoalConditionedQNetwork
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree, Transition

SWEEPABLE = ("learning_rate",)  # config.sweep: injected by value_common.make_optimizer
MIXERS = ("qmix", "vdn", "none")


def get_config() -> ml_collections.ConfigDict:
  """GMAH's hyperparameters on MPE simple_spread, the value-learning ones as `qmix`'s."""
  config = training.run_config(log_every=500, checkpoint_every=5_000)  # in Learner steps
  config.agent = "gmah"
  config.mixer = "qmix"  # "vdn": Q_tot = Σ_i Q_i; "none": independent per-agent SMDP-Q
  config.env_name = "MPE_simple_spread_v3"  # a name of SUBGOAL_OFFSETS (here the landmarks)
  config.env_kwargs = ml_collections.ConfigDict()  # e.g. num_agents, num_landmarks
  config.option_length = 5  # c: steps per subgoal (fewer when the episode ends first)
  config.total_timesteps = 400_000  # team environment steps
  config.num_envs = 16  # environments stepped side by side
  config.num_steps = 1  # environment steps per environment per Learner step
  config.updates_per_step = 1  # gradient steps per Learner step, on each level
  config.buffer_size = 50_000  # team steps; the option buffer holds buffer_size // c options
  config.learning_starts = 5_000  # environment steps before the first gradient step
  config.batch_size = 128  # team steps (low level) and options (high level) per gradient step
  config.learning_rate = 5e-4  # both levels and the mixer
  config.optimizer = "adam"  # or "sgd"; one optimizer state per level
  config.adam_eps = 1e-8  # Adam's ε
  config.max_grad_norm = 10.0  # global-norm clip per level; 0 switches it off
  config.gamma = 0.95  # per-step discount of the team reward (an option of k steps: γ^k)
  config.low_gamma = 0.9  # discount of the subgoal-reaching reward
  config.double_q = True  # the online networks pick the next subgoals and actions
  config.loss_type = "l2"  # ½·td², or "huber"
  config.huber_delta = 1.0  # Huber's threshold, read only with "huber"
  config.tau = 1.0  # Polyak rate of the target networks; 1.0 copies them
  config.target_update_interval = 200  # gradient steps between target updates
  config.epsilon_start = 1.0  # ε of both levels' ε-greedy choices, linear...
  config.epsilon_end = 0.05  # ...down to this...
  config.epsilon_decay_steps = 100_000  # ...over these environment steps
  config.hidden_sizes = (64, 64)  # the shared high-level network (values of subgoals)
  config.low_hidden_sizes = (64, 64)  # the shared goal-conditioned low-level network
  config.activation = "relu"  # of both levels' hidden layers
  config.mixer_embed_dim = 32  # QMIX's mixing layer
  config.hypernet_hidden = 64  # hidden units of the weight hypernetworks (0: linear)
  config.mixer_init_scale = 1e-3  # orthogonal-init scale of the hypernetworks' weight outputs
  config.rollout_unroll = 1  # lax.scan unroll of the environment steps
  config.eval_episodes = 32  # greedy episodes per evaluation
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  value_common.validate_value_fields(config, num_devices)
  value_common.validate_mixer_fields(config, MIXERS)
  checks.positive_int(config, "option_length")
  checks.in_unit_interval(config, "low_gamma")
  value_common.multi_agent_spec(config)
  if config.env_name not in SUBGOAL_OFFSETS:
    raise checks.ConfigError(
      f"config.env_name: expected one of {list(SUBGOAL_OFFSETS)} (environments whose subgoals "
      f"GMAH can locate in the observations: SUBGOAL_OFFSETS), got {config.env_name!r}"
    )


OffsetsFn = Callable[[Array], Array]  # observations [..., N, d] -> subgoal offsets [..., N, L, 2]


def landmark_offsets(obs: Array) -> Array:
  """`[..., N, L, 2]`: each landmark's position minus the agent's, from simple_spread's
  observations `[..., N, d]` (velocity 2, position 2, L offsets, 2(N−1) agent offsets, 2(N−1)
  communication: L = (d − 4N) / 2)."""
  num_agents, obs_dim = obs.shape[-2:]
  num_landmarks = (obs_dim - 4 * num_agents) // 2
  return obs[..., 4 : 4 + 2 * num_landmarks].reshape(obs.shape[:-1] + (num_landmarks, 2))


# environment name -> where its subgoals are, from its observations: the one place GMAH reads an
# environment's observation layout
SUBGOAL_OFFSETS: dict[str, OffsetsFn] = {
  "MPE_simple_spread_v3": landmark_offsets,  # the landmarks
  two_agent_rooms.ENV_NAME: two_agent_rooms.subgoal_offsets,  # room centres and hallways
}


def num_subgoals(obs_shape: tuple, subgoal_offsets: OffsetsFn = landmark_offsets) -> int:
  """L, the subgoals that `subgoal_offsets` finds in observations of shape `(N, d)` (by default
  the landmarks of simple_spread)."""
  obs = jax.ShapeDtypeStruct(tuple(obs_shape), jnp.float32)
  return jax.eval_shape(subgoal_offsets, obs).shape[-2]


def goal_offset(obs: Array, goal: Array, subgoal_offsets: OffsetsFn = landmark_offsets) -> Array:
  """`[..., N, 2]`: the offset of each agent's chosen subgoal `goal [..., N]`."""
  offsets = subgoal_offsets(obs)
  return jnp.take_along_axis(offsets, goal[..., None, None], axis=-2)[..., 0, :]


def goal_features(obs: Array, goal: Array, subgoal_offsets: OffsetsFn = landmark_offsets) -> Array:
  """What the low level reads of its subgoal: the subgoal's one-hot and its offset."""
  one_hot = jax.nn.one_hot(goal, subgoal_offsets(obs).shape[-2], dtype=obs.dtype)
  return jnp.concatenate([one_hot, goal_offset(obs, goal, subgoal_offsets)], axis=-1)


def subgoal_reward(
  next_obs: Array, goal: Array, subgoal_offsets: OffsetsFn = landmark_offsets
) -> Array:
  """The low level's reward `[..., N]`: minus the distance to the chosen subgoal after the step."""
  return -jnp.linalg.norm(goal_offset(next_obs, goal, subgoal_offsets), axis=-1)


class LowTransition(NamedTuple):
  """One replayed team step of the low level (or a `[B]` batch)."""

  obs: Array  # [N, d]
  goal: Array  # int32 [N], the subgoals pursued
  action: Array  # int32 [N]
  terminated: Array  # bool []
  next_obs: Array  # [N, d], the true successor


class HighTransition(NamedTuple):
  """One replayed option (or a `[B]` batch): its first observation, the subgoals, and its team
  rewards and discounts γ·(1 − terminated) over its k ≤ c steps (`mask`: the first k)."""

  obs: Array  # [N, d]
  goal: Array  # int32 [N]
  rewards: Array  # [C]
  discounts: Array  # [C]
  mask: Array  # bool [C]
  next_obs: Array  # [N, d], the observation after the option's last step


class OptionCarry(struct.PyTreeNode):
  """The environments and the options running in them (leading axis: environments)."""

  env: EnvCarry
  option: HighTransition  # [E]: the running options, as far as they have run
  length: Array  # int32 [E]: steps of the running option; 0: new subgoals due


def init_options(env: EnvCarry, option_length: int) -> OptionCarry:
  """No option running: every environment chooses subgoals at its next step."""
  num_envs, num_agents = env.obs.shape[:2]
  zeros = jnp.zeros((num_envs, option_length), jnp.float32)
  goal = jnp.zeros((num_envs, num_agents), jnp.int32)
  option = HighTransition(env.obs, goal, zeros, zeros, zeros.astype(bool), env.obs)
  return OptionCarry(env=env, option=option, length=jnp.zeros((num_envs,), jnp.int32))


def start_options(carry: OptionCarry, chosen_goal: Array) -> OptionCarry:
  """Where no option runs, the chosen subgoals start one at the current observation."""
  new = carry.length == 0
  fresh = init_options(carry.env, carry.option.rewards.shape[-1]).option._replace(goal=chosen_goal)
  pick = lambda a, b: jnp.where(new.reshape(new.shape + (1,) * (a.ndim - 1)), a, b)
  return carry.replace(option=jax.tree.map(pick, fresh, carry.option))


def advance_options(
  carry: OptionCarry, env: EnvCarry, step: Transition, gamma: float
) -> tuple[OptionCarry, HighTransition, Array]:
  """Records a step's team reward in the running options; an option ends after c steps or when
  its episode ends. Returns the carry, the options as they stand (`[E]`) and which ended."""
  steps = jnp.arange(carry.option.rewards.shape[-1])[None]
  at = steps == carry.length[:, None]
  discount = gamma * (1.0 - step.terminated.astype(jnp.float32))
  option = carry.option._replace(
    rewards=jnp.where(at, step.reward[:, None], carry.option.rewards),
    discounts=jnp.where(at, discount[:, None], carry.option.discounts),
    mask=steps <= carry.length[:, None],
    next_obs=step.next_obs,
  )
  length = carry.length + 1
  ended = (length == steps.shape[-1]) | step.done
  return carry.replace(env=env, option=option, length=jnp.where(ended, 0, length)), option, ended


class GMAHAgent(struct.PyTreeNode):
  """The train state: online and target parameters (`{"low": ..., "high": {"agent", "mixer"}}`),
  an optimizer state per level and the gradient-step count."""

  params: PyTree
  target_params: PyTree
  opt_state: PyTree
  num_updates: Array  # int32: gradient steps done (paces the target updates)
  high_network: nn.Module = struct.field(pytree_node=False)
  low_network: nn.Module = struct.field(pytree_node=False)
  mixer: nn.Module | None = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env, env_spec, config) -> "GMAHAgent":
    config = ml_collections.FrozenConfigDict(config)
    num_agents, obs_dim = env_spec.observation_shape
    offsets = SUBGOAL_OFFSETS[config.env_name]
    high = DiscreteQNetwork(
      num_subgoals((num_agents, obs_dim), offsets), config.hidden_sizes, config.activation
    )
    low = GoalConditionedQNetwork(env_spec.action_dim, config.low_hidden_sizes, config.activation)
    mixer = value_common.make_mixer(num_agents, config)  # None for "vdn" and "none"
    obs = with_agent_ids(jnp.zeros((1, num_agents, obs_dim), jnp.float32))
    goal = jnp.zeros((1, num_agents, high.num_actions + 2))  # `goal_features`' width

    @jax.jit  # one program, not one per initialiser and shape when called eagerly
    def init(key):
      high_key, low_key, mixer_key = jax.random.split(key, 3)
      return {
        "low": low.init(low_key, obs, goal),
        "high": {
          "agent": high.init(high_key, obs),
          "mixer": value_common.init_mixer(mixer, mixer_key, num_agents * obs_dim),
        },
      }

    params = init(key)
    # each level clipped and stepped on its own: the labels are a prefix of the parameters
    tx = optax.multi_transform(
      {level: value_common.make_optimizer(config) for level in params}, {k: k for k in params}
    )
    return cls(
      params=params,
      target_params=params,
      opt_state=tx.init(params),
      num_updates=jnp.zeros((), jnp.int32),
      high_network=high,
      low_network=low,
      mixer=mixer,
      tx=tx,
      config=config,
    )

  @property
  def subgoal_offsets(self) -> OffsetsFn:
    """The environment's `SUBGOAL_OFFSETS` entry."""
    return SUBGOAL_OFFSETS[self.config.env_name]

  def high_values(self, params: PyTree, obs: Array) -> Array:
    """Per-agent subgoal values `[..., N, L]` of observations `[..., N, d]`."""
    return self.high_network.apply(params["high"]["agent"], with_agent_ids(obs))

  def low_values(self, params: PyTree, obs: Array, goal: Array) -> Array:
    """Per-agent action values `[..., N, A]` under the subgoals `goal [..., N]`."""
    features = goal_features(obs, goal, self.subgoal_offsets)
    return self.low_network.apply(params["low"], with_agent_ids(obs), features)

  def high_targets(self, batch: HighTransition) -> Array:
    """The SMDP targets of a `[B]` batch of options: `[B]` on Q_tot, `[B, N]` per agent for
    `mixer="none"`; the next subgoals greedy under the online values (double Q) or the target."""
    q_next = self.high_values(self.target_params, batch.next_obs)  # [B, N, L]
    double = self.high_values(self.params, batch.next_obs) if self.config.double_q else q_next
    q_next = value_common.greedy_values(q_next, double)  # [B, N]
    target = jax.vmap(value_based.smdp_target, in_axes=(None, None, 0, None))
    if self.config.mixer == "none":
      return jax.vmap(target)(batch.rewards, batch.discounts, q_next, batch.mask)
    mixer_params = self.target_params["high"]["mixer"]
    q_tot_next = value_common.mix(self.mixer, mixer_params, q_next, mixer_state(batch.next_obs))
    return jax.vmap(value_based.smdp_target)(batch.rewards, batch.discounts, q_tot_next, batch.mask)

  def high_loss(self, params: PyTree, batch: HighTransition) -> tuple[Array, dict[str, Array]]:
    """The mean TD loss of the high level over a `[B]` batch of options, and its metrics."""
    target = self.high_targets(batch)
    q = self.high_values(params, batch.obs)  # [B, N, L]
    goal = jnp.asarray(batch.goal, jnp.int32)
    if self.config.mixer == "none":  # one loss per agent, on its own target
      losses, extras = value_common.td_losses_to_targets(q, goal, target, self.config)
      q_value, td_error = extras.q_value, extras.td_error
    else:
      state = mixer_state(batch.obs)
      mixer_params = params["high"]["mixer"]
      losses, q_value, td_error = value_common.mixed_td_losses(
        self.mixer, mixer_params, q, goal, state, target, self.config
      )
    metrics = {"high_q": jnp.mean(q_value), "high_td_error_abs": jnp.mean(jnp.abs(td_error))}
    return jnp.mean(losses), metrics

  def low_loss(self, params: PyTree, batch: LowTransition) -> tuple[Array, dict[str, Array]]:
    """DQN's mean TD loss of the low level on the subgoal-reaching reward over `[B, N]`."""
    config = self.config
    goal = jnp.asarray(batch.goal, jnp.int32)
    q = self.low_values(params, batch.obs, goal)
    q_next = self.low_values(self.target_params, batch.next_obs, goal)
    selector = self.low_values(self.params, batch.next_obs, goal) if config.double_q else q_next
    reward = subgoal_reward(batch.next_obs, goal, self.subgoal_offsets)
    live = 1.0 - jnp.asarray(batch.terminated, jnp.float32)[:, None]
    discount = jnp.broadcast_to(config.low_gamma * live, reward.shape)
    kwargs = {"loss_type": config.loss_type, "huber_delta": config.huber_delta}
    td = jax.vmap(jax.vmap(lambda *args: value_based.q_learning_loss(*args, **kwargs)))
    losses, extras = td(q, batch.action, reward, discount, q_next, selector)
    metrics = {
      "subgoal_reward": jnp.mean(reward),
      "low_td_error_abs": jnp.mean(jnp.abs(extras.td_error)),
    }
    return jnp.mean(losses), metrics

  def update(self, batches: tuple) -> tuple["GMAHAgent", dict[str, Array]]:
    """One gradient step on each level (`(LowTransition, HighTransition)` batches), then the
    target update every `target_update_interval` gradient steps."""

    def loss(params, batches):
      # the levels' parameters are disjoint: the gradient of the sum is each level's own
      (low, low_metrics), (high, high_metrics) = (
        self.low_loss(params, batches[0]),
        self.high_loss(params, batches[1]),
      )
      return low + high, {"low_loss": low, "high_loss": high, **low_metrics, **high_metrics}

    grads, metrics = jax.grad(loss, has_aux=True)(self.params, batches)
    agent = common.apply_gradients(self, grads)
    num_updates = self.num_updates + 1
    target_params, update_now = value_common.update_target(
      agent.params, self.target_params, num_updates, self.config
    )
    metrics["target_updates"] = update_now.astype(jnp.float32)
    return agent.replace(target_params=target_params, num_updates=num_updates), metrics


class RunnerState(struct.PyTreeNode):
  """Everything a run carries between Learner steps; only `options` (per environment) is split
  along the mesh's data axis, the replay buffers are replicated."""

  agent: GMAHAgent
  low_buffer: replay.ReplayBuffer  # team steps
  high_buffer: replay.ReplayBuffer  # finished options
  options: OptionCarry
  key: Array
  update: Array  # int32 count of Learner steps done


def make_collector(env, env_params, config):
  """`collect(agent, carry, key, eps, num_steps)`: `num_steps` steps of every environment, both
  levels ε-greedy; returns the carry and per step `[T, E]` the low-level items, the options as
  they stand, which ended, the environment steps and the fraction of subgoals pursued."""

  def one_step(agent: GMAHAgent, eps, carry: OptionCarry, inputs):
    (high_noise, low_noise), keys = inputs
    q_high = agent.high_values(agent.params, carry.env.obs)
    carry = start_options(carry, value_common.epsilon_greedy(q_high, *high_noise, eps))
    q_low = agent.low_values(agent.params, carry.env.obs, carry.option.goal)
    action = value_common.epsilon_greedy(q_low, *low_noise, eps)
    env_carry, step, _ = rollout.step_with_env_keys(env, env_params, carry.env, action, keys)
    low = LowTransition(carry.env.obs, carry.option.goal, action, step.terminated, step.next_obs)
    pursued = jax.nn.one_hot(carry.option.goal, q_high.shape[-1]).max(axis=-2)  # [E, L]
    carry, option, ended = advance_options(carry, env_carry, step, config.gamma)
    return carry, (low, option, ended, step, pursued.mean(axis=-1))

  def collect(agent: GMAHAgent, carry: OptionCarry, key: Array, eps: Array, num_steps: int):
    num_envs, num_agents = carry.option.goal.shape
    shape = (num_steps, num_envs, num_agents)
    high_key, low_key, env_key = jax.random.split(key, 3)
    noise = (
      value_common.epsilon_greedy_noise(high_key, shape, agent.high_network.num_actions),
      value_common.epsilon_greedy_noise(low_key, shape, env.num_actions),
    )
    env_keys = rollout.rollout_env_keys(env, env_key, (num_steps, num_envs))  # before the loop
    body = lambda carry, inputs: one_step(agent, eps, carry, inputs)
    return jax.lax.scan(body, carry, (noise, env_keys), unroll=config.rollout_unroll)

  return collect


def first_episode_success(traj: Transition, first: Array) -> Array:
  """`[E]` 1.0 where the first episode (`first` `[T, E]`: 1 up to and including its last step)
  terminated on a step of positive team reward: the four rooms' goal. A terminal step of another
  reward is no success (`shared_room_ends`: both agents in one goal room, at −step_cost)."""
  won = traj.terminated & (traj.reward > 0.0) & (first > 0)
  return won.any(axis=0).astype(jnp.float32)


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` collects `num_envs * num_steps` team steps (and the options that
  end in them), then makes `updates_per_step` gradient steps on both levels (none before
  `learning_starts`, nor before the first option has ended)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params, env_spec = value_common.multi_agent_spec(config)
  collect = make_collector(env, env_params, config)
  steps_per_update = config.num_envs * config.num_steps
  num_updates = training.num_updates(config.total_timesteps, steps_per_update)
  # the options of about the same stretch of experience as the team steps of the low buffer
  high_capacity = max(config.buffer_size // config.option_length, steps_per_update)
  flat = lambda tree: jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = GMAHAgent.create(agent_key, env, env_spec, config)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    options = init_options(carry, config.option_length)
    _, (low, option, *_) = jax.eval_shape(lambda: collect(agent, options, key, jnp.zeros(()), 1))
    example = lambda tree: jax.tree.map(lambda x: jnp.zeros(x.shape[2:], x.dtype), tree)
    return RunnerState(
      agent=agent,
      low_buffer=replay.init(example(low), config.buffer_size),
      high_buffer=replay.init(example(option), high_capacity),
      options=options,
      key=key,
      update=jnp.zeros((), jnp.int32),
    )

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, collect_key, update_key = jax.random.split(state.key, 3)
    eps = value_common.epsilon(state.update * steps_per_update, config)
    options, (low, option, ended, traj, coverage) = collect(
      state.agent, state.options, collect_key, eps, config.num_steps
    )
    low_buffer = replay.add(state.low_buffer, flat(low))
    high_buffer = replay.add_masked(state.high_buffer, flat(option), ended.reshape(-1))
    warm = (state.update + 1) * steps_per_update >= config.learning_starts
    agent, metrics = value_common.gradient_steps_after_warmup(
      lambda agent, batches: agent.update(batches),
      state.agent,
      (low_buffer, high_buffer),
      update_key,
      warm & (high_buffer.size > 0),
      config,
    )
    metrics.update(epsilon=eps, options=ended.sum(), subgoal_coverage=coverage.mean())
    metrics.update(rollout.rollout_statistics(traj))
    state = state.replace(
      agent=agent, low_buffer=low_buffer, high_buffer=high_buffer, options=options, key=key
    )
    return state.replace(update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    """Greedy at both levels: `eval_episodes` episodes, each environment's first one (MPE's all
    end at their time limit; four rooms' may terminate earlier, the environment then resets and
    what follows is left out)."""
    reset_key, run_key = jax.random.split(key)
    carry = rollout.reset(env, env_params, reset_key, config.eval_episodes)
    options = init_options(carry, config.option_length)
    steps = env_params.max_steps_in_episode
    _, (*_, traj, coverage) = collect(state.agent, options, run_key, 0.0, steps)
    # 1 up to and including each environment's first episode end, 0 after it
    earlier_ends = jnp.cumsum(traj.done, axis=0) - traj.done
    first = (earlier_ends == 0).astype(jnp.float32)  # [T, E]
    returns = (traj.reward * first).sum(axis=0)
    return {
      "eval_return": returns.mean(),
      "eval_return_std": returns.std(),
      "eval_length": first.sum(axis=0).mean(),
      "eval_success": first_episode_success(traj, first).mean(),
      "eval_subgoal_coverage": coverage.mean(),
    }

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=num_updates,
    env_steps_per_update=steps_per_update,
    sharded_field="options",
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
