r"""Offline GCIVL / HIQL / OTA runs on an OGBench point maze: several seeds vmapped in one process,
then OGBench's five-task evaluation per seed. Writes one JSON file (`--out`) with the config, the
training log and each seed's per-task success rates (the numbers of
`experiments/results/OGBENCH.md`).

Make the dataset first (OGBench's collection protocol, regenerated locally):

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=/tmp/ogb/data/pointmaze-medium-navigate-v0.npz --seed=0

then, from the repository root:

  python -m experiments.ogbench_runs --agent=ota --env=pointmaze-medium-navigate-v0 \
      --dataset=/tmp/ogb/data/pointmaze-medium-navigate-v0.npz \
      --updates=2000 --seeds=3 --eval_episodes=20 --out=medium_ota.json

Defaults are the reduced budget of OGBENCH.md (batch 256, 256x2 networks); everything else is the
agent's `get_config` (OGBench's hyperparameters), with `discount=0.995` on giant mazes as in
OGBench's `hyperparameters.sh`. Any other field: `--set=field=value` (repeatable; Python
literals, e.g. `--set=expectile=0.8 --set=actor_hidden_dims=(512,512,512)`).

Seed i is index i of `jax.random.split(jax.random.key(0), seeds)` and is evaluated with
`evaluate_tasks(..., seed=i)`. `--deadline` (Unix time) stops training at the first chunk
boundary past it; the updates actually done are recorded.
"""

import ast
import json
import os
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("agent", "gcivl", ["gcivl", "hiql", "ota"], "Agent.")
flags.DEFINE_string("env", "pointmaze-medium-navigate-v0", "OGBench point-maze dataset name.")
flags.DEFINE_string("dataset", None, "Training .npz made by experiments.make_dataset (its "
                    "-val.npz companion is used when present).", required=True)
flags.DEFINE_integer("updates", 2000, "Gradient updates per seed.")
flags.DEFINE_integer("seeds", 1, "Seeds trained together (vmapped) in this process.")
flags.DEFINE_integer("eval_episodes", 20, "Evaluation episodes per task and seed (OGBench: 50).")
flags.DEFINE_string("out", None, "Output JSON path.", required=True)
flags.DEFINE_integer("batch_size", 256, "Batch size (OGBench: 1024).")
flags.DEFINE_list("hidden_dims", ["256", "256"],
                  "Hidden sizes of the value and actor networks (OGBench: 512,512,512).")
flags.DEFINE_integer("log_every", 250, "Updates per jitted chunk, i.e. per progress line.")
flags.DEFINE_float("deadline", None, "Unix time: stop training at the first chunk boundary past "
                   "it (default: no deadline).")
flags.DEFINE_multi_string("set", [], "Config override field=value (a Python literal); repeatable.")


def fail(message: str, code: int = 2) -> None:
  """One line on stderr, no traceback."""
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(code)


def check_inputs() -> None:
  """Everything that can be checked before JAX starts: names, counts, the dataset, the output."""
  from hrljax.data import pointmaze
  try:
    pointmaze.parse_name(FLAGS.env)
  except ValueError as error:
    fail(f"--{error}")  # the message starts with "env: "
  make = f"python -m experiments.make_dataset --env={FLAGS.env} --out={FLAGS.dataset}"
  if not FLAGS.dataset.endswith(".npz"):
    fail(f"--dataset: expected a .npz file made by experiments.make_dataset, got "
         f"{FLAGS.dataset!r}; make one with: {make}")
  if not os.path.isfile(FLAGS.dataset):
    fail(f"--dataset: no file at {FLAGS.dataset!r}; make it with: {make}")
  for name in ("updates", "seeds", "eval_episodes", "batch_size", "log_every"):
    if getattr(FLAGS, name) < 1:
      fail(f"--{name}: expected a positive integer, got {getattr(FLAGS, name)}")
  try:
    hidden = tuple(int(d) for d in FLAGS.hidden_dims)
  except ValueError:
    hidden = ()
  if not hidden or min(hidden) < 1:
    fail(f"--hidden_dims: expected positive integers like 256,256, got {FLAGS.hidden_dims}")
  out_dir = os.path.dirname(os.path.abspath(FLAGS.out))
  if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
    fail(f"--out: cannot write into {out_dir!r}")


