"""Tests for hrljax.networks.llama and hrljax.llm_weights (SmolLM2-135M-Instruct from its GGUF)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import llm_weights
from hrljax.networks import llama

TINY = llama.smollm2_config(
  num_layers=2, vocab_size=61, dim=24, num_heads=4, num_kv_heads=2, hidden_dim=40, max_seq_len=32
)


def load_smollm2(num_layers=None, dtype=jnp.float32):
  """SmolLM2's `LlamaConfig` and weights (the loader returns the config's fields)."""
  fields, params = llm_weights.load_smollm2(num_layers=num_layers, dtype=dtype)
  return llama.LlamaConfig(**fields, dtype=dtype), params


@pytest.fixture(scope="module")
def tiny_params():
  return llama.init_params(TINY, jax.random.key(0))


@pytest.fixture(scope="module")
def smollm2():
  """The full 30-layer model, loaded once for the module."""
  return load_smollm2()


@pytest.fixture(scope="module")
def tokenizer():
  return llm_weights.load_tokenizer()


# Eager calls would trace and compile the layer scan anew each time: compile once per shape.
_forward = jax.jit(llama.forward, static_argnames=("config", "use_lora", "last_only"))
_token_logprobs = jax.jit(llama.token_logprobs, static_argnames=("config", "use_lora"))


def _logits(config, params, tokens, mask, lora=None):
  logits, _ = _forward(config, params, lora, tokens, llama.positions_from_mask(mask), mask)
  return np.asarray(logits)


# ---------------------------------------------------------------------------------------------
# The pretrained model.


def test_greedy_answer_to_capital_of_france(smollm2, tokenizer):
  config, params = smollm2
  ids = llm_weights.chat_prompt(tokenizer, "What is the capital of France?")
  prompt = jnp.asarray([ids], jnp.int32)
  out = llama.generate(
    config,
    params,
    None,
    prompt,
    jnp.ones(prompt.shape, bool),
    jax.random.key(0),
    12,
    greedy=True,
    eos_id=llm_weights.EOS_ID,
    pad_id=llm_weights.PAD_ID,
  )
  tokens, mask = np.asarray(out.tokens[0]), np.asarray(out.mask[0])
  answer = tokenizer.decode(tokens[mask].tolist(), skip_special_tokens=True)
  assert "Paris" in answer, answer
  # The instruct model ends its answer with <|im_end|>; nothing is emitted after it.
  assert llm_weights.EOS_ID in tokens[mask].tolist()
  end = int(np.argmax(tokens == llm_weights.EOS_ID))
  assert mask[: end + 1].all() and not mask[end + 1 :].any()
  assert (tokens[end + 1 :] == llm_weights.PAD_ID).all()
  assert np.all(np.asarray(out.logprobs[0])[mask] <= 0.0)


def test_full_model_logits_match_transformers(smollm2):
  """Top-5 next-token logits after "The capital of France is" (ids 504 3575 282 4649 314).

  Reference values from Hugging Face transformers 5.23.0 on torch 2.13.0 (CPU, float32), reading
  the same GGUF (`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`, which undoes
  llama.cpp's Q/K permutation and applies `rotate_half` RoPE), printed by hand with
  `model(ids).logits[0, -1].topk(5)`: an independent implementation of the RoPE layout.
  """
  config, params = smollm2
  tokens = jnp.asarray([[504, 3575, 282, 4649, 314]], jnp.int32)
  logits = _logits(config, params, tokens, jnp.ones(tokens.shape, bool))[0, -1]
  top = np.argsort(-logits)[:5]
  assert top.tolist() == [7042, 260, 4528, 2250, 1315]  # 7042 = " Paris"
  np.testing.assert_allclose(logits[top], [17.3713, 14.8886, 13.2450, 13.0095, 12.9515], atol=2e-3)


def _numpy_llama(file, config, tokens):
  """Independent float64 forward pass from the raw GGUF tensors (`[out, in]` matrices).

  RoPE by complex multiplication of adjacent pairs, attention head by head.
  """

  def weight(name):
    return np.asarray(file.tensor(name), np.float64)

  def rms(x, scale):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + config.norm_eps) * scale

  length, head_dim = len(tokens), config.head_dim
  freqs = config.rope_theta ** (-np.arange(0, head_dim, 2) / head_dim)
  rotation = np.exp(1j * np.arange(length)[:, None] * freqs[None, :])  # [T, D/2]

  def rope(x):  # [T, H, D]
    pairs = (x[..., 0::2] + 1j * x[..., 1::2]) * rotation[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = pairs.real, pairs.imag
    return out

  embedding = weight("token_embd.weight")
  x = embedding[np.asarray(tokens)]
  future = np.triu(np.ones((length, length), bool), k=1)
  group = config.num_heads // config.num_kv_heads
  for i in range(config.num_layers):
    w = lambda n: weight(f"blk.{i}.{n}.weight")  # noqa: E731
    h = rms(x, w("attn_norm"))
    q = rope((h @ w("attn_q").T).reshape(length, config.num_heads, head_dim))
    k = rope((h @ w("attn_k").T).reshape(length, config.num_kv_heads, head_dim))
    v = (h @ w("attn_v").T).reshape(length, config.num_kv_heads, head_dim)
    heads = []
    for head in range(config.num_heads):
      scores = q[:, head] @ k[:, head // group].T / math.sqrt(head_dim)
      scores[future] = -np.inf
      probs = np.exp(scores - scores.max(axis=1, keepdims=True))
      probs /= probs.sum(axis=1, keepdims=True)
      heads.append(probs @ v[:, head // group])
    x = x + np.concatenate(heads, axis=1) @ w("attn_output").T
    h = rms(x, w("ffn_norm"))
    gate, up = h @ w("ffn_gate").T, h @ w("ffn_up").T
    x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w("ffn_down").T
  return rms(x, weight("output_norm.weight")) @ embedding.T


def test_logits_match_float64_numpy_forward(tokenizer):
  config, params = load_smollm2(num_layers=2)
  tokens = tokenizer.encode("The capital of France is").ids
  assert len(tokens) == 5
  expected = _numpy_llama(llm_weights._open(llm_weights.find_gguf_path()), config, tokens)
  mask = jnp.ones((1, len(tokens)), bool)
  got = _logits(config, params, jnp.asarray([tokens], jnp.int32), mask)[0]
  scale = np.abs(expected).max()
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)


def test_config_fields_of_the_gguf_are_smollm2_config():
  assert llama.LlamaConfig(**llm_weights.config_fields()) == llama.smollm2_config()
  assert llama.LlamaConfig(**llm_weights.config_fields(num_layers=2)) == llama.smollm2_config(
    num_layers=2
  )


def test_bfloat16_model_close_to_float32():
  config, params = load_smollm2(num_layers=2)
  config16, params16 = load_smollm2(num_layers=2, dtype=jnp.bfloat16)
  assert config16.dtype == jnp.bfloat16
  assert params16["layers"]["wq"]["kernel"].dtype == jnp.bfloat16
  tokens = jnp.asarray([[504, 3575, 282, 4649, 314]], jnp.int32)
  mask = jnp.ones(tokens.shape, bool)
  full, half = _logits(config, params, tokens, mask), _logits(config16, params16, tokens, mask)
  assert half.dtype == np.float32
  # bfloat16 keeps 8 bits of mantissa: agreement to a few percent of the logit range.
  assert np.abs(full - half).max() < 0.05 * np.abs(full).max()
  assert (full.argmax(-1) == half.argmax(-1)).mean() >= 0.8


# ---------------------------------------------------------------------------------------------
# Tokenizer and chat template.


@pytest.mark.parametrize(
  "text",
  [
    "What is the capital of France?",
    "  leading spaces, tabs\tand\nnewlines  ",
    "digits 1234567 and 3.14159; émigré naïve — ünïcödé 東京 🙂",
  ],
)
def test_tokenizer_round_trips_text(tokenizer, text):
  ids = tokenizer.encode(text, add_special_tokens=False).ids
  assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_tokenizer_splits_digits_and_knows_special_tokens(tokenizer):
  assert len(tokenizer.encode("2024", add_special_tokens=False).ids) == 4  # single digits
  assert tokenizer.token_to_id("<|im_start|>") == llm_weights.BOS_ID == 1
  assert tokenizer.token_to_id("<|im_end|>") == llm_weights.EOS_ID == 2
  assert tokenizer.encode("<|im_start|>user", add_special_tokens=False).ids[0] == 1
  assert tokenizer.decode([2, 1], skip_special_tokens=True) == ""


def test_chat_prompt_follows_the_gguf_template(tokenizer):
  template = llm_weights.chat_template()
  assert "<|im_start|>" in template and "add_generation_prompt" in template
  system = llm_weights.default_system_prompt()
  assert system == "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
  ids = llm_weights.chat_prompt(tokenizer, "Hi there")
  expected = (
    "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\nHi there"
    "<|im_end|>\n<|im_start|>assistant\n"
  )
  assert tokenizer.decode(ids, skip_special_tokens=False) == expected
  assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2
  custom = llm_weights.chat_prompt(tokenizer, "Hi", system="Be brief.")
  assert tokenizer.decode(custom, skip_special_tokens=False) == (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    "<|im_start|>assistant\n"
  )
  with pytest.raises(ValueError, match="messages"):
    llm_weights.render_chat([])


# ---------------------------------------------------------------------------------------------
# Cache, padding and sampling on a tiny random model.


def test_kv_cache_decoding_equals_full_forward(tiny_params):
  tokens = jax.random.randint(jax.random.key(1), (2, 9), 0, TINY.vocab_size, jnp.int32)
  mask = jnp.ones(tokens.shape, bool)
  full = _logits(TINY, tiny_params, tokens, mask)
  cache = llama.init_cache(TINY, 2, 12)
  prefix = 4
  logits, cache = _forward(
    TINY,
    tiny_params,
    None,
    tokens[:, :prefix],
    llama.positions_from_mask(mask[:, :prefix]),
    mask[:, :prefix],
    cache,
  )
  np.testing.assert_allclose(np.asarray(logits), full[:, :prefix], rtol=1e-5, atol=1e-5)
  for t in range(prefix, 9):
    logits, cache = _forward(
      TINY,
      tiny_params,
      None,
      tokens[:, t : t + 1],
      jnp.full((2, 1), t, jnp.int32),
      mask[:, t : t + 1],
      cache,
      last_only=True,
    )
    np.testing.assert_allclose(np.asarray(logits[:, 0]), full[:, t], rtol=1e-5, atol=1e-5)
  assert int(cache.length) == 9
  assert np.asarray(cache.valid).sum(axis=1).tolist() == [9, 9]


def test_left_padding_does_not_change_logits(tiny_params):
  tokens = jax.random.randint(jax.random.key(2), (1, 6), 0, TINY.vocab_size, jnp.int32)
  plain = _logits(TINY, tiny_params, tokens, jnp.ones(tokens.shape, bool))
  padded = jnp.concatenate([jnp.full((1, 3), 7, jnp.int32), tokens], axis=1)
  mask = jnp.arange(9)[None, :] >= 3
  got = _logits(TINY, tiny_params, padded, mask)
  np.testing.assert_allclose(got[:, 3:], plain, rtol=1e-5, atol=1e-5)
  assert np.isfinite(got).all()


def test_hidden_states_are_the_residual_stream_the_logits_read(tiny_params):
  """All layers, then the final norm and the tied embedding, give `forward`'s logits (left
  padding included)."""
  tokens = jax.random.randint(jax.random.key(3), (2, 7), 0, TINY.vocab_size, jnp.int32)
  mask = jnp.arange(7)[None, :] >= jnp.array([[0], [2]])
  hidden = jax.jit(llama.hidden_states, static_argnums=(0, 4))(
    TINY, tiny_params, tokens, mask, TINY.num_layers
  )
  h = np.asarray(hidden, np.float64)
  norm = (
    np.asarray(tiny_params["norm"]["scale"])
    * h
    / np.sqrt(np.mean(h**2, axis=-1, keepdims=True) + TINY.norm_eps)
  )
  logits = norm @ np.asarray(tiny_params["embed"]["embedding"], np.float64).T
  expected = _logits(TINY, tiny_params, tokens, mask)
  np.testing.assert_allclose(
    np.where(mask[..., None], logits, 0),
    np.where(mask[..., None], expected, 0),
    rtol=1e-4,
    atol=1e-4,
  )
  first = llama.first_layers(tiny_params, 1)  # the weights of the one-layer model
  assert jax.tree.leaves(first["layers"])[0].shape[0] == 1
  assert jax.tree.structure(first) == jax.tree.structure(tiny_params)
  with pytest.raises(ValueError, match="num_layers"):
    llama.first_layers(tiny_params, 3)


def _prompt(seed):
  """A [2, 6] prompt; the generate tests share its shape (and N = 5) to share compiles."""
  return jax.random.randint(jax.random.key(seed), (2, 6), 0, TINY.vocab_size, jnp.int32)


def test_generate_left_padded_row_matches_unpadded_prompt(tiny_params):
  long = _prompt(3)
  short = long[:, 3:]
  batch = jnp.concatenate(
    [long[:1], jnp.concatenate([jnp.zeros((1, 3), jnp.int32), short[1:]], axis=1)]
  )
  mask = jnp.stack([jnp.ones(6, bool), jnp.arange(6) >= 3])
  kwargs = dict(greedy=True, eos_id=None, pad_id=0)
  both = llama.generate(TINY, tiny_params, None, batch, mask, jax.random.key(0), 5, **kwargs)
  alone = llama.generate(
    TINY, tiny_params, None, short, jnp.ones(short.shape, bool), jax.random.key(0), 5, **kwargs
  )
  np.testing.assert_array_equal(np.asarray(both.tokens[1]), np.asarray(alone.tokens[1]))
  np.testing.assert_allclose(
    np.asarray(both.logprobs[1]), np.asarray(alone.logprobs[1]), rtol=1e-5, atol=1e-5
  )
  assert np.asarray(both.mask).all()


def test_generate_logprobs_equal_teacher_forced_and_key_determinism(tiny_params):
  prompt = _prompt(4)
  prompt_mask = jnp.ones(prompt.shape, bool).at[0, :2].set(False)
  for temperature in (1.0, 0.7):
    out = llama.generate(
      TINY,
      tiny_params,
      None,
      prompt,
      prompt_mask,
      jax.random.key(5),
      5,
      temperature=temperature,
      eos_id=None,
      pad_id=0,
    )
    tokens = jnp.concatenate([prompt, out.tokens], axis=1)
    mask = jnp.concatenate([prompt_mask, out.mask], axis=1)
    teacher = _token_logprobs(TINY, tiny_params, None, tokens, mask, temperature=temperature)
    np.testing.assert_allclose(
      np.asarray(teacher[:, 5:]), np.asarray(out.logprobs), rtol=1e-4, atol=1e-5
    )
    assert np.asarray(teacher[0, :2]).tolist() == [0.0, 0.0]  # padding predicts nothing
  again = llama.generate(
    TINY,
    tiny_params,
    None,
    prompt,
    prompt_mask,
    jax.random.key(5),
    5,
    temperature=0.7,
    eos_id=None,
    pad_id=0,
  )
  other = llama.generate(
    TINY,
    tiny_params,
    None,
    prompt,
    prompt_mask,
    jax.random.key(6),
    5,
    temperature=0.7,
    eos_id=None,
    pad_id=0,
  )
  np.testing.assert_array_equal(np.asarray(again.tokens), np.asarray(out.tokens))
  assert not np.array_equal(np.asarray(other.tokens), np.asarray(out.tokens))


def test_generate_with_a_group_size_equals_sampling_the_repeated_prompts(tiny_params):
  """Each prompt prefilled once and sampled K = 3 times: the tokens, masks and sampling
  log-probs of sampling the prompts repeated 3 times with the same key (a left-padded prompt,
  an eos that stops some rows early); a wrong row order (rows of one prompt not adjacent) would
  give other tokens."""
  prompt = _prompt(8)
  mask = jnp.ones(prompt.shape, bool).at[1, :2].set(False)
  # Weights 5x the init's scale: next-token distributions that depend on the prompt.
  params = jax.tree.map(lambda w: 5.0 * w, tiny_params)
  kwargs = dict(temperature=1.0, eos_id=13, pad_id=0)  # row 0 draws 13 as its 4th token
  key = jax.random.key(9)
  grouped = llama.generate(TINY, params, None, prompt, mask, key, 5, group_size=3, **kwargs)
  repeated = llama.generate(
    TINY, params, None, jnp.repeat(prompt, 3, 0), jnp.repeat(mask, 3, 0), key, 5, **kwargs
  )
  assert grouped.tokens.shape == (6, 5)
  np.testing.assert_array_equal(np.asarray(grouped.tokens), np.asarray(repeated.tokens))
  np.testing.assert_array_equal(np.asarray(grouped.mask), np.asarray(repeated.mask))
  assert not np.asarray(grouped.mask).all()
  np.testing.assert_allclose(
    np.asarray(grouped.logprobs), np.asarray(repeated.logprobs), rtol=1e-5, atol=1e-6
  )
  tiled = llama.generate(
    TINY, params, None, jnp.tile(prompt, (3, 1)), jnp.tile(mask, (3, 1)), key, 5, **kwargs
  )
  assert not np.array_equal(np.asarray(grouped.tokens), np.asarray(tiled.tokens))
  with pytest.raises(ValueError, match="group_size: expected an int >= 1, got 0"):
    llama.generate(TINY, params, None, prompt, mask, key, 5, group_size=0, **kwargs)


def test_generate_with_a_common_prefix_equals_sampling_the_whole_prompts(tiny_params):
  """Prompts that begin with the same 3 tokens, then 1 to 3 of their own (left-padded): with
  `prefix_len=3` (that beginning prefilled once) the tokens, masks and log-probs of sampling the
  whole prompts with the same key (2 samples per prompt: both shared beginnings at once); a
  prefix length the prompts do not share gives other samples."""
  common = _prompt(10)[0, :3]
  own = _prompt(11)[:, :3]
  prompt = jnp.stack(
    [
      jnp.concatenate([common, own[0]]),
      jnp.concatenate([jnp.zeros(2, jnp.int32), common, own[1, :1]]),
    ]
  )
  mask = jnp.stack([jnp.ones(6, bool), jnp.arange(6) >= 2])
  params = jax.tree.map(lambda w: 5.0 * w, tiny_params)
  key = jax.random.key(4)
  kwargs = {"temperature": 1.0, "eos_id": None, "pad_id": 0, "group_size": 2}
  whole = llama.generate(TINY, params, None, prompt, mask, key, 5, **kwargs)
  shared = llama.generate(TINY, params, None, prompt, mask, key, 5, prefix_len=3, **kwargs)
  np.testing.assert_array_equal(np.asarray(shared.tokens), np.asarray(whole.tokens))
  np.testing.assert_array_equal(np.asarray(shared.mask), np.asarray(whole.mask))
  np.testing.assert_allclose(
    np.asarray(shared.logprobs), np.asarray(whole.logprobs), rtol=1e-5, atol=1e-5
  )
  wrong = llama.generate(TINY, params, None, prompt, mask, key, 5, prefix_len=4, **kwargs)
  assert not np.allclose(np.asarray(wrong.logprobs), np.asarray(whole.logprobs), atol=1e-3)
  with pytest.raises(ValueError, match=r"prefix_len: expected an int in \[0, 6\), got 6"):
    llama.generate(TINY, params, None, prompt, mask, key, 5, prefix_len=6, **kwargs)


def test_generate_stops_at_eos_and_pads(tiny_params):
  prompt = _prompt(6)
  mask = jnp.ones(prompt.shape, bool)
  free = llama.generate(
    TINY, tiny_params, None, prompt, mask, jax.random.key(0), 5, greedy=True, eos_id=None, pad_id=0
  )
  eos = int(free.tokens[0, 1])  # row 0 emits it second; make it the stop token
  out = llama.generate(
    TINY, tiny_params, None, prompt, mask, jax.random.key(0), 5, greedy=True, eos_id=eos, pad_id=5
  )
  tokens, out_mask = np.asarray(out.tokens), np.asarray(out.mask)
  first = int(np.argmax(np.asarray(free.tokens[0]) == eos))
  np.testing.assert_array_equal(tokens[0, : first + 1], np.asarray(free.tokens[0, : first + 1]))
  assert out_mask[0].tolist() == [True] * (first + 1) + [False] * (4 - first)
  assert (tokens[0, first + 1 :] == 5).all() and (
    np.asarray(out.logprobs)[0, first + 1 :] == 0
  ).all()
  # Greedy log-probs are the log-softmax of the teacher-forced logits at the chosen tokens.
  logits = _logits(TINY, tiny_params, prompt, mask)[:, -1].astype(np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  picked = log_softmax[np.arange(2), tokens[:, 0]]
  np.testing.assert_allclose(np.asarray(out.logprobs[:, 0]), picked, rtol=1e-5, atol=1e-5)


def test_token_logprobs_masking_and_grad_wrt_params(tiny_params):
  tokens = jax.random.randint(jax.random.key(7), (2, 6), 0, TINY.vocab_size, jnp.int32)
  mask = jnp.ones(tokens.shape, bool).at[1, 4:].set(False)
  logprobs = np.asarray(_token_logprobs(TINY, tiny_params, None, tokens, mask))
  assert logprobs.shape == (2, 5) and logprobs.dtype == np.float32
  assert logprobs[1, 3:].tolist() == [0.0, 0.0] and (logprobs[:, :3] < 0).all()
  logits = _logits(TINY, tiny_params, tokens, mask)[0].astype(np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  expected = (shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)))[
    np.arange(5), np.asarray(tokens[0, 1:])
  ]
  np.testing.assert_allclose(logprobs[0], expected, rtol=1e-5, atol=1e-5)
  loss = lambda p: llama.token_logprobs(TINY, p, None, tokens, mask).sum()  # noqa: E731
  grads = jax.jit(jax.grad(loss))(tiny_params)
  assert float(jnp.abs(grads["layers"]["wq"]["kernel"]).sum()) > 0.0


def test_positions_from_mask_counts_real_tokens():
  mask = jnp.asarray([[False, False, True, True, True], [True, True, True, True, True]])
  assert np.asarray(llama.positions_from_mask(mask)).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_rope_rotates_adjacent_pairs():
  x = jnp.arange(8, dtype=jnp.float32).reshape(1, 1, 1, 8)
  out = np.asarray(llama.apply_rope(x, jnp.full((1, 1), 3, jnp.int32), 10000.0))[0, 0, 0]
  for i in range(4):
    angle = 3 * 10000.0 ** (-2 * i / 8)
    a, b = 2.0 * i, 2.0 * i + 1
    np.testing.assert_allclose(
      out[2 * i : 2 * i + 2],
      [a * math.cos(angle) - b * math.sin(angle), a * math.sin(angle) + b * math.cos(angle)],
      rtol=1e-5,
      atol=1e-5,
    )


# ---------------------------------------------------------------------------------------------
# Bad input.


def test_bad_inputs_raise_value_errors(tiny_params):
  ok = jnp.ones((1, 4), jnp.int32)
  mask = jnp.ones((1, 4), bool)
  pos = llama.positions_from_mask(mask)
  fwd = lambda *a, **k: llama.forward(TINY, tiny_params, None, *a, **k)  # noqa: E731
  with pytest.raises(ValueError, match="tokens: expected an integer dtype"):
    fwd(ok.astype(jnp.float32), pos, mask)
  with pytest.raises(ValueError, match=r"tokens: expected rank 2"):
    fwd(ok[0], pos[0], mask[0])
  with pytest.raises(ValueError, match="attn_mask: expected dtype bool"):
    fwd(ok, pos, mask.astype(jnp.int32))
  with pytest.raises(ValueError, match="positions"):
    fwd(ok, pos[:, :2], mask)
  long = jnp.ones((1, TINY.max_seq_len + 1), jnp.int32)
  with pytest.raises(ValueError, match="max_seq_len"):
    fwd(long, long, jnp.ones(long.shape, bool))
  with pytest.raises(ValueError, match="cache"):
    fwd(ok, pos, mask, llama.init_cache(TINY, 2, 8))

  def gen(prompt, prompt_mask, n, **kwargs):
    return llama.generate(
      TINY,
      tiny_params,
      None,
      prompt,
      prompt_mask,
      jax.random.key(0),
      n,
      **{"eos_id": 1, "pad_id": 0, **kwargs},
    )

  with pytest.raises(ValueError, match="exceeds config.max_seq_len"):
    gen(ok, mask, TINY.max_seq_len - 3)
  with pytest.raises(ValueError, match="max_new_tokens"):
    gen(ok, mask, 0)
  with pytest.raises(ValueError, match="prompt_mask: expected shape"):
    gen(ok, mask[:, :3], 2)
  with pytest.raises(ValueError, match="temperature"):
    gen(ok, mask, 2, temperature=0.0)
  with pytest.raises(ValueError, match="eos_id"):
    gen(ok, mask, 2, eos_id=TINY.vocab_size)
  with pytest.raises(ValueError, match="tokens: expected at least 2"):
    llama.token_logprobs(TINY, tiny_params, None, ok[:, :1], mask[:, :1])
  with pytest.raises(ValueError, match="max_len"):
    llama.init_cache(TINY, 1, TINY.max_seq_len + 1)


@pytest.mark.parametrize(
  "overrides, match",
  [
    (dict(dim=30, num_heads=4), "dim: expected a multiple"),
    (dict(num_kv_heads=4, num_heads=6, dim=24), "num_kv_heads"),
    (dict(num_layers=0), "num_layers"),
    (dict(rope_theta=-1.0), "rope_theta"),
    (dict(lora_rank=-1), "lora_rank"),
    (dict(dtype=jnp.float16), "dtype"),
  ],
)
def test_bad_config_raises(overrides, match):
  with pytest.raises(ValueError, match=match):
    llama.smollm2_config(**overrides)


def test_bad_num_layers_for_loader():
  with pytest.raises(ValueError, match="num_layers"):
    llm_weights.load_smollm2(num_layers=31)
