"""Group-relative advantage estimators and the objectives specific to group methods.

Every estimator here compares a row (a response, a trajectory, an environment step) with the
other rows of its group (the responses to one prompt, the trajectories of one task). Groups span
the batch, so these functions are **batch-level**, not per-trajectory: they take the flat batch with

* ``group_ids``: int ``[B]`` in ``[0, num_groups)``; rows may come in any order and groups may
  have different sizes (verl's ``balance_batch`` reorders rows, so contiguity is never assumed);
* ``num_groups``: a static Python int (the number of segments; unused ids are empty groups);
* ``valid``: bool ``[B]`` (default all True). Invalid rows never touch any group statistic and get
  a zero advantage. This is the fix of verl PR #6452, where rows rejected by rollout correction
  still entered their group's mean and std.

Reductions use ``jax.ops.segment_*``. Group statistics are computed on values shifted by a member of
the group (its maximum) and with a two-pass variance, so a group of bit-identical rewards gives an
advantage of exactly zero in float32 (spec section 0.3; the NeMo-RL PR #4161 regression, where a
one-pass float32 std of ``[0.35] * 4`` was ~1.6e-4 and advantages blew up ~4000x).

Advantages are returned under ``jax.lax.stop_gradient`` (targets carry no gradient). Combining an
advantage with a clipped surrogate, a KL estimator and an aggregation mode is the job of
``hrljax.losses.policy_gradient``; the losses here are only those that are specific to a group
method (REC, OPMD, DisCO, the SPA progress estimator).
"""

from typing import Callable, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks

Array = chex.Array

_SCALES = ("group", "batch", "none")
_SINGLETON_MODES = ("zero", "raw")


# ------------------------------------------------------------------------------------------------
# Array checks and safe arithmetic.
# ------------------------------------------------------------------------------------------------


def _rows(name_values, *, float_names=(), int_names=(), bool_names=()) -> None:
    """Checks that every named array is rank 1 and that all share one shape."""
    arrays = [v for _, v in name_values]
    chex.assert_rank(arrays, 1)
    chex.assert_equal_shape(arrays)
    for name, value in name_values:
        if name in float_names:
            chex.assert_type(value, float)
        elif name in int_names:
            chex.assert_type(value, int)
        elif name in bool_names:
            chex.assert_type(value, bool)


def _valid_or_all(valid: Optional[Array], like: Array) -> Array:
    if valid is None:
        return jnp.ones(like.shape, dtype=bool)
    return valid


