r"""Offline GCIVL / HIQL / OTA runs on an OGBench point maze: several seeds vmapped in one process,
then OGBench's five-task evaluation per seed. Writes one JSON file (`--out`) with the config, the
training log and each seed's per-task success rates (the numbers of
`experiments/results/OGBENCH.md`).

Make the dataset first (OGBench's collection protocol, regenerated locally):

  python -m experiments.make_dataset --env=pointmaze-medium-navigate-v0 \
      --out=data/pointmaze-medium-navigate-v0.npz --seed=0

then, from the repository root:

  python -m experiments.ogbench_runs --agent=ota --env=pointmaze-medium-navigate-v0 \
      --dataset=data/pointmaze-medium-navigate-v0.npz \
      --updates=2000 --seeds=3 --eval_episodes=20 --out=medium_ota.json

Defaults are the reduced budget of OGBENCH.md (batch 256, 256x2 networks); everything else is the
agent's `get_config` (OGBench's hyperparameters), with `discount=0.995` on giant mazes as in
OGBench's `hyperparameters.sh`. Any other field: `--set=field=value` (repeatable; Python
literals, e.g. `--set=expectile=0.8 --set=actor_hidden_sizes=(512,512,512)`).

Seed i is index i of `jax.random.split(jax.random.key(0), seeds)` and is evaluated with
`hrljax.ogbench_evaluation.evaluate_tasks(..., seed=i)`. `--deadline` (Unix time) stops training at the first chunk
boundary past it; the updates actually done are recorded.

Long runs: `--workdir` saves an orbax checkpoint of every seed's state every
`--checkpoint_every` updates (with the log and the evaluations so far); the same command started
again resumes from the latest one and continues exactly as the uninterrupted run would (the
state carries its own PRNG key). Changing a setting that shapes the run (agent, dataset, seeds,
batch, networks, chunk length, `--set`) is refused; `--updates` and `--deadline` may change.
`--eval_every` adds mid-run five-task evaluations (`--mid_eval_episodes` per task), written to
`--out` as they happen ("finished": false until the final evaluation).

Every evaluation also records `hrljax.ogbench_evaluation.path_values`: for each task, the value
along the maze oracle's shortest cell path from start to goal and the greedy action's direction
there, a diagnostic of value quality that needs no simulator (OGBENCH.md, "OTA vs HIQL on
giant").
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
flags.DEFINE_string("workdir", None, "Checkpoint directory: an orbax checkpoint of every seed "
                    "every --checkpoint_every updates; started again with the same flags, the run "
                    "resumes from the latest one (default: no checkpoints).")
flags.DEFINE_integer("checkpoint_every", 1000, "Updates between checkpoints (a multiple of "
                     "--log_every).")
flags.DEFINE_integer("eval_every", 0, "Updates between mid-run five-task evaluations (a multiple "
                     "of --log_every; 0: only the final one).")
flags.DEFINE_integer("mid_eval_episodes", 5, "Evaluation episodes per task and seed of the "
                     "mid-run evaluations.")
flags.DEFINE_integer("eval_max_episode_steps", None, "Shorter evaluation episodes (tests only; "
                     "default: the registered 1000 steps).")
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
  for name in ("updates", "seeds", "eval_episodes", "batch_size", "log_every", "checkpoint_every",
               "mid_eval_episodes"):
    if getattr(FLAGS, name) < 1:
      fail(f"--{name}: expected a positive integer, got {getattr(FLAGS, name)}")
  if FLAGS.eval_every < 0:
    fail(f"--eval_every: expected 0 or a positive integer, got {FLAGS.eval_every}")
  if FLAGS.eval_max_episode_steps is not None and FLAGS.eval_max_episode_steps < 1:
    fail(f"--eval_max_episode_steps: expected a positive integer, got "
         f"{FLAGS.eval_max_episode_steps}")
  for name in ("checkpoint_every", "eval_every"):
    if getattr(FLAGS, name) % FLAGS.log_every:
      fail(f"--{name}: expected a multiple of --log_every={FLAGS.log_every}, got "
           f"{getattr(FLAGS, name)}")
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
  c.value_hidden_sizes = c.actor_hidden_sizes = tuple(int(d) for d in FLAGS.hidden_dims)
  c.eval_episodes = FLAGS.eval_episodes
  if "giant" in FLAGS.env:
    c.gamma = 0.995  # OGBench hyperparameters.sh for giant mazes
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


RESUME_FLAGS = ("agent", "env", "dataset", "seeds", "batch_size", "hidden_dims", "log_every",
                "set")


def run_settings() -> dict:
  """The flags a resumed run must share with the run that wrote the checkpoints."""
  return {name: getattr(FLAGS, name) for name in RESUME_FLAGS}


def check_resumable(saved: dict) -> None:
  """Exits with the differing flags when `--workdir` holds checkpoints of another run."""
  now = json.loads(json.dumps(run_settings()))  # lists and tuples compare as saved (JSON)
  changed = {k: (saved.get(k), now[k]) for k in now if saved.get(k) != now[k]}
  if changed:
    listed = ", ".join(f"--{k} was {old!r}, now {new!r}" for k, (old, new) in changed.items())
    fail(f"--workdir: {FLAGS.workdir!r} holds checkpoints of a different run ({listed}); "
         f"use another --workdir or the same flags")


def make_runner(learner):
  """`run(state, n)`: n updates of every seed (vmapped) in one jitted `lax.scan`."""
  import jax
  runners = {}

  def run(state, length):
    if length not in runners:  # one compilation per chunk length (the last may be shorter)
      runners[length] = jax.jit(jax.vmap(lambda s: jax.lax.scan(
          lambda st, _: learner.step(st), s, None, length=length)))
    return runners[length](state)
  return run


def evaluate_seeds(state, c, episodes: int, label: str) -> list:
  """OGBench's five-task evaluation of every seed (seed i with `seed=i`), with a progress line."""
  import jax
  from hrljax import ogbench_evaluation
  out = []
  for s in range(FLAGS.seeds):
    agent = jax.tree.map(lambda x: x[s], state.agent)
    start = time.time()
    r = ogbench_evaluation.evaluate_tasks(agent, c, num_episodes=episodes, seed=s,
                                          max_episode_steps=FLAGS.eval_max_episode_steps)
    r["eval_seconds"] = time.time() - start
    r.update(ogbench_evaluation.path_values(agent, c.env_name))
    tasks = " / ".join(f"{100 * r[f'task{k}_success']:.0f}" for k in range(1, 6))
    print(f"{label} seed {s + 1}/{FLAGS.seeds}: success {100 * r['success']:.0f}% "
          f"(tasks {tasks}; {episodes} episodes/task), {r['eval_seconds']:.0f} s", flush=True)
    out.append(r)
  return out


