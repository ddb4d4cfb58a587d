"""ArCHer's online losses: the utterance-level critic (Q and V targets, twin critics) and the
token-level actor (advantage-weighted REINFORCE, with or without a token baseline, and the
K-sample and batch-standardised forms of its advantage). Zhou et al., "ArCHer", arXiv:2402.19446;
the formulas are in this package's docstring."""

from typing import Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.hierarchical_critics._common import (
  ActorExtras,
  Array,
  BASELINE_DENOMINATORS,
  BaselineActorExtras,
  CriticExtras,
  HEAD_MODES,
  _check_ensemble,
  _masked_mean,
  _reduce_heads,
  _sequence_log_prob,
  _token_mask,
  _valid_mask,
  _zero_invalid_transitions,
)

# ----------------------------------------------------------------------------------------------
# ArCHer: targets, critic loss, advantage, actor losses.
# ----------------------------------------------------------------------------------------------


def archer_q_targets(
  r: Array,
  terminated: Array,
  v_next_tgt: Array,
  gamma: float,
  *,
  heads: str = "per_head",
) -> Array:
  """ArCHer Q-targets y_e = r + γ·(1 − terminated)·V̄_e(s'), per transition.

  See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou et al.
  (arXiv 2402.19446), utterance-level TD critic; reference `ArcherTrainer.critic_loss`.

  Per example (elementwise in B), no gradient handling (the caller's loss stops it).
  Terminated is not truncated: only `terminated` removes the bootstrap. A transition cut by a
  time limit (truncated) keeps terminated = 0 and must carry V̄ of the true next state, not of
  the auto-reset observation. Deviation from the reference: its `done` flag folds the turn limit
  into termination (no bootstrap at the 20th turn of Twenty Questions); pass terminated = done to
  reproduce it.

  Args:
    r: float [B] utterance-level rewards.
    terminated: bool or float (0/1) [B], 1 where s' is terminal.
    v_next_tgt: float [E, B] target-critic state values V̄_e(s').
    gamma: discount, a Python float in [0, 1] (ArCHer configs: 0.95).
    heads: "per_head" (reference: Q head e bootstraps from target V head e, no min) or "min"
      (every head bootstraps from min_e V̄_e(s'), clipped-double-Q style).

  Returns:
    float [E, B] targets.
  """
  _checks.discount("gamma", gamma)
  _checks.choice("heads", heads, HEAD_MODES)
  chex.assert_rank([r, terminated, v_next_tgt], [1, 1, 2])
  chex.assert_type([r, v_next_tgt], float)
  chex.assert_equal_shape([r, terminated, v_next_tgt[0]])
  not_terminal = 1.0 - jnp.asarray(terminated).astype(r.dtype)
  bootstrap = _reduce_heads(v_next_tgt, heads)
  return r[None, :] + gamma * not_terminal[None, :] * bootstrap


def archer_v_targets(q_pi_tgt: Array, *, heads: str = "per_head") -> Array:
  """ArCHer V-targets z_e = Q̄_e(s, a_π): the target critic at one fresh policy utterance.

  A one-sample SARSA-style estimate of E_{a~π} Q̄(s, a) (not an expectile). Per example.

  Args:
    q_pi_tgt: float [E, B] target-critic Q at a freshly sampled a_π ~ π(·|s).
    heads: "per_head" (reference: V head e regresses onto target Q head e) or "min" (every V
      head regresses onto min_e Q̄_e(s, a_π)).

  Returns:
    float [E, B] targets.
  """
  _checks.choice("heads", heads, HEAD_MODES)
  _check_ensemble(q_pi_tgt)
  return _reduce_heads(q_pi_tgt, heads)


def _twin_critic_targets(
  r: Array,
  terminated: Array,
  v_next_tgt: Array,
  q_at_a_tgt: Array,
  gamma: float,
  q_target_heads: str,
  v_target_heads: str,
  stop_target_gradients: bool,
) -> Tuple[Array, Array]:
  """The Q-targets y (`archer_q_targets`) and V-targets z (`archer_v_targets` of the target
  critic's Q at a_π or at the data action), both `[E, B]`, optionally without gradient."""
  _checks.choice("q_target_heads", q_target_heads, HEAD_MODES)
  _checks.choice("v_target_heads", v_target_heads, HEAD_MODES)
  q_target = archer_q_targets(r, terminated, v_next_tgt, gamma, heads=q_target_heads)
  v_target = archer_v_targets(q_at_a_tgt, heads=v_target_heads)
  if stop_target_gradients:
    q_target = jax.lax.stop_gradient(q_target)
    v_target = jax.lax.stop_gradient(v_target)
  return q_target, v_target


