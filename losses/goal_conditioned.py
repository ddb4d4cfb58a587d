"""Offline goal-conditioned hierarchy losses: expectiles, AWR, HIQL, OTA, HILP, HIRO and HAC.

Pure functions of arrays (no networks): the caller evaluates its networks and passes their outputs
(for the HIQL actors, a `log_prob_fn` closure, so that the stop-gradient placement on the subgoal
representation is a flag of the loss). Conventions:

* ensemble (twin-head) axes are LAST: one example has values [E], a batch [B, E];
* per-example functions (`ivl_value_loss`, `ota_high_value_loss`, `hilp_representation_loss`,
  `hiro_relabel`, ...) are vmapped by the caller; batch-level ones (`awr_loss`,
  `ivl_value_loss_batch`, the HIQL actor losses) reduce with a mean and also return the sum and
  the count for normalising over a global batch;
* targets carry no gradient unless `stop_target_gradients=False`; AWR weights never do;
* `discount_t` is γ·mask, where mask = 0 only when the goal is reached (the relabelled analogue of
  termination); a time-limit truncation keeps mask = 1 and bootstraps.

Families: shared (`expectile_loss`, `awr_weights`, `awr_loss`), OGBench's IVL value loss
(`ivl_value_loss`, `ivl_value_loss_batch`), HIQL (`length_normalize`, `hiql_low_advantage`,
`hiql_high_advantage`, `hiql_low_actor_loss`, `hiql_high_actor_loss`), OTA
(`ota_option_indices`, `ota_option_value_target`, `ota_high_value_loss`), HILP (`hilp_value`,
`hilp_representation_loss`, `hilp_intrinsic_reward`, `hilp_goal_prompt`, `hilp_reward_prompt`,
`hilp_sample_skills`, `hilp_plan_midpoint`), HIRO (`hiro_goal_transition`, `hiro_low_reward`,
`hiro_candidate_goals`, `hiro_propagate_goals`, `hiro_relabel`) and HAC (`hac_target`,
`hac_goal_reward`, `hac_hindsight_action`, `hac_hindsight_goals`, `hac_subgoal_test_penalty`).
"""

import functools
import math
from typing import Callable, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

Array = chex.Array
Numeric = chex.Numeric


# ----------------------------------------------------------------------------------------------
# Argument validation for Python-valued arguments.
# ----------------------------------------------------------------------------------------------


def _is_python_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_open_unit_interval(name: str, value) -> None:
    if not _is_python_number(value) or not math.isfinite(value) or not 0.0 < value < 1.0:
        raise ValueError(f"{name}: expected a float in (0, 1), got {value!r}")


def _check_nonnegative(name: str, value) -> None:
    if not _is_python_number(value) or not math.isfinite(value) or value < 0.0:
        raise ValueError(f"{name}: expected a finite float >= 0, got {value!r}")


def _check_positive(name: str, value) -> None:
    if not _is_python_number(value) or not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name}: expected a finite float > 0, got {value!r}")


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected a Python bool, got {value!r}")


def _check_discount(name: str, value) -> None:
    if not _is_python_number(value) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}: expected a float in [0, 1], got {value!r}")


def _check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")


def _check_max_weight(value) -> None:
    if value is None:
        return
    if not _is_python_number(value) or math.isnan(value) or value <= 0.0:
        raise ValueError(f"max_weight: expected a float > 0 or None, got {value!r}")


# ----------------------------------------------------------------------------------------------
# Shared building blocks: IQL expectile and the AWR weight.
# ----------------------------------------------------------------------------------------------


def expectile_loss(diff: Array, expectile: float) -> Array:
    """Per-element asymmetric squared loss of IQL: |τ − 1[diff < 0]|·diff².

    See "Offline Reinforcement Learning with Implicit Q-Learning" by Kostrikov, Nair, Levine
    (arXiv 2110.06169), Sec. 4.1 (L₂^τ(u) = |τ − 1(u < 0)|·u²).

    `diff` is target − prediction (e.g. Q̄(s, a) − V(s)), any shape; the loss is elementwise, so it
    is per-example for any layout and the caller reduces. Positive residuals (prediction below the
    target) get weight τ, negative ones 1 − τ; diff = 0 contributes 0 whichever weight applies.
    There is no ½ factor: this equals `rlax.expectile_loss(predictions, targets, τ)` with
    diff = targets − predictions. It is NOT the goal-conditioned IVL value loss of OGBench/HIQL
    (`ivl_value_loss`), whose weight comes from a target-network advantage.

    Args:
        diff: float array of residuals target − prediction, any shape. No stop-gradient is applied:
            stop the target's gradient before forming diff if it must not be trained.
        expectile: τ, a Python float in (0, 1); 0.5 gives ½·diff².

    Returns:
        A float array of the shape of `diff`.
    """
    chex.assert_type(diff, float)
    _check_open_unit_interval("expectile", expectile)
    weight = jnp.where(diff < 0, 1.0 - expectile, expectile)
    return weight * jnp.square(diff)


def awr_weights(advantage: Array, alpha: float, max_weight: Optional[float] = 100.0) -> Array:
    """Advantage-weighted-regression weights min(exp(α·A), w_max), without gradient.

    See "Advantage-Weighted Regression: Simple and Scalable Off-Policy Reinforcement Learning" by
    Peng, Kumar, Zhang, Levine (arXiv 1910.00177), Sec. 3 (weight exp(A/β), clipped by w_max in
    their implementation), with α = 1/β as in OGBench (`alpha`, "temperature").

    Elementwise (any shape). The advantage is wrapped in `stop_gradient`: AWR regresses the policy
    on fixed weights. OGBench (HIQL, GCIVL, OTA) clips at 100, hard-coded; Offline ArCHer does not
    clip (`max_weight=None`). Unclipped weights overflow to inf in float32 for α·A above about 88.

    Args:
        advantage: float array A, any shape.
        alpha: inverse temperature α, a Python float >= 0 (α = 0 gives weight 1: behaviour cloning).
        max_weight: clip w_max > 0, or None for no clip. Default 100 (OGBench).

    Returns:
        A float array of the shape of `advantage`.
    """
    chex.assert_type(advantage, float)
    _check_nonnegative("alpha", alpha)
    _check_max_weight(max_weight)
    weights = jnp.exp(alpha * jax.lax.stop_gradient(advantage))
    if max_weight is not None:
        weights = jnp.minimum(weights, max_weight)
    return weights


class AWRExtras(NamedTuple):
    """Per-example AWR quantities, plus the sum and count behind the batch mean."""

    weights: Array  # [B] min(exp(α·A), w_max), no gradient.
    advantage: Array  # [B] the advantage the weights were computed from (stop-gradiented).
    log_prob: Array  # [B] log π(a | ·) as passed (or as computed by the caller's log_prob_fn).
    loss_sum: Array  # scalar Σ_B −w·log π, for normalising over a global batch.
    count: Array  # scalar B (float), the denominator of the mean.


