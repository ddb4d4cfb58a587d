"""Flat token-level PPO on the token game: every token is an action (the ArCHer paper's baseline).

Schulman, Wolski, Dhariwal, Radford, Klimov. "Proximal Policy Optimization Algorithms",
arXiv:1707.06347 (clipped surrogate, Eq. 7); GAE from arXiv:1506.02438 (Eq. 16). ArCHer (Zhou,
Zanette, Pan, Levine, Kumar, arXiv 2402.19446) compares against token-level PPO as the flat
on-policy method; this is that baseline on `TokenGame-v0`, sharing ArCHer's policy and its
behaviour-cloned warm start (`agents/token_common.py`), so with the same seed both start from the
same policy. The losses are `hrljax.losses.policy_gradient`; the token-level MDP and its GAE are
`hrljax.losses.hierarchical_critics.token_level_advantages` (one environment step is one
utterance of L tokens; every token the game reads is one action; the utterance's reward arrives
at its last read token). `config.token_gamma` discounts between the tokens of an utterance (1:
token-level returns equal ArCHer's utterance-level returns; `gamma`: plain token-level
discounting); `gamma` discounts from one utterance to the next.

Value function: `networks.transformer.TokenValueNetwork`, a separate small causal transformer
(`value_d_model` / `value_num_layers`) giving V(dialogue, a_<j) for every token j in one
teacher-forced pass. It is separate so that the value loss cannot disturb the behaviour-cloned
policy, and it has its own optimizer (`value_learning_rate`); with two Adam optimizers a
value-loss coefficient would be meaningless, so there is none.

One update (one Learner step): every environment speaks `num_steps` utterances at `temperature`
(games continue across updates, as in PPO), token-level GAE, then `update_epochs` passes of
`num_minibatches` minibatches of utterances with the clipped surrogate aggregated over read tokens
(`loss_aggregation`, default token mean), the (optionally clipped) value loss and an entropy bonus.

Deviations from the ArCHer paper's PPO baseline (reference code has none for token PPO): no
pretrained GPT-2 (a small transformer from a BC start), no KL penalty to the SFT policy, and a
separate value transformer instead of a value head on the language model.
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
from hrljax.losses import hierarchical_critics as hc
from hrljax.losses import policy_gradient as pg
from hrljax.networks import transformer
from hrljax.rollout import rollout_statistics
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree


def get_config() -> ml_collections.ConfigDict:
  """Token-level PPO hyperparameters (PPO paper / PureJaxRL defaults where they transfer)."""
  config = training.run_config(log_every=5, checkpoint_every=25)
  config.agent = "token_ppo"
  tc.add_config_fields(config)
  config.total_timesteps = 1_024_000  # utterances (environment steps) over the run
  config.num_envs = 64
  config.num_steps = 8  # utterances per environment per update
  config.update_epochs = 4
  config.num_minibatches = 4
  config.learning_rate = 1e-4  # policy; fine-tunes the BC start
  config.value_learning_rate = 1e-3
  config.optimizer = "adam"  # or "sgd"
  config.adam_eps = 1e-5
  config.max_grad_norm = 1.0  # per network
  config.gamma = 0.95  # per utterance, as ArCHer's
  config.token_gamma = 1.0  # between the tokens of an utterance (1: utterance-level returns)
  config.gae_lambda = 0.95
  config.clip_epsilon = 0.2
  config.clip_value = True
  config.normalize_advantages = True  # per minibatch, over the read tokens
  config.entropy_coef = 0.0
  config.loss_aggregation = "token_mean"
  config.value_d_model = 32
  config.value_num_layers = 1
  config.rollout_unroll = 1
  config.eval_episodes = 128  # greedy games per evaluation
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(
    config,
    "total_timesteps",
    "num_envs",
    "num_steps",
    "update_epochs",
    "num_minibatches",
    "value_d_model",
    "value_num_layers",
    "eval_episodes",
    "rollout_unroll",
  )
  checks.positive(config, "learning_rate", "value_learning_rate", "max_grad_norm", "adam_eps")
  checks.non_negative(config, "clip_epsilon", "entropy_coef")
  checks.in_unit_interval(config, "gamma", "token_gamma", "gae_lambda")
  checks.one_of(config, "optimizer", tc.OPTIMIZERS)
  checks.one_of(config, "loss_aggregation", pg.AGGREGATION_MODES)
  tc.check_heads_divide(config, "value_d_model")
  tc.validate_config_fields(config)
  checks.divisible(config, "num_envs", num_devices, "the device count")
  batch = config.num_envs * config.num_steps
  if batch % config.num_minibatches:
    raise checks.ConfigError(
      f"config.num_minibatches: expected a divisor of num_envs * num_steps ({batch}), "
      f"got {config.num_minibatches}"
    )
  training.num_updates(config.total_timesteps, batch)
  envs.make(config.env_name, **config.env_kwargs)  # unknown fields fail here


def make_value_network(env_params: token_game.EnvParams, config) -> transformer.TokenValueNetwork:
  max_len = token_game.max_dialogue_len(env_params) + env_params.utterance_len + 1
  return transformer.TokenValueNetwork(
    vocab_size=token_game.vocabulary(env_params).size,
    d_model=config.value_d_model,
    num_layers=config.value_num_layers,
    num_heads=config.num_heads,
    max_len=max_len,
    pad_token=token_game.PAD,
  )


class TokenBatch(NamedTuple):
  """Utterances of one update, flat `[R = T * N]` rows."""

  dialogue: Array  # int32 [R, D]
  utterance: Array  # int32 [R, L]
  log_prob: Array  # [R, L] behaviour token log-probs
  value: Array  # [R, L] values before the update
  advantage: Array  # [R, L]
  target: Array  # [R, L] value targets
  mask: Array  # [R, L] bool, tokens the game reads


class TokenPPOAgent(tc.SpeaksUtterances, struct.PyTreeNode):
  """Token PPO's train state: policy and value parameters, their optimizer states, a key."""

  policy_params: PyTree
  value_params: PyTree
  policy_opt_state: PyTree
  value_opt_state: PyTree
  key: Array
  policy: transformer.CausalTransformer = struct.field(pytree_node=False)
  value_network: transformer.TokenValueNetwork = struct.field(pytree_node=False)
  policy_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  value_tx: optax.GradientTransformation = struct.field(pytree_node=False)
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
  ) -> "TokenPPOAgent":
    """The behaviour-cloned policy (the BC key of every token agent; `policy_params` when given,
    `tc.warm_start_policy_params` of the same key) and a fresh value net."""
    config = ml_collections.FrozenConfigDict(config)
    policy = tc.make_policy(env_params, config)
    value_network = make_value_network(env_params, config)
    value_key, key = jax.random.split(key)
    policy_params = tc.policy_start(key, policy, env, env_params, config, policy_params)
    key = jax.random.fold_in(key, 0)
    value_params = value_network.init(
      value_key, tc.first_dialogue(env_params), tc.first_utterance(env_params)
    )
    policy_tx, value_tx = (
      tc.make_optimizer(config.optimizer, learning_rate, config.max_grad_norm, config.adam_eps)
      for learning_rate in (config.learning_rate, config.value_learning_rate)
    )
    return cls(
      policy_params=policy_params,
      value_params=value_params,
      policy_opt_state=policy_tx.init(policy_params),
      value_opt_state=value_tx.init(value_params),
      key=key,
      policy=policy,
      value_network=value_network,
      policy_tx=policy_tx,
      value_tx=value_tx,
      utterance_len=env_params.utterance_len,
      config=config,
    )

  def update(self, batch: TokenBatch) -> tuple["TokenPPOAgent", dict[str, Array]]:
    """`update_epochs` passes of shuffled minibatch steps over the update's utterances."""
    return common.minibatch_epochs(
      self, batch, _minibatch_step, self.config.num_minibatches, self.config.update_epochs
    )