def _twin_critic_loss(
  q: Array,
  v: Array,
  q_target: Array,
  v_target: Array,
  v_term: Array,
  valid: Array,
) -> Tuple[Array, CriticExtras]:
  """Σ_e mean_B (y_e − Q_e)² + Σ_e mean_B v_term_e over valid examples."""
  q_td_error = q_target - q
  q_term = jnp.square(q_td_error)
  per_example = jnp.sum(q_term, axis=0) + jnp.sum(v_term, axis=0)
  loss, loss_sum, denominator = _masked_mean(per_example, valid)
  head_mean = jax.vmap(lambda x: _masked_mean(x, valid)[0])
  extras = CriticExtras(
    q_target=q_target,
    v_target=v_target,
    q_td_error=q_td_error,
    v_error=v_target - v,
    q_head_loss=head_mean(q_term),
    v_head_loss=head_mean(v_term),
    loss_sum=loss_sum,
    denominator=denominator,
  )
  return loss, extras


def archer_critic_loss(
  q: Array,
  v: Array,
  v_next_tgt: Array,
  q_pi_tgt: Array,
  r: Array,
  terminated: Array,
  gamma: float,
  *,
  q_target_heads: str = "per_head",
  v_target_heads: str = "per_head",
  valid: Optional[Array] = None,
  stop_target_gradients: bool = True,
) -> Tuple[Array, CriticExtras]:
  """ArCHer utterance-level twin Q/V critic loss.

  See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou et al.
  (arXiv 2402.19446), utterance-level critic; reference `ArcherTrainer.critic_loss`
  (YifeiZhou02/ArCHer @7c771a7).

    L = Σ_e mean_B (Q_e(s, a) − y_e)² + Σ_e mean_B (V_e(s) − z_e)²,
    y_e = r + γ(1 − terminated)·V̄_e(s'),   z_e = Q̄_e(s, a_π),  a_π ~ π(·|s) fresh.

  Batch-level mean of per-example losses (each of the 2E MSE terms is a batch mean; the terms
  are summed, as in the reference). Targets come from the target critic and carry no gradient
  unless `stop_target_gradients=False`.

  Reference behaviours kept: head-wise targets (no min over heads) for both Q and V, the sum of
  the four MSEs, no ½ factor. The V-target is sometimes described as the min over the target Q
  heads; the reference code regresses V head e onto target Q head e (no min), so "per_head" is
  the default and "min" the documented alternative (likewise for the Q-target). Deviations:
  terminated/truncated are distinguished (see `archer_q_targets`); the loss is a mean over the
  batch rather than summed over gradient-accumulation micro-batches.

  Args:
    q: float [E, B] online Q_e(s, a) at the replayed utterance a.
    v: float [E, B] online V_e(s).
    v_next_tgt: float [E, B] target-critic V̄_e(s').
    q_pi_tgt: float [E, B] target-critic Q̄_e(s, a_π) at a freshly sampled utterance.
    r: float [B] rewards.
    terminated: bool or float [B].
    gamma: Python float in [0, 1] (ArCHer: 0.95).
    q_target_heads: "per_head" (reference) or "min", see `archer_q_targets`.
    v_target_heads: "per_head" (reference) or "min", see `archer_v_targets`.
    valid: optional bool [B] mask of real (non-padding) transitions; an invalid one is not read.
    stop_target_gradients: stop the gradient of y and z (default True).

  Returns:
    (loss, CriticExtras).
  """
  _check_ensemble(q, v, v_next_tgt, q_pi_tgt)
  valid = _valid_mask(valid, q.shape[1])
  q, v, v_next_tgt, q_pi_tgt, r, terminated = _zero_invalid_transitions(
    valid, q, v, v_next_tgt, q_pi_tgt, r, terminated
  )
  q_target, v_target = _twin_critic_targets(
    r,
    terminated,
    v_next_tgt,
    q_pi_tgt,
    gamma,
    q_target_heads,
    v_target_heads,
    stop_target_gradients,
  )
  v_term = jnp.square(v_target - v)
  return _twin_critic_loss(q, v, q_target, v_target, v_term, valid)


def archer_advantage(q: Array, v: Array) -> Array:
  """Utterance-level advantage A(s, a) = min_e Q_e(s, a) − min_e V_e(s), without gradient.

  Reference `ArcherTrainer.update` (actor part) and `RobertaCritic.get_advantages`: the min is
  taken over the Q heads and, separately, over the V heads (not a mean). ArCHer evaluates the
  online critic (not the target) at a fresh a_π; Offline ArCHer at the dataset action.
  Per example.

  Args:
    q: float [E, B] online Q_e(s, a).
    v: float [E, B] online V_e(s).

  Returns:
    float [B], wrapped in `stop_gradient`.
  """
  _check_ensemble(q, v)
  return jax.lax.stop_gradient(jnp.min(q, axis=0) - jnp.min(v, axis=0))