def write_results(c, done: int, seconds: float, log: list, evaluations: list, final) -> None:
  """The output JSON: settings, training log, mid-run evaluations, and the final evaluation
  (`seeds`, empty until the run has ended)."""
  results = {"agent": FLAGS.agent, "env": FLAGS.env, "dataset": FLAGS.dataset, "updates": done,
             "seeds_vmapped": FLAGS.seeds, "train_seconds": seconds,
             "config": json.loads(c.to_json_best_effort()),
             "eval_episodes_per_task": FLAGS.eval_episodes, "seeds": final or [],
             "finished": final is not None, "evaluations": evaluations, "log": log}
  with open(FLAGS.out, "w") as f:
    json.dump(results, f, indent=1)


def main(argv):
  if len(argv) > 1:
    fail(f"unexpected arguments {argv[1:]} (every setting is a --flag)")
  check_inputs()

  import jax
  import numpy as np
  from hrljax import checkpoint as ckpt
  from hrljax.agents import get

  module = get(FLAGS.agent)
  c = make_config(module)
  learner = module.make_learner(c)
  seeds, chunk = FLAGS.seeds, min(FLAGS.log_every, FLAGS.updates)
  run = make_runner(learner)

  state = jax.jit(jax.vmap(learner.init))(jax.random.split(jax.random.key(0), seeds))
  log, evaluations, done, spent = [], [], 0, 0.0
  checkpointer = None
  if FLAGS.workdir is not None:
    checkpointer = ckpt.Checkpointer(os.path.join(FLAGS.workdir, "checkpoints"))
    if checkpointer.latest_step() is not None:
      saved = checkpointer.restore_metadata()
      check_resumable(saved["settings"])
      state = checkpointer.restore(like=state)
      done, spent = saved["update"], saved["train_seconds"]
      log, evaluations = saved["log"], saved["evaluations"]
      print(f"resumed from the checkpoint at update {done} in {checkpointer.directory}",
            flush=True)
  print(f"{FLAGS.agent} on {FLAGS.env}: {FLAGS.updates} updates x {seeds} seed(s), "
        f"batch {c.batch_size}, hidden {tuple(c.value_hidden_sizes)}, gamma {c.gamma}",
        flush=True)
  t0, c0 = time.time() - spent, time.process_time()
  while done < FLAGS.updates:
    length = min(chunk, FLAGS.updates - done)
    state, metrics = run(state, length)
    done += length
    row = {k: float(np.mean(v[:, -1])) for k, v in metrics.items()}
    row.update(update=done, seconds=time.time() - t0, cpu=time.process_time() - c0,
               load=os.getloadavg()[0])
    log.append(row)
    print(json.dumps({k: round(v, 4) for k, v in row.items()}), flush=True)
    if FLAGS.eval_every and done % FLAGS.eval_every == 0 and done < FLAGS.updates:
      evaluations.append({"update": done, "eval_episodes_per_task": FLAGS.mid_eval_episodes,
                          "seeds": evaluate_seeds(state, c, FLAGS.mid_eval_episodes,
                                                  f"update {done}:")})
      # the log's `seconds` and `train_seconds` count training only
      t0 += sum(r["eval_seconds"] for r in evaluations[-1]["seeds"])
      write_results(c, done, time.time() - t0, log, evaluations, None)
    if checkpointer is not None and (done % FLAGS.checkpoint_every == 0
                                     or done == FLAGS.updates):
      checkpointer.save(done, state, metadata={
          "update": done, "train_seconds": time.time() - t0, "log": log,
          "evaluations": evaluations, "settings": run_settings()})
    if FLAGS.deadline is not None and time.time() > FLAGS.deadline and done < FLAGS.updates:
      print(f"deadline reached: stopping at {done} of {FLAGS.updates} updates", flush=True)
      break
  if checkpointer is not None:
    checkpointer.close()

  final = evaluate_seeds(state, c, FLAGS.eval_episodes, "final:")
  write_results(c, done, time.time() - t0, log, evaluations, final)
  mean = 100 * np.mean([r["success"] for r in final])
  print(f"wrote {FLAGS.out}: mean success {mean:.0f}% over {seeds} seed(s) at {done} updates",
        flush=True)


if __name__ == "__main__":
  app.run(main)
