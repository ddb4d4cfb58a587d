"""A critic-free policy optimiser over grouped rollouts: GRPO, Dr. GRPO, RLOO and GiGPO.

Every update draws `num_groups` fresh tasks and runs `group_size` whole episodes of each from the
same initial state (`hrljax.rollout.grouped_episodes`). Each episode is scored against the other
episodes of its group by the estimator chosen in `config.estimator`, and the policy is improved
with the clipped surrogate, optionally with a KL penalty to the frozen initial policy, aggregated
over the valid steps (`hrljax.losses.policy_gradient.aggregate`). There is no value network.

Estimators (`hrljax.losses.group_relative`):
  * `grpo`: `(R_i - mean_g R) / (std_g R + eps)` of the episode return, on every step of the
    episode. Shao et al., "DeepSeekMath", arXiv:2402.03300, section 4.1.2 (outcome supervision).
  * `dr_grpo`: `R_i - mean_g R`. Liu et al., "Understanding R1-Zero-Like Training",
    arXiv:2503.20783.
  * `rloo`: `R_i - mean_{j != i} R_j`. Ahmadian et al., arXiv:2402.14740.
  * `gigpo`: the episode advantage plus `omega` times a step advantage that compares the
    discounted return of a step with those of every step of the group taken from the same
    observation ("anchor state"). Feng, Xue, Liu, An, "Group-in-Group Policy Optimization for LLM
    Agent Training", arXiv:2505.10978, Eqs. 3, 5-8. Anchor ids are computed on device from the
    observations (`group_relative.anchor_state_ids`), inside the jitted step.

The objective (GRPO paper, Eq. 3, with the aggregation made a choice):
  `agg(max(-rho A, -clip(rho, 1 - eps, 1 + eps_high) A)) + kl_coef * agg(KL_k(pi || pi_ref))
   - entropy_coef * agg(H(pi))` over the valid steps of the minibatch's episodes.

Defaults are the GiGPO reference scripts' (langfengQ/DrMAS@152a8fb
`examples/gigpo_trainer/run_alfworld.sh`, the paper authors' repository): group size 8, gamma
0.95, omega (`step_advantage_w`) 1, KL loss `low_var_kl` (k3) with coefficient 0.01 to the frozen
reference policy, token-mean aggregation (verl's default), clip 0.2. The step-level
normalisation defaults to `mean` (`mean_norm`); that script uses `mean_std_norm` for ALFWorld,
other scripts `mean_norm`: it is `config.gigpo_norm`.

Deviations, each deliberate:
  * An environment step plays the role of an LLM response token (one action per step); the
    reference policy is the initial policy (the LLM setting's SFT model).
  * verl-agent adds an invalid-action penalty to the rewards (an LLM may emit unparseable
    actions); gymnax actions are always valid, so there is none.
  * An episode is collected with a fixed number of steps `num_steps`; steps after its end are
    masked out (set the environment's time limit to at most `num_steps`).
  * Evaluation samples from the policy (the trained object), where PPO's evaluates its mode.

The whole run is one XLA program: `make_train(config)(key)`; the experiment CLI drives
`make_learner(config)`. The run state's per-environment field is `group_ids`: sharded along the
mesh's data axis it shards the rollouts with it, and the group statistics reduce across devices.
"""

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, rollout, training
from hrljax.agents import common
from hrljax.losses import group_relative as gr
from hrljax.losses import policy_gradient as pg
from hrljax.networks.policy import MLPPolicy
from hrljax.training import Learner
from hrljax.types import Array, PyTree

ESTIMATORS = (*gr.OUTCOME_ESTIMATORS, "gigpo")
GIGPO_NORMS = ("mean", "mean_std")
EPISODE_STAT_WEIGHTINGS = ("trajectory", "step")