def _safe_div(num: Array, den: Array) -> Array:
    """num / den where den > 0, else 0; differentiable without NaN in either branch."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1), 0)


def _safe_sqrt(x: Array) -> Array:
    ok = x > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, x, 1)), 0)


def _with_nan(x: Array, poisoned: Array) -> Array:
    """``x`` with NaN where ``poisoned``: puts back a NaN input that a select (a one-row group's 0,
    a ``_safe_*`` fallback) would otherwise turn into a plausible finite value."""
    return jnp.where(poisoned, jnp.asarray(jnp.nan, x.dtype), x)


# ------------------------------------------------------------------------------------------------
# Segment statistics (spec section 0.3 / 0.7).
# ------------------------------------------------------------------------------------------------


class _Moments(NamedTuple):
    centred: Array  # [B] x_i - mean_g; exactly 0 in an all-equal group; 0 on invalid rows
    count: Array  # [G] float32 number of valid rows
    mean: Array  # [G]
    sq_dev_sum: Array  # [G] sum of squared deviations from the mean


def _shifted_moments(x: Array, group_ids: Array, num_groups: int, valid: Array) -> _Moments:
    """Shifted two-pass segment moments.

    Each group is shifted by its own maximum first, so bit-identical values become exact zeros and
    the centred values and the variance come out exactly zero (a plain two-pass variance leaves the
    mean of ``[0.4] * 8`` one ulp away from 0.4 in float32). The shift only moves a constant, so it
    carries no gradient.
    """
    count = jax.ops.segment_sum(valid.astype(jnp.float32), group_ids, num_groups)
    ref = jax.ops.segment_max(jnp.where(valid, x, -jnp.inf), group_ids, num_groups)
    ref = jax.lax.stop_gradient(jnp.where(count > 0, ref, 0).astype(x.dtype))
    shifted = jnp.where(valid, x - ref[group_ids], 0)
    shifted_mean = _safe_div(jax.ops.segment_sum(shifted, group_ids, num_groups), count)
    centred = jnp.where(valid, shifted - shifted_mean[group_ids], 0)
    sq_dev_sum = jax.ops.segment_sum(jnp.square(centred), group_ids, num_groups)
    return _Moments(centred, count, ref + shifted_mean, sq_dev_sum)


def _std_from_moments(m: _Moments, ddof: int) -> Array:
    return _safe_sqrt(_safe_div(m.sq_dev_sum, m.count - ddof))


def _check_segment_args(values: Array, group_ids: Array, num_groups: int,
                        valid: Optional[Array]) -> Array:
    _checks.integer("num_groups", num_groups)
    named = [("values", values), ("group_ids", group_ids)]
    if valid is not None:
        named.append(("valid", valid))
    _rows(named, float_names=("values",), int_names=("group_ids",), bool_names=("valid",))
    return _valid_or_all(valid, values)


def segment_count(group_ids: Array, num_groups: int, valid: Optional[Array] = None) -> Array:
    """Number of valid rows per group (batch-level).

    Args:
        group_ids: int ``[B]`` in ``[0, num_groups)``.
        num_groups: static number of groups.
        valid: optional bool ``[B]``; invalid rows are not counted.

    Returns:
        int32 ``[num_groups]``.
    """
    _checks.integer("num_groups", num_groups)
    named = [("group_ids", group_ids)] + ([("valid", valid)] if valid is not None else [])
    _rows(named, int_names=("group_ids",), bool_names=("valid",))
    valid = _valid_or_all(valid, group_ids)
    return jax.ops.segment_sum(valid.astype(jnp.int32), group_ids, num_groups)


def segment_mean(values: Array, group_ids: Array, num_groups: int,
                 valid: Optional[Array] = None) -> Array:
    """Mean of the valid rows of each group (batch-level); empty groups give 0.

    Computed on values shifted by the group maximum, so an all-equal group's mean is exactly that
    value.

    Args:
        values: float ``[B]``.
        group_ids: int ``[B]`` in ``[0, num_groups)``.
        num_groups: static number of groups.
        valid: optional bool ``[B]``.

    Returns:
        ``[num_groups]``, dtype of ``values``.
    """
    valid = _check_segment_args(values, group_ids, num_groups, valid)
    return _shifted_moments(values, group_ids, num_groups, valid).mean


def segment_std(values: Array, group_ids: Array, num_groups: int, *, ddof: int = 1,
                valid: Optional[Array] = None) -> Array:
    """Standard deviation of the valid rows of each group (batch-level).

    Shifted two-pass estimator (spec section 0.3): exactly 0 for bit-identical values. Groups with
    ``count <= ddof`` (e.g. singletons with the unbiased estimator) give 0 instead of NaN/inf.
    A group with a NaN or +-Inf among its valid values gives NaN, whatever its size (its spread
    is undefined; without this, the ``count <= ddof`` fallback and the square root's guard would
    report a one-row group with a NaN, or a group with an Inf, as spread 0). Invalid rows'
    values are ignored, NaN or not.

    Args:
        values: float ``[B]``.
        group_ids: int ``[B]`` in ``[0, num_groups)``.
        num_groups: static number of groups.
        ddof: 1 for the unbiased (Bessel) std used by verl, TRL, OpenRLHF, Tunix, Trinity GRPO;
            0 for the population std (Trinity REC, DAPO's filter).
        valid: optional bool ``[B]``.

    Returns:
        ``[num_groups]``, dtype of ``values``.
    """
    _checks.integer("ddof", ddof, low=0)
    valid = _check_segment_args(values, group_ids, num_groups, valid)
    std = _std_from_moments(_shifted_moments(values, group_ids, num_groups, valid), ddof)
    non_finite = jax.ops.segment_sum((valid & ~jnp.isfinite(values)).astype(jnp.int32),
                                     group_ids, num_groups)
    return _with_nan(std, non_finite > 0)


def contiguous_group_ids(num_groups: int, group_size: int) -> Array:
    """Group ids ``[num_groups * group_size]`` of the dense row-major ``[P, G]`` layout.

    ``x.reshape(-1)`` of a ``[num_groups, group_size]`` array (TRL, OpenRLHF, oat and Tunix layout)
    together with these ids feeds any segment function of this module.
    """
    _checks.integer("num_groups", num_groups)
    _checks.integer("group_size", group_size)
    return jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), group_size)


def group_normalize(rewards: Array, group_ids: Array, num_groups: int, *,
                    valid: Optional[Array] = None, scale: str = "group", eps: float = 1e-6,
                    ddof: int = 1, singleton_mode: str = "zero",
                    std_floor: float = 0.0) -> Array:
    """Group-relative normalisation ``(r_i - mean_g) / (max(std, std_floor) + eps)`` (batch-level).

    The core of GRPO (Shao et al., "DeepSeekMath", arXiv 2402.03300, section 4.1.2, outcome
    supervision) and of its variants. Differentiable: this primitive does not stop gradients (the
    estimators built on it do).

    Args:
        rewards: float ``[B]``.
        group_ids: int ``[B]`` in ``[0, num_groups)``; any row order, ragged groups.
        num_groups: static number of groups.
        valid: optional bool ``[B]``. Invalid rows enter no statistic and get 0.
        scale: ``"group"``: divide by the group std (GRPO, verl, TRL default); ``"batch"``: keep
            the group mean but divide by the std of all valid rewards of the batch (TRL
            ``scale_rewards="batch"``, Trinity ``std_cal_level="batch"``, "PPO-Lite"
            arXiv 2508.08221); ``"none"``: no division (Dr. GRPO, TRL ``scale_rewards="none"``).
        eps: added to the std. verl/Trinity/Tunix/verl-agent 1e-6 (default), TRL 1e-4, OpenRLHF
            1e-9, oat 1e-8. Unused with ``scale="none"``.
        ddof: std estimator; 1 (unbiased, every framework's GRPO) or 0 (population).
        singleton_mode: what a group with exactly one valid row gets. ``"zero"`` (default, safe;
            TRL's result, Tunix RLOO); ``"raw"``: the group mean is taken as 0 and the std as 1, as
            verl ``grpo`` and Trinity do, giving ``r / (1 + eps)`` (``r`` with ``scale="none"``, and
            ``r / (batch_std + eps)`` with ``scale="batch"``).
        std_floor: the std is floored at this value before ``eps`` is added (the NeMo-RL PR #4161
            remedy; 1e-3 there). Default 0.

    Returns:
        ``[B]`` advantages, dtype of ``rewards``. Bit-identical rewards in a group give exactly 0; a
        zero denominator (all-equal group with ``eps=0``) gives 0, never NaN.

    Deviation: verl's vectorised path floors the *variance* at eps and then also adds eps
    (``sqrt(max(var, eps)) + eps``); use ``std_floor=sqrt(eps)`` to approximate it.
    """
    _checks.choice("scale", scale, _SCALES)
    _checks.choice("singleton_mode", singleton_mode, _SINGLETON_MODES)
    _checks.nonnegative("eps", eps)
    _checks.nonnegative("std_floor", std_floor)
    _checks.integer("ddof", ddof, low=0)
    valid = _check_segment_args(rewards, group_ids, num_groups, valid)

    moments = _shifted_moments(rewards, group_ids, num_groups, valid)
    if scale == "group":
        std = _std_from_moments(moments, ddof)[group_ids]
    elif scale == "batch":
        batch = _shifted_moments(rewards, jnp.zeros_like(group_ids), 1, valid)
        std = jnp.broadcast_to(_std_from_moments(batch, ddof), rewards.shape)
    if scale == "none":
        advantages = moments.centred
        singleton_denominator = jnp.ones_like(rewards)
    else:
        denominator = jnp.maximum(std, std_floor) + eps
        advantages = _safe_div(moments.centred, denominator)
        singleton_denominator = (jnp.ones_like(rewards) + eps if scale == "group" else denominator)

    singleton = moments.count[group_ids] == 1
    if singleton_mode == "raw":
        singleton_value = _safe_div(rewards, singleton_denominator)
    else:
        singleton_value = jnp.zeros_like(rewards)
    advantages = jnp.where(singleton, singleton_value, advantages)
    return jnp.where(valid, advantages, 0).astype(rewards.dtype)


def group_normalize_dense(rewards: Array, *, valid: Optional[Array] = None, **kwargs) -> Array:
    """:func:`group_normalize` on the dense ``[num_groups, group_size]`` layout (batch-level).

    Row ``p`` of ``rewards`` is one group. ``valid`` (optional) is bool ``[P, G]``. Keyword
    arguments are those of :func:`group_normalize`. Returns ``[P, G]``.
    """
    chex.assert_rank(rewards, 2)
    if valid is not None:
        chex.assert_equal_shape([rewards, valid])
        valid = valid.reshape(-1)
    num_groups, group_size = rewards.shape
    ids = contiguous_group_ids(num_groups, group_size)
    flat = group_normalize(rewards.reshape(-1), ids, num_groups, valid=valid, **kwargs)
    return flat.reshape(rewards.shape)


def broadcast_to_tokens(advantages: Array, mask: Array) -> Array:
    """Sequence advantages ``[B]`` to token advantages ``[B, T]``: ``A[:, None] * mask``."""
    chex.assert_rank([advantages, mask], [1, 2])
    chex.assert_equal_shape_prefix([advantages, mask], 1)
    return advantages[:, None] * mask.astype(advantages.dtype)


# ------------------------------------------------------------------------------------------------
# GRPO, Dr. GRPO, RLOO (spec sections 1, 2).
# ------------------------------------------------------------------------------------------------


def grpo_advantages(rewards: Array, group_ids: Array, num_groups: int, *,
                    valid: Optional[Array] = None, scale: str = "group", eps: float = 1e-6,
                    ddof: int = 1, singleton_mode: str = "zero",
                    std_floor: float = 0.0) -> Array:
    """GRPO outcome-supervision advantages ``(r_i - mean_g) / (std_g + eps)`` (batch-level).

    Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
    Models", arXiv 2402.03300, section 4.1.2. The paper divides by ``std``; implementations use the
    unbiased std plus ``eps=1e-6`` (verl), which are the defaults here. Broadcast the result to the
    response tokens with :func:`broadcast_to_tokens`.

    Arguments are those of :func:`group_normalize`; the result is under ``stop_gradient``.
    For verl parity (spec section 1.8 vector) pass ``singleton_mode="raw"``; for TRL, ``eps=1e-4``.
    """
    return jax.lax.stop_gradient(group_normalize(
            rewards, group_ids, num_groups, valid=valid, scale=scale, eps=eps, ddof=ddof,
            singleton_mode=singleton_mode, std_floor=std_floor))


def dr_grpo_advantages(rewards: Array, group_ids: Array, num_groups: int, *,
                       valid: Optional[Array] = None, singleton_mode: str = "zero") -> Array:
    """Dr. GRPO advantages ``r_i - mean_g``, without the std division (batch-level).

    Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv 2503.20783
    (the std term biases updates by question difficulty). Pair with the constant-
    normaliser aggregation of ``hrljax.losses.policy_gradient``. Under ``stop_gradient``.
    ``singleton_mode="raw"`` gives ``r`` to a singleton group (verl / OpenRLHF parity).
    """
    return grpo_advantages(rewards, group_ids, num_groups, valid=valid, scale="none",
                                                  singleton_mode=singleton_mode)


def rloo_advantages(rewards: Array, group_ids: Array, num_groups: int, *,
                    valid: Optional[Array] = None, singleton_mode: str = "zero") -> Array:
    """REINFORCE leave-one-out advantages ``r_i - mean_{j != i} r_j`` (batch-level).

    Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from
    Human Feedback in LLMs", arXiv 2402.14740 (Kool et al. 2019 baseline). Computed as
    ``n / (n - 1) * (r_i - mean_g)`` (verl ``rloo``), which is exactly 0 in an all-equal group.

    Args:
        rewards, group_ids, num_groups, valid: as in :func:`group_normalize`.
        singleton_mode: a one-row group has no leave-one-out baseline. ``"zero"`` (default; Tunix)
            or ``"raw"`` (baseline 0, advantage ``r``; verl).

    Returns:
        ``[B]`` under ``stop_gradient``.
    """
    _checks.choice("singleton_mode", singleton_mode, _SINGLETON_MODES)
    valid = _check_segment_args(rewards, group_ids, num_groups, valid)
    moments = _shifted_moments(rewards, group_ids, num_groups, valid)
    n = moments.count[group_ids]
    advantages = _safe_div(n * moments.centred, n - 1)
    singleton_value = rewards if singleton_mode == "raw" else jnp.zeros_like(rewards)
    advantages = jnp.where(n == 1, singleton_value, advantages)
    return jax.lax.stop_gradient(jnp.where(valid, advantages, 0).astype(rewards.dtype))


# ------------------------------------------------------------------------------------------------
# DAPO pieces (spec section 3).
# ------------------------------------------------------------------------------------------------

_FILTER_RULES = ("std", "range")


def informative_group_mask(rewards: Array, group_ids: Array, num_groups: int, *,
                           valid: Optional[Array] = None, rule: str = "std",
                           reward_range: Tuple[float, float] = (0.0, 1.0),
                           keep_singletons: bool = True) -> Array:
    """DAPO dynamic-sampling filter: which groups carry a learning signal (batch-level).

    Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv 2503.14476,
    section 3.2, Eq. 11 (keep a prompt iff ``0 < #correct < G``). Dynamic sampling itself
    (generate more until the batch is full) is a data-pipeline step; this returns the keep mask
    and the caller resamples.

    Args:
        rewards: float ``[B]`` (the metric that is filtered on: accuracy, score, ...).
        group_ids: int ``[B]``.
        num_groups: static number of groups.
        valid: optional bool ``[B]``; invalid rows are ignored.
        rule: ``"std"`` (verl DAPO recipe): keep iff the group's rewards are not all equal
            (population std > 0, computed exactly by the shifted estimator); ``"range"``
            (OpenRLHF ``dynamic_filtering_reward_range``): keep iff ``lo < mean_g < hi`` with
            fixed bounds (the spec's "minmax" reading; OpenRLHF compares with the configured
            bounds, not the group's own min and max).
        reward_range: ``(lo, hi)`` for ``rule="range"``.
        keep_singletons: with ``rule="std"``, keep one-row groups (the verl recipe does).

    Returns:
        bool ``[num_groups]``. Groups with no valid row are never kept. Row mask:
        ``keep[group_ids]``.
    """
    _checks.choice("rule", rule, _FILTER_RULES)
    valid = _check_segment_args(rewards, group_ids, num_groups, valid)
    moments = _shifted_moments(rewards, group_ids, num_groups, valid)
    non_empty = moments.count > 0
    if rule == "std":
        keep = moments.sq_dev_sum > 0
        if keep_singletons:
            keep = keep | (moments.count == 1)
    else:
        if len(reward_range) != 2:
            raise ValueError(f"reward_range: expected a pair (lo, hi), got {reward_range!r}")
        lo, hi = reward_range
        _checks.number("reward_range[0]", lo, finite=False)
        _checks.number("reward_range[1]", hi, finite=False)
        keep = (moments.mean > lo) & (moments.mean < hi)
    return keep & non_empty


def overlong_penalty(lengths: Array, *, max_len: int = 20480, cache_len: int = 4096,
                     factor: float = 1.0, hard_branch: bool = True) -> Array:
    """DAPO soft overlong punishment ``R_len(|y|)``, added to the reward before the advantage.

    Yu et al., DAPO, arXiv 2503.14476, section 3.4, Eq. 13. With ``s = max_len - cache_len``: 0 for
    ``|y| <= s``; ``(s - |y|) / cache_len`` for ``s < |y| <= max_len``; -1 beyond ``max_len``.
    Every branch is multiplied by ``factor`` (Tunix / verl ``overlong_buffer.penalty_factor``).
    Per-example (elementwise).

    Args:
        lengths: int or float ``[...]`` response lengths in tokens.
        max_len: ``L_max`` (paper and Tunix default 20480).
        cache_len: ``L_cache``, the soft buffer (default 4096); ``0 < cache_len <= max_len``.
        factor: penalty scale (default 1).
        hard_branch: ``True`` is the paper (clamped at -1 beyond ``max_len``). ``False`` is verl's
            ``min(-(|y| - s) / L_cache * factor, 0)`` without the -1 branch (verl truncates
            generation at ``max_len`` so never reaches it).

    Returns:
        float32 penalties, shape of ``lengths`` (<= 0).
    """
    _checks.integer("max_len", max_len)
    _checks.integer("cache_len", cache_len)
    if cache_len > max_len:
        raise ValueError(f"cache_len: expected <= max_len={max_len}, got {cache_len!r}")
    _checks.nonnegative("factor", factor)
    lengths = jnp.asarray(lengths).astype(jnp.float32)
    start = float(max_len - cache_len)
    penalty = jnp.minimum((start - lengths) / cache_len, 0.0)
    if hard_branch:
        penalty = jnp.where(lengths > max_len, -1.0, penalty)
    return penalty * factor



# ------------------------------------------------------------------------------------------------
# Anchor states on device (GiGPO step groups; SALT graph nodes).
# ------------------------------------------------------------------------------------------------


def _fmix32(h: Array) -> Array:
    """MurmurHash3's 32-bit finaliser: a bijection on uint32 with good avalanche."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def observation_words(observations: Array) -> Array:
    """The bit pattern of each row of ``observations`` ``[N, ...]`` as uint32 words ``[N, D]``.

    Rows are hashed and compared through these words. Floats are canonicalised first so that
    bitwise equality is value equality: ``-0.0`` becomes ``0.0`` and every NaN the same NaN (two
    NaN observations count as identical). Integers and bools narrower than 32 bits are widened;
    64-bit values (only under ``jax_enable_x64``) become two words each.
    """
    observations = jnp.asarray(observations)
    if observations.ndim < 1:
        raise ValueError(f"observations: expected rank >= 1 ([N, ...]), got shape "
                         f"{observations.shape}")
    x = observations.reshape(observations.shape[0], -1)
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = jnp.where(x == 0, jnp.zeros_like(x), x)
        x = jnp.where(jnp.isnan(x), jnp.full_like(x, jnp.nan), x)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint32)
    size = x.dtype.itemsize
    if size < 4:
        unsigned = {1: jnp.uint8, 2: jnp.uint16}[size]
        x = jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)
    elif size == 4:
        x = jax.lax.bitcast_convert_type(x, jnp.uint32)
    else:
        x = jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(x.shape[0], -1)
    return x


def observation_hash(words: Array) -> Array:
    """Default row hash for :func:`anchor_state_ids`: ``[N, D]`` uint32 words to ``[N]`` uint32.

    Each word is salted with its position and mixed by the MurmurHash3 finaliser; the mixed words
    are summed (mod 2**32) and mixed again. A collision only costs speed: anchors are decided by
    exact comparison, never by the hash alone.
    """
    chex.assert_rank(words, 2)
    chex.assert_type(words, jnp.uint32)
    salt = _fmix32(jnp.arange(1, words.shape[1] + 1, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9))
    mixed = _fmix32(words ^ salt[None, :])
    return _fmix32(jnp.sum(mixed, axis=1, dtype=jnp.uint32) + jnp.uint32(words.shape[1]))


class AnchorIds(NamedTuple):
    ids: Array  # int32 [N] anchor id per row, dense in [0, num_anchors)
    num_anchors: Array  # int32 scalar: number of distinct anchors (valid and invalid rows)


_ANCHOR_METHODS = ("hash", "sort")
_GOLDEN = 0x9E3779B9


def _anchor_keys(observations: Array, group_ids: Array, valid: Optional[Array],
                 hash_fn: Callable[[Array], Array]) -> Tuple[Array, Array]:
    """Checks the arguments; returns the exact row keys ``[N, D + 2]`` and the row hashes ``[N]``.

    A row's key is its observation words followed by its group and its validity, so two rows share
    an anchor iff their keys are equal.
    """
    words = observation_words(observations)
    n = words.shape[0]
    chex.assert_rank(group_ids, 1)
    chex.assert_type(group_ids, int)
    chex.assert_shape(group_ids, (n,))
    valid = _valid_or_all(valid, group_ids)
    chex.assert_shape(valid, (n,))
    chex.assert_type(valid, bool)
    hashes = jnp.asarray(hash_fn(words))
    chex.assert_shape(hashes, (n,))
    chex.assert_type(hashes, int)
    group = jax.lax.bitcast_convert_type(group_ids.astype(jnp.int32), jnp.uint32)
    keys = jnp.concatenate([words, group[:, None], valid.astype(jnp.uint32)[:, None]], axis=1)
    return keys, hashes.astype(jnp.uint32)


def _heads_by_sort(keys: Array, hashes: Array) -> Array:
    """Lowest row index of each row's key, by sorting rows on ``(valid, group, hash)``.

    Within each run of equal sort keys, the rows equal to the run's first unresolved row take it
    as head, until every row is resolved (one pass when the hash has no collision in a group).
    """
    n = keys.shape[0]
    order = jnp.arange(n, dtype=jnp.int32)
    # Invalid rows form their own pseudo-group, sorted after every valid row. The stable sort
    # keeps equal keys in row order, so a run's first row of a key is its lowest row index.
    key_valid, key_group, key_hash, perm = jax.lax.sort(
        (1 - keys[:, -1].astype(jnp.int32), keys[:, -2], hashes, order), num_keys=3,
        is_stable=True)
    sorted_keys = keys[perm]
    new_run = jnp.concatenate([
        jnp.ones((1,), bool),
        (key_valid[1:] != key_valid[:-1]) | (key_group[1:] != key_group[:-1])
        | (key_hash[1:] != key_hash[:-1])])
    run_id = jnp.cumsum(new_run) - 1

    def unresolved(head):
        return jnp.any(head < 0)

    def resolve_one_per_run(head):
        pending = head < 0
        first_pending = jax.ops.segment_min(jnp.where(pending, order, n), run_id, n)[run_id]
        first_pending = jnp.minimum(first_pending, n - 1)
        same = jnp.all(sorted_keys == sorted_keys[first_pending], axis=1)
        return jnp.where(pending & same, first_pending, head)

    head = jax.lax.while_loop(unresolved, resolve_one_per_run, jnp.full((n,), -1, jnp.int32))
    return jnp.zeros((n,), jnp.int32).at[perm].set(perm[head])


def _key_fingerprint(keys: Array) -> Array:
    """A second 32-bit hash of the full key, independent of ``observation_hash`` (other salts)."""
    salt = _fmix32(jnp.arange(1, keys.shape[1] + 1, dtype=jnp.uint32) * jnp.uint32(0x85EBCA77)
                   + jnp.uint32(0x27D4EB2F))
    mixed = _fmix32(keys ^ salt[None, :])
    return _fmix32(jnp.sum(mixed * jnp.uint32(0xC2B2AE3D), axis=1, dtype=jnp.uint32))


def _heads_by_table(keys: Array, hashes: Array, fingerprints: Array,
                    max_probe_rounds: int) -> Array:
    """Lowest row index of each row's key by rounds of hash tables (-1 where unresolved).

    Round ``k`` hashes every unresolved row to a slot of a fresh table of ``2**ceil(log2(4 N))``
    slots (its hash, scoped by group and validity, rehashed with ``k``; a load of at most 1/4
    even if every row is its own key) and scatter-mins its row index there; a row whose slot
    owner has the same fingerprint takes the owner as head, the others try again next round.
    The rows of one key hash alike, so they always resolve together and the owner they find is
    their lowest row index. A fresh table each round (instead of
    probing further in one table) keeps later rounds almost collision-free, since only the few
    unresolved keys bid. Equal fingerprints are only a candidate match: the caller compares the
    keys exactly. Stops after ``max_probe_rounds`` rounds.
    """
    n = keys.shape[0]
    size = 1 << (4 * n - 1).bit_length()
    rows = jnp.arange(n, dtype=jnp.int32)
    # The group and validity are mixed in so that one observation in many groups spreads over
    # the table instead of piling on one slot.
    scope = _fmix32(keys[:, -2] * jnp.uint32(_GOLDEN) + keys[:, -1])
    key_hash = _fmix32(hashes ^ scope)

    def probe(rounds, head):
        pending = head < 0
        slot = (_fmix32(key_hash + rounds.astype(jnp.uint32) * jnp.uint32(_GOLDEN))
                & jnp.uint32(size - 1)).astype(jnp.int32)
        table = jnp.full((size,), n, jnp.int32).at[jnp.where(pending, slot, size)].min(
            rows, mode="drop")
        owner = jnp.minimum(table[slot], n - 1)
        same = pending & (fingerprints[owner] == fingerprints)
        return jnp.where(same, owner, head)

    def more_rounds(state):
        rounds, head = state
        return (rounds < max_probe_rounds) & jnp.any(head < 0)

    def next_round(state):
        rounds, head = state
        return rounds + 1, probe(rounds, head)

    head = probe(jnp.int32(0), jnp.full((n,), -1, jnp.int32))
    return jax.lax.while_loop(more_rounds, next_round, (jnp.int32(1), head))[1]


def _anchor_heads(observations: Array, group_ids: Array, valid: Optional[Array],
                  hash_fn: Callable[[Array], Array], method: str,
                  max_probe_rounds: int) -> Array:
    """Row index of the first row (lowest index) with the same anchor key, for every row."""
    _checks.choice("method", method, _ANCHOR_METHODS)
    _checks.integer("max_probe_rounds", max_probe_rounds)
    keys, hashes = _anchor_keys(observations, group_ids, valid, hash_fn)
    if method == "sort":
        return _heads_by_sort(keys, hashes)
    head = _heads_by_table(keys, hashes, _key_fingerprint(keys), max_probe_rounds)
    # Exact check: a fingerprint collision or unresolved rows (only with a badly colliding
    # hash_fn, or ~2**-32 per colliding pair) fall back to the sort, so the result is exact.
    exact = jnp.all((head >= 0) & jnp.all(keys[jnp.maximum(head, 0)] == keys, axis=1))
    return jax.lax.cond(exact, lambda: head, lambda: _heads_by_sort(keys, hashes))


class _DirectLayout(NamedTuple):
    low: Array  # uint32 [G, D] smallest word of each column over the group's valid rows
    stride: Array  # uint32 [G, D] mixed-radix place value of each column in the group's block
    offset: Array  # uint32 [G] first slot of the group's block
    fits: Array  # bool scalar: every group's block fits, side by side, in `capacity` slots


# Largest direct-address table: sizes are checked in float32, exact for integers below 2**24.
_MAX_DIRECT_CAPACITY = 1 << 23


def _direct_anchor_layout(words: Array, group_ids: Array, valid: Array, num_groups: int,
                          capacity: int) -> _DirectLayout:
    """Per-group bounding boxes of the observation words, laid out side by side in one table.

    ``words`` uint32 ``[T, N, D]`` (time-major grid), ``group_ids`` ``[N]``, ``valid`` ``[T, N]``.
    A group's valid rows have column ``c`` in ``[low_c, high_c]``; numbering the box's cells in
    mixed radix (place values ``stride``) and giving each group its own block of
    ``prod_c (high_c - low_c + 1)`` slots makes ``(group, words) -> slot`` injective on the
    valid rows: a perfect hash, so rows share a slot iff their keys are equal. Grid-world
    observations (small integers, a goal fixed within a task) give small boxes.
    Empty groups take no slot.
    """
    chex.assert_rank(words, 3)
    top = jnp.uint32(0xFFFFFFFF)
    mask = valid[:, :, None]
    low = jax.ops.segment_min(jnp.min(jnp.where(mask, words, top), axis=0), group_ids,
                              num_groups)
    high = jax.ops.segment_max(jnp.max(jnp.where(mask, words, 0), axis=0), group_ids,
                               num_groups)
    present = jnp.all(high >= low, axis=1)
    span = jnp.where(present[:, None], (high - low).astype(jnp.float32) + 1, 1)
    # Float32 place values: exact while the products stay below 2**24 (the only case used);
    # an overflow only makes `fits` False.
    place = jnp.cumprod(span, axis=1)
    size = jnp.where(present, place[:, -1] if span.shape[1] else 1.0, 0)
    stride = jnp.concatenate([jnp.ones_like(span[:, :1]), place[:, :-1]], axis=1)
    offset = jnp.cumsum(size) - size
    fits = jnp.sum(size) <= capacity
    # Where the layout does not fit, these integers are never used.
    stride = jnp.where(fits, stride, 0).astype(jnp.uint32)
    offset = jnp.where(fits, offset, 0).astype(jnp.uint32)
    return _DirectLayout(jnp.where(present[:, None], low, 0), stride, offset, fits)


def _direct_anchor_index(words: Array, group_ids: Array, valid: Array,
                         layout: _DirectLayout) -> Array:
    """Slot ``[T, N]`` int32 of each row in the layout's table; 0 on invalid rows."""
    low = layout.low[group_ids][None]
    stride = layout.stride[group_ids][None]
    # uint32 arithmetic wraps only on invalid rows (outside the box), which are masked.
    slot = layout.offset[group_ids][None, :] + jnp.sum((words - low) * stride, axis=2,
                                                       dtype=jnp.uint32)
    return jnp.where(valid, slot, 0).astype(jnp.int32)


def anchor_state_ids(observations: Array, group_ids: Array, *, valid: Optional[Array] = None,
                     hash_fn: Callable[[Array], Array] = observation_hash, method: str = "hash",
                     max_probe_rounds: int = 32) -> AnchorIds:
    """Anchor-state ids: rows with identical observations in the same group share an id.

    The on-device replacement of verl-agent's host-side ``build_step_group`` (GiGPO, Feng et al.,
    "Group-in-Group Policy Optimization for LLM Agent Training", arXiv 2505.10978, Eq. 6): the
    anchor group of a state is every step of every trajectory of the same episode group whose
    observation equals it. Batch-level, jittable, static shapes, no host round trip.

    A row's key is (observation bits, see :func:`observation_words`; group; validity). Rows share
    an id iff their keys are equal, bit for bit: a hash collision never merges two different
    observations, identical observations in one group always share an anchor, and the same
    observation in two groups never does. Ids are numbered in order of first occurrence (row 0
    has id 0), so both methods return the same array.

    Methods:

    * ``"hash"`` (default): rounds of scatter-min into hash tables of ``4 N`` to ``8 N`` slots,
      matching rows by a second, independent 32-bit fingerprint, then one exact word-for-word
      check of every row against its anchor's first row: ``O(rounds * N + N * D)``, 2 rounds on
      the benchmark's FourRooms batch (``experiments/benchmarks/advantages.py``: ~10x faster
      than ``"sort"`` on CPU at ``N = 262144``). If the check fails or
      rows are still unresolved after ``max_probe_rounds`` rounds (a badly colliding
      ``hash_fn``), it falls back to ``"sort"``: the result never depends on the hashes.
    * ``"sort"``: sort rows by ``(validity, group, hash)``, then resolve runs of equal hashes
      (``O(N log N)``; XLA's CPU sort of ``N = 262144`` rows takes ~0.1 s).

    Args:
        observations: ``[N, ...]`` any numeric/bool dtype; the *current* observation of each step
            row (verl-agent's ``anchor_obs``, without history). To key on state and action (SALT
            nodes), concatenate their :func:`observation_words`.
        group_ids: int ``[N]`` episode group (task / prompt uid) of each row.
        valid: optional bool ``[N]``. Invalid rows get ids of their own pseudo-group, never shared
            with a valid row.
        hash_fn: ``[N, D] uint32 -> [N]`` integer hash; exposed so tests can force collisions.
        method: ``"hash"`` or ``"sort"``.
        max_probe_rounds: probe rounds of ``"hash"`` before its fallback (>= 1).

    Returns:
        ``AnchorIds(ids, num_anchors)``: ``ids`` int32 ``[N]`` dense labels, so
        ``num_anchors=N`` is always a safe static segment count downstream.

    Deviations from verl-agent: exact matching only (its optional difflib similarity clustering
    is host-side text processing and order dependent, so it is not offered). Trinity's port keys on
    a workflow-supplied state hash across the whole batch; here the group is always part of the
    key, so states of different tasks never merge.
    """
    head = _anchor_heads(observations, group_ids, valid, hash_fn, method, max_probe_rounds)
    is_head = head == jnp.arange(head.shape[0], dtype=jnp.int32)
    dense = (jnp.cumsum(is_head) - 1).astype(jnp.int32)
    return AnchorIds(dense[head], jnp.sum(is_head).astype(jnp.int32))


# ------------------------------------------------------------------------------------------------
# Discounted step returns and GiGPO (spec section 5).
# ------------------------------------------------------------------------------------------------


def _sorted_step_returns(rewards: Array, traj_ids: Array, step_index: Array, valid: Array,
                         gamma: float) -> Array:
    """Discounted returns of rows in any order: sort by ``(traj, step)``, then a segmented scan."""
    n = rewards.shape[0]
    key_valid = jnp.where(valid, 0, 1).astype(jnp.int32)
    _, traj, step, perm = jax.lax.sort(
        (key_valid, traj_ids.astype(jnp.int32), step_index.astype(jnp.int32),
         jnp.arange(n, dtype=jnp.int32)), num_keys=3)
    r = jnp.where(valid[perm], rewards[perm], 0)
    next_same = jnp.concatenate([
        (traj[1:] == traj[:-1]) & valid[perm][1:] & valid[perm][:-1], jnp.zeros((1,), bool)])
    gap = jnp.concatenate([step[1:] - step[:-1], jnp.zeros((1,), jnp.int32)])
    decay = jnp.where(next_same, jnp.power(jnp.asarray(gamma, r.dtype), gap.astype(r.dtype)), 0)

    def compose(later, current):
        # Affine maps G -> b + a * G composed right to left (later steps were folded first).
        a_later, b_later = later
        a_cur, b_cur = current
        return a_cur * a_later, b_cur + a_cur * b_later

    _, returns_sorted = jax.lax.associative_scan(compose, (decay[::-1], r[::-1]))
    returns = jnp.zeros_like(rewards).at[perm].set(returns_sorted[::-1])
    return jnp.where(valid, returns, 0)


def _grid_step_returns(rewards: Array, valid: Array, gamma: float) -> Array:
    """Discounted returns on the time-major grid ``[T, num_traj]``: one reverse scan over time.

    An invalid step adds no reward but still discounts, which is the ``gamma^gap`` of a gap in
    the step indices.
    """
    discount = jnp.asarray(gamma, rewards.dtype)

    def backwards(later, step):
        r_t, valid_t = step
        running = jnp.where(valid_t, r_t, 0) + discount * later
        return running, jnp.where(valid_t, running, 0)

    _, returns = jax.lax.scan(backwards, jnp.zeros_like(rewards[0]), (rewards, valid),
                              reverse=True)
    return returns


def _is_time_major_grid(traj_ids: Array, step_index: Array, num_traj: int) -> Array:
    """Whether row ``t * num_traj + n`` holds trajectory ``n`` at step ``t`` for every row."""
    num_steps = traj_ids.shape[0] // num_traj
    traj = jnp.arange(num_traj, dtype=traj_ids.dtype)[None, :]
    step = jnp.arange(num_steps, dtype=step_index.dtype)[:, None]
    return (jnp.all(traj_ids.reshape(num_steps, num_traj) == traj)
            & jnp.all(step_index.reshape(num_steps, num_traj) == step))


def discounted_step_returns(rewards: Array, traj_ids: Array, step_index: Array, *,
                            gamma: float, valid: Optional[Array] = None,
                            num_traj: Optional[int] = None) -> Array:
    """Per-trajectory discounted returns ``R_t = sum_{k >= t} gamma^(k - t) r_k`` (batch-level).

    GiGPO Eq. 5 (arXiv 2505.10978). Rows are one environment step each, in any order; trajectories
    are ragged. Computed as a segmented reverse linear recurrence ``R_t = r_t + d_t R_{t+1}`` with
    ``d_t = gamma^(k_next - k_t)`` inside a trajectory and 0 at its last valid row, solved by
    ``lax.associative_scan`` after sorting rows by ``(traj, step)``.

    Fast path: with ``num_traj`` given, if the rows turn out (checked at run time) to be the
    time-major grid of a grouped rollout, row ``t * num_traj + n`` = trajectory ``n`` at step
    ``t`` (``x.reshape(-1)`` of a ``[T, num_traj]`` array), the sort is skipped and the returns
    come from one reverse ``lax.scan`` over time (:func:`discounted_step_returns_dense`); ~100x
    faster on CPU at 262144 rows. Both paths give the same returns up to float rounding.

    There is no bootstrap: the return of the last observed step is its reward whether the
    trajectory terminated or was truncated (GiGPO is critic-free and has no value to bootstrap
    from). Callers that want truncation to bootstrap must add ``gamma * V(s_T)`` to the last
    reward themselves.

    Args:
        rewards: float ``[N]`` per-step rewards.
        traj_ids: int ``[N]`` trajectory of each row (any integers).
        step_index: int ``[N]`` time step within the trajectory; unique per trajectory. Gaps are
            discounted by their length.
        gamma: discount in ``[0, 1]`` (verl-agent scripts: 0.95).
        valid: optional bool ``[N]``; invalid rows are skipped and get 0.
        num_traj: optional static number of trajectories; enables the grid check.

    Returns:
        ``[N]`` returns in the original row order, dtype of ``rewards``.
    """
    _checks.discount("gamma", gamma)
    if num_traj is not None:
        _checks.integer("num_traj", num_traj)
    named = [("rewards", rewards), ("traj_ids", traj_ids), ("step_index", step_index)]
    if valid is not None:
        named.append(("valid", valid))
    _rows(named, float_names=("rewards",), int_names=("traj_ids", "step_index"),
          bool_names=("valid",))
    valid = _valid_or_all(valid, rewards)
    n = rewards.shape[0]
    if num_traj is None or n % num_traj:
        return _sorted_step_returns(rewards, traj_ids, step_index, valid, gamma)
    grid = (n // num_traj, num_traj)
    return jax.lax.cond(
        _is_time_major_grid(traj_ids, step_index, num_traj),
        lambda: _grid_step_returns(rewards.reshape(grid), valid.reshape(grid), gamma).reshape(n),
        lambda: _sorted_step_returns(rewards, traj_ids, step_index, valid, gamma))


def discounted_step_returns_dense(rewards: Array, *, gamma: float,
                                  valid: Optional[Array] = None) -> Array:
    """:func:`discounted_step_returns` on the time-major grid ``[T, num_traj]`` (batch-level).

    Column ``n`` is trajectory ``n``, row ``t`` its step ``t`` (the layout of
    ``hrljax.rollout.grouped_episodes``). Invalid steps (e.g. after the episode's end) get 0 and
    add no reward; a valid step after invalid ones is discounted by the full time gap, as in the
    row version. One reverse ``lax.scan`` over time, no sort.

    Args:
        rewards: float ``[T, num_traj]``.
        gamma: discount in ``[0, 1]``.
        valid: optional bool ``[T, num_traj]``.

    Returns:
        ``[T, num_traj]`` returns, dtype of ``rewards``.
    """
    _checks.discount("gamma", gamma)
    chex.assert_rank(rewards, 2)
    chex.assert_type(rewards, float)
    valid = _valid_or_all(valid, rewards)
    chex.assert_equal_shape([rewards, valid])
    chex.assert_type(valid, bool)
    return _grid_step_returns(rewards, valid, gamma)


class GigpoAdvantages(NamedTuple):
    advantages: Array  # [N] A^E + omega * A^S
    episode_advantages: Array  # [N] A^E (Eq. 3), per row
    step_advantages: Array  # [N] A^S (Eq. 7)
    step_returns: Array  # [N] discounted returns R_t (Eq. 5)


_GIGPO_NORMS = ("mean", "mean_std")
_DENSE_ANCHOR_METHODS = ("auto",) + _ANCHOR_METHODS
_EPISODE_WEIGHTINGS = ("trajectory", "step")


def _gigpo_carry_nan(episode_adv: Array, step_adv: Array, row_return: Array,
                     step_returns: Array, valid: Array) -> Tuple[Array, Array]:
    """NaN advantages on the valid rows whose own episode return / step return is NaN.

    A group (anchor) with several members already spreads a member's NaN to all of them through
    its mean; a one-member group gets 0 whatever its value, which would turn a NaN reward into a
    finite advantage. Two elementwise selects: at most ~25 us (a few percent) on a 16k-row batch
    of the benchmark, not measurable on its 262k-row batch.
    """
    episode_adv = _with_nan(episode_adv, valid & jnp.isnan(row_return))
    step_adv = _with_nan(step_adv, valid & jnp.isnan(step_returns))
    return episode_adv, step_adv


def gigpo_advantages(step_rewards: Array, traj_ids: Array, step_index: Array, group_ids: Array,
                     anchor_ids: Array, *, num_groups: int, num_traj: int, num_anchors: int,
                     episode_returns: Optional[Array] = None, valid: Optional[Array] = None,
                     gamma: float = 0.95, omega: float = 1.0, norm: str = "mean",
                     eps: float = 1e-6, episode_stat_weighting: str = "trajectory",
                     episode_singleton_mode: str = "zero") -> GigpoAdvantages:
    """GiGPO advantages ``A = A^E(tau) + omega * A^S(a_t)`` on step rows (batch-level).

    Feng, Zhang, et al., "Group-in-Group Policy Optimization for LLM Agent Training",
    arXiv 2505.10978: episode advantage Eq. 3, discounted step return Eq. 5, anchor groups Eq. 6,
    step advantage Eq. 7, combination Eq. 8 (equation numbers as cited in verl-agent's
    ``core_gigpo.py``). One row per environment step; broadcast ``advantages`` to that step's
    action tokens.

    * ``A^E``: ``(R(tau) - mean_group R) / F`` over the trajectories of the episode group.
    * ``A^S``: ``(R_t - mean_anchor R) / F`` over the rows sharing the anchor state
      (:func:`anchor_state_ids`); one-row anchors get 0 (verl-agent uses the row's own value as
      the mean; Trinity skips them).
    * ``F = 1`` for ``norm="mean"`` (verl-agent ``mean_norm``, used by its scripts; the default
      here because the paper's own choice could not be checked) or the unbiased std + ``eps``
      for ``norm="mean_std"`` (``mean_std_norm``).

    Args:
        step_rewards: float ``[N]`` environment reward of each step.
        traj_ids: int ``[N]`` in ``[0, num_traj)``; a trajectory lies in a single group.
        step_index: int ``[N]`` time step within the trajectory (unique per trajectory).
        group_ids: int ``[N]`` in ``[0, num_groups)`` episode group (task uid).
        anchor_ids: int ``[N]`` in ``[0, num_anchors)``, already scoped to the group (as produced
            by :func:`anchor_state_ids`).
        num_groups, num_traj, num_anchors: static segment counts.
        episode_returns: optional float ``[N]`` episode return ``R(tau)`` repeated on every row of
            the trajectory (verl-agent's ``EpisodeRewardManager``); default ``sum_t r_t`` (Eq. 3).
        valid: optional bool ``[N]``; invalid rows touch no statistic and get 0.
        gamma: discount of Eq. 5 (verl-agent scripts: 0.95).
        omega: weight of the step advantage (``step_advantage_w``, default 1).
        norm: ``"mean"`` or ``"mean_std"``, applied at both levels.
        eps: std epsilon for ``norm="mean_std"`` (1e-6).
        episode_stat_weighting: ``"trajectory"`` (paper Eq. 3; each trajectory counts once) or
            ``"step"`` (every step row counts, i.e. the baseline is weighted by trajectory length:
            verl-agent with ``compute_mean_std_cross_all_data=True``, see verl-agent issue #138).
        episode_singleton_mode: ``A^E`` of a group with one trajectory: ``"zero"`` (default) or
            ``"raw"`` (mean 0, std 1: ``R`` or ``R / (1 + eps)``, verl-agent's behaviour).

    Returns:
        ``GigpoAdvantages`` of ``[N]`` arrays, all under ``stop_gradient``. A NaN reward (or
        episode return) on a valid row makes NaN: its trajectory's episode advantages and the
        episode advantages of every trajectory of its group (through the group mean, when the
        group has several trajectories); the step advantages of its own and earlier steps (their
        returns include it) and of every row sharing an anchor with one of those; and hence
        ``advantages`` on all these rows. Other rows, and invalid rows, keep finite values.

    Speed: when the rows are the time-major grid of a grouped rollout (row ``t * num_traj + n``
    is step ``t`` of trajectory ``n``; checked at run time) the step returns skip the sort (see
    :func:`discounted_step_returns`). With observations at hand, :func:`gigpo_advantages_dense`
    also computes the anchors, without any sort.

    Deviations: verl-agent builds anchor groups on the host from hashable observations, with an
    optional similarity clustering; here anchors are integer ids (computed on device by
    :func:`anchor_state_ids`, exact match only). Duplicate ``(traj, step)`` rows (DrMAS multi-agent
    steps) are not merged: give each agent its own trajectory id.
    """
    for name, value in (("num_groups", num_groups), ("num_traj", num_traj),
                        ("num_anchors", num_anchors)):
        _checks.integer(name, value)
    _checks.number("omega", omega)
    _checks.nonnegative("eps", eps)
    _checks.choice("norm", norm, _GIGPO_NORMS)
    _checks.choice("episode_stat_weighting", episode_stat_weighting, _EPISODE_WEIGHTINGS)
    _checks.choice("episode_singleton_mode", episode_singleton_mode, _SINGLETON_MODES)
    named = [("step_rewards", step_rewards), ("traj_ids", traj_ids), ("step_index", step_index),
             ("group_ids", group_ids), ("anchor_ids", anchor_ids)]
    if episode_returns is not None:
        named.append(("episode_returns", episode_returns))
    if valid is not None:
        named.append(("valid", valid))
    _rows(named, float_names=("step_rewards", "episode_returns"),
          int_names=("traj_ids", "step_index", "group_ids", "anchor_ids"), bool_names=("valid",))
    valid = _valid_or_all(valid, step_rewards)
    scale = "none" if norm == "mean" else "group"

    step_returns = discounted_step_returns(step_rewards, traj_ids, step_index, gamma=gamma,
                                           valid=valid, num_traj=num_traj)
    if episode_returns is None:
        traj_return = jax.ops.segment_sum(jnp.where(valid, step_rewards, 0), traj_ids, num_traj)
        row_return = traj_return[traj_ids]
    else:
        row_return = episode_returns
    if episode_stat_weighting == "trajectory":
        traj_count = jax.ops.segment_sum(valid.astype(jnp.int32), traj_ids, num_traj)
        traj_valid = traj_count > 0
        # Trajectory-level reductions over the rows; every valid row of a trajectory carries
        # the same return and group, so the max picks that value.
        traj_return = jax.ops.segment_max(jnp.where(valid, row_return, -jnp.inf), traj_ids,
                                          num_traj)
        traj_return = jnp.where(traj_valid, traj_return, 0)
        traj_group = jax.ops.segment_max(jnp.where(valid, group_ids, 0), traj_ids, num_traj)
        traj_group = jnp.where(traj_valid, traj_group, 0)
        traj_adv = group_normalize(traj_return, traj_group, num_groups, valid=traj_valid,
                                   scale=scale, eps=eps, singleton_mode=episode_singleton_mode)
        episode_adv = traj_adv[traj_ids]
    else:
        episode_adv = group_normalize(row_return, group_ids, num_groups, valid=valid, scale=scale,
                                      eps=eps, singleton_mode=episode_singleton_mode)
    step_adv = group_normalize(step_returns, anchor_ids, num_anchors, valid=valid, scale=scale,
                               eps=eps, singleton_mode="zero")
    episode_adv, step_adv = _gigpo_carry_nan(jnp.where(valid, episode_adv, 0), step_adv,
                                             row_return, step_returns, valid)
    advantages = episode_adv + omega * step_adv
    return jax.lax.stop_gradient(
        GigpoAdvantages(advantages, episode_adv, step_adv, step_returns))


def gigpo_advantages_dense(step_rewards: Array, group_ids: Array, observations: Array, *,
                           num_groups: int, episode_returns: Optional[Array] = None,
                           valid: Optional[Array] = None, gamma: float = 0.95,
                           omega: float = 1.0, norm: str = "mean", eps: float = 1e-6,
                           episode_stat_weighting: str = "trajectory",
                           episode_singleton_mode: str = "zero",
                           hash_fn: Callable[[Array], Array] = observation_hash,
                           anchor_method: str = "auto",
                           max_probe_rounds: int = 32) -> GigpoAdvantages:
    """:func:`gigpo_advantages` on the time-major grid of a grouped rollout, anchors included.

    Same formulas (GiGPO, arXiv 2505.10978, Eqs. 3, 5-8), same options and results as
    :func:`anchor_state_ids` followed by :func:`gigpo_advantages` on the flattened rows, but
    without any sort: step returns by one reverse scan over time, episode returns by a sum over
    time, and the step statistics are keyed by a slot per anchor, so no dense relabelling is
    needed. Batch-level.

    Anchor methods:

    * ``"auto"`` (default): direct addressing when it fits, else ``"hash"``. Each group's valid
      observations span a box (per word of :func:`observation_words`: its smallest to largest
      value); numbering the cells of the boxes, one block per group, is a perfect hash of
      (group, observation), so the anchor statistics are segment reductions over those slots
      with no table rounds, no fingerprints and no exact check (equal slots are equal keys).
      It is used when all the boxes together have at most ``T * num_traj`` cells (at most
      ``2**23``), checked at run time: small integer observations (grid worlds, with a goal
      fixed within a task) fit; float observations rarely do (their bit patterns are spread
      out) and take the ``"hash"`` path. On the benchmark's FourRooms batch
      (``experiments/benchmarks/advantages.py``) it takes a third of the CPU time of
      ``"hash"`` (~5 ms vs ~15 ms single-threaded), with the same result bit for bit.
    * ``"hash"``: the hash-table anchors of :func:`anchor_state_ids` (statistics keyed by each
      anchor's first row).
    * ``"sort"``: the sort anchors of :func:`anchor_state_ids`.

    All three give the same partition of the rows, hence the same advantages.

    Args:
        step_rewards: float ``[T, num_traj]``; column ``n`` is trajectory ``n``, row ``t`` its
            step ``t`` (``hrljax.rollout.grouped_episodes`` layout).
        group_ids: int ``[num_traj]`` in ``[0, num_groups)`` episode group of each trajectory.
        observations: ``[T, num_traj, ...]`` current observation of each step (the anchor key).
        num_groups: static number of groups.
        episode_returns: optional float ``[T, num_traj]`` (see :func:`gigpo_advantages`).
        valid: optional bool ``[T, num_traj]`` (e.g. ``GroupedEpisodes.valid``).
        gamma, omega, norm, eps, episode_stat_weighting, episode_singleton_mode: as in
            :func:`gigpo_advantages`.
        hash_fn, max_probe_rounds: as in :func:`anchor_state_ids` (used by ``"hash"`` and by
            ``"auto"`` when the direct table does not fit).
        anchor_method: ``"auto"``, ``"hash"`` or ``"sort"`` (see above).

    Returns:
        ``GigpoAdvantages`` of ``[T, num_traj]`` arrays, all under ``stop_gradient``; a NaN
        reward marks the same rows NaN as in :func:`gigpo_advantages`.
    """
    _checks.integer("num_groups", num_groups)
    _checks.number("omega", omega)
    _checks.nonnegative("eps", eps)
    _checks.choice("norm", norm, _GIGPO_NORMS)
    _checks.choice("episode_stat_weighting", episode_stat_weighting, _EPISODE_WEIGHTINGS)
    _checks.choice("episode_singleton_mode", episode_singleton_mode, _SINGLETON_MODES)
    _checks.choice("anchor_method", anchor_method, _DENSE_ANCHOR_METHODS)
    _checks.integer("max_probe_rounds", max_probe_rounds)
    chex.assert_rank([step_rewards, group_ids], [2, 1])
    chex.assert_type([step_rewards, group_ids], [float, int])
    num_steps, num_traj = step_rewards.shape
    chex.assert_shape(group_ids, (num_traj,))
    chex.assert_equal_shape_prefix([step_rewards, observations], 2)
    valid = _valid_or_all(valid, step_rewards)
    chex.assert_equal_shape([step_rewards, valid])
    chex.assert_type(valid, bool)
    if episode_returns is not None:
        chex.assert_equal_shape([step_rewards, episode_returns])
        chex.assert_type(episode_returns, float)
    scale = "none" if norm == "mean" else "group"
    rows = num_steps * num_traj

    step_returns = discounted_step_returns_dense(step_rewards, gamma=gamma, valid=valid)
    if episode_returns is None:
        traj_return = jnp.sum(jnp.where(valid, step_rewards, 0), axis=0)
        row_return = jnp.broadcast_to(traj_return[None, :], step_rewards.shape)
    else:
        row_return = episode_returns
    if episode_stat_weighting == "trajectory":
        traj_valid = jnp.any(valid, axis=0)
        if episode_returns is not None:
            # Every valid row of a trajectory carries the same return; the max picks it.
            traj_return = jnp.max(jnp.where(valid, episode_returns, -jnp.inf), axis=0)
        traj_return = jnp.where(traj_valid, traj_return, 0)
        traj_adv = group_normalize(traj_return, group_ids, num_groups, valid=traj_valid,
                                   scale=scale, eps=eps, singleton_mode=episode_singleton_mode)
        episode_adv = jnp.where(valid, traj_adv[None, :], 0)
    else:
        row_groups = jnp.broadcast_to(group_ids[None, :], step_rewards.shape).reshape(rows)
        episode_adv = group_normalize(
            row_return.reshape(rows), row_groups, num_groups, valid=valid.reshape(rows),
            scale=scale, eps=eps, singleton_mode=episode_singleton_mode).reshape(valid.shape)

    row_valid = valid.reshape(rows)
    row_obs = observations.reshape((rows,) + observations.shape[2:])

    def first_rows(method: str) -> Array:
        row_groups = jnp.broadcast_to(group_ids[None, :], step_rewards.shape).reshape(rows)
        return _anchor_heads(row_obs, row_groups, row_valid, hash_fn, method, max_probe_rounds)

    if anchor_method == "auto":
        words = observation_words(row_obs)
        words = words.reshape(num_steps, num_traj, words.shape[1])
        layout = _direct_anchor_layout(words, group_ids, valid, num_groups,
                                       min(rows, _MAX_DIRECT_CAPACITY))
        direct = _direct_anchor_index(words, group_ids, valid, layout).reshape(rows)
        # The fallback runs in a loop of at most one iteration, not in `lax.cond`: with the hash
        # path as a cond branch, XLA:CPU took ~2x longer even when the direct branch was taken.
        anchors = jax.lax.while_loop(
            lambda state: ~state[0], lambda state: (jnp.bool_(True), first_rows("hash")),
            (layout.fits, direct))[1]
    else:
        anchors = first_rows(anchor_method)
    # Slots (direct table, at most `rows`) or first-row indices: `rows` segments cover both.
    step_adv = group_normalize(step_returns.reshape(rows), anchors, rows, valid=row_valid,
                               scale=scale, eps=eps, singleton_mode="zero").reshape(valid.shape)
    episode_adv, step_adv = _gigpo_carry_nan(episode_adv, step_adv, row_return, step_returns,
                                             valid)
    advantages = episode_adv + omega * step_adv
    return jax.lax.stop_gradient(
        GigpoAdvantages(advantages, episode_adv, step_adv, step_returns))


# ------------------------------------------------------------------------------------------------
# REC / OPMD / AsymRE (spec section 4).
# ------------------------------------------------------------------------------------------------

_REC_DROPS = ("none", "balance")


class RecAdvantages(NamedTuple):
    advantages: Array  # [B] under stop_gradient; 0 on dropped and invalid rows
    kept: Array  # bool [B] rows that survived the drop strategy (and are valid)


def rec_advantages(rewards: Array, group_ids: Array, num_groups: int, *,
                   valid: Optional[Array] = None, std_normalize: bool = False,
                   eps: float = 1e-6, drop: str = "none",
                   key: Optional[Array] = None) -> RecAdvantages:
    """REC advantages: group-mean baseline, optional balancing drop (batch-level).

    Yao, Chen, et al., "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm:
    Demystifying Some Myths About GRPO and Its Friends", arXiv 2509.24203 (paper checked at
    abstract level only); the details follow the authors' code, Trinity-RFT
    ``advantage_fn/rec_advantage.py::RECGroupedAdvantage``.

    ``A_i = r_i - mean_kept`` (or ``/ (std_kept + eps)`` with ``std_normalize``, population std).
    With ``drop="balance"``, a group with more negatives (``r < mean``) than positives loses
    ``#neg - #pos`` uniformly chosen negatives (``A := 0``), and the mean and std are recomputed
    on the kept rows. A group with at most one kept row uses mean 0 and std 1 (``A = r``, or
    ``r / (1 + eps)``), as Trinity does.

    Args:
        rewards, group_ids, num_groups, valid: as in :func:`group_normalize`.
        std_normalize: divide by the kept rows' population std + eps (the ``rec_gsm8k`` example
            does not).
        eps: std epsilon (1e-6).
        drop: ``"none"`` or ``"balance"``.
        key: PRNG key, required by ``drop="balance"``.

    Returns:
        ``RecAdvantages(advantages, kept)``.

    Fixes Trinity's ``NameError`` on a one-experience group (``rewards`` referenced before
    assignment at @d4baca6): such a group gets ``A = r``, like any group with one kept row.
    """
    _checks.choice("drop", drop, _REC_DROPS)
    _checks.nonnegative("eps", eps)
    valid = _check_segment_args(rewards, group_ids, num_groups, valid)
    kept = valid
    if drop == "balance":
        if key is None:
            raise ValueError("key: expected a PRNG key with drop='balance', got None")
        moments = _shifted_moments(rewards, group_ids, num_groups, valid)
        negative = valid & (moments.centred < 0)
        num_neg = jax.ops.segment_sum(negative.astype(jnp.int32), group_ids, num_groups)
        num_pos = jax.ops.segment_sum((valid & ~negative).astype(jnp.int32), group_ids,
                                      num_groups)
        excess = jnp.maximum(num_neg - num_pos, 0)
        # Rank each negative among its group's negatives by a random priority; drop the lowest.
        priority = jax.random.uniform(key, rewards.shape)
        bucket = jnp.where(negative, group_ids, num_groups).astype(jnp.int32)
        n = rewards.shape[0]
        sorted_bucket, _, perm = jax.lax.sort(
            (bucket, priority, jnp.arange(n, dtype=jnp.int32)), num_keys=2)
        position = jnp.arange(n, dtype=jnp.int32)
        first = jax.ops.segment_min(position, sorted_bucket, num_groups + 1)[sorted_bucket]
        rank = jnp.zeros((n,), jnp.int32).at[perm].set(position - first)
        dropped = negative & (rank < excess[group_ids])
        kept = valid & ~dropped
    advantages = group_normalize(rewards, group_ids, num_groups, valid=kept,
                                 scale="group" if std_normalize else "none", eps=eps, ddof=0,
                                 singleton_mode="raw")
    return RecAdvantages(jax.lax.stop_gradient(advantages), kept)


_OPMD_BASELINES = ("mean", "logavgexp")


def opmd_advantages(rewards: Array, group_ids: Array, num_groups: int, *,
                    valid: Optional[Array] = None, baseline: str = "mean",
                    tau: float = 1.0) -> Array:
    """Online Policy Mirror Descent advantages ``r_i - b_g`` (batch-level).

    Kimi Team, "Kimi k1.5: Scaling Reinforcement Learning with LLMs", arXiv 2501.12599,
    section 2.3.2 (OPMD), as implemented by Trinity-RFT ``opmd_advantage.py`` and reinterpreted
    as regularised REINFORCE by arXiv 2509.24203.

    Args:
        rewards, group_ids, num_groups, valid: as in :func:`group_normalize`.
        baseline: ``"mean"`` (``b = mean_g r``) or ``"logavgexp"``
            (``b = tau * log(mean_g exp(r / tau))``, the soft-max baseline of the OPMD derivation;
            tends to ``mean`` as ``tau -> inf`` and to ``max`` as ``tau -> 0``).
        tau: temperature of the log-avg-exp baseline (> 0).

    Returns:
        ``[B]`` under ``stop_gradient``. One-row groups use ``b = 0`` (Trinity), i.e. ``A = r``.
        All-equal groups give exactly 0 under both baselines.
    """
    _checks.choice("baseline", baseline, _OPMD_BASELINES)
    _checks.positive("tau", tau)
    valid = _check_segment_args(rewards, group_ids, num_groups, valid)
    moments = _shifted_moments(rewards, group_ids, num_groups, valid)
    if baseline == "mean":
        advantages = moments.centred
    else:
        top = jax.ops.segment_max(jnp.where(valid, rewards, -jnp.inf), group_ids, num_groups)
        top = jnp.where(moments.count > 0, top, 0)
        shifted = jnp.where(valid, rewards - top[group_ids], 0)
        mean_exp = _safe_div(jax.ops.segment_sum(jnp.where(valid, jnp.exp(shifted / tau), 0),
                                                 group_ids, num_groups), moments.count)
        log_mean_exp = tau * jnp.log(jnp.where(moments.count > 0, mean_exp, 1))
        advantages = shifted - log_mean_exp[group_ids]
    advantages = jnp.where(moments.count[group_ids] == 1, rewards, advantages)
    return jax.lax.stop_gradient(jnp.where(valid, advantages, 0))


def asymre_advantages(rewards: Array, group_ids: Array, num_groups: int, *,
                      valid: Optional[Array] = None, baseline_shift: float = -0.1) -> Array:
    """Asymmetric REINFORCE advantages ``r_i - (mean_g + delta)`` (batch-level).

    Arnal et al., "Asymmetric REINFORCE for off-Policy Reinforcement Learning: Balancing positive
    and negative rewards", arXiv 2506.20520; Trinity-RFT ``asymre_advantage.py``. By linearity
    this is REINFORCE plus ``-delta * sum log pi(y)`` (the ``forward-kl`` regulariser of
    :func:`rec_loss` with ``reg_coef = -delta``), arXiv 2509.24203.

    Args:
        rewards, group_ids, num_groups, valid: as in :func:`group_normalize`.
        baseline_shift: ``delta`` (Trinity default -0.1; negative favours positive samples).

    Returns:
        ``[B]`` under ``stop_gradient``. One-row groups use baseline 0 (Trinity): ``A = r``.
    """
    _checks.number("baseline_shift", baseline_shift)
    valid = _check_segment_args(rewards, group_ids, num_groups, valid)
    moments = _shifted_moments(rewards, group_ids, num_groups, valid)
    advantages = moments.centred - baseline_shift
    advantages = jnp.where(moments.count[group_ids] == 1, rewards, advantages)
    return jax.lax.stop_gradient(jnp.where(valid, advantages, 0))


def _check_token_args(logp: Array, old_logp: Optional[Array], advantages: Array,
                      mask: Array) -> Array:
    arrays = [logp, advantages, mask] + ([old_logp] if old_logp is not None else [])
    chex.assert_rank(arrays, 2)
    chex.assert_equal_shape(arrays)
    chex.assert_type([logp, advantages], float)
    if old_logp is not None:
        chex.assert_type(old_logp, float)
    return mask.astype(logp.dtype)


class RecExtras(NamedTuple):
    per_token_loss: Array  # [B, T] (0 on masked tokens); re-aggregate with policy_gradient
    keep: Array  # bool [B, T] tokens whose gradient is kept by the clip mode
    ratio: Array  # [B, T] detached token ratio pi / pi_old
    clip_fraction: Array  # scalar: masked mean of ~keep
    loss_sum: Array  # scalar numerator of the aggregation
    denominator: Array  # scalar denominator (tokens, or sequences for gspo-one-side)


_REC_CLIP_MODES = ("none", "one-side", "two-side", "ring", "gspo-one-side")
_REC_WEIGHTS = ("none", "importance_sampling", "gspo_importance_sampling", "advantage")
_REC_REGULARIZERS = ("none", "k2", "forward-kl")


def rec_loss(logp: Array, old_logp: Array, advantages: Array, mask: Array, *,
             clip_mode: str = "none", weight: str = "none", eps_low: float = 0.2,
             eps_high: float = 0.2, eps_low_outer: float = 0.6, eps_high_outer: float = 2.0,
             regularizer: str = "none", reg_coef: float = 0.0, temp: float = 1.0,
             log_ratio_clamp: float = 20.0) -> Tuple[Array, RecExtras]:
    """REC loss: REINFORCE with a detached keep mask and weight (batch-level, ``[B, T]``).

    Yao, Chen, et al., arXiv 2509.24203; Trinity-RFT ``rec_policy_loss.py::RECPolicyLossFn``.
    Per token ``l_t = -w_t * A_t * log pi(y_t) * keep_t`` (+ regulariser), where the ratio
    ``rho = pi / pi_old``, the keep mask and the weight ``w`` are all detached, so the gradient is
    plain REINFORCE on the kept tokens whatever ``old_logp`` is (the "secretly off-policy" reading).

    Clip modes (``keep``): ``"none"``; ``"two-side"``: ``1-eps_low <= rho <= 1+eps_high``;
    ``"one-side"``: ``(A >= 0 and rho <= 1+eps_high) or (A <= 0 and rho >= 1-eps_low)``, PPO's
    non-zero-gradient region; ``"ring"``: two-side, or ``A >= 0 and rho <= 1-eps_low_outer``, or
    ``A <= 0 and rho >= 1+eps_high_outer``; ``"gspo-one-side"``: one-side on the sequence ratio
    ``exp(masked mean_t log rho)``, aggregated seq-mean-token-mean (as Trinity forces).
    Weights: ``"none"``; ``"importance_sampling"``: ``rho`` (the gradient of the unclipped PPO
    surrogate); ``"gspo_importance_sampling"``: the sequence ratio; ``"advantage"``:
    ``exp(A / temp)``. Regularisers: ``"k2"``: ``+ reg_coef * (logp - old_logp)^2`` (the 1/2
    absorbed, as in Trinity; OPMD's reading); ``"forward-kl"``: ``- reg_coef * logp`` (AsymRE's
    reading).

    Paper variant names map to ``(clip_mode, weight)``: REC-OneSide-NoIS = ("one-side", "none"),
    REC-OneSide-IS = ("one-side", "importance_sampling"), REC-TwoSide-NoIS = ("two-side",
    "none"), REC-Ring-NoIS = ("ring", "none") (names recalled in the spec, not checked).

    Args:
        logp: float ``[B, T]`` log-probs of the sampled tokens under pi_theta.
        old_logp: float ``[B, T]`` under the behaviour policy.
        advantages: float ``[B, T]`` (:func:`broadcast_to_tokens` of sequence advantages).
        mask: ``[B, T]`` response mask (bool or float).
        clip_mode, weight, regularizer: see above.
        eps_low, eps_high: inner band (Trinity ``default_args``: 0.2, 0.2).
        eps_low_outer, eps_high_outer: ring's outer thresholds (``default_args``: 0.6, 2.0; the
            Trinity constructor's own keyword defaults are 0.4, 0.4).
        reg_coef: regulariser coefficient (>= 0).
        temp: temperature of the ``"advantage"`` weight (> 0).
        log_ratio_clamp: ``logp - old_logp`` is clamped to +-this before ``exp`` (verl's 20;
            Trinity does not clamp, which only matters for extreme ratios).

    Returns:
        ``(loss, RecExtras)``: token-mean loss (Trinity's default ``masked_mean``).

    Deviations: Trinity's ``gspo_importance_sampling`` weight reads the sequence ratio that only
    the ``gspo-one-side`` mode defines (a ``NameError`` with other modes); here it is always
    defined. The ``truncated_importance_sampling`` weight named in the spec is not in the Trinity
    code read (@1d7fae4 and an older copy), so it is not offered.
    """
    _checks.choice("clip_mode", clip_mode, _REC_CLIP_MODES)
    _checks.choice("weight", weight, _REC_WEIGHTS)
    _checks.choice("regularizer", regularizer, _REC_REGULARIZERS)
    _checks.number("eps_low", eps_low, low=0.0, high=1.0, low_open=True)
    _checks.positive("eps_high", eps_high)
    _checks.number("eps_low_outer", eps_low_outer, low=0.0, high=1.0, low_open=True)
    _checks.positive("eps_high_outer", eps_high_outer)
    _checks.nonnegative("reg_coef", reg_coef)
    _checks.positive("temp", temp)
    _checks.positive("log_ratio_clamp", log_ratio_clamp, finite=False)
    m = _check_token_args(logp, old_logp, advantages, mask)

    log_ratio = jax.lax.stop_gradient(
        jnp.clip(logp - old_logp, -log_ratio_clamp, log_ratio_clamp))
    ratio = jnp.exp(log_ratio)
    tokens = jnp.sum(m, axis=1)
    seq_ratio = jnp.exp(_safe_div(jnp.sum(log_ratio * m, axis=1), tokens))[:, None]
    a = jax.lax.stop_gradient(advantages)
    pos, neg = a >= 0, a <= 0
    inner = (ratio >= 1 - eps_low) & (ratio <= 1 + eps_high)
    if clip_mode == "none":
        keep = jnp.ones_like(inner)
    elif clip_mode == "two-side":
        keep = inner
    elif clip_mode == "one-side":
        keep = (pos & (ratio <= 1 + eps_high)) | (neg & (ratio >= 1 - eps_low))
    elif clip_mode == "ring":
        keep = (inner | (pos & (ratio <= 1 - eps_low_outer))
                | (neg & (ratio >= 1 + eps_high_outer)))
    else:
        keep = (pos & (seq_ratio <= 1 + eps_high)) | (neg & (seq_ratio >= 1 - eps_low))

    if weight == "importance_sampling":
        a = a * ratio
    elif weight == "gspo_importance_sampling":
        a = a * seq_ratio
    elif weight == "advantage":
        a = a * jnp.exp(a / temp)
    per_token = -a * logp * keep.astype(logp.dtype)
    if regularizer == "k2":
        per_token = per_token + reg_coef * jnp.square(logp - old_logp)
    elif regularizer == "forward-kl":
        per_token = per_token - reg_coef * logp
    per_token = per_token * m

    if clip_mode == "gspo-one-side":
        loss_sum = jnp.sum(_safe_div(jnp.sum(per_token, axis=1), tokens))
        denominator = jnp.sum(tokens > 0).astype(logp.dtype)
    else:
        loss_sum = jnp.sum(per_token)
        denominator = jnp.sum(m)
    clip_fraction = _safe_div(jnp.sum((~keep).astype(logp.dtype) * m), jnp.sum(m))
    loss = _safe_div(loss_sum, denominator)
    return loss, RecExtras(per_token, keep, ratio, clip_fraction, loss_sum, denominator)


class TokenLossExtras(NamedTuple):
    per_token_loss: Array  # [B, T] (0 on masked tokens)
    loss_sum: Array  # scalar
    denominator: Array  # scalar number of unmasked tokens


def opmd_loss(logp: Array, advantages: Array, mask: Array, *,
              tau: float = 1.0) -> Tuple[Array, TokenLossExtras]:
    """OPMD policy loss ``-masked_mean(A * logp) / (1 + tau)`` (batch-level, ``[B, T]``).

    Kimi k1.5 (arXiv 2501.12599) OPMD as in Trinity-RFT ``opmd_policy_loss.py``: a REINFORCE
    loss scaled by ``1 / (1 + tau)``, token-mean. ``old_logp`` is not used. The ``tau/2 * (log
    pi - log pi_old)^2`` regulariser of the OPMD surrogate is :func:`rec_loss`'s ``"k2"`` option.

    Args:
        logp: float ``[B, T]``.
        advantages: float ``[B, T]`` (:func:`opmd_advantages` broadcast to tokens); detached.
        mask: ``[B, T]``.
        tau: the OPMD temperature (>= 0).

    Returns:
        ``(loss, TokenLossExtras)``.
    """
    _checks.nonnegative("tau", tau)
    m = _check_token_args(logp, None, advantages, mask)
    per_token = -jax.lax.stop_gradient(advantages) * logp * m / (1.0 + tau)
    loss_sum, denominator = jnp.sum(per_token), jnp.sum(m)
    return _safe_div(loss_sum, denominator), TokenLossExtras(per_token, loss_sum, denominator)


# ------------------------------------------------------------------------------------------------
# HICRA (spec section 6).
# ------------------------------------------------------------------------------------------------


def hicra_advantages(token_advantages: Array, planning_mask: Array, *,
                     alpha: float = 0.2) -> Array:
    """HICRA: amplify the advantage of planning tokens, ``A + alpha * |A| * 1[planning]``.

    Wang et al., "Emergent Hierarchical Reasoning in LLMs through Reinforcement Learning",
    arXiv 2509.03646 (TIGER-AI-Lab). Planning tokens get ``A * (1 + alpha)`` when ``A > 0`` and
    ``A * (1 - alpha)`` when ``A < 0``, so for ``alpha < 1`` the sign never flips; other tokens
    are unchanged; the clipped GRPO loss then uses the result. Elementwise (any shape).

    The formula and ``alpha = 0.2`` are those of two independent ports (textpolicy
    ``apply_hicra_amplification`` and TRL PR #4997's ``1 + alpha * sign(A)``); the paper's own
    equation could not be checked (only its abstract and summaries were reachable). The TRL PR
    applied the multiplier through chained boolean indexing, which writes into a temporary copy
    and is a no-op; this uses ``jnp.where``. The entropy- and length-gated variant that the TRL
    PR attributes to the authors' verl branch is not implemented (secondary source only).

    Args:
        token_advantages: float ``[...]`` (e.g. ``[B, T]``); treated as a constant.
        planning_mask: bool/0-1 of the same shape (e.g. :func:`planning_token_mask`).
        alpha: amplification in ``[0, 1]``.

    Returns:
        Amplified advantages under ``stop_gradient``.
    """
    _checks.number("alpha", alpha, low=0.0, high=1.0)
    chex.assert_equal_shape([token_advantages, planning_mask])
    chex.assert_type(token_advantages, float)
    a = jax.lax.stop_gradient(token_advantages)
    return jnp.where(planning_mask.astype(bool), a + alpha * jnp.abs(a), a)


def hicra_verl_port_advantages(sequence_advantages: Array, mask: Array, entropies: Array,
                               group_ids: Array, num_groups: int, *,
                               planning_mask: Optional[Array] = None, alpha: float = 0.2,
                               top_fraction: float = 0.3,
                               valid: Optional[Array] = None) -> Array:
    """HICRA as the TRL port (PR #4997) describes the authors' verl branch (batch-level).

    Secondary source only (the official repository snapshot holds a README): amplification
    ``A * (1 + alpha * sign(A))`` is applied only on responses that are "correct" (sequence
    advantage > 0) and longer than their group's mean length, and there only on high-entropy
    tokens (entropy strictly above the response's ``1 - top_fraction`` quantile, linear
    interpolation as ``torch.quantile``) or, when ``planning_mask`` is given, planning tokens.
    Prefer :func:`hicra_advantages` (the paper's formula) unless reproducing that branch.
    With constant entropies no token is "high-entropy" (strict ``>``), so only the planning mask
    acts; the PR's own tests missed that (its multiplier was also a no-op, see
    :func:`hicra_advantages`).

    Args:
      sequence_advantages: float ``[B]`` (e.g. :func:`grpo_advantages`).
      mask: ``[B, T]`` response mask; the length of a response is its mask sum.
      entropies: float ``[B, T]`` token entropies (treated as constants).
      group_ids: int ``[B]``; num_groups: static.
      planning_mask: optional ``[B, T]`` bool/0-1.
      alpha: amplification in ``[0, 1]``; top_fraction: in ``(0, 1]`` (the port's 0.3).
      valid: optional bool ``[B]``; invalid rows enter no group length mean and get 0.

    Returns:
      float ``[B, T]`` token advantages (0 off the mask), under ``stop_gradient``.
    """
    _checks.number("alpha", alpha, low=0.0, high=1.0)
    _checks.number("top_fraction", top_fraction, low=0.0, high=1.0, low_open=True)
    chex.assert_rank([sequence_advantages, mask, entropies], [1, 2, 2])
    chex.assert_equal_shape([mask, entropies])
    chex.assert_equal_shape_prefix([sequence_advantages, mask], 1)
    chex.assert_type(entropies, float)
    valid = _check_segment_args(sequence_advantages, group_ids, num_groups, valid)
    m = mask.astype(bool)
    lengths = jnp.sum(m, axis=1).astype(jnp.float32)
    mean_length = segment_mean(lengths, group_ids, num_groups, valid=valid)[group_ids]
    eligible = valid & (sequence_advantages > 0) & (lengths > mean_length)

    # Per-response linear-interpolation quantile over its own (unmasked) tokens.
    ordered = jnp.sort(jnp.where(m, entropies, jnp.inf), axis=1)
    position = (1.0 - top_fraction) * jnp.maximum(lengths - 1, 0)
    below = jnp.floor(position).astype(jnp.int32)
    above = jnp.ceil(position).astype(jnp.int32)
    low = jnp.take_along_axis(ordered, below[:, None], axis=1)[:, 0]
    high = jnp.take_along_axis(ordered, above[:, None], axis=1)[:, 0]
    high = jnp.where(jnp.isfinite(high), high, low)
    threshold = low + (position - below) * (high - low)
    chosen = m & (entropies > threshold[:, None])
    if planning_mask is not None:
        chex.assert_equal_shape([planning_mask, mask])
        chosen = chosen | (planning_mask.astype(bool) & m)
    chosen = chosen & eligible[:, None]
    a = jax.lax.stop_gradient(sequence_advantages)[:, None] * m.astype(sequence_advantages.dtype)
    amplified = a * (1 + alpha * jnp.sign(a))
    out = jnp.where(chosen, amplified, a)
    return jax.lax.stop_gradient(jnp.where(valid[:, None], out, 0))


def planning_token_mask(tokens: Array, patterns: Array, pattern_lengths: Array,
                        mask: Optional[Array] = None) -> Array:
    """Marks the tokens covered by any occurrence of any pattern (Strategic Gram) in a sequence.

    Exact token-id matching by sliding windows (as TRL PR #4997 does), jittable. Matches never
    extend over masked (padding / prompt / tool) tokens. Overlapping matches are or-ed.
    Subword pitfall: one phrase tokenises differently with and without a leading space; pass
    both tokenisations as separate patterns.

    Args:
        tokens: int ``[B, T]``.
        patterns: int ``[S, L]``; pattern ``s`` is ``patterns[s, :pattern_lengths[s]]`` (the tail
            is padding and ignored).
        pattern_lengths: int ``[S]`` in ``[1, L]``.
        mask: optional ``[B, T]`` bool/0-1; tokens outside it never match.

    Returns:
        bool ``[B, T]``.
    """
    chex.assert_rank([tokens, patterns, pattern_lengths], [2, 2, 1])
    chex.assert_type([tokens, patterns, pattern_lengths], int)
    chex.assert_equal_shape_prefix([patterns, pattern_lengths], 1)
    b, t = tokens.shape
    width = patterns.shape[1]
    mask = jnp.ones((b, t), bool) if mask is None else mask.astype(bool)
    chex.assert_shape(mask, (b, t))
    padded_tokens = jnp.pad(tokens, ((0, 0), (0, width)))
    padded_mask = jnp.pad(mask, ((0, 0), (0, width)))
    offsets = jnp.arange(width)
    starts = jnp.arange(t)[:, None] + offsets[None, :]  # [T, L]
    windows = padded_tokens[:, starts]  # [B, T, L]
    window_mask = padded_mask[:, starts]
    used = offsets[None, :] < pattern_lengths[:, None]  # [S, L]
    agree = (windows[:, :, None, :] == patterns[None, None]) & window_mask[:, :, None, :]
    match = jnp.all(agree | ~used[None, None], axis=-1) & (pattern_lengths > 0)[None, None]
    # Token p is covered if a match of pattern s starts at p - j for some j < len(s).
    covered = jnp.zeros((b, t), bool)
    for j in range(width):
        starts_here = jnp.any(match & used[None, None, :, j], axis=-1)  # [B, T] matches long enough
        covered = covered | jnp.pad(starts_here, ((0, 0), (j, 0)))[:, :t]
    return covered & mask


# ------------------------------------------------------------------------------------------------
# HBPO (spec section 9).
# ------------------------------------------------------------------------------------------------

_HBPO_FORMS = ("paper", "code_min")


def _hbpo_flat(budget: Array, beta: float, max_len: int) -> Array:
    return beta * jnp.cos(jnp.pi * budget / (2.0 * max_len))


def hbpo_reward(lengths: Array, budgets: Array, correct: Array, *, beta: float = 4.0,
                alpha: float = 1.0 / 4096, max_len: int = 4096, incorrect_reward: float = 0.0,
                form: str = "paper") -> Array:
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
    _rows([("lengths", lengths), ("budgets", budgets), ("correct", correct)],
          bool_names=("correct",))
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


def hbpo_advantages(rewards: Array, budget_ids: Array, group_ids: Array, num_groups: int,
                    budget_values: Array, *, valid: Optional[Array] = None, beta: float = 4.0,
                    max_len: int = 4096, eps: float = 1e-6, singleton_mode: str = "zero",
                    double_intra: bool = False) -> HbpoAdvantages:
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
    _rows(named, float_names=("rewards",), int_names=("budget_ids", "group_ids"),
          bool_names=("valid",))
    valid = _valid_or_all(valid, rewards)
    subgroup = group_ids * num_budgets + budget_ids
    sub_mean = _shifted_moments(rewards, subgroup, num_groups * num_budgets, valid).mean
    flat = _hbpo_flat(budget_values.astype(jnp.float32), beta, max_len)[budget_ids]
    intra = jnp.where(valid, sub_mean[subgroup] - flat, 0)
    inter = group_normalize(rewards, group_ids, num_groups, valid=valid, eps=eps,
                            singleton_mode=singleton_mode)
    advantages = inter + (2.0 if double_intra else 1.0) * intra
    return jax.lax.stop_gradient(HbpoAdvantages(advantages, intra, inter))


# ------------------------------------------------------------------------------------------------
# M-GRPO (spec section 8).
# ------------------------------------------------------------------------------------------------


class Alignment(NamedTuple):
    index: Array  # int32 [K * D] row of the sub-agent batch filling each slot
    slot_valid: Array  # bool [K * D] False where the rollout had no sub-trajectory at all


def mgrpo_alignment(rollout_ids: Array, num_rollouts: int, slots_per_rollout: int, key: Array,
                    *, valid: Optional[Array] = None) -> Alignment:
    """M-GRPO trajectory alignment: exactly ``D`` sub-agent slots per main rollout (batch-level).

    Hong et al., "Multi-Agent Deep Research: Training Multi-Agent Systems with M-GRPO",
    arXiv 2511.13288 (abstract checked: "a trajectory-alignment scheme that generates fixed-size
    batches despite variable sub-agent invocations"; the rule below is the spec's reading, not
    verified in the paper). Rollout ``k`` with ``d_k`` sub-trajectories: if ``d_k >= D``, a
    uniformly random subset of ``D`` without replacement; if ``0 < d_k < D``, every
    sub-trajectory once plus ``D - d_k`` uniform duplicates; if ``d_k = 0``, the slots are marked
    invalid (the paper's choice there is unknown). Slot order within a rollout is random.

    Compute sub-agent statistics (:func:`grpo_advantages`) on the rows *before* alignment and
    gather them with ``index``: duplicates must not reweight the group statistics.

    Args:
        rollout_ids: int ``[M]`` in ``[0, num_rollouts)``: the main rollout of each sub-trajectory.
        num_rollouts: static ``K``.
        slots_per_rollout: static ``D``.
        key: PRNG key.
        valid: optional bool ``[M]``; invalid rows are never selected.

    Returns:
        ``Alignment(index, slot_valid)``; slot ``k * D + s`` belongs to rollout ``k``.
    """
    _checks.integer("num_rollouts", num_rollouts)
    _checks.integer("slots_per_rollout", slots_per_rollout)
    chex.assert_rank(rollout_ids, 1)
    chex.assert_type(rollout_ids, int)
    valid = _valid_or_all(valid, rollout_ids)
    chex.assert_equal_shape([rollout_ids, valid])
    m = rollout_ids.shape[0]
    order_key, dup_key = jax.random.split(key)
    bucket = jnp.where(valid, rollout_ids, num_rollouts).astype(jnp.int32)
    sorted_bucket, _, perm = jax.lax.sort(
        (bucket, jax.random.uniform(order_key, (m,)), jnp.arange(m, dtype=jnp.int32)),
        num_keys=2)
    counts = jax.ops.segment_sum(jnp.ones((m,), jnp.int32), sorted_bucket, num_rollouts + 1)
    first = jnp.cumsum(counts) - counts
    slot = jnp.arange(slots_per_rollout)[None, :]
    d = counts[:num_rollouts, None]
    duplicate = jax.random.randint(dup_key, (num_rollouts, slots_per_rollout), 0,
                                   jnp.maximum(d, 1))
    offset = jnp.where(slot < d, slot, duplicate)
    position = jnp.clip(first[:num_rollouts, None] + offset, 0, m - 1)
    slot_valid = jnp.broadcast_to(d > 0, offset.shape)
    index = jnp.where(slot_valid, perm[position], 0)
    return Alignment(index.reshape(-1).astype(jnp.int32), slot_valid.reshape(-1))


# ------------------------------------------------------------------------------------------------
# DisCO (spec section 11).
# ------------------------------------------------------------------------------------------------


class DiscoExtras(NamedTuple):
    scores: Array  # [B] s(o): length-normalised log-likelihood or ratio
    objective: Array  # [num_groups] J_q (0 for questions without both signs)
    valid_questions: Array  # bool [num_groups] at least one positive and one negative
    kl: Array  # scalar KL(pi_old || pi_theta) estimate
    penalty: Array  # scalar (beta / 2) * max(kl - delta, 0)^2
    objective_sum: Array  # scalar sum of J_q over valid questions
    num_questions: Array  # scalar number of questions present (the denominator)


_DISCO_SCORES = ("logL", "Lratio")
_DISCO_VARIANTS = ("lse", "basic")
_DISCO_KLS = ("k1", "k3")


def disco_loss(logp: Array, old_logp: Array, mask: Array, rewards: Array, group_ids: Array,
               num_groups: int, *, valid: Optional[Array] = None, score: str = "logL",
               tau: Optional[float] = None, delta: float = 1e-4, beta: float = 1e3,
               variant: str = "lse", kl_estimator: str = "k1",
               log_ratio_clamp: float = 20.0) -> Tuple[Array, DiscoExtras]:
    """DisCO: discriminative objective with a squared-hinge KL constraint (batch-level).

    Li, Lin, Galanti, Tu, Yang, "DisCO: Reinforcing Large Reasoning Models with Discriminative
    Constrained Optimization", arXiv 2505.12366 (NeurIPS 2025); reference code: verl branch
    ``compute_policy_loss_disco`` and Optimization-AI/DisCO ``compute_policy_loss_disco_logL``.

    Rewards are binary: 1 positive, 0 negative (other values are ignored). A question (group)
    counts when it has at least one of each. Scores ``s(o) = mean_t log pi(o_t)`` (``"logL"``) or
    ``mean_t pi/pi_old`` (``"Lratio"``). Objective per question:

    * ``"lse"`` (DisCO): ``J_q = mean_{o+} s(o+) - tau * log sum_{o-} exp(s(o-) / tau)``;
    * ``"basic"`` (DisCO-b): ``mean_{o+} s(o+) - mean_{o-} s(o-)`` (form recalled in the spec, not
      checked against the paper).

    ``loss = -(1 / num_questions) sum_{valid q} J_q + (beta / 2) * max(KL - delta, 0)^2`` where
    ``num_questions`` counts every question present, valid or not (as the reference does), and
    ``KL`` is the token mean over the batch of ``old_logp - logp`` (k1) or of
    ``rho - 1 - log rho`` (k3, the upstream repository's ``low_var_kl`` default).

    Deviations from the reference code (same gradient, meaningful value): the reference
    optimises the gradient-only surrogates ``S / sg(S)`` for the log-sum-exp and
    ``sg(max(beta (KL - delta), 0)) * KL`` for the penalty; here the loss value is the true
    objective and penalty, whose gradients are identical. The reference reshapes to equal-size
    groups; here groups are segments (ragged, any order). With no valid question the loss is
    the penalty alone (the reference's dummy zero), with no NaN in the gradient.

    Args:
        logp, old_logp: float ``[B, T]``.
        mask: ``[B, T]`` response mask.
        rewards: ``[B]`` binary rewards (float or bool).
        group_ids: int ``[B]`` question of each response.
        num_groups: static number of questions.
        valid: optional bool ``[B]``; invalid rows are neither positive nor negative and do not
            count a question as present.
        score: ``"logL"`` or ``"Lratio"``.
        tau: temperature; default 10 for ``logL`` and 1 for ``Lratio`` (paper defaults).
        delta: KL budget (1e-4); beta: penalty weight (1e3).
        variant: ``"lse"`` or ``"basic"``.
        kl_estimator: ``"k1"`` or ``"k3"``.
        log_ratio_clamp: clamp of ``logp - old_logp`` inside the ratio score and k3.

    Returns:
        ``(loss, DiscoExtras)``.
    """
    _checks.integer("num_groups", num_groups)
    _checks.choice("score", score, _DISCO_SCORES)
    _checks.choice("variant", variant, _DISCO_VARIANTS)
    _checks.choice("kl_estimator", kl_estimator, _DISCO_KLS)
    if tau is None:
        tau = 10.0 if score == "logL" else 1.0
    _checks.positive("tau", tau)
    _checks.nonnegative("delta", delta)
    _checks.nonnegative("beta", beta)
    _checks.positive("log_ratio_clamp", log_ratio_clamp, finite=False)
    chex.assert_rank([logp, old_logp, mask], 2)
    chex.assert_equal_shape([logp, old_logp, mask])
    chex.assert_type([logp, old_logp], float)
    named = [("rewards", rewards), ("group_ids", group_ids)]
    if valid is not None:
        named.append(("valid", valid))
    _rows(named, int_names=("group_ids",), bool_names=("valid",))
    chex.assert_equal_shape_prefix([logp, rewards], 1)
    valid = _valid_or_all(valid, group_ids)
    m = mask.astype(logp.dtype)

    tokens = jnp.sum(m, axis=1)
    log_ratio = jnp.clip(logp - old_logp, -log_ratio_clamp, log_ratio_clamp)
    per_token = logp if score == "logL" else jnp.exp(log_ratio)
    scores = _safe_div(jnp.sum(per_token * m, axis=1), tokens)
    rows_ok = valid & (tokens > 0)
    r = rewards.astype(logp.dtype)
    positive = rows_ok & (r == 1)
    negative = rows_ok & (r == 0)

    num_pos = jax.ops.segment_sum(positive.astype(logp.dtype), group_ids, num_groups)
    num_neg = jax.ops.segment_sum(negative.astype(logp.dtype), group_ids, num_groups)
    present = jax.ops.segment_sum(rows_ok.astype(jnp.int32), group_ids, num_groups) > 0
    valid_q = (num_pos > 0) & (num_neg > 0)
    pos_mean = _safe_div(jax.ops.segment_sum(jnp.where(positive, scores, 0), group_ids,
                                             num_groups), num_pos)
    if variant == "basic":
        neg_term = _safe_div(jax.ops.segment_sum(jnp.where(negative, scores, 0), group_ids,
                                                 num_groups), num_neg)
    else:
        z = scores / tau
        top = jax.ops.segment_max(jnp.where(negative, z, -jnp.inf), group_ids, num_groups)
        top = jax.lax.stop_gradient(jnp.where(num_neg > 0, top, 0))
        # Non-negative rows are replaced by the shift before exp, so no inf * 0 in the gradient.
        e = jnp.where(negative, jnp.exp(jnp.where(negative, z, top[group_ids]) - top[group_ids]),
                      0)
        total = jax.ops.segment_sum(e, group_ids, num_groups)
        neg_term = tau * (top + jnp.log(jnp.where(total > 0, total, 1)))
    objective = jnp.where(valid_q, pos_mean - neg_term, 0)

    if kl_estimator == "k1":
        kl_tok = old_logp - logp
    else:
        kl_tok = jnp.exp(log_ratio) - 1 - log_ratio
    kl = _safe_div(jnp.sum(kl_tok * m), jnp.sum(m))
    penalty = 0.5 * beta * jnp.square(jnp.maximum(kl - delta, 0))
    objective_sum = jnp.sum(objective)
    num_questions = jnp.sum(present).astype(logp.dtype)
    loss = -_safe_div(objective_sum, num_questions) + penalty
    return loss, DiscoExtras(scores, objective, valid_q, kl, penalty, objective_sum,
                             num_questions)


# ------------------------------------------------------------------------------------------------
# SALT (spec section 7).
# ------------------------------------------------------------------------------------------------


def salt_advantages(trajectory_advantages: Array, node_ids: Array, traj_ids: Array,
                    num_nodes: int, *, valid: Optional[Array] = None,
                    dedup_per_trajectory: bool = True) -> Array:
    """SALT step advantages: a node's advantage is the mean over the trajectories through it.

    Li et al., "Step-level Advantage Assignment for Long-horizon Agents via Trajectory Graph",
    arXiv 2510.20022. Only the abstract could be checked ("builds a graph from the trajectories
    of the same prompt ... quantifies the quality of each step from outcome rewards only"); the
    aggregation rule is the spec's reconstruction, built as the abstract describes: steps shared
    by good and bad trajectories get near-zero ("neutral") credit, steps unique to one
    trajectory keep its advantage. Batch-level.

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
    named = [("trajectory_advantages", trajectory_advantages), ("node_ids", node_ids),
             ("traj_ids", traj_ids)]
    if valid is not None:
        named.append(("valid", valid))
    _rows(named, float_names=("trajectory_advantages",), int_names=("node_ids", "traj_ids"),
          bool_names=("valid",))
    valid = _valid_or_all(valid, trajectory_advantages)
    weight = valid
    if dedup_per_trajectory:
        n = node_ids.shape[0]
        key_valid = jnp.where(valid, 0, 1).astype(jnp.int32)
        k_valid, k_node, k_traj, perm = jax.lax.sort(
            (key_valid, node_ids.astype(jnp.int32), traj_ids.astype(jnp.int32),
             jnp.arange(n, dtype=jnp.int32)), num_keys=3)
        first = jnp.concatenate([jnp.ones((1,), bool),
                                 (k_node[1:] != k_node[:-1]) | (k_traj[1:] != k_traj[:-1])
                                 | (k_valid[1:] != k_valid[:-1])])
        weight = valid & jnp.zeros((n,), bool).at[perm].set(first)
    node_mean = segment_mean(trajectory_advantages, node_ids, num_nodes, valid=weight)
    return jax.lax.stop_gradient(jnp.where(valid, node_mean[node_ids], 0))


# ------------------------------------------------------------------------------------------------
# SPA-RL (spec section 13), G-RA (section 14), Hi-Agent (section 10).
# ------------------------------------------------------------------------------------------------


def spa_step_rewards(progress: Array, executable: Array, is_last: Array, *, alpha: float = 1.0,
                     beta: float = 0.5) -> Array:
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
    _rows([("progress", progress), ("executable", executable), ("is_last", is_last)],
          float_names=("progress",), bool_names=("executable", "is_last"))
    grounded = (executable | is_last).astype(progress.dtype)
    return jax.lax.stop_gradient(alpha * progress + beta * grounded)


class SpaExtras(NamedTuple):
    predicted_returns: Array  # [num_traj] sum_t c_t
    residuals: Array  # [num_traj] predicted - target (0 for absent trajectories)
    num_trajectories: Array  # scalar denominator


def spa_progress_loss(progress: Array, traj_ids: Array, traj_returns: Array, num_traj: int, *,
                      valid: Optional[Array] = None) -> Tuple[Array, SpaExtras]:
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
    _rows(named, float_names=("progress",), int_names=("traj_ids",), bool_names=("valid",))
    chex.assert_shape(traj_returns, (num_traj,))
    chex.assert_type(traj_returns, float)
    valid = _valid_or_all(valid, progress)
    predicted = jax.ops.segment_sum(jnp.where(valid, progress, 0), traj_ids, num_traj)
    present = jax.ops.segment_sum(valid.astype(jnp.int32), traj_ids, num_traj) > 0
    residual = jnp.where(present, predicted - jax.lax.stop_gradient(traj_returns), 0)
    count = jnp.sum(present).astype(progress.dtype)
    loss = _safe_div(jnp.sum(jnp.square(residual)), count)
    return loss, SpaExtras(predicted, residual, count)


class GatedRewards(NamedTuple):
    step_rewards: Array  # [N] r_low * 1[r_high >= threshold]
    returns: Array  # [num_traj] r_high + sum of the gated step rewards


def gated_reward_accumulation(low_rewards: Array, high_rewards: Array, traj_ids: Array, *,
                              threshold: float, valid: Optional[Array] = None) -> GatedRewards:
    """G-RA: immediate rewards count only when the outcome reward reaches a threshold.

    Sun et al., "Stabilizing Long-term Multi-turn Reinforcement Learning with Gated Rewards",
    arXiv 2508.10548. The abstract (checked) says G-RA "accumulates immediate rewards only when
    high-level (long-term) rewards meet a predefined threshold"; the formula
    ``R = r_high + 1[r_high >= threshold] * sum_t r_low_t`` is built from that sentence (the
    paper body and its SWE reward levels could not be checked). Apply before any GRPO / PPO
    advantage. Batch-level over step rows.

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
    _rows(named, float_names=("low_rewards",), int_names=("traj_ids",), bool_names=("valid",))
    chex.assert_rank(high_rewards, 1)
    chex.assert_type(high_rewards, float)
    valid = _valid_or_all(valid, low_rewards)
    gate = high_rewards >= threshold
    gated = jnp.where(valid & gate[traj_ids], low_rewards, 0)
    returns = high_rewards + jax.ops.segment_sum(gated, traj_ids, high_rewards.shape[0])
    return GatedRewards(gated, returns)


def foresight_rewards(format_rewards: Array, execution_rewards: Array, *,
                      lam: float = 1.0) -> Array:
    """Hi-Agent high-level reward ``r_format(g) + lam * r_exec(s, a)`` (per-example).

    Wu et al., "Hi-Agent: Hierarchical Vision-Language Agents for Mobile Device Control",
    arXiv 2510.14388. The abstract (checked) describes a "foresight advantage function" that
    "leverages execution feedback from the low-level model to guide high-level optimization",
    critic-free and GRPO-based; the additive form and ``lam`` are the spec's reading, not taken
    from the paper's equations (not reachable). Judge each sampled subgoal by the outcome of
    executing it, then call :func:`grpo_advantages` with one group per state (the G subgoals);
    the low-level policy gets its own groups (the actions sampled for one subgoal).

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
