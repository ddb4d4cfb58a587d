"""GRPO over groups of dialogues per hidden target, with a token-level clipped surrogate.

Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
Models", arXiv:2402.03300, section 4.1.2 (outcome supervision: every token of a response gets
`(R_i − mean_g R) / std_g R`) and Eq. 3 (clipped surrogate plus a KL penalty to a reference
policy, estimator k3 of Eq. 4). Here a "response" is a whole multi-turn dialogue of the token game
and its tokens are every token of every utterance the policy spoke that the game read. The
advantages are `hrljax.losses.group_relative` (`grpo`, `dr_grpo`, `rloo`, or `unlikeliness`: GRPO of
the reward scaled down for the likelier won dialogues of a group, He et al., "Rewarding the
Unlikely: Lifting GRPO Beyond Distribution Sharpening", arXiv 2506.02355; a dialogue is one
response, its likelihood the mean behaviour log-prob of every token it spoke), the surrogate, KL,
entropy and aggregation `hrljax.losses.policy_gradient`. The policy and its behaviour-cloned warm
start are ArCHer's (`agents/token_common.py`); the KL reference is that warm start.

`agents/group_relative.py` cannot be reused by configuration: its policy is an MLP emitting one
distrax action per step, while here an action is an utterance decoded token by token by a
transformer (`transformer.generate`) and scored by teacher forcing.

One update (one Learner step): `num_groups` hidden targets, `group_size` games of each
(`hrljax.rollout.grouped_episodes`: the games of a group share the reset key, hence the target),
played to the end at `temperature` in a window of `max_turns` utterances; episode-return
advantages per group; `update_epochs` passes of `num_minibatches` minibatches of utterances
(rows), the loss aggregated over read tokens of the valid utterances (`loss_aggregation`,
default token mean as verl). No value network.

Environment interactions: `env_steps_per_update` counts the whole window (`num_envs ·
max_turns`, an upper bound); the metric `utterances` counts the utterances of the games played.

Deviations: the KL reference is the BC warm start (the LLM setting's SFT model); minibatches
split utterances, not whole dialogues, so with "seq_*" aggregations a "sequence" is one
utterance (the default token mean does not depend on the split).
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, rollout, training
from hrljax.agents import common
from hrljax.agents import token_common as tc
from hrljax.envs import token_game
from hrljax.losses import group_relative as gr
from hrljax.losses import policy_gradient as pg
from hrljax.networks import transformer
from hrljax.training import Learner
from hrljax.types import Array, PyTree

ESTIMATORS = gr.OUTCOME_ESTIMATORS + ("unlikeliness",)


def get_config() -> ml_collections.ConfigDict:
  """GRPO hyperparameters (DeepSeekMath / verl defaults where they transfer)."""
  config = training.run_config(log_every=5, checkpoint_every=25)
  config.agent = "token_grpo"
  tc.add_config_fields(config)
  config.estimator = "grpo"
  config.total_timesteps = 1_024_000  # utterances (environment steps) over the run
  config.num_groups = 8  # hidden targets per update
  config.group_size = 8  # games per target
  config.num_envs = config.get_ref("num_groups") * config.get_ref("group_size")
  config.grpo_scale = "group"
  config.singleton_mode = "zero"
  config.advantage_eps = 1e-6
  config.unlikeliness_beta = 0.25  # estimator="unlikeliness": the rank penalty (authors' script)
  config.clip_epsilon = 0.2
  config.clip_epsilon_high = 0.2
  config.kl_coef = 0.01  # to the BC warm start; 0 disables the reference forward pass
  config.kl_estimator = "k3"
  config.entropy_coef = 0.0
  config.loss_aggregation = "token_mean"
  config.update_epochs = 1
  config.num_minibatches = 1
  config.learning_rate = 1e-4
  config.optimizer = "adam"  # or "sgd"
  config.adam_eps = 1e-5
  config.max_grad_norm = 1.0
  config.rollout_unroll = 1
  config.eval_episodes = 128  # greedy games per evaluation
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  common.validate_group_relative_fields(config, ("group_size", "num_envs"), ("kl_coef",))
  checks.one_of(config, "estimator", ESTIMATORS)
  beta = config.unlikeliness_beta
  if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 <= beta <= 1.0:
    raise checks.ConfigError(f"config.unlikeliness_beta: expected a number in [0, 1], got {beta!r}")
  checks.one_of(config, "kl_estimator", pg.KL_ESTIMATORS)
  checks.one_of(config, "loss_aggregation", pg.AGGREGATION_MODES)
  checks.one_of(config, "optimizer", tc.OPTIMIZERS)
  tc.validate_config_fields(config)
  num_envs = config.num_groups * config.group_size
  if config.num_envs != num_envs:
    raise checks.ConfigError(
      f"config.num_envs: expected num_groups * group_size ({num_envs}), got {config.num_envs}"
    )
  checks.divisible(config, "num_envs", num_devices, "the device count")
  _, env_params = envs.make(config.env_name, **config.env_kwargs)  # unknown fields fail here
  rows = num_envs * env_params.max_turns
  if rows % config.num_minibatches:
    raise checks.ConfigError(
      f"config.num_minibatches: expected a divisor of num_envs * max_turns ({rows}), "
      f"got {config.num_minibatches}"
    )
  training.num_updates(config.total_timesteps, rows)


class UtteranceBatch(NamedTuple):
  """The utterances of one update, flat `[R = T * N]` rows."""

  dialogue: Array  # int32 [R, D]
  utterance: Array  # int32 [R, L]
  log_prob: Array  # [R, L] behaviour token log-probs
  advantage: Array  # [R, L] the dialogue's advantage on every token
  mask: Array  # [R, L] bool: a read token of an utterance of the dialogue


def episode_advantages(episodes: rollout.GroupedEpisodes, config) -> Array:
  """The advantage `[N]` of each game: `config.estimator` of the games' returns in their groups."""
  returns = rollout.summarize_episodes(episodes).episode_return
  if config.estimator != "unlikeliness":
    return common.outcome_advantages(returns, episodes.group_ids, config)
  transitions = episodes.transitions
  read = tc.token_mask(transitions.action) & episodes.valid[..., None]  # [T, N, L]

  def per_game(x):  # [T, N, L] -> [N, T * L]: a game's spoken tokens as one response
    return jnp.swapaxes(x, 0, 1).reshape(x.shape[1], -1)

  return gr.unlikeliness_advantages(
    returns,
    per_game(transitions.policy_extras),
    per_game(read),
    episodes.group_ids,
    config.num_groups,
    beta=config.unlikeliness_beta,
    scale=config.grpo_scale,
    eps=config.advantage_eps,
    singleton_mode=config.singleton_mode,
  ).advantages


