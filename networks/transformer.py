"""A small causal transformer token policy and a twin-head utterance-level critic (for ArCHer).

See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou, Zanette, Pan,
Levine, Kumar (arXiv 2402.19446, ICML 2024). ArCHer's low level is a token-by-token policy (GPT-2
in the reference code, YifeiZhou02/ArCHer `archer/models/archer_agent.py`); its high level is an
utterance-level critic (`archer/models/critic.py`, `DoubleCritic`): a shared RoBERTa encoder
applied separately to the dialogue s and to the utterance a, two Q heads on `[h_s; h_a]` and two
V heads on `h_s`, each head an MLP `in -> d -> d -> 1` with ReLU. Here both networks are small
transformers trained from scratch (no pretrained language model), sized by constructor fields.

Token layout. Token arrays are int32 `[B, T]`. The token `pad_token` (the token game's PAD, 0) is
padding wherever it occurs in a dialogue (left, right or inside): PAD positions neither attend nor
are attended to, and position ids count only non-PAD tokens (`position = number of non-PAD tokens
before it`). A padded sequence therefore gives, at every non-PAD position, exactly the outputs of
the same sequence with the PADs removed; outputs at PAD positions are finite but meaningless.
The tokens of an utterance being generated or scored are all real (a generated PAD is an action,
not padding) unless a mask says otherwise. A dialogue must hold at least one non-PAD token (the
token game's observations start with BOS).

Contents:
- `CausalTransformer`: decoder-only token policy; `__call__` gives next-token logits at every
  position, `prefill` / `decode` run it with a KV cache, `utterance_logits` scores a given
  utterance after a dialogue in one teacher-forced forward pass.
- `generate(model, params, prompt, key, num_tokens, temperature, greedy)`: samples an utterance
  of `num_tokens` tokens inside jit (prefill once, then `lax.scan` over cached decode steps).
- `utterance_log_probs(model, params, prompt, utterance, temperature)`: teacher-forced token
  log-probs `[B, L]` (the actor loss input `token_logp` of `hrljax.losses.hierarchical_critics`).
- `UtteranceCritic`: transformer encoder with `num_critics` (2) Q heads and V heads, outputs
  ensemble-first `[E, B]` as `hrljax.losses.hierarchical_critics` expects;
  `critic_params_from_policy` starts its encoder from a `CausalTransformer`'s trunk.
- `TokenValueNetwork`: V(dialogue, a_<j) for every token j of an utterance (token-level PPO's
  value function), a `CausalTransformer` of its own with a scalar head.

Deviations from the reference code:
- No pretrained models: GPT-2 and RoBERTa-base are replaced by small transformers
  (token + learned position embeddings, pre-LayerNorm blocks, GELU MLP, no dropout).
- The critic pools an encoding by a masked mean over its non-PAD tokens (default) or reads the
  last non-PAD token's state (`readout="last"`); RoBERTa's `pooler_output` is the first token's
  state through a tanh dense layer.
- `UtteranceCritic(utterance_encoding="joint")` optionally encodes the dialogue and the utterance
  together for Q (the reference concatenates the texts into `state_actions` but never uses them);
  the default "separate" is the reference's layout.
- Generation has no stopping criterion: it always produces `num_tokens` tokens (the token game
  ignores tokens after an utterance's first END/PAD; mask them with
  `hrljax.envs.token_game.utterance_token_mask` in the loss).
"""

import math
from typing import NamedTuple, Optional, Sequence, Tuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.networks.heads import ValueHead
from hrljax.networks.torsos import MLP

Array = jax.Array

UTTERANCE_ENCODINGS = ("separate", "joint")
CRITIC_READOUTS = ("mean", "last")
_EMBED_INIT = nn.initializers.normal(stddev=0.02)


class KVCache(NamedTuple):
  """Attention keys/values of the tokens seen so far, for incremental decoding.

  Slots `[0, T_prompt)` hold the prompt (PAD slots marked invalid), later slots the decoded
  tokens in order. Attention does not depend on slot order (positions are embedded at the
  input), so the gap of PAD slots between prompt and utterance changes nothing.
  """

  keys: Tuple[Array, ...]  # per layer, float32 [B, num_heads, S, head_dim]
  values: Tuple[Array, ...]  # per layer, float32 [B, num_heads, S, head_dim]
  valid: Array  # bool [B, S], slots that may be attended to
  length: Array  # int32 scalar, the next slot to write
  next_position: Array  # int32 [B], position id of the next token (non-PAD tokens so far)


