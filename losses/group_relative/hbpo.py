"""HBPO: budget-aware rewards and advantages over budget subgroups of a prompt's responses.

Lyu et al., "Hierarchical Budget Policy Optimization for Adaptive Reasoning", arXiv 2507.15844.
"""

from typing import NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks
from hrljax.losses.group_relative._segments import check_rows, shifted_moments, valid_or_all
from hrljax.losses.group_relative.normalize import group_normalize

Array = chex.Array

_HBPO_FORMS = ("paper", "code_min")


def _hbpo_flat(budget: Array, beta: float, max_len: int) -> Array:
  return beta * jnp.cos(jnp.pi * budget / (2.0 * max_len))


def hbpo_reward(
  lengths: Array,
  budgets: Array,
  correct: Array,
  *,
  beta: float = 4.0,
  alpha: float = 1.0 / 4096,
  max_len: int = 4096,
  incorrect_reward: float = 0.0,
  form: str = "paper",
) -> Array:
  """HBPO budget-aware reward (per-example, elementwise).

  Lyu et al., "Hierarchical Budget Policy Optimization for Adaptive Reasoning",
  arXiv 2507.15844, section 3.2 (paper LaTeX and code ZJU-REAL/HBPO @5c8991d):
  for a correct answer with ``n <= max_len``, ``f2(b) = beta * cos(pi b / (2 max_len))`` when
  ``n <= b`` and ``f1(n, b) = beta * cos(pi n / (2 max_len)) - alpha * |n - b|`` when
  ``n > b``; otherwise ``incorrect_reward``.

  Args:
    lengths: int/float ``[B]`` generated lengths ``n``.
    budgets: int/float ``[B]`` budget ``b`` of each response's subgroup.
    correct: bool ``[B]``.
    beta, alpha, max_len: the code's constants (4, 1/4096, 4096).
    incorrect_reward: reward of a wrong (or too long) answer: 0 in the paper and the code
      config (the code also gives format errors -1; score those before calling).
    form: ``"paper"`` (the piecewise definition, default) or ``"code_min"``
      (``min(f1, f2)``, what the released code computes; it differs from the paper inside the
      budget when ``alpha * (b - n)`` exceeds the cosine gap, e.g. ``(n, b) = (300, 512)``).

  Returns:
    float32 ``[B]``.
  """
  _checks.choice("form", form, _HBPO_FORMS)
  _checks.nonnegative("beta", beta)
  _checks.nonnegative("alpha", alpha)
  _checks.integer("max_len", max_len)
  _checks.number("incorrect_reward", incorrect_reward)
  check_rows(
    [("lengths", lengths), ("budgets", budgets), ("correct", correct)], bool_names=("correct",)
  )
  n = lengths.astype(jnp.float32)
  b = budgets.astype(jnp.float32)
  f1 = _hbpo_flat(n, beta, max_len) - alpha * jnp.abs(n - b)
  f2 = _hbpo_flat(b, beta, max_len)
  reward = jnp.where(n <= b, f2, f1) if form == "paper" else jnp.minimum(f1, f2)
  return jnp.where(correct & (n <= max_len), reward, incorrect_reward)


class HbpoAdvantages(NamedTuple):
  advantages: Array  # [B] A^inter + A^intra (or + 2 A^intra)
  intra: Array  # [B] mean reward of the budget subgroup minus f2(b)
  inter: Array  # [B] GRPO z-score over the whole prompt group


def hbpo_advantages(
  rewards: Array,
  budget_ids: Array,
  group_ids: Array,
  num_groups: int,
  budget_values: Array,
  *,
  valid: Optional[Array] = None,
  beta: float = 4.0,
  max_len: int = 4096,
  eps: float = 1e-6,
  singleton_mode: str = "zero",
  double_intra: bool = False,
) -> HbpoAdvantages:
  """HBPO advantages ``A = A^inter + A^intra`` (batch-level).

  Lyu et al., arXiv 2507.15844, Algorithm 1 / section 3.3. ``A^intra_i = mean(R over the
  budget subgroup of prompt i) - f2(b_i)`` (shared by the subgroup, <= 0 when all are correct
  within budget); ``A^inter`` is the GRPO z-score over all responses to the prompt (unbiased
  std, eps 1e-6).

  Args:
    rewards: float ``[B]`` (:func:`hbpo_reward`).
    budget_ids: int ``[B]`` in ``[0, K)`` index into ``budget_values``.
    group_ids: int ``[B]`` in ``[0, num_groups)`` prompt of each response.
    num_groups: static number of prompts.
    budget_values: ``[K]`` budgets ``b_k`` (paper: 512, 1024, 2048, 2560).
    valid: optional bool ``[B]``.
    beta, max_len: constants of ``f2`` (code: 4, 4096).
    eps, singleton_mode: of the inter z-score (see :func:`group_normalize`).
    double_intra: reproduce the released code, where a stray line adds ``A^intra`` twice
      (``A = A^inter + 2 A^intra``); ``False`` (default) is the paper.

  Returns:
    ``HbpoAdvantages`` under ``stop_gradient``.
  """
  _checks.integer("num_groups", num_groups)
  _checks.nonnegative("beta", beta)
  _checks.integer("max_len", max_len)
  chex.assert_rank(budget_values, 1)
  num_budgets = budget_values.shape[0]
  named = [("rewards", rewards), ("budget_ids", budget_ids), ("group_ids", group_ids)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(
    named, float_names=("rewards",), int_names=("budget_ids", "group_ids"), bool_names=("valid",)
  )
  valid = (
    valid_or_all(valid, rewards)
    & _checks.ids_in_range("group_ids", group_ids, num_groups)
    & _checks.ids_in_range("budget_ids", budget_ids, num_budgets)
  )
  subgroup = group_ids * num_budgets + budget_ids
  sub_mean = shifted_moments(rewards, subgroup, num_groups * num_budgets, valid).mean
  flat = _hbpo_flat(budget_values.astype(jnp.float32), beta, max_len)[budget_ids]
  intra = jnp.where(valid, sub_mean[subgroup] - flat, 0)
  inter = group_normalize(
    rewards, group_ids, num_groups, valid=valid, eps=eps, singleton_mode=singleton_mode
  )
  advantages = inter + (2.0 if double_intra else 1.0) * intra
  return jax.lax.stop_gradient(HbpoAdvantages(advantages, intra, inter))
