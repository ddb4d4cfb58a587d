"""Every preset in `experiments/configs/` has smoke overrides and a test file that trains it."""

from tests.experiments.preset_smoke import GROUPS, PRESETS, SMOKE


def test_every_preset_has_smoke_overrides():
  assert sorted(SMOKE) == PRESETS


def test_every_preset_is_in_exactly_one_group():
  grouped = [preset for group in GROUPS.values() for preset in group]
  assert sorted(grouped) == PRESETS
