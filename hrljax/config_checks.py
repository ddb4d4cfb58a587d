"""Start-up checks of experiment configs: one clear line naming the field and what was expected."""

import math
from typing import Any


class ConfigError(ValueError):
  """A config field holds a value the experiment cannot run with."""


def _fail(field: str, expected: str, value: Any) -> None:
  raise ConfigError(f"config.{field}: expected {expected}, got {value!r}")


def _finite_number(value: Any) -> bool:
  """An int or float other than a bool (True would pass as 1), and finite."""
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive(config, *fields: str) -> None:
  for field in fields:
    value = config[field]
    if not (_finite_number(value) and value > 0):
      _fail(field, "a finite number > 0", value)


def non_negative(config, *fields: str) -> None:
  for field in fields:
    value = config[field]
    if not (_finite_number(value) and value >= 0):
      _fail(field, "a finite number >= 0", value)


def positive_int(config, *fields: str) -> None:
  for field in fields:
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
      _fail(field, "an integer > 0", value)


def positive_int_tuple(config, *fields: str) -> None:
  """Non-empty tuples of ints > 0 (layer widths)."""
  for field in fields:
    value = config[field]
    if not (
      isinstance(value, tuple)
      and value
      and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in value)
    ):
      _fail(field, "a tuple of ints > 0", value)


def at_most_layers(config, field: str, model_layers: int) -> None:
  """A layer count that cannot exceed the model's `model_layers` (a trunk cut from it)."""
  if config[field] > model_layers:
    _fail(field, f"at most the model's {model_layers} layers", config[field])


def non_negative_int(config, *fields: str) -> None:
  for field in fields:
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      _fail(field, "an integer >= 0", value)


def in_open_unit_interval(config, *fields: str) -> None:
  for field in fields:
    value = config[field]
    if not (_finite_number(value) and 0.0 < value < 1.0):
      _fail(field, "a number in (0, 1)", value)


def in_unit_interval(config, *fields: str) -> None:
  for field in fields:
    value = config[field]
    if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
      _fail(field, "a number in [0, 1]", value)


def one_of(config, field: str, choices) -> None:
  if config[field] not in choices:
    _fail(field, f"one of {list(choices)}", config[field])


def divisible(config, field: str, by: int, by_what: str) -> None:
  if config[field] % by != 0:
    _fail(field, f"a multiple of {by_what} ({by})", config[field])


def at_least(config, field: str, minimum: int, why: str) -> None:
  if config[field] < minimum:
    _fail(field, f"at least {minimum} ({why})", config[field])
