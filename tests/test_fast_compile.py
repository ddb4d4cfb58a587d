"""The test run's compile options: fast for most tests, XLA's defaults inside `default_compile`, LLVM
at -O3 inside `bitwise_compile`, at -O1 inside `learning_compile`."""

import os

import jax
import jax.numpy as jnp
import numpy as np

from tests.fast_compile import (
  FAST_COMPILE_FLAGS,
  bitwise_compile,
  default_compile,
  fast_jit,
  learning_compile,
)


def tanh_of_12(jit):
  # float32 tanh(12) is 1.0 with XLA:CPU's default options and 0.9999998 at -O0.
  return float(jit(jnp.tanh)(jnp.float32(12.0)))


def test_default_compile_builds_with_xla_s_default_options_whatever_the_flags():
  assert tanh_of_12(fast_jit) == np.float32(0.9999998)
  with default_compile():
    assert tanh_of_12(jax.jit) == 1.0
    assert tanh_of_12(fast_jit) == np.float32(0.9999998)  # a program's own options still win
  fast_flags = FAST_COMPILE_FLAGS in os.environ.get("XLA_FLAGS", "")
  assert tanh_of_12(jax.jit) == (np.float32(0.9999998) if fast_flags else 1.0)


def test_bitwise_compile_optimises_with_llvm_whatever_the_flags():
  with bitwise_compile():
    assert tanh_of_12(jax.jit) == 1.0  # LLVM at -O3, as XLA's defaults


def test_learning_compile_optimises_with_llvm_whatever_the_flags():
  with learning_compile():
    assert tanh_of_12(jax.jit) == 1.0  # LLVM at -O1 rounds as at -O3
    assert tanh_of_12(fast_jit) == np.float32(0.9999998)