def awr_loss(
    log_prob: Array,
    advantage: Array,
    alpha: float,
    max_weight: Optional[float] = 100.0,
) -> Tuple[Array, AWRExtras]:
    """Advantage-weighted regression actor loss −mean_B[min(exp(α·A), w_max)·log π(a|·)].

    See "Advantage-Weighted Regression: Simple and Scalable Off-Policy Reinforcement Learning" by
    Peng, Kumar, Zhang, Levine (arXiv 1910.00177), Sec. 3; in the goal-conditioned form of OGBench
    (GCIVL/HIQL/OTA actors) and of Offline ArCHer.

    Batch-level: reduces over the batch axis (mean); `extras.loss_sum` and `extras.count` let a
    data-parallel caller normalise over the global batch instead. The weight carries no gradient
    (`awr_weights` stop-gradients the advantage); only `log_prob` is differentiated.

    Args:
        log_prob: [B] float log-probabilities of the dataset actions under the trained policy.
        advantage: [B] float advantages.
        alpha: inverse temperature α >= 0 (OGBench `alpha`: 3.0 for HIQL; ArCHer `inv_temp`).
        max_weight: clip of the weight, 100 (OGBench, hard-coded there) or None (Offline ArCHer).

    Returns:
        (loss, AWRExtras).
    """
    chex.assert_rank([log_prob, advantage], 1)
    chex.assert_type([log_prob, advantage], float)
    chex.assert_equal_shape([log_prob, advantage])
    weights = awr_weights(advantage, alpha, max_weight)
    loss_sum = -jnp.sum(weights * log_prob)
    count = jnp.asarray(log_prob.shape[0], dtype=log_prob.dtype)
    extras = AWRExtras(
        weights=weights,
        advantage=jax.lax.stop_gradient(advantage),
        log_prob=log_prob,
        loss_sum=loss_sum,
        count=count,
    )
    return loss_sum / count, extras


# ----------------------------------------------------------------------------------------------
# IVL: OGBench's goal-conditioned value loss (HIQL, GCIVL, OTA, HILP).
# ----------------------------------------------------------------------------------------------


class IVLExtras(NamedTuple):
    """Per-example IVL quantities (shapes for one example; the batch version adds a leading B)."""

    advantage: Array  # scalar A = r + γ·m·min_i v̄'_i − mean_i v̄_i (target networks only).
    weight: Array  # scalar expectile weight: τ if A >= 0 else 1 − τ.
    targets: Array  # [E] y_i = r + γ·m·v̄'_i.
    td_errors: Array  # [E] y_i − v_i.


def ivl_value_loss(
    v_tm1: Array,
    v_tgt_tm1: Array,
    v_tgt_t: Array,
    r_t: Numeric,
    discount_t: Numeric,
    expectile: float,
    stop_target_gradients: bool = True,
) -> Tuple[Array, IVLExtras]:
    """OGBench's goal-conditioned IVL value loss for one example: Σ_i w·(y_i − v_i)².

    See "HIQL: Offline Goal-Conditioned RL with Latent States as Actions" by Park, Ghosh, Eysenbach,
    Levine (arXiv 2307.11949), Sec. 4 (action-free IQL value loss; "Eq. 4" in seohongpark/HIQL
    issue #6), as implemented in OGBench
    ("OGBench: Benchmarking Offline Goal-Conditioned RL", Park et al., arXiv 2410.20092,
    `impls/agents/{gcivl,hiql}.py`); HILP (arXiv 2402.15567) and OTA (arXiv 2505.12737) reuse it.

    Per-example (one (s, s', g) triple with an ensemble axis E, usually 2); `jax.vmap` over a batch
    and average, or use `ivl_value_loss_batch`. With V_i the online heads and V̄_i the target heads:

      A   = r + γ·m·min_i V̄_i(s', g) − mean_i V̄_i(s, g)      (decides the weight only)
      w   = τ if A >= 0 else 1 − τ                               (ties go to τ)
      y_i = r + γ·m·V̄_i(s', g)                                   (head i regresses on head i)
      L   = Σ_i w·(y_i − V_i(s, g))²

    Deviations from the paper and differences from IQL (all follow the OGBench reference):
      * The paper weights by the sign of the residual y − V (IQL style, as `expectile_loss` and
        `rlax.expectile_loss` do per head); the reference weights all heads by the sign of the
        target-network
        advantage A ("double-DQN-like"; seohongpark/HIQL issue #6). On the spec's golden vector the
        two give 0.556855 (this function) vs 0.635475.
      * A uses min over target heads at s' but the mean of target heads at s.
      * Heads are summed, not averaged; no ½ factor.
    `discount_t` = γ·mask folds in goal reaching (mask = 0 when the goal is reached, the relabelled
    analogue of termination). A time-limit truncation is not a goal success: pass mask = 1 there so
    the target bootstraps from the true next state.

    Args:
        v_tm1: [E] online values V_i(s, g) (the only differentiated input by default).
        v_tgt_tm1: [E] target-network values V̄_i(s, g).
        v_tgt_t: [E] target-network values V̄_i(s', g).
        r_t: scalar reward (OGBench gc_negative: 0 at the goal, −1 otherwise).
        discount_t: scalar γ·mask.
        expectile: τ in (0, 1) (0.7 for HIQL/OTA, 0.95 for HILP).
        stop_target_gradients: if True (default) the targets and the advantage carry no gradient.

    Returns:
        (scalar loss, IVLExtras).
    """
    chex.assert_rank([v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t], [1, 1, 1, 0, 0])
    chex.assert_type([v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t], float)
    chex.assert_equal_shape([v_tm1, v_tgt_tm1, v_tgt_t])
    _check_open_unit_interval("expectile", expectile)
    _check_bool("stop_target_gradients", stop_target_gradients)

    targets = r_t + discount_t * v_tgt_t
    advantage = r_t + discount_t * jnp.min(v_tgt_t) - jnp.mean(v_tgt_tm1)
    if stop_target_gradients:
        targets = jax.lax.stop_gradient(targets)
        advantage = jax.lax.stop_gradient(advantage)
    weight = jnp.where(advantage >= 0, expectile, 1.0 - expectile)
    td_errors = targets - v_tm1
    loss = jnp.sum(weight * jnp.square(td_errors))
    return loss, IVLExtras(advantage=advantage, weight=weight, targets=targets, td_errors=td_errors)


class IVLBatchExtras(NamedTuple):
    """Per-example IVL quantities for a batch, plus the sum and count behind the batch mean."""

    advantage: Array  # [B]
    weight: Array  # [B]
    targets: Array  # [B, E]
    td_errors: Array  # [B, E]
    loss_per_example: Array  # [B] Σ_i w·(y_i − v_i)².
    loss_sum: Array  # scalar Σ_B loss_per_example.
    count: Array  # scalar B (float).


