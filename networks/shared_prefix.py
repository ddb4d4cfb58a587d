"""The shared-prefix forward of Prefix Grouper: each of G prompts runs once for its K responses.

Liu et al., "Prefix Grouper: Efficient GRPO Training through Shared-Prefix Forward",
arXiv 2506.05433. In GRPO every prompt is sampled K times; the training forward on the K
concatenated [prompt; response] rows passes the prompt through the model K times. Here the G
prompts go through `hrljax.networks.llama` once (the prefill of `llama.generate`, whose cache
path is differentiable), and the G*K responses attend to their prompt's cached keys/values and
their own causal keys/values. Log-probs and gradients equal those of the repeated forward up to
float32 rounding (tests/networks/test_shared_prefix.py).
"""

import math
from typing import Optional, Tuple

import jax
import jax.numpy as jnp

from hrljax.networks import llama

Array = jax.Array
PyTree = llama.PyTree


def _prefix_cache(
  config: llama.LlamaConfig,
  params: PyTree,
  lora: Optional[PyTree],
  prefix_tokens: Array,
  prefix_mask: Array,
  use_lora: bool,
) -> Tuple[Array, llama.KVCache]:
  """One forward pass of the `G` distinct prefixes: the logits of their last slot `[G, V]` and
  every layer's keys/values `[L, G, P, K, D]` (after RoPE), as a filled `llama.KVCache`.

  The prefill of `generate`: a cache of exactly `P` slots keeps the keys/values of the whole
  prefix, and the cache path is differentiable, so gradients reach the prefix's projections."""
  batch, prefix_len = prefix_tokens.shape
  cache = llama.init_cache(config, batch, prefix_len, dtype=config.dtype)
  logits, cache = llama.forward(
    config,
    params,
    lora,
    prefix_tokens.astype(jnp.int32),
    llama.positions_from_mask(prefix_mask),
    prefix_mask,
    cache,
    use_lora=use_lora,
    last_only=True,
  )
  return logits[:, 0], cache


def _grouped_cache(cache: llama.KVCache, group_size: int, suffix_len: int) -> llama.KVCache:
  """Each group's prefix cache repeated for its `group_size` rows (row i reads group
  i // group_size), with `suffix_len` empty slots after the prefix for the suffix to fill.

  Only the keys/values are repeated, not the prefix's computation: the suffix's attention to
  the prefix is per row anyway (the Prefix Grouper's attention split)."""

  cache = llama.repeat_cache(cache, group_size)

  def with_slots(array: Array, slot_axis: int) -> Array:  # the suffix's slots, not yet written
    pad = [(0, 0)] * array.ndim
    pad[slot_axis] = (0, suffix_len)
    return jnp.pad(array, pad)

  return cache._replace(
    keys=with_slots(cache.keys, 2),
    values=with_slots(cache.values, 2),
    valid=with_slots(cache.valid, 1),
  )


def _suffix_positions(prefix_mask: Array, suffix_mask: Array, group_size: int) -> Array:
  """The suffix's RoPE positions `[G*K, N]`: `positions_from_mask` of the concatenated
  `[prefix; suffix]` row, sliced to the suffix (so they continue from the prefix's real
  length, whatever its left padding)."""
  full_mask = jnp.concatenate([jnp.repeat(prefix_mask, group_size, axis=0), suffix_mask], axis=1)
  return llama.positions_from_mask(full_mask)[:, prefix_mask.shape[1] :]


def _check_shared_prefix_inputs(
  config: llama.LlamaConfig, prefix_tokens, prefix_mask, suffix_tokens, suffix_mask
) -> int:
  """Validates the shapes of `shared_prefix_logprobs`' inputs; returns the group size K."""
  llama.check_int_tokens("prefix_tokens", prefix_tokens)
  llama.check_mask("prefix_mask", prefix_mask, prefix_tokens.shape)
  llama.check_int_tokens("suffix_tokens", suffix_tokens)
  llama.check_mask("suffix_mask", suffix_mask, suffix_tokens.shape)
  num_groups, prefix_len = prefix_tokens.shape
  rows, suffix_len = suffix_tokens.shape
  if rows % num_groups:
    raise ValueError(
      f"suffix_tokens: expected G*K rows, a multiple of the G={num_groups} prefixes "
      f"(rows grouped by prefix, row i of group i // K), got {rows}"
    )
  if prefix_len + suffix_len > config.max_seq_len:
    raise ValueError(
      f"suffix_tokens: prefix length {prefix_len} + suffix length {suffix_len} exceeds "
      f"config.max_seq_len={config.max_seq_len}"
    )
  return rows // num_groups


