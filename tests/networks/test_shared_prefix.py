"""Tests for hrljax.networks.shared_prefix.shared_prefix_logprobs (Prefix Grouper, arXiv 2506.05433):
the shared-prefix forward equals `token_logprobs` of the repeated concatenated rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hrljax.networks import llama, shared_prefix

from tests.fast_compile import fast_jit

# The agents' tiny model (tests/agents/tiny_llama.py: width 16, 2 query heads on 1 key/value
# head, LoRA rank 2) with two layers, so that the second layer reads prefix keys/values that the
# prefix pass computed, and a vocabulary of 61 so that its initialisation and output projection
# cost nothing (they are not what is tested).
TINY = llama.LlamaConfig(
  vocab_size=61,
  dim=16,
  num_layers=2,
  num_heads=2,
  num_kv_heads=1,
  hidden_dim=32,
  max_seq_len=32,
  lora_rank=2,
  lora_alpha=4.0,
)
GROUPS, GROUP_SIZE, PREFIX_LEN, SUFFIX_LEN = 2, 3, 7, 5
PREFIX_REAL = (7, 4)  # group 1's prefix is left-padded by 3
SUFFIX_REAL = (5, 2, 4, 1, 5, 3)  # ragged, right-padded


TEMPERATURE = 0.7


def _random_model():
  """Random base weights and adapters (`b` non-zero, so that the adapters matter), filled by
  NumPy on the shapes of `Llama.init`: no initialisation program to compile."""
  shapes = jax.eval_shape(
    lambda key: llama.Llama(TINY).init(key, *llama._dummy_inputs(), None, True), jax.random.key(0)
  )
  rng = np.random.default_rng(0)

  def fill(path, leaf):
    noise = rng.standard_normal(leaf.shape).astype(np.float32)
    is_norm = jax.tree_util.keystr(path).endswith("['scale']")
    return 1.0 + 0.1 * noise if is_norm else 0.3 * noise

  variables = jax.tree_util.tree_map_with_path(fill, shapes)
  return variables["params"], variables[llama.LORA_COLLECTION]


def _batch():
  rng = np.random.default_rng(1)
  prefix = rng.integers(0, TINY.vocab_size, (GROUPS, PREFIX_LEN)).astype(np.int32)
  prefix_mask = np.arange(PREFIX_LEN)[None] >= PREFIX_LEN - np.asarray(PREFIX_REAL)[:, None]
  suffix = rng.integers(0, TINY.vocab_size, (GROUPS * GROUP_SIZE, SUFFIX_LEN)).astype(np.int32)
  suffix_mask = np.arange(SUFFIX_LEN)[None] < np.asarray(SUFFIX_REAL)[:, None]
  prefix, suffix = np.where(prefix_mask, prefix, 0), np.where(suffix_mask, suffix, 0)
  return prefix, prefix_mask, suffix, suffix_mask


def _repeated_logprobs(params, lora, prefix, prefix_mask, suffix, suffix_mask, use_lora=True):
  """`token_logprobs` of `[prefix[i // K]; suffix[i]]`, sliced to the suffix's targets."""
  tokens = jnp.concatenate([jnp.repeat(prefix, GROUP_SIZE, axis=0), suffix], axis=1)
  mask = jnp.concatenate([jnp.repeat(prefix_mask, GROUP_SIZE, axis=0), suffix_mask], axis=1)
  logprobs = llama.token_logprobs(
    TINY, params, lora, tokens, mask, use_lora=use_lora, temperature=TEMPERATURE
  )
  return logprobs[:, PREFIX_LEN - 1 :]


def _shared_logprobs(params, lora, prefix, prefix_mask, suffix, suffix_mask, use_lora=True):
  return shared_prefix.shared_prefix_logprobs(
    TINY,
    params,
    lora,
    prefix,
    prefix_mask,
    suffix,
    suffix_mask,
    use_lora=use_lora,
    temperature=TEMPERATURE,
  )


