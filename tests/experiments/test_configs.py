"""Every preset in `experiments/configs/` has smoke overrides and a test file that trains it."""

from tests.experiments.preset_smoke import GROUPS, PRESETS, SMOKE, TRACED


def test_every_preset_has_smoke_overrides():
  assert sorted(SMOKE) == PRESETS


def test_every_preset_is_in_exactly_one_group():
  grouped = [preset for group in GROUPS.values() for preset in group]
  assert sorted(grouped) == PRESETS


def test_a_traced_preset_names_a_trained_preset_of_its_agent(experiment_config):
  for traced, trained in TRACED.items():
    assert trained not in TRACED, traced
    assert experiment_config(traced).agent == experiment_config(trained).agent, traced
