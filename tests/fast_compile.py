"""`fast_jit`: `jax.jit` for tests whose time is compile time.

XLA:CPU's LLVM backend at -O0 without its expensive passes, and fusions emitted by the elemental
emitter instead of the fusion emitters: the tiny programs of these tests run in milliseconds
either way, while their compilation is several times faster. The machine code differs from the
default flags' in the last bits of transcendental functions (at -O0, tanh(12) is 0.9999998 in
float32, not 1.0), so a test compares two computations of the same options, never one against a
program compiled with the default flags bit for bit. `FAST_COMPILE_FLAGS` is the same for a
subprocess (through `XLA_FLAGS`); `python tests/fast_compile.py` prints them (`make test` runs
every test with them; the `optimised` tests compile inside `learning_compile`, the `bitwise` ones
inside `bitwise_compile`).
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


# For the `bitwise` tests: two differently built programs that compute the same values (SAC and
# Bresa with its reflex off, the look-ahead and the per-step reflex) agree bit for bit when LLVM
# optimises (level 3); at -O0, or at -O1, they differ in the last bits. LLVM's expensive passes and
# XLA's fusion emitters change nothing there and cost compile time: without them these programs
# compile in about half the time of `DEFAULT_COMPILE`.
BITWISE_COMPILE = {
  "xla_backend_optimization_level": 3,
  "xla_llvm_disable_expensive_passes": True,
  "xla_cpu_use_fusion_emitters": False,
}


# For the `optimised` learning tests, whose programs run for seconds to minutes: LLVM at -O1 without its
# expensive passes, with XLA's fusion emitters. Measured here on DQN's learning test (500k steps of
# CartPole in one program; process CPU seconds): compile 5.0 and run 19.9, against 10.2 + 21.7
# with `DEFAULT_COMPILE`, 7.9 + 24.7 with `BITWISE_COMPILE` and 3.0 + 50.0 with `FAST_COMPILE`.
LEARNING_COMPILE = {
  "xla_backend_optimization_level": 1,
  "xla_llvm_disable_expensive_passes": True,
  "xla_cpu_use_fusion_emitters": True,
}


@contextlib.contextmanager
def default_compile(options=None):
  """Every program compiled inside is built with `options` (`DEFAULT_COMPILE` when None), whatever
  XLA_FLAGS says.

  With `LEARNING_COMPILE` for the `optimised` tests (long runs, where optimised code pays) and,
  with `BITWISE_COMPILE`
  (`bitwise_compile`), the `bitwise` ones in a test run whose XLA_FLAGS are `FAST_COMPILE_FLAGS`. The options reach every compilation, the ones `jax.jit`
  makes inside library code included, through the function that builds XLA's compile options
  (`jax._src.compiler.get_compile_options`, which takes per-program overrides of XLA_FLAGS:
  `jax.jit(..., compiler_options=...)` passes them the same way). JAX's caches are cleared on
  entry and exit, so no program compiled under the other options is reused inside or outside.
  """
  from jax._src import compiler

  original = compiler.get_compile_options

  def with_default_options(*args, env_options_overrides=None, **kwargs):
    overrides = {**(options or DEFAULT_COMPILE), **(env_options_overrides or {})}
    return original(*args, env_options_overrides=overrides, **kwargs)

  jax.clear_caches()
  compiler.get_compile_options = with_default_options
  try:
    yield
  finally:
    compiler.get_compile_options = original
    jax.clear_caches()


def learning_compile():
  """`default_compile(LEARNING_COMPILE)`: for the `optimised` learning tests."""
  return default_compile(LEARNING_COMPILE)


def bitwise_compile():
  """`default_compile(BITWISE_COMPILE)`: for tests that compare two programs bit for bit."""
  return default_compile(BITWISE_COMPILE)


if __name__ == "__main__":
  print(FAST_COMPILE_FLAGS)
