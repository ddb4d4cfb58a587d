"""ArCHer with a LoRA-adapted SmolLM2-135M actor on the token game rendered as text.

Zhou, Zanette, Pan, Levine, Kumar. "ArCHer: Training Language Model Agents via Hierarchical
Multi-Turn RL", arXiv 2402.19446 (ICML 2024); reference code YifeiZhou02/ArCHer @7c771a7. The
losses are `hrljax.losses.hierarchical_critics` (`archer_critic_loss`: twin Q/V utterance-level TD
critic; `archer_actor_loss`: token-level REINFORCE with the utterance-level advantage
A = min_e Q_e(s, a) − min_e V_e(s)). The environment is `hrljax.envs.token_game` with the text
rendering of `hrljax.envs.text_tasks` (one environment step = one line spoken by the LLM, parsed
host-side into the game's utterance tokens).

Networks, and why:
  * actor = the token-level policy = SmolLM2-135M-Instruct with LoRA adapters (`networks.llama`),
    prompted with `text_tasks.game_prompt` (rules, item table, dialogue so far);
  * critic = a small separate utterance-level critic (`networks.transformer.UtteranceCritic`,
    built by `token_common.make_critic` as in `agents/archer.py`, twin Q and V heads) that reads
    the game's token dialogue and the utterance *as parsed by the game*, trained from scratch.
    Not a head on the frozen LLM: the text is a deterministic rendering of the token dialogue, so
    the small critic sees the same state, and the game's transition depends on the utterance
    only through its parse, so Q over parsed utterances is the Q of the environment's MDP. It
    also costs no LLM forward pass, so ArCHer's many critic steps per iteration stay cheap on a
    CPU (a head on the LLM's hidden state would need a 135M-parameter forward pass per batch);
  * or, with `critic_trunk="llm"`, a pretrained critic as in the paper: twin Q/V heads
    (`transformer.FeatureCritic`) on the residual stream of the actor's own frozen base model cut
    to its first `critic_llm_layers` layers (`llama.hidden_states`, no adapters). V reads the
    last token of the state's text (the prompt without the chat template), Q the last token of
    that text followed by the parsed utterance's text (`text_tasks.render_utterance`), so Q is
    still over the game's utterances. The trunk is frozen, so the features of a transition are
    computed once, when it is collected (state, state-utterance and successor), and the replay
    buffer holds features: a critic step is a step of the heads only.

One iteration:
  1. every one of `num_envs` parallel games gets one line from the LLM (one jitted `generate`
     call, temperature `temperature`); the lines are parsed, the games step (auto-reset), and the
     utterance-level transitions go to the replay buffer (`hrljax.replay`);
  2. `critic_updates` critic steps on uniform batches (Q regresses on r + γ(1 − terminated)·V̄(s'),
     V on Q̄(s, a_π)); the target critic follows by Polyak averaging with τ after every step;
  3. after `warmup_iters` critic-only iterations, one actor step on this iteration's states and
     the lines just sampled for them (on-policy): REINFORCE on the LLM's response tokens weighted
     by the online critic's advantage; optax on the LoRA pytree only.

Deviations from the reference, each deliberate:
  * the V-target's a_π is the replayed utterance (sampled by the policy when the transition was
    collected), not a fresh sample per critic step: a fresh sample would cost an LLM generation
    per critic batch; with a small replay buffer the samples come from recent policies;
  * one actor step per iteration on the iteration's own fresh samples (reference: 3 steps on
    replayed states, each with fresh samples), for the same reason;
  * LoRA instead of full fine-tuning of the actor; a from-scratch critic instead of RoBERTa;
  * the game is smaller than Twenty Questions and answers from an attribute table
    (see `hrljax/envs/token_game.py`); terminated is not truncated (`archer_q_targets`).

Driver: host-side parsing sits between the jitted calls, so `make_learner` returns a
`training.HostLearner` (one seed per run), which `python -m experiments.train` runs with logging,
evaluation and checkpoints (LoRA, critic, target critic, optimizer states, replay buffer,
environment carry, key): a killed run resumes. The model plumbing (loading, prompts, sampling,
response log-probs) is `agents/llm_common.py`.
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
from hrljax import llm_prompts, replay, training
from hrljax.agents import llm_common, text_game_common
from hrljax.agents import token_common as tc
from hrljax.envs import text_tasks, token_game
from hrljax.losses import hierarchical_critics as hc
from hrljax.networks import llama, transformer
from hrljax.types import Array, EnvCarry, PyTree

CRITIC_TRUNKS = ("scratch", "llm")


def get_config() -> ml_collections.ConfigDict:
  """ArCHer hyperparameters: the reference's where they transfer, small sizes for a CPU."""
  config = training.run_config(log_every=1, eval_every=20, checkpoint_every=5)
  config.agent = "llm_archer"
  # The game, its prompts and sampling: 8 parallel games, one line of at most 12 tokens each per
  # iteration, temperature 1.0 (the reference's).
  text_game_common.add_config_fields(config)
  config.num_updates = 60  # iterations
  config.buffer_size = 2_048
  config.batch_size = 64
  config.critic_updates = 20  # reference `epochs` = 50
  config.warmup_iters = 3  # reference: 20 critic-only iterations
  config.gamma = 0.95  # reference
  config.tau = 0.1  # reference, after every critic step
  config.critic_learning_rate = 1e-3  # from-scratch critic (reference 2e-5 fine-tunes RoBERTa)
  config.actor_learning_rate = 1e-4  # LoRA rate (reference 1e-6..1e-5 fine-tunes GPT-2)
  config.optimizer = "adam"
  config.max_grad_norm = 1.0  # reference
  config.num_critics = 2
  config.q_target_heads = "per_head"  # reference
  config.v_target_heads = "per_head"
  config.critic_trunk = "scratch"  # or "llm": heads on the frozen actor base's first layers
  config.critic_llm_layers = 4  # critic_trunk="llm": layers of the base model the features pass
  config.critic_head_hidden_sizes = (64, 64)  # critic_trunk="llm": widths of the head MLPs
  config.critic_utterance_encoding = "separate"
  config.critic_d_model = 32
  config.critic_num_layers = 1
  config.critic_readout = "mean"  # encoder features: "mean" over tokens or the "last" token
  config.critic_causal = False  # the policy's causal mask in the critic's encoder
  config.num_heads = 2
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  text_game_common.validate_config_fields(config, num_devices)
  checks.positive_int(
    config,
    "num_updates",
    "buffer_size",
    "batch_size",
    "critic_updates",
    "num_critics",
    "critic_d_model",
    "critic_num_layers",
    "num_heads",
    "critic_llm_layers",
  )
  tc.non_negative_int(config, "warmup_iters")
  checks.one_of(config, "critic_trunk", CRITIC_TRUNKS)
  checks.positive_int_tuple(config, "critic_head_hidden_sizes")
  if config.num_layers:  # a truncated model: its depth is known before it is loaded
    check_critic_llm_layers(config, config.num_layers)
  checks.positive(config, "critic_learning_rate", "actor_learning_rate", "max_grad_norm")
  checks.in_unit_interval(config, "gamma", "tau")
  checks.one_of(config, "q_target_heads", hc.HEAD_MODES)
  checks.one_of(config, "v_target_heads", hc.HEAD_MODES)
  checks.one_of(config, "critic_utterance_encoding", transformer.UTTERANCE_ENCODINGS)
  checks.one_of(config, "critic_readout", transformer.CRITIC_READOUTS)
  checks.one_of(config, "critic_causal", (True, False))
  tc.check_heads_divide(config, "critic_d_model")


