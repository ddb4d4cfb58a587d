"""Throughput of a whole on-policy training run compiled as one program.

  python -m experiments.benchmarks.throughput --config=experiments/configs/ppo_cartpole.py

prints one JSON line {"env_steps_per_second", "compile_seconds", "final_return", "env_steps", ...}:
trace+compile is timed apart from execution, and the speed is the median over `--reps` executions
after compile (each ending in `block_until_ready`). `env_steps_per_cpu_second` divides by the
process CPU time instead (all threads), which other jobs on a shared machine disturb less.

Side by side with PureJaxRL's PPO (for the same config, interleaved rep by rep in one process):

  python -m experiments.benchmarks.throughput --config=experiments/configs/ppo_cartpole.py \
      --reference=purejaxrl --reference_path=/path/to/purejaxrl-checkout

The reference is imported from a local checkout at run time (nothing of it is in this
repository). Its `wrappers.py` imports brax and navix, which its CartPole PPO does not use: empty
stand-in modules are registered for them. gymnax >= 1.0 returns `(obs, state, reward,
terminated, truncated, info)`, so the reference gets its environment through an adapter that
restores the 5-tuple `(obs, state, reward, done, info)` it was written for.
"""

import json
import os
import statistics
import sys
import time
import types
from typing import Callable

from absl import app, flags
from ml_collections import config_flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
  flags.DEFINE_integer("reps", 5, "Timed executions after compile (the median is reported).")
  flags.DEFINE_enum("reference", "none", ["none", "purejaxrl"], "Reference run to interleave.")
  flags.DEFINE_string("reference_path", None, "Root of a local purejaxrl checkout.")
  flags.DEFINE_integer("seed", 0, "PRNG seed of the measured runs.")
  flags.DEFINE_string(
    "profile_dir",
    None,
    "If set, also trace one execution of each implementation (config.total_timesteps = "
    "--profile_timesteps) into this directory and print where its time goes (op_profile.py).",
  )
  # 8 PPO CartPole updates: about 430,000 traced events for PureJaxRL, 200,000 for hrljax (the
  # profiler keeps a million).
  flags.DEFINE_integer("profile_timesteps", 4_096, "Env steps of the traced run of --profile_dir.")
  flags.DEFINE_bool(
    "rollout_share",
    False,
    "Also time each implementation with update_epochs=0, interleaved with the measured runs, "
    "and print that run's median over the whole run's: what is left of a program without its "
    "update (its rollout, and whatever of the batch the compiler keeps), as a share of the run.",
  )


def measure(make_train_fn: Callable, key, reps: int, final_return: Callable) -> Callable:
  """Compiles `make_train_fn()` once; returns a function that runs it once and records timings."""
  import jax

  start = time.perf_counter()
  lowered = jax.jit(make_train_fn()).lower(key)
  trace_seconds = time.perf_counter() - start
  compiled = lowered.compile()
  compile_seconds = time.perf_counter() - start
  result = {
    "compile_seconds": compile_seconds,
    "trace_seconds": trace_seconds,
    "run_seconds": [],
    "cpu_seconds": [],
  }

  def run_once():
    start, cpu_start = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(compiled(key))
    result["run_seconds"].append(time.perf_counter() - start)
    result["cpu_seconds"].append(time.process_time() - cpu_start)
    result["final_return"] = final_return(out)
    return result

  return run_once


