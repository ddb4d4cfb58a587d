"""Offline ArCHer (IQL-style expectile V with AWR-weighted actor), filtered behaviour cloning and
CHAI's candidate selection; the formulas are in this package's docstring."""

from typing import Optional, Tuple

import chex
import jax.numpy as jnp

from hrljax.losses import _checks, _masking
from hrljax.losses.goal_conditioned import awr_weights, expectile_loss
from hrljax.losses.hierarchical_critics._common import (
  AWRActorExtras,
  Array,
  BCExtras,
  CriticExtras,
  FILTER_METHODS,
  _check_ensemble,
  _masked_mean,
  _sequence_log_prob,
  _token_mask,
  _valid_mask,
  _zero_invalid_transitions,
)
from hrljax.losses.hierarchical_critics.online import (
  _twin_critic_loss,
  _twin_critic_targets,
  archer_advantage,
)

# ----------------------------------------------------------------------------------------------
# Offline ArCHer: IQL critic (expectile V) and advantage-weighted actor.
# ----------------------------------------------------------------------------------------------


def offline_archer_critic_loss(
  q: Array,
  v: Array,
  v_next_tgt: Array,
  q_data_tgt: Array,
  r: Array,
  terminated: Array,
  gamma: float,
  expectile: float = 0.9,
  *,
  q_target_heads: str = "per_head",
  v_target_heads: str = "per_head",
  valid: Optional[Array] = None,
  stop_target_gradients: bool = True,
) -> Tuple[Array, CriticExtras]:
  """Offline ArCHer twin critic: IQL (TD Q-loss and expectile V-loss) at the utterance level.

  See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou et al.
  (arXiv 2402.19446), offline experiments; reference `RobertaCritic.iql_loss`
  (andreazanette/OfflineArcher @56d3b72); expectile from "Offline Reinforcement Learning with
  Implicit Q-Learning" by Kostrikov, Nair, Levine (arXiv 2110.06169), Eq. 5.

    L = Σ_e mean_B (Q_e(s, a) − y_e)² + Σ_e mean_B |τ − 1[z_e − V_e < 0]|·(z_e − V_e)²,
    y_e = r + γ(1 − terminated)·V̄_e(s'),   z_e = Q̄_e(s, a_data).

  Unlike online ArCHer, the V-target uses the target critic at the dataset action, so no
  generation is needed. Batch-level mean of per-example losses; head-wise targets by default as
  in the reference. The expectile term is `goal_conditioned.expectile_loss` (no ½ factor, equal
  to `rlax.expectile_loss`). Deviation: terminated/truncated distinguished (see
  `archer_q_targets`); the reference's `done` folds both.

  Args:
    q: float [E, B] online Q_e(s, a_data).
    v: float [E, B] online V_e(s).
    v_next_tgt: float [E, B] target-critic V̄_e(s').
    q_data_tgt: float [E, B] target-critic Q̄_e(s, a_data).
    r: float [B] rewards.
    terminated: bool or float [B].
    gamma: Python float in [0, 1] (Offline ArCHer Twenty Questions: 0.99).
    expectile: τ in (0, 1) (Offline ArCHer: 0.9; 0.5 gives ½·MSE).
    q_target_heads: "per_head" (reference) or "min".
    v_target_heads: "per_head" (reference) or "min".
    valid: optional bool [B] example mask; an invalid example is not read.
    stop_target_gradients: stop the gradient of y and z (default True).

  Returns:
    (loss, CriticExtras).
  """
  _checks.open_unit_interval("expectile", expectile)
  _check_ensemble(q, v, v_next_tgt, q_data_tgt)
  valid = _valid_mask(valid, q.shape[1])
  q, v, v_next_tgt, q_data_tgt, r, terminated = _zero_invalid_transitions(
    valid, q, v, v_next_tgt, q_data_tgt, r, terminated
  )
  q_target, v_target = _twin_critic_targets(
    r,
    terminated,
    v_next_tgt,
    q_data_tgt,
    gamma,
    q_target_heads,
    v_target_heads,
    stop_target_gradients,
  )
  v_term = expectile_loss(v_target - v, expectile)
  return _twin_critic_loss(q, v, q_target, v_target, v_term, valid)


