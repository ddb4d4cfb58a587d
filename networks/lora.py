"""LoRA adapters for dense projections, kept in their own variable collection.

See "LoRA: Low-Rank Adaptation of Large Language Models" by Hu, Shen, Wallis, Allen-Zhu, Li,
Wang, Wang, Chen (arXiv 2106.09685), Section 4.1: a frozen weight `W0` is adapted as
`h = W0 x + (alpha / r) B A x` with `A` random, `B` zero at initialisation (so the adapted model
starts equal to the base model), and only `A`, `B` trained.

Layout. `LoRADense` declares its base kernel in the `"params"` collection and its adapters in the
`"lora"` collection, so that `module.apply({"params": params, "lora": lora}, ...)` keeps the two
pytrees apart: an optimizer is built for `lora` alone and the base weights can never be updated
by it. Calling with `use_lora=False` reads no adapter at all, which is how a reference policy
(for a KL penalty) is evaluated without a second copy of the base weights.

Deviations / choices:
- Kernels are stored Flax-style, `[in, out]`; the adapters are `a: [in, r]` and `b: [r, out]`, so
  the update is `x @ a @ b * alpha / r` (the paper's `B A x` with transposed matrices).
- `a` is initialised uniformly in `[-1/sqrt(in), 1/sqrt(in)]` (the Kaiming-uniform init of the
  `peft` library's default); the paper says "random Gaussian". `b` is zero as in the paper.
- No dropout on the adapter input (peft's `lora_dropout`, default 0).

A maintained LoRA exists for Flax NNX (`flax.nnx.LoRA`), not for Linen's functional style that
the rest of `hrljax.networks` uses, hence this small module.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array

LORA_COLLECTION = "lora"


def lora_scale(rank: int, alpha: float) -> float:
  """The adapter multiplier `alpha / rank` (paper Section 4.1); validates both arguments."""
  if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
    raise ValueError(f"lora_rank: expected an int >= 1, got {rank!r}")
  if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not alpha > 0:
    raise ValueError(f"lora_alpha: expected a float > 0, got {alpha!r}")
  return float(alpha) / rank


def lora_a_init(key: Array, shape, dtype=jnp.float32) -> Array:
  """Uniform in `[-1/sqrt(fan_in), 1/sqrt(fan_in)]` for `a: [in, r]`."""
  bound = 1.0 / jnp.sqrt(jnp.asarray(shape[0], jnp.float32))
  return jax.random.uniform(key, shape, dtype, -bound, bound)


class LoRADense(nn.Module):
  """`y = x @ kernel (+ x @ a @ b * alpha / rank)`, no bias; the adapter only when `rank > 0`.

  Attributes:
    features: output width.
    rank: adapter rank `r`; 0 means no adapter variables at all.
    alpha: LoRA `alpha`; the adapter output is multiplied by `alpha / rank`.
    dtype: compute dtype (inputs and weights are cast to it; accumulation as XLA does it).
    kernel_init: initialiser of the frozen base kernel `[in, features]`.

  `__call__(x, use_lora=True)`: x `[..., in]` -> `[..., features]`. With `use_lora=False` the
  `"lora"` collection is not read (it need not be passed to `apply`). Initialise with
  `use_lora=True` to create the adapters.
  """

  features: int
  rank: int = 0
  alpha: float = 16.0
  dtype: Any = jnp.float32
  kernel_init: Any = nn.initializers.lecun_normal()

  @nn.compact
  def __call__(self, x: Array, use_lora: bool = True) -> Array:
    in_features = x.shape[-1]
    kernel = self.param("kernel", self.kernel_init, (in_features, self.features), jnp.float32)
    x = x.astype(self.dtype)
    y = jnp.dot(x, kernel.astype(self.dtype))
    if self.rank > 0 and use_lora:
      scale = lora_scale(self.rank, self.alpha)
      a = self.variable(LORA_COLLECTION, "a", lambda: lora_a_init(
          self.make_rng("params"), (in_features, self.rank)))
      b = self.variable(LORA_COLLECTION, "b", lambda: jnp.zeros((self.rank, self.features),
                                                              jnp.float32))
      # Low-rank path first through `a` ([.., r] is tiny), then `b`: never forms `a @ b`.
      delta = jnp.dot(jnp.dot(x, a.value.astype(self.dtype)), b.value.astype(self.dtype))
      y = y + (scale * delta).astype(y.dtype)
    return y