def ivl_value_loss_batch(
    v_tm1: Array,
    v_tgt_tm1: Array,
    v_tgt_t: Array,
    r_t: Array,
    discount_t: Array,
    expectile: float,
    stop_target_gradients: bool = True,
) -> Tuple[Array, IVLBatchExtras]:
    """Batch-mean of `ivl_value_loss` (OGBench's value loss on a batch): Σ_i mean_B[w·(y_i − v_i)²].

    Batch-level wrapper with a leading batch axis: `jax.vmap(ivl_value_loss)` over B, then the mean.
    Networks that return the ensemble first ([E, B], e.g. a Flax `nn.vmap` ensemble) pass `v.T`.
    See `ivl_value_loss` for the formula, the paper and the deviations.

    Args:
        v_tm1, v_tgt_tm1, v_tgt_t: [B, E] float online V(s, g), target V̄(s, g), target V̄(s', g).
        r_t, discount_t: [B] float rewards and γ·mask.
        expectile, stop_target_gradients: as in `ivl_value_loss`.

    Returns:
        (scalar loss, IVLBatchExtras).
    """
    chex.assert_rank([v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t], [2, 2, 2, 1, 1])
    chex.assert_equal_shape([v_tm1, v_tgt_tm1, v_tgt_t])
    chex.assert_equal_shape([r_t, discount_t, v_tm1[:, 0]])
    _check_open_unit_interval("expectile", expectile)
    _check_bool("stop_target_gradients", stop_target_gradients)

    per_example = functools.partial(
        ivl_value_loss, expectile=expectile, stop_target_gradients=stop_target_gradients
    )
    losses, extras = jax.vmap(per_example)(v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t)
    loss_sum = jnp.sum(losses)
    count = jnp.asarray(losses.shape[0], dtype=losses.dtype)
    return loss_sum / count, IVLBatchExtras(
        advantage=extras.advantage,
        weight=extras.weight,
        targets=extras.targets,
        td_errors=extras.td_errors,
        loss_per_example=losses,
        loss_sum=loss_sum,
        count=count,
    )


# ----------------------------------------------------------------------------------------------
# HIQL: latent subgoals, low/high advantages and actor losses.
# ----------------------------------------------------------------------------------------------


def length_normalize(x: Array, eps: float = 1e-12) -> Array:
    """Rescales the last axis to length √d: x·√d / ‖x‖ (HIQL's subgoal representation).

    See HIQL (Park et al., arXiv 2307.11949): the subgoal representation φ([s; g]) is
    length-normalised; the OGBench `LengthNormalize` layer and `sample_actions` apply x / ‖x‖ · √d.
    Elementwise over leading axes (rank 1 to 4). Deviation: `eps` is added under the square root
    so that x = 0 gives 0, not NaN (the reference has no eps; the difference is below float32
    resolution for ‖x‖² ≫ eps).

    Args:
        x: float array [..., d].
        eps: finite float >= 0 added to ‖x‖².

    Returns:
        An array of the shape of x whose last-axis norm is √d.
    """
    chex.assert_rank(x, {1, 2, 3, 4})
    chex.assert_type(x, float)
    _check_nonnegative("eps", eps)
    dim = x.shape[-1]
    sq_norm = jnp.sum(jnp.square(x), axis=-1, keepdims=True)
    return x * (math.sqrt(dim) * jax.lax.rsqrt(sq_norm + eps))


def _mean_head_difference(v_to: Array, v_from: Array) -> Array:
    chex.assert_rank([v_to, v_from], {1, 2})
    chex.assert_type([v_to, v_from], float)
    chex.assert_equal_shape([v_to, v_from])
    return jnp.mean(v_to, axis=-1) - jnp.mean(v_from, axis=-1)


def hiql_low_advantage(v_next_w: Array, v_w: Array) -> Array:
    """HIQL low-level advantage A^l = mean_E V(s', w) − mean_E V(s, w), without reward or γ.

    See HIQL (Park et al., arXiv 2307.11949), Sec. 4, low-level policy objective
    (A^l ≈ V(s_{t+1}, s_{t+k}) − V(s_t, s_{t+k})).
    w is the subgoal state s_{min(t+k, traj_end)}; V is the ONLINE value averaged over its heads
    (OGBench `low_actor_loss`). Per-example with the ensemble axis last: [E] -> scalar, or batched
    [B, E] -> [B]. Pure helper: returns the raw difference, with gradient; `awr_weights` /
    `awr_loss` / `hiql_low_actor_loss` stop it.

    Args:
        v_next_w: [E] or [B, E] online V(s', w).
        v_w: [E] or [B, E] online V(s, w).

    Returns:
        A scalar or [B] advantage.
    """
    return _mean_head_difference(v_next_w, v_w)


def hiql_high_advantage(v_subgoal_g: Array, v_g: Array) -> Array:
    """HIQL high-level advantage A^h = mean_E V(s_{t+k}, g) − mean_E V(s_t, g).

    See HIQL (Park et al., arXiv 2307.11949), Sec. 4, high-level policy objective. s_{t+k} is
    OGBench's `high_actor_targets`: s_{min(t+k, goal_idx)} for a trajectory goal,
    s_{min(t+k, traj_end)} for a random goal. The
    same online mean-of-heads difference as `hiql_low_advantage`; for OTA pass V^h (the
    option-aware high value) instead of V. Shapes [E] -> scalar or [B, E] -> [B].

    Args:
        v_subgoal_g: [E] or [B, E] online V(s_{t+k}, g).
        v_g: [E] or [B, E] online V(s_t, g).

    Returns:
        A scalar or [B] advantage.
    """
    return _mean_head_difference(v_subgoal_g, v_g)


def hiql_low_actor_loss(
    log_prob_fn: Callable[[Array], Array],
    subgoal_rep: Array,
    v_next_w: Array,
    v_w: Array,
    alpha: float,
    max_weight: Optional[float] = 100.0,
    rep_grad: bool = False,
) -> Tuple[Array, AWRExtras]:
    """HIQL low-level actor loss: AWR on log π^l(a | s, φ([s; w])) with A^l = V(s', w) − V(s, w).

    See HIQL (Park et al., arXiv 2307.11949), Sec. 4; OGBench `HIQLAgent.low_actor_loss`.
    Batch-level (mean over B).

    Gradient routing (what the caller passes): `subgoal_rep` is φ([s; w]) computed with the ONLINE
    parameters and with gradient; `log_prob_fn(rep)` evaluates the low actor on (s, rep) and
    returns log π^l(a_dataset | s, rep), shape [B]. This function stops the gradient of
    `subgoal_rep` unless `rep_grad=True` (OGBench `low_actor_rep_grad`, default False; the README
    calls it crucial for pixels), so φ is trained by the value loss alone by default. The values
    are the online values; they are stop-gradiented here (OGBench evaluates them with the stored
    parameters, which carries no gradient either).

    Args:
        log_prob_fn: maps a [B, R] subgoal representation to [B] log-probabilities.
        subgoal_rep: [B, R] φ([s; w]).
        v_next_w, v_w: [B, E] online V(s', w), V(s, w).
        alpha: AWR inverse temperature (OGBench `low_alpha`, 3.0).
        max_weight: weight clip, 100 in OGBench.
        rep_grad: let the actor loss train φ (OGBench `low_actor_rep_grad`).

    Returns:
        (loss, AWRExtras).
    """
    chex.assert_rank(subgoal_rep, 2)
    chex.assert_rank([v_next_w, v_w], 2)
    _check_bool("rep_grad", rep_grad)
    advantage = jax.lax.stop_gradient(hiql_low_advantage(v_next_w, v_w))
    if not rep_grad:
        subgoal_rep = jax.lax.stop_gradient(subgoal_rep)
    log_prob = log_prob_fn(subgoal_rep)
    chex.assert_equal_shape([log_prob, advantage])
    return awr_loss(log_prob, advantage, alpha, max_weight)


