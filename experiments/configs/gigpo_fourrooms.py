"""GiGPO on four rooms with a random start and goal per task: `grpo_fourrooms.py`'s task, budget
and hyperparameters with the GiGPO estimator (`experiments/results/GROUP_RELATIVE.md`)."""

from experiments.configs import grpo_fourrooms


def get_config():
  config = grpo_fourrooms.get_config()  # the same task and budget
  config.estimator = "gigpo"  # episode advantage + anchor-state step advantage
  return config
