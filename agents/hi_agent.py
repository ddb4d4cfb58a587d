"""Hi-Agent's two-level group-relative agent on four rooms: subgoals, then actions, no critic.

Wu et al., "Hi-Agent: Hierarchical Vision-Language Agents for Mobile Device Control",
arXiv 2510.14388. A high-level policy proposes a subgoal, a low-level policy acts toward it;
multi-step control is recast as a sequence of one-decision problems, so GRPO samples `n * G`
paths instead of `G^n`. At every decision state the high level samples `G` subgoals, and under
each the low level runs `K` short segments from that same saved state
(`hrljax.rollout.two_level`). The high-level reward of a subgoal is the foresight reward
`format + lam * execution success` of the low level under it (`group_relative.foresight_rewards`,
reconstructed from the abstract: the paper's equation could not be found, see its docstring),
z-scored over the state's subgoals; the low level's reward, progress toward its subgoal, is
z-scored over the segments of one subgoal (`group_relative.two_level_advantages`). Both levels
are improved with the clipped surrogate (`policy_gradient.clipped_surrogate_loss`, GRPO paper
Eq. 3 without the KL term), token-mean aggregated, with no value network.

Four rooms (gymnax `FourRooms-misc`, random start and goal per task) in these terms:
  * Subgoal: a target cell in the `(2R + 1) x (2R + 1)` window around the agent (`R =
    subgoal_radius`; 25 cells for R = 2). A cell is concrete and checkable (the agent stands on
    it or not), nearby cells are what a segment of `H = segment_steps >= 2R` steps can reach on
    an open floor, and the choice among 25 is a real decision (direction, distance, which door).
  * Format reward: 1 if the cell is open (inside the map, not a wall), else 0: the well-formed,
    executable subgoal, as an LLM's output is well formed or not.
  * Execution success of a segment (`execution_success`): `task_progress` (default) is 1 if the
    segment ends closer to the task goal than it started, in shortest-path steps over the map, or
    at the goal. It plays the part of Hi-Agent's step-level judge, which scores whether the low
    level's action under the subgoal moves the task forward. This is information the flat
    baselines do not get (they see the sparse goal reward only). `subgoal_reached` is the literal
    check, 1 if the segment ends on the subgoal cell: it carries no task signal.
  * Low-level reward of a segment: progress toward the subgoal, the Manhattan distance from the
    segment's start to the subgoal minus that from its end (no map knowledge), on every step of
    the segment.

Deviations: no KL to a reference policy (the four-rooms presets of `group_relative` use none);
the main trajectory continues from a uniformly drawn branch (a sample of the hierarchical policy);
the environment steps of every branch count toward the budget. Evaluation runs the hierarchical
policy without branching (a subgoal every `segment_steps` steps, sampled actions).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, rollout, training
from hrljax.agents import common
from hrljax.losses import group_relative as gr
from hrljax.losses import policy_gradient as pg
from hrljax.networks.policy import MLPPolicy
from hrljax.rollout import two_level
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree

EXECUTION_SUCCESS = ("task_progress", "subgoal_reached")
GRID = 13  # four rooms is 13 x 13 cells; coordinates one-hot encoded with 13 classes


def get_config() -> ml_collections.ConfigDict:
  """Hi-Agent's hyperparameters on four rooms; the optimisation values of `grpo_fourrooms`."""
  config = training.run_config(log_every=10, checkpoint_every=100)
  config.agent = "hi_agent"
  config.env_name = "FourRooms-misc"  # gymnax four rooms (the agent reads its wall map)
  config.env_kwargs = ml_collections.ConfigDict()  # its keyword arguments
  config.total_timesteps = 2_097_152  # environment steps, every branch's steps included
  config.num_groups = 16  # main environments (tasks) per update
  config.num_decisions = 8  # decision states per main environment per update
  config.num_subgoals = 4  # G: subgoals sampled per decision state
  config.num_segments = 4  # K: low-level segments per subgoal, branched from the same state
  config.segment_steps = 4  # H: steps of a segment (and between decisions at evaluation)
  config.subgoal_radius = 2  # R: a subgoal is a cell within R rows and R columns of the agent
  config.lam = 1.0  # weight of the execution success in the foresight reward
  config.execution_success = "task_progress"  # or "subgoal_reached" (module doc)
  config.grpo_scale = "group"  # std of the z-score at both levels: "group", "batch" or "none"
  config.advantage_eps = 1e-6  # added to the group std (verl's value)
  config.singleton_mode = "zero"  # advantage of a one-row group
  config.clip_epsilon = 0.2  # PPO ratio clip, lower side
  config.clip_epsilon_high = 0.2  # upper side
  config.entropy_coef = 0.01  # entropy bonus, both levels
  config.update_epochs = 4  # passes over each update's rows
  config.num_minibatches = 2  # of each level's rows, per pass
  config.learning_rate = 3e-3  # Adam, constant
  config.adam_eps = 1e-5  # Adam epsilon
  config.max_grad_norm = 1.0  # global-norm clip
  config.hidden_sizes = (64, 64)  # MLP widths, both levels
  config.activation = "tanh"  # MLP activation
  config.rollout_unroll = 4  # scan unroll of a segment
  config.eval_episodes = 64  # episodes per evaluation (sampled subgoals and actions)
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` (a ValueError) naming the first field that cannot run."""
  sizes = ("num_decisions", "num_subgoals", "num_segments", "segment_steps", "subgoal_radius")
  common.validate_group_relative_fields(config, sizes, non_negatives=("lam",))
  checks.one_of(config, "execution_success", EXECUTION_SUCCESS)
  if config.env_name != "FourRooms-misc":
    raise checks.ConfigError(
      f"config.env_name: expected 'FourRooms-misc' (subgoals are its cells), got "
      f"{config.env_name!r}"
    )
  rows = config.num_groups * config.num_decisions * config.num_subgoals  # high-level rows
  if rows % config.num_minibatches:
    raise checks.ConfigError(
      "config.num_minibatches: expected a divisor of num_groups * num_decisions * "
      f"num_subgoals ({rows}), got {config.num_minibatches}"
    )
  training.num_updates(config.total_timesteps, env_steps_per_update(config))
  envs.make(config.env_name, **config.env_kwargs)


def env_steps_per_update(config) -> int:
  return (
    config.num_groups
    * config.num_decisions
    * config.num_subgoals
    * config.num_segments
    * config.segment_steps
  )


def shortest_path_steps(walkable: np.ndarray) -> np.ndarray:
  """`[R, C, R, C]` int32 shortest-path steps between open cells (4-neighbour moves, BFS from
  every cell); `R * C` where either cell is a wall or the cells are not connected."""
  rows, cols = walkable.shape
  far = rows * cols
  dist = np.full((rows, cols, rows, cols), far, np.int32)
  for r0 in range(rows):
    for c0 in range(cols):
      if not walkable[r0, c0]:
        continue
      dist[r0, c0, r0, c0] = 0
      frontier = [(r0, c0)]
      while frontier:
        nxt = []
        for r, c in frontier:
          for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            rr, cc = r + dr, c + dc
            inside = 0 <= rr < rows and 0 <= cc < cols
            if inside and walkable[rr, cc] and dist[r0, c0, rr, cc] == far:
              dist[r0, c0, rr, cc] = dist[r0, c0, r, c] + 1
              nxt.append((rr, cc))
        frontier = nxt
  return dist


class HiAgent(struct.PyTreeNode):
  """Train state: both levels' parameters (`{"high", "low"}`), optimizer state, RNG key."""

  params: PyTree
  opt_state: PyTree
  key: Array
  high: MLPPolicy = struct.field(pytree_node=False)
  low: MLPPolicy = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, config) -> "HiAgent":
    config = ml_collections.FrozenConfigDict(config)
    width = 2 * config.subgoal_radius + 1
    policy = lambda n: MLPPolicy(
      action_dim=n,
      hidden_sizes=tuple(config.hidden_sizes),
      activation=config.activation,
      one_hot=GRID,
    )
    high, low = policy(width * width), policy(4)
    high_key, low_key, key = jax.random.split(key, 3)
    params = {
      "high": common.init_params(high, high_key, (4,)),  # (agent row, col, goal row, col)
      "low": common.init_params(low, low_key, (4,)),  # (agent row, col, subgoal row, col)
    }
    tx = optax.chain(
      optax.clip_by_global_norm(config.max_grad_norm),
      optax.adam(config.learning_rate, eps=config.adam_eps),
    )
    return cls(params, tx.init(params), key, high, low, tx, config)

  def subgoal_cells(self, obs: Array, index: Array) -> Array:
    """Cell `[N, 2]` of subgoal `index` (row-major in the window) from the agent's cell."""
    radius = self.config.subgoal_radius
    width = 2 * radius + 1
    offset = jnp.stack([index // width, index % width], axis=-1) - radius
    return jnp.clip(obs[:, :2].astype(jnp.int32) + offset, 0, GRID - 1)

  def high_fn(self, params, obs, key):
    """`(subgoal cells [N, 2], (index [N], log_prob [N]))`: the high level's sample."""
    dist = self.high.apply(params["high"], obs)
    index = dist.sample(seed=key)
    return self.subgoal_cells(obs, index), (index, dist.log_prob(index))

  def low_fn(self, params, obs, subgoal, key):
    dist = self.low.apply(params["low"], low_observation(obs, subgoal))
    action = dist.sample(seed=key)
    return action, dist.log_prob(action)


def low_observation(obs: Array, subgoal: Array) -> Array:
  """(agent row, col, subgoal row, col) from four rooms' (agent, goal) observation."""
  return jnp.concatenate([obs[..., :2], subgoal.astype(obs.dtype)], axis=-1)


class LevelBatch(NamedTuple):
  """Rows of one level: observation, action, behaviour log-prob, advantage, validity."""

  obs: Array
  action: Array
  log_prob: Array
  advantage: Array
  mask: Array


def level_loss(network, params, batch: LevelBatch, config) -> tuple[Array, Array, dict]:
  """Clipped surrogate of one level, token-mean over its valid rows, and its entropy."""
  dist = network.apply(params, batch.obs)
  log_prob = dist.log_prob(batch.action)
  surrogate, extras = common.clipped_surrogate(log_prob, batch, config)
  loss = pg.masked_mean(surrogate, batch.mask)  # token mean over the level's rows
  entropy = pg.masked_mean(dist.entropy(), batch.mask)
  clip_fraction = pg.masked_mean(extras.clipped, batch.mask)
  return loss, entropy, {"clip_fraction": clip_fraction}


def policy_loss(params, agent: HiAgent, batches) -> tuple[Array, dict]:
  """High-level plus low-level surrogate minus `entropy_coef` times both entropies."""
  high_batch, low_batch = batches
  config = agent.config
  high_loss, high_entropy, high_extras = level_loss(agent.high, params["high"], high_batch, config)
  low_loss, low_entropy, low_extras = level_loss(agent.low, params["low"], low_batch, config)
  total = high_loss + low_loss - config.entropy_coef * (high_entropy + low_entropy)
  return total, {
    "loss": total,
    "high_policy_loss": high_loss,
    "low_policy_loss": low_loss,
    "high_entropy": high_entropy,
    "low_entropy": low_entropy,
    "high_clip_fraction": high_extras["clip_fraction"],
    "low_clip_fraction": low_extras["clip_fraction"],
  }


def update(agent: HiAgent, high_batch: LevelBatch, low_batch: LevelBatch):
  """`update_epochs` passes; each level's rows shuffled on their own and split into
  `num_minibatches`, minibatch `i` of both levels in one gradient step."""
  config = agent.config

  def split(batch, key):
    rows = batch.mask.shape[0]
    perm = jax.random.permutation(key, rows)
    return jax.tree.map(
      lambda x: x[perm].reshape((config.num_minibatches, -1) + x.shape[1:]), batch
    )

  def minibatch_step(agent, batches):
    return common.gradient_step(agent, policy_loss, agent, batches)

  def epoch(agent, _):
    key, high_key, low_key = jax.random.split(agent.key, 3)
    batches = (split(high_batch, high_key), split(low_batch, low_key))
    return jax.lax.scan(minibatch_step, agent.replace(key=key), batches)

  agent, metrics = jax.lax.scan(epoch, agent, None, length=config.update_epochs)
  return agent, jax.tree.map(jnp.mean, metrics)


def make_batches(
  agent: HiAgent, rollout_: two_level.TwoLevelRollout, distance: Array
) -> tuple[LevelBatch, LevelBatch, dict]:
  """Rewards of both levels, `two_level_advantages`, and the rows of each level."""
  config = agent.config
  g, k, h = config.num_subgoals, config.num_segments, config.segment_steps
  segments, valid = rollout_.segments, rollout_.valid  # [D, H, W]
  num_decisions, _, width = valid.shape
  flat = lambda x: x.reshape((-1,) + x.shape[2:])  # [D, X, ...] -> [D * X, ...]
  # Subgoal rows [D * B * G]: state id d * B + b; format reward: the cell is open.
  decision_obs = flat(rollout_.decision_obs).astype(jnp.int32)
  cells = flat(rollout_.subgoals)
  index, high_log_prob = jax.tree.map(flat, rollout_.high_extras)
  walkable = distance[cells[:, 0], cells[:, 1], cells[:, 0], cells[:, 1]] == 0  # open cell
  format_rewards = walkable.astype(jnp.float32)
  num_subgoal_rows = format_rewards.shape[0]
  state_ids = jnp.arange(num_subgoal_rows, dtype=jnp.int32) // g
  # Segment rows [D * W]: start = decision state, end = last valid next_obs.
  start = jnp.repeat(decision_obs, k, axis=0)
  end = flat(jax.vmap(two_level.segment_ends)(segments, valid)).astype(jnp.int32)
  target = flat(rollout_.segment_subgoals).astype(jnp.int32)
  manhattan = lambda a, b: jnp.abs(a[:, :2] - b).sum(-1)
  low_rewards = (manhattan(start, target) - manhattan(end, target)).astype(jnp.float32)
  if config.execution_success == "task_progress":
    to_goal = lambda p: distance[p[:, 0], p[:, 1], p[:, 2], p[:, 3]]
    success = to_goal(end) < to_goal(start)
  else:
    success = (end[:, :2] == target).all(-1)
  subgoal_ids = jnp.arange(num_decisions * width, dtype=jnp.int32) // k
  out = gr.two_level_advantages(
    format_rewards,
    state_ids,
    success.astype(jnp.float32),
    low_rewards,
    subgoal_ids,
    num_subgoal_rows // g,
    lam=config.lam,
    scale=config.grpo_scale,
    eps=config.advantage_eps,
    singleton_mode=config.singleton_mode,
  )
  every_row = jnp.ones_like(walkable)  # an unwalkable subgoal is a sample too (reward 0)
  high_batch = LevelBatch(
    decision_obs.astype(jnp.float32), index, high_log_prob, out.subgoal_advantages, every_row
  )
  # Low-level step rows [D * H * W]: the segment's advantage on each of its valid steps.
  step_subgoals = jnp.broadcast_to(rollout_.segment_subgoals[:, None], (num_decisions, h, width, 2))
  step_obs = low_observation(segments.obs, step_subgoals)
  advantage = jnp.broadcast_to(out.action_advantages.reshape(num_decisions, 1, width), valid.shape)
  rows = lambda x: x.reshape((-1,) + x.shape[3:])
  low_batch = LevelBatch(
    rows(step_obs).astype(jnp.float32),
    rows(segments.action),
    rows(segments.policy_extras),
    rows(advantage),
    rows(valid),
  )
  metrics = {
    "subgoal_format_rate": format_rewards.mean(),
    "execution_rate": out.execution_rate.mean(),
    "subgoal_reached_rate": (end[:, :2] == target).all(-1).astype(jnp.float32).mean(),
    "low_reward_mean": low_rewards.mean(),
    "subgoal_advantage_abs_mean": jnp.abs(out.subgoal_advantages).mean(),
    "action_advantage_abs_mean": jnp.abs(out.action_advantages).mean(),
  }
  return high_batch, low_batch, metrics


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: HiAgent
  carry: EnvCarry  # [B] the main environments, mid-episode between updates
  key: Array
  update: Array  # int32 count of updates done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one update: a two-level rollout, advantages, policy epochs."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  distance = jnp.asarray(shortest_path_steps(np.asarray(env.env_map, bool)))
  b = config.num_groups

  def init(key: Array) -> RunnerState:
    agent_key, reset_key, key = jax.random.split(key, 3)
    carry = rollout.reset(env, env_params, reset_key, b)
    return RunnerState(HiAgent.create(agent_key, config), carry, key, jnp.zeros((), jnp.int32))

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    agent = state.agent
    key, rollout_key = jax.random.split(state.key)
    carry, rollout_ = two_level.two_level_rollout(
      env,
      env_params,
      agent.high_fn,
      agent.low_fn,
      agent.params,
      state.carry,
      rollout_key,
      config.num_decisions,
      config.num_subgoals,
      config.num_segments,
      config.segment_steps,
      unroll=config.rollout_unroll,
    )
    high_batch, low_batch, metrics = make_batches(agent, rollout_, distance)
    agent, update_metrics = update(agent, high_batch, low_batch)
    ended, terminated, lengths = two_level.main_episode_outcomes(rollout_, b)
    metrics.update(update_metrics)
    metrics.update(
      success_sum=terminated.sum().astype(jnp.float32),
      episode_length_sum=jnp.where(ended, lengths, 0).sum().astype(jnp.float32),
      episodes=ended.sum().astype(jnp.float32),
    )
    return state.replace(agent=agent, carry=carry, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    agent = state.agent
    return two_level.evaluate(
      env,
      env_params,
      agent.high_fn,
      agent.low_fn,
      agent.params,
      key,
      config.eval_episodes,
      env_params.max_steps_in_episode,
      config.segment_steps,
    )

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=training.num_updates(config.total_timesteps, env_steps_per_update(config)),
    env_steps_per_update=env_steps_per_update(config),
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program."""
  return training.whole_run(make_learner(config))