def hiql_high_actor_loss(
    log_prob_fn: Callable[[Array], Array],
    target_rep: Array,
    v_subgoal_g: Array,
    v_g: Array,
    alpha: float,
    max_weight: Optional[float] = 100.0,
    stop_target_gradients: bool = True,
) -> Tuple[Array, AWRExtras]:
    """HIQL high-level actor loss: AWR on log π^h(φ([s; s_{t+k}]) | s, g) with A^h = ΔV(·, g).

    See HIQL (Park et al., arXiv 2307.11949), Sec. 4; OGBench `HIQLAgent.high_actor_loss`. OTA
    (arXiv 2505.12737) uses the same loss with its option-aware value V^h. Batch-level.

    Gradient routing: `target_rep` is the latent subgoal φ([s; s_{t+k}]); it is a regression
    target, so its gradient is stopped unless `stop_target_gradients=False` (OGBench evaluates it
    with the stored parameters: no gradient into φ). `log_prob_fn(rep)` returns
    log π^h(rep | s, g) [B] (e.g. `dist.log_prob` of the high actor's distribution). The values
    are online values and are stop-gradiented.

    Args:
        log_prob_fn: maps the [B, R] target latent to [B] log-probabilities under π^h(· | s, g).
        target_rep: [B, R] φ([s; s_{t+k}]).
        v_subgoal_g, v_g: [B, E] online V(s_{t+k}, g), V(s_t, g).
        alpha: AWR inverse temperature (OGBench `high_alpha`, 3.0).
        max_weight: weight clip, 100 in OGBench.
        stop_target_gradients: stop the gradient of `target_rep` (default, as in OGBench).

    Returns:
        (loss, AWRExtras).
    """
    chex.assert_rank(target_rep, 2)
    chex.assert_rank([v_subgoal_g, v_g], 2)
    _check_bool("stop_target_gradients", stop_target_gradients)
    advantage = jax.lax.stop_gradient(hiql_high_advantage(v_subgoal_g, v_g))
    if stop_target_gradients:
        target_rep = jax.lax.stop_gradient(target_rep)
    log_prob = log_prob_fn(target_rep)
    chex.assert_equal_shape([log_prob, advantage])
    return awr_loss(log_prob, advantage, alpha, max_weight)


# ----------------------------------------------------------------------------------------------
# OTA: option-aware temporally abstracted high-level value.
# ----------------------------------------------------------------------------------------------


class OTAOptionIndices(NamedTuple):
    """Option-terminal index arithmetic of OTA, elementwise over the input shape."""

    option_idx: Array  # int, o: the dataset index where the option terminates.
    goal_idx: Array  # int, the high-value goal (the option terminal when "cur" was drawn).
    reward: Array  # float, 1[o == g] − 1 (gc_negative) or 1[o == g].
    mask: Array  # float, 1 − 1[o == g].


def ota_option_indices(
    idx: Array,
    traj_end: Array,
    goal_idx: Array,
    traj_mask: Array,
    cur_mask: Array,
    n: int,
    gc_negative: bool = True,
) -> OTAOptionIndices:
    """OTA's option-terminal index o, high-value goal, reward and mask (pure index arithmetic).

    See "Option-aware Temporally Abstracted Value for Offline Goal-Conditioned Reinforcement
    Learning" by Ahn, Choi, Han, Moon (arXiv 2505.12737), option-aware value learning; read in the
    official code vendored in ktolnos/TTGS `impls/ota-v/utils/datasets.py:HGCDataset
    .sample_high_goals` @4408b01. Elementwise (any shape; e.g. [B]); the randomness (which goal,
    traj vs random, cur) stays in the sampler, so this function is deterministic:

      o = min(i + n, goal)      for a trajectory goal (the option ends early at the goal),
      o = min(i + n, traj_end)  for a random goal (time-out, clipped at the trajectory end);
      g := o if cur_mask (the "current-state" goal of the high value is the option terminal);
      reward = 1[o == g] − 1 and mask = 1 − 1[o == g] (success by index equality, as in OGBench).

    Args:
        idx: int array of dataset indices i.
        traj_end: int array, the index of the last state of i's trajectory.
        goal_idx: int array, the drawn goal (a future index of i's trajectory where traj_mask,
            else a uniformly random dataset index).
        traj_mask: bool array, True for a trajectory goal.
        cur_mask: bool array, True where the sampler drew the "current" goal.
        n: the abstraction factor (option length in env steps), an int >= 1 (OTA default 5).
        gc_negative: rewards 0/−1 (default, OGBench `gc_negative=True`) or 1/0.

    Returns:
        OTAOptionIndices (indices int32, reward/mask float32).
    """
    chex.assert_type([idx, traj_end, goal_idx], int)
    chex.assert_type([traj_mask, cur_mask], bool)
    chex.assert_equal_shape([idx, traj_end, goal_idx, traj_mask, cur_mask])
    _check_positive_int("n", n)
    _check_bool("gc_negative", gc_negative)

    timeout_idx = jnp.minimum(idx + n, traj_end)
    early_idx = jnp.minimum(idx + n, goal_idx)
    option_idx = jnp.where(traj_mask, early_idx, timeout_idx)
    goal_idx = jnp.where(cur_mask, option_idx, goal_idx)
    success = (option_idx == goal_idx).astype(jnp.float32)
    reward = success - 1.0 if gc_negative else success
    return OTAOptionIndices(
        option_idx=option_idx, goal_idx=goal_idx, reward=reward, mask=1.0 - success
    )