def archer_actor_loss(
  token_logp: Array,
  token_mask: Array,
  q_pi: Array,
  v: Array,
  *,
  valid: Optional[Array] = None,
) -> Tuple[Array, ActorExtras]:
  """ArCHer token-level REINFORCE loss weighted by the utterance-level advantage.

  See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou et al.
  (arXiv 2402.19446), token-level policy gradient; reference `ArcherTrainer.actor_loss`.

    L = −mean_B [ A(s, a_π) · Σ_h mask_h · log π(a_π^h | s, a_π^{<h}) ],
    A = min_e Q_e(s, a_π) − min_e V_e(s)   (online critic, stop-gradient).

  Every token of the utterance gets the same advantage. The gradient flows only through
  `token_logp`: `q_pi` and `v` receive exactly zero gradient. Batch-level mean of per-example
  losses. Like the reference there is no PPO ratio or clip (commented out there), no entropy
  bonus and no KL term. Padded tokens and invalid examples are not read, so -inf/NaN log-probs
  or values there do not leak into the loss, its extras or its gradient.

  Args:
    token_logp: float [B, L] log π of each token of the sampled utterance a_π.
    token_mask: bool or 0/1 [B, L], True on the utterance's real tokens.
    q_pi: float [E, B] online Q_e(s, a_π).
    v: float [E, B] online V_e(s).
    valid: optional bool [B] example mask.

  Returns:
    (loss, ActorExtras).
  """
  mask = _token_mask(token_logp, token_mask)
  _check_ensemble(q_pi, v)
  chex.assert_equal_shape([token_logp[:, 0], q_pi[0]])
  valid = _valid_mask(valid, token_logp.shape[0])
  (token_logp,) = _masking.zero_masked(mask & valid[:, None], token_logp)
  q_pi, v = _masking.zero_masked(valid[None, :], q_pi, v)
  advantage = archer_advantage(q_pi, v)
  sequence_log_prob = _sequence_log_prob(token_logp, mask)
  loss, loss_sum, denominator = _masked_mean(-advantage * sequence_log_prob, valid)
  extras = ActorExtras(
    advantage=advantage,
    sequence_log_prob=sequence_log_prob,
    num_tokens=jnp.sum(mask, axis=-1),
    loss_sum=loss_sum,
    denominator=denominator,
  )
  return loss, extras


def mean_over_samples(values: Array, samples: int) -> Array:
  """The mean over K samples per dialogue: `values` `[..., K * B]` with sample-major rows (row
  k * B + b is sample k of dialogue b, the rows of `jnp.tile(dialogue, (K, 1))`) -> `[..., B]`.

  With Q̄_e(s, a_k) of K fresh utterances a_k ~ π(·|s) it is the K-sample estimate of
  E_{a~π} Q̄_e(s, a) that ArCHer's V target regresses on (the reference draws K = 1). Couples
  the K samples of a dialogue, nothing else.
  """
  _checks.integer("samples", samples)
  chex.assert_type(values, float)
  if values.ndim < 1 or values.shape[-1] % samples:
    _checks.fail("samples", f"a divisor of the last axis of values {values.shape}", samples)
  return jnp.mean(values.reshape(values.shape[:-1] + (samples, -1)), axis=-2)


def archer_sample_mean_baseline(q_pi: Array, samples: int) -> Tuple[Array, Array]:
  """`(q, v)`, each `[1, K * B]`, for which `archer_actor_loss` weights every sample a_k by
  A = min_e Q_e(s, a_k) − mean_k min_e Q_e(s, a_k): a sample-mean baseline in place of V.

  `q_pi` `[E, K * B]` is the online critic at K utterances per dialogue, rows sample-major as in
  `mean_over_samples`. An option beyond the reference (which uses V); couples the K samples.
  """
  _check_ensemble(q_pi)
  q_min = jnp.min(q_pi, axis=0)
  baseline = jnp.tile(mean_over_samples(q_min, samples), samples)
  return q_min[None], baseline[None]


