"""Smoke runs of the on-policy safety presets through `experiments.train` (see `preset_smoke`)."""

import pytest

from tests.experiments.preset_smoke import GROUPS, train_preset


@pytest.mark.parametrize("preset", GROUPS["safety_on_policy"])
def test_preset_trains_through_the_experiment_driver(preset, tmp_path, request):
  train_preset(preset, tmp_path, request)
