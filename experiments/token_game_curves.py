"""Greedy-success curves of a token-game agent, several seeds vmapped in one process.

  python -m experiments.token_game_curves --config=experiments/configs/archer_token_game.py \
      --num_seeds=3 --eval_every=5 --out=/tmp/archer.jsonl --config.critic_updates=50

`--config` is a config file or the name of one in `experiments/configs/` (`archer_token_game`);
any field is a `--config.<field>=` override. Seeds are the keys of
`jax.random.split(jax.random.key(config.seed), num_seeds)`, trained side by side with `jax.vmap`.
Every `eval_every` iterations (and at 0 and at the end) each seed's policy plays
`config.eval_episodes` games with greedy decoding, and one JSON line is written to `--out`:
`iter`, `utterances` (environment interactions per seed), `eval_return` (one success rate per
seed), `eval_return_mean`, and the seeds' per-iteration training metrics named in `METRICS`. The
curves of `--out` and of any `--compare=LABEL=FILE` go to a PNG (`--png`, default `--out` with
`.png`). Without `--config`, only the PNG of the `--compare` files is drawn.

The evaluation games are the same at every evaluation by default (`--fixed_eval_games`: keys
`split(key(EVAL_KEY_OFFSET), num_seeds)`, the games of iteration 0), so a curve shows the policy
changing, not the sampling spread of 256 games (a fixed BC policy on fresh games each time spread
0.61-0.70 on one seed). `--nofixed_eval_games` draws fresh games per evaluation (keys
`split(key(EVAL_KEY_OFFSET + iteration), num_seeds)`), as the curves made before this option did.

Agents whose module offers `warm_start_policy_params(key, config)` (ArCHer) get their
behaviour-cloned start computed as its own compiled program and passed to `init`; see that
function for why.
"""

import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

FLAGS = flags.FLAGS
CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
# Training metrics copied into the JSONL (those the agent reports), per seed.
METRICS = ("q_gap", "q_success", "q_failure", "critic_loss", "advantage", "advantage_std",
           "sequence_log_prob", "entropy", "approx_kl", "policy_loss", "episode_return",
           "actor_trained", "q_gap_fresh", "q_gap_fresh_mean")
# Evaluation keys: key(EVAL_KEY_OFFSET) (fixed games) or key(EVAL_KEY_OFFSET + iteration), split
# per seed.
EVAL_KEY_OFFSET = 10_000


def define_flags() -> None:
  """The command line; defined only when run as a script, so that importing this module (the
  tests do) next to other experiment modules defines no flag twice."""
  flags.DEFINE_integer("num_seeds", 3, "Seeds trained side by side (vmapped).")
  flags.DEFINE_integer("eval_every", 5, "Iterations between greedy evaluations.")
  flags.DEFINE_string("out", None, "JSONL file of the curve (one line per evaluation).")
  flags.DEFINE_string("png", None, "PNG of mean greedy success vs utterances (default: --out "
                      "with .png).")
  flags.DEFINE_multi_string("compare", [], "LABEL=FILE: another curve's JSONL to draw on the PNG.")
  flags.DEFINE_string("warm_start_cache", None,
                      "Directory caching the behaviour-cloned start of agents that offer "
                      "`warm_start_policy_params` (keyed by the seeds and the config fields it "
                      "depends on), so runs differing only in RL settings skip the BC program.")
  flags.DEFINE_boolean("fixed_eval_games", True,
                       "Evaluate on the same games at every evaluation (those of iteration 0); "
                       "false: fresh games per evaluation.")
  flags.DEFINE_string("label", None, "Legend label of --out's curve (default: the agent's name).")
  config_flags.DEFINE_config_file("config", None, "Token-game agent config file or name.",
                                  lock_config=True)


def fail(message: str) -> None:
  """One line on stderr, no traceback."""
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def resolve_config_argument(argv: list) -> list:
  """`--config=NAME` (no path, no .py) becomes `--config=experiments/configs/NAME.py`."""
  resolved = []
  for arg in argv:
    if arg.startswith("--config="):
      value = arg.split("=", 1)[1]
      if value and os.sep not in value and not value.endswith(".py"):
        arg = f"--config={os.path.join(CONFIG_DIR, value + '.py')}"
    resolved.append(arg)
  return resolved