def archer_standardized_advantage(q_pi: Array, v: Array, eps: float = 1e-6) -> Tuple[Array, Array]:
  """`(q, v)`, each `[1, B]`, for which `archer_actor_loss` weights every example by the
  batch-standardised A = min_e Q_e − min_e V_e, `(A − mean A) / (std A + eps)`.

  The loss takes A = min_e Q_e − min_e V_e; the standardised advantage as a single "Q" head with
  V = 0 passes through unchanged (the min over one head is the value itself). An option beyond
  the reference; a batch statistic, so it couples the examples.
  """
  _checks.nonnegative("eps", eps)
  advantage = archer_advantage(q_pi, v)
  advantage = (advantage - jnp.mean(advantage)) / (jnp.std(advantage) + eps)
  return advantage[None], jnp.zeros_like(advantage)[None]


def archer_baseline_actor_loss(
  token_logp: Array,
  token_mask: Array,
  q_pi: Array,
  v: Array,
  token_baseline: Array,
  *,
  baseline_coef: float = 1.0,
  baseline_denominator: str = "valid_tokens",
  valid: Optional[Array] = None,
) -> Tuple[Array, BaselineActorExtras]:
  """ArCHer actor loss with a token-level baseline b_h (the paper's variance-reduced variant).

  See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou et al.
  (arXiv 2402.19446), token-level baseline; reference `ArcherTrainer.actor_loss`, branch
  where the policy also returns values.

    L = −mean_B Σ_h sg(A − b_h)·mask_h·log π_h  +  c·Σ_{B,h} mask_h·(A − b_h)² / D,

  with A the stop-gradient utterance advantage, b_h the baseline at token h (e.g. a value head on
  the policy LM) and c = `baseline_coef`. The baseline regresses the advantage A (not Q), as in
  the reference. The policy gradient uses the detached residual A − b_h, so `token_baseline`
  gets gradient only from the regression term and `token_logp` only from the policy term.

  The reference marks this variant "will be added soon" and ships no model with a value head:
  it is paper-only and optional. Deviation: the reference's regression term is
  `torch.mean(((A − b)·mask)²)`, i.e. D = B·L counting padded tokens; the default here is the
  masked MSE, D = number of valid tokens ("valid_tokens"); "all_tokens" (D = valid examples × L)
  reproduces the reference.

  Args:
    token_logp: float [B, L] token log-probs of the sampled utterance.
    token_mask: bool or 0/1 [B, L].
    q_pi: float [E, B] online Q_e(s, a_π).
    v: float [E, B] online V_e(s).
    token_baseline: float [B, L] token-level baseline values b_h.
    baseline_coef: c >= 0, weight of the regression term (reference: 1).
    baseline_denominator: "valid_tokens" (default) or "all_tokens" (reference).
    valid: optional bool [B] example mask; padded tokens and invalid examples are not read.

  Returns:
    (loss, BaselineActorExtras).
  """
  _checks.nonnegative("baseline_coef", baseline_coef)
  _checks.choice("baseline_denominator", baseline_denominator, BASELINE_DENOMINATORS)
  mask = _token_mask(token_logp, token_mask)
  _check_ensemble(q_pi, v)
  chex.assert_type(token_baseline, float)
  chex.assert_equal_shape([token_logp, token_baseline])
  chex.assert_equal_shape([token_logp[:, 0], q_pi[0]])
  valid = _valid_mask(valid, token_logp.shape[0])
  token_valid = mask & valid[:, None]
  token_logp, token_baseline = _masking.zero_masked(token_valid, token_logp, token_baseline)
  q_pi, v = _masking.zero_masked(valid[None, :], q_pi, v)

  advantage = archer_advantage(q_pi, v)
  residual = advantage[:, None] - token_baseline
  detached_residual = jnp.where(mask, jax.lax.stop_gradient(residual), 0.0)
  per_example_pg = -jnp.sum(detached_residual * jnp.where(mask, token_logp, 0.0), axis=-1)
  pg_loss, pg_loss_sum, pg_denominator = _masked_mean(per_example_pg, valid)

  baseline_loss_sum = jnp.sum(jnp.where(token_valid, jnp.square(residual), 0.0))
  if baseline_denominator == "valid_tokens":
    baseline_count = jnp.sum(token_valid).astype(token_logp.dtype)
  else:
    baseline_count = pg_denominator * token_logp.shape[1]
  baseline_loss = baseline_loss_sum / jnp.maximum(baseline_count, 1.0)

  extras = BaselineActorExtras(
    advantage=advantage,
    residual_advantage=detached_residual,
    pg_loss=pg_loss,
    baseline_loss=baseline_loss,
    pg_loss_sum=pg_loss_sum,
    pg_denominator=pg_denominator,
    baseline_loss_sum=baseline_loss_sum,
    baseline_denominator=baseline_count,
  )
  return pg_loss + baseline_coef * baseline_loss, extras
