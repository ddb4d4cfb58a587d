"""Token-level PPO with a LoRA-adapted SmolLM2-135M policy and a value head on its pretrained
trunk, on the token game rendered as text: the on-policy baseline of `llm_archer`.

Schulman, Wolski, Dhariwal, Radford, Klimov. "Proximal Policy Optimization Algorithms",
arXiv:1707.06347 (clipped surrogate, Eq. 7); GAE from arXiv:1506.02438 (Eq. 16). ArCHer (Zhou,
Zanette, Pan, Levine, Kumar, arXiv 2402.19446) compares against token-level PPO, where every
token the language model writes is an action; this is that baseline on the same text game,
the same model and the same prompts as `llm_archer` (`agents/text_game_common.py`).

The token-level MDP is `hrljax.losses.hierarchical_critics.token_stream`: the state before
response token j is the prompt followed by the line's first j tokens; the line's reward (the
game's, plus `valid_move_bonus` for an understood line) arrives at its last token (the stop
token included); `token_gamma` discounts between the tokens of one line and `gamma` from one
line to the next (a termination cuts the bootstrap, a time-limit truncation bootstraps from the
true next state).

Networks:
  * policy = SmolLM2-135M-Instruct with LoRA adapters (`networks.llama`), base weights frozen;
  * value = `networks.transformer.FeatureValue`, a head on the residual stream of the same frozen
    base model cut to its first `value_llm_layers` layers (`llama.hidden_states`, no adapters):
    V(state before token j) reads the hidden state at the position of the token before j. The
    trunk is frozen, so the features of a batch are computed once, after it is collected, and
    the value steps train the head only (its own optimizer, `value_learning_rate`, so there is
    no value-loss coefficient).

One update (one Learner step): every one of `num_envs` games speaks `num_steps` lines at
`temperature` (one jitted `generate` call per line of every game; games continue across
updates, as in PPO), the behaviour log-probs, the token values and the successor values are
computed (one pass each), token-level GAE per game, then `update_epochs` passes of
`num_minibatches` minibatches of lines: the clipped surrogate aggregated over the response
tokens (`loss_aggregation`, default token mean) with advantages standardised per minibatch, and
the squared value error. No KL penalty, no entropy bonus.

Driver: host-side parsing sits between the jitted calls, so `make_learner` returns a
`training.HostLearner` (one seed per run; logging, evaluation, checkpoints of the adapters, the
value head, both optimizer states, the games and the key: a killed run resumes).
"""

import functools
import time
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import training
from hrljax.agents import common, llm_common, text_game_common
from hrljax.agents import token_common as tc
from hrljax.losses import hierarchical_critics as hc
from hrljax.losses import policy_gradient as pg
from hrljax.networks import llama, transformer
from hrljax.types import Array, EnvCarry, PyTree


def get_config() -> ml_collections.ConfigDict:
  """PPO hyperparameters (the paper's and PureJaxRL's where they transfer), small sizes."""
  config = training.run_config(log_every=1, eval_every=20, checkpoint_every=5)
  config.agent = "llm_token_ppo"
  text_game_common.add_config_fields(config)  # the game, prompts, parsing, sampling: as llm_archer
  config.num_steps = 3  # lines per game per update
  config.num_updates = 40
  config.update_epochs = 2
  config.num_minibatches = 2
  # Each minibatch's gradient summed over this many slices of its lines, one slice's backward
  # at a time: the same update with a smaller memory peak.
  config.micro_batches = 1
  config.clip_epsilon = 0.2  # paper
  config.gamma = 0.95  # from one line to the next (llm_archer's γ)
  config.token_gamma = 1.0  # between the tokens of a line (1: the line's return at every token)
  config.gae_lambda = 0.95  # paper
  config.normalize_advantages = True  # per minibatch, over the response tokens
  config.loss_aggregation = "token_mean"
  config.actor_learning_rate = 1e-4  # LoRA rate
  config.value_learning_rate = 1e-3  # the value head
  config.optimizer = "adam"
  config.max_grad_norm = 1.0
  config.value_llm_layers = 4  # layers of the frozen base model under the value head
  config.value_head_hidden_sizes = (64, 64)
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  text_game_common.validate_config_fields(config, num_devices)
  checks.positive_int(
    config, "num_steps", "num_updates", "update_epochs", "num_minibatches", "value_llm_layers"
  )
  lines = config.num_envs * config.num_steps
  if lines % config.num_minibatches:
    raise checks.ConfigError(
      f"config.num_minibatches: expected a divisor of num_envs * num_steps ({lines}), got "
      f"{config.num_minibatches}"
    )
  llm_common.validate_micro_batches(config, lines)
  checks.positive(config, "actor_learning_rate", "value_learning_rate", "max_grad_norm")
  checks.non_negative(config, "clip_epsilon")
  checks.in_unit_interval(config, "gamma", "token_gamma", "gae_lambda")
  checks.one_of(config, "normalize_advantages", (True, False))
  checks.one_of(config, "loss_aggregation", pg.AGGREGATION_MODES)
  checks.one_of(config, "optimizer", tc.OPTIMIZERS)
  checks.positive_int_tuple(config, "value_head_hidden_sizes")
  if config.num_layers:  # a truncated model: its depth is known before it is loaded
    checks.at_most_layers(config, "value_llm_layers", config.num_layers)


