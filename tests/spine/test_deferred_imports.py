"""`hrljax` defers gymnax's plotting imports (seaborn, matplotlib.pyplot) to their first use: the
stand-in it puts in `sys.modules` imports nothing until an attribute is read, then gives way to the
real module."""

import importlib
import sys

import hrljax


def _fresh(name: str) -> None:
  sys.modules.pop(name, None)
  parent, _, child = name.rpartition(".")
  if parent and child in vars(sys.modules[parent]):
    delattr(sys.modules[parent], child)


def test_a_top_level_module_is_imported_on_its_first_attribute():
  _fresh("colorsys")
  hrljax._load_on_first_use("colorsys")
  import colorsys

  assert isinstance(colorsys, hrljax._OnFirstUse)
  assert "rgb_to_hsv" not in vars(colorsys)  # nothing executed yet
  assert colorsys.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
  real = sys.modules["colorsys"]
  assert not isinstance(real, hrljax._OnFirstUse) and real.ONE_THIRD == colorsys.ONE_THIRD
  colorsys.SCALE = 2  # writes reach the real module
  assert real.SCALE == 2


def test_a_submodule_stand_in_is_its_packages_attribute_until_used():
  _fresh("json.tool")
  hrljax._load_on_first_use("json.tool")
  import json
  import json.tool as tool

  assert tool is json.tool and isinstance(tool, hrljax._OnFirstUse)
  assert callable(tool.main)
  assert json.tool is sys.modules["json.tool"] is importlib.import_module("json.tool")
  assert not isinstance(json.tool, hrljax._OnFirstUse)


def test_imported_or_absent_modules_are_left_alone():
  hrljax._load_on_first_use("sys")
  assert sys.modules["sys"] is sys
  hrljax._load_on_first_use("no_such_module_here")
  assert "no_such_module_here" not in sys.modules
