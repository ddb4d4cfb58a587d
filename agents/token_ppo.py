"""Flat token-level PPO on the token game: every token is an action (the ArCHer paper's baseline).

Schulman, Wolski, Dhariwal, Radford, Klimov. "Proximal Policy Optimization Algorithms",
arXiv:1707.06347 (clipped surrogate, Eq. 7); GAE from arXiv:1506.02438 (Eq. 16). ArCHer (Zhou,
Zanette, Pan, Levine, Kumar, arXiv 2402.19446) compares against token-level PPO as the flat
on-policy method; this is that baseline on `TokenGame-v0`, sharing ArCHer's policy and its
behaviour-cloned warm start (`agents/token_bc.py`), so with the same seed both start from the same
policy. All losses are `hrljax.losses.policy_gradient`.

The token-level MDP. One environment step is one utterance of L tokens; inside it every token the
game reads (`token_game.utterance_token_mask`: up to and including the first END/PAD) is one
action taken in the state "dialogue + the utterance's earlier tokens". The utterance's reward
arrives at its last read token; tokens after it are not actions (no loss, no value target) and
pass the advantage of the next utterance through unchanged (reward 0, discount 1, λ 1). Per-token
discount (`config.token_discount`):
  * "utterance" (default): 1 between the tokens of an utterance and `gamma` from an utterance's
    last token to the next utterance, so token-level returns equal ArCHer's utterance-level
    returns;
  * "token": `gamma` after every read token (plain token-level discounting).
λ is `gae_lambda` after every read token. Termination cuts bootstrapping (discount 0 at the last
token of a terminal utterance); a time-limit truncation bootstraps from the true next dialogue.

Value function: a separate small causal transformer over the dialogue prefix (same class as the
policy, `value_d_model` / `value_num_layers`), whose last-layer outputs a linear layer maps to a
scalar per position: V(dialogue, a_<j) for every token j in one teacher-forced pass
(`CausalTransformer.utterance_logits`). It is separate so that the value loss cannot disturb the
behaviour-cloned policy, and it has its own optimizer (`value_learning_rate`); with two Adam
optimizers a value-loss coefficient would be meaningless, so there is none.

One update (one Learner step): every environment speaks `num_steps` utterances at `temperature`
(games continue across updates, as in PPO), token-level GAE, then `update_epochs` passes of
`num_minibatches` minibatches of utterances with the clipped surrogate aggregated over read tokens
(`loss_aggregation`, default token mean), the (optionally clipped) value loss and an entropy bonus.

Deviations from the ArCHer paper's PPO baseline (reference code has none for token PPO): no
pretrained GPT-2 (a small transformer from a BC start), no KL penalty to the SFT policy, and a
separate value transformer instead of a value head on the language model.
"""

from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, rollout, training
from hrljax.agents import common, token_bc
from hrljax.rollout import rollout_statistics
from hrljax.envs import token_game
from hrljax.losses import policy_gradient as pg
from hrljax.networks import transformer
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree

TOKEN_DISCOUNTS = ("utterance", "token")


