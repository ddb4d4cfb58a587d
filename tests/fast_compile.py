"""`fast_jit`: `jax.jit` for tests whose time is compile time.

XLA:CPU's LLVM backend at -O0 without its expensive passes, and fusions emitted by the elemental
emitter instead of the fusion emitters: the tiny programs of these tests run in milliseconds
either way, while their compilation is several times faster. The machine code differs from the
default flags' in the last bits of transcendental functions (at -O0, tanh(12) is 0.9999998 in
float32, not 1.0), so a test compares two computations of the same options, never one against a
program compiled with the default flags bit for bit. `FAST_COMPILE_FLAGS` is the same for a
subprocess (through `XLA_FLAGS`); `python tests/fast_compile.py` prints them (`make test` runs
every test with them; the `optimised` and `bitwise` tests compile inside `default_compile`).
"""

import contextlib

import jax

FAST_COMPILE = {
  "xla_backend_optimization_level": 0,
  "xla_llvm_disable_expensive_passes": True,
  "xla_cpu_use_fusion_emitters": False,
}
FAST_COMPILE_FLAGS = " ".join(
  f"--{name}={str(value).lower()}" for name, value in FAST_COMPILE.items()
)


# XLA:CPU's own values of the same options: what a program gets when XLA_FLAGS sets none of them.
DEFAULT_COMPILE = {
  "xla_backend_optimization_level": 3,
  "xla_llvm_disable_expensive_passes": False,
  "xla_cpu_use_fusion_emitters": True,
}


def fast_jit(fun, **kwargs):
  """`jax.jit` with `FAST_COMPILE`."""
  return jax.jit(fun, compiler_options=FAST_COMPILE, **kwargs)


@contextlib.contextmanager
def default_compile():
  """Every program compiled inside is built with `DEFAULT_COMPILE`, whatever XLA_FLAGS says.

  For the `optimised` tests (long runs, where optimised code pays) and the `bitwise` ones (two
  differently built programs agree bit for bit only when both are optimised) in a test run whose
  XLA_FLAGS are `FAST_COMPILE_FLAGS`. The options reach every compilation, the ones `jax.jit`
  makes inside library code included, through the function that builds XLA's compile options
  (`jax._src.compiler.get_compile_options`, which takes per-program overrides of XLA_FLAGS:
  `jax.jit(..., compiler_options=...)` passes them the same way). JAX's caches are cleared on
  entry and exit, so no program compiled under the other options is reused inside or outside.
  """
  from jax._src import compiler

  original = compiler.get_compile_options

  def with_default_options(*args, env_options_overrides=None, **kwargs):
    options = {**DEFAULT_COMPILE, **(env_options_overrides or {})}
    return original(*args, env_options_overrides=options, **kwargs)

  jax.clear_caches()
  compiler.get_compile_options = with_default_options
  try:
    yield
  finally:
    compiler.get_compile_options = original
    jax.clear_caches()


if __name__ == "__main__":
  print(FAST_COMPILE_FLAGS)