def ota_option_value_target(
    r_option: Numeric, mask_option: Numeric, v_tgt_option: Array, high_discount: float
) -> Array:
    """OTA's option-aware TD target per head: y_i = r^h + γ·m^h·V̄^h_i(s_o, g).

    See OTA (Ahn et al., arXiv 2505.12737), the option-aware TD objective
    L(V^h, n) = E[L₂^τ(r(s^Ω, g) + γ·V̄^h(s^Ω, g) − V^h(s, g))]; vendored official
    `OTAAgent.high_value_loss`. Per-example: `v_tgt_option` is [E] (target high-value heads at
    the option terminal s_o). The reward is −1 per OPTION (not a sum of n per-step rewards) and
    one discount γ applies per option: γ, not γⁿ (the reference sets `high_discount = discount`).
    V^h therefore counts roughly −(number of options to the goal), the horizon contraction.
    Passing `high_discount=γ**n` gives the SMDP-style alternative, which is not OTA. Returns the
    target with its gradient stopped.

    Args:
        r_option: scalar float r^h from `ota_option_indices`.
        mask_option: scalar float m^h from `ota_option_indices`.
        v_tgt_option: [E] float target V̄^h(s_o, g).
        high_discount: γ in [0, 1] (OTA: equal to the low-level discount, 0.99).

    Returns:
        [E] targets.
    """
    chex.assert_rank([r_option, mask_option, v_tgt_option], [0, 0, 1])
    chex.assert_type([r_option, mask_option, v_tgt_option], float)
    _check_discount("high_discount", high_discount)
    return jax.lax.stop_gradient(r_option + high_discount * mask_option * v_tgt_option)


def ota_high_value_loss(
    v_tm1: Array,
    v_tgt_tm1: Array,
    v_tgt_option: Array,
    r_option: Numeric,
    mask_option: Numeric,
    high_discount: float,
    expectile: float,
    stop_target_gradients: bool = True,
) -> Tuple[Array, IVLExtras]:
    """OTA's high-level value loss for one example: IVL on (s_i, s_o, g) with γ per option.

    See OTA (Ahn et al., arXiv 2505.12737); vendored official `OTAAgent.high_value_loss`.
    Per-example (`jax.vmap` over the batch; or call `ivl_value_loss_batch` with
    `discount_t = high_discount * mask_option`). Identical to `ivl_value_loss` with the next state
    replaced by the option terminal s_o and discount γ·m^h (see `ota_option_value_target`):

      A = r^h + γ·m^h·min_i V̄^h_i(s_o, g) − mean_i V̄^h_i(s_i, g),
      L = Σ_i w(A)·(r^h + γ·m^h·V̄^h_i(s_o, g) − V^h_i(s_i, g))².

    Args:
        v_tm1: [E] online V^h(s_i, g).
        v_tgt_tm1: [E] target V̄^h(s_i, g).
        v_tgt_option: [E] target V̄^h(s_o, g).
        r_option, mask_option: scalar float r^h and m^h (`ota_option_indices`).
        high_discount: γ in [0, 1] (not γⁿ).
        expectile: τ in (0, 1), 0.7 in OTA.
        stop_target_gradients: as in `ivl_value_loss`.

    Returns:
        (scalar loss, IVLExtras).
    """
    chex.assert_rank([r_option, mask_option], 0)
    _check_discount("high_discount", high_discount)
    return ivl_value_loss(
        v_tm1,
        v_tgt_tm1,
        v_tgt_option,
        r_option,
        high_discount * mask_option,
        expectile,
        stop_target_gradients,
    )


# ----------------------------------------------------------------------------------------------
# HILP: Hilbert representations, their value loss and zero-shot prompting.
# ----------------------------------------------------------------------------------------------


def hilp_value(phi_s: Array, phi_g: Array, eps_sq: float = 1e-6) -> Array:
    """HILP's distance-parametrised value V(s, g) = −‖φ(s) − φ(g)‖, as −√max(‖·‖², eps).

    See "Foundation Policies with Hilbert Representations" by Park, Kreiman, Levine
    (arXiv 2402.15567) (V(s, g) = −‖φ(s) − φ(g)‖); reference seohongpark/HILP
    `hilp_gcrl/src/special_networks.py:GoalConditionedPhiValue` (the eps floor is the reference's:
    it keeps the gradient finite at s = g, where V = −√eps). Elementwise over leading axes
    ([d] -> scalar, [E, d] -> [E], [B, E, d] -> [B, E]).

    Args:
        phi_s, phi_g: float arrays [..., d].
        eps_sq: floor of the squared distance, >= 0 (1e-6 in the reference).

    Returns:
        Values of shape phi_s.shape[:-1], all <= −√eps_sq.
    """
    chex.assert_rank([phi_s, phi_g], {1, 2, 3})
    chex.assert_type([phi_s, phi_g], float)
    chex.assert_equal_shape([phi_s, phi_g])
    _check_nonnegative("eps_sq", eps_sq)
    sq_dist = jnp.sum(jnp.square(phi_s - phi_g), axis=-1)
    return -jnp.sqrt(jnp.maximum(sq_dist, eps_sq))


def hilp_representation_loss(
    phi_s: Array,
    phi_g: Array,
    phi_tgt_s: Array,
    phi_tgt_next: Array,
    phi_tgt_g: Array,
    r_t: Numeric,
    discount_t: Numeric,
    expectile: float,
    eps_sq: float = 1e-6,
    stop_target_gradients: bool = True,
) -> Tuple[Array, IVLExtras]:
    """HILP's representation loss for one example: the IVL loss on V_i = −‖φ_i(s) − φ_i(g)‖.

    See HILP (Park, Kreiman, Levine, arXiv 2402.15567) (φ is learned by action-free
    expectile value learning on the Hilbert value); reference `hilp_gcrl/src/agents/hilp.py:
    compute_value_loss`, which is exactly OGBench's IVL loss (`ivl_value_loss`) with head i using
    its own φ_i (ensemble of E = 2 φ networks) and a Polyak target φ̄_i. Per-example.

    Gradient routing: the online heads differentiate through φ_i(s) AND φ_i(g); the target heads
    (φ̄ at s, s' and g) carry no gradient unless `stop_target_gradients=False`.

    Args:
        phi_s, phi_g: [E, d] online φ_i(s), φ_i(g).
        phi_tgt_s, phi_tgt_next, phi_tgt_g: [E, d] target φ̄_i(s), φ̄_i(s'), φ̄_i(g).
        r_t: scalar reward (0 at the goal, −1 otherwise).
        discount_t: scalar γ·mask (mask 0 at the goal); γ = 0.99 in `hilp_gcrl`.
        expectile: τ in (0, 1) (0.95 in `hilp_gcrl`; 0.5 in `hilp_zsrl`).
        eps_sq: squared-distance floor of `hilp_value`.
        stop_target_gradients: as in `ivl_value_loss`.

    Returns:
        (scalar loss, IVLExtras).
    """
    chex.assert_rank([phi_s, phi_g, phi_tgt_s, phi_tgt_next, phi_tgt_g], 2)
    chex.assert_equal_shape([phi_s, phi_g, phi_tgt_s, phi_tgt_next, phi_tgt_g])
    v_tm1 = hilp_value(phi_s, phi_g, eps_sq)
    v_tgt_tm1 = hilp_value(phi_tgt_s, phi_tgt_g, eps_sq)
    v_tgt_t = hilp_value(phi_tgt_next, phi_tgt_g, eps_sq)
    return ivl_value_loss(
        v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t, expectile, stop_target_gradients
    )


