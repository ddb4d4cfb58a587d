"""GCIVL on OGBench's pointmaze-medium-navigate-v0, with a dataset generated locally.

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=data/pointmaze-medium-navigate-v0.npz
  python -m experiments.train --config=experiments/configs/gcivl_pointmaze.py --workdir=runs/gcivl

Every hyperparameter is the agent's default (OGBench's); other mazes: `--config.env_name=`
and `--config.dataset_path=`, with `--config.gamma=0.995` on giant mazes (OGBench's
hyperparameters.sh).
"""

from hrljax.agents import gcivl


def get_config():
  config = gcivl.get_config()
  config.env_name = "pointmaze-medium-navigate-v0"  # OGBench dataset name
  config.dataset_path = "data/pointmaze-medium-navigate-v0.npz"  # experiments.make_dataset --out
  return config