# ------------------------------------------------------------------------------------------------
# State, batch and the jitted calls.
# ------------------------------------------------------------------------------------------------


class TrainState(struct.PyTreeNode):
  """Everything a run carries between updates (checkpointed whole)."""

  lora: PyTree
  actor_opt_state: PyTree
  value_params: PyTree
  value_opt_state: PyTree
  env: EnvCarry
  key: Array
  update: Array  # int32 updates done


class LineBatch(NamedTuple):
  """The lines of one update, a row per (step, game), time-major (row t * num_envs + n)."""

  prompt_tokens: Array  # int32 [B, P]
  prompt_mask: Array  # bool [B, P]
  response: Array  # int32 [B, T]
  response_mask: Array  # bool [B, T]
  log_prob: Array  # float32 [B, T] behaviour log-probs (0 on unread tokens)
  features: Array  # float32 [B, T, F] the trunk's features of the state before each token
  advantage: Array  # float32 [B, T] token-level GAE
  target: Array  # float32 [B, T] value targets (advantage + value)


def token_state_features(
  model_config: llama.LlamaConfig, params: PyTree, num_layers: int, batch
) -> Array:
  """`[B, T, F]`: the frozen trunk's features of the state before each response token, i.e.
  at the position of the token before it (the prompt's last token for the first)."""
  tokens = jnp.concatenate([batch.prompt_tokens, batch.response], axis=1)
  mask = jnp.concatenate([batch.prompt_mask, batch.response_mask], axis=1)
  hidden = llama.hidden_states(model_config, params, tokens, mask, num_layers)
  width, length = batch.prompt_tokens.shape[1], batch.response.shape[1]
  return hidden[:, width - 1 : width - 1 + length]


def prompt_features(
  model_config: llama.LlamaConfig, params: PyTree, num_layers: int, tokens: Array, mask: Array
) -> Array:
  """`[B, F]`: the frozen trunk's features of left-padded prompts (their last token)."""
  return llama.hidden_states(model_config, params, tokens, mask, num_layers)[:, -1]


Settings = llm_common.config_settings(
  "Settings",
  "num_envs num_steps update_epochs num_minibatches micro_batches clip_epsilon gamma token_gamma "
  "gae_lambda normalize_advantages loss_aggregation actor_learning_rate value_learning_rate "
  "optimizer max_grad_norm value_llm_layers value_head_hidden_sizes temperature",
)


def ppo_objective(
  params: tuple[PyTree, PyTree],
  base: PyTree,
  model_config: llama.LlamaConfig,
  value_net,
  config: Settings,
  batch: LineBatch,
  prefix_len: int = 0,
  normalizer: Optional[Array] = None,
  tokens: Optional[Array] = None,
) -> tuple[Array, dict]:
  """Clipped surrogate of the adapters plus the squared value error of the head (their
  parameters are disjoint and each has its own optimizer, so the sum trains each on its own
  loss), both aggregated over the response tokens. `prefix_len`: the prompts' common beginning
  (`TextGame.prefix_len`; 0: none). The advantages are used as given (`normalize_advantages`
  standardises them per minibatch before). For a slice of a minibatch, `normalizer` and `tokens`
  are the minibatch's (`llm_common.line_gradients`)."""
  lora, value_params = params
  logp = llm_common.batch_logprobs(
    model_config, base, lora, batch, temperature=config.temperature, prefix_len=prefix_len
  )
  mask = batch.response_mask
  surrogate, extras = pg.clipped_surrogate_loss(
    logp, batch.log_prob, batch.advantage, epsilon=config.clip_epsilon, mask=mask
  )
  value = value_net.apply(value_params, batch.features)
  v_loss = pg.value_loss(jnp.where(mask, value, 0.0), jnp.where(mask, batch.target, 0.0))

  def agg(x):
    return pg.aggregate(x, mask, config.loss_aggregation, normalizer=normalizer)[0]

  policy_loss, value_loss = agg(surrogate), agg(v_loss)
  share = llm_common.token_share(mask, tokens)
  return policy_loss + value_loss, {
    "policy_loss": policy_loss,
    "value_loss": value_loss,
    "approx_kl": share * pg.masked_mean(extras.approx_kl, mask),
    "clip_fraction": share * pg.masked_mean(extras.clipped, mask),
  }


