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

The off-policy configs (`sac_`, `recovery_rl_`, `bresa_pointhazard.py`) take the PointHazard
layout as a config file argument (`experiments/configs/pointhazard_layouts.py`; without one, the
fixed layout), e.g. the hazards sampled at every reset (the 64 evaluation episodes then run on 64
sampled layouts, and the evaluation numbers are their means):

  python -m experiments.safety_table \
      --config=experiments/configs/bresa_pointhazard.py:random_hazards --seeds=0,1,2 --sequential

With `--workdir=DIR` each seed's run is also written as `DIR/<config name>_s<seed>/`
(`<config name>-<layout>_s<seed>/` with a layout argument), in the
layout `experiments.train` gives a workdir (`config.json`, `metrics.jsonl` with one training
record per `config.log_every` updates and the evaluation record, the final state in
`checkpoints/`), so that `experiments.plot_safety` draws the return-vs-cost scatter and the
episode path from these runs:

  python -m experiments.safety_table --config=experiments/configs/bresa_pointhazard.py \
      --seeds=0,1,2 --sequential --workdir=/tmp/runs
  python -m experiments.plot_safety --runs=/tmp/runs/bresa_pointhazard_s0,... \
      --path_run=/tmp/runs/bresa_pointhazard_s0
"""

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from hrljax import training
from hrljax.agents import ppo_lagrangian, recovery_rl
from hrljax.checkpoint import Checkpointer
from hrljax.logging import MetricsLogger

OFF_POLICY = ("recovery_rl", "bresa")
ON_POLICY = ("ppo_lagrangian", "shielded_ppo")

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line; defined only when run as a script, so that importing this module (the
  tests do) next to other experiment modules defines no flag twice."""
  config_flags.DEFINE_config_file("config", None, "A *_pointhazard config file.",
                                  lock_config=True)
  flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds, trained together in this process.")
  flags.DEFINE_bool("sequential", False, "Train the seeds one after the other instead of "
                    "vmapped (under vmap the two-rate rollout's lax.cond computes both branches).")
  flags.DEFINE_string("workdir", None, "Also write each seed's run as an experiments.train "
                      "workdir <workdir>/<config name>_s<seed> (for experiments.plot_safety).")


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


def write_workdir(workdir: str, config, seed: int, metrics: dict, evaluation: dict, state,
                  steps_per_update: int) -> str:
  """One seed's run as an `experiments.train` workdir: `config.json` (with `seed`),
  `metrics.jsonl` (a training record per `config.log_every` updates, summarised as
  `training.train` does, then the evaluation record) and the final state in `checkpoints/`.

  `metrics` are this seed's per-update metrics (`[num_updates]` each), `state` its final state.
  """
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({**json.loads(config.to_json_best_effort()), "seed": seed}, f, indent=2,
              sort_keys=True)
  logger = MetricsLogger(workdir)
  num_updates = metrics["episodes"].shape[0]
  for start in range(0, num_updates, config.log_every):
    end = min(start + config.log_every, num_updates)
    sums = {k: v[start:end].sum() for k, v in metrics.items()}
    logger.write({"phase": "train", "update": end, "env_steps": end * steps_per_update,
                  **training.summarize(sums, end - start)})
  logger.write({"phase": "eval", "update": num_updates,
                "env_steps": num_updates * steps_per_update, **evaluation})
  checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=1)
  checkpointer.save(num_updates, state, metadata={"update": num_updates})
  checkpointer.close()
  return workdir


def run_name(config_path: str) -> str:
  """The config file's name, with its `get_config` argument if one was given:
  "bresa_pointhazard" for `.../bresa_pointhazard.py`, "bresa_pointhazard-random_hazards" for
  `.../bresa_pointhazard.py:random_hazards` (the PointHazard layout,
  `experiments/configs/pointhazard_layouts.py`), so that runs on different layouts get
  different workdirs."""
  path, _, argument = config_path.partition(":")
  name = os.path.splitext(os.path.basename(path))[0]
  return f"{name}-{argument}" if argument else name


def seed_workdirs(root: str, config_path: str, seeds: list[int]) -> list[str]:
  """`<root>/<run name>_s<seed>` for each seed; a UsageError if one already holds a run."""
  name = run_name(config_path)
  workdirs = [os.path.join(root, f"{name}_s{seed}") for seed in seeds]
  for workdir in workdirs:
    if os.path.exists(os.path.join(workdir, "metrics.jsonl")):
      raise app.UsageError(f"--workdir: {workdir} already holds a run (metrics.jsonl); expected "
                           "a new directory")
  return workdirs


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
  config = FLAGS.config
  if config is None:
    raise app.UsageError("--config: expected a *_pointhazard config file")
  if config.agent not in OFF_POLICY + ON_POLICY:
    raise app.UsageError(f"--config: expected an agent in {OFF_POLICY + ON_POLICY}, got "
                         f"{config.agent!r}")
  seeds = parse_seeds(FLAGS.seeds)
  module = recovery_rl if config.agent in OFF_POLICY else ppo_lagrangian
  module.validate_config(config)
  workdirs = (seed_workdirs(FLAGS.workdir, config_flags.get_config_filename(FLAGS["config"]),
                           seeds) if FLAGS.workdir else [])
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
  steps_per_update = module.make_learner(config).env_steps_per_update
  env_steps = metrics["episodes"].shape[1] * steps_per_update
  for i, (seed, workdir) in enumerate(zip(seeds, workdirs)):
    evaluation = {k: v for k, v in row[f"seed{seed}"].items() if k.startswith("eval")}
    write_workdir(workdir, config, seed, jax.tree.map(lambda x: x[i], metrics), evaluation,
                  jax.tree.map(lambda x: x[i], states), steps_per_update)
  print(json.dumps({"agent": config.agent, "seeds": seeds, "env_steps": env_steps,
                    "train_seconds": round(seconds), **row}), flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