def get_config() -> ml_collections.ConfigDict:
  """Group-relative hyperparameters; defaults from the GiGPO reference scripts (module doc)."""
  config = training.run_config(log_every=10, checkpoint_every=100)
  config.agent = "group_relative"
  config.env_name = "FourRooms-misc"  # a registered environment (hrljax.envs.make)
  config.env_kwargs = ml_collections.ConfigDict()  # its keyword arguments
  config.estimator = "gigpo"  # "grpo", "dr_grpo", "rloo" or "gigpo"
  config.total_timesteps = 1_048_576  # environment steps
  config.num_groups = 16  # tasks per update
  config.group_size = 8  # episodes per task (verl-agent `env.rollout.n`)
  config.num_envs = config.get_ref("num_groups") * config.get_ref("group_size")  # episodes
  config.num_steps = 32  # fixed episode window T
  # Estimators.
  config.gamma = 0.95  # GiGPO Eq. 5 step-return discount
  config.omega = 1.0  # GiGPO Eq. 8 `step_advantage_w`
  config.gigpo_norm = "mean"  # GiGPO F_norm: "mean" (mean_norm) or "mean_std" (mean_std_norm)
  config.episode_stat_weighting = "trajectory"  # GiGPO Eq. 3 baseline (paper) or "step"
  config.grpo_scale = "group"  # GRPO std: "group", "batch" (PPO-Lite) or "none"
  config.singleton_mode = "zero"  # advantage of a one-sample group (GRPO/RLOO/GiGPO episode)
  config.advantage_eps = 1e-6  # added to the group std (verl's value)
  # Loss.
  config.clip_epsilon = 0.2  # PPO ratio clip, lower side
  config.clip_epsilon_high = 0.2  # upper side; DAPO clip-higher uses 0.28
  config.kl_coef = 0.01  # 0 disables the reference policy's forward pass
  config.kl_estimator = "k3"  # verl's `low_var_kl`
  config.entropy_coef = 0.0  # entropy bonus
  config.loss_aggregation = "token_mean"  # verl's default (policy_gradient.AGGREGATION_MODES)
  # Optimisation.
  config.update_epochs = 1  # passes over each update's episodes
  config.num_minibatches = 1  # of episodes, per pass
  config.learning_rate = 3e-4  # constant
  config.optimizer = "adam"  # or "sgd" (used by the multi-device equivalence test)
  config.adam_eps = 1e-5  # Adam epsilon
  config.max_grad_norm = 1.0  # global-norm clip
  # Policy network.
  config.hidden_sizes = (64, 64)  # MLP widths
  config.activation = "tanh"  # MLP activation
  config.observation_one_hot = 0  # > 0: integer observations one-hot encoded, this many classes
  config.rollout_unroll = 4  # scan unroll of the rollout
  config.eval_episodes = 64  # episodes per evaluation (sampled actions)
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  non_negatives = ("kl_coef", "observation_one_hot")
  common.validate_group_relative_fields(
    config, ("group_size", "num_envs", "num_steps"), non_negatives
  )
  checks.in_unit_interval(config, "gamma")
  if not isinstance(config.omega, (int, float)) or isinstance(config.omega, bool):
    raise checks.ConfigError(f"config.omega: expected a number, got {config.omega!r}")
  checks.one_of(config, "estimator", ESTIMATORS)
  checks.one_of(config, "gigpo_norm", GIGPO_NORMS)
  checks.one_of(config, "episode_stat_weighting", EPISODE_STAT_WEIGHTINGS)
  checks.one_of(config, "kl_estimator", pg.KL_ESTIMATORS)
  checks.one_of(config, "loss_aggregation", pg.AGGREGATION_MODES)
  checks.one_of(config, "optimizer", ("adam", "sgd"))
  num_envs = config.num_groups * config.group_size
  if config.num_envs != num_envs:
    raise checks.ConfigError(
      f"config.num_envs: expected num_groups * group_size ({num_envs}), got {config.num_envs}"
    )
  checks.divisible(config, "num_envs", num_devices, "the device count")
  if num_envs % config.num_minibatches:
    raise checks.ConfigError(
      f"config.num_minibatches: expected a divisor of num_groups * group_size ({num_envs}), "
      f"got {config.num_minibatches}"
    )
  training.num_updates(config.total_timesteps, num_envs * config.num_steps)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)  # unknown names fail here
  if config.observation_one_hot and not envs.spec(env, env_params).discrete:
    raise checks.ConfigError(
      "config.observation_one_hot: expected 0 for a continuous-action "
      f"environment, got {config.observation_one_hot!r}"
    )


class GroupBatch(NamedTuple):
  """The episodes of one update, trajectory-major (`[N, T, ...]`, N = num_groups * group_size)."""

  obs: PyTree  # [N, T, ...] observation each action was taken from
  action: Array  # [N, T, ...]
  log_prob: Array  # [N, T] log-probability under the behaviour policy
  advantage: Array  # [N, T] group-relative advantage (0 outside the episode)
  mask: Array  # [N, T] bool: the step belongs to the episode


