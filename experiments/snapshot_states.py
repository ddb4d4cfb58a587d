"""Collects teacher states for snapshot resets from a trained run.

  python -m experiments.snapshot_states --run=runs/ppo_fourrooms --out=runs/teacher_states.npz \
      [--num_envs=16] [--num_steps=256] [--seed=0] [--deterministic]

Loads the run (`hrljax.load.load_run`: its config and latest checkpoint, or `--step`), steps its
environment (the run's `env_name` and `env_kwargs`, without any snapshot resets of its own) with
the run's agent for `--num_steps` steps of `--num_envs` environments, and writes every state the
agent acted from to `--out` (`hrljax.envs.snapshot_reset.save_states`), ready for
`config.env_kwargs.snapshot_reset.path`. The agent acts with `agent.act(obs, key)` (sampling, or
its mode with `--deterministic` where `act` takes `deterministic`), or, for option-critic, with
its running options.
"""

import inspect
import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("run", None, "Workdir of the trained teacher run.", required=True)
  flags.DEFINE_string("out", None, "Output .npz path of the teacher states.", required=True)
  flags.DEFINE_integer("num_envs", 16, "Environments stepped in parallel.")
  flags.DEFINE_integer("num_steps", 256, "Steps of each environment.")
  flags.DEFINE_integer("seed", 0, "Seed of the resets and the teacher's actions.")
  flags.DEFINE_integer("run_seed", None, "Which of the run's seeds acts (default: its first).")
  flags.DEFINE_integer("step", None, "Checkpointed update to load (default: the latest).")
  flags.DEFINE_bool("deterministic", False, "Act with the policy's mode instead of sampling.")


def check_arguments(run: str, out: str, num_envs: int, num_steps: int) -> None:
  """ValueError naming the first argument that cannot work (`--name: expected ..., got ...`)."""
  if not os.path.isdir(run):
    raise ValueError(f"--run: expected a run directory, got {run!r} (no such directory)")
  directory = os.path.dirname(os.path.abspath(out))
  if not out.endswith(".npz") or not os.path.isdir(directory):
    raise ValueError(f"--out: expected a path ending in .npz in an existing directory, got {out!r}")
  for name, value in (("num_envs", num_envs), ("num_steps", num_steps)):
    if value < 1:
      raise ValueError(f"--{name}: expected an integer >= 1, got {value!r}")


def teacher_policy(agent, num_envs: int, deterministic: bool):
  """`(act_fn, memory)` for `snapshot_reset.collect_states`: `agent.act` over a batch, carrying
  option-critic's running options (-1: none yet) where `act` takes an `option`."""
  import jax.numpy as jnp

  parameters = inspect.signature(agent.act).parameters
  if "option" in parameters:

    def act_with_options(option, obs, key):
      actions, extras = agent.act(obs, option, key)
      return actions, extras.option

    return act_with_options, jnp.full((num_envs,), -1, jnp.int32)
  if "key" not in parameters:
    raise ValueError(
      f"--run: expected an agent whose act(obs, key, ...) returns actions, got act"
      f"{inspect.signature(agent.act)} of {type(agent).__name__}"
    )
  keywords = {"deterministic": True} if deterministic and "deterministic" in parameters else {}

  def act(memory, obs, key):
    actions = agent.act(obs, key, **keywords)
    return (actions[0] if isinstance(actions, tuple) else actions), memory

  return act, jnp.zeros((num_envs,), jnp.int32)


def collect(run_dir: str, out: str, num_envs: int, num_steps: int, seed: int, **options) -> int:
  """Writes the teacher states of the run in `run_dir` to `out`; returns their number.

  `options`: `run_seed`, `step` (see the flags) and `deterministic`."""
  check_arguments(run_dir, out, num_envs, num_steps)
  import jax

  from hrljax import envs, load
  from hrljax.envs import snapshot_reset

  try:
    run = load.load_run(run_dir, step=options.get("step"))
  except (ValueError, FileNotFoundError) as error:
    raise ValueError(f"--run: {error}") from None
  agent = run.seed_state(options.get("run_seed")).agent
  env_kwargs = {k: v for k, v in run.config.env_kwargs.items() if k != snapshot_reset.OPTION}
  env, env_params = envs.make(run.config.env_name, **env_kwargs)
  act, memory = teacher_policy(agent, num_envs, options.get("deterministic", False))
  collect_fn = jax.jit(
    lambda key: snapshot_reset.collect_states(
      env, env_params, act, memory, key, num_envs, num_steps
    )
  )
  states = collect_fn(jax.random.key(seed))
  snapshot_reset.save_states(out, states, run.config.env_name, env_kwargs)
  return num_envs * num_steps


def main(argv):
  del argv
  try:
    count = collect(
      FLAGS.run,
      FLAGS.out,
      FLAGS.num_envs,
      FLAGS.num_steps,
      FLAGS.seed,
      run_seed=FLAGS.run_seed,
      step=FLAGS.step,
      deterministic=FLAGS.deterministic,
    )
  except (ValueError, FileNotFoundError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  print(f"wrote {FLAGS.out}: {count} teacher states", file=sys.stderr)


if __name__ == "__main__":
  define_flags()
  app.run(main)
