"""Utterance-level critics and token-level actors: ArCHer, Offline ArCHer, filtered BC, CHAI,
and the token-level credit assignment of ArCHer's flat baseline (token-level PPO).

See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou, Zanette, Pan,
Levine, Kumar (arXiv 2402.19446, ICML 2024). The high level is an off-policy TD critic over
utterance-level transitions (s = dialogue history, a = whole utterance); the low level is a
token-level policy gradient that gives every token of an utterance the utterance-level advantage.
The formulas follow the authors' reference code (YifeiZhou02/ArCHer @7c771a7,
`archer/algorithms/archer/trainer.py`; andreazanette/OfflineArcher @56d3b72, `Algorithms.py`),
since the paper states them only up to these implementation choices. Only the paper's abstract
could be checked when this module was written, so docstrings name the paper's parts (utterance-
level critic, token-level policy gradient, token-level baseline) rather than equation numbers.

Batching convention. Every public function takes a batch of B utterance-level transitions and is
batch-level only in its final mean: the math is per example, nothing couples examples (no batch
normalisation, no batch statistics), so a caller may equally vmap over an extra leading axis.
Critic outputs are laid out ensemble-first, `[E, B]` (E = 2 twin heads in ArCHer, the layout
`nn.vmap` ensembles produce); scalars per transition are `[B]`; token arrays are `[B, L]` with a
token mask. Losses are means over the valid examples (optional `valid: bool[B]`, default all),
and their extras expose `loss_sum` and `denominator` so that a sharded caller can normalise over
the global batch. The reference sums the losses of its gradient-accumulation micro-batches (its
README: effective lr = lr × grad_accum_steps); here every loss is a mean, so an accumulating
caller should average micro-batch gradients (or scale the lr) to match.

Generation is outside this module: the caller samples the fresh utterance a_π ~ π(·|s), evaluates
the target critic on it (`q_pi_tgt`), the online critic on it (`q_pi`, `v`) and the policy's token
log-probs (`token_logp`), and passes the arrays in.

The Polyak target update (ArCHer: after every critic optimizer step, τ = 0.1, post-step online
parameters) is `optax.incremental_update(online, target, tau)` in the agent, not a loss.
"""

from typing import NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks, _masking, policy_gradient
from hrljax.losses.goal_conditioned import awr_weights, expectile_loss

Array = chex.Array

HEAD_MODES = ("per_head", "min")
BASELINE_DENOMINATORS = ("valid_tokens", "all_tokens")
FILTER_METHODS = ("quantile", "top_count")


# ----------------------------------------------------------------------------------------------
# Extras.
# ----------------------------------------------------------------------------------------------


class CriticExtras(NamedTuple):
  """Per-element quantities of a twin Q/V critic loss (E heads, B transitions)."""

  q_target: Array  # [E, B] y_e = r + γ(1 − terminated)·V̄(s')
  v_target: Array  # [E, B] z_e (a target-critic Q at a_π or at the data action)
  q_td_error: Array  # [E, B] y_e − Q_e(s, a)
  v_error: Array  # [E, B] z_e − V_e(s)
  q_head_loss: Array  # [E] masked batch mean of the Q term of head e
  v_head_loss: Array  # [E] masked batch mean of the V term of head e
  loss_sum: Array  # scalar: sum over valid examples of the per-example loss
  denominator: Array  # scalar: number of valid examples


class ActorExtras(NamedTuple):
  """Per-utterance quantities of the ArCHer REINFORCE actor loss."""

  advantage: Array  # [B] min_e Q_e(s, a_π) − min_e V_e(s), no gradient
  sequence_log_prob: Array  # [B] Σ_h mask_h·log π(a_π^h | s, a_π^{<h})
  num_tokens: Array  # [B] number of unmasked tokens
  loss_sum: Array  # scalar
  denominator: Array  # scalar: number of valid examples


class BaselineActorExtras(NamedTuple):
  """Per-token quantities of the ArCHer actor loss with a token-level baseline."""

  advantage: Array  # [B] utterance-level advantage, no gradient
  residual_advantage: Array  # [B, L] A − b_h on unmasked tokens, 0 elsewhere, no gradient
  pg_loss: Array  # scalar: policy-gradient term
  baseline_loss: Array  # scalar: masked MSE of the baseline onto A (before baseline_coef)
  pg_loss_sum: Array  # scalar
  pg_denominator: Array  # scalar: number of valid examples
  baseline_loss_sum: Array  # scalar
  baseline_denominator: Array  # scalar: valid tokens, or valid examples × L


class AWRActorExtras(NamedTuple):
  """Per-utterance quantities of the Offline ArCHer advantage-weighted actor loss."""

  advantage: Array  # [B] min_e Q_e(s, a_data) − min_e V_e(s), no gradient
  weight: Array  # [B] min(exp(β·A), w_max), no gradient
  sequence_log_prob: Array  # [B]
  loss_sum: Array  # scalar
  denominator: Array  # scalar