def get_config() -> ml_collections.ConfigDict:
  """Token-level PPO hyperparameters (PPO paper / PureJaxRL defaults where they transfer)."""
  config = ml_collections.ConfigDict()
  config.agent = "token_ppo"
  token_bc.add_config_fields(config)
  config.seed = 0
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
  config.gae_lambda = 0.95
  config.token_discount = "utterance"  # or "token" (module docstring)
  config.clip_epsilon = 0.2
  config.clip_value = True
  config.normalize_advantages = True
  config.entropy_coef = 0.0
  config.loss_aggregation = "token_mean"
  config.value_d_model = 32
  config.value_num_layers = 1
  config.rollout_unroll = 1
  # Run-level settings read by the experiment loop.
  config.log_every = 5
  config.checkpoint_every = 25
  config.max_checkpoints = 2
  config.eval_episodes = 128
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(config, "total_timesteps", "num_envs", "num_steps", "update_epochs",
                      "num_minibatches", "value_d_model", "value_num_layers", "log_every",
                      "checkpoint_every", "max_checkpoints", "eval_episodes", "rollout_unroll")
  checks.positive(config, "learning_rate", "value_learning_rate", "max_grad_norm", "adam_eps")
  checks.non_negative(config, "clip_epsilon", "entropy_coef")
  checks.in_unit_interval(config, "gamma", "gae_lambda")
  checks.one_of(config, "optimizer", ("adam", "sgd"))
  checks.one_of(config, "token_discount", TOKEN_DISCOUNTS)
  checks.one_of(config, "loss_aggregation", pg.AGGREGATION_MODES)
  if config.value_d_model % config.num_heads:
    raise checks.ConfigError(f"config.value_d_model: expected a multiple of config.num_heads "
                             f"({config.num_heads}), got {config.value_d_model}")
  token_bc.validate_config_fields(config)
  checks.divisible(config, "num_envs", num_devices, "the device count")
  checks.divisible(config, "checkpoint_every", config.log_every, "config.log_every")
  batch = config.num_envs * config.num_steps
  if batch % config.num_minibatches:
    raise checks.ConfigError(
        f"config.num_minibatches: expected a divisor of num_envs * num_steps ({batch}), "
        f"got {config.num_minibatches}")
  checks.at_least(config, "total_timesteps", batch, "one update of num_envs * num_steps")
  envs.make(config.env_name, **config.env_kwargs)  # unknown fields fail here


# ----------------------------------------------------------------------------------------------
# Helpers shared by the token-level baselines (token_filtered_bc and token_grpo import them).
# ----------------------------------------------------------------------------------------------


def sampling_policy(policy: transformer.CausalTransformer, utterance_len: int, temperature):
  """`policy_fn(params, dialogue [N, D], key) -> (utterance [N, L], token log-probs [N, L])`."""
  def sample(params, obs, key):
    return transformer.generate(policy, params, obs, key, num_tokens=utterance_len,
                                temperature=temperature)
  return sample


def greedy_evaluation(env, env_params: token_game.EnvParams,
                      policy: transformer.CausalTransformer, num_episodes: int):
  """`evaluate(policy_params, key)`: greedy decoding over `num_episodes` games, as ArCHer's
  `evaluate`; with the default rewards `eval_return` is the success rate."""
  def greedy(params, obs, key):
    tokens, _ = transformer.generate(policy, params, obs, key,
                                     num_tokens=env_params.utterance_len, greedy=True)
    return tokens, None

  def evaluate(params, key):
    return rollout.evaluate(env, env_params, greedy, params, key, num_episodes,
                            env_params.max_steps_in_episode)
  return evaluate


def token_log_probs_and_entropy(policy: transformer.CausalTransformer, params: PyTree,
                                dialogue: Array, utterance: Array, temperature
                                ) -> tuple[Array, Array]:
  """Teacher-forced token log-probs and entropies `[B, L]` of softmax(logits / temperature)."""
  logits = policy.apply(params, dialogue, utterance,
                        method=transformer.CausalTransformer.utterance_logits)
  log_probs = jax.nn.log_softmax(logits / temperature, axis=-1)
  token_logp = jnp.take_along_axis(log_probs, utterance[..., None].astype(jnp.int32), axis=-1)
  return token_logp[..., 0], pg.categorical_entropy(logits / temperature)


def flatten_steps(x: Array) -> Array:
  """`[T, N, ...]` -> `[T * N, ...]`."""
  return x.reshape((-1,) + x.shape[2:])


def make_optimizer(config, learning_rate: float) -> optax.GradientTransformation:
  """Global-norm clipping, then Adam (or SGD) at a constant learning rate."""
  if config.optimizer == "sgd":
    optimizer = optax.sgd(learning_rate)
  else:
    optimizer = optax.adam(learning_rate, eps=config.adam_eps)
  return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optimizer)


# ----------------------------------------------------------------------------------------------
# The value network and token-level GAE.
# ----------------------------------------------------------------------------------------------