def hilp_intrinsic_reward(phi_s: Array, phi_next: Array, z: Array) -> Array:
    """HILP skill reward r(s, s', z) = (φ(s') − φ(s))ᵀ z.

    See HILP (arXiv 2402.15567) (latent-conditioned policy reward); reference
    `hilp.py:loss_fn`, where φ is the FIRST ensemble member evaluated with the stored parameters
    (no gradient; stopped here too). Elementwise over leading axes ([d] -> scalar).

    Args:
        phi_s, phi_next, z: float arrays [..., d].

    Returns:
        Rewards of shape phi_s.shape[:-1].
    """
    chex.assert_rank([phi_s, phi_next, z], {1, 2})
    chex.assert_type([phi_s, phi_next, z], float)
    chex.assert_equal_shape([phi_s, phi_next, z])
    delta = jax.lax.stop_gradient(phi_next - phi_s)
    return jnp.sum(delta * z, axis=-1)


def _normalize(x: Array, scale: float, eps: float) -> Array:
    norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True))
    return scale * x / jnp.maximum(norm, eps)


def hilp_goal_prompt(
    phi_s: Array, phi_g: Array, scale: float = 1.0, eps: float = 1e-8
) -> Array:
    """HILP zero-shot goal-reaching skill z* = scale·(φ(g) − φ(s)) / ‖φ(g) − φ(s)‖.

    See HILP (arXiv 2402.15567) (zero-shot goal-conditioned RL; recomputed at every step).
    `hilp_gcrl` uses scale 1 (unit skills); `hilp_zsrl` uses √d. Deviation: the norm is floored
    at `eps` so that φ(g) = φ(s) gives z = 0 instead of NaN. Elementwise over leading axes.

    Args:
        phi_s, phi_g: float arrays [..., d].
        scale: the length of z, > 0.
        eps: norm floor, > 0.

    Returns:
        z of shape [..., d].
    """
    chex.assert_rank([phi_s, phi_g], {1, 2})
    chex.assert_type([phi_s, phi_g], float)
    chex.assert_equal_shape([phi_s, phi_g])
    _check_positive("scale", scale)
    _check_positive("eps", eps)
    return _normalize(phi_g - phi_s, scale, eps)


def hilp_reward_prompt(
    phi: Array, rewards: Array, scale: float = 1.0, eps: float = 1e-8
) -> Array:
    """HILP zero-shot skill for a reward: z* = argmin_z Σ_i (r_i − φ_iᵀ z)², rescaled to `scale`.

    See HILP (arXiv 2402.15567) (zero-shot RL by linear regression of rewards on φ);
    reference `hilp_zsrl` (least squares, then normalised to √z_dim: pass `scale=√d`). Use
    φ(s') − φ(s) rows for the reference's `feature_type="diff"`. Batch-level (the N samples of
    one task).

    Args:
        phi: [N, d] features of the labelled states.
        rewards: [N] rewards.
        scale: the length of z, > 0.
        eps: norm floor, > 0.

    Returns:
        z [d].
    """
    chex.assert_rank([phi, rewards], [2, 1])
    chex.assert_type([phi, rewards], float)
    chex.assert_equal_shape_prefix([phi, rewards], 1)
    _check_positive("scale", scale)
    _check_positive("eps", eps)
    z, _, _, _ = jnp.linalg.lstsq(phi, rewards)
    return _normalize(z, scale, eps)


def hilp_sample_skills(key: chex.PRNGKey, num_skills: int, dim: int) -> Array:
    """Skills z ~ Unif(S^{d−1}) (normalised Gaussians), for the HILP skill policy.

    See HILP (arXiv 2402.15567). Pass a fresh key every update: the original code's jitted
    update reused one batch of skills throughout training (fixed on its master, README 2025-09-29).

    Args:
        key: a PRNG key.
        num_skills: int >= 1.
        dim: skill dimension d, int >= 1.

    Returns:
        [num_skills, dim] float32 unit vectors.
    """
    _check_positive_int("num_skills", num_skills)
    _check_positive_int("dim", dim)
    z = jax.random.normal(key, (num_skills, dim))
    return _normalize(z, 1.0, 1e-12)


def _nan_if_any_nan(result: Array, *inputs: Array) -> Array:
    """`result`, or all NaN when one of `inputs` has a NaN that a selection step would hide."""
    poisoned = jnp.any(jnp.stack([jnp.any(jnp.isnan(x)) for x in inputs]))
    return jnp.where(poisoned, jnp.asarray(jnp.nan, result.dtype), result)


def hilp_plan_midpoint(
    phi_s: Array, phi_goal: Array, phi_dataset: Array, k: int = 50, recursions: int = 3
) -> Array:
    """HILP-Plan: moves the goal feature to a midpoint between φ(s) and φ_goal, `recursions` times.

    See HILP (arXiv 2402.15567), test-time planning; reference `hilp_gcrl/jaxrl_m/evaluation.py`
    (50k dataset states, k = 50, 3 recursions). Each recursion keeps the k dataset features with
    the smallest max(‖φ_x − φ(s)‖, ‖φ_x − φ_goal‖) and replaces φ_goal by their mean. Per-example;
    the caller then prompts with `hilp_goal_prompt(phi_s, result)`.

    Args:
        phi_s: [d] φ(s).
        phi_goal: [d] φ(g).
        phi_dataset: [M, d] features of candidate dataset states, M >= k.
        k: number of nearest candidates averaged, int >= 1.
        recursions: int >= 1.

    Returns:
        [d] the planned goal feature; all NaN if any input has a NaN (a NaN distance makes the
        nearest-neighbour ranking undefined, and `top_k` would silently rank it anyway).
    """
    chex.assert_rank([phi_s, phi_goal, phi_dataset], [1, 1, 2])
    chex.assert_type([phi_s, phi_goal, phi_dataset], float)
    chex.assert_equal_shape([phi_s, phi_goal, phi_dataset[0]])
    _check_positive_int("k", k)
    _check_positive_int("recursions", recursions)
    if k > phi_dataset.shape[0]:
        num = phi_dataset.shape[0]
        raise ValueError(f"k: expected at most phi_dataset.shape[0]={num}, got {k}")
    phi_goal_in = phi_goal
    dist_s = jnp.linalg.norm(phi_dataset - phi_s[None, :], axis=-1)
    for _ in range(recursions):
        dist_goal = jnp.linalg.norm(phi_dataset - phi_goal[None, :], axis=-1)
        _, nearest = jax.lax.top_k(-jnp.maximum(dist_s, dist_goal), k)
        phi_goal = jnp.mean(phi_dataset[nearest], axis=0)
    return _nan_if_any_nan(phi_goal, phi_s, phi_goal_in, phi_dataset)


# ----------------------------------------------------------------------------------------------
# HIRO: goal transition, low-level reward and off-policy goal correction.
# ----------------------------------------------------------------------------------------------


