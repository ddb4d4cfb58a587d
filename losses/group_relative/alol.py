"""A-LoL: advantage-based offline policy gradient with the whole response as one action.

Baheti, Lu, Brahman, Le Bras, Sap, Riedl, "Leftover Lunch: Advantage-based Offline Reinforcement
Learning for Language Models" (first titled "Improving Language Models with Advantage-based
Offline Policy Gradients"), arXiv 2305.14718, ICLR 2024. Sequence-level (one row per response),
not group-relative: the baseline is a value estimate of the reference policy.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import check_rows, safe_div, valid_or_all

Array = chex.Array


class AlolExtras(NamedTuple):
  advantages: Array  # [B] A = R - V_ref(x) (detached; 0 on invalid rows)
  weights: Array  # [B] the detached sequence weight A+ * clip(rho) (A+ for the other variants)
  ratio: Array  # [B] detached sequence ratio pi_theta(y|x) / pi_ref(y|x), before clipping
  kept: Array  # bool [B] valid rows that carry a gradient (A > 0 with positive_only)
  kl: Array  # scalar mean over valid rows of log pi_theta(y|x) - log pi_ref(y|x) (0 without ref)
  loss_sum: Array  # scalar numerator
  denominator: Array  # scalar number of valid rows


_ALOL_VARIANTS = ("alol", "alol_seq", "ref_free", "kl")


def alol_loss(
  logp: Array,
  mask: Array,
  rewards: Array,
  values: Array,
  ref_logp: Optional[Array] = None,
  *,
  valid: Optional[Array] = None,
  variant: str = "alol",
  epsilon: Optional[float] = 0.9,
  kl_coef: Optional[float] = None,
  positive_only: bool = True,
  log_ratio_clamp: float = 20.0,
) -> Tuple[Array, AlolExtras]:
  """A-LoL loss: ``-A+ * clip(pi_theta / pi_ref) * log pi_theta(y|x)`` per response (per-example).

  Baheti et al., arXiv 2305.14718. The gradient is the one the authors state (repository
  abaheti95/LoL-RL, README equation ``images/A_LoL_eq.png``, @9f8d816)::

    -E_{(x, y) ~ D_tr}[ (R(x, y) - V_pi_ref(x)) * pi_theta(y|x) / pi_ref(y|x)
                        * grad log pi_theta(y|x) ]

  The whole response is one action: ``log pi(y|x)`` is the sum of its token log-probs and the
  importance weight is one sequence ratio. The paper's equation numbers are not cited (only
  its abstract and the repository could be read here); the details follow the authors' code,
  ``lolrl_qlora_llama_hh.py`` (the ``a_lol*`` branches of the training loop) @9f8d816:

  * the advantage ``A = R - V_ref(x)`` is clamped at 0 (``positive_only``; the code's
    ``clamp(min=0)``, the "leftover lunch" of positive-advantage data);
  * the ratio is detached and clipped to ``[1 - epsilon, 1 + epsilon]`` (code ``ppo_clip``,
    default 0.9): a weight, not a PPO ``min``; ``epsilon=None`` leaves it unclipped;
  * per-row losses are averaged over the batch (the code's ``mean``).

  Variants (``variant``): ``"alol"``; ``"alol_seq"`` (A-LoL seq): a per-token clipped ratio
  ``clip(pi_theta(y_t) / pi_ref(y_t))`` weighs each token's log-prob; ``"ref_free"`` (A-LoL
  ref-free): importance weight 1, no ``ref_logp`` needed; ``"kl"`` (A-LoL KL): no ratio, plus
  ``kl_coef * (log pi_theta(y|x) - log pi_ref(y|x))`` on the training response (the code's
  ``kl_beta`` term, which it allows only with the ratio off).

  Deviation, with its switch: the code's ref-free branch does not clamp the advantage (it relies
  on the sampler drawing positive-advantage rows); here ``positive_only`` applies to every
  variant, ``positive_only=False`` gives the unclamped advantage. The code's priority sampling
  (rows drawn with probability proportional to ``A+``, ``--sampling_strategy good_priority``)
  and the value head trained on the reference policy's validation rewards are data-pipeline
  steps outside this loss.

  Args:
    logp: float ``[B, T]`` token log-probs of the training responses under ``pi_theta``.
    mask: ``[B, T]`` response mask; masked tokens are not read.
    rewards: float ``[B]`` ``R(x, y)`` (the code uses a sigmoid of a reward-model score).
    values: float ``[B]`` ``V_pi_ref(x)`` (detached).
    ref_logp: float ``[B, T]`` under the frozen reference policy (required except for
      ``"ref_free"``; no gradient).
    valid: optional bool ``[B]``; invalid rows contribute 0 and are not counted.
    variant: ``"alol"``, ``"alol_seq"``, ``"ref_free"`` or ``"kl"``.
    epsilon: ratio clip in ``(0, 1]``, or None (no clip).
    kl_coef: the KL coefficient (> 0), required by ``variant="kl"`` and unused otherwise.
    positive_only: clamp the advantage at 0.
    log_ratio_clamp: clamp of the log-ratios before ``exp``.

  Returns:
    ``(loss, AlolExtras)``.
  """
  _checks.choice("variant", variant, _ALOL_VARIANTS)
  _checks.number("epsilon", epsilon, low=0.0, high=1.0, low_open=True, optional=True)
  _checks.boolean("positive_only", positive_only)
  _checks.positive("log_ratio_clamp", log_ratio_clamp, finite=False)
  _checks.positive("kl_coef", kl_coef, optional=True)
  if variant == "kl" and kl_coef is None:
    _checks.fail("kl_coef", "a float > 0 with variant='kl'", kl_coef)
  if ref_logp is None and variant != "ref_free":
    _checks.fail("ref_logp", f"a [B, T] array with variant={variant!r}", ref_logp)
  tokens = [logp, mask] + ([ref_logp] if ref_logp is not None else [])
  chex.assert_rank(tokens, 2)
  chex.assert_equal_shape(tokens)
  chex.assert_type(logp, float)
  if ref_logp is not None:
    chex.assert_type(ref_logp, float)
  named = [("rewards", rewards), ("values", values)]
  if valid is not None:
    named.append(("valid", valid))
  check_rows(named, float_names=("rewards", "values"), bool_names=("valid",))
  chex.assert_equal_shape_prefix([logp, rewards], 1)
  valid = valid_or_all(valid, rewards)
  read = (jnp.asarray(mask) != 0) & valid[:, None]
  (logp,) = _masking.zero_masked(read, logp)
  m = read.astype(logp.dtype)
  seq_logp = jnp.sum(logp * m, axis=1)
  advantages = jax.lax.stop_gradient(jnp.where(valid, rewards - values, 0))
  a = jnp.maximum(advantages, 0) if positive_only else advantages

  if ref_logp is not None:
    (ref,) = _masking.zero_masked(read, jax.lax.stop_gradient(ref_logp))
    seq_ref = jnp.sum(ref * m, axis=1)
    log_ratio = jax.lax.stop_gradient(seq_logp) - seq_ref
  else:
    ref = jnp.zeros_like(logp)
    log_ratio = jnp.zeros_like(seq_logp)
  ratio = jnp.exp(jnp.clip(log_ratio, -log_ratio_clamp, log_ratio_clamp))

  def clip(r):
    return r if epsilon is None else jnp.clip(r, 1.0 - epsilon, 1.0 + epsilon)

  weights = a
  if variant == "alol":
    weights = a * clip(ratio)
    row_loss = -weights * seq_logp
  elif variant == "alol_seq":
    token_log_ratio = jax.lax.stop_gradient(logp) - ref
    token_ratio = clip(jnp.exp(jnp.clip(token_log_ratio, -log_ratio_clamp, log_ratio_clamp)))
    row_loss = -a * jnp.sum(token_ratio * logp * m, axis=1)
  elif variant == "ref_free":
    row_loss = -a * seq_logp
  else:
    row_loss = -a * seq_logp + kl_coef * (seq_logp - seq_ref)
  row_loss = jnp.where(valid, row_loss, 0)
  loss_sum = jnp.sum(row_loss)
  denominator = jnp.sum(valid).astype(logp.dtype)
  kept = valid & ((a > 0) if positive_only else (a != 0))
  kl = safe_div(jnp.sum(jnp.where(valid, log_ratio, 0)), denominator)
  extras = AlolExtras(advantages, weights, ratio, kept, kl, loss_sum, denominator)
  return safe_div(loss_sum, denominator), extras