class CriticOutput(NamedTuple):
  """Utterance-level critic values, ensemble-first."""

  q: Array  # float32 [E, B], Q_e(s, a)
  v: Array  # float32 [E, B], V_e(s)


def _check_tokens(name: str, tokens: Array) -> None:
  chex.assert_rank(tokens, 2)
  chex.assert_type(tokens, int)
  if tokens.shape[1] < 1:
    raise ValueError(f"{name}: expected at least one token per row, got shape {tokens.shape}")


def _check_positive_int(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name}: expected an int >= 1, got {value!r}")


def _check_temperature(temperature) -> None:
  """A Python number must be finite and > 0; a traced temperature is the caller's business."""
  if isinstance(temperature, (int, float)) and not (0.0 < temperature < math.inf):
    raise ValueError(f"temperature: expected a finite float > 0, got {temperature!r}")


def token_positions(valid: Array) -> Array:
  """Position ids `[B, S]` counting only valid tokens: the i-th valid token of a row gets i.

  An invalid slot repeats the id of the valid token before it (0 before any); it is masked out
  anyway.
  """
  return jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)


def last_valid_index(valid: Array) -> Array:
  """Index `[B]` of the last valid slot of each row of `valid` `[B, S]` (S - 1 if none)."""
  return (valid.shape[1] - 1 - jnp.argmax(valid[:, ::-1], axis=1)).astype(jnp.int32)


def _attend(q: Array, k: Array, v: Array, mask: Array) -> Array:
  """Scaled dot-product attention; q `[B, H, Q, D]`, k/v `[B, H, K, D]`, mask bool `[B, Q, K]`.

  Returns `[B, Q, H, D]`. Heads-major inputs keep the batch axes of both products leading, so
  the cache is never transposed. A query whose mask row is empty (a PAD query) attends to nothing
  and returns zeros.
  """
  scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
  mask = mask[:, None, :, :]
  scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
  probs = jnp.where(mask, jax.nn.softmax(scores, axis=-1), 0.0)
  return jnp.einsum("bhqk,bhkd->bqhd", probs, v)


class _Block(nn.Module):
  """A pre-LayerNorm transformer block: x + Attn(LN(x)), then x + MLP(LN(x))."""

  d_model: int
  num_heads: int
  mlp_dim: int

  def setup(self):
    head_dim = self.d_model // self.num_heads
    self.attention_norm = nn.LayerNorm()
    self.qkv = nn.DenseGeneral((3, self.num_heads, head_dim))
    self.attention_out = nn.DenseGeneral(self.d_model, axis=(-2, -1))
    self.mlp_norm = nn.LayerNorm()
    self.mlp_in = nn.Dense(self.mlp_dim)
    self.mlp_out = nn.Dense(self.d_model)

  def _project(self, x: Array) -> Tuple[Array, Array, Array]:
    """Queries, keys and values, each heads-major `[B, H, S, D]`."""
    qkv = jnp.transpose(self.qkv(self.attention_norm(x)), (2, 0, 3, 1, 4))  # [3, B, H, S, D]
    return qkv[0], qkv[1], qkv[2]

  def _finish(self, x: Array, attended: Array) -> Array:
    x = x + self.attention_out(attended)
    return x + self.mlp_out(nn.gelu(self.mlp_in(self.mlp_norm(x))))

  def __call__(self, x: Array, mask: Array) -> Tuple[Array, Array, Array]:
    """Self-attention over the whole sequence; returns the new x and this layer's keys/values."""
    q, k, v = self._project(x)
    return self._finish(x, _attend(q, k, v, mask)), k, v

  def decode(
    self, x: Array, keys: Array, values: Array, slot: Array, valid: Array
  ) -> Tuple[Array, Array, Array]:
    """One new token x `[B, 1, d]` written at `slot` of the cache, attending to `valid` slots."""
    q, k, v = self._project(x)
    keys = jax.lax.dynamic_update_slice_in_dim(keys, k, slot, axis=2)
    values = jax.lax.dynamic_update_slice_in_dim(values, v, slot, axis=2)
    return self._finish(x, _attend(q, keys, values, valid[:, None, :])), keys, values