class TokenValueNetwork(nn.Module):
  """V(dialogue, a_<j) for every token j of an utterance, `[B, L]`, in one causal pass.

  A `CausalTransformer` of its own whose per-position outputs (the width of its output layer is
  the vocabulary size; they are features here, not logits) a linear layer maps to a scalar.
  """

  vocab_size: int
  d_model: int
  num_layers: int
  num_heads: int
  max_len: int
  pad_token: int = token_game.PAD

  def setup(self):
    self.body = transformer.CausalTransformer(
        vocab_size=self.vocab_size, d_model=self.d_model, num_layers=self.num_layers,
        num_heads=self.num_heads, max_len=self.max_len, pad_token=self.pad_token)
    self.head = nn.Dense(1)

  def __call__(self, dialogue: Array, utterance: Array) -> Array:
    features = self.body.utterance_logits(dialogue, utterance)
    return self.head(features)[..., 0]


def make_value_network(env_params: token_game.EnvParams, config) -> TokenValueNetwork:
  max_len = token_game.max_dialogue_len(env_params) + env_params.utterance_len + 1
  return TokenValueNetwork(vocab_size=token_game.vocabulary(env_params).size,
                           d_model=config.value_d_model, num_layers=config.value_num_layers,
                           num_heads=config.num_heads, max_len=max_len)


class TokenStream(NamedTuple):
  """One environment's rollout as a token stream, every field `[T * L]` (GAE inputs)."""

  reward: Array
  discount: Array
  value: Array
  next_value: Array
  lambda_: Array
  done: Array


def token_stream(reward: Array, terminated: Array, done: Array, value: Array,
                 next_dialogue_value: Array, mask: Array, gamma: float, gae_lambda: float,
                 token_discount: str) -> TokenStream:
  """Turns one environment's `T` utterances into `T * L` token steps (per trajectory).

  Args:
    reward, terminated, done: `[T]` utterance-level reward and flags.
    value: `[T, L]` V of the state before each token.
    next_dialogue_value: `[T]` V of the true next dialogue (before any auto-reset).
    mask: `[T, L]` bool, the tokens the game reads (a prefix of each row, at least one token).
    gamma, gae_lambda: utterance-level γ and GAE λ.
    token_discount: "utterance" (γ only between utterances) or "token" (γ after every token).
  """
  num_tokens = mask.shape[1]
  mask = mask.astype(bool)
  length = mask.sum(axis=1)
  is_last = jnp.arange(num_tokens)[None, :] == (length - 1)[:, None]
  # Within an utterance the successor of token j is the state before token j + 1.
  shifted = jnp.concatenate([value[:, 1:], jnp.zeros_like(value[:, :1])], axis=1)
  next_value = jnp.where(is_last, next_dialogue_value[:, None], shifted)
  inner = 1.0 if token_discount == "utterance" else gamma
  last_discount = gamma * (1.0 - terminated.astype(jnp.float32))
  discount = jnp.where(is_last, last_discount[:, None], inner)
  step_reward = jnp.where(is_last, reward[:, None], 0.0)
  # Unread tokens are not actions: reward 0, values 0, discount 1 and λ 1 pass the next
  # utterance's advantage through to the last read token unchanged.
  return TokenStream(
      reward=jnp.where(mask, step_reward, 0.0).reshape(-1),
      discount=jnp.where(mask, discount, 1.0).reshape(-1),
      value=jnp.where(mask, value, 0.0).reshape(-1),
      next_value=jnp.where(mask, next_value, 0.0).reshape(-1),
      lambda_=jnp.where(mask, gae_lambda, 1.0).reshape(-1),
      done=(is_last & done[:, None]).reshape(-1))


def token_advantages(reward: Array, terminated: Array, done: Array, value: Array,
                     next_dialogue_value: Array, mask: Array, config) -> Array:
  """Token-level GAE `[T, N, L]` from time-major `[T, N]` / `[T, N, L]` rollout fields (0 on
  unread tokens)."""
  num_steps, _, num_tokens = mask.shape

  def one_env(reward, terminated, done, value, next_dialogue_value, mask):
    stream = token_stream(reward, terminated, done, value, next_dialogue_value, mask,
                          config.gamma, config.gae_lambda, config.token_discount)
    advantage = pg.generalized_advantage_estimation(
        stream.reward, stream.discount, stream.value, stream.next_value, stream.lambda_,
        stream.done)
    return jnp.where(mask, advantage.reshape(num_steps, num_tokens), 0.0)

  return jax.vmap(one_env, in_axes=1, out_axes=1)(
      reward.astype(jnp.float32), terminated, done, value, next_dialogue_value, mask)