def parse_compare(entries: list) -> tuple[list, list]:
  """`LABEL=FILE` entries as (labels, files); the files must exist."""
  labels, files = [], []
  for entry in entries:
    label, sep, path = entry.partition("=")
    if not sep or not label or not path:
      fail(f"--compare: expected LABEL=FILE, got {entry!r}")
    if not os.path.exists(path):
      fail(f"--compare: no file at {path!r}")
    labels.append(label)
    files.append(path)
  return labels, files


def with_mean_success(path: str, scratch_dir: str) -> str:
  """`path`, or, if its rows carry per-seed `eval_return` lists but no `eval_return_mean` (curves
  written before that field existed), a copy with the mean added, written next to the PNG."""
  from hrljax.logging import read_jsonl
  rows = read_jsonl(path)
  if all("eval_return_mean" in row for row in rows):
    return path
  copy = os.path.join(scratch_dir, os.path.basename(path) + ".with_mean.jsonl")
  with open(copy, "w") as f:
    for row in rows:
      returns = row.get("eval_return")
      if isinstance(returns, list) and returns:
        row["eval_return_mean"] = sum(returns) / len(returns)
      f.write(json.dumps(row) + "\n")
  return copy


def curve_row(iteration: int, utterances: int, eval_return, metrics: dict) -> dict:
  """One JSONL line: the evaluation of every seed and its training metrics, rounded."""
  import numpy as np
  returns = np.asarray(eval_return, np.float64)
  row = {"iter": iteration, "utterances": utterances,
         "eval_return": np.round(returns, 4).tolist(),
         "eval_return_mean": round(float(returns.mean()), 4)}
  for name in METRICS:
    if name in metrics:
      row[name] = np.round(np.asarray(metrics[name], np.float64), 4).tolist()
  return row


def progress_line(row: dict) -> str:
  text = (f"iter {row['iter']} | utterances/seed {row['utterances']} | greedy success "
          f"{' / '.join(f'{r:.3f}' for r in row['eval_return'])} (mean "
          f"{row['eval_return_mean']:.3f})")
  if "q_gap" in row:
    text += f" | q_gap {' / '.join(f'{g:.3f}' for g in row['q_gap'])}"
  return text


# The config fields the behaviour-cloned start depends on (with the seeds).
WARM_START_FIELDS = ("seed", "env_name", "env_kwargs", "d_model", "num_layers", "num_heads",
                     "bc_steps", "bc_batch_size", "bc_learning_rate", "bc_dataset_episodes",
                     "bc_random_question_prob")


def warm_start_cache_path(cache_dir: str, config, num_seeds: int) -> str:
  """A file name determined by `num_seeds` and the `WARM_START_FIELDS` of `config`."""
  import hashlib
  fields = {name: config.get(name) for name in WARM_START_FIELDS}
  fields["env_kwargs"] = dict(config.env_kwargs)
  fields["num_seeds"] = num_seeds
  digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
  return os.path.join(cache_dir, f"warm_start_{digest}.msgpack")


def warm_start(agent, config, keys, cache_dir):
  """The agent's BC start for every key, as one compiled program (read from or written to
  `cache_dir` if given)."""
  import jax
  from flax import serialization
  compute = jax.jit(jax.vmap(lambda k: agent.warm_start_policy_params(k, config)))
  path = warm_start_cache_path(cache_dir, config, keys.shape[0]) if cache_dir else None
  if path and os.path.exists(path):
    with open(path, "rb") as f:
      return serialization.from_bytes(jax.eval_shape(compute, keys), f.read())
  policy_params = jax.block_until_ready(compute(keys))
  if path:
    os.makedirs(cache_dir, exist_ok=True)
    with open(path + ".tmp", "wb") as f:
      f.write(serialization.to_bytes(policy_params))
    os.replace(path + ".tmp", path)  # atomic: a killed run leaves no half-written cache
  return policy_params


def initial_states(agent, learner, config, keys, cache_dir=None):
  """The vmapped run states of `keys`; the BC start compiled on its own where the agent lets."""
  import jax
  if hasattr(agent, "warm_start_policy_params"):
    policy_params = warm_start(agent, config, keys, cache_dir)
    return jax.jit(jax.vmap(learner.init))(keys, policy_params)
  return jax.jit(jax.vmap(learner.init))(keys)