class _Trunk(nn.Module):
  """Token + learned position embeddings, `num_layers` blocks and a final LayerNorm."""

  vocab_size: int
  d_model: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  max_len: int

  def setup(self):
    for name in ("vocab_size", "d_model", "num_layers", "num_heads", "mlp_dim", "max_len"):
      _check_positive_int(name, getattr(self, name))
    if self.d_model % self.num_heads:
      raise ValueError(
        f"d_model: expected a multiple of num_heads={self.num_heads}, got {self.d_model}"
      )
    self.token_embed = nn.Embed(self.vocab_size, self.d_model, embedding_init=_EMBED_INIT)
    self.position_embed = nn.Embed(self.max_len, self.d_model, embedding_init=_EMBED_INIT)
    self.blocks = [
      _Block(self.d_model, self.num_heads, self.mlp_dim) for _ in range(self.num_layers)
    ]
    self.final_norm = nn.LayerNorm()

  def check_length(self, name: str, length: int) -> None:
    if length > self.max_len:
      raise ValueError(f"{name}: expected at most max_len={self.max_len} tokens, got {length}")

  def __call__(
    self, tokens: Array, valid: Array, causal: bool
  ) -> Tuple[Array, Tuple[Array, ...], Tuple[Array, ...]]:
    """Hidden states `[B, S, d]` and per-layer keys/values of a whole sequence."""
    self.check_length("tokens", tokens.shape[1])
    x = self.token_embed(tokens) + self.position_embed(token_positions(valid))
    mask = valid[:, :, None] & valid[:, None, :]
    if causal:
      size = tokens.shape[1]
      mask = mask & jnp.tril(jnp.ones((size, size), bool))[None]
    keys, values = [], []
    for block in self.blocks:
      x, k, v = block(x, mask)
      keys.append(k)
      values.append(v)
    return self.final_norm(x), tuple(keys), tuple(values)

  def decode(self, token: Array, cache: KVCache) -> Tuple[Array, KVCache]:
    """Hidden state `[B, d]` of one new token per row, and the cache with it appended."""
    x = self.token_embed(token) + self.position_embed(cache.next_position)
    x = x[:, None, :]
    valid = jax.lax.dynamic_update_slice_in_dim(
      cache.valid, jnp.ones((token.shape[0], 1), bool), cache.length, axis=1
    )
    keys, values = [], []
    for block, k, v in zip(self.blocks, cache.keys, cache.values):
      x, k, v = block.decode(x, k, v, cache.length, valid)
      keys.append(k)
      values.append(v)
    cache = KVCache(
      keys=tuple(keys),
      values=tuple(values),
      valid=valid,
      length=cache.length + 1,
      next_position=cache.next_position + 1,
    )
    return self.final_norm(x[:, 0]), cache


