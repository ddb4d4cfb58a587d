"""Pytrees shared by rollouts, losses and agents, and their shape conventions.

Shapes: a rollout of `T` steps over `N` parallel environments stores every field time-major,
`[T, N, ...]`. A loss written per trajectory receives one `[T, ...]` slice (the caller vmaps
over `N`). Observations may be any pytree; actions are arrays.

Terminated and truncated are kept apart everywhere: `terminated` ends the episode with no
bootstrap, `truncated` (a time limit) ends it but the value of the true successor state, kept in
`next_obs`, is still bootstrapped.
"""

from typing import Any, NamedTuple

import jax
from flax import struct

Array = jax.Array
PyTree = Any


class Transition(NamedTuple):
  """One environment step (or a `[T, N]` stack of them)."""

  obs: PyTree  # observation the action was chosen from
  action: Array
  reward: Array  # float32
  terminated: Array  # bool: natural end, the successor has value 0
  truncated: Array  # bool: time limit, bootstrap from `next_obs`
  next_obs: PyTree  # the true successor (before any auto-reset)
  policy_extras: PyTree  # what the acting policy recorded (log-probs, values, options, ...)
  episode_return: Array  # return of the episode that ended at this step (valid where done)
  episode_length: Array  # its length in steps (valid where done)

  @property
  def done(self) -> Array:
    """Whether an episode ended at this step, for whichever reason."""
    return self.terminated | self.truncated


class EnvCarry(struct.PyTreeNode):
  """What a rollout carries between steps for `N` environments (leading axis `N`)."""

  env_state: PyTree
  obs: PyTree
  running_return: Array  # [N] float32, return of the unfinished episode so far
  running_length: Array  # [N] int32


class Batch(NamedTuple):
  """A flat minibatch for a policy-gradient update (leading axis = samples)."""

  obs: PyTree
  action: Array
  log_prob: Array
  value: Array
  advantage: Array
  target: Array  # value target (advantage + value for GAE)