@functools.lru_cache(maxsize=8)
def make_prepare(model_config: llama.LlamaConfig, config: Settings, prefix_len: int = 0):
  """`prepare(base, lora, value_params, lines, reward, terminated, done, next_tokens,
  next_mask) -> LineBatch`, jitted (cached): behaviour log-probs, features, values, GAE."""
  value_net = transformer.FeatureValue(tuple(config.value_head_hidden_sizes))

  @jax.jit
  def prepare(base, lora, value_params, lines, reward, terminated, done, next_tokens, next_mask):
    mask = lines.response_mask
    log_prob = llm_common.batch_logprobs(
      model_config, base, lora, lines, temperature=config.temperature, prefix_len=prefix_len
    )
    features = token_state_features(model_config, base, config.value_llm_layers, lines)
    next_features = prompt_features(
      model_config, base, config.value_llm_layers, next_tokens, next_mask
    )
    value = jnp.where(mask, value_net.apply(value_params, features), 0.0)
    next_value = value_net.apply(value_params, next_features)
    steps, envs = config.num_steps, config.num_envs

    def time_major(x):
      return x.reshape((steps, envs) + x.shape[1:])

    advantage = tc.token_advantages(
      time_major(reward),
      time_major(terminated),
      time_major(done),
      time_major(value),
      time_major(next_value),
      time_major(mask),
      config,
    ).reshape(mask.shape)
    return LineBatch(
      prompt_tokens=lines.prompt_tokens,
      prompt_mask=lines.prompt_mask,
      response=lines.response,
      response_mask=mask,
      log_prob=jnp.where(mask, log_prob, 0.0),
      features=features,
      advantage=advantage,
      target=jnp.where(mask, advantage + value, 0.0),
    )

  return prepare


@functools.lru_cache(maxsize=8)
def make_update(model_config: llama.LlamaConfig, config: Settings, prefix_len: int = 0):
  """`update(state, base, batch) -> (state, metrics)`: `update_epochs` passes of
  `num_minibatches` minibatches, each gradient summed over `micro_batches` slices, jitted
  (cached)."""
  value_net = transformer.FeatureValue(tuple(config.value_head_hidden_sizes))
  actor_tx = tc.make_optimizer(config.optimizer, config.actor_learning_rate, config.max_grad_norm)
  value_tx = tc.make_optimizer(config.optimizer, config.value_learning_rate, config.max_grad_norm)

  @jax.jit
  def update(state: TrainState, base: PyTree, batch: LineBatch) -> tuple[TrainState, dict]:
    def minibatch_step(state, minibatch):
      if config.normalize_advantages:
        minibatch = minibatch._replace(
          advantage=hc.normalize_token_advantages(minibatch.advantage, minibatch.response_mask)
        )
      (loss, metrics), grads = llm_common.line_gradients(
        lambda params, lines, normalizer, tokens: ppo_objective(
          params, base, model_config, value_net, config, lines, prefix_len, normalizer, tokens
        ),
        (state.lora, state.value_params),
        minibatch,
        config.loss_aggregation,
        config.micro_batches,
      )
      lora_grads, value_grads = grads
      updates, actor_opt_state = actor_tx.update(lora_grads, state.actor_opt_state, state.lora)
      lora = optax.apply_updates(state.lora, updates)
      updates, value_opt_state = value_tx.update(
        value_grads, state.value_opt_state, state.value_params
      )
      value_params = optax.apply_updates(state.value_params, updates)
      state = state.replace(
        lora=lora,
        actor_opt_state=actor_opt_state,
        value_params=value_params,
        value_opt_state=value_opt_state,
      )
      return state, dict(metrics, loss=loss, actor_grad_norm=optax.tree.norm(lora_grads))

    return common.minibatch_epochs(
      state, batch, minibatch_step, config.num_minibatches, config.update_epochs
    )

  return update


# ------------------------------------------------------------------------------------------------
# The agent.
# ------------------------------------------------------------------------------------------------


