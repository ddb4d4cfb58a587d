"""`fast_jit`: `jax.jit` for tests whose time is compile time.

XLA:CPU's LLVM backend at -O0 without its expensive passes: the tiny programs of these tests run
in milliseconds either way, while their compilation is several times faster. The HLO-level
passes, hence the numerics the assertions check, are the same. `FAST_COMPILE_FLAGS` is the same
for a subprocess (through `XLA_FLAGS`).
"""

import jax

FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
FAST_COMPILE_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def fast_jit(fun, **kwargs):
  """`jax.jit` with `FAST_COMPILE`."""
  return jax.jit(fun, compiler_options=FAST_COMPILE, **kwargs)