@fast_jit
def _compare(params, lora, *batch):
  """Both forwards' log-probs and adapter gradients of their masked sum (with the adapters),
  and both forwards' log-probs of the base model (`use_lora=False`), as one program."""

  def results(logprobs_fn):
    def loss(lora):
      logprobs = logprobs_fn(params, lora, *batch)
      return jnp.sum(jnp.where(batch[3], logprobs, 0.0)), logprobs

    (_, logprobs), grads = jax.value_and_grad(loss, has_aux=True)(lora)
    base = logprobs_fn(params, lora, *batch, use_lora=False)
    return {"logprobs": logprobs, "grads": grads, "base": base}

  return results(_shared_logprobs), results(_repeated_logprobs)


@pytest.fixture(scope="module")
def model():
  return _random_model()


@pytest.fixture(scope="module")
def compared(model):
  return jax.device_get(_compare(*model, *_batch()))


def test_shared_prefix_logprobs_equal_the_repeated_forward(compared):
  shared, repeated = compared
  suffix_mask = _batch()[3]
  assert shared["logprobs"].shape == (GROUPS * GROUP_SIZE, SUFFIX_LEN)
  assert np.all(shared["logprobs"][~suffix_mask] == 0.0)
  assert np.all(shared["logprobs"][suffix_mask] < 0.0)
  np.testing.assert_allclose(shared["logprobs"], repeated["logprobs"], atol=1e-5, rtol=0)
  # use_lora=False is the reference policy, and the adapters do change the policy.
  np.testing.assert_allclose(shared["base"], repeated["base"], atol=1e-5, rtol=0)
  assert np.abs(shared["base"] - shared["logprobs"]).max() > 1e-2


def test_shared_prefix_lora_grads_equal_the_repeated_forward(compared):
  shared, repeated = compared
  shared_leaves = jax.tree_util.tree_flatten_with_path(shared["grads"])[0]
  repeated_leaves = jax.tree_util.tree_flatten_with_path(repeated["grads"])[0]
  assert [path for path, _ in shared_leaves] == [path for path, _ in repeated_leaves]
  assert len(shared_leaves) == 2 * len(llama.PROJECTIONS)  # a and b of every projection
  for (path, a), (_, b) in zip(shared_leaves, repeated_leaves):
    name = jax.tree_util.keystr(path)
    assert np.abs(b).max() > 0, name  # every adapter gets a gradient
    # float32 rounding, relative to the leaf's scale: an element summed from many terms that
    # nearly cancel keeps the absolute error of the large ones (measured: 5e-6 at 0.017 in a
    # leaf of magnitude 3.5); a missing or misplaced prefix term moves elements by O(1)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * np.abs(b).max(), err_msg=name)


def test_shared_prefix_logprobs_rejects_hostile_inputs(model):
  params, lora = model
  prefix, prefix_mask, suffix, suffix_mask = _batch()

  def call(temperature=1.0, **changes):
    args = dict(
      prefix_tokens=prefix,
      prefix_mask=prefix_mask,
      suffix_tokens=suffix,
      suffix_mask=suffix_mask,
    )
    args.update(changes)
    shared_prefix.shared_prefix_logprobs(TINY, params, lora, **args, temperature=temperature)

  with pytest.raises(ValueError, match="suffix_tokens: expected G\\*K rows"):
    call(suffix_tokens=suffix[:-1], suffix_mask=suffix_mask[:-1])
  with pytest.raises(ValueError, match="suffix_mask: expected shape"):
    call(suffix_mask=suffix_mask[:-1])
  with pytest.raises(ValueError, match="prefix_mask: expected dtype bool"):
    call(prefix_mask=prefix_mask.astype(np.int32))
  with pytest.raises(ValueError, match="prefix_tokens: expected an integer dtype"):
    call(prefix_tokens=prefix.astype(np.float32))
  with pytest.raises(ValueError, match="suffix_tokens: expected rank 2"):
    call(suffix_tokens=suffix[0])
  with pytest.raises(ValueError, match="max_seq_len"):
    long = np.zeros((GROUPS * GROUP_SIZE, TINY.max_seq_len), np.int32)
    call(suffix_tokens=long, suffix_mask=long == 0)
  with pytest.raises(ValueError, match="temperature"):
    call(temperature=0.0)