class LLMTokenPPO:
  """Token-level PPO on the text game: the frozen model, the value head and the jitted calls."""

  def __init__(
    self, config: ml_collections.ConfigDict, lm: Optional[llm_common.LanguageModel] = None
  ):
    validate_config(config)
    self.config = ml_collections.FrozenConfigDict(config)
    self.lm = llm_common.language_model(config, lm)
    checks.at_most_layers(config, "value_llm_layers", self.lm.config.num_layers)
    self.game = text_game_common.TextGame(self.config, self.lm)
    settings = Settings.of(self.config)
    self.value_net = transformer.FeatureValue(tuple(config.value_head_hidden_sizes))
    self.actor_tx = tc.make_optimizer(
      config.optimizer, config.actor_learning_rate, config.max_grad_norm
    )
    self.value_tx = tc.make_optimizer(
      config.optimizer, config.value_learning_rate, config.max_grad_norm
    )
    self._prepare = make_prepare(self.lm.config, settings, self.game.prefix_len)
    self._update = make_update(self.lm.config, settings, self.game.prefix_len)

  def init(self, seed: int) -> TrainState:
    lora_key, value_key, env_key, key = jax.random.split(jax.random.key(seed), 4)
    lora = llama.init_lora(self.lm.config, lora_key)
    value_params = self.value_net.init(value_key, jnp.zeros((1, self.lm.config.dim)))
    return TrainState(
      lora=lora,
      actor_opt_state=self.actor_tx.init(lora),
      value_params=value_params,
      value_opt_state=self.value_tx.init(value_params),
      env=self.game.reset(env_key, self.config.num_envs),
      key=key,
      update=jnp.zeros((), jnp.int32),
    )

  def collect(self, state: TrainState):
    """`num_steps` lines of every game: the lines (rows time-major), their shaped rewards, the
    end flags, the prompts of the true successor states, the statistics and one line's text."""
    carry, key = state.env, state.key
    steps, stats = [], []
    for _ in range(self.config.num_steps):
      key, speak_key, env_key = jax.random.split(key, 3)
      lines, texts = self.game.speak(state.lora, carry.obs, speak_key)
      carry, traj = self.game.step_env(carry, lines.utterance, env_key)
      reward, valid = self.game.shaped_reward(traj.reward, lines.utterance)
      next_tokens, next_mask = self.game.encode_successors(traj.next_obs)
      done = traj.terminated | traj.truncated
      steps.append((lines, reward, traj.terminated, done, next_tokens, next_mask))
      stats.append(text_game_common.episode_statistics(traj, valid, lines.response_mask))
    rows = jax.tree.map(lambda *x: jnp.concatenate([jnp.asarray(a) for a in x]), *steps)
    metrics = {
      "episodes": sum(s["episodes"] for s in stats),
      "episode_return_sum": sum(s["episode_return_sum"] for s in stats),
      "valid_move_fraction": float(np.mean([s["valid_move_fraction"] for s in stats])),
      "response_length": float(np.mean([s["response_length"] for s in stats])),
    }
    return state.replace(env=carry, key=key), rows, metrics, texts[0]

  def step(self, state: TrainState) -> tuple[TrainState, dict]:
    """One update: collect, prepare the batch (log-probs, features, GAE), PPO epochs."""
    start = time.perf_counter()
    state, rows, metrics, line = self.collect(state)
    metrics["collect_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    lines, reward, terminated, done, next_tokens, next_mask = rows
    batch = self._prepare(
      self.lm.params,
      state.lora,
      state.value_params,
      lines,
      reward,
      terminated,
      done,
      next_tokens,
      next_mask,
    )
    state, update_metrics = self._update(state, self.lm.params, batch)
    metrics.update(llm_common.scalar_metrics(update_metrics))
    metrics["advantage_abs"] = float(pg.masked_mean(jnp.abs(batch.advantage), batch.response_mask))
    metrics["update_seconds"] = time.perf_counter() - start
    metrics["example_line"] = line
    return state.replace(update=state.update + 1), metrics

  def evaluate(self, lora: PyTree, episodes: int, seed: int = 0) -> dict:
    """Greedy play of `episodes` fresh games to their end: the win rate and valid-move rate."""
    return self.game.evaluate(lora, episodes, seed)


def make_learner(
  config: ml_collections.ConfigDict, lm: Optional[llm_common.LanguageModel] = None
) -> training.HostLearner:
  """A host-driven learner whose `step` is one PPO update (lines are parsed on the host). `lm`
  may pass an already loaded model (tests pass a tiny one)."""
  return text_game_common.host_learner(
    LLMTokenPPO(config, lm),
    config,
    config.num_envs * config.num_steps,
    lambda record, texts: _progress_line(record, texts, config.num_updates),
  )


def _progress_line(record: dict, texts: dict, num_updates: int) -> str:
  return (
    f"update {record['update']}/{num_updates} | games ended {record['episodes']:.0f}"
    f" (return {record['episode_return']:.2f}) | valid {record['valid_move_fraction']:.2f}"
    f" | policy {record['policy_loss']:.4f} | value {record['value_loss']:.4f} | "
    f"{texts['example_line'][:50]!r}"
  )