class GroupRelativeAgent(struct.PyTreeNode):
  """Train state: policy parameters, the frozen reference parameters, optimizer state, RNG key."""

  params: PyTree
  ref_params: PyTree
  opt_state: PyTree
  key: Array
  network: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env_spec: envs.EnvSpec, config) -> "GroupRelativeAgent":
    config = ml_collections.FrozenConfigDict(config)
    network = make_network(env_spec, config)
    init_key, key = jax.random.split(key)
    params = common.init_params(network, init_key, env_spec.observation_shape)
    tx = make_optimizer(config)
    return cls(
      params=params,
      ref_params=params,
      opt_state=tx.init(params),
      key=key,
      network=network,
      tx=tx,
      config=config,
    )

  def act(self, obs: PyTree, key: Array, deterministic: bool = False) -> Array:
    """Actions for a batch of observations (the mode of the policy if `deterministic`)."""
    dist = self.network.apply(self.params, obs)
    return dist.mode() if deterministic else dist.sample(seed=key)

  def update(self, batch: GroupBatch) -> tuple["GroupRelativeAgent", dict[str, Array]]:
    """`update_epochs` passes over the episodes, in `num_minibatches` minibatches of episodes."""
    return common.minibatch_epochs(
      self, batch, _minibatch_step, self.config.num_minibatches, self.config.update_epochs
    )


def make_network(env_spec: envs.EnvSpec, config) -> MLPPolicy:
  return MLPPolicy(
    action_dim=env_spec.action_dim,
    discrete=env_spec.discrete,
    observation_ndim=len(env_spec.observation_shape),
    hidden_sizes=tuple(config.hidden_sizes),
    activation=config.activation,
    one_hot=int(config.observation_one_hot),
  )


def make_optimizer(config) -> optax.GradientTransformation:
  """Global-norm clipping, then Adam or SGD at a constant learning rate."""
  if config.optimizer == "sgd":
    optimizer = optax.sgd(config.learning_rate)
  else:
    optimizer = optax.adam(config.learning_rate, eps=config.adam_eps)
  return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optimizer)


def policy_loss(
  params: PyTree, agent: GroupRelativeAgent, batch: GroupBatch
) -> tuple[Array, dict[str, Array]]:
  """Clipped surrogate + `kl_coef` KL to the reference − `entropy_coef` entropy, aggregated over
  the valid steps of the minibatch's episodes with `config.loss_aggregation`."""
  config = agent.config
  dist = agent.network.apply(params, batch.obs)
  log_prob = dist.log_prob(batch.action)
  surrogate, extras = common.clipped_surrogate(log_prob, batch, config)

  def agg(x):
    return pg.aggregate(x, batch.mask, config.loss_aggregation)[0]

  surrogate_loss = agg(surrogate)
  entropy = agg(dist.entropy())
  total = surrogate_loss - config.entropy_coef * entropy
  metrics = {}
  if config.kl_coef > 0:
    ref_log_prob = agent.network.apply(agent.ref_params, batch.obs).log_prob(batch.action)
    kl = agg(pg.kl_divergence(log_prob, ref_log_prob, config.kl_estimator, mask=batch.mask))
    total = total + config.kl_coef * kl
    metrics["kl_to_reference"] = kl
  metrics.update(
    loss=total,
    policy_loss=surrogate_loss,
    entropy=entropy,
    approx_kl=pg.masked_mean(extras.approx_kl, batch.mask),
    clip_fraction=pg.masked_mean(extras.clipped, batch.mask),
  )
  return total, metrics


def _minibatch_step(
  agent: GroupRelativeAgent, minibatch: GroupBatch
) -> tuple[GroupRelativeAgent, dict[str, Array]]:
  return common.gradient_step(agent, policy_loss, agent, minibatch)


# ----------------------------------------------------------------------------------------------
# Advantages of grouped episodes.
# ----------------------------------------------------------------------------------------------


def step_advantages(episodes: rollout.GroupedEpisodes, config) -> tuple[Array, dict[str, Array]]:
  """Advantages `[T, N]` of every step of grouped episodes (0 outside the episodes), and metrics.

  GiGPO works on one row per environment step: rows are the `T * N` steps in time-major order,
  trajectory `n`, step index `t`, group `group_ids[n]`, and the anchor of a row is its
  observation within its group.
  """
  transitions, valid = episodes.transitions, episodes.valid
  num_steps, num_envs = valid.shape
  group_ids = episodes.group_ids
  if config.estimator != "gigpo":
    returns = jnp.where(valid, transitions.reward, 0.0).sum(axis=0)
    advantage = common.outcome_advantages(returns, group_ids, config)
    advantage = jnp.where(valid, advantage[None, :], 0.0)
    return advantage, {"advantage_abs_mean": pg.masked_mean(jnp.abs(advantage), valid)}

  rows = num_steps * num_envs
  flat_valid = valid.reshape(rows)
  traj_ids = jnp.broadcast_to(jnp.arange(num_envs, dtype=jnp.int32)[None, :], valid.shape)
  step_index = jnp.broadcast_to(jnp.arange(num_steps, dtype=jnp.int32)[:, None], valid.shape)
  row_groups = jnp.broadcast_to(group_ids[None, :], valid.shape).reshape(rows)
  observations = jax.tree.map(lambda x: x.reshape((rows,) + x.shape[2:]), transitions.obs)
  anchors = gr.anchor_state_ids(observations, row_groups, valid=flat_valid)
  out = gr.gigpo_advantages(
    transitions.reward.reshape(rows),
    traj_ids.reshape(rows),
    step_index.reshape(rows),
    row_groups,
    anchors.ids,
    num_groups=config.num_groups,
    num_traj=num_envs,
    num_anchors=rows,
    valid=flat_valid,
    gamma=config.gamma,
    omega=config.omega,
    norm=config.gigpo_norm,
    eps=config.advantage_eps,
    episode_stat_weighting=config.episode_stat_weighting,
    episode_singleton_mode=config.singleton_mode,
  )
  anchor_size = jax.ops.segment_sum(flat_valid.astype(jnp.int32), anchors.ids, rows)[anchors.ids]
  metrics = {
    "advantage_abs_mean": pg.masked_mean(jnp.abs(out.advantages), flat_valid),
    "episode_advantage_abs_mean": pg.masked_mean(jnp.abs(out.episode_advantages), flat_valid),
    "step_advantage_abs_mean": pg.masked_mean(jnp.abs(out.step_advantages), flat_valid),
    # Share of steps whose anchor state was visited at least twice in the group.
    "anchor_share": pg.masked_mean((anchor_size > 1).astype(jnp.float32), flat_valid),
  }
  return out.advantages.reshape(num_steps, num_envs), metrics


