"""OTA on OGBench's pointmaze-medium-navigate-v0, with a dataset generated locally.

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=data/pointmaze-medium-navigate-v0.npz
  python -m experiments.train --config=experiments/configs/ota_pointmaze.py --workdir=runs/ota

Every hyperparameter is the agent's default (OGBench's); other mazes: `--config.env_name=`
and `--config.dataset_path=`, with `--config.gamma=0.995` on giant mazes (OGBench's
hyperparameters.sh).
`--config.abstraction_factor` is the option length n (OTA's default 5); the option-level discount
follows `gamma` unless `--config.high_gamma` is set.
"""

from hrljax.agents import ota


def get_config():
  config = ota.get_config()
  config.env_name = "pointmaze-medium-navigate-v0"  # OGBench dataset name
  config.dataset_path = "data/pointmaze-medium-navigate-v0.npz"  # experiments.make_dataset --out
  return config