# `common_prefix_logprobs`: 3 prompts of width 10 that begin with the same 5 tokens, then 1 to 5
# tokens of their own (left-padded), and ragged responses of up to 4 tokens.
COMMON_LEN, PROMPT_WIDTH, RESPONSE_LEN = 5, 10, 4
REST_REAL, RESPONSE_REAL = (5, 1, 3), (4, 2, 3)


def _common_prefix_batch():
  rng = np.random.default_rng(2)
  common = rng.integers(0, TINY.vocab_size, COMMON_LEN)
  prompts = np.zeros((3, PROMPT_WIDTH), np.int32)
  for row, rest in enumerate(REST_REAL):
    own = rng.integers(0, TINY.vocab_size, rest)
    prompts[row, PROMPT_WIDTH - COMMON_LEN - rest :] = np.concatenate([common, own])
  lengths = COMMON_LEN + np.asarray(REST_REAL)
  prompt_mask = np.arange(PROMPT_WIDTH)[None] >= (PROMPT_WIDTH - lengths)[:, None]
  response = rng.integers(0, TINY.vocab_size, (3, RESPONSE_LEN)).astype(np.int32)
  response_mask = np.arange(RESPONSE_LEN)[None] < np.asarray(RESPONSE_REAL)[:, None]
  return prompts, prompt_mask, np.where(response_mask, response, 0), response_mask


@fast_jit
def _compare_common(params, lora, prompts, prompt_mask, response, response_mask):
  """Log-probs and adapter gradients of the common-prefix forward and of the full rows."""

  def full(lora):
    tokens = jnp.concatenate([prompts, response], axis=1)
    mask = jnp.concatenate([prompt_mask, response_mask], axis=1)
    logprobs = llama.token_logprobs(TINY, params, lora, tokens, mask, temperature=TEMPERATURE)
    return logprobs[:, PROMPT_WIDTH - 1 :]

  def common(lora):
    return shared_prefix.common_prefix_logprobs(
      TINY,
      params,
      lora,
      prompts,
      prompt_mask,
      response,
      response_mask,
      COMMON_LEN,
      temperature=TEMPERATURE,
    )

  def with_grads(logprobs_fn):
    def loss(lora):
      logprobs = logprobs_fn(lora)
      return jnp.sum(jnp.where(response_mask, logprobs, 0.0)), logprobs

    (_, logprobs), grads = jax.value_and_grad(loss, has_aux=True)(lora)
    return logprobs, grads

  return with_grads(common), with_grads(full)


def test_common_prefix_logprobs_and_grads_equal_the_full_forward(model):
  """Prompts sharing their first 5 tokens, with 1 to 5 tokens of their own after them: the
  response log-probs and the adapters' gradients of the full rows' forward."""
  params, lora = model
  batch = _common_prefix_batch()
  (common, common_grads), (full, full_grads) = jax.device_get(_compare_common(params, lora, *batch))
  response_mask = batch[3]
  assert common.shape == (3, RESPONSE_LEN)
  assert np.all(common[~response_mask] == 0.0) and np.all(common[response_mask] < 0.0)
  np.testing.assert_allclose(common, full, atol=1e-5, rtol=0)
  for a, b in zip(jax.tree.leaves(common_grads), jax.tree.leaves(full_grads)):
    assert np.abs(b).max() > 0
    # float32 rounding of sums in a different order, on gradients of size up to ~2
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match=r"prefix_len: expected an int in \[1, 10\), got 10"):
    shared_prefix.common_prefix_logprobs(TINY, params, lora, *batch, PROMPT_WIDTH)
