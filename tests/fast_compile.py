"""`fast_jit`: `jax.jit` for tests whose time is compile time.

XLA:CPU's LLVM backend at -O0 without its expensive passes, and fusions emitted by the elemental
emitter instead of the fusion emitters: the tiny programs of these tests run in milliseconds
either way, while their compilation is several times faster. The machine code differs from the
default flags' in the last bits of transcendental functions (at -O0, tanh(12) is 0.9999998 in
float32, not 1.0), so a test compares two computations of the same options, never one against a
program compiled with the default flags bit for bit. `FAST_COMPILE_FLAGS` is the same for a
subprocess (through `XLA_FLAGS`); `python tests/fast_compile.py` prints them (`make test` runs
every test but the learning and `bitwise` ones with them).
"""

import jax

FAST_COMPILE = {
  "xla_backend_optimization_level": 0,
  "xla_llvm_disable_expensive_passes": True,
  "xla_cpu_use_fusion_emitters": False,
}
FAST_COMPILE_FLAGS = " ".join(
  f"--{name}={str(value).lower()}" for name, value in FAST_COMPILE.items()
)


def fast_jit(fun, **kwargs):
  """`jax.jit` with `FAST_COMPILE`."""
  return jax.jit(fun, compiler_options=FAST_COMPILE, **kwargs)


if __name__ == "__main__":
  print(FAST_COMPILE_FLAGS)
