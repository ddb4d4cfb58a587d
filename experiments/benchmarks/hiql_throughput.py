"""HIQL update throughput, side by side with OGBench's own JAX HIQL.

  python -m experiments.benchmarks.hiql_throughput --reference_path=<ogbench checkout>/impls

times the jitted update of `hrljax.agents.hiql` (one Adam step on the joint value + low actor +
high actor loss, then the Polyak step) on a fixed random batch, after compile, and the same for
OGBench's `impls/agents/hiql.py` (`HIQLAgent.update`): same batch size (1024), same networks
(OGBench's `get_config`: 512x3 MLPs with LayerNorm, rep_dim 10), same batch shapes (pointmaze:
observations, goals and actions of dimension 2), the same random batch on both sides.

The reference is imported from a local copy of OGBench's `impls/` folder at run time (nothing
of it is in this repository), in a worker subprocess: its top-level packages `agents` and
`utils` would clash with this repository's names. It runs on our jax/flax versions as is (no
compatibility shim). The worker stays alive and the two sides are timed in interleaved rounds
(ours, then the reference, `--rounds` times), each round `--updates` update calls ending in
`block_until_ready`, so a change of load on a shared machine hits both alike. Prints one JSON
line: updates per second of each side (best round and median round; and per CPU second of its
process, which other jobs on a shared machine disturb less), their ratios (ours / OGBench),
compile times and the parameter counts (equal when the networks match).

Without `--reference_path`, only our side is timed.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags (defined only when run as a program, so importing never redefines)."""
  flags.DEFINE_string("reference_path", None, "OGBench's impls/ folder (holds agents/hiql.py).")
  flags.DEFINE_integer("batch_size", 1024, "Batch size of both sides.")
  flags.DEFINE_integer("obs_dim", 2, "Observation (and goal) dimension; pointmaze: 2.")
  flags.DEFINE_integer("action_dim", 2, "Action dimension; pointmaze: 2.")
  flags.DEFINE_integer("updates", 20, "Update calls per timed round.")
  flags.DEFINE_integer("rounds", 7, "Interleaved timed rounds of each side.")
  flags.DEFINE_integer("seed", 0, "Seed of the batch and of the parameters.")
  flags.DEFINE_bool("worker", False, "Internal: run as the reference worker process.")


BATCH_KEYS = (
  "observations",
  "next_observations",
  "actions",
  "rewards",
  "masks",
  "value_goals",
  "low_actor_goals",
  "high_actor_goals",
  "high_actor_targets",
)


def random_batch(batch_size: int, obs_dim: int, action_dim: int, seed: int) -> dict:
  """A NumPy batch with the fields and shapes of OGBench's HGCDataset.sample, same on both sides."""
  import numpy as np

  rng = np.random.default_rng(seed)
  vec = lambda dim: rng.standard_normal((batch_size, dim)).astype(np.float32)  # noqa: E731
  masks = (rng.random(batch_size) < 0.9).astype(np.float32)
  return {
    "observations": vec(obs_dim),
    "next_observations": vec(obs_dim),
    "actions": np.clip(vec(action_dim), -1.0, 1.0),
    "rewards": masks - 1.0,
    "masks": masks,
    "value_goals": vec(obs_dim),
    "low_actor_goals": vec(obs_dim),
    "high_actor_goals": vec(obs_dim),
    "high_actor_targets": vec(obs_dim),
  }


def param_count(tree) -> int:
  import jax

  return int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))


class Timer:
  """Compiles one update function `state -> state` and times rounds of calls to it."""

  def __init__(self, update, state):
    import jax

    start = time.perf_counter()
    self._update = jax.jit(update).lower(state).compile()
    self.compile_seconds = time.perf_counter() - start
    self._state = jax.block_until_ready(self._update(state))  # warm-up

  def round(self, updates: int) -> tuple:
    """Runs `updates` calls; returns (wall seconds, CPU seconds of this process, all threads,
    its minor page faults, its kernel-mode CPU seconds)."""
    import jax

    start, cpu_start = time.perf_counter(), time.process_time()
    usage_start = resource.getrusage(resource.RUSAGE_SELF)
    state = self._state
    for _ in range(updates):
      state = self._update(state)
    self._state = jax.block_until_ready(state)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (
      time.perf_counter() - start,
      time.process_time() - cpu_start,
      usage.ru_minflt - usage_start.ru_minflt,
      usage.ru_stime - usage_start.ru_stime,
    )


def ours_timer(batch: dict, config_overrides: dict, seed: int):
  """Our HIQL: `HIQLAgent.update` on the batch; returns (Timer, parameter count)."""
  import jax
  import jax.numpy as jnp
  from hrljax.agents import hiql

  config = hiql.get_config()
  for name, value in config_overrides.items():
    setattr(config, name, value)
  obs_dim = batch["observations"].shape[-1]
  action_dim = batch["actions"].shape[-1]
  agent = hiql.HIQLAgent.create(jax.random.key(seed), obs_dim, action_dim, config)
  device_batch = {k: jnp.asarray(v) for k, v in batch.items()}
  return Timer(lambda a: a.update(device_batch)[0], agent), param_count(agent.params)


