"""The smoke test of the off-policy safety presets: `preset_smoke`."""

import pytest

from tests.experiments.preset_smoke import GROUPS, smoke_test


@pytest.mark.parametrize("preset", GROUPS["safety_off_policy"])
def test_preset_trains_or_traces(preset, tmp_path, request):
  smoke_test(preset, tmp_path, request)