def offline_archer_actor_loss(
  token_logp: Array,
  token_mask: Array,
  q_data: Array,
  v: Array,
  inv_temp: float = 1.0,
  max_weight: Optional[float] = None,
  *,
  valid: Optional[Array] = None,
) -> Tuple[Array, AWRActorExtras]:
  """Offline ArCHer actor: advantage-weighted regression on the dataset utterance's tokens.

  See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou et al.
  (arXiv 2402.19446), offline experiments; reference `OfflineArcher.awr_loss`; AWR from
  "Advantage-Weighted Regression" by Peng, Kumar, Zhang, Levine (arXiv 1910.00177), Eq. 12.

    L = −mean_B [ min(exp(β·A), w_max) · Σ_h mask_h·log π(a_data^h | s, a_data^{<h}) ],
    A = min_e Q_e(s, a_data) − min_e V_e(s)   (online critic, stop-gradient).

  Batch-level mean of per-example losses; the gradient flows only through `token_logp`. The
  weight is `goal_conditioned.awr_weights(A, β, w_max)`. The reference does not clip
  (`max_weight=None`, the default here); OGBench-style agents clip at 100. Unclipped weights
  overflow float32 for β·A above about 88.

  Args:
    token_logp: float [B, L] token log-probs of the dataset utterance.
    token_mask: bool or 0/1 [B, L].
    q_data: float [E, B] online Q_e(s, a_data).
    v: float [E, B] online V_e(s).
    inv_temp: β >= 0 (reference `inv_temp`, 1.0); β = 0 gives plain BC.
    max_weight: w_max > 0, or None for no clip (reference).
    valid: optional bool [B] example mask; padded tokens and invalid examples are not read.

  Returns:
    (loss, AWRActorExtras).
  """
  _checks.nonnegative("inv_temp", inv_temp)
  _checks.positive("max_weight", max_weight, finite=False, optional=True)
  mask = _token_mask(token_logp, token_mask)
  _check_ensemble(q_data, v)
  chex.assert_equal_shape([token_logp[:, 0], q_data[0]])
  valid = _valid_mask(valid, token_logp.shape[0])
  (token_logp,) = _masking.zero_masked(mask & valid[:, None], token_logp)
  q_data, v = _masking.zero_masked(valid[None, :], q_data, v)
  advantage = archer_advantage(q_data, v)
  weight = awr_weights(advantage, inv_temp, max_weight)
  sequence_log_prob = _sequence_log_prob(token_logp, mask)
  loss, loss_sum, denominator = _masked_mean(-weight * sequence_log_prob, valid)
  extras = AWRActorExtras(
    advantage=advantage,
    weight=weight,
    sequence_log_prob=sequence_log_prob,
    loss_sum=loss_sum,
    denominator=denominator,
  )
  return loss, extras


# ----------------------------------------------------------------------------------------------
# Baselines of the ArCHer paper: filtered BC and CHAI action selection.
# ----------------------------------------------------------------------------------------------