class CausalTransformer(nn.Module):
  """A decoder-only transformer token policy: next-token logits for every prefix.

  Per-batch (rows are independent). Pre-LayerNorm GPT-style blocks with token and learned
  position embeddings; see the module docstring for the padding convention. Initialised with
  `model.init(key, tokens)`.

  Attributes:
    vocab_size: number of token ids (`token_game.vocabulary(params).size`, 81 by default).
    d_model: width of the residual stream.
    num_layers: number of blocks.
    num_heads: attention heads (must divide `d_model`).
    mlp_dim: hidden width of the block MLPs (default 4·d_model).
    max_len: number of position embeddings; a sequence (prompt plus utterance) may hold at most
      this many tokens (the default token game needs 41 + 4).
    pad_token: the padding token id.
  """

  vocab_size: int
  d_model: int = 64
  num_layers: int = 2
  num_heads: int = 4
  mlp_dim: Optional[int] = None
  max_len: int = 64
  pad_token: int = 0

  def setup(self):
    self.trunk = _Trunk(
      self.vocab_size,
      self.d_model,
      self.num_layers,
      self.num_heads,
      self.mlp_dim or 4 * self.d_model,
      self.max_len,
    )
    self.lm_head = nn.Dense(self.vocab_size, kernel_init=_EMBED_INIT)

  def __call__(self, tokens: Array, valid: Optional[Array] = None) -> Array:
    """Next-token logits float32 `[B, S, V]` at every position of tokens int `[B, S]`.

    `valid` (bool `[B, S]`, default `tokens != pad_token`) marks the real tokens. The logits at
    position i are those of the token that follows it.
    """
    _check_tokens("tokens", tokens)
    valid = tokens != self.pad_token if valid is None else valid
    chex.assert_equal_shape([tokens, valid])
    hidden, _, _ = self.trunk(tokens, valid, causal=True)
    return self.lm_head(hidden)

  def utterance_logits(self, prompt: Array, utterance: Array) -> Array:
    """Teacher forcing: the logits `[B, L, V]` from which each utterance token was drawn.

    One causal forward pass over `[prompt, utterance]`; entry j is the distribution of
    `utterance[:, j]` given the prompt and `utterance[:, :j]`.

    Args:
      prompt: int `[B, T]` dialogue (PAD-padded anywhere, at least one real token per row).
      utterance: int `[B, L]` utterance tokens, all treated as real (PADs included).
    """
    _check_tokens("prompt", prompt)
    _check_tokens("utterance", utterance)
    chex.assert_equal_shape_prefix([prompt, utterance], 1)
    prompt_valid = prompt != self.pad_token
    tokens = jnp.concatenate([prompt, utterance.astype(prompt.dtype)], axis=1)
    valid = jnp.concatenate([prompt_valid, jnp.ones(utterance.shape, bool)], axis=1)
    hidden, _, _ = self.trunk(tokens, valid, causal=True)
    prompt_len, utterance_len = prompt.shape[1], utterance.shape[1]
    last = last_valid_index(prompt_valid)
    # The first token follows the last real prompt token, which right-padding puts mid-row.
    first = jnp.take_along_axis(hidden[:, :prompt_len], last[:, None, None], axis=1)
    rest = hidden[:, prompt_len : prompt_len + utterance_len - 1]
    return self.lm_head(jnp.concatenate([first, rest], axis=1))

  def prefill(self, prompt: Array, max_new_tokens: int) -> Tuple[Array, KVCache]:
    """Runs the prompt once: the logits `[B, V]` of the first new token and a KV cache with room
    for `max_new_tokens` decoded tokens.

    Args:
      prompt: int `[B, T]` dialogue (PAD-padded anywhere, at least one real token per row).
      max_new_tokens: Python int >= 0, number of `decode` calls the cache must hold.
    """
    _check_tokens("prompt", prompt)
    if (
      isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0
    ):
      raise ValueError(f"max_new_tokens: expected an int >= 0, got {max_new_tokens!r}")
    # Same bound as teacher forcing of the T + max_new_tokens + 1 tokens this produces, so that
    # generation and scoring accept the same shapes.
    self.trunk.check_length("prompt + new tokens", prompt.shape[1] + max_new_tokens + 1)
    valid = prompt != self.pad_token
    hidden, keys, values = self.trunk(prompt, valid, causal=True)
    last = last_valid_index(valid)
    logits = self.lm_head(jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0])

    def room(cached: Array) -> Array:
      return jnp.pad(cached, ((0, 0), (0, 0), (0, max_new_tokens), (0, 0)))

    cache = KVCache(
      keys=tuple(room(k) for k in keys),
      values=tuple(room(v) for v in values),
      valid=jnp.pad(valid, ((0, 0), (0, max_new_tokens))),
      length=jnp.asarray(prompt.shape[1], jnp.int32),
      next_position=jnp.sum(valid, axis=1, dtype=jnp.int32),
    )
    return logits, cache

  def decode(self, token: Array, cache: KVCache) -> Tuple[Array, KVCache]:
    """Appends one token int `[B]` to the cache; returns the next-token logits `[B, V]`.

    The cache must have room (`prefill(..., max_new_tokens)` sets how many calls fit); writing
    past its end is clamped by `dynamic_update_slice` and silently wrong, and `generate` never
    does it.
    """
    chex.assert_rank(token, 1)
    chex.assert_type(token, int)
    hidden, cache = self.trunk.decode(token, cache)
    return self.lm_head(hidden), cache


