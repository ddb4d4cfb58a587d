"""Step-level credit from outcome rewards for multi-turn agents: SALT, SPA-RL, G-RA, Hi-Agent.

Each turns the outcome reward of a trajectory (and, for some, step signals) into per-step
rewards or advantages that a group-relative or PPO update then uses. SPA-RL follows its authors'
code. For SALT, G-RA and Hi-Agent the papers' method sections could not be read (neither the
full text nor the authors' code was found); their rules are reconstructed, and each docstring
says what was searched, what the rule rests on and what remains open
(``docs/group_relative.md`` lists the same).
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks
from hrljax.losses.group_relative._segments import check_rows, safe_div, valid_or_all
from hrljax.losses.group_relative.normalize import segment_mean

Array = chex.Array


def salt_advantages(
  trajectory_advantages: Array,
  node_ids: Array,
  traj_ids: Array,
  num_nodes: int,
  *,
  valid: Optional[Array] = None,
  dedup_per_trajectory: bool = True,
) -> Array:
  """SALT step advantages: a node's advantage is the mean over the trajectories through it.

  Li et al. (University of Connecticut, Amazon), "SALT: Step-level Advantage Assignment for
  Long-horizon Agents via Trajectory Graph", arXiv 2510.20022 (Findings of EACL 2026,
  pp. 4709-4725). **Reconstructed; the paper's equations could not be checked.** Searched: the
  arXiv HTML version (only the title page and abstract could be read), the ACL Anthology entry
  (abstract only), paper-summary sites, and public code (the arXiv id, the title and the
  method's name in source and issue text): no released code was found and no summary states the
  formula. What is known: the abstract ("constructing a graph from trajectories of the same
  prompt ... quantify the quality of each step", from outcome rewards only, a plug-in for
  GRPO / RLOO with no rollout change) and summaries saying it separates "shared neutral steps"
  from "distinct decisive steps", with states merged across the group's trajectories.

  Open: how a node is keyed (state only, or the whole prefix), how a node's quality is
  computed (a plain mean, a weighted one, a renormalised one), revisits, and whether the step
  value replaces or is blended with the trajectory advantage. The rule chosen: a node's
  advantage is the unweighted mean of the base advantages of the trajectories through it, given
  to every row of the node and replacing the trajectory advantage. It is the simplest rule with
  both described properties (a step shared by good and bad trajectories gets their mean, near
  zero for a GRPO group; a step of one trajectory keeps its advantage), it reduces to the base
  estimator when no step is shared, and it keeps the group's advantages on the base scale.
  Batch-level.

  Args:
    trajectory_advantages: float ``[N]`` the base (GRPO / RLOO) advantage of each row's
      trajectory, repeated on its step rows.
    node_ids: int ``[N]`` in ``[0, num_nodes)`` graph node of each step, already scoped to the
      prompt group. Build them with :func:`anchor_state_ids` on the words of (state, action)
      for the state-DAG graph, or of (prefix, action) for the prefix-trie graph.
    traj_ids: int ``[N]`` trajectory of each row.
    num_nodes: static segment count (``N`` is always enough).
    valid: optional bool ``[N]``.
    dedup_per_trajectory: a trajectory revisiting a node counts once (default) or once per
      visit.

  Returns:
    ``[N]`` node advantage of each row's node, under ``stop_gradient``.
  """
  _checks.integer("num_nodes", num_nodes)
  named = [
    ("trajectory_advantages", trajectory_advantages),
    ("node_ids", node_ids),
    ("traj_ids", traj_ids),
  ]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(
    named,
    float_names=("trajectory_advantages",),
    int_names=("node_ids", "traj_ids"),
    bool_names=("valid",),
  )
  valid = valid_or_all(valid, trajectory_advantages) & _checks.ids_in_range(
    "node_ids", node_ids, num_nodes
  )
  weight = valid
  if dedup_per_trajectory:
    n = node_ids.shape[0]
    key_valid = jnp.where(valid, 0, 1).astype(jnp.int32)
    k_valid, k_node, k_traj, perm = jax.lax.sort(
      (
        key_valid,
        node_ids.astype(jnp.int32),
        traj_ids.astype(jnp.int32),
        jnp.arange(n, dtype=jnp.int32),
      ),
      num_keys=3,
    )
    first = jnp.concatenate(
      [
        jnp.ones((1,), bool),
        (k_node[1:] != k_node[:-1]) | (k_traj[1:] != k_traj[:-1]) | (k_valid[1:] != k_valid[:-1]),
      ]
    )
    weight = valid & jnp.zeros((n,), bool).at[perm].set(first)
  node_mean = segment_mean(trajectory_advantages, node_ids, num_nodes, valid=weight)
  return jax.lax.stop_gradient(jnp.where(valid, node_mean[node_ids], 0))


def spa_step_rewards(
  progress: Array, executable: Array, is_last: Array, *, alpha: float = 1.0, beta: float = 0.5
) -> Array:
  """SPA-RL per-step reward ``r_t = alpha * c_t + beta * g_t`` (per-example, elementwise).

  Wang et al., "SPA-RL: Reinforcing LLM Agents via Stepwise Progress Attribution",
  arXiv 2505.20732 (abstract checked: the per-step contribution is combined with a grounding
  signal for executed actions); code WangHanLinHenry/SPA-RL-Agent ``prm/rl_data_org.py``.
  ``c_t`` is the progress estimator's output, ``g_t = 1`` if the action was executable (the next
  observation is not "Nothing happens"; decide that on the host) or the step is the last one.
  The code uses ``alpha = 1, beta = 0.5``; the paper's symbols for the weights were not
  checked. The rewards then feed a PPO / GAE advantage.

  Args:
    progress: float ``[N]`` ``c_t`` (treated as a constant).
    executable: bool ``[N]``.
    is_last: bool ``[N]``.
    alpha, beta: weights.

  Returns:
    ``[N]`` under ``stop_gradient``.
  """
  _checks.number("alpha", alpha)
  _checks.number("beta", beta)
  check_rows(
    [("progress", progress), ("executable", executable), ("is_last", is_last)],
    float_names=("progress",),
    bool_names=("executable", "is_last"),
  )
  grounded = (executable | is_last).astype(progress.dtype)
  return jax.lax.stop_gradient(alpha * progress + beta * grounded)


class SpaExtras(NamedTuple):
  predicted_returns: Array  # [num_traj] sum_t c_t
  residuals: Array  # [num_traj] predicted - target (0 for absent trajectories)
  num_trajectories: Array  # scalar denominator


def spa_progress_loss(
  progress: Array,
  traj_ids: Array,
  traj_returns: Array,
  num_traj: int,
  *,
  valid: Optional[Array] = None,
) -> Tuple[Array, SpaExtras]:
  """SPA-RL progress-estimator loss ``mean_traj (sum_t c_t - R)^2`` (batch-level).

  Wang et al., arXiv 2505.20732; code ``prm/train_our_progress_model.py``: the per-step
  contributions of a trajectory must sum to its final reward (MSE). Trained offline on the
  exploration trajectories of the SFT agent, before RL.

  Args:
    progress: float ``[N]`` predicted ``c_t`` per step row (differentiable).
    traj_ids: int ``[N]`` in ``[0, num_traj)``.
    traj_returns: float ``[num_traj]`` final reward ``R`` per trajectory (a target).
    num_traj: static number of trajectories.
    valid: optional bool ``[N]``. Trajectories with no valid row are left out of the mean.

  Returns:
    ``(loss, SpaExtras)``.
  """
  _checks.integer("num_traj", num_traj)
  named = [("progress", progress), ("traj_ids", traj_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, float_names=("progress",), int_names=("traj_ids",), bool_names=("valid",))
  chex.assert_shape(traj_returns, (num_traj,))
  chex.assert_type(traj_returns, float)
  valid = valid_or_all(valid, progress) & _checks.ids_in_range("traj_ids", traj_ids, num_traj)
  predicted = jax.ops.segment_sum(jnp.where(valid, progress, 0), traj_ids, num_traj)
  present = jax.ops.segment_sum(valid.astype(jnp.int32), traj_ids, num_traj) > 0
  residual = jnp.where(present, predicted - jax.lax.stop_gradient(traj_returns), 0)
  count = jnp.sum(present).astype(progress.dtype)
  loss = safe_div(jnp.sum(jnp.square(residual)), count)
  return loss, SpaExtras(predicted, residual, count)


class GatedRewards(NamedTuple):
  step_rewards: Array  # [N] r_low * 1[r_high >= threshold]
  returns: Array  # [num_traj] r_high + sum of the gated step rewards


def gated_reward_accumulation(
  low_rewards: Array,
  high_rewards: Array,
  traj_ids: Array,
  *,
  threshold: float,
  valid: Optional[Array] = None,
) -> GatedRewards:
  """G-RA: immediate rewards count only when the outcome reward reaches a threshold.

  Sun, Li, Chen, Qin and Hu, "Stabilizing Long-term Multi-turn Reinforcement Learning with
  Gated Rewards", arXiv 2508.10548. **The paper's own equations could not be checked** (only
  its abstract could be read; no released code was found), so no equation number is cited. The
  abstract says G-RA "accumulates immediate rewards only when high-level (long-term) rewards
  meet a predefined threshold"; a third-party restatement of the paper's formulation gives,
  with the outcome reward ``r_high`` received at the last step ``T`` and the step rewards
  ``r_low_t`` for ``t < T``: ``r~_t = r_low_t if r_high >= Delta else 0`` and
  ``R(tau) = r_high + sum_{t<T} r~_t`` (direct accumulation, D-RA, is the ungated sum). That is
  what is computed here; the gate passes at equality, as in that restatement (another
  reimplementation gates with a strict ``>``: pass ``numpy.nextafter(Delta, inf)`` for it).

  Open: the paper also gates several reward levels by priority (a lower-priority reward counts
  only while every higher-priority one meets its threshold), whose exact form could not be
  read; this function is the two-level case. The numeric values of its SWE outcome levels
  (no submission < empty patch < failing patch < passing patch) and the threshold it uses are
  unknown. Apply before any GRPO / PPO advantage. Batch-level over step rows.

  Args:
    low_rewards: float ``[N]`` immediate (step) rewards.
    high_rewards: float ``[num_traj]`` outcome reward of each trajectory.
    traj_ids: int ``[N]`` in ``[0, num_traj)``.
    threshold: the gate ``Delta`` (``>=`` passes; ``-inf`` gives direct accumulation, D-RA).
    valid: optional bool ``[N]``.

  Returns:
    ``GatedRewards(step_rewards, returns)``.
  """
  _checks.number("threshold", threshold, finite=False)
  named = [("low_rewards", low_rewards), ("traj_ids", traj_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, float_names=("low_rewards",), int_names=("traj_ids",), bool_names=("valid",))
  chex.assert_rank(high_rewards, 1)
  chex.assert_type(high_rewards, float)
  valid = valid_or_all(valid, low_rewards) & _checks.ids_in_range(
    "traj_ids", traj_ids, high_rewards.shape[0]
  )
  gate = high_rewards >= threshold
  gated = jnp.where(valid & gate[traj_ids], low_rewards, 0)
  returns = high_rewards + jax.ops.segment_sum(gated, traj_ids, high_rewards.shape[0])
  return GatedRewards(gated, returns)


def foresight_rewards(
  format_rewards: Array, execution_rewards: Array, *, lam: float = 1.0
) -> Array:
  """Hi-Agent high-level reward ``r_format(g) + lam * r_exec(s, a)`` (per-example).

  Wu et al. (Tsinghua University, Huawei Noah's Ark Lab and others), "Hi-Agent: Hierarchical
  Vision-Language Agents for Mobile Device Control", arXiv 2510.14388. **Reconstructed; the
  foresight advantage function could not be found.** Searched: the arXiv and OpenReview pages
  (abstract only), paper-summary sites and public code (the arXiv id, the title and "foresight
  advantage" in source and issue text); no released code was found and no summary states the
  formula. Known: the abstract (multi-step control reformulated as a sequence of single-step
  subgoals; a critic-free, GRPO-based "foresight advantage function" that "leverages execution
  feedback from the low-level model to guide high-level optimization") and a review's account
  that the reformulation brings GRPO's sampling from ``G^n`` paths to ``n * G``. A second
  search (the same sources plus public issue threads and documentation pages, with the method's
  symbols: reasoning model, action model, format reward, execution feedback) found the same
  abstract on several mirrors and one AI-written review that adds only a MAXQ-style recursive
  value decomposition ``V_i(s) = V_g(s) + C_i(s, g)`` as the paper's motivation; it states no
  foresight advantage either, so no equation number can be cited.

  Open: how the execution feedback enters (added to the reward, as here, or to the normalised
  advantage), its weight, and what the format term is. The rule chosen: judge each of the
  ``G`` subgoals sampled at a state by the outcome of the low-level action it produced, add it
  to the subgoal's format reward with weight ``lam``, then call :func:`grpo_advantages` with
  one group per state; the low-level policy gets its own groups (the actions sampled for one
  subgoal). It is linear in ``lam`` and ``lam = 0`` is plain GRPO on the format reward.
  :func:`two_level_advantages` computes both levels' group statistics from it.

  Args:
    format_rewards: float ``[G]`` (or any shape) format reward of each subgoal.
    execution_rewards: same shape: step success of the low-level action it produced.
    lam: weight of the execution feedback (>= 0).

  Returns:
    Rewards of the same shape.
  """
  _checks.nonnegative("lam", lam)
  chex.assert_equal_shape([format_rewards, execution_rewards])
  chex.assert_type([format_rewards, execution_rewards], float)
  return format_rewards + lam * execution_rewards