# ------------------------------------------------------------------------------------------------
# State and jitted updates.
# ------------------------------------------------------------------------------------------------


class TrainState(struct.PyTreeNode):
  """Everything a run carries between iterations (checkpointed whole)."""

  lora: PyTree
  actor_opt_state: PyTree
  critic_params: PyTree
  target_critic_params: PyTree
  critic_opt_state: PyTree
  buffer: replay.ReplayBuffer
  env: EnvCarry
  key: Array
  update: Array  # int32 iterations done


class ActorBatch(NamedTuple):
  """This iteration's states, the LLM's lines for them and the parsed game utterances."""

  dialogue: Array  # int32 [N, D] game observation
  utterance: Array  # int32 [N, L] the parsed utterance
  prompt_tokens: Array  # int32 [N, P]
  prompt_mask: Array  # bool [N, P]
  response: Array  # int32 [N, T]
  response_mask: Array  # bool [N, T]
  state_features: Optional[Array] = None  # [N, F] critic_trunk="llm": features of the states
  state_action_features: Optional[Array] = None  # [N, F] ... of the states and utterances


class FeatureTransition(NamedTuple):
  """An utterance-level transition as the frozen trunk's features (`critic_trunk="llm"`)."""

  state: Array  # [F] features of s
  state_action: Array  # [F] features of (s, a)
  reward: Array
  next_state: Array  # [F] features of s'
  terminated: Array