def hiro_goal_transition(s_t: Array, g_t: Array, s_next: Array) -> Array:
    """HIRO's fixed goal transition h(s_t, g_t, s_{t+1}) = s_t + g_t − s_{t+1} (relative goals).

    See "Data-Efficient Hierarchical Reinforcement Learning" by Nachum, Gu, Lee, Levine
    (arXiv 1805.08296), "Parameterized rewards"; reference bhairavmehta95/data-efficient-hrl
    `Controller.hiro_subgoal_transition`. States are given in goal space (the caller slices the
    goal dimensions, e.g. `s[..., :dg]`). Elementwise over leading axes ([dg] per example).

    Args:
        s_t, g_t, s_next: float arrays [..., dg].

    Returns:
        g_{t+1} [..., dg].
    """
    chex.assert_rank([s_t, g_t, s_next], {1, 2})
    chex.assert_type([s_t, g_t, s_next], float)
    chex.assert_equal_shape([s_t, g_t, s_next])
    return s_t + g_t - s_next


def hiro_low_reward(s_t: Array, g_t: Array, s_next: Array) -> Array:
    """HIRO's low-level reward r^lo = −‖s_t + g_t − s_{t+1}‖₂ (states in goal space).

    See HIRO (arXiv 1805.08296), "Parameterized rewards"; reference `hiro` intrinsic reward.
    Elementwise over leading axes ([dg] -> scalar).
    """
    return -jnp.linalg.norm(hiro_goal_transition(s_t, g_t, s_next), axis=-1)


def hiro_candidate_goals(
    key: chex.PRNGKey,
    g_orig: Array,
    s_t: Array,
    s_tc: Array,
    scale: Array,
    num_random: int = 8,
    sigma: Optional[Array] = None,
) -> Array:
    """HIRO off-policy correction candidates: [g_orig, s_{t+c} − s_t, num_random Gaussian samples].

    See HIRO (arXiv 1805.08296), "Off-policy corrections" (recalled, not re-checked against the
    paper text: 8 samples from N(s_{t+c} − s_t, σ) plus the original goal and s_{t+c} − s_t, 10
    candidates). The PyTorch reference draws 10 samples (12 candidates) with σ = 0.5·scale;
    `num_random` selects either. As in the reference, only the random samples are clipped to
    [−scale, scale]. Per-example (one high-level transition); vmap with split keys.

    Args:
        key: PRNG key.
        g_orig: [dg] the stored goal g_t.
        s_t, s_tc: [dg] s_t and s_{t+c} in goal space.
        scale: [dg] (or scalar) goal range; candidates are clipped to ±scale.
        num_random: number of Gaussian candidates, int >= 0.
        sigma: [dg] or scalar std of the samples; None gives 0.5·scale (reference).

    Returns:
        [2 + num_random, dg] candidates; row 0 is g_orig, row 1 is s_{t+c} − s_t.
    """
    chex.assert_rank([g_orig, s_t, s_tc], 1)
    chex.assert_type([g_orig, s_t, s_tc], float)
    chex.assert_equal_shape([g_orig, s_t, s_tc])
    if not isinstance(num_random, int) or isinstance(num_random, bool) or num_random < 0:
        raise ValueError(f"num_random: expected an int >= 0, got {num_random!r}")
    scale = jnp.broadcast_to(jnp.asarray(scale, g_orig.dtype), g_orig.shape)
    sigma = 0.5 * scale if sigma is None else jnp.broadcast_to(
        jnp.asarray(sigma, g_orig.dtype), g_orig.shape
    )
    diff = s_tc - s_t
    noise = jax.random.normal(key, (num_random,) + g_orig.shape, g_orig.dtype)
    random_goals = jnp.clip(diff[None, :] + sigma[None, :] * noise, -scale[None, :], scale[None, :])
    return jnp.concatenate([g_orig[None, :], diff[None, :], random_goals], axis=0)


def hiro_propagate_goals(candidates: Array, s_seq: Array) -> Array:
    """Each candidate goal carried through h along the window: g̃_{t+i} = s_t + g̃ − s_{t+i}.

    See HIRO (arXiv 1805.08296), "Off-policy corrections"; reference
    `Controller.multi_subgoal_transition`. The caller evaluates its low-level policy μ^lo(s_{t+i},
    g̃_{t+i}) on the result and passes the actions to `hiro_relabel`. Per-example.

    Args:
        candidates: [C, dg] candidate goals for time t.
        s_seq: [c, dg] states s_t … s_{t+c−1} in goal space (the states the actions were taken in).

    Returns:
        [C, c, dg] goals g̃_{t+i} per candidate and step (row i = 0 is the candidate itself).
    """
    chex.assert_rank([candidates, s_seq], 2)
    chex.assert_type([candidates, s_seq], float)
    chex.assert_equal_shape_suffix([candidates, s_seq], 1)
    return candidates[:, None, :] + s_seq[None, 0:1, :] - s_seq[None, :, :]


class HIRORelabelExtras(NamedTuple):
    """Per-candidate scores of the HIRO off-policy correction."""

    log_likelihood: Array  # [C] −½ Σ_i ‖a_{t+i} − μ^lo(s_{t+i}, g̃_{t+i})‖².
    best_index: Array  # scalar int, the argmax (first index on ties).


def hiro_relabel(
    candidates: Array,
    policy_actions: Array,
    actions: Array,
    valid: Optional[Array] = None,
) -> Tuple[Array, HIRORelabelExtras]:
    """HIRO off-policy goal correction: the candidate that best explains the low-level actions.

    See HIRO (arXiv 1805.08296), "Off-policy corrections": g̃ = argmax_g log μ^lo(a_{t:t+c−1} |
    s_{t:t+c−1}, g̃_{t:t+c−1}), with the Gaussian log-likelihood of a deterministic policy up to a
    constant, −½ Σ_i ‖a_{t+i} − μ^lo(s_{t+i}, g̃_{t+i})‖². Reference
    `Manager.off_policy_corrections`. Per-example (one high-level transition); the caller vmaps. The
    goals must be propagated with `hiro_propagate_goals` before evaluating μ^lo (the reference's
    comment "Doesn't include subgoal transitions" concerns exactly this; here propagation is
    explicit). Ties go to the first candidate, i.e. the original goal. The result carries no
    gradient.

    Args:
        candidates: [C, dg] candidate goals.
        policy_actions: [C, c, A] μ^lo(s_{t+i}, g̃_{t+i}) for every candidate and step.
        actions: [c, A] the stored low-level actions.
        valid: optional [c] bool, False for steps past the end of a short (terminated) window.

    Returns:
        (the relabelled goal [dg], HIRORelabelExtras).
    """
    chex.assert_rank([candidates, policy_actions, actions], [2, 3, 2])
    chex.assert_type([candidates, policy_actions, actions], float)
    chex.assert_equal_shape_prefix([candidates, policy_actions], 1)
    chex.assert_equal_shape_suffix([policy_actions, actions], 2)
    sq_err = jnp.sum(jnp.square(policy_actions - actions[None]), axis=-1)  # [C, c]
    if valid is not None:
        chex.assert_rank(valid, 1)
        chex.assert_type(valid, bool)
        chex.assert_equal_shape([valid, actions[:, 0]])
        sq_err = jnp.where(valid[None, :], sq_err, 0.0)
    log_likelihood = jax.lax.stop_gradient(-0.5 * jnp.sum(sq_err, axis=-1))
    best = jnp.argmax(log_likelihood)
    g_best = jax.lax.stop_gradient(candidates[best])
    return g_best, HIRORelabelExtras(log_likelihood=log_likelihood, best_index=best)


