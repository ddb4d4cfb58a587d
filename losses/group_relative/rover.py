"""ROVER: random-policy valuation, a squared TD loss on the Q of the uniform policy.

He, Ye, Cai, Hu, Jiao, Jiang, Pan, "Random Policy Valuation is Enough for LLM Reasoning with
Verifiable Rewards", arXiv 2509.24981. The paper's theorem: in a deterministic, tree-shaped,
finite-horizon MDP with binary terminal rewards, acting greedily (or by a softmax) on the Q of the
*uniform* policy is optimal, so no policy-iteration loop is needed. The Q is parameterised by the
policy itself, ``Q(s, a) = rho * (log pi_theta(a|s) - log pi_old(a|s))``, and fitted by the
uniform-policy Bellman backup ``Q(s_t, a_t) <- r~ + mean_{a in vocab} Q(s_{t+1}, a)``.

Equation numbers could not be read: the stored copies of the paper reachable here give its
abstract and secondary summaries (the Q parameterisation, the mean-centred reward broadcast to
every token, the uniform backup), not its numbered equations. The loss follows the authors'
code, ``yuxiaooye/ROVER@ea5ce63``: ``Math/verl/workers/actor/dp_actor.py`` (the ROVER block of
``update_policy``), ``Math/verl/utils/torch_functional.py::sum_log_softmax`` (which is the *mean*
log-softmax), ``Math/verl/trainer/ppo/core_algos.py::compute_rover_loss`` and
``compute_rover_outcome_advantage``, and ``Countdown/verl/trainer/ppo/core_algos.py::
compute_rover_reward``. Batch-level; token arrays are ``[B, T]``.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.group_relative._segments import (
  SINGLETON_MODES,
  check_segment_args,
  safe_div,
  with_nan,
)
from hrljax.losses.group_relative.normalize import group_normalize
from hrljax.losses.policy_gradient import AGGREGATION_MODES, aggregate

Array = chex.Array

ROVER_REWARD_FORMS = ("mean_centred", "grpo", "math_release")


def uniform_policy_value(
  logits: Array, *, vocab_mask: Optional[Array] = None, temperature: float = 1.0
) -> Array:
  """Mean log-softmax over the vocabulary, ``mean_a log softmax(logits / temperature)_a``.

  ``= mean_a z_a - logsumexp_a z_a`` with ``z = logits / temperature``: the value of the uniform
  policy in ROVER's parameterisation, up to the factor ``rho`` and the old policy's term (the
  authors' ``sum_log_softmax``, which despite its name averages). Compute it once under the old
  policy (stored with the rollout, the authors' ``old_logits``) and once under the current one,
  at every position of the response; :func:`rover_loss` takes both.

  Args:
    logits: float ``[..., V]`` logits over the vocabulary (last axis).
    vocab_mask: optional bool ``[..., V]`` or ``[V]``: the entries the uniform policy ranges
      over. Entries left out are never read (a -inf logit of a forbidden token gives a finite
      value and gradient here, where without the mask the mean of the log-softmax is -inf). A
      position with no allowed entry gives 0.
    temperature: the sampling temperature the logits are divided by (> 0; verl divides before
      every log-prob).

  Returns:
    float ``[...]``.
  """
  _checks.positive("temperature", temperature)
  chex.assert_type(logits, float)
  z = logits / temperature
  if vocab_mask is None:
    return jnp.mean(z, axis=-1) - jax.nn.logsumexp(z, axis=-1)
  keep = jnp.broadcast_to(jnp.asarray(vocab_mask) != 0, z.shape)
  (z,) = _masking.zero_masked(keep, z)
  count = jnp.sum(keep, axis=-1).astype(z.dtype)
  top = jax.lax.stop_gradient(jnp.max(jnp.where(keep, z, -jnp.inf), axis=-1, keepdims=True))
  top = jnp.where(jnp.isfinite(top), top, 0)
  exp = jnp.where(keep, jnp.exp(jnp.where(keep, z - top, 0)), 0)
  total = jnp.sum(exp, axis=-1)
  lse = top[..., 0] + jnp.log(jnp.where(total > 0, total, 1))
  mean = safe_div(jnp.sum(z, axis=-1), count)
  return jnp.where(count > 0, mean - lse, 0)


def rover_rewards(
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  form: str = "mean_centred",
  singleton_mode: str = "zero",
  eps: float = 1e-6,
  positive_scale: float = 5.0,
  negative_scale: float = 2.0,
) -> Array:
  """ROVER's shaped outcome reward ``r~`` broadcast to every token of a response (batch-level).

  Forms:

  * ``"mean_centred"`` (default; the paper's low-variance reward, and the released Countdown
    code ``compute_rover_reward``): ``r~_i = r_i - mean_{g(i)} r``. Invariant to a shift of
    all rewards.
  * ``"grpo"``: ``(r_i - mean_g) / (std_g + eps)``, unbiased std. The released math training
    script (``scripts/deepscaler/train/rover_qwen3_8b.sh``) passes
    ``algorithm.adv_estimator=grpo`` with ``norm_adv_by_std_in_grpo=True``, so this is the
    reward the released math runs use.
  * ``"math_release"``: the math code's own ROVER estimator
    (``compute_rover_outcome_advantage``, reached with ``adv_estimator=rover``):
    ``r~ = positive_scale * (1 - p+)`` for a correct response (``r > 0``) and
    ``-negative_scale * (1 - p-)`` otherwise, where ``p+`` and ``p-`` are the fractions of
    correct and incorrect responses in the *whole batch* (of valid rows here; the code divides
    by the batch size and ignores the groups).

  Args:
    rewards: float ``[B]`` outcome rewards (binary in the paper).
    group_ids: int ``[B]`` in ``[0, num_groups)``: the prompt of each response.
    num_groups: static number of groups.
    valid: optional bool ``[B]``; invalid rows enter no statistic (no batch fraction either)
      and get 0.
    form: ``"mean_centred"``, ``"grpo"`` or ``"math_release"``.
    singleton_mode: a one-row group's ``r~`` under the group forms: ``"zero"`` (default: the
      mean of one value is itself) or ``"raw"`` (``r``, or ``r / (1 + eps)`` with ``"grpo"``:
      the authors' code uses mean 0 and std 1 for a one-response prompt).
    eps: std epsilon of the ``"grpo"`` form (verl's 1e-6).
    positive_scale: the 5 of ``"math_release"`` (>= 0).
    negative_scale: the 2 of ``"math_release"`` (>= 0).

  Returns:
    float ``[B]`` under ``stop_gradient``; NaN where a valid row's reward is NaN.
  """
  _checks.choice("form", form, ROVER_REWARD_FORMS)
  _checks.choice("singleton_mode", singleton_mode, SINGLETON_MODES)
  _checks.nonnegative("eps", eps)
  _checks.nonnegative("positive_scale", positive_scale)
  _checks.nonnegative("negative_scale", negative_scale)
  valid = check_segment_args(rewards, group_ids, num_groups, valid)
  if form == "math_release":
    (r,) = _masking.zero_masked(valid, rewards)
    correct = valid & (r > 0)
    wrong = valid & ~(r > 0)
    n = jnp.sum(valid).astype(rewards.dtype)
    p_pos = safe_div(jnp.sum(correct).astype(rewards.dtype), n)
    p_neg = safe_div(jnp.sum(wrong).astype(rewards.dtype), n)
    shaped = jnp.where(correct, positive_scale * (1 - p_pos), -negative_scale * (1 - p_neg))
  else:
    shaped = group_normalize(
      rewards,
      group_ids,
      num_groups,
      valid=valid,
      scale="group" if form == "grpo" else "none",
      eps=eps,
      ddof=1,
      singleton_mode=singleton_mode,
    )
  # A NaN reward stays NaN (the batch fractions and a one-row group's 0 would hide it).
  shaped = with_nan(shaped, valid & jnp.isnan(rewards))
  return jax.lax.stop_gradient(jnp.where(valid, shaped, 0).astype(rewards.dtype))


class RoverExtras(NamedTuple):
  q: Array  # [B, T] Q = rho * (logp - old_logp) as fitted (clipped if clip_epsilon); 0 off mask
  next_value: Array  # [B, T] detached V(s_{t+1}); 0 after the last token and off the mask
  target: Array  # [B, T] detached r~ + V(s_{t+1}); 0 off the mask
  shaped_rewards: Array  # [B] r~ (rover_rewards)
  per_token_loss: Array  # [B, T] (Q - target)^2, 0 off the mask
  clip_fraction: Array  # scalar: fraction of tokens whose Q was clipped (0 without clipping)
  loss_sum: Array  # scalar numerator of the aggregation
  denominator: Array  # scalar denominator of the aggregation


def rover_loss(
  logp: Array,
  old_logp: Array,
  vocab_mean_logp: Array,
  old_vocab_mean_logp: Array,
  mask: Array,
  rewards: Array,
  group_ids: Array,
  num_groups: int,
  *,
  valid: Optional[Array] = None,
  reward_form: str = "mean_centred",
  rho: float = 1.0,
  next_value_scale: float = 1.0,
  clip_epsilon: Optional[float] = None,
  singleton_mode: str = "zero",
  eps: float = 1e-6,
  aggregation: str = "token_mean",
) -> Tuple[Array, RoverExtras]:
  """ROVER loss: squared error of the policy-parameterised Q against the uniform backup.

  Per response token ``t`` of row ``i`` (``s_t`` the prefix before token ``t``):

  * ``Q_t = rho * (logp_t - old_logp_t)``;
  * ``V(s_{t+1}) = next_value_scale * rho * (vocab_mean_logp_{t+1} - old_vocab_mean_logp_{t+1})``,
    the uniform policy's value of the next state (the vocabulary mean of ``Q(s_{t+1}, .)``),
    and ``V = 0`` after the last token: at ``t = T - 1`` and wherever token ``t + 1`` is off
    the mask (the authors multiply by ``mask[:, t + 1]``, so a hole in the mask also ends the
    backup);
  * ``y_t = r~_i + stop_gradient(V(s_{t+1}))`` with ``r~`` from :func:`rover_rewards`;
  * ``loss = aggregate((Q_t - y_t)^2)``, the masked token mean by default (the authors'
    ``masked_mean``).

  The gradient flows only through ``Q`` (``logp``); ``old_logp``, both vocabulary means and the
  reward are read as constants.

  Options of the authors' math code: ``rho`` is ``rover_t`` (1.0), ``next_value_scale`` is
  ``next_q_scale_factor`` (1.0), ``clip_epsilon`` is ``use_rover_clip`` with ``clip_ratio``:
  where ``y > Q > log(1 + clip_epsilon)`` or ``y < Q < log(1 - clip_epsilon)`` the fitted Q is
  replaced by the (constant) bound, so such a token pulls no further. Not offered: the
  ``response_level_rover_loss`` variant. The ``target_adv_only`` ablation (``V = 0``
  everywhere) is ``next_value_scale=0``. The Countdown code has no ``rho`` and no clip
  (``rho = 1``, ``clip_epsilon=None``).

  Args:
    logp: float ``[B, T]`` log-probs of the sampled tokens under pi_theta (carries the gradient).
    old_logp: float ``[B, T]`` the same under the behaviour policy.
    vocab_mean_logp: float ``[B, T]`` :func:`uniform_policy_value` of the current policy at the
      position of each token (the state in which token ``t`` is chosen, aligned like ``logp``).
      Read under ``stop_gradient``; position 0 (the first state's value) is not in the loss.
    old_vocab_mean_logp: float ``[B, T]`` the same under the behaviour policy.
    mask: ``[B, T]`` response mask (bool or 0/1). Masked tokens are never read (NaN or -inf
      there change nothing, gradients included).
    rewards: float ``[B]`` outcome rewards.
    group_ids: int ``[B]`` in ``[0, num_groups)``.
    num_groups: static number of groups.
    valid: optional bool ``[B]``; an invalid row (or one whose group id is out of range under
      jit) enters no reward statistic and no token of it is read.
    reward_form: see :func:`rover_rewards` (default ``"mean_centred"``, the paper's).
    rho: the Q scale ``rho`` (> 0).
    next_value_scale: factor on ``V(s_{t+1})`` in the target (>= 0; 1 in the paper).
    clip_epsilon: ``None`` (default, no clip) or the clip ratio in ``(0, 1)``.
    singleton_mode: see :func:`rover_rewards`.
    eps: see :func:`rover_rewards`.
    aggregation: a mode of ``hrljax.losses.policy_gradient.aggregate`` (``"token_mean"``).

  Returns:
    ``(loss, RoverExtras)``.
  """
  _checks.choice("reward_form", reward_form, ROVER_REWARD_FORMS)
  _checks.positive("rho", rho)
  _checks.nonnegative("next_value_scale", next_value_scale)
  _checks.open_unit_interval("clip_epsilon", clip_epsilon, optional=True)
  _checks.choice("aggregation", aggregation, AGGREGATION_MODES)
  arrays = [logp, old_logp, vocab_mean_logp, old_vocab_mean_logp, mask]
  chex.assert_rank(arrays, 2)
  chex.assert_equal_shape(arrays)
  chex.assert_type([logp, old_logp, vocab_mean_logp, old_vocab_mean_logp], float)
  chex.assert_equal_shape_prefix([logp, rewards], 1)
  row_valid = check_segment_args(rewards, group_ids, num_groups, valid)
  shaped = rover_rewards(
    rewards,
    group_ids,
    num_groups,
    valid=row_valid,
    form=reward_form,
    singleton_mode=singleton_mode,
    eps=eps,
  )
  read = (jnp.asarray(mask) != 0) & row_valid[:, None]
  logp, old_logp, vm, old_vm = _masking.zero_masked(
    read, logp, old_logp, vocab_mean_logp, old_vocab_mean_logp
  )
  old_logp, vm, old_vm = jax.lax.stop_gradient((old_logp, vm, old_vm))
  dtype = logp.dtype

  q = rho * (logp - old_logp)
  next_read = jnp.concatenate([read[:, 1:], jnp.zeros_like(read[:, :1])], axis=1)
  next_gap = jnp.concatenate([vm[:, 1:] - old_vm[:, 1:], jnp.zeros_like(vm[:, :1])], axis=1)
  next_value = jnp.where(next_read, next_value_scale * rho * next_gap, 0)
  target = jnp.where(read, shaped[:, None].astype(dtype) + next_value, 0)
  target = jax.lax.stop_gradient(target)

  clipped = jnp.zeros_like(read)
  if clip_epsilon is not None:
    high = jnp.log1p(jnp.asarray(clip_epsilon, dtype))
    low = jnp.log1p(-jnp.asarray(clip_epsilon, dtype))
    above = (target > q) & (q > high)
    below = (target < q) & (q < low)
    clipped = read & (above | below)
    q = jnp.where(above, high, jnp.where(below, low, q))
  q = jnp.where(read, q, 0)

  per_token = jnp.where(read, jnp.square(q - target), 0)
  loss, agg = aggregate(per_token, read, mode=aggregation)
  clip_fraction = safe_div(jnp.sum(clipped).astype(dtype), jnp.sum(read).astype(dtype))
  extras = RoverExtras(
    q=q,
    next_value=jnp.where(read, next_value, 0),
    target=target,
    shaped_rewards=shaped,
    per_token_loss=per_token,
    clip_fraction=clip_fraction,
    loss_sum=agg.total,
    denominator=agg.denominator,
  )
  return loss, extras