def token_ppo_objective(
  params: tuple[PyTree, PyTree], agent: TokenPPOAgent, batch: TokenBatch
) -> tuple[Array, dict[str, Array]]:
  """Clipped surrogate + value loss − entropy bonus, each aggregated over the read tokens."""
  config = agent.config
  policy_params, value_params = params
  logp, entropy = tc.token_log_probs_and_entropy(
    agent.policy, policy_params, batch.dialogue, batch.utterance, config.temperature
  )
  advantage = batch.advantage
  if config.normalize_advantages:
    advantage = hc.normalize_token_advantages(advantage, batch.mask)
  surrogate, extras = pg.clipped_surrogate_loss(
    logp, batch.log_prob, advantage, epsilon=config.clip_epsilon, mask=batch.mask
  )
  value = agent.value_network.apply(value_params, batch.dialogue, batch.utterance)
  clip = config.clip_epsilon if config.clip_value else None
  v_loss = pg.value_loss(value, batch.target, batch.value, clip_epsilon=clip)

  def agg(x):
    return pg.aggregate(x, batch.mask, config.loss_aggregation)[0]

  policy_loss, value_loss, entropy = agg(surrogate), agg(v_loss), agg(entropy)
  total = policy_loss + value_loss - config.entropy_coef * entropy
  return total, {
    "loss": total,
    "policy_loss": policy_loss,
    "value_loss": value_loss,
    "entropy": entropy,
    "approx_kl": pg.masked_mean(extras.approx_kl, batch.mask),
    "clip_fraction": pg.masked_mean(extras.clipped, batch.mask),
  }


