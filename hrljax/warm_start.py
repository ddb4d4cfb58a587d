"""A learner's costly start, computed once per seed and shared between runs through a cache.

Some learners start from something expensive that does not depend on the algorithm: the token
agents (ArCHer, token PPO, ...) all start from the same behaviour-cloned policy of a seed, which
at a 20-turn horizon costs more than the training that follows. Such a learner declares it as a
`WarmStart`; `training.train(..., warm_start_cache=DIR)` (`experiments.train
--warm_start_cache=DIR`) then computes it as a program of its own, saves each member's result in
`DIR` and hands it to `init`, and a later run of any agent with the same fields and seed reads it
instead of computing it. Without a cache directory nothing changes: `init` computes the start
inside its own program, as it always does.

A cache entry is named by a digest of the warm start's `fields` (every config value it reads),
the member's init key, and the JAX version and backend (the same code can round differently on
another version or device). An entry is written to a temporary name and renamed, so a killed run
leaves none half-written. Code that changes what a warm start computes must change its `fields`
(e.g. a version entry) or the cache directory must be emptied.
"""

import hashlib
import json
import os
import time
from typing import Any, Callable, NamedTuple

import jax
import numpy as np


class WarmStart(NamedTuple):
  """The start of a learner's `init` that other runs can share.

  `compute(key)` is a pure function of a member's init key, and `init(key, compute(key))` equals
  `init(key)`. `fields` holds every config value `compute` reads (JSON-serialisable): with the
  key, the name of the cache entry.
  """

  compute: Callable[[jax.Array], Any]
  fields: dict


def entry_name(fields: dict, key: jax.Array) -> str:
  """The cache file of `fields` and one member's init key."""
  digest = hashlib.sha256()
  digest.update(json.dumps(fields, sort_keys=True, default=str).encode())
  digest.update(np.asarray(jax.random.key_data(key)).tobytes())
  digest.update(f"{jax.__version__} {jax.default_backend()}".encode())
  return f"warm_start-{digest.hexdigest()[:32]}.npz"


def save(path: str, tree: Any) -> None:
  """Writes the leaves of `tree` (one member's) to `path`, atomically."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  partial = f"{path}.{os.getpid()}.partial"
  with open(partial, "wb") as f:
    np.savez(f, *[np.asarray(leaf) for leaf in jax.tree.leaves(tree)])
  os.replace(partial, path)


def load(path: str, like: Any) -> Any:
  """The tree saved at `path`, in the structure of `like` (shapes and dtypes checked)."""
  leaves, treedef = jax.tree.flatten(like)
  with np.load(path) as stored:
    arrays = [stored[f"arr_{i}"] for i in range(len(stored.files))]
  if len(arrays) != len(leaves) or any(
    a.shape != tuple(s.shape) or a.dtype != s.dtype for a, s in zip(arrays, leaves)
  ):
    raise ValueError(
      f"warm start cache entry {path} does not fit this run's warm start (another version of "
      f"its code); delete it to compute it again"
    )
  return jax.tree.unflatten(treedef, arrays)


def compute_members(warm_start: WarmStart, keys: jax.Array) -> Any:
  """The warm starts of the members whose init keys are `keys` (`[M]`), computed in one program
  (`vmap`) with a leading member axis: the program whose results the cache holds."""
  return jax.device_get(jax.jit(jax.vmap(warm_start.compute))(keys))


def member_starts(
  warm_start: WarmStart,
  keys: jax.Array,
  cache_dir: str,
  write: bool = True,
  progress: Callable[[str], None] = print,
) -> Any:
  """The warm starts of the members whose init keys are `keys` (`[M]`), stacked on a leading
  member axis: read from `cache_dir` when every member's entry is there, else computed for all
  members in one program (`vmap`) and, when `write` (the process that writes files), saved."""
  members = [keys[i] for i in range(keys.shape[0])]
  paths = [os.path.join(cache_dir, entry_name(warm_start.fields, key)) for key in members]
  if all(os.path.exists(path) for path in paths):
    like = jax.eval_shape(warm_start.compute, members[0])
    progress(f"warm start read from {cache_dir} ({len(paths)} member(s))")
    return jax.tree.map(lambda *xs: np.stack(xs), *[load(path, like) for path in paths])
  # One compiled program with no progress of its own (minutes for a long behaviour cloning).
  progress(f"computing the warm start of {len(paths)} member(s) in one program")
  start = time.perf_counter()
  starts = compute_members(warm_start, keys)
  seconds = time.perf_counter() - start
  if write:
    for i, path in enumerate(paths):
      save(path, jax.tree.map(lambda x, i=i: x[i], starts))
    progress(
      f"warm start computed in {seconds:.0f} s and cached in {cache_dir} ({len(paths)} member(s))"
    )
  return starts