def _choose(logits: Array, key: Array, temperature, greedy: bool) -> Tuple[Array, Array]:
  """Draws (or, greedily, picks) one token per row; returns it and its log-prob under
  softmax(logits / temperature)."""
  log_probs = jax.nn.log_softmax(logits / temperature, axis=-1)
  if greedy:
    token = jnp.argmax(logits, axis=-1)
  else:
    token = jax.random.categorical(key, log_probs, axis=-1)
  token = token.astype(jnp.int32)
  return token, jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]


def generate(
  model: CausalTransformer,
  params,
  prompt: Array,
  key: Array,
  *,
  num_tokens: int,
  temperature=1.0,
  greedy: bool = False,
) -> Tuple[Array, Array]:
  """Generates an utterance of `num_tokens` tokens per dialogue, jittable, with a KV cache.

  Per-batch (rows are independent; one key serves the batch). The prompt is run once
  (`prefill`), then `num_tokens - 1` cached `decode` steps run in a `lax.scan`, so the cost is
  one prompt pass plus L single-token passes. Sampling draws from softmax(logits / temperature)
  (ArCHer's rollouts use temperature 1); `greedy=True` takes the argmax instead (ArCHer's
  evaluation), ignoring the key. The returned log-probs are always those of the chosen tokens
  under softmax(logits / temperature), i.e. equal to
  `utterance_log_probs(model, params, prompt, tokens, temperature)`.

  Args:
    model: the `CausalTransformer`.
    params: its parameters.
    prompt: int `[B, T]` dialogues (e.g. token-game observations, right-padded with PAD).
    key: PRNG key.
    num_tokens: Python int L >= 1, utterance length.
    temperature: sampling temperature > 0 (a Python number is validated; may be traced).
    greedy: Python bool, argmax decoding.

  Returns:
    `(tokens int32 [B, L], log_probs float32 [B, L])`.
  """
  _check_tokens("prompt", prompt)
  _check_positive_int("num_tokens", num_tokens)
  _check_temperature(temperature)
  if not isinstance(greedy, bool):
    raise ValueError(f"greedy: expected a Python bool, got {greedy!r}")
  logits, cache = model.apply(params, prompt, num_tokens - 1, method=CausalTransformer.prefill)
  keys = jax.random.split(key, num_tokens)
  first_token, first_log_prob = _choose(logits, keys[0], temperature, greedy)

  def step(carry, step_key):
    token, cache = carry
    logits, cache = model.apply(params, token, cache, method=CausalTransformer.decode)
    next_token, log_prob = _choose(logits, step_key, temperature, greedy)
    return (next_token, cache), (next_token, log_prob)

  _, (tokens, log_probs) = jax.lax.scan(step, (first_token, cache), keys[1:])
  tokens = jnp.concatenate([first_token[:, None], tokens.T], axis=1)
  log_probs = jnp.concatenate([first_log_prob[:, None], log_probs.T], axis=1)
  return tokens, log_probs


def utterance_log_probs(
  model: CausalTransformer, params, prompt: Array, utterance: Array, temperature=1.0
) -> Array:
  """Teacher-forced log-probs float32 `[B, L]` of utterance tokens under the policy.

  log softmax(logits / temperature) of each token of `utterance` (int `[B, L]`) given the prompt
  (int `[B, T]`) and the earlier utterance tokens, in one forward pass (per-batch, rows are
  independent). Differentiable in `params`: this is ArCHer's `token_logp`
  (`hrljax.losses.hierarchical_critics.archer_actor_loss`).
  """
  _check_temperature(temperature)
  logits = model.apply(params, prompt, utterance, method=CausalTransformer.utterance_logits)
  log_probs = jax.nn.log_softmax(logits / temperature, axis=-1)
  return jnp.take_along_axis(log_probs, utterance[:, :, None].astype(jnp.int32), axis=-1)[..., 0]


