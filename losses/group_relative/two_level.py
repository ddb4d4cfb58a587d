"""Two-level group statistics of Hi-Agent: subgoals grouped by state, actions by subgoal.

Wu et al., "Hi-Agent: Hierarchical Vision-Language Agents for Mobile Device Control",
arXiv 2510.14388. At each decision state the high level samples a group of subgoals; under each
subgoal the low level samples a group of actions (or short action segments). The high-level
reward of a subgoal is the foresight reward (:func:`foresight_rewards`: its format reward plus
``lam`` times the execution success of the low level under it), z-scored over the subgoals of
its state; the low-level reward of an action is z-scored over the actions of its subgoal. Both
levels are critic-free. The paper's equations for the foresight advantage could not be read
(``step_credit.foresight_rewards`` records the searches); this module is the two-level GRPO that
its abstract describes, built from :func:`grpo_advantages` at both levels.
"""

from typing import NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks
from hrljax.losses.group_relative._segments import check_rows, valid_or_all
from hrljax.losses.group_relative.grpo import grpo_advantages
from hrljax.losses.group_relative.normalize import segment_mean
from hrljax.losses.group_relative.step_credit import foresight_rewards

Array = chex.Array


class TwoLevelAdvantages(NamedTuple):
  subgoal_advantages: Array  # [M] z-score of the foresight reward among the state's subgoals
  action_advantages: Array  # [N] z-score of the low-level reward among the subgoal's actions
  subgoal_rewards: Array  # [M] format + lam * execution rate (0 for invalid subgoals)
  execution_rate: Array  # [M] mean execution success of the subgoal's valid actions


def two_level_advantages(
  format_rewards: Array,
  state_ids: Array,
  execution_success: Array,
  low_rewards: Array,
  subgoal_ids: Array,
  num_states: int,
  *,
  lam: float = 1.0,
  subgoal_valid: Optional[Array] = None,
  action_valid: Optional[Array] = None,
  scale: str = "group",
  eps: float = 1e-6,
  singleton_mode: str = "zero",
) -> TwoLevelAdvantages:
  """Hi-Agent's two-level group-relative advantages over ragged groups (batch-level).

  Rows come in any order and groups may have any size (ragged): subgoal row ``j`` belongs to
  state ``state_ids[j]``, action row ``i`` to subgoal row ``subgoal_ids[i]``.

  * execution rate of subgoal ``j``: ``e_j = mean_{i: subgoal_ids[i] = j} success_i`` over its
    valid actions (0 if it has none);
  * high-level reward ``R_j = format_j + lam * e_j`` (:func:`foresight_rewards`), and advantage
    ``(R_j - mean_s R) / (std_s R + eps)`` over the valid subgoals of state ``s = state_ids[j]``
    (GRPO, Shao et al., arXiv 2402.03300, section 4.1.2);
  * low-level advantage ``(r_i - mean_j r) / (std_j r + eps)`` over the valid actions of
    subgoal ``j = subgoal_ids[i]``.

  An action row under an invalid subgoal (``subgoal_valid`` False, or a state id outside
  ``[0, num_states)`` under jit) is invalid too. ``lam = 0`` gives GRPO on the format rewards at
  the high level; the high-level rewards are linear in ``lam``.

  Args:
    format_rewards: float ``[M]`` format reward of each subgoal.
    state_ids: int ``[M]`` in ``[0, num_states)`` decision state of each subgoal.
    execution_success: float ``[N]`` execution success of each action (1 / 0, or a rate).
    low_rewards: float ``[N]`` low-level reward of each action (segment).
    subgoal_ids: int ``[N]`` in ``[0, M)`` subgoal row of each action.
    num_states: static number of decision states (groups of subgoals).
    lam: weight of the execution feedback (>= 0).
    subgoal_valid: optional bool ``[M]``.
    action_valid: optional bool ``[N]``.
    scale, eps, singleton_mode: as in :func:`grpo_advantages`, at both levels.

  Returns:
    ``TwoLevelAdvantages``; the advantages are under ``stop_gradient``.
  """
  _checks.integer("num_states", num_states)
  _checks.nonnegative("lam", lam)
  subgoal_named = [("format_rewards", format_rewards), ("state_ids", state_ids)]
  if subgoal_valid is not None:
    subgoal_named.append(("subgoal_valid", subgoal_valid))
  check_rows(
    subgoal_named,
    float_names=("format_rewards",),
    int_names=("state_ids",),
    bool_names=("subgoal_valid",),
  )
  action_named = [
    ("execution_success", execution_success),
    ("low_rewards", low_rewards),
    ("subgoal_ids", subgoal_ids),
  ]
  if action_valid is not None:
    action_named.append(("action_valid", action_valid))
  check_rows(
    action_named,
    float_names=("execution_success", "low_rewards"),
    int_names=("subgoal_ids",),
    bool_names=("action_valid",),
  )
  num_subgoals = format_rewards.shape[0]
  subgoal_valid = valid_or_all(subgoal_valid, format_rewards) & _checks.ids_in_range(
    "state_ids", state_ids, num_states
  )
  in_range = _checks.ids_in_range("subgoal_ids", subgoal_ids, num_subgoals)
  safe_subgoal = jnp.where(in_range, subgoal_ids, 0)
  action_valid = valid_or_all(action_valid, low_rewards) & in_range & subgoal_valid[safe_subgoal]
  execution_rate = segment_mean(execution_success, safe_subgoal, num_subgoals, valid=action_valid)
  rewards = foresight_rewards(format_rewards, execution_rate, lam=lam)
  rewards = jnp.where(subgoal_valid, rewards, 0)
  options = dict(scale=scale, eps=eps, singleton_mode=singleton_mode)
  safe_state = jnp.where(subgoal_valid, state_ids, 0)
  subgoal_advantages = grpo_advantages(
    rewards, safe_state, num_states, valid=subgoal_valid, **options
  )
  action_advantages = grpo_advantages(
    low_rewards, safe_subgoal, num_subgoals, valid=action_valid, **options
  )
  return TwoLevelAdvantages(
    subgoal_advantages=subgoal_advantages,
    action_advantages=action_advantages,
    subgoal_rewards=jax.lax.stop_gradient(rewards),
    execution_rate=jax.lax.stop_gradient(jnp.where(subgoal_valid, execution_rate, 0)),
  )
