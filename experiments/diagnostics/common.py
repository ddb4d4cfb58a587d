"""What the token-game diagnostics share: seeds and evaluation keys as `experiments.train` derives
them, the behaviour-cloned start (computed once and cached), and their JSONL rows.

Seed s of `python -m experiments.train --config.seeds=...` starts from
`init_key = split(key(s))[0]` and is evaluated with `split(key(s))[1]`; the diagnostics use the
same keys, so their BC start is the start of the training runs of the same seed and scores what
those runs' evaluation of it scores.
"""

import json
import os
import sys

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def check_command_line(argv: list, config, out: str) -> None:
  """Exits with one line if positional arguments are left or `--config` / `--out` is missing."""
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments {argv[1:]}")
  if config is None or not out:
    sys.exit("error: --config and --out are required")


def parse_seeds(text: str) -> tuple:
  """ "0,1,2" -> (0, 1, 2); exits with one line on anything else."""
  try:
    seeds = tuple(int(part) for part in text.split(","))
  except ValueError:
    seeds = ()
  if not seeds or any(seed < 0 for seed in seeds):
    sys.exit(f"error: --seeds: expected comma-separated integers >= 0, got {text!r}")
  return seeds


def init_keys(seeds):
  """`[S]` keys: `split(key(s))[0]`, the key `experiments.train` initialises seed s with."""
  import jax
  import jax.numpy as jnp

  return jnp.stack([jax.random.split(jax.random.key(seed))[0] for seed in seeds])


def eval_keys(seeds):
  """`[S]` keys: `split(key(s))[1]`, the key `experiments.train` evaluates seed s with."""
  import jax
  import jax.numpy as jnp

  return jnp.stack([jax.random.split(jax.random.key(seed))[1] for seed in seeds])


def warm_start(config, seeds, cache_dir=None):
  """The BC start of every seed (`token_common.warm_start`, vmapped, one compiled program), read
  from or written to `cache_dir` if given: the cache of `experiments.train --warm_start_cache`
  (`hrljax.warm_start`), so a diagnostic reads the start a training run of the same config and
  seed cached, and the other way round."""
  from hrljax import warm_start as ws
  from hrljax.agents import token_common as tc

  warm = tc.warm_start(config)
  keys = init_keys(seeds)
  if not cache_dir:
    return ws.compute_members(warm, keys)
  return ws.member_starts(warm, keys, cache_dir)


def curve_row(iteration: int, utterances: int, eval_return) -> dict:
  """The evaluation of every seed at one point of a curve, rounded."""
  import numpy as np

  returns = np.asarray(eval_return, np.float64)
  return {
    "iter": iteration,
    "utterances": utterances,
    "eval_return": np.round(returns, 4).tolist(),
    "eval_return_mean": round(float(returns.mean()), 4),
  }


def emit_row(f, row: dict) -> None:
  """One JSON line to the open file `f` (flushed, so a stopped run keeps its rows) and stdout."""
  f.write(json.dumps(row) + "\n")
  f.flush()
  print(json.dumps(row), flush=True)


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
