"""Two-level grouped rollouts: G subgoals per decision state, K low-level segments per subgoal.

The scheme of Hi-Agent (Wu et al., "Hi-Agent: Hierarchical Vision-Language Agents for Mobile
Device Control", arXiv 2510.14388): a long task becomes a sequence of one-decision problems.
At every decision state of `B` main environments the high level samples `G` subgoals; for each
subgoal the low level runs `K` segments of `H` steps, every one branched from the same saved
environment state (gymnax environments are functional, so branching is a `vmap` over copies of
the state; the branches differ by the environment's noise and the low level's samples). The
main trajectory then continues from one of the `G * K` branch ends drawn uniformly, which is a
sample of the hierarchical policy itself, and the next decision is taken there. `D` decisions
make one rollout; its cost is `D * B * G * K * H` environment steps.

Row layout: the subgoal rows of a decision are `b * G + g` (`[B * G]`), the segment rows
`(b * G + g) * K + k` (`[B * G * K]`), so `segment_row // K` is the subgoal row of a segment and
`subgoal_row // G` its environment. Branches auto-reset like any rollout: steps after a branch's
first `done` are outside the segment (`valid` is False), and a main trajectory that continues
from a finished branch starts its next episode there.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from hrljax.rollout.grouped import first_episode_mask
from hrljax.rollout.plain import _first_episode_statistics, reset, rollout, step
from hrljax.types import Array, EnvCarry, PyTree, Transition

# high_fn(params, obs [N], key) -> (subgoal [N, ...], extras); low_fn(params, obs [N],
# subgoal [N, ...], key) -> (action [N], extras).
HighFn = Callable[[PyTree, PyTree, Array], tuple[Array, PyTree]]
LowFn = Callable[[PyTree, PyTree, Array, Array], tuple[Array, PyTree]]


class TwoLevelRollout(NamedTuple):
  """`D` decisions of `B` environments, `G` subgoals each, `K` segments of `H` steps each."""

  decision_obs: PyTree  # [D, B * G] observation of the decision state, once per subgoal row
  subgoals: Array  # [D, B * G, ...] the sampled subgoals
  high_extras: PyTree  # [D, B * G] what high_fn recorded (log-probs, ...)
  segments: Transition  # [D, H, B * G * K] the branches; low_fn's extras in policy_extras
  segment_subgoals: Array  # [D, B * G * K, ...] the subgoal each branch executes
  valid: Array  # [D, H, B * G * K] bool: the step precedes or is the branch's first done
  continued: Array  # [D, B] int32 in [0, G * K): the branch the main trajectory continued from


def _check_positive_int(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name}: expected a Python int >= 1, got {value!r}")


def _repeat(tree: PyTree, times: int) -> PyTree:
  return jax.tree.map(lambda x: jnp.repeat(x, times, axis=0), tree)


def branch(carry: EnvCarry, times: int) -> EnvCarry:
  """Every environment of `carry` copied `times` times (rows `n * times + i`): the saved states
  the branches start from."""
  _check_positive_int("times", times)
  return _repeat(carry, times)


def segment_ends(segments: Transition, valid: Array) -> PyTree:
  """`next_obs` at the last valid step of each column of `[H, N]` segments (`[N, ...]`)."""
  last = valid.shape[0] - 1 - jnp.argmax(valid[::-1], axis=0)
  columns = jnp.arange(valid.shape[1])
  return jax.tree.map(lambda x: x[last, columns], segments.next_obs)


def decide_and_branch(
  env,
  env_params,
  high_fn: HighFn,
  low_fn: LowFn,
  params: PyTree,
  carry: EnvCarry,
  key: Array,
  num_subgoals: int,
  num_segments: int,
  segment_steps: int,
  unroll: int = 1,
) -> tuple[EnvCarry, TwoLevelRollout]:
  """One decision of every main environment: `G` subgoals, `K` branches of `H` steps each, then
  the main trajectory continues from a uniformly drawn branch. Returns the next main carry and
  the decision as a `TwoLevelRollout` without its leading `D` axis."""
  for name, value in (
    ("num_subgoals", num_subgoals),
    ("num_segments", num_segments),
    ("segment_steps", segment_steps),
  ):
    _check_positive_int(name, value)
  num_envs = carry.running_return.shape[0]
  high_key, low_key, pick_key = jax.random.split(key, 3)
  decision_obs = _repeat(carry.obs, num_subgoals)
  subgoals, high_extras = high_fn(params, decision_obs, high_key)
  branches = branch(carry, num_subgoals * num_segments)
  segment_subgoals = _repeat(subgoals, num_segments)

  def low_policy(params, obs, key):
    return low_fn(params, obs, segment_subgoals, key)

  ends, segments = rollout(
    env, env_params, low_policy, params, branches, low_key, segment_steps, unroll=unroll
  )
  width = num_subgoals * num_segments
  continued = jax.random.randint(pick_key, (num_envs,), 0, width, dtype=jnp.int32)
  rows = jnp.arange(num_envs, dtype=jnp.int32) * width + continued
  next_carry = jax.tree.map(lambda x: x[rows], ends)
  decision = TwoLevelRollout(
    decision_obs=decision_obs,
    subgoals=subgoals,
    high_extras=high_extras,
    segments=segments,
    segment_subgoals=segment_subgoals,
    valid=first_episode_mask(segments.done),
    continued=continued,
  )
  return next_carry, decision


def two_level_rollout(
  env,
  env_params,
  high_fn: HighFn,
  low_fn: LowFn,
  params: PyTree,
  carry: EnvCarry,
  key: Array,
  num_decisions: int,
  num_subgoals: int,
  num_segments: int,
  segment_steps: int,
  unroll: int = 1,
) -> tuple[EnvCarry, TwoLevelRollout]:
  """`num_decisions` decisions (`decide_and_branch`) in one `lax.scan`; every field of the
  result gets a leading `[D]` axis. The main carry goes on across calls (episodes span
  rollouts)."""
  _check_positive_int("num_decisions", num_decisions)

  def one_decision(carry, key):
    return decide_and_branch(
      env,
      env_params,
      high_fn,
      low_fn,
      params,
      carry,
      key,
      num_subgoals,
      num_segments,
      segment_steps,
      unroll,
    )

  return jax.lax.scan(one_decision, carry, jax.random.split(key, num_decisions))


class MainEpisodes(NamedTuple):
  """The main trajectories' steps (`[D, H, B]`, the branches they continued from)."""

  ended: Array  # bool: a main episode ended at this step
  terminated: Array  # bool: it ended at a terminal state
  length: Array  # int32: the length of the episode that ended here (any value elsewhere)


