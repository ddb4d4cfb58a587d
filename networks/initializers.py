"""Weight initialisers that are safe to vmap over seeds on XLA:CPU.

`orthogonal` gives exactly the values of `flax.linen.initializers.orthogonal` (the QR-based
orthogonal initialisation of Saxe, McClelland and Ganguli, "Exact solutions to the nonlinear
dynamics of learning in deep linear neural networks", ICLR 2014, used by PPO implementations),
but a vmap over keys computes one QR per key in a loop instead of one batched QR.

Why: jaxlib 0.10's CPU LAPACK kernels split a batched QR into chunks on XLA's intra-op thread pool
and block until the chunks finish. XLA:CPU runs independent operations concurrently on that same
pool, and the initialisation of a network has one independent QR per layer, so on a small
machine every pool thread can end up blocked in a QR waiting for chunks that no free thread can
run: the program never finishes (seen on this project's 2-core machine in `jax.vmap`-over-seeds
initialisations: native stacks in `jax::ParallelBatchMap` / `BlockingCounter::Wait` under
`lapack_sgeqrf_ffi` and `lapack_sorgqr_ffi`). An unbatched QR runs inline, without the pool.
"""

import flax.linen as nn
import jax

from hrljax.types import Array


def orthogonal(scale: float = 1.0) -> nn.initializers.Initializer:
  """`nn.initializers.orthogonal(scale)` whose vmap runs the keys sequentially (see above)."""

  def init(key: Array, shape, dtype=jax.numpy.float32) -> Array:
    # `scale` is an argument, not a closure: it may be a tracer (`jnp.sqrt(2.0)` under jit), and
    # a sequential_vmap'd function may not close over tracers.
    def one(k, s):
      return nn.initializers.orthogonal(s)(k, shape, dtype)

    return jax.custom_batching.sequential_vmap(one)(key, scale)

  return init
