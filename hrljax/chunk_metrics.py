"""One record per chunk of compiled updates: the sums of per-update metrics turned into means, and
the check that stops a run whose metrics or state became NaN or infinite (`hrljax.training`)."""

import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np


def summarize(metric_sums: dict, num_updates: int) -> dict:
  """Turns the per-chunk sums of per-update metrics into one number each.

  `<name>_sum` metrics paired with an `episodes` count become `<name>` means over the episodes
  that ended in the chunk (NaN if none did); every other metric becomes its mean over the
  chunk's updates.
  """
  sums = {k: float(np.asarray(v)) for k, v in metric_sums.items()}
  episodes = sums.get("episodes")
  out = {}
  for key, value in sums.items():
    if key.endswith("_sum") and episodes is not None:
      out[key[:-4]] = value / episodes if episodes > 0 else math.nan
    elif key == "episodes":
      out[key] = value
    else:
      out[key] = value / num_updates
  return out


def undefined_episode_means(metric_sums: dict) -> tuple:
  """The metrics `summarize` leaves NaN because no episode ended in the chunk (every
  `<name>_sum` paired with an `episodes` count of 0): undefined, not diverged. Where an episode
  did end they stay checked, so a NaN episode cost still stops the run."""
  episodes = metric_sums.get("episodes")
  if episodes is None or float(np.asarray(episodes)) > 0:
    return ()
  return tuple(key[:-4] for key in metric_sums if key.endswith("_sum"))


def _float_leaves(state: Any) -> list:
  return [
    (path, leaf)
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
    if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)
  ]


@jax.jit
def _all_finite_per_leaf(leaves: list) -> list:
  # Scalar reductions come back replicated, so every process of a multi-process run can read them.
  return [jnp.all(jnp.isfinite(leaf)) for leaf in leaves]


# Episode statistics some learners report directly (not as `_sum` + `episodes`), NaN when no
# episode ended.
NAN_WHEN_NO_EPISODE_ENDED = ("episode_return", "episode_length")


def first_non_finite(
  metrics: dict, state: Any, ignore: tuple = NAN_WHEN_NO_EPISODE_ENDED
) -> Optional[str]:
  """The name of the first NaN/inf metric, else the path of the first NaN/inf state leaf, else None.

  Episode statistics are NaN when no episode ended in a chunk: that is not a divergence.
  """
  for key, value in metrics.items():
    if key not in ignore and not math.isfinite(value):
      return f"metric {key!r} = {value}"
  leaves = _float_leaves(state)
  flags = jax.device_get(_all_finite_per_leaf([leaf for _, leaf in leaves]))
  for (path, _), finite in zip(leaves, flags):
    if not finite:
      return f"state leaf {jax.tree_util.keystr(path)}"
  return None
