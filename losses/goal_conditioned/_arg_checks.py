"""Checks of the Python-valued arguments of the goal-conditioned losses.

Each check raises `ValueError("<name>: expected <what>, got <value!r>")`, naming the argument.
The signatures are those of the losses' shared argument-check module, which replaces this one.
"""

import math
import numbers
from typing import NoReturn, Optional


def fail(name: str, expected: str, value) -> NoReturn:
  raise ValueError(f"{name}: expected {expected}, got {value!r}")


def is_python_number(value) -> bool:
  """A real number that is not an array and not a bool."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number(name: str, value, *, low: Optional[float] = None, high: Optional[float] = None,
           low_open: bool = False, high_open: bool = False, finite: bool = True,
           optional: bool = False) -> None:
  """A real number within `low`/`high` (closed unless `*_open`); NaN always fails."""
  if optional and value is None:
    return
  ok = is_python_number(value) and not math.isnan(value) and (math.isfinite(value) or not finite)
  if ok and low is not None:
    ok = value > low if low_open else value >= low
  if ok and high is not None:
    ok = value < high if high_open else value <= high
  if not ok:
    bounds = []
    if low is not None:
      bounds.append(f"{'>' if low_open else '>='} {low}")
    if high is not None:
      bounds.append(f"{'<' if high_open else '<='} {high}")
    expected = ("a finite float" if finite else "a float") + "".join(
        f" {text}" for text in [" and ".join(bounds)] if text)
    fail(name, expected + (" or None" if optional else ""), value)


def positive(name: str, value, **kwargs) -> None:
  number(name, value, low=0.0, low_open=True, **kwargs)


def nonnegative(name: str, value, **kwargs) -> None:
  number(name, value, low=0.0, **kwargs)


def discount(name: str, value, **kwargs) -> None:
  number(name, value, low=0.0, high=1.0, **kwargs)


def open_unit_interval(name: str, value, **kwargs) -> None:
  number(name, value, low=0.0, high=1.0, low_open=True, high_open=True, **kwargs)


def integer(name: str, value, *, low: int = 1) -> None:
  """A Python int >= `low`; bools are not counts."""
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    fail(name, f"a Python int >= {low}", value)


def boolean(name: str, value) -> None:
  if not isinstance(value, bool):
    fail(name, "a Python bool", value)
