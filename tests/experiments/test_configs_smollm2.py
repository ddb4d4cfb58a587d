"""Smoke runs of the SmolLM2 presets through `experiments.train` (see `preset_smoke`)."""

import pytest

from tests.experiments.preset_smoke import GROUPS, train_preset


@pytest.mark.parametrize("preset", GROUPS["smollm2"])
def test_preset_trains_through_the_experiment_driver(preset, tmp_path, request):
  train_preset(preset, tmp_path, request)