# ----------------------------------------------------------------------------------------------
# HAC: bounded targets and hindsight action / goal relabelling.
# ----------------------------------------------------------------------------------------------


def hac_target(
    r_t: Array,
    terminal_t: Array,
    q_t: Array,
    gamma: float,
    horizon: int,
    stop_target_gradients: bool = True,
) -> Array:
    """HAC's bounded Bellman target y = clip(r + (1 − terminal)·γ·Q(s', g, π(s', g)), −H, 0).

    See "Learning Multi-Level Hierarchies with Hindsight" by Levy, Konidaris, Platt, Saenko
    (arXiv 1712.00948); reference andrew-j-levy/Hierarchical-Actor-Critc-HAC-
    `critic.py`. `terminal` is HAC's "finished" flag (goal achieved, or a subgoal-test penalty),
    so it stops the bootstrap; a time-out is not terminal. Q values are bounded to [−H, 0] by
    HAC's critic, so the clip only binds for out-of-range bootstraps. Elementwise (any shape).

    Args:
        r_t: float rewards (0 / −1, or −H for a subgoal-test penalty).
        terminal_t: bool or float "finished" flags.
        q_t: float bootstrap values Q(s', g, π(s', g)) (HAC: the online critic, no target net).
        gamma: discount in [0, 1] (0.98 in HAC).
        horizon: H = time_scale, an int >= 1 (10 in HAC).
        stop_target_gradients: stop the gradient of the target (default).

    Returns:
        Targets of the shape of r_t.
    """
    chex.assert_type([r_t, q_t], float)
    chex.assert_equal_shape([r_t, terminal_t, q_t])
    _check_discount("gamma", gamma)
    _check_positive_int("horizon", horizon)
    _check_bool("stop_target_gradients", stop_target_gradients)
    not_terminal = 1.0 - jnp.asarray(terminal_t, r_t.dtype)
    target = jnp.clip(r_t + not_terminal * gamma * q_t, -float(horizon), 0.0)
    return jax.lax.stop_gradient(target) if stop_target_gradients else target


def hac_goal_reward(
    achieved: Array, goal: Array, thresholds: Array
) -> Tuple[Array, Array]:
    """HAC goal test: (0, True) if |achieved − goal| <= thresholds in all dims, else (−1, False).

    See HAC (arXiv 1712.00948); reference `Layer.get_reward` (a dimension fails when its
    distance is strictly greater than its threshold). Elementwise over leading axes
    ([dg] -> scalars; [T, dg] recomputes a whole hindsight episode).

    Args:
        achieved: float [..., dg] achieved goal-space states.
        goal: float [..., dg] goals.
        thresholds: float [dg] (or [..., dg]) per-dimension tolerances.

    Returns:
        (reward float, terminal bool), of shape achieved.shape[:-1]. A NaN distance or threshold
        in a goal's dimensions gives reward NaN (the test cannot be decided; read as a number it
        would be a silent "not reached") and terminal False.
    """
    chex.assert_rank([achieved, goal], {1, 2})
    chex.assert_type([achieved, goal, thresholds], float)
    chex.assert_equal_shape([achieved, goal])
    chex.assert_equal_shape_suffix([achieved, thresholds], 1)
    thresholds = jnp.broadcast_to(thresholds, achieved.shape)
    distance = jnp.abs(achieved - goal)
    reached = jnp.all(distance <= thresholds, axis=-1)
    undecided = jnp.any(jnp.isnan(distance) | jnp.isnan(thresholds), axis=-1)
    reward = reached.astype(achieved.dtype) - 1.0
    return jnp.where(undecided, jnp.asarray(jnp.nan, reward.dtype), reward), reached


def hac_hindsight_action(
    proposed_subgoal: Array, achieved_subgoal: Array, subgoal_reached: Array
) -> Array:
    """HAC hindsight action: the proposed subgoal if it was reached, else the state reached.

    See HAC (arXiv 1712.00948) ("hindsight action transitions"); reference `Layer.train`. The
    achieved state is projected to subgoal space by the caller.

    Args:
        proposed_subgoal: float [dg] (or [B, dg]) the subgoal the level proposed.
        achieved_subgoal: float [dg] (or [B, dg]) the state the level below reached.
        subgoal_reached: bool scalar (or [B]) whether the level below reached the subgoal.

    Returns:
        [..., dg] the action stored in the hindsight transition.
    """
    chex.assert_type([proposed_subgoal, achieved_subgoal], float)
    chex.assert_type(subgoal_reached, bool)
    chex.assert_equal_shape([proposed_subgoal, achieved_subgoal])
    chex.assert_equal_shape([proposed_subgoal[..., 0], subgoal_reached])
    return jnp.where(subgoal_reached[..., None], proposed_subgoal, achieved_subgoal)


def hac_hindsight_goals(
    key: chex.PRNGKey, achieved: Array, num_goals: int = 3
) -> Tuple[Array, Array]:
    """HAC hindsight (HER) goals for one attempt: num_goals − 1 random achieved states + the last.

    See HAC (arXiv 1712.00948) ("hindsight goal transitions"); reference
    `Layer.finalize_goal_replay`: indices drawn uniformly with replacement, the final transition
    always included, the whole attempt relabelled with each goal (use `hac_goal_reward` on
    `achieved` to recompute rewards and terminals). Deviation: the reference lowers num_goals to
    the attempt length when the attempt is shorter; here the shape is static, so duplicates fill
    in.

    Args:
        key: PRNG key.
        achieved: [T, dg] states achieved after each transition of the attempt (goal space).
        num_goals: int >= 1 (3 in HAC).

    Returns:
        (goals [num_goals, dg] with the last row = achieved[-1], their indices [num_goals], sorted).
    """
    chex.assert_rank(achieved, 2)
    chex.assert_type(achieved, float)
    _check_positive_int("num_goals", num_goals)
    length = achieved.shape[0]
    random_idx = jax.random.randint(key, (num_goals - 1,), 0, length)
    idx = jnp.sort(jnp.concatenate([random_idx, jnp.array([length - 1])]))
    return achieved[idx], idx


def hac_subgoal_test_penalty(horizon: int, dtype=jnp.float32) -> Tuple[Array, Array]:
    """HAC subgoal-testing penalty transition (reward −H, terminal True) for a missed subgoal.

    See HAC (arXiv 1712.00948) ("subgoal testing transitions"); reference
    `Layer.penalize_subgoal` (`subgoal_penalty = −time_limit`).

    Returns:
        (reward scalar −H, terminal scalar True).
    """
    _check_positive_int("horizon", horizon)
    return jnp.asarray(-float(horizon), dtype), jnp.asarray(True)