class BCExtras(NamedTuple):
  """Per-utterance quantities of the (filtered) behaviour-cloning loss."""

  sequence_log_prob: Array  # [B]
  keep: Array  # [B] bool: example counted (kept by the filter and valid)
  loss_sum: Array  # scalar
  denominator: Array  # scalar: number of kept examples


# ----------------------------------------------------------------------------------------------
# Validation of Python-valued arguments and shared shape checks.
# ----------------------------------------------------------------------------------------------


def _check_ensemble(*arrays: Array) -> None:
  """Critic outputs: float, rank 2 ([E, B]), all of one shape."""
  chex.assert_rank(arrays, 2)
  chex.assert_type(arrays, float)
  chex.assert_equal_shape(arrays)


def _valid_mask(valid: Optional[Array], batch_size: int) -> Array:
  """Bool [B] example mask; all True when `valid` is None."""
  if valid is None:
    return jnp.ones((batch_size,), dtype=bool)
  chex.assert_rank(valid, 1)
  chex.assert_shape(valid, (batch_size,))
  return jnp.asarray(valid) != 0


def _token_mask(token_logp: Array, token_mask: Array) -> Array:
  """Checks a `[B, L]` log-prob array and its mask; returns the mask as bool."""
  chex.assert_rank([token_logp, token_mask], 2)
  chex.assert_type(token_logp, float)
  chex.assert_equal_shape([token_logp, token_mask])
  return jnp.asarray(token_mask) != 0


def _masked_mean(per_example: Array, valid: Array) -> Tuple[Array, Array, Array]:
  """(mean, sum, count) of `per_example` over `valid`; the mean of an empty batch is 0."""
  loss_sum = jnp.sum(jnp.where(valid, per_example, 0.0))
  denominator = jnp.sum(valid).astype(per_example.dtype)
  return loss_sum / jnp.maximum(denominator, 1.0), loss_sum, denominator


def _zero_invalid_transitions(
  valid: Array, q: Array, v: Array, v_next_tgt: Array, q_tgt: Array, r: Array, terminated: Array
) -> Tuple[Array, ...]:
  """The critic inputs with zeros at invalid transitions (`valid` [B]; `[E, B]` critics, `[B]`
  rewards and flags), so that whatever an invalid transition holds is never read."""
  chex.assert_rank([r, terminated], 1)
  chex.assert_equal_shape([r, terminated, valid])
  critics = _masking.zero_masked(valid[None, :], q, v, v_next_tgt, q_tgt)
  return critics + _masking.zero_masked(valid, r, jnp.asarray(terminated))


def _sequence_log_prob(token_logp: Array, mask: Array) -> Array:
  # `where`, not `*`: padded positions may hold -inf or NaN (log of a zero probability), and
  # 0 * -inf would poison both the sum and its gradient.
  return jnp.sum(jnp.where(mask, token_logp, 0.0), axis=-1)


def _reduce_heads(values: Array, heads: str) -> Array:
  """Per-head targets ([E, B]) or their min over heads broadcast back to [E, B]."""
  if heads == "per_head":
    return values
  return jnp.broadcast_to(jnp.min(values, axis=0, keepdims=True), values.shape)


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


# ----------------------------------------------------------------------------------------------
# Token-level PPO on utterance-level transitions (the flat baseline of the ArCHer paper).
# ----------------------------------------------------------------------------------------------


class TokenStream(NamedTuple):
  """One trajectory of `T` utterances as `T * L` token steps, every field `[T * L]`: the inputs
  of `policy_gradient.generalized_advantage_estimation`."""

  reward: Array
  discount: Array
  value: Array
  next_value: Array
  lambda_: Array
  done: Array