def make_config(module):
  """The agent's config with this script's budget and the `--set` overrides applied."""
  c = module.get_config()
  c.env_name, c.dataset_path, c.num_updates = FLAGS.env, FLAGS.dataset, FLAGS.updates
  c.batch_size = FLAGS.batch_size
  c.value_hidden_dims = c.actor_hidden_dims = tuple(int(d) for d in FLAGS.hidden_dims)
  c.eval_episodes = FLAGS.eval_episodes
  if "giant" in FLAGS.env:
    c.discount = 0.995  # OGBench hyperparameters.sh for giant mazes
  for item in FLAGS.set:
    field, sep, text = item.partition("=")
    if not sep or field not in c:
      fail(f"--set: expected field=value with a field of the {FLAGS.agent} config, got {item!r}")
    try:
      c[field] = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError) as error:
      fail(f"--set {field}: cannot use {text!r} ({error})")
  try:
    module.validate_config(c)
  except ValueError as error:
    fail(str(error))
  return c


def main(argv):
  if len(argv) > 1:
    fail(f"unexpected arguments {argv[1:]} (every setting is a --flag)")
  check_inputs()

  import jax
  import numpy as np
  from hrljax.agents import get, gcivl

  module = get(FLAGS.agent)
  c = make_config(module)
  learner = module.make_learner(c)
  seeds, chunk = FLAGS.seeds, min(FLAGS.log_every, FLAGS.updates)

  runners = {}

  def run(state, length):
    if length not in runners:  # one compilation per chunk length (the last may be shorter)
      runners[length] = jax.jit(jax.vmap(lambda s: jax.lax.scan(
          lambda st, _: learner.step(st), s, None, length=length)))
    return runners[length](state)

  state = jax.jit(jax.vmap(learner.init))(jax.random.split(jax.random.key(0), seeds))
  print(f"{FLAGS.agent} on {FLAGS.env}: {FLAGS.updates} updates x {seeds} seed(s), "
        f"batch {c.batch_size}, hidden {tuple(c.value_hidden_dims)}, discount {c.discount}",
        flush=True)
  t0, c0 = time.time(), time.process_time()
  log, done = [], 0
  while done < FLAGS.updates:
    length = min(chunk, FLAGS.updates - done)
    state, metrics = run(state, length)
    done += length
    row = {k: float(np.mean(v[:, -1])) for k, v in metrics.items()}
    row.update(update=done, seconds=time.time() - t0, cpu=time.process_time() - c0,
               load=os.getloadavg()[0])
    log.append(row)
    print(json.dumps({k: round(v, 4) for k, v in row.items()}), flush=True)
    if FLAGS.deadline is not None and time.time() > FLAGS.deadline and done < FLAGS.updates:
      print(f"deadline reached: stopping at {done} of {FLAGS.updates} updates", flush=True)
      break

  results = {"agent": FLAGS.agent, "env": FLAGS.env, "dataset": FLAGS.dataset, "updates": done,
             "seeds_vmapped": seeds, "train_seconds": time.time() - t0,
             "config": json.loads(c.to_json_best_effort()),
             "eval_episodes_per_task": FLAGS.eval_episodes, "seeds": []}
  for s in range(seeds):
    agent = jax.tree.map(lambda x: x[s], state.agent)
    print(f"evaluating seed {s + 1}/{seeds}: 5 tasks x {FLAGS.eval_episodes} episodes ...",
          flush=True)
    t1 = time.time()
    r = gcivl.evaluate_tasks(agent, c, num_episodes=FLAGS.eval_episodes, seed=s)
    r["eval_seconds"] = time.time() - t1
    tasks = " / ".join(f"{100 * r[f'task{k}_success']:.0f}" for k in range(1, 6)
                       if f"task{k}_success" in r)
    print(f"seed {s + 1}/{seeds}: success {100 * r['success']:.0f}% (tasks {tasks}), "
          f"{r['eval_seconds']:.0f} s", flush=True)
    results["seeds"].append(r)
  results["log"] = log
  with open(FLAGS.out, "w") as f:
    json.dump(results, f, indent=1)
  mean = 100 * np.mean([r["success"] for r in results["seeds"]])
  print(f"wrote {FLAGS.out}: mean success {mean:.0f}% over {seeds} seed(s)", flush=True)


if __name__ == "__main__":
  app.run(main)
