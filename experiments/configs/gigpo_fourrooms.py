"""GiGPO on four rooms with a random start and goal per group: `grpo_fourrooms.py`'s task, budget
and hyperparameters (documented there, with the measured GiGPO-vs-GRPO success rates), with the
GiGPO estimator."""

from experiments.configs import grpo_fourrooms


def get_config():
  config = grpo_fourrooms.get_config()  # the same task and budget; only the estimator differs
  config.estimator = "gigpo"
  return config