def make_batch(episodes: rollout.GroupedEpisodes, config) -> tuple[GroupBatch, dict[str, Array]]:
  """Advantages, then the trajectory-major `GroupBatch` of the update."""
  advantage, metrics = step_advantages(episodes, config)
  transitions = episodes.transitions
  swap = lambda x: jnp.swapaxes(x, 0, 1)
  batch = GroupBatch(
    obs=jax.tree.map(swap, transitions.obs),
    action=swap(transitions.action),
    log_prob=swap(transitions.policy_extras),
    advantage=swap(advantage),
    mask=swap(episodes.valid),
  )
  return batch, metrics


def episode_metrics(episodes: rollout.GroupedEpisodes) -> dict[str, Array]:
  """Per-update sums over the update's episodes (the loop turns `*_sum` into means) and the
  success rate (an episode succeeds when it reaches a terminal state, FourRooms' goal)."""
  success = rollout.summarize_episodes(episodes).terminated
  return {**rollout.episode_sums(episodes), "success_rate": success.astype(jnp.float32).mean()}


# ----------------------------------------------------------------------------------------------
# The run: grouped episodes -> advantages -> update, as a Learner and as one program.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: GroupRelativeAgent
  group_ids: Array  # [N] group of each environment slot: sharded along the data axis
  key: Array
  update: Array  # int32 count of updates done


def collect(
  state: RunnerState, env, env_params, config
) -> tuple[GroupBatch, dict[str, Array], Array]:
  """Runs the update's grouped episodes with the current policy; returns the batch, its
  metrics and the run's next key."""
  network = state.agent.network

  def policy(params, obs, key):
    dist = network.apply(params, obs)
    action = dist.sample(seed=key)
    return action, dist.log_prob(action)

  key, rollout_key = jax.random.split(state.key)
  episodes = rollout.grouped_episodes(
    env,
    env_params,
    policy,
    state.agent.params,
    rollout_key,
    state.group_ids,
    config.num_steps,
    unroll=config.rollout_unroll,
  )
  batch, metrics = make_batch(episodes, config)
  metrics.update(episode_metrics(episodes))
  return batch, metrics, key


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one update: grouped episodes, advantages, policy epochs."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  env_spec = envs.spec(env, env_params)
  env_steps_per_update = config.num_groups * config.group_size * config.num_steps

  def init(key: Array) -> RunnerState:
    agent_key, key = jax.random.split(key)
    agent = GroupRelativeAgent.create(agent_key, env_spec, config)
    return RunnerState(
      agent=agent,
      group_ids=rollout.grouped_ids(config.num_groups, config.group_size),
      key=key,
      update=jnp.zeros((), jnp.int32),
    )

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    batch, rollout_metrics, key = collect(state, env, env_params, config)
    agent, metrics = state.agent.update(batch)
    metrics.update(rollout_metrics)
    return state.replace(agent=agent, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    network = state.agent.network

    def sample(params, obs, key):
      return network.apply(params, obs).sample(seed=key), None

    return rollout.evaluate(
      env,
      env_params,
      sample,
      state.agent.params,
      key,
      config.eval_episodes,
      env_params.max_steps_in_episode,
    )

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=training.num_updates(config.total_timesteps, env_steps_per_update),
    env_steps_per_update=env_steps_per_update,
    sharded_field="group_ids",
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
