"""Every preset in `experiments/configs/` has smoke overrides and a test file that trains it."""

import os

from tests.experiments.preset_smoke import GROUPS, PRESETS, SMOKE, TRACED

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_preset_has_smoke_overrides():
  assert sorted(SMOKE) == PRESETS


def test_every_preset_is_in_exactly_one_group():
  grouped = [preset for group in GROUPS.values() for preset in group]
  assert sorted(grouped) == PRESETS


def test_a_traced_preset_names_a_trained_preset_of_its_agent_or_a_test_of_it(experiment_config):
  for traced, trained in TRACED.items():
    if "::" in trained:  # a test that runs the agent's learner
      path, test = trained.split("::")
      with open(os.path.join(ROOT, path)) as f:
        source = f.read()
      assert f"def {test}(" in source, traced
      assert experiment_config(traced).agent in source, traced
    else:
      assert trained not in TRACED, traced
      assert experiment_config(traced).agent == experiment_config(trained).agent, traced
