"""Checks of the Python-valued arguments of the loss functions (private to `hrljax.losses`).

A loss checks its arrays with chex at its top; its Python options (coefficients, counts, mode
names) are checked here, once per call and at trace time, so a bad option fails before anything
is compiled. Every check raises

    ValueError("<name>: expected <what>, got <value!r>")

naming the argument, what it accepts and the value it got.
"""

import math
import numbers
from typing import Iterable, NoReturn, Optional


def fail(name: str, expected: str, value) -> NoReturn:
  """Raises the one error text of this module."""
  raise ValueError(f"{name}: expected {expected}, got {value!r}")


def is_python_number(value) -> bool:
  """A real number that is not an array: Python or NumPy scalars, never a bool."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_array(value) -> bool:
  """An array (possibly traced), which a Python-value check cannot look into."""
  return hasattr(value, "shape") and hasattr(value, "dtype")


def _bounds_text(low, high, low_open: bool, high_open: bool) -> str:
  bounds = []
  if low is not None:
    bounds.append(f"{'>' if low_open else '>='} {low}")
  if high is not None:
    bounds.append(f"{'<' if high_open else '<='} {high}")
  return " and ".join(bounds)


def number(
  name: str,
  value,
  *,
  low: Optional[float] = None,
  high: Optional[float] = None,
  low_open: bool = False,
  high_open: bool = False,
  finite: bool = True,
  optional: bool = False,
  arrays: bool = False,
) -> None:
  """Checks a real number against `low`/`high` (closed unless `*_open`); NaN always fails.

  Args:
    name: the argument's name, for the message.
    value: the argument.
    low, high: bounds, or None for none.
    low_open, high_open: exclude the bound itself.
    finite: reject +-inf (default); False lets an infinite bound through (e.g. "no clip").
    optional: accept None.
    arrays: accept an array (possibly traced, e.g. a schedule) without looking at its values.
  """
  if (optional and value is None) or (arrays and not is_python_number(value) and is_array(value)):
    return
  ok = is_python_number(value) and not math.isnan(value) and (math.isfinite(value) or not finite)
  if ok and low is not None:
    ok = value > low if low_open else value >= low
  if ok and high is not None:
    ok = value < high if high_open else value <= high
  if not ok:
    expected = "a finite float" if finite else "a float"
    bounds = _bounds_text(low, high, low_open, high_open)
    expected += f" {bounds}" if bounds else ""
    fail(name, expected + (" or None" if optional else ""), value)


def positive(name: str, value, **kwargs) -> None:
  """A finite float > 0 (see `number` for the keywords)."""
  number(name, value, low=0.0, low_open=True, **kwargs)


def nonnegative(name: str, value, **kwargs) -> None:
  """A finite float >= 0 (see `number` for the keywords)."""
  number(name, value, low=0.0, **kwargs)


def discount(name: str, value, **kwargs) -> None:
  """A discount factor in [0, 1] (see `number` for the keywords)."""
  number(name, value, low=0.0, high=1.0, **kwargs)


def open_unit_interval(name: str, value, **kwargs) -> None:
  """A float in (0, 1), e.g. an expectile or an EMA rate (see `number` for the keywords)."""
  number(name, value, low=0.0, high=1.0, low_open=True, high_open=True, **kwargs)


def integer(name: str, value, *, low: int = 1) -> None:
  """A Python int >= `low` (a count, a static size); bools are not counts."""
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    fail(name, f"a Python int >= {low}", value)


def boolean(name: str, value) -> None:
  """A Python bool (a flag that selects a trace-time branch)."""
  if not isinstance(value, bool):
    fail(name, "a Python bool", value)


def choice(name: str, value, allowed: Iterable) -> None:
  """One of `allowed` (a mode name)."""
  allowed = tuple(allowed)
  if value not in allowed:
    fail(name, f"one of {allowed}", value)


def ids_in_range(name: str, ids, num: int):
  """Rows whose index `ids` lies in [0, num), a bool array of `ids`' shape.

  Concrete `ids` (an eager call) with an entry outside raise ValueError naming `name`, the range
  and the first offending values. Traced `ids` (under jit) cannot be looked into: the caller
  treats the rows outside as invalid (they enter no statistic and get 0), so one bad index never
  poisons the rest of a batch.
  """
  import jax
  import jax.numpy as jnp

  if not isinstance(ids, jax.core.Tracer):  # concrete: look at the values on the host
    with jax.ensure_compile_time_eval():  # concrete ids captured by a traced function too
      host = jax.device_get(jnp.asarray(ids))  # a NumPy array, for a Python int as well
    outside = host[(host < 0) | (host >= num)]
    if outside.size:
      fail(
        name, f"indices in [0, {num}) (rows outside are invalid under jit)", outside[:5].tolist()
      )
  return (ids >= 0) & (ids < num)
