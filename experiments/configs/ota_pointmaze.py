"""OTA on OGBench pointmaze-medium-navigate-v0 with a locally generated dataset.

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=data/pointmaze-medium-navigate-v0.npz
  python -m experiments.train --config=experiments/configs/ota_pointmaze.py --workdir=runs/ota

Other mazes: `--config.env_name=pointmaze-large-navigate-v0 --config.dataset_path=...`; for giant
also `--config.discount=0.995` (OGBench hyperparameters.sh; the option-level discount follows it
unless `--config.high_discount` is set). `--config.abstraction_factor` is the option length n
(OTA default 5; the paper's per-environment values were not verified). The success rates on
OGBench's five tasks come from `hrljax.agents.ota.evaluate_tasks(state.agent, config)`.
"""

from hrljax.agents import ota


def get_config():
  config = ota.get_config()
  config.env_name = "pointmaze-medium-navigate-v0"
  config.dataset_path = "data/pointmaze-medium-navigate-v0.npz"
  return config