def shared_prefix_logprobs(
  config: llama.LlamaConfig,
  params: PyTree,
  lora: Optional[PyTree],
  prefix_tokens: Array,
  prefix_mask: Array,
  suffix_tokens: Array,
  suffix_mask: Array,
  *,
  use_lora: bool = True,
  temperature=1.0,
) -> Array:
  """Log-probs of `K` suffixes per prefix with each prefix run once, float32 `[G*K, N]`.

  Shared-prefix forward of Prefix Grouper (Liu et al., "Prefix Grouper: Efficient GRPO Training
  through Shared-Prefix Forward", arXiv 2506.05433): the `G` prefixes (GRPO's prompts) go
  through the layers once, and the `G*K` suffixes (their sampled responses) then attend to
  `[their prefix's keys/values; their own causal keys/values]` (the prefix's cache repeated `K`
  times). Outputs and gradients equal those of `token_logprobs` on the repeated concatenated
  rows `[prefix_tokens[i // K]; suffix_tokens[i]]` (up to float32 rounding), while the prefix's
  projections and feed-forward cost `G` rows instead of `G*K`.

  Entry `j` of row `i` is `log pi(suffix_tokens[i, j] | prefix, suffix_tokens[i, :j])` under
  `softmax(logits / temperature)`: the slice of `token_logprobs` of the concatenated row to the
  suffix's `N` targets, with its masking (0 unless the target and the slot before it are real;
  the first target is predicted from the prefix's last slot). Differentiable with respect to
  `lora` and `params`.

  Args:
    config, params, lora: the model; `lora=None` or `use_lora=False` gives the reference policy.
    prefix_tokens: int `[G, P]`, LEFT-padded (every prefix ends at column `P - 1`).
    prefix_mask: bool `[G, P]`, False on the padding.
    suffix_tokens: int `[G*K, N]`, rows grouped by prefix (row `i` continues prefix `i // K`),
      RIGHT-padded.
    suffix_mask: bool `[G*K, N]`, False on the padding.
    use_lora: as in `token_logprobs`.
    temperature: > 0; divides the logits (the sampling temperature, as `token_logprobs`).

  Returns:
    float32 `[G*K, N]`, 0 off the mask.
  """
  group_size = _check_shared_prefix_inputs(
    config, prefix_tokens, prefix_mask, suffix_tokens, suffix_mask
  )
  if isinstance(temperature, (int, float)) and not (0 < temperature < math.inf):
    raise ValueError(f"temperature: expected a finite float > 0, got {temperature!r}")
  suffix_len = suffix_tokens.shape[1]
  last_logits, cache = _prefix_cache(config, params, lora, prefix_tokens, prefix_mask, use_lora)
  # The cache path of `Llama` writes the suffix after the prefix's P slots and masks each query
  # to the valid slots at or before its own: [prefix mask; causal suffix mask].
  suffix_logits, _ = llama.forward(
    config,
    params,
    lora,
    suffix_tokens.astype(jnp.int32),
    _suffix_positions(prefix_mask, suffix_mask, group_size),
    suffix_mask,
    _grouped_cache(cache, group_size, suffix_len),
    use_lora=use_lora,
  )
  # Target j is predicted by the slot before it: the prefix's last slot for j = 0, suffix slot
  # j - 1 otherwise (the suffix's own last slot predicts nothing).
  logits = jnp.concatenate(
    [jnp.repeat(last_logits, group_size, axis=0)[:, None], suffix_logits[:, :-1]], axis=1
  )
  log_probs = jax.nn.log_softmax(logits / temperature, axis=-1)
  picked = jnp.take_along_axis(log_probs, suffix_tokens[:, :, None].astype(jnp.int32), axis=-1)
  previous_real = jnp.concatenate(
    [jnp.repeat(prefix_mask[:, -1:], group_size, axis=0), suffix_mask[:, :-1]], axis=1
  )
  return jnp.where(previous_real & suffix_mask, picked[..., 0], 0.0)


def common_prefix_logprobs(
  config: llama.LlamaConfig,
  params: PyTree,
  lora: Optional[PyTree],
  prompt_tokens: Array,
  prompt_mask: Array,
  response: Array,
  response_mask: Array,
  prefix_len: int,
  *,
  use_lora: bool = True,
  temperature=1.0,
) -> Array:
  """Log-probs of responses to left-padded prompts that all begin with the same `prefix_len`
  tokens, float32 `[B, N]`: `shared_prefix_logprobs` with that prefix run once for every row.

  The prompts of a multi-turn text game share their instructions (chat header, rules, item
  table) and differ in the dialogue after them; here the shared part runs once and each row's
  forward covers the rest of its prompt and its response only. Equal to `token_logprobs` of the
  concatenated rows sliced to the response (up to float32 rounding), provided that every row's
  first `prefix_len` real tokens are row 0's (the caller checks it: the prefix is read from row
  0) and that every prompt has at least one token after them.

  Args:
    config, params, lora: the model; `lora=None` or `use_lora=False` gives the reference policy.
    prompt_tokens: int `[B, P]`, LEFT-padded.
    prompt_mask: bool `[B, P]`, False on the padding.
    response: int `[B, N]`, RIGHT-padded; response_mask: bool `[B, N]`.
    prefix_len: P0, 1 <= P0 < P (static): the length of the shared beginning.
    use_lora, temperature: as in `shared_prefix_logprobs`.
  """
  width = prompt_tokens.shape[1]
  if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or not 0 < prefix_len < width:
    raise ValueError(f"prefix_len: expected an int in [1, {width}), got {prefix_len!r}")
  lengths = jnp.sum(prompt_mask, axis=1, dtype=jnp.int32)
  first = width - lengths[0]  # row 0's first real column
  prefix = jax.lax.dynamic_slice_in_dim(prompt_tokens[0], first, prefix_len)[None]
  # Each row's tokens after the prefix fill the last `rest` columns (right-aligned, as the
  # prompt is left-padded); the columns before them hold padding or prefix tokens: masked.
  rest = width - prefix_len
  rest_mask = jnp.arange(rest)[None, :] >= (rest - (lengths - prefix_len))[:, None]
  logprobs = shared_prefix_logprobs(
    config,
    params,
    lora,
    prefix,
    jnp.ones(prefix.shape, bool),
    jnp.concatenate([prompt_tokens[:, prefix_len:], response], axis=1),
    jnp.concatenate([rest_mask, response_mask], axis=1),
    use_lora=use_lora,
    temperature=temperature,
  )
  return logprobs[:, rest:]