def check_critic_llm_layers(config: ml_collections.ConfigDict, model_layers: int) -> None:
  """The pretrained critic's trunk (`critic_trunk="llm"`) cannot be deeper than the model."""
  if config.critic_trunk == "llm":
    checks.at_most_layers(config, "critic_llm_layers", model_layers)


def make_critic(env_params: token_game.EnvParams, config):
  """The critic of `config.critic_trunk`: heads on trunk features, or the from-scratch one."""
  if config.critic_trunk == "llm":
    return transformer.FeatureCritic(tuple(config.critic_head_hidden_sizes), config.num_critics)
  return tc.make_critic(env_params, config)


def critic_output(critic, params: PyTree, batch: ActorBatch) -> transformer.CriticOutput:
  """Q and V `[E, N]` of the actor batch's states and utterances."""
  if isinstance(critic, transformer.FeatureCritic):
    return critic.apply(params, batch.state_features, batch.state_action_features)
  return critic.apply(params, batch.dialogue, batch.utterance, tc.token_mask(batch.utterance))


def critic_objective(
  critic_params: PyTree,
  target_params: PyTree,
  critic,
  batch,
  config,
) -> tuple[Array, hc.CriticExtras]:
  """ArCHer's critic loss on a replay batch (`tc.UtteranceTransition`, or `FeatureTransition`
  for the feature critic); a_π of the V-target is the replayed utterance."""
  if isinstance(critic, transformer.FeatureCritic):
    features = transformer.FeatureCritic
    q_pi_tgt = critic.apply(
      target_params, batch.state, batch.state_action, method=features.q_values
    )
    v_next_tgt = critic.apply(target_params, batch.next_state, method=features.values)
    out = critic.apply(critic_params, batch.state, batch.state_action)
  else:
    mask = tc.token_mask(batch.utterance)
    q_pi_tgt = critic.apply(
      target_params,
      batch.dialogue,
      batch.utterance,
      mask,
      method=transformer.UtteranceCritic.q_values,
    )
    v_next_tgt = critic.apply(
      target_params, batch.next_dialogue, method=transformer.UtteranceCritic.values
    )
    out = critic.apply(critic_params, batch.dialogue, batch.utterance, mask)
  return hc.archer_critic_loss(
    out.q,
    out.v,
    v_next_tgt,
    q_pi_tgt,
    batch.reward.astype(jnp.float32),
    batch.terminated,
    config.gamma,
    q_target_heads=config.q_target_heads,
    v_target_heads=config.v_target_heads,
  )


def actor_objective(
  lora: PyTree,
  params: PyTree,
  model_config: llama.LlamaConfig,
  critic_params: PyTree,
  critic,
  batch: ActorBatch,
  temperature,
  prefix_len: int = 0,
) -> tuple[Array, hc.ActorExtras]:
  """ArCHer's token-level loss: −mean_B A(s, a)·Σ_h log π(a_h | s, a_<h) over the LLM's tokens
  (`prefix_len`: the prompts' common beginning, `TextGame.prefix_len`; 0: none)."""
  out = critic_output(critic, critic_params, batch)
  token_logp = llm_common.batch_logprobs(
    model_config, params, lora, batch, temperature=temperature, prefix_len=prefix_len
  )
  return hc.archer_actor_loss(token_logp, batch.response_mask, out.q, out.v)


CriticSettings = llm_common.config_settings(
  "CriticSettings",
  "critic_updates batch_size tau gamma q_target_heads v_target_heads critic_learning_rate "
  "optimizer max_grad_norm critic_d_model critic_num_layers num_heads num_critics "
  "critic_utterance_encoding critic_readout critic_causal critic_trunk critic_head_hidden_sizes",
)


def make_critic_update(env_params: token_game.EnvParams, config):
  """`critic_update(state) -> (state, metrics)`: `critic_updates` steps, jitted.

  Cached per (game, critic settings), so runs differing in run-level fields share the program.
  """
  return _make_critic_update(env_params, CriticSettings.of(config))


