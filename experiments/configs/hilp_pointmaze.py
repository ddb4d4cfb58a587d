"""HILP on OGBench pointmaze-medium-navigate-v0 with a locally generated dataset.

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=data/pointmaze-medium-navigate-v0.npz
  python -m experiments.train --config=experiments/configs/hilp_pointmaze.py --workdir=runs/hilp

Other mazes: `--config.env_name=pointmaze-large-navigate-v0 --config.dataset_path=...`. The
success rates on OGBench's five tasks (goal-prompted skill policy) come from
`hrljax.agents.hilp.evaluate_tasks(state.agent, config)`.
"""

from hrljax.agents import hilp


def get_config():
  config = hilp.get_config()
  config.env_name = "pointmaze-medium-navigate-v0"
  config.dataset_path = "data/pointmaze-medium-navigate-v0.npz"
  return config