def filtered_bc_mask(
  returns: Array,
  top_fraction: float = 0.1,
  *,
  method: str = "quantile",
  valid: Optional[Array] = None,
) -> Array:
  """Which trajectories filtered BC keeps: those with the highest returns.

  Baseline of "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou et
  al. (arXiv 2402.19446). Batch-level (the filter compares trajectories with each other). Pass
  the returns of every trajectory the filter ranges over (online: all collected so far; offline:
  the dataset), e.g. a fixed-capacity buffer with `valid` marking the filled slots.

  Methods (the two reference codes differ):
    * "quantile" (online ArCHer, `offpolicy_train_loop`): threshold = the (1 − top_fraction)
      quantile of the returns with linear interpolation (NumPy's default, `np.quantile`), keep
      returns >= threshold; ties at the threshold are all kept, so more than top_fraction·N may
      be kept.
    * "top_count" (Offline ArCHer, `keep_top_fraction_of_trajectories`): keep exactly
      floor(top_fraction·N) trajectories of highest return; ties are broken by the first index
      (the reference's tie order follows its sort and was not checked). May keep none.

  Args:
    returns: float [N] trajectory returns.
    top_fraction: fraction to keep, in (0, 1] (both references: 0.1).
    method: "quantile" (default) or "top_count".
    valid: optional bool [N], the trajectories that exist (invalid ones are never kept).

  Returns:
    bool [N] keep mask.
  """
  _checks.number("top_fraction", top_fraction, low=0.0, high=1.0, low_open=True)
  _checks.choice("method", method, FILTER_METHODS)
  chex.assert_rank(returns, 1)
  chex.assert_type(returns, float)
  valid = _valid_mask(valid, returns.shape[0])
  if method == "quantile":
    threshold = jnp.nanquantile(
      jnp.where(valid, returns, jnp.nan), 1.0 - top_fraction, method="linear"
    )
    return valid & (returns >= threshold)
  num_valid = jnp.sum(valid)
  num_keep = jnp.floor(top_fraction * num_valid).astype(jnp.int32)
  # Invalid entries sort last; a stable sort on −return breaks ties by the first index.
  order = jnp.argsort(jnp.where(valid, -returns, jnp.inf), stable=True)
  rank = jnp.zeros_like(order).at[order].set(jnp.arange(returns.shape[0], dtype=order.dtype))
  return valid & (rank < num_keep)


def filtered_bc_loss(
  token_logp: Array,
  token_mask: Array,
  keep: Array,
) -> Tuple[Array, BCExtras]:
  """Behaviour cloning on the kept utterances: mean over kept examples of the token-summed NLL.

  Reference `plain_bc_loss` (ArCHer) and `behavioral_cloning_loss` (Offline ArCHer):
  L = −mean_B Σ_h mask_h·log π(a^h | s, a^{<h}). The references train on a buffer rebuilt from
  the kept trajectories; here a batch from the unfiltered buffer is masked by `keep` (e.g. each
  utterance inherits its trajectory's `filtered_bc_mask` entry), which gives the same expected
  loss when kept utterances are sampled uniformly. With `keep` all True this is plain BC (the
  SFT initialisation of every ArCHer run). Batch-level; an empty selection gives loss 0.

  Args:
    token_logp: float [B, L] token log-probs of the dataset utterances.
    token_mask: bool or 0/1 [B, L].
    keep: bool [B], the utterances to clone; padded tokens and the utterances not kept are not
      read (their `sequence_log_prob` is 0).

  Returns:
    (loss, BCExtras).
  """
  mask = _token_mask(token_logp, token_mask)
  keep = _valid_mask(keep, token_logp.shape[0])
  (token_logp,) = _masking.zero_masked(mask & keep[:, None], token_logp)
  sequence_log_prob = _sequence_log_prob(token_logp, mask)
  loss, loss_sum, denominator = _masked_mean(-sequence_log_prob, keep)
  extras = BCExtras(
    sequence_log_prob=sequence_log_prob,
    keep=keep,
    loss_sum=loss_sum,
    denominator=denominator,
  )
  return loss, extras


def chai_select(q_candidates_tgt: Array) -> Tuple[Array, Array]:
  """CHAI action selection: the candidate utterance with the highest min-over-heads target Q.

  Baseline of "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou et
  al. (arXiv 2402.19446); reference `CHAIAgent.get_action` (K = 5 samples per state, target
  critic, min over the twin Q heads). CHAI trains its critic with `archer_critic_loss` and never
  updates the actor. Per example; ties go to the first candidate.

  Args:
    q_candidates_tgt: float [E, B, K] target-critic Q̄_e(s_b, a_{b,k}) of K sampled candidates.

  Returns:
    (index int32 [B] of the chosen candidate, its min-over-heads Q [B]).
  """
  chex.assert_rank(q_candidates_tgt, 3)
  chex.assert_type(q_candidates_tgt, float)
  min_q = jnp.min(q_candidates_tgt, axis=0)
  index = jnp.argmax(min_q, axis=-1).astype(jnp.int32)
  chosen = jnp.take_along_axis(min_q, index[:, None], axis=-1)[:, 0]
  return index, chosen