def _minibatch_step(
  agent: TokenPPOAgent, minibatch: TokenBatch
) -> tuple[TokenPPOAgent, dict[str, Array]]:
  (policy_grads, value_grads), metrics = jax.grad(token_ppo_objective, has_aux=True)(
    (agent.policy_params, agent.value_params), agent, minibatch
  )
  policy_updates, policy_opt_state = agent.policy_tx.update(
    policy_grads, agent.policy_opt_state, agent.policy_params
  )
  value_updates, value_opt_state = agent.value_tx.update(
    value_grads, agent.value_opt_state, agent.value_params
  )
  return agent.replace(
    policy_params=optax.apply_updates(agent.policy_params, policy_updates),
    value_params=optax.apply_updates(agent.value_params, value_updates),
    policy_opt_state=policy_opt_state,
    value_opt_state=value_opt_state,
  ), metrics


def make_batch(agent: TokenPPOAgent, traj, config) -> TokenBatch:
  """Values in two batched passes, token-level GAE per environment, then flat rows."""
  num_steps, num_envs = traj.reward.shape
  dialogue, utterance = tc.flatten_steps(traj.obs), tc.flatten_steps(traj.action)
  mask = tc.token_mask(utterance)
  value = agent.value_network.apply(agent.value_params, dialogue, utterance)
  # The value before the first token of any utterance depends only on the dialogue.
  next_value = agent.value_network.apply(
    agent.value_params, tc.flatten_steps(traj.next_obs), utterance[:, :1]
  )[:, 0]
  unflat = lambda x: x.reshape((num_steps, num_envs) + x.shape[1:])
  advantage = tc.token_advantages(
    traj.reward, traj.terminated, traj.done, unflat(value), unflat(next_value), unflat(mask), config
  )
  advantage = tc.flatten_steps(advantage)
  return TokenBatch(
    dialogue=dialogue,
    utterance=utterance,
    log_prob=tc.flatten_steps(traj.policy_extras),
    value=value,
    advantage=advantage,
    target=advantage + value,
    mask=mask,
  )


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: TokenPPOAgent
  env: EnvCarry  # per-environment state: sharded along the mesh's data axis
  key: Array
  eval_key: Array  # the run's evaluation games (`tc.evaluation_key`)
  update: Array  # int32 count of updates done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one token-PPO update (rollout, token GAE, epochs)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params, _, sample, evaluate = tc.learner_parts(config)
  steps_per_update = config.num_envs * config.num_steps

  def init(key: Array, policy_params: Optional[PyTree] = None) -> RunnerState:
    eval_key = tc.evaluation_key(key)
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = TokenPPOAgent.create(agent_key, env, env_params, config, policy_params)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    return RunnerState(
      agent=agent, env=carry, key=key, eval_key=eval_key, update=jnp.zeros((), jnp.int32)
    )

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key = jax.random.split(state.key)
    carry, traj = rollout.rollout(
      env,
      env_params,
      sample,
      state.agent.policy_params,
      state.env,
      rollout_key,
      config.num_steps,
      unroll=config.rollout_unroll,
    )
    batch = make_batch(state.agent, traj, config)
    agent, metrics = state.agent.update(batch)
    metrics.update(rollout_statistics(traj))
    metrics["advantage_abs"] = pg.masked_mean(jnp.abs(batch.advantage), batch.mask)
    return state.replace(agent=agent, env=carry, key=key, update=state.update + 1), metrics

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=training.num_updates(config.total_timesteps, steps_per_update),
    env_steps_per_update=steps_per_update,
    sharded_field="env",
    warm_start=tc.warm_start(config),
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
