"""Masked and padded entries (private to `hrljax.losses`): what a masked-out position holds never
reaches a value or a gradient.

A masked-out or invalid position may hold anything (-inf, +inf, NaN, 1e30: the log of a zero
probability, padding that was never written). Multiplying by a 0/1 mask does not remove it
(`0 * inf` and `0 * NaN` are NaN), and neither does a select on the output alone:
`where(keep, f(x), 0)` passes the cotangent 0 to `f`, and `0 * f'(x)` is NaN where `f'(x)` is
not finite. So the input is replaced before any operation that could turn it non-finite (the
"double where"): `where(keep, f(where(keep, x, 0)), 0)`, and a masked position then behaves
exactly as if it held 0. Probabilities use the safe-log pattern of distrax (`mul_exp`):
`x · p` is 0, with zero gradient, where `p = 0`, whatever `x` is (e.g. `p log p` at a -inf logit).
"""

import chex
import jax.numpy as jnp

Array = chex.Array


def zero_masked(mask: Array, *arrays: Array) -> tuple[Array, ...]:
  """Each array with 0 where `mask` is False or 0 (a bool or float mask, a probability; of the
  arrays' shape or a scalar): the input side of the double where."""
  keep = jnp.asarray(mask) != 0
  return tuple(jnp.where(keep, x, jnp.zeros((), x.dtype)) for x in arrays)


def mul_exp(x: Array, log_p: Array) -> Array:
  """`x · exp(log_p)`, 0 with zero gradient where `exp(log_p) == 0` (distrax's `mul_exp`)."""
  p = jnp.exp(log_p)
  return jnp.where(p == 0, jnp.zeros((), x.dtype), x) * p
