"""Checks of the Python-valued arguments of the safety losses (private).

Every check raises `ValueError("<name>: expected <what>, got <value!r>")`. Arrays (possibly
traced, e.g. a schedule) pass a number check without a look at their values.
"""

import math
import numbers
from typing import NoReturn, Optional


def fail(name: str, expected: str, value) -> NoReturn:
  raise ValueError(f"{name}: expected {expected}, got {value!r}")


def is_python_number(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number(name: str, value, *, low: Optional[float] = None, high: Optional[float] = None,
           low_open: bool = False, high_open: bool = False, arrays: bool = False) -> None:
  """A finite real number within the bounds (closed unless `*_open`); an array if `arrays`."""
  if arrays and not is_python_number(value) and hasattr(value, "shape"):
    return
  ok = is_python_number(value) and math.isfinite(value)
  if ok and low is not None:
    ok = value > low if low_open else value >= low
  if ok and high is not None:
    ok = value < high if high_open else value <= high
  if not ok:
    bounds = [f"{'>' if low_open else '>='} {low}"] if low is not None else []
    bounds += [f"{'<' if high_open else '<='} {high}"] if high is not None else []
    fail(name, " ".join(["a finite float"] + [" and ".join(bounds)] * bool(bounds)), value)


def integer(name: str, value, *, low: int = 1) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    fail(name, f"a Python int >= {low}", value)


def boolean(name: str, value) -> None:
  if not isinstance(value, bool):
    fail(name, "a Python bool", value)