# ----------------------------------------------------------------------------------------------
# The agent.
# ----------------------------------------------------------------------------------------------


class TokenBatch(NamedTuple):
  """Utterances of one update, flat `[R = T * N]` rows."""

  dialogue: Array  # int32 [R, D]
  utterance: Array  # int32 [R, L]
  log_prob: Array  # [R, L] behaviour token log-probs
  value: Array  # [R, L] values before the update
  advantage: Array  # [R, L]
  target: Array  # [R, L] value targets
  mask: Array  # [R, L] bool, tokens the game reads


class TokenPPOAgent(token_bc.SpeaksUtterances, struct.PyTreeNode):
  """Token PPO's train state: policy and value parameters, their optimizer states, a key."""

  policy_params: PyTree
  value_params: PyTree
  policy_opt_state: PyTree
  value_opt_state: PyTree
  key: Array
  policy: transformer.CausalTransformer = struct.field(pytree_node=False)
  value_network: TokenValueNetwork = struct.field(pytree_node=False)
  policy_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  value_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  utterance_len: int = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, env, env_params: token_game.EnvParams, config) -> "TokenPPOAgent":
    """The behaviour-cloned policy (same key use as ArCHer's `create`) and a fresh value net."""
    config = ml_collections.FrozenConfigDict(config)
    policy = token_bc.make_policy(env_params, config)
    value_network = make_value_network(env_params, config)
    value_key, key = jax.random.split(key)
    policy_params = token_bc.pretrained_policy_params(key, policy, env, env_params, config)
    key = jax.random.fold_in(key, 0)
    dialogue = jnp.zeros((1, token_game.max_dialogue_len(env_params)), jnp.int32)
    dialogue = dialogue.at[:, 0].set(token_game.BOS)
    utterance = jnp.zeros((1, env_params.utterance_len), jnp.int32)
    value_params = value_network.init(value_key, dialogue, utterance)
    policy_tx = make_optimizer(config, config.learning_rate)
    value_tx = make_optimizer(config, config.value_learning_rate)
    return cls(policy_params=policy_params, value_params=value_params,
               policy_opt_state=policy_tx.init(policy_params),
               value_opt_state=value_tx.init(value_params), key=key, policy=policy,
               value_network=value_network, policy_tx=policy_tx, value_tx=value_tx,
               utterance_len=env_params.utterance_len, config=config)

  def update(self, batch: TokenBatch) -> tuple["TokenPPOAgent", dict[str, Array]]:
    """`update_epochs` passes of shuffled minibatch steps over the update's utterances."""
    return common.minibatch_epochs(self, batch, _minibatch_step, self.config.num_minibatches,
                                   self.config.update_epochs)


def normalize_advantages(advantage: Array, mask: Array) -> Array:
  """(A − mean) / (std + 1e-8) over the read tokens of a minibatch (0 elsewhere)."""
  mean = pg.masked_mean(advantage, mask)
  std = jnp.sqrt(pg.masked_mean(jnp.square(advantage - mean), mask))
  return jnp.where(mask, (advantage - mean) / (std + 1e-8), 0.0)


def ppo_loss(params: tuple[PyTree, PyTree], agent: TokenPPOAgent, batch: TokenBatch
             ) -> tuple[Array, dict[str, Array]]:
  """Clipped surrogate + value loss − entropy bonus, each aggregated over the read tokens."""
  config = agent.config
  policy_params, value_params = params
  logp, entropy = token_log_probs_and_entropy(agent.policy, policy_params, batch.dialogue,
                                              batch.utterance, config.temperature)
  advantage = batch.advantage
  if config.normalize_advantages:
    advantage = normalize_advantages(advantage, batch.mask)
  surrogate, extras = pg.clipped_surrogate_loss(logp, batch.log_prob, advantage,
                                                epsilon=config.clip_epsilon)
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


