"""What agents read from a two-rate rollout: replay transitions at the decision rate and at the
control rate, and the episode cost and violation statistics of the control-rate stream.

The rollouts themselves are in `hrljax.rollout.two_rate`.
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from flax import struct

from hrljax.rollout.grouped import first_episode_mask
from hrljax.rollout.two_rate import ControllerFn, ControlSteps, EndDecisionTrajectory
from hrljax.types import Array, EnvCarry, PyTree


class DecisionTransition(NamedTuple):
  """One task decision (or a batch): the task-level transition of a two-rate rollout."""

  obs: PyTree  # where the decision was taken
  action: Array  # float32 [|A|]: the task command (or what the learner stores in its place)
  reward: Array  # float32 []: summed over the decision's control steps
  terminated: Array  # bool []
  next_obs: PyTree
  num_substeps: Array  # int32 []: control steps executed (SMDP discount gamma ** num_substeps)


class ControlTransition(NamedTuple):
  """One executed control step (or a batch), with its cost and the next nominal action."""

  obs: PyTree
  action: Array  # float32 [|A|]: the executed low-level action (environment scale)
  cost: Array  # float32 []
  terminated: Array  # bool []
  next_obs: PyTree  # true successor
  next_action: Array  # float32 [|A|]: the controller's nominal action at next_obs


def example_transitions(
  obs: PyTree, action_dim: int
) -> tuple[DecisionTransition, ControlTransition]:
  """A zero item of each stream for one environment's observation `obs` (unbatched): what
  `replay.init` sizes the decision-rate and the control-rate buffers from."""
  action = jnp.zeros((action_dim,), jnp.float32)
  scalar, no = jnp.zeros((), jnp.float32), jnp.zeros((), bool)
  decision = DecisionTransition(
    obs=obs,
    action=action,
    reward=scalar,
    terminated=no,
    next_obs=obs,
    num_substeps=jnp.zeros((), jnp.int32),
  )
  control = ControlTransition(
    obs=obs, action=action, cost=scalar, terminated=no, next_obs=obs, next_action=action
  )
  return decision, control


def decision_transitions(
  traj, action: Array, reward: Array
) -> tuple[DecisionTransition, Optional[Array]]:
  """The decisions of a `TwoRateTrajectory` (`[T, N]`) or of an `EndDecisionTrajectory` (`[T, K,
  N]` decision slots) as flat transitions, with `action` and `reward` (same leading axes) in
  place of the command and the environment's reward; and the slots' validity (None where every
  decision is valid)."""
  decision_axes = traj.num_substeps.ndim
  flat = lambda x: x.reshape((-1,) + x.shape[decision_axes:])
  decision = traj.decision
  items = DecisionTransition(
    obs=jax.tree.map(flat, decision.obs),
    action=flat(action),
    reward=flat(reward),
    terminated=flat(decision.terminated),
    next_obs=jax.tree.map(flat, decision.next_obs),
    num_substeps=flat(traj.num_substeps),
  )
  valid = flat(traj.valid) if isinstance(traj, EndDecisionTrajectory) else None
  return items, valid


def commands_in_force(traj) -> Array:
  """The task command in force at every control step, `[T, K, N, ...]`."""
  if isinstance(traj, EndDecisionTrajectory):
    return traj.command
  return jnp.broadcast_to(traj.decision.action[:, None], traj.control.action.shape)


def control_transitions(
  control: ControlSteps, commands: Array, controller_fn: ControllerFn
) -> ControlTransition:
  """Every control step of a `[T, K, N]` stream as flat `[T*K*N]` transitions; `commands`
  `[T, K, N, ...]` is the task command in force at each, which gives the controller's nominal
  next action (for a SARSA target).

  The control steps an environment skipped after its episode ended mid-decision are included:
  their observation is the reset state and their successor and cost come from stepping it, so
  they are true (simulated, not executed) transitions, and the shapes stay static.
  """
  flat = lambda x: x.reshape((-1,) + x.shape[3:])
  next_obs = jax.tree.map(flat, control.next_obs)
  return ControlTransition(
    obs=jax.tree.map(flat, control.obs),
    action=flat(control.action),
    cost=flat(control.info["cost"]),
    terminated=flat(control.terminated),
    next_obs=next_obs,
    next_action=controller_fn(next_obs, flat(commands)),
  )


# ----------------------------------------------------------------------------------------------
# Cost and violation statistics of the control-rate stream (info entries "cost", "violation").
# ----------------------------------------------------------------------------------------------

SAFETY_INFO_KEYS = ("cost", "violation")


class CostCarry(struct.PyTreeNode):
  """Per-environment carry (leading axis N): the rollout's, plus the unfinished episode's cost."""

  env: EnvCarry
  cost: Array  # [N] float32: cost of the unfinished episode so far
  violated: Array  # [N] bool: the unfinished episode violated a constraint


def cost_carry(carry: EnvCarry) -> CostCarry:
  """`carry` with no cost and no violation yet."""
  num_envs = carry.running_return.shape[0]
  return CostCarry(
    env=carry, cost=jnp.zeros((num_envs,), jnp.float32), violated=jnp.zeros((num_envs,), bool)
  )


def episode_cost_statistics(
  control: ControlSteps, carry: CostCarry
) -> tuple[CostCarry, dict[str, Array]]:
  """Per-episode cost and violation sums of the episodes that ended in a `[T, K, N]` stream.

  `episode_cost_sum` and `episode_violation_sum` pair with the loop's `episodes` count (means
  over the ended episodes); `cost_per_step` and `intervention_rate` are per active control
  step; `violating_steps` counts the active control steps with a violation.
  """
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  active, done = flat(control.active), flat(control.terminated | control.truncated)
  cost = flat(control.info["cost"]) * active
  violation = flat(control.info["violation"]) & active

  def one(state, inputs):
    running_cost, violated = state
    cost, violation, done = inputs
    running_cost, violated = running_cost + cost, violated | violation
    ended = (jnp.where(done, running_cost, 0.0), done & violated)
    return (jnp.where(done, 0.0, running_cost), violated & ~done), ended

  (running_cost, violated), (ended_cost, ended_violated) = jax.lax.scan(
    one, (carry.cost, carry.violated), (cost, violation, done & active)
  )
  metrics = {
    "episode_cost_sum": ended_cost.sum(),
    "episode_violation_sum": ended_violated.astype(jnp.float32).sum(),
    "cost_per_step": cost.sum() / jnp.maximum(active.sum(), 1),
    "intervention_rate": (flat(control.intervened) & active).sum() / jnp.maximum(active.sum(), 1),
    "violating_steps": violation.sum().astype(jnp.float32),
  }
  return carry.replace(cost=running_cost, violated=violated), metrics


def control_episode_statistics(traj: "EndDecisionTrajectory") -> dict[str, Array]:
  """`rollout_statistics` read at the control rate: sums over the episodes that ended in the
  rollout (with option (b) an episode may end at a control step that ends no task decision)."""
  done = (traj.control.terminated | traj.control.truncated).astype(jnp.float32)
  return {
    "episode_return_sum": (traj.episode_return * done).sum(),
    "episode_length_sum": (traj.episode_length * done).sum(),
    "episodes": done.sum(),
  }


def first_episode_statistics(traj) -> dict[str, Array]:
  """Return, cost, violation and length of each environment's first episode, averaged over the
  environments (a `TwoRateTrajectory` or an `EndDecisionTrajectory`): the `eval_*` metrics."""
  if isinstance(traj, EndDecisionTrajectory):
    return _first_episode_control_statistics(traj.control)
  decision = traj.decision
  valid = first_episode_mask(decision.done)  # [D, N]
  control_valid = valid[:, None, :] & traj.control.active  # [D, K, N]
  cost = jnp.where(control_valid, traj.control.info["cost"], 0.0).sum(axis=(0, 1))
  violated = (traj.control.info["violation"] & control_valid).any(axis=(0, 1))
  interventions = (traj.control.intervened & control_valid).sum(axis=(0, 1))
  returns = jnp.where(valid, decision.reward, 0.0).sum(axis=0)
  lengths = control_valid.sum(axis=(0, 1))
  return _eval_means(returns, cost, violated, interventions, lengths)


def _first_episode_control_statistics(control: ControlSteps) -> dict[str, Array]:
  """`first_episode_statistics` of a `[T, K, N]` control stream in which every control step is
  executed (option (b): episodes need not end with a decision)."""
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  valid = first_episode_mask(flat(control.terminated | control.truncated))  # [T*K, N]
  cost = jnp.where(valid, flat(control.info["cost"]), 0.0).sum(axis=0)
  violated = (flat(control.info["violation"]) & valid).any(axis=0)
  interventions = (flat(control.intervened) & valid).sum(axis=0)
  returns = jnp.where(valid, flat(control.reward), 0.0).sum(axis=0)
  return _eval_means(returns, cost, violated, interventions, valid.sum(axis=0))


def _eval_means(returns, cost, violated, interventions, lengths) -> dict[str, Array]:
  """The `eval_*` metrics: per-environment first-episode sums `[N]` averaged over environments."""
  return {
    "eval_return": returns.mean(),
    "eval_return_std": returns.std(),
    "eval_cost": cost.mean(),
    "eval_violation_rate": violated.astype(jnp.float32).mean(),
    "eval_interventions": interventions.astype(jnp.float32).mean(),
    "eval_length": lengths.astype(jnp.float32).mean(),
  }
