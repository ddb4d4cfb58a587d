"""Tests for hrljax.networks.lora and the LoRA adapters of hrljax.networks.llama."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hrljax import llm_weights
from hrljax.networks import llama
from hrljax.networks.lora import LoRADense, lora_delta, lora_scale
from tests.fast_compile import fast_jit

TINY = llama.smollm2_config(
  num_layers=2,
  vocab_size=61,
  dim=24,
  num_heads=4,
  num_kv_heads=2,
  hidden_dim=40,
  max_seq_len=32,
  lora_rank=4,
  lora_alpha=8.0,
)


_forward = fast_jit(llama.forward, static_argnames=("config", "use_lora", "last_only"))


@pytest.fixture(scope="module")
def tiny():
  """Random base weights and initial adapters of the tiny model, built once."""
  return llama.init_params(TINY, jax.random.key(0)), llama.init_lora(TINY, jax.random.key(1))


def _perturbed(lora, scale=0.5):
  """Adapters moved away from initialisation (NumPy noise: no per-leaf compile)."""
  rng = np.random.default_rng(0)
  return jax.tree.map(lambda x: x + scale * rng.standard_normal(x.shape).astype(np.float32), lora)


def _tokens(seed, shape=(2, 6), vocab=TINY.vocab_size):
  return jax.random.randint(jax.random.key(seed), shape, 0, vocab, jnp.int32)


def _logits(config, params, lora, tokens, use_lora=True):
  mask = jnp.ones(tokens.shape, bool)
  logits, _ = _forward(
    config, params, lora, tokens, llama.positions_from_mask(mask), mask, use_lora=use_lora
  )
  return np.asarray(logits)


def test_lora_dense_matches_numpy_formula():
  layer = LoRADense(5, rank=2, alpha=6.0)
  x = jax.random.normal(jax.random.key(0), (3, 4))
  variables = layer.init(jax.random.key(1), x)
  assert set(variables) == {"params", "lora"}
  assert variables["lora"]["a"].shape == (4, 2) and variables["lora"]["b"].shape == (2, 5)
  assert not np.asarray(variables["lora"]["b"]).any()
  # The initial adapter adds nothing; a nonzero b adds x a b * alpha / r.
  kernel = np.asarray(variables["params"]["kernel"], np.float64)
  xs = np.asarray(x, np.float64)
  np.testing.assert_allclose(
    np.asarray(layer.apply(variables, x)), xs @ kernel, rtol=1e-5, atol=1e-6
  )
  b = jax.random.normal(jax.random.key(2), (2, 5))
  lora = {"a": variables["lora"]["a"], "b": b}
  expected = xs @ kernel + xs @ np.asarray(lora["a"], np.float64) @ np.asarray(b, np.float64) * 3.0
  got = layer.apply({"params": variables["params"], "lora": lora}, x)
  np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)
  # use_lora=False ignores (and does not need) the adapters.
  base = layer.apply({"params": variables["params"]}, x, use_lora=False)
  np.testing.assert_allclose(np.asarray(base), xs @ kernel, rtol=1e-5, atol=1e-6)
  bound = 1.0 / np.sqrt(4)
  assert np.abs(np.asarray(variables["lora"]["a"])).max() <= bound


def test_rank_zero_has_no_adapters():
  layer = LoRADense(3, rank=0)
  variables = layer.init(jax.random.key(0), jnp.ones((1, 2)))
  assert set(variables) == {"params"}


@pytest.mark.parametrize(
  "rank, alpha, match",
  [(0, 1.0, "lora_rank"), (2.0, 1.0, "lora_rank"), (2, 0.0, "lora_alpha"), (2, True, "lora_alpha")],
)
def test_lora_scale_rejects_bad_values(rank, alpha, match):
  with pytest.raises(ValueError, match=match):
    lora_scale(rank, alpha)


def test_init_lora_requires_rank():
  with pytest.raises(ValueError, match="lora_rank"):
    llama.init_lora(llama.smollm2_config(num_layers=1, lora_rank=0), jax.random.key(0))


def test_lora_at_initialisation_leaves_pretrained_logits_unchanged():
  _, params = llm_weights.load_smollm2(num_layers=2)
  config = llama.smollm2_config(num_layers=2, lora_rank=8)
  lora = llama.init_lora(config, jax.random.key(0))
  assert set(lora["layers"]) == set(llama.PROJECTIONS)
  assert lora["layers"]["wq"]["a"].shape == (2, 576, 8)
  assert lora["layers"]["w_down"]["b"].shape == (2, 8, 576)
  tokens = _tokens(1, (1, 5), config.vocab_size)
  with_lora = _logits(config, params, lora, tokens)
  base = _logits(config, params, None, tokens)
  np.testing.assert_array_equal(with_lora, base)


def _loss(params, lora, tokens, mask):
  return -llama.token_logprobs(TINY, params, lora, tokens, mask).mean()


def test_grads_reach_lora_and_optax_step_leaves_base_weights_untouched(tiny):
  params, lora = tiny
  tokens = _tokens(2)
  mask = jnp.ones(tokens.shape, bool)
  grad_params, grad_lora = fast_jit(jax.grad(_loss, argnums=(0, 1)))(params, lora, tokens, mask)
  # b = 0 at initialisation, so only the b factors get a gradient (dL/da = dL/d(delta) b^T = 0).
  for name in llama.PROJECTIONS:
    assert float(jnp.abs(grad_lora["layers"][name]["b"]).sum()) > 0.0, name
    assert not np.asarray(grad_lora["layers"][name]["a"]).any(), name
  assert float(jnp.abs(grad_params["layers"]["wq"]["kernel"]).sum()) > 0.0

  optimizer = optax.sgd(0.5)
  opt_state = optimizer.init(lora)

  @fast_jit
  def update(lora, opt_state):
    grads = jax.grad(_loss, argnums=1)(params, lora, tokens, mask)
    updates, opt_state = optimizer.update(grads, opt_state, lora)
    return optax.apply_updates(lora, updates), opt_state

  @fast_jit
  def policies(lora):
    """Adapted, reference (adapters switched off) and base-model log-probs."""
    return (
      llama.token_logprobs(TINY, params, lora, tokens, mask),
      llama.token_logprobs(TINY, params, lora, tokens, mask, use_lora=False),
      llama.token_logprobs(TINY, params, None, tokens, mask),
    )

  before = jax.tree.map(np.array, params)
  new_lora, opt_state = update(lora, opt_state)
  new_lora, _ = update(new_lora, opt_state)
  jax.tree.map(np.testing.assert_array_equal, before, jax.tree.map(np.asarray, params))
  assert float(jnp.abs(new_lora["layers"]["wq"]["a"] - lora["layers"]["wq"]["a"]).sum()) > 0.0
  initial, _, _ = policies(lora)
  adapted, reference, base = policies(new_lora)
  assert -float(adapted.mean()) < -float(initial.mean())  # the step lowered the loss
  # The reference policy is the same call without adapters: exactly the base model.
  np.testing.assert_array_equal(np.asarray(reference), np.asarray(base))
  np.testing.assert_array_equal(np.asarray(initial), np.asarray(base))
  assert not np.allclose(np.asarray(adapted), np.asarray(base), atol=1e-4)


def test_generate_samples_from_the_adapted_policy(tiny):
  params, lora = tiny
  trained = _perturbed(lora)
  prompt = _tokens(3, (2, 4))
  prompt_mask = jnp.ones(prompt.shape, bool)
  out = llama.generate(
    TINY, params, trained, prompt, prompt_mask, jax.random.key(0), 4, eos_id=None, pad_id=0
  )
  tokens = jnp.concatenate([prompt, out.tokens], axis=1)
  mask = jnp.ones(tokens.shape, bool)
  adapted, base = fast_jit(
    lambda lo: (
      llama.token_logprobs(TINY, params, lo, tokens, mask),
      llama.token_logprobs(TINY, params, None, tokens, mask),
    )
  )(trained)
  np.testing.assert_allclose(
    np.asarray(adapted[:, 3:]), np.asarray(out.logprobs), rtol=1e-4, atol=1e-5
  )
  assert not np.allclose(np.asarray(base[:, 3:]), np.asarray(out.logprobs), atol=1e-3)


def test_lora_backward_matches_autodiff_of_the_plain_product():
  """`lora.lora_delta`'s hand-written VJP (the GRPO update's backward pass through every
  adapter) gives autodiff's gradients of `(x @ a) @ b * scale`, for x of rank 2 and 3."""
  rng = np.random.default_rng(0)
  for x_shape in [(5, 6), (3, 4, 6)]:
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    a = jnp.asarray(rng.standard_normal((6, 2)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((2, 7)), jnp.float32)
    g = jnp.asarray(rng.standard_normal(x_shape[:-1] + (7,)), jnp.float32)
    out, pullback = jax.vjp(lambda x, a, b: lora_delta(x, a, b, 2.5), x, a, b)
    plain_out, plain_pullback = jax.vjp(lambda x, a, b: (x @ a) @ b * 2.5, x, a, b)
    np.testing.assert_allclose(out, plain_out, rtol=1e-5, atol=1e-5)
    for got, expected in zip(pullback(g), plain_pullback(g)):
      assert got.shape == expected.shape
      np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
