"""The smoke test of the online presets (PPO, option-critic, grouped): `preset_smoke`."""

import pytest

from tests.experiments.preset_smoke import GROUPS, smoke_test


@pytest.mark.parametrize("preset", GROUPS["online"])
def test_preset_trains_or_traces(preset, tmp_path, request):
  smoke_test(preset, tmp_path, request)
