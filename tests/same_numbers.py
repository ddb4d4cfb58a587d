"""`assert_same`: two runs of differently built programs give the same numbers.

Two programs that compute the same thing by different routes (an agent with a feature off
against the agent without it; a switch that is gated to zero against its absence) agree bit for
bit only when LLVM optimises both (`tests/fast_compile.py`'s bitwise options, at twice the
compile time). At the test run's fast options they may differ in the last bits (measured: 1e-10
absolute, 4e-7 relative after four learner steps), while a wrong routing, buffer or update
differs in the leading digits.
"""

import jax
import numpy as np


def as_numpy(x) -> np.ndarray:
  """`x` as a host array; a typed PRNG key as its key data."""
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  return np.asarray(x)


def assert_same(expected, actual, err_msg=""):
  """Integer and boolean arrays equal; float arrays equal to float32 rounding (rtol 1e-5,
  atol 1e-7)."""
  expected, actual = as_numpy(expected), as_numpy(actual)
  if np.issubdtype(expected.dtype, np.floating):
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-7, err_msg=err_msg)
  else:
    np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