@functools.lru_cache(maxsize=8)
def _make_critic_update(env_params: token_game.EnvParams, config: CriticSettings):
  critic = make_critic(env_params, config)
  tx = tc.make_optimizer(config.optimizer, config.critic_learning_rate, config.max_grad_norm)

  @jax.jit
  def critic_update(state: TrainState) -> tuple[TrainState, dict]:
    key, sample_key = jax.random.split(state.key)
    batches = tc.sample_batches(state.buffer, sample_key, config.critic_updates, config.batch_size)

    def one_step(carry, batch):
      params, target, opt_state = carry
      (loss, extras), params, opt_state, _ = llm_common.gradient_step(
        tx, critic_objective, params, opt_state, target, critic, batch, config
      )
      target = optax.incremental_update(params, target, config.tau)
      return (params, target, opt_state), {
        "critic_loss": loss,
        "q_td_error_abs": jnp.mean(jnp.abs(extras.q_td_error)),
        "q_value": jnp.mean(extras.q_target - extras.q_td_error),
      }

    (params, target, opt_state), metrics = jax.lax.scan(
      one_step, (state.critic_params, state.target_critic_params, state.critic_opt_state), batches
    )
    state = state.replace(
      critic_params=params, target_critic_params=target, critic_opt_state=opt_state, key=key
    )
    return state, jax.tree.map(jnp.mean, metrics)

  return critic_update


@functools.lru_cache(maxsize=8)
def make_actor_update(
  model_config: llama.LlamaConfig,
  env_params: token_game.EnvParams,
  critic_settings: CriticSettings,
  learning_rate: float,
  optimizer: str,
  max_grad_norm: float,
  temperature: float,
  prefix_len: int = 0,
):
  """`actor_update(state, params, batch) -> (state, metrics)`: one LoRA step, jitted (cached)."""
  critic = make_critic(env_params, critic_settings)
  tx = tc.make_optimizer(optimizer, learning_rate, max_grad_norm)

  @jax.jit
  def actor_update(state: TrainState, params: PyTree, batch: ActorBatch) -> tuple[TrainState, dict]:
    (loss, extras), lora, opt_state, grads = llm_common.gradient_step(
      tx,
      actor_objective,
      state.lora,
      state.actor_opt_state,
      params,
      model_config,
      state.critic_params,
      critic,
      batch,
      temperature,
      prefix_len,
    )
    state = state.replace(lora=lora, actor_opt_state=opt_state)
    return state, {
      "actor_loss": loss,
      "advantage": jnp.mean(extras.advantage),
      "advantage_abs": jnp.mean(jnp.abs(extras.advantage)),
      "sequence_log_prob": jnp.mean(extras.sequence_log_prob),
      "actor_grad_norm": optax.tree.norm(grads),
    }

  return actor_update


@functools.lru_cache(maxsize=8)
def make_trunk_features(model_config: llama.LlamaConfig, num_layers: int):
  """`features(params, tokens, mask, state_index) -> (h_s, h_sa)`, jitted (cached): the base
  model's residual stream after `num_layers` layers at `state_index` and at the last slot."""

  @jax.jit
  def features(params, tokens, mask, state_index):
    hidden = llama.hidden_states(model_config, params, tokens, mask, num_layers)
    at_state = jnp.take_along_axis(hidden, state_index[:, None, None], axis=1)[:, 0]
    return at_state, hidden[:, -1]

  return features


