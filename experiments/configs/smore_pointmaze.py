"""SMORe on OGBench's pointmaze-medium-navigate-v0, with a dataset generated locally.

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=data/pointmaze-medium-navigate-v0.npz
  python -m experiments.train --config=experiments/configs/smore_pointmaze.py --workdir=runs/smore

The hyperparameters are the agent's defaults (the authors' `gcrl_config.py` and README command)
with OGBench's data, goal sampling and evaluation; other mazes: `--config.env_name=` and
`--config.dataset_path=`, with `--config.gamma=0.995` on giant mazes.
"""

from hrljax.agents import smore


def get_config():
  config = smore.get_config()
  config.env_name = "pointmaze-medium-navigate-v0"  # OGBench dataset name
  config.dataset_path = "data/pointmaze-medium-navigate-v0.npz"  # experiments.make_dataset --out
  return config