class _ScalarMLP(nn.Module):
  """One critic head: an MLP with ReLU and a scalar output (reference: in -> d -> d -> 1)."""

  hidden_sizes: Sequence[int]

  @nn.compact
  def __call__(self, features: Array) -> Array:
    return ValueHead()(MLP(self.hidden_sizes, activation="relu")(features))


def _ensemble(hidden_sizes: Sequence[int], size: int) -> nn.Module:
  """`size` independently initialised heads evaluated on the same features, output `[E, B]`."""
  heads = nn.vmap(
    _ScalarMLP,
    variable_axes={"params": 0},
    split_rngs={"params": True},
    in_axes=None,
    out_axes=0,
    axis_size=size,
  )
  return heads(tuple(hidden_sizes))


class UtteranceCritic(nn.Module):
  """ArCHer's utterance-level critic: twin Q(s, a) and twin V(s) heads on a shared encoder.

  Per-batch. A transformer encoder (same blocks as `CausalTransformer`; bidirectional unless
  `causal`) turns a token sequence into the masked mean of its final hidden states
  (`readout="mean"`) or into the final hidden state of its last non-PAD token
  (`readout="last"`). With `utterance_encoding="separate"` (the reference's `DoubleCritic`),
  `h_s = enc(dialogue)`, `h_a = enc(utterance)` and `Q_e = MLP_e([h_s; h_a])`; with "joint",
  `h_a` is replaced by `enc([dialogue, utterance])`, so attention can relate the utterance to
  the dialogue. In both,
  `V_e = MLP'_e(h_s)` sees only the dialogue. Outputs are ensemble-first `[E, B]`, E =
  `num_critics`, as `hrljax.losses.hierarchical_critics` expects. Initialised with
  `critic.init(key, dialogue, utterance)`.

  Attributes:
    vocab_size, d_model, num_layers, num_heads, mlp_dim, max_len, pad_token: as in
      `CausalTransformer` (for "joint", dialogue plus utterance must fit `max_len`).
    head_hidden_sizes: hidden widths of every head MLP (default `(d_model, d_model)`, the
      reference's `in -> d -> d -> 1`).
    num_critics: ensemble size E (ArCHer: 2).
    utterance_encoding: "separate" (reference, default) or "joint".
    readout: "mean" (default) or "last". With `causal` and the trunk of a token policy, "last"
      is the policy's own final hidden state (the features its next-token head reads).
    causal: False (default): every token attends to the whole sequence; True: the causal mask
      of `CausalTransformer`, so the encoder has the policy's architecture exactly and can start
      from a token policy's trunk parameters (ArCHer's critic starts from a pretrained LM).
  """

  vocab_size: int
  d_model: int = 64
  num_layers: int = 2
  num_heads: int = 4
  mlp_dim: Optional[int] = None
  max_len: int = 64
  pad_token: int = 0
  head_hidden_sizes: Optional[Sequence[int]] = None
  num_critics: int = 2
  utterance_encoding: str = "separate"
  readout: str = "mean"
  causal: bool = False

  def setup(self):
    if self.utterance_encoding not in UTTERANCE_ENCODINGS:
      raise ValueError(
        f"utterance_encoding: expected one of {list(UTTERANCE_ENCODINGS)}, "
        f"got {self.utterance_encoding!r}"
      )
    if self.readout not in CRITIC_READOUTS:
      raise ValueError(f"readout: expected one of {list(CRITIC_READOUTS)}, got {self.readout!r}")
    _check_positive_int("num_critics", self.num_critics)
    self.encoder = _Trunk(
      self.vocab_size,
      self.d_model,
      self.num_layers,
      self.num_heads,
      self.mlp_dim or 4 * self.d_model,
      self.max_len,
    )
    hidden_sizes = self.head_hidden_sizes or (self.d_model, self.d_model)
    self.q_heads = _ensemble(hidden_sizes, self.num_critics)
    self.v_heads = _ensemble(hidden_sizes, self.num_critics)

  def encode(self, tokens: Array, valid: Array) -> Array:
    """Features `[B, d]` of tokens `[B, S]`: the masked mean of the encoding (0 if none valid),
    or with `readout="last"` the state of the last valid token."""
    hidden, _, _ = self.encoder(tokens, valid, causal=self.causal)
    if self.readout == "last":
      return jnp.take_along_axis(hidden, last_valid_index(valid)[:, None, None], axis=1)[:, 0]
    weights = valid.astype(hidden.dtype)
    total = jnp.sum(hidden * weights[:, :, None], axis=1)
    return total / jnp.maximum(jnp.sum(weights, axis=1), 1.0)[:, None]

  def _dialogue_features(self, dialogue: Array) -> Array:
    _check_tokens("dialogue", dialogue)
    return self.encode(dialogue, dialogue != self.pad_token)

  def _q(
    self, dialogue: Array, state_features: Array, utterance: Array, utterance_mask: Optional[Array]
  ) -> Array:
    _check_tokens("utterance", utterance)
    chex.assert_equal_shape_prefix([dialogue, utterance], 1)
    if utterance_mask is None:
      utterance_mask = utterance != self.pad_token
    chex.assert_equal_shape([utterance, utterance_mask])
    utterance_mask = utterance_mask.astype(bool)
    if self.utterance_encoding == "separate":
      action_features = self.encode(utterance, utterance_mask)
    else:
      tokens = jnp.concatenate([dialogue, utterance.astype(dialogue.dtype)], axis=1)
      valid = jnp.concatenate([dialogue != self.pad_token, utterance_mask], axis=1)
      action_features = self.encode(tokens, valid)
    return self.q_heads(jnp.concatenate([state_features, action_features], axis=-1))

  def __call__(
    self, dialogue: Array, utterance: Array, utterance_mask: Optional[Array] = None
  ) -> CriticOutput:
    """Q_e(s, a) and V_e(s), each float32 `[E, B]`.

    Args:
      dialogue: int `[B, T]` dialogue s (PAD-padded).
      utterance: int `[B, L]` candidate utterance a.
      utterance_mask: bool `[B, L]`, the utterance tokens the critic reads (default: non-PAD).
        Pass `token_game.utterance_token_mask` (vmapped) to read exactly what the game reads.
    """
    state_features = self._dialogue_features(dialogue)
    return CriticOutput(
      q=self._q(dialogue, state_features, utterance, utterance_mask), v=self.v_heads(state_features)
    )

  def q_values(
    self, dialogue: Array, utterance: Array, utterance_mask: Optional[Array] = None
  ) -> Array:
    """Q_e(s, a) float32 `[E, B]` (arguments as in `__call__`)."""
    return self._q(dialogue, self._dialogue_features(dialogue), utterance, utterance_mask)

  def values(self, dialogue: Array) -> Array:
    """V_e(s) float32 `[E, B]` of dialogues int `[B, T]`."""
    return self.v_heads(self._dialogue_features(dialogue))