def _minibatch_step(agent: TokenPPOAgent, minibatch: TokenBatch
                    ) -> tuple[TokenPPOAgent, dict[str, Array]]:
  (policy_grads, value_grads), metrics = jax.grad(ppo_loss, has_aux=True)(
      (agent.policy_params, agent.value_params), agent, minibatch)
  policy_updates, policy_opt_state = agent.policy_tx.update(
      policy_grads, agent.policy_opt_state, agent.policy_params)
  value_updates, value_opt_state = agent.value_tx.update(
      value_grads, agent.value_opt_state, agent.value_params)
  return agent.replace(policy_params=optax.apply_updates(agent.policy_params, policy_updates),
                       value_params=optax.apply_updates(agent.value_params, value_updates),
                       policy_opt_state=policy_opt_state,
                       value_opt_state=value_opt_state), metrics


def make_batch(agent: TokenPPOAgent, traj, config) -> TokenBatch:
  """Values in two batched passes, token-level GAE per environment, then flat rows."""
  num_steps, num_envs = traj.reward.shape
  dialogue, utterance = flatten_steps(traj.obs), flatten_steps(traj.action)
  mask = token_bc.token_mask(utterance)
  value = agent.value_network.apply(agent.value_params, dialogue, utterance)
  # The value before the first token of any utterance depends only on the dialogue.
  next_value = agent.value_network.apply(agent.value_params, flatten_steps(traj.next_obs),
                                         utterance[:, :1])[:, 0]
  unflat = lambda x: x.reshape((num_steps, num_envs) + x.shape[1:])
  advantage = token_advantages(traj.reward, traj.terminated, traj.done, unflat(value),
                               unflat(next_value), unflat(mask), config)
  advantage = flatten_steps(advantage)
  return TokenBatch(dialogue=dialogue, utterance=utterance,
                    log_prob=flatten_steps(traj.policy_extras), value=value,
                    advantage=advantage, target=advantage + value, mask=mask)


# ----------------------------------------------------------------------------------------------
# The run: rollout -> token GAE -> update, as a Learner and as one program.
# ----------------------------------------------------------------------------------------------


class LearnerParts(NamedTuple):
  """What every token-game learner builds from its config before `init`."""

  env: token_game.TokenGame
  env_params: token_game.EnvParams
  sample: Callable  # `sampling_policy` of the config's policy
  evaluate_params: Callable  # `greedy_evaluation(...)(policy_params, key)`


def learner_parts(config) -> LearnerParts:
  """The game, its parameters, and the sampling and greedy-evaluation functions of the policy."""
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  policy = token_bc.make_policy(env_params, config)
  return LearnerParts(env, env_params,
                      sampling_policy(policy, env_params.utterance_len, config.temperature),
                      greedy_evaluation(env, env_params, policy, config.eval_episodes))


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one update to the next; checkpointed whole."""

  agent: TokenPPOAgent
  env: EnvCarry  # per-environment state: sharded along the mesh's data axis
  key: Array
  update: Array  # int32 count of updates done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one token-PPO update."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params, sample, evaluate_params = learner_parts(config)
  steps_per_update = config.num_envs * config.num_steps

  def init(key: Array) -> RunnerState:
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = TokenPPOAgent.create(agent_key, env, env_params, config)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    return RunnerState(agent=agent, env=carry, key=key, update=jnp.zeros((), jnp.int32))

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key = jax.random.split(state.key)
    carry, traj = rollout.rollout(env, env_params, sample, state.agent.policy_params, state.env,
                                  rollout_key, config.num_steps, unroll=config.rollout_unroll)
    batch = make_batch(state.agent, traj, config)
    agent, metrics = state.agent.update(batch)
    metrics.update(rollout_statistics(traj))
    metrics["advantage_abs"] = pg.masked_mean(jnp.abs(batch.advantage), batch.mask)
    return RunnerState(agent=agent, env=carry, key=key, update=state.update + 1), metrics

  def evaluate(state: RunnerState, key: Array) -> dict[str, Array]:
    return evaluate_params(state.agent.policy_params, key)

  return Learner(init=init, step=step, evaluate=evaluate,
                 num_updates=config.total_timesteps // steps_per_update,
                 env_steps_per_update=steps_per_update, sharded_field="env")


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-update metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))

