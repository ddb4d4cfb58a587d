"""Every preset in `experiments/configs/` builds and trains a few updates through the one driver.

Each preset runs with tiny overrides (network widths, budgets, dataset and game sizes) through
`experiments.train.experiment`, the function behind `python -m experiments.train`: validation,
the agent's learner, `training.run`, logging, checkpointing and the final evaluation. The
overrides keep every run to a few seconds of compiled work; they change sizes, never the code path.
"""

import importlib
import math
import os

import pytest

from experiments import train as train_cli
from hrljax.logging import read_jsonl

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "experiments", "configs")
NOT_PRESETS = {"__init__", "token_game_common", "pointhazard_layouts"}  # shared pieces of presets
PRESETS = sorted(name[:-3] for name in os.listdir(CONFIG_DIR)
                 if name.endswith(".py") and name[:-3] not in NOT_PRESETS)

RUN = {"log_every": 2, "checkpoint_every": 2, "eval_every": 0}
FOUR_ROOMS = {"eval_episodes": 4, "rollout_unroll": 1}
# the sizes of tests/agents/test_group_relative_agent.py, so the compilation cache shares programs
GROUPED = {**FOUR_ROOMS, "num_groups": 2, "group_size": 4, "num_steps": 8, "total_timesteps": 128,
           "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": (16,)}

# preset -> (overrides, a file argument of the config or None). Several presets of one agent
# share the compiled shapes where they can.
SMOKE = {
    "ppo_cartpole": ({"total_timesteps": 4 * 16 * 4, "num_steps": 16, "update_epochs": 1,
                      "num_minibatches": 2, "eval_episodes": 4}, None),
    "ppo_fourrooms": ({**FOUR_ROOMS, "total_timesteps": 16 * 16 * 4, "num_steps": 16,
                       "update_epochs": 1, "num_minibatches": 2}, None),
    "option_critic_fourrooms": ({**FOUR_ROOMS, "total_timesteps": 16 * 8 * 4}, None),
    "grpo_fourrooms": (GROUPED, None),
    "gigpo_fourrooms": (GROUPED, None),
}


def load_preset(name: str, argument=None):
  module = importlib.import_module(f"experiments.configs.{name}")
  return module.get_config() if argument is None else module.get_config(argument)


def test_every_preset_has_smoke_overrides():
  assert sorted(SMOKE) == PRESETS


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_trains_through_the_experiment_driver(preset, tmp_path):
  overrides, argument = SMOKE[preset]
  config = load_preset(preset, argument)
  for field, value in {**RUN, **overrides}.items():
    config[field] = value
  workdir = str(tmp_path / preset)
  train_cli.experiment(config, workdir)
  records = read_jsonl(workdir)
  train = [r for r in records if r["phase"] == "train"]
  evals = [r for r in records if r["phase"] == "eval"]
  assert len(train) >= 1 and train[-1]["update"] >= 2
  assert len(evals) == len(config.seeds) and evals[-1]["update"] == train[-1]["update"]
  numbers = [v for r in records for k, v in r.items() if isinstance(v, float)]
  assert all(math.isfinite(v) for v in numbers), preset
  assert os.path.exists(os.path.join(workdir, "config.json"))