class FeatureCritic(nn.Module):
  """Twin Q(s, a) and V(s) heads on features of a frozen pretrained trunk (ArCHer's critic is a
  pretrained language model with value heads: Zhou et al., arXiv 2402.19446).

  Per-batch. `h_s` are the trunk's features of the state's text and `h_sa` those of the state's
  text followed by the utterance's (last token of each, `llama.hidden_states`); both pass one
  shared LayerNorm (a language model's residual stream is far from unit scale), then
  `Q_e = MLP_e([h_s; h_sa])` and `V_e = MLP'_e(h_s)`, ensemble-first `[E, B]` as
  `hrljax.losses.hierarchical_critics` expects. The trunk is not part of this module: its
  features are computed once per transition and only the heads train.

  Attributes:
    head_hidden_sizes: hidden widths of every head MLP.
    num_critics: ensemble size E (ArCHer: 2).
  """

  head_hidden_sizes: Sequence[int] = (64, 64)
  num_critics: int = 2

  def setup(self):
    _check_positive_int("num_critics", self.num_critics)
    self.norm = nn.LayerNorm()
    self.q_heads = _ensemble(self.head_hidden_sizes, self.num_critics)
    self.v_heads = _ensemble(self.head_hidden_sizes, self.num_critics)

  def __call__(self, state_features: Array, state_action_features: Array) -> CriticOutput:
    """Q_e(s, a) and V_e(s), each float32 `[E, B]`, of features float `[B, F]`."""
    chex.assert_rank([state_features, state_action_features], 2)
    chex.assert_equal_shape([state_features, state_action_features])
    return CriticOutput(
      q=self.q_values(state_features, state_action_features), v=self.values(state_features)
    )

  def q_values(self, state_features: Array, state_action_features: Array) -> Array:
    """Q_e(s, a) float32 `[E, B]`."""
    joint = jnp.concatenate([self.norm(state_features), self.norm(state_action_features)], -1)
    return self.q_heads(joint)

  def values(self, state_features: Array) -> Array:
    """V_e(s) float32 `[E, B]`."""
    return self.v_heads(self.norm(state_features))