def token_stream(
  reward: Array,
  terminated: Array,
  done: Array,
  value: Array,
  next_dialogue_value: Array,
  mask: Array,
  gamma: float,
  gae_lambda: float,
  token_gamma: float = 1.0,
) -> TokenStream:
  """Turns one trajectory of `T` utterances into `T * L` token steps (per trajectory).

  ArCHer (Zhou et al., arXiv 2402.19446) compares against flat token-level PPO (Schulman et al.,
  arXiv 1707.06347), where every token is an action; this is that MDP built from utterance-level
  transitions. Inside an utterance every read token (a prefix of the row, `mask`) is one action
  taken in the state "dialogue + the utterance's earlier tokens"; the utterance's reward arrives
  at its last read token. Unread tokens are not actions: reward 0, values 0, discount 1 and λ 1
  pass the next utterance's advantage through to the last read token unchanged.

  Discounts: `token_gamma` between the read tokens of an utterance (1: token-level returns equal
  the utterance-level returns of ArCHer's critic; `gamma`: plain token-level discounting) and
  `gamma · (1 − terminated)` from an utterance's last read token to the next utterance, so a
  termination cuts the bootstrap and a time-limit truncation bootstraps from the true next
  dialogue (`next_dialogue_value`). λ is `gae_lambda` after every read token; `done` (terminated
  or truncated) stops the recursion at the utterance's last read token.

  Args:
    reward, terminated, done: `[T]` utterance-level reward (float) and flags (bool or 0/1).
    value: float `[T, L]` V of the state before each token.
    next_dialogue_value: float `[T]` V of the true next dialogue (before any auto-reset).
    mask: bool `[T, L]`, the tokens the environment reads (a prefix of each row, at least one).
    gamma: utterance-level discount in [0, 1].
    gae_lambda: GAE λ in [0, 1].
    token_gamma: discount between the tokens of one utterance, in [0, 1].

  Returns:
    `TokenStream` of `[T * L]` arrays.
  """
  for name, rate in (("gamma", gamma), ("gae_lambda", gae_lambda), ("token_gamma", token_gamma)):
    _checks.discount(name, rate)
  chex.assert_rank([reward, terminated, done, value, next_dialogue_value, mask], [1, 1, 1, 2, 1, 2])
  chex.assert_type([reward, value, next_dialogue_value], float)
  chex.assert_equal_shape([value, mask])
  chex.assert_equal_shape([reward, terminated, done, next_dialogue_value, value[:, 0]])
  num_tokens = mask.shape[1]
  mask = mask.astype(bool)
  length = mask.sum(axis=1)
  is_last = jnp.arange(num_tokens)[None, :] == (length - 1)[:, None]
  # Within an utterance the successor of token j is the state before token j + 1.
  shifted = jnp.concatenate([value[:, 1:], jnp.zeros_like(value[:, :1])], axis=1)
  next_value = jnp.where(is_last, next_dialogue_value[:, None], shifted)
  last_discount = gamma * (1.0 - terminated.astype(jnp.float32))
  discount = jnp.where(is_last, last_discount[:, None], token_gamma)
  step_reward = jnp.where(is_last, reward[:, None], 0.0)
  return TokenStream(
    reward=jnp.where(mask, step_reward, 0.0).reshape(-1),
    discount=jnp.where(mask, discount, 1.0).reshape(-1),
    value=jnp.where(mask, value, 0.0).reshape(-1),
    next_value=jnp.where(mask, next_value, 0.0).reshape(-1),
    lambda_=jnp.where(mask, gae_lambda, 1.0).reshape(-1),
    done=(is_last & done.astype(bool)[:, None]).reshape(-1),
  )


def token_level_advantages(
  reward: Array,
  terminated: Array,
  done: Array,
  value: Array,
  next_dialogue_value: Array,
  mask: Array,
  gamma: float,
  gae_lambda: float,
  token_gamma: float = 1.0,
) -> Array:
  """Token-level GAE `[T, L]` of one trajectory of `T` utterances (0 on unread tokens).

  GAE (Schulman et al., arXiv 1506.02438, Eq. 16) over the `token_stream` of the trajectory:
  `policy_gradient.generalized_advantage_estimation` with the stream's per-token discounts and
  λ. Per trajectory (the caller vmaps over environments); arguments as in `token_stream`. The
  value targets are `advantages + value`.
  """
  num_steps, num_tokens = mask.shape
  stream = token_stream(
    reward, terminated, done, value, next_dialogue_value, mask, gamma, gae_lambda, token_gamma
  )
  advantage = policy_gradient.generalized_advantage_estimation(
    stream.reward, stream.discount, stream.value, stream.next_value, stream.lambda_, stream.done
  )
  return jnp.where(mask, advantage.reshape(num_steps, num_tokens), 0.0)


def normalize_token_advantages(advantage: Array, mask: Array, eps: float = 1e-8) -> Array:
  """(A − mean) / (std + eps) over the masked tokens (0 elsewhere): PPO's per-minibatch
  advantage standardisation (as in the reference PPO implementations) restricted to the tokens
  that are actions. Batch-level; any shape, `mask` of the same shape. Masked entries are not
  read (0 out, no gradient, whatever they hold)."""
  _checks.nonnegative("eps", eps)
  chex.assert_type(advantage, float)
  chex.assert_equal_shape([advantage, mask])
  (advantage,) = _masking.zero_masked(mask, advantage)
  mean = policy_gradient.masked_mean(advantage, mask)
  std = jnp.sqrt(policy_gradient.masked_mean(jnp.square(advantage - mean), mask))
  return jnp.where(mask, (advantage - mean) / (std + eps), 0.0)
