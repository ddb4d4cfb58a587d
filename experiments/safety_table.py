r"""One row of the PointHazard results table (`experiments/results/SAFETY.md`).

Trains one safety config for several seeds in one process (vmapped; seed `s` starts from the
key `experiments.train` would use, `split(key(s))[0]`), then evaluates each seed greedily and
prints one JSON line: violating control steps during training, training return and cost over
the last 10% of updates, evaluation return and cost.

  python -m experiments.safety_table --config=experiments/configs/recovery_rl_pointhazard.py \
      --seeds=0,1,2
  python -m experiments.safety_table --config=experiments/configs/bresa_pointhazard.py \
      --seeds=0,1,2 --sequential --config.reflex=False --config.risk_updates_per_step=0 \
      --config.risk_pretrain_updates=0
  python -m experiments.safety_table --config=experiments/configs/ppo_lagrangian_pointhazard.py \
      --seeds=0,1,2

Off-policy agents (SAC, Recovery RL, Bresa: `agents/recovery_rl.py`) are evaluated on 64
episodes of the task policy's mode with the safety layer as configured; the PPO family
(`agents/ppo_lagrangian.py`, shielded PPO included) by its own `evaluate`.
"""

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from hrljax.agents import ppo_lagrangian, recovery_rl

OFF_POLICY = ("recovery_rl", "bresa")
ON_POLICY = ("ppo_lagrangian", "shielded_ppo")

config_flags.DEFINE_config_file("config", None, "A *_pointhazard config file.", lock_config=True)
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds, trained together in this process.")
flags.DEFINE_bool("sequential", False, "Train the seeds one after the other instead of vmapped "
                  "(under vmap the two-rate rollout's lax.cond computes both branches).")
FLAGS = flags.FLAGS


def parse_seeds(values) -> list[int]:
  try:
    seeds = [int(v) for v in values]
  except ValueError:
    seeds = []
  if not seeds or min(seeds) < 0:
    raise app.UsageError(f"--seeds: expected integers >= 0 separated by commas, got {values}")
  return seeds


def train_seeds(train, keys: list, sequential: bool):
  """`(final states, per-update metrics)` stacked on a leading seed axis."""
  if sequential:
    jitted = jax.jit(train)
    runs = [jitted(key) for key in keys]
    return jax.tree.map(lambda *x: jnp.stack(x), *runs)
  return jax.jit(jax.vmap(train))(jnp.stack(keys))


def last_tenth(metrics: dict, seed: int, name: str) -> float:
  """Mean of `<name>_sum` per ended episode over the last 10% of updates."""
  n = metrics["episodes"].shape[1]
  tail = slice(int(0.9 * n), n)
  episodes = metrics["episodes"][seed, tail].sum()
  return float(metrics[f"{name}_sum"][seed, tail].sum() / max(episodes, 1))


def off_policy_row(config, states, metrics, seeds: list[int]) -> dict:
  steps = recovery_rl.make_learner(config).env_steps_per_update
  violations = metrics["cost_per_step"] * steps  # indicator cost: violating control steps
  row = {}
  for i, seed in enumerate(seeds):
    agent = jax.tree.map(lambda x: x[i], states.agent)
    episodes = recovery_rl.evaluation_episodes(agent, jax.random.key(100 + seed), 64)
    evaluation = recovery_rl.first_episode_statistics(episodes)
    row[f"seed{seed}"] = {
        "violating_steps": int(round(violations[i].sum())),
        "train_return_last10": round(last_tenth(metrics, i, "episode_return"), 3),
        "train_cost_last10": round(last_tenth(metrics, i, "episode_cost"), 3),
        **{k: round(float(v), 3) for k, v in evaluation.items()}}
  return row


def on_policy_row(config, states, metrics, seeds: list[int], eval_keys: list) -> dict:
  learner = ppo_lagrangian.make_learner(config)
  evaluate = jax.jit(learner.evaluate)
  row = {}
  for i, seed in enumerate(seeds):
    state = jax.tree.map(lambda x: x[i], states)
    evaluation = evaluate(state, eval_keys[i])
    row[f"seed{seed}"] = {
        "violating_steps": int(metrics["rollout_violations"][i].sum()),
        "train_return_last10": round(last_tenth(metrics, i, "episode_return"), 3),
        "train_cost_last10": round(last_tenth(metrics, i, "episode_cost"), 3),
        **{k: round(float(v), 3) for k, v in evaluation.items()}}
  return row


def main(argv):
  del argv
  config = FLAGS.config
  if config is None:
    raise app.UsageError("--config: expected a *_pointhazard config file")
  if config.agent not in OFF_POLICY + ON_POLICY:
    raise app.UsageError(f"--config: expected an agent in {OFF_POLICY + ON_POLICY}, got "
                         f"{config.agent!r}")
  seeds = parse_seeds(FLAGS.seeds)
  module = recovery_rl if config.agent in OFF_POLICY else ppo_lagrangian
  module.validate_config(config)
  keys = [jax.random.split(jax.random.key(s)) for s in seeds]  # as training.train: (init, eval)
  print(f"training {config.agent} for {len(seeds)} seed(s) ...", file=sys.stderr, flush=True)
  start = time.perf_counter()
  states, metrics = train_seeds(module.make_train(config), [k[0] for k in keys],
                                FLAGS.sequential)
  metrics = jax.tree.map(np.asarray, jax.block_until_ready(metrics))
  seconds = time.perf_counter() - start
  if config.agent in OFF_POLICY:
    row = off_policy_row(config, states, metrics, seeds)
  else:
    row = on_policy_row(config, states, metrics, seeds, [k[1] for k in keys])
  env_steps = metrics["episodes"].shape[1] * module.make_learner(config).env_steps_per_update
  print(json.dumps({"agent": config.agent, "seeds": seeds, "env_steps": env_steps,
                    "train_seconds": round(seconds), **row}), flush=True)


if __name__ == "__main__":
  app.run(main)
