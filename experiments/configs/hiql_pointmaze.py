"""HIQL on OGBench pointmaze-medium-navigate-v0 with a locally generated dataset.

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=data/pointmaze-medium-navigate-v0.npz
  python -m experiments.train --config=experiments/configs/hiql_pointmaze.py --workdir=runs/hiql

Other mazes: `--config.env_name=pointmaze-large-navigate-v0 --config.dataset_path=...`; for giant
also `--config.discount=0.995` (OGBench hyperparameters.sh). The success rates on OGBench's five
tasks come from `hrljax.agents.hiql.evaluate_tasks(state.agent, config)` after training.
"""

from hrljax.agents import hiql


def get_config():
  config = hiql.get_config()
  config.env_name = "pointmaze-medium-navigate-v0"
  config.dataset_path = "data/pointmaze-medium-navigate-v0.npz"
  return config