def reference_timer(reference_path: str, batch: dict, seed: int):
  """OGBench's HIQL (`impls/agents/hiql.py`): `HIQLAgent.update`; returns (Timer, params)."""
  import jax.numpy as jnp
  import numpy as np

  if not os.path.exists(os.path.join(reference_path, "agents", "hiql.py")):
    raise ValueError(
      f"reference_path: expected OGBench's impls/ folder containing "
      f"agents/hiql.py, got {reference_path!r}"
    )
  sys.path.insert(0, reference_path)
  from agents.hiql import HIQLAgent, get_config  # pylint: disable=import-outside-toplevel

  config = get_config()
  example_obs = np.zeros((1, batch["observations"].shape[-1]), np.float32)
  example_actions = np.zeros((1, batch["actions"].shape[-1]), np.float32)
  agent = HIQLAgent.create(seed, example_obs, example_actions, config)
  device_batch = {k: jnp.asarray(v) for k, v in batch.items()}
  # Its `update` is already a jitted method; the Timer's jit around it compiles the same program.
  params = dict(agent.network.params)
  params.pop("modules_target_value")
  return Timer(lambda a: a.update(device_batch)[0], agent), param_count(params)


def worker() -> None:
  """Reference side: builds and compiles, then answers `run <updates>` lines with seconds."""
  batch = random_batch(FLAGS.batch_size, FLAGS.obs_dim, FLAGS.action_dim, FLAGS.seed)
  timer, params = reference_timer(FLAGS.reference_path, batch, FLAGS.seed)
  print(json.dumps({"compile_seconds": timer.compile_seconds, "params": params}), flush=True)
  for line in sys.stdin:
    command, _, count = line.strip().partition(" ")
    if command != "run":
      break
    print(json.dumps({"seconds": timer.round(int(count))}), flush=True)


def start_worker() -> subprocess.Popen:
  """The reference worker, in OGBench's folder and without this repository on its path."""
  args = [
    sys.executable,
    os.path.abspath(__file__),
    "--worker",
    f"--reference_path={os.path.abspath(FLAGS.reference_path)}",
    f"--batch_size={FLAGS.batch_size}",
    f"--obs_dim={FLAGS.obs_dim}",
    f"--action_dim={FLAGS.action_dim}",
    f"--seed={FLAGS.seed}",
  ]
  env = dict(os.environ)
  # Dependencies installed elsewhere stay on the path; this repository does not (OGBench's
  # `agents` and `utils` would clash with its names).
  repository = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  kept = [
    p for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != repository
  ]
  if kept:
    env["PYTHONPATH"] = os.pathsep.join(kept)
  return subprocess.Popen(
    args,
    cwd=FLAGS.reference_path,
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    text=True,
    env=env,
  )


def summarize(rounds: list, updates: int) -> dict:
  """Rates from `Timer.round`'s (wall, cpu, minor faults, kernel seconds) per round: best and
  median over the rounds. The page faults and the kernel time per update show what fresh memory
  costs the update (`HIQL.md`, "Where the page faults come from")."""
  rates = [updates / r[0] for r in rounds]
  cpu_rates = [updates / r[1] for r in rounds]
  return {
    "updates_per_second_best": max(rates),
    "updates_per_second_median": statistics.median(rates),
    "updates_per_cpu_second_median": statistics.median(cpu_rates),
    "minor_page_faults_per_update_median": statistics.median(r[2] / updates for r in rounds),
    "kernel_seconds_per_update_median": statistics.median(r[3] / updates for r in rounds),
    "round_wall_cpu_seconds": [r[:2] for r in rounds],
  }


def main(argv) -> None:
  del argv
  if FLAGS.worker:
    worker()
    return
  for name in ("batch_size", "obs_dim", "action_dim", "updates", "rounds"):
    if getattr(FLAGS, name) < 1:
      sys.exit(f"error: --{name}: expected an integer >= 1, got {getattr(FLAGS, name)}")
  import jax

  batch = random_batch(FLAGS.batch_size, FLAGS.obs_dim, FLAGS.action_dim, FLAGS.seed)
  process = start_worker() if FLAGS.reference_path else None
  ours, our_params = ours_timer(batch, {"batch_size": FLAGS.batch_size}, FLAGS.seed)
  result = {
    "batch_size": FLAGS.batch_size,
    "obs_dim": FLAGS.obs_dim,
    "action_dim": FLAGS.action_dim,
    "updates_per_round": FLAGS.updates,
    "device": jax.devices()[0].device_kind,
    "jax": jax.__version__,
    "ours": {"compile_seconds": ours.compile_seconds, "params": our_params},
  }
  reference_seconds = []
  if process is not None:
    header = process.stdout.readline()
    if not header:
      sys.exit("error: the OGBench worker failed to start (see its stderr above)")
    result["ogbench"] = json.loads(header)
  our_seconds = []
  for _ in range(FLAGS.rounds):
    our_seconds.append(ours.round(FLAGS.updates))
    if process is not None:
      process.stdin.write(f"run {FLAGS.updates}\n")
      process.stdin.flush()
      reference_seconds.append(json.loads(process.stdout.readline())["seconds"])
  result["ours"].update(summarize(our_seconds, FLAGS.updates))
  if process is not None:
    process.stdin.write("stop\n")
    process.stdin.close()
    process.wait(timeout=60)
    result["ogbench"].update(summarize(reference_seconds, FLAGS.updates))
    for stat in ("second_best", "second_median", "cpu_second_median"):
      key = f"updates_per_{stat}"
      result[f"ratio_{stat}"] = result["ours"][key] / result["ogbench"][key]
  print(json.dumps(result))


if __name__ == "__main__":
  define_flags()
  app.run(main)