def make_batch(episodes: rollout.GroupedEpisodes, config) -> tuple[UtteranceBatch, Array]:
  """Episode advantages on every read token of the episode's utterances; flat rows."""
  advantage = episode_advantages(episodes, config)
  transitions = episodes.transitions
  utterance = tc.flatten_steps(transitions.action)
  valid = tc.flatten_steps(episodes.valid)
  mask = tc.token_mask(utterance) & valid[:, None]
  row_advantage = tc.flatten_steps(jnp.broadcast_to(advantage[None, :], episodes.valid.shape))
  batch = UtteranceBatch(
    dialogue=tc.flatten_steps(transitions.obs),
    utterance=utterance,
    log_prob=tc.flatten_steps(transitions.policy_extras),
    advantage=gr.broadcast_to_tokens(row_advantage, mask),
    mask=mask,
  )
  return batch, advantage


class TokenGRPOAgent(tc.SpeaksUtterances, struct.PyTreeNode):
  """Train state: policy parameters, the frozen reference (BC) parameters, optimizer, key."""

  policy_params: PyTree
  ref_params: PyTree
  opt_state: PyTree
  key: Array
  policy: transformer.CausalTransformer = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  utterance_len: int = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(
    cls,
    key: Array,
    env,
    env_params: token_game.EnvParams,
    config,
    policy_params: Optional[PyTree] = None,
  ) -> "TokenGRPOAgent":
    """The behaviour-cloned policy (the BC key of every token agent; `policy_params` when given,
    `tc.warm_start_policy_params` of the same key), also the KL reference."""
    config = ml_collections.FrozenConfigDict(config)
    policy = tc.make_policy(env_params, config)
    key = tc.bc_key_of(key)
    policy_params = tc.policy_start(key, policy, env, env_params, config, policy_params)
    tx = tc.make_optimizer(
      config.optimizer, config.learning_rate, config.max_grad_norm, config.adam_eps
    )
    return cls(
      policy_params=policy_params,
      ref_params=policy_params,
      opt_state=tx.init(policy_params),
      key=jax.random.fold_in(key, 0),
      policy=policy,
      tx=tx,
      utterance_len=env_params.utterance_len,
      config=config,
    )

  def update(self, batch: UtteranceBatch) -> tuple["TokenGRPOAgent", dict[str, Array]]:
    """`update_epochs` passes of shuffled minibatch steps over the update's utterances."""
    return common.minibatch_epochs(
      self, batch, _minibatch_step, self.config.num_minibatches, self.config.update_epochs
    )