def critic_text_inputs(
  prompts: list, moves: list, width: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Rows of prompt ids followed by move ids, left-padded to `width`: int32 tokens `[B, W]`,
  bool mask `[B, W]`, and the slot of each prompt's last token `[B]` (a causal model's state
  there is the prompt's alone)."""
  tokens = np.full((len(prompts), width), pad_id, np.int32)
  mask = np.zeros((len(prompts), width), bool)
  state_index = np.zeros(len(prompts), np.int32)
  for row, (prompt, move) in enumerate(zip(prompts, moves, strict=True)):
    ids = list(prompt) + list(move)
    if len(ids) > width:
      raise ValueError(
        f"width: expected at least {len(ids)} tokens of prompt and move, got {width}"
      )
    tokens[row, width - len(ids) :] = ids
    mask[row, width - len(ids) :] = True
    state_index[row] = width - len(move) - 1
  return tokens, mask, state_index


def critic_text_width(tokenizer, env_params: token_game.EnvParams, include_table: bool) -> int:
  """Token slots for the longest state text (a full dialogue of turns not understood, the longest
  answers) followed by the longest utterance text, rounded up to the prompt bucket."""
  # max_turns + 1: the state after the last turn (a successor's V) is a critic input too.
  prompts = llm_prompts.longest_dialogue_texts(env_params, include_table, env_params.max_turns + 1)
  longest = max(len(_encode(tokenizer, text)) for text in prompts)
  move = max(len(_encode(tokenizer, _move_text(u, env_params))) for u in _all_moves(env_params))
  return llm_prompts.round_up(longest + move, llm_common.PROMPT_BUCKET)


def _encode(tokenizer, text: str) -> list:
  return tokenizer.encode(text, add_special_tokens=False).ids


def _move_text(utterance, env_params: token_game.EnvParams) -> str:
  return "\nMove: " + text_tasks.render_utterance(utterance, env_params)


def _all_moves(env_params: token_game.EnvParams) -> list:
  """Every utterance the game can parse, and one it cannot."""
  vocab = token_game.vocabulary(env_params)
  length = env_params.utterance_len
  pad = [token_game.PAD] * length
  moves = [([token_game.INVALID] + pad)[:length]]
  for a in range(env_params.num_attributes):
    for v in range(env_params.num_values):
      ask = [token_game.ASK, vocab.attribute_start + a, vocab.value_start + v, token_game.END]
      moves.append((ask + pad)[:length])
  for i in range(env_params.num_items):
    moves.append(([token_game.GUESS, vocab.item_start + i, token_game.END] + pad)[:length])
  return [np.asarray(m, np.int32) for m in moves]


# ------------------------------------------------------------------------------------------------
# The agent.
# ------------------------------------------------------------------------------------------------


class LLMArcher:
  """ArCHer on the text game: the frozen LLM, the critic, optimizers and jitted calls."""

  def __init__(
    self, config: ml_collections.ConfigDict, lm: Optional[llm_common.LanguageModel] = None
  ):
    validate_config(config)
    self.config = ml_collections.FrozenConfigDict(config)
    self.lm = llm_common.language_model(config, lm)
    self.game = text_game_common.TextGame(self.config, self.lm)
    self.env, self.env_params = self.game.env, self.game.env_params
    self.prompt_width = self.game.prompt_width
    self.critic = make_critic(self.env_params, self.config)
    self.feature_critic = config.critic_trunk == "llm"
    if self.feature_critic:
      check_critic_llm_layers(config, self.lm.config.num_layers)
      self._trunk_features = make_trunk_features(self.lm.config, config.critic_llm_layers)
      self.critic_width = critic_text_width(
        self.lm.tokenizer, self.env_params, config.include_table
      )
    self.critic_tx = tc.make_optimizer(
      config.optimizer, config.critic_learning_rate, config.max_grad_norm
    )
    self.actor_tx = tc.make_optimizer(
      config.optimizer, config.actor_learning_rate, config.max_grad_norm
    )
    self._critic_update = make_critic_update(self.env_params, self.config)
    self._actor_update = make_actor_update(
      self.lm.config,
      self.env_params,
      CriticSettings.of(config),
      float(config.actor_learning_rate),
      config.optimizer,
      float(config.max_grad_norm),
      float(config.temperature),
      self.game.prefix_len,
    )

  def init(self, seed: int) -> TrainState:
    key = jax.random.key(seed)
    lora_key, critic_key, env_key, key = jax.random.split(key, 4)
    lora = llama.init_lora(self.lm.config, lora_key)
    if self.feature_critic:
      features = jnp.zeros((1, self.lm.config.dim), jnp.float32)
      critic_params = self.critic.init(critic_key, features, features)
      example = FeatureTransition(
        features[0], features[0], jnp.zeros((), jnp.float32), features[0], jnp.zeros((), bool)
      )
      buffer = replay.init(example, self.config.buffer_size)
    else:
      critic_params = self.critic.init(
        critic_key, tc.first_dialogue(self.env_params), tc.first_utterance(self.env_params)
      )
      buffer = tc.empty_buffer(self.env_params, self.config.buffer_size)
    return TrainState(
      lora=lora,
      actor_opt_state=self.actor_tx.init(lora),
      critic_params=critic_params,
      target_critic_params=critic_params,
      critic_opt_state=self.critic_tx.init(critic_params),
      buffer=buffer,
      env=self.game.reset(env_key, self.config.num_envs),
      key=key,
      update=jnp.zeros((), jnp.int32),
    )

  def speak(
    self, lora: PyTree, dialogues: np.ndarray, key: Array, greedy: bool = False
  ) -> tuple[ActorBatch, list[str]]:
    """One line per game observation `[N, D]`: the LLM's tokens, its text and the parse."""
    lines, texts = self.game.speak(lora, dialogues, key, greedy=greedy)
    return ActorBatch(*lines), texts

  def critic_features(
    self, dialogues: np.ndarray, utterances: Optional[np.ndarray] = None
  ) -> tuple[Array, Array]:
    """The frozen trunk's features `[N, F]` of the states' texts and, with `utterances`, of each
    state's text followed by its utterance's (without, the second output repeats the first)."""
    tokenizer, params = self.lm.tokenizer, self.env_params
    prompts = [
      _encode(tokenizer, text_tasks.game_prompt(d, params, self.config.include_table))
      for d in np.asarray(dialogues)
    ]
    if utterances is None:
      moves = [[] for _ in prompts]
    else:
      moves = [_encode(tokenizer, _move_text(u, params)) for u in np.asarray(utterances)]
    tokens, mask, state_index = critic_text_inputs(
      prompts, moves, self.critic_width, self.lm.pad_id
    )
    return self._trunk_features(self.lm.params, tokens, mask, state_index)

  def collect(self, state: TrainState) -> tuple[TrainState, ActorBatch, dict, list[str]]:
    """Every game hears one line; the transitions go to the replay buffer."""
    key, speak_key, env_key = jax.random.split(state.key, 3)
    batch, lines = self.speak(state.lora, state.env.obs, speak_key)
    carry, traj = self.game.step_env(state.env, batch.utterance, env_key)
    reward, valid = self.game.shaped_reward(traj.reward, batch.utterance)
    if self.feature_critic:
      state_features, state_action_features = self.critic_features(traj.obs, traj.action)
      next_features, _ = self.critic_features(traj.next_obs)
      batch = batch._replace(
        state_features=state_features, state_action_features=state_action_features
      )
      transition = FeatureTransition(
        state_features, state_action_features, reward, next_features, traj.terminated
      )
    else:
      transition = tc.UtteranceTransition(
        dialogue=traj.obs,
        utterance=traj.action,
        reward=reward,
        next_dialogue=traj.next_obs,
        terminated=traj.terminated,
      )
    buffer = replay.add(state.buffer, transition)
    stats = text_game_common.episode_statistics(traj, valid, batch.response_mask)
    return state.replace(buffer=buffer, env=carry, key=key), batch, stats, lines

  def step(self, state: TrainState) -> tuple[TrainState, dict]:
    """One iteration: collect, critic steps, and (after warm-up) one actor step."""
    start = time.perf_counter()
    state, batch, metrics, lines = self.collect(state)
    metrics["collect_seconds"] = time.perf_counter() - start
    state, critic_metrics = self._critic_update(state)
    metrics.update(llm_common.scalar_metrics(critic_metrics))
    if int(state.update) >= self.config.warmup_iters:
      start = time.perf_counter()
      state, actor_metrics = self._actor_update(state, self.lm.params, batch)
      metrics.update(llm_common.scalar_metrics(actor_metrics))
      metrics["actor_seconds"] = time.perf_counter() - start
    metrics["example_line"] = lines[0]
    return state.replace(update=state.update + 1), metrics

  def evaluate(self, lora: PyTree, episodes: int, seed: int = 0) -> dict:
    """Greedy play of `episodes` fresh games to their end: the win rate and valid-move rate."""
    return self.game.evaluate(lora, episodes, seed)


def make_learner(
  config: ml_collections.ConfigDict, lm: Optional[llm_common.LanguageModel] = None
) -> training.HostLearner:
  """A host-driven learner whose `step` is one ArCHer iteration (lines are parsed on the host).
  `lm` may pass an already loaded model (tests pass a tiny one)."""
  return text_game_common.host_learner(
    LLMArcher(config, lm),
    config,
    config.num_envs,
    lambda record, texts: _progress_line(record, texts, config.num_updates),
  )


def _progress_line(record: dict, texts: dict, num_updates: int) -> str:
  return (
    f"iteration {record['update']}/{num_updates} | games ended {record['episodes']:.0f}"
    f" (return {record['episode_return']:.2f}) | valid {record['valid_move_fraction']:.2f}"
    f" | critic {record['critic_loss']:.4f} | actor "
    f"{record.get('actor_loss', float('nan')):.4f} | {texts['example_line'][:50]!r}"
  )
