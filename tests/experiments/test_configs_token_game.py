"""The smoke test of the token-game presets: `preset_smoke`."""

import pytest

from tests.experiments.preset_smoke import GROUPS, smoke_test


@pytest.mark.parametrize("preset", GROUPS["token_game"])
def test_preset_trains_or_traces(preset, tmp_path, request):
  smoke_test(preset, tmp_path, request)