def token_grpo_objective(
  params: PyTree, agent: TokenGRPOAgent, batch: UtteranceBatch
) -> tuple[Array, dict[str, Array]]:
  """Clipped surrogate + `kl_coef` KL to the reference − `entropy_coef` entropy, aggregated over
  the read tokens with `config.loss_aggregation`."""
  config = agent.config
  logp, entropy = tc.token_log_probs_and_entropy(
    agent.policy, params, batch.dialogue, batch.utterance, config.temperature
  )
  surrogate, extras = common.clipped_surrogate(logp, batch, config)

  def agg(x):
    return pg.aggregate(x, batch.mask, config.loss_aggregation)[0]

  surrogate_loss, entropy = agg(surrogate), agg(entropy)
  total = surrogate_loss - config.entropy_coef * entropy
  metrics = {}
  if config.kl_coef > 0:
    ref_logp = transformer.utterance_log_probs(
      agent.policy, agent.ref_params, batch.dialogue, batch.utterance, config.temperature
    )
    kl = agg(pg.kl_divergence(logp, ref_logp, config.kl_estimator, mask=batch.mask))
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
  agent: TokenGRPOAgent, minibatch: UtteranceBatch
) -> tuple[TokenGRPOAgent, dict[str, Array]]:
  grads, metrics = jax.grad(token_grpo_objective, has_aux=True)(
    agent.policy_params, agent, minibatch
  )
  updates, opt_state = agent.tx.update(grads, agent.opt_state, agent.policy_params)
  return agent.replace(
    policy_params=optax.apply_updates(agent.policy_params, updates), opt_state=opt_state
  ), metrics


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: TokenGRPOAgent
  group_ids: Array  # [N] group of each game slot: sharded along the data axis
  key: Array
  eval_key: Array  # the run's evaluation games (`tc.evaluation_key`)
  update: Array  # int32 count of updates done


def episode_metrics(episodes: rollout.GroupedEpisodes, advantage: Array) -> dict[str, Array]:
  """Sums over the update's games (the loop turns `*_sum` into means)."""
  return {
    **rollout.episode_sums(episodes),
    "advantage_abs_mean": jnp.mean(jnp.abs(advantage)),
    "utterances": episodes.valid.astype(jnp.float32).sum(),
  }


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one update: grouped games, advantages, policy epochs."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params, _, sample, evaluate = tc.learner_parts(config)
  num_steps = env_params.max_turns
  steps_per_update = config.num_envs * num_steps

  def init(key: Array, policy_params: Optional[PyTree] = None) -> RunnerState:
    eval_key = tc.evaluation_key(key)
    agent_key, _, key = jax.random.split(key, 3)
    agent = TokenGRPOAgent.create(agent_key, env, env_params, config, policy_params)
    return RunnerState(
      agent=agent,
      group_ids=rollout.grouped_ids(config.num_groups, config.group_size),
      key=key,
      eval_key=eval_key,
      update=jnp.zeros((), jnp.int32),
    )

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key = jax.random.split(state.key)
    episodes = rollout.grouped_episodes(
      env,
      env_params,
      sample,
      state.agent.policy_params,
      rollout_key,
      state.group_ids,
      num_steps,
      unroll=config.rollout_unroll,
    )
    batch, advantage = make_batch(episodes, config)
    agent, metrics = state.agent.update(batch)
    metrics.update(episode_metrics(episodes, advantage))
    return state.replace(agent=agent, key=key, update=state.update + 1), metrics

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=training.num_updates(config.total_timesteps, steps_per_update),
    env_steps_per_update=steps_per_update,
    sharded_field="group_ids",
    warm_start=tc.warm_start(config),
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