def environment_path(out: str) -> str:
  """Where the curve `out` records package versions and CPU: `<out minus .jsonl>.environment.json`."""
  return os.path.splitext(out)[0] + ".environment.json"


def eval_keys(iteration: int, num_seeds: int, fixed_games: bool):
  """The per-seed evaluation keys of `iteration`: those of iteration 0 if `fixed_games`."""
  import jax
  offset = EVAL_KEY_OFFSET + (0 if fixed_games else iteration)
  return jax.random.split(jax.random.key(offset), num_seeds)


def run_curve(config, num_seeds: int, eval_every: int, out: str, cache_dir=None,
              fixed_eval_games: bool = True) -> None:
  """Trains `num_seeds` seeds of `config` for the config's run and writes the curve to `out`."""
  import jax
  from hrljax import agents
  from hrljax.logging import write_environment

  if "train_eval_episodes" in config:
    config.train_eval_episodes = 0  # the driver evaluates on its own schedule
  try:
    agent = agents.get(config.agent)
    agent.validate_config(config)
  except ValueError as error:
    fail(str(error))
  learner = agent.make_learner(config)
  keys = jax.random.split(jax.random.key(config.seed), num_seeds)
  step = jax.jit(jax.vmap(learner.step))
  evaluate = jax.jit(jax.vmap(learner.evaluate))
  state = initial_states(agent, learner, config, keys, cache_dir)
  print(f"{config.agent}: {num_seeds} seeds, {learner.num_updates} iterations of "
        f"{learner.env_steps_per_update} utterances per seed", flush=True)

  write_environment(environment_path(out))
  with open(out, "w") as f:
    def log(iteration, metrics):
      returns = evaluate(state, eval_keys(iteration, num_seeds, fixed_eval_games))["eval_return"]
      row = curve_row(iteration, iteration * learner.env_steps_per_update, returns, metrics)
      f.write(json.dumps(row) + "\n")
      f.flush()
      print(progress_line(row), flush=True)

    log(0, {})
    for iteration in range(1, learner.num_updates + 1):
      state, metrics = step(state)
      if iteration % eval_every == 0 or iteration == learner.num_updates:
        log(iteration, metrics)


def main(argv):
  if len(argv) > 1:
    fail(f"unexpected arguments {argv[1:]}")
  if FLAGS.num_seeds < 1:
    fail(f"--num_seeds: expected an integer >= 1, got {FLAGS.num_seeds}")
  if FLAGS.eval_every < 1:
    fail(f"--eval_every: expected an integer >= 1, got {FLAGS.eval_every}")
  labels, files = parse_compare(FLAGS.compare)
  config = FLAGS.config
  if config is None and not files:
    fail("--config: expected a token-game config file or name (e.g. archer_token_game), "
         "or --compare files to plot")
  if config is not None:
    if not FLAGS.out:
      fail("--out: expected a JSONL path for the curve")
    if config.get("env_name") != "TokenGame-v0":
      fail(f"--config: expected a token-game config (env_name 'TokenGame-v0'), got env_name "
           f"{config.get('env_name')!r}")
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    run_curve(config, FLAGS.num_seeds, FLAGS.eval_every, FLAGS.out, FLAGS.warm_start_cache,
              FLAGS.fixed_eval_games)
    labels.insert(0, FLAGS.label or config.agent)
    files.insert(0, FLAGS.out)
  png = FLAGS.png or (os.path.splitext(FLAGS.out)[0] + ".png" if FLAGS.out else None)
  if png is None:
    fail("--png: expected a PNG path when only --compare files are given")
  from hrljax.logging import plot_curves
  try:
    files = [with_mean_success(path, os.path.dirname(os.path.abspath(png))) for path in files]
    print(plot_curves(files, png, y="eval_return_mean", x="utterances", labels=labels,
                      title="greedy success (mean over seeds)"))
  except (FileNotFoundError, ValueError) as error:
    fail(str(error))


if __name__ == "__main__":
  define_flags()
  app.run(main, argv=resolve_config_argument(sys.argv))