def hrljax_final_return(out) -> float:
  """Mean return of the episodes that ended in the last 10% of updates."""
  import numpy as np

  metrics = out[1]
  tail = max(1, len(metrics["episodes"]) // 10)
  episodes = np.asarray(metrics["episodes"][-tail:]).sum()
  return float(np.asarray(metrics["episode_return_sum"][-tail:]).sum() / max(episodes, 1))


def purejaxrl_final_return(out) -> float:
  """The same statistic from PureJaxRL's per-step `returned_episode*` info."""
  import numpy as np

  info = out["metrics"]
  tail = max(1, info["returned_episode"].shape[0] // 10)
  done = np.asarray(info["returned_episode"][-tail:])
  returns = np.asarray(info["returned_episode_returns"][-tail:])
  return float((returns * done).sum() / max(done.sum(), 1))


def load_purejaxrl(reference_path: str):
  """Imports `purejaxrl/ppo.py` from a checkout, with stand-ins for unused imports."""
  import gymnax
  import jax.numpy as jnp

  source = os.path.join(reference_path, "purejaxrl")
  if not os.path.exists(os.path.join(source, "ppo.py")):
    raise ValueError(
      f"reference_path: expected a purejaxrl checkout containing purejaxrl/ppo.py, "
      f"got {reference_path!r}"
    )
  for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"):
    module = sys.modules.setdefault(name, types.ModuleType(name))
    module.EpisodeWrapper = module.AutoResetWrapper = object
  sys.modules["brax"].envs = sys.modules["brax.envs"]

  class FiveTupleStep:
    """gymnax >= 1.0 environment seen through the gymnax 0.0.x `step` contract."""

    def __init__(self, env):
      self._env = env

    def __getattr__(self, name):
      return getattr(self._env, name)

    def step(self, key, state, action, params=None):
      obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
      done = terminated | truncated
      return obs, state, reward, done, {"discount": 1.0 - terminated.astype(jnp.float32)}

  def make(name, **kwargs):
    env, params = gymnax.make(name, **kwargs)
    return FiveTupleStep(env), params

  sys.path.insert(0, source)
  import ppo as purejaxrl_ppo  # pylint: disable=import-outside-toplevel

  # The adapter for the reference alone: hrljax's own environments come from gymnax.make.
  purejaxrl_ppo.gymnax = types.SimpleNamespace(**{**vars(gymnax), "make": make})
  return purejaxrl_ppo


def purejaxrl_config(config) -> dict:
  return {
    "LR": config.learning_rate,
    "NUM_ENVS": config.num_envs,
    "NUM_STEPS": config.num_steps,
    "TOTAL_TIMESTEPS": config.total_timesteps,
    "UPDATE_EPOCHS": config.update_epochs,
    "NUM_MINIBATCHES": config.num_minibatches,
    "GAMMA": config.gamma,
    "GAE_LAMBDA": config.gae_lambda,
    "CLIP_EPS": config.clip_epsilon,
    "ENT_COEF": config.entropy_coef,
    "VF_COEF": config.value_coef,
    "MAX_GRAD_NORM": config.max_grad_norm,
    "ACTIVATION": config.activation,
    "ENV_NAME": config.env_name,
    "ANNEAL_LR": config.anneal_lr,
    "DEBUG": False,
  }


def profile_runs(train_fns: dict, keys: dict, directory: str) -> dict:
  """`op_profile.breakdown` of one traced execution of each `train_fns[name]()` (compiled, then
  run once untraced so that the trace holds no first-call work)."""
  import jax

  from experiments.benchmarks import op_profile

  out = {}
  for name, make_train_fn in train_fns.items():
    compiled = jax.jit(make_train_fn()).lower(keys[name]).compile()
    jax.block_until_ready(compiled(keys[name]))
    events = op_profile.trace_events(lambda: compiled(keys[name]), os.path.join(directory, name))
    out[name] = op_profile.breakdown(events)
  return out


def summary(name: str, result: dict, env_steps: int) -> dict:
  median = statistics.median(result["run_seconds"])
  return {
    "implementation": name,
    "env_steps_per_second": env_steps / median,
    # Process CPU time (all threads): steadier than wall time when the machine is shared.
    "env_steps_per_cpu_second": env_steps / statistics.median(result["cpu_seconds"]),
    "compile_seconds": result["compile_seconds"],
    "final_return": result["final_return"],
    "env_steps": env_steps,
    "run_seconds": [round(s, 3) for s in result["run_seconds"]],
  }


def main(argv):
  del argv
  import jax
  from hrljax import agents

  config = FLAGS.config
  if config is None:
    sys.exit("error: --config: expected a config file")
  if FLAGS.reps < 1:
    sys.exit(f"error: --reps: expected an integer >= 1, got {FLAGS.reps}")
  if FLAGS.profile_dir and FLAGS.profile_timesteps < config.num_envs * config.num_steps:
    sys.exit(
      f"error: --profile_timesteps: expected at least one update's env steps "
      f"({config.num_envs * config.num_steps}), got {FLAGS.profile_timesteps}"
    )
  agent = agents.get(config.agent)
  try:
    agent.validate_config(config)
  except ValueError as error:
    sys.exit(f"error: {error}")
  env_steps = (
    config.total_timesteps
    // (config.num_envs * config.num_steps)
    * config.num_envs
    * config.num_steps
  )
  device = jax.devices()[0]
  train_fns = {"hrljax": agent.make_train}
  keys = {"hrljax": jax.random.key(FLAGS.seed)}
  if FLAGS.reference == "purejaxrl":
    if config.agent != "ppo" or not FLAGS.reference_path:
      sys.exit("error: --reference=purejaxrl needs a ppo config and --reference_path")
    reference = load_purejaxrl(FLAGS.reference_path)
    train_fns["purejaxrl"] = lambda config: reference.make_train(purejaxrl_config(config))
    keys["purejaxrl"] = jax.random.PRNGKey(FLAGS.seed)
  final_returns = {"hrljax": hrljax_final_return, "purejaxrl": purejaxrl_final_return}
  runs = {
    name: measure(lambda fn=fn: fn(config), keys[name], FLAGS.reps, final_returns[name])
    for name, fn in train_fns.items()
  }
  no_update_runs = {}
  if FLAGS.rollout_share:  # built directly: validate_config rightly refuses 0 epochs for training
    no_update = config.copy_and_resolve_references()
    no_update.update_epochs = 0
    no_update_runs = {
      name: measure(lambda fn=fn: fn(no_update), keys[name], FLAGS.reps, final_returns[name])
      for name, fn in train_fns.items()
    }
  results, no_update_results = {}, {}
  for rep in range(FLAGS.reps):  # interleaved, so both see the same machine load
    for name, run_once in runs.items():
      results[name] = run_once()
      if name in no_update_runs:
        no_update_results[name] = no_update_runs[name]()
      print(
        f"rep {rep + 1}/{FLAGS.reps} {name}: {results[name]['run_seconds'][-1]:.2f} s",
        file=sys.stderr,
        flush=True,
      )
  lines = {name: summary(name, result, env_steps) for name, result in results.items()}
  for name, result in no_update_results.items():
    lines[name]["rollout_share"] = round(
      statistics.median(result["run_seconds"]) / statistics.median(results[name]["run_seconds"]),
      3,
    )
  for line in lines.values():
    line.update(
      config=config.agent + ":" + config.env_name,
      device=device.device_kind,
      platform=device.platform,
      num_devices=1,
    )
    print(json.dumps(line))
  if "purejaxrl" in lines:
    print(
      json.dumps(
        {
          "speed_ratio_hrljax_over_purejaxrl": lines["hrljax"]["env_steps_per_second"]
          / lines["purejaxrl"]["env_steps_per_second"],
          "cpu_speed_ratio_hrljax_over_purejaxrl": lines["hrljax"]["env_steps_per_cpu_second"]
          / lines["purejaxrl"]["env_steps_per_cpu_second"],
          "compile_ratio_hrljax_over_purejaxrl": lines["hrljax"]["compile_seconds"]
          / lines["purejaxrl"]["compile_seconds"],
        }
      )
    )
  if FLAGS.profile_dir:
    traced = config.copy_and_resolve_references()
    traced.total_timesteps = FLAGS.profile_timesteps
    fns = {name: (lambda fn=fn: fn(traced)) for name, fn in train_fns.items()}
    updates = traced.total_timesteps // (config.num_envs * config.num_steps)
    for name, profile in profile_runs(fns, keys, FLAGS.profile_dir).items():
      line = {"implementation": name, "profile_updates": updates, **profile}
      line["kernels_per_update"] = round(profile["kernels"] / updates)
      print(json.dumps(line))


if __name__ == "__main__":
  define_flags()
  app.run(main)