class FeatureValue(nn.Module):
  """A value head V(s) on features of a frozen pretrained trunk: LayerNorm (a language model's
  residual stream is far from unit scale), then an MLP with ReLU and a scalar output. Any
  leading shape: features `[..., F]` give values float32 `[...]` (e.g. one value per token
  state of a response, the value function of token-level PPO on a language model)."""

  head_hidden_sizes: Sequence[int] = (64, 64)

  @nn.compact
  def __call__(self, features: Array) -> Array:
    return _ScalarMLP(tuple(self.head_hidden_sizes))(nn.LayerNorm()(features))


def critic_params_from_policy(critic_params, policy_params):
  """`critic_params` of an `UtteranceCritic` with the encoder replaced by a copy of the trunk of
  a `CausalTransformer`'s `policy_params` (the heads stay as initialised).

  ArCHer's critic is a pretrained language model (RoBERTa) fine-tuned with the TD loss; with no
  pretrained model at hand, a trained token policy's trunk, which already reads dialogues, is the
  closest start. The critic needs `causal=True` and the policy's `d_model`, `num_layers` and
  `num_heads` for the trunk to mean the same there. The policy may have more position embeddings
  than the critic (it also predicts the token after a full utterance); the extra rows are
  dropped.
  """
  encoder = critic_params["params"]["encoder"]
  trunk = policy_params["params"]["trunk"]
  if jax.tree.structure(encoder) != jax.tree.structure(trunk):
    raise ValueError(
      "policy_params: the policy's trunk and the critic's encoder differ in "
      "structure (expected the same d_model, num_layers and num_heads)"
    )

  def copy(target, source):
    if target.shape == source.shape:
      return source
    if target.shape[1:] == source.shape[1:] and target.shape[0] <= source.shape[0]:
      return source[: target.shape[0]]  # position embeddings: the critic needs fewer
    raise ValueError(
      f"policy_params: a trunk parameter of shape {source.shape} cannot start a "
      f"critic encoder parameter of shape {target.shape}"
    )

  params = dict(critic_params["params"])
  params["encoder"] = jax.tree.map(copy, encoder, trunk)
  return {**critic_params, "params": params}


class TokenValueNetwork(nn.Module):
  """V(dialogue, a_<j) for every token j of an utterance, `[B, L]`, in one causal pass.

  The value function of flat token-level PPO, the on-policy baseline of ArCHer (Zhou et al.,
  arXiv 2402.19446): a `CausalTransformer` of its own whose per-position outputs (the width of
  its output layer is the vocabulary size; they are features here, not logits) a linear layer
  maps to a scalar. It is separate from the policy so that the value loss cannot disturb a
  pretrained policy. Per-batch; initialised with `network.init(key, dialogue, utterance)`.
  """

  vocab_size: int
  d_model: int
  num_layers: int
  num_heads: int
  max_len: int
  pad_token: int = 0

  def setup(self):
    self.body = CausalTransformer(
      vocab_size=self.vocab_size,
      d_model=self.d_model,
      num_layers=self.num_layers,
      num_heads=self.num_heads,
      max_len=self.max_len,
      pad_token=self.pad_token,
    )
    self.head = nn.Dense(1)

  def __call__(self, dialogue: Array, utterance: Array) -> Array:
    """V before each token of `utterance` int `[B, L]` after `dialogue` int `[B, D]`: `[B, L]`."""
    features = self.body.utterance_logits(dialogue, utterance)
    return self.head(features)[..., 0]