def main_episode_outcomes(rollout_: TwoLevelRollout, num_envs: int) -> MainEpisodes:
  """Where the main trajectories' episodes ended, how, and how long they were. A branch's steps
  after its first `done` (already the next episode) are left out, as in `valid`."""
  width = rollout_.valid.shape[-1] // num_envs
  rows = jnp.arange(num_envs, dtype=jnp.int32)[None, :] * width + rollout_.continued  # [D, B]
  take = lambda x: jnp.take_along_axis(x, rows[:, None, :], axis=2)
  valid = take(rollout_.valid)
  segments = rollout_.segments
  return MainEpisodes(
    ended=take(segments.done) & valid,
    terminated=take(segments.terminated) & valid,
    length=take(segments.episode_length),
  )


def evaluate(
  env,
  env_params,
  high_fn: HighFn,
  low_fn: LowFn,
  params: PyTree,
  key: Array,
  num_episodes: int,
  max_steps: int,
  segment_steps: int,
) -> dict[str, Array]:
  """`num_episodes` episodes of the hierarchical policy, without branching: the high level picks
  a subgoal every `segment_steps` steps (and at the start of every episode), the low level acts
  toward it. Statistics of the first episode of each environment, as `rollout.evaluate`
  computes them (`eval_return`, `eval_return_std`, `eval_length`)."""
  _check_positive_int("num_episodes", num_episodes)
  _check_positive_int("max_steps", max_steps)
  _check_positive_int("segment_steps", segment_steps)
  reset_key, run_key = jax.random.split(key)
  carry = reset(env, env_params, reset_key, num_episodes)
  subgoals, _ = high_fn(params, carry.obs, jax.random.fold_in(run_key, max_steps))

  def one_step(state, key):
    carry, subgoals, since = state
    high_key, low_key, env_key = jax.random.split(key, 3)
    fresh, _ = high_fn(params, carry.obs, high_key)
    renew = since >= segment_steps
    subgoals = jnp.where(renew.reshape(renew.shape + (1,) * (subgoals.ndim - 1)), fresh, subgoals)
    since = jnp.where(renew, 0, since)
    action, _ = low_fn(params, carry.obs, subgoals, low_key)
    carry, transition = step(env, env_params, carry, action, env_key)
    since = jnp.where(transition.done, segment_steps, since + 1)  # a new episode decides anew
    return (carry, subgoals, since), transition

  since = jnp.zeros((num_episodes,), jnp.int32)
  keys = jax.random.split(run_key, max_steps)
  _, transitions = jax.lax.scan(one_step, (carry, subgoals, since), keys)
  return _first_episode_statistics(transitions, max_steps)
