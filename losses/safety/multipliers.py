"""Lagrange multipliers and Lagrangian-penalised objectives.

Projected gradient ascent (plain or through an optax optimizer) and PID-Lagrangian updates as
functional `state -> state` maps on NamedTuple states (jittable, checkpointable pytrees), the
augmented Lagrangian penalty, and the pieces of a Lagrangian-penalised policy objective (PPO-Lag
advantage, sum/diff normalisation, SAC-Lag actor loss). The multiplier never receives a gradient
from a policy objective.
Batch-level: one update per epoch from a batch statistic (the mean episodic cost J_c).
"""

import enum
from typing import NamedTuple, Optional, Tuple, Union

import chex
import jax
import jax.numpy as jnp
import optax

from hrljax.losses import _checks as checks

Array = chex.Array
Numeric = Union[chex.Array, float]


class Normalisation(str, enum.Enum):
  """How a Lagrangian objective combines reward and cost terms (Stooke et al. 2020)."""

  SUM = "sum"  # (L_r + lam * L_c) / (1 + lam)
  DIFF = "diff"  # (1 - lam) * L_r + lam * L_c, lam in [0, 1]
  NONE = "none"  # L_r + lam * L_c


def _normalisation(value) -> Normalisation:
  try:
    return Normalisation(value)
  except ValueError:
    allowed = ", ".join(repr(m.value) for m in Normalisation)
    raise ValueError(f"normalisation: expected one of {allowed}, got {value!r}") from None


class LagrangeState(NamedTuple):
  lam: Array  # float scalar >= 0


def lagrange_init(lam_init: float = 0.001) -> LagrangeState:
  """Initial plain multiplier (OmniSafe ``lagrangian_multiplier_init`` default 0.001)."""
  checks.number("lam_init", lam_init, low=0.0, arrays=True)
  return LagrangeState(lam=jnp.asarray(lam_init, dtype=jnp.float32))


def lagrange_update(
  state: LagrangeState,
  jc: Array,
  *,
  cost_limit: Numeric,
  learning_rate: float,
  upper_bound: Optional[float] = None,
) -> LagrangeState:
  """Projected gradient ascent ``lam <- clip(lam + lr * (J_c - d), 0, upper_bound)``.

  Batch-level (one update per epoch from the mean undiscounted episodic cost J_c). This is
  OmniSafe's ``Lagrange`` module with plain SGD on the loss ``-lam (J_c - d)`` followed by its
  clamp; for Adam use `lagrange_multiplier_loss` with optax and clamp the result. Ray, Achiam,
  Amodei, "Benchmarking Safe Exploration in Deep RL" (2019), Sec. 4 (Lagrangian baselines);
  the multiplier rises iff J_c > d.

  Args:
    state: current `LagrangeState`.
    jc: float scalar, average episodic cost of the batch (global mean under data parallelism).
    cost_limit: d (Safety Gym convention 25), float or scalar array.
    learning_rate: a finite float > 0 (OmniSafe PPOLag uses Adam with 0.035).
    upper_bound: optional cap (OmniSafe ``lagrangian_upper_bound``); None means no cap.
  """
  jc = jnp.asarray(jc)
  chex.assert_rank([state.lam, jc], 0)
  chex.assert_type(jc, float)
  checks.number("cost_limit", cost_limit, arrays=True)
  checks.number("learning_rate", learning_rate, low=0.0, low_open=True, arrays=True)
  if upper_bound is not None:
    checks.number("upper_bound", upper_bound, low=0.0, arrays=True)
  lam = jnp.maximum(state.lam + learning_rate * (jc - cost_limit), 0.0)
  if upper_bound is not None:
    lam = jnp.minimum(lam, upper_bound)
  return LagrangeState(lam=lam.astype(state.lam.dtype))


def lagrange_multiplier_loss(lam: Array, jc: Array, *, cost_limit: Numeric) -> Array:
  """Multiplier loss ``-lam * sg(J_c - d)`` whose descent raises lam iff J_c > d.

  For an optax optimizer on ``lam`` (clamp to ``>= 0`` afterwards) or on an unconstrained
  parameter ``lam = softplus(p)`` (safety-starter-agents). Batch-level scalar.
  """
  chex.assert_rank([lam, jc], 0)
  chex.assert_type([lam, jc], float)
  checks.number("cost_limit", cost_limit, arrays=True)
  return -lam * jax.lax.stop_gradient(jc - cost_limit)


def lagrange_update_with_optimizer(
  state: LagrangeState,
  opt_state: optax.OptState,
  jc: Array,
  tx: optax.GradientTransformation,
  *,
  cost_limit: Numeric,
  upper_bound: Optional[float] = None,
) -> Tuple[LagrangeState, optax.OptState]:
  """OmniSafe's ``Lagrange`` module: one step of ``tx`` on `lagrange_multiplier_loss`, then the
  projection onto ``[0, upper_bound]``.

  With ``tx = optax.adam(0.035)`` this is OmniSafe PPOLag's multiplier (Ray, Achiam, Amodei,
  "Benchmarking Safe Exploration in Deep RL" (2019), Sec. 4, in OmniSafe's form); with plain SGD
  it is `lagrange_update` up to the cast. Batch-level: one update from the mean episodic cost.

  Args:
    state: current `LagrangeState`; opt_state: ``tx``'s state of ``lam``.
    jc: float scalar, average episodic cost of the batch.
    tx: the multiplier's optimizer.
    cost_limit: d; upper_bound: optional cap (None: no cap).

  Returns:
    ``(LagrangeState, opt_state)`` after the step.
  """
  jc = jnp.asarray(jc)
  chex.assert_rank([state.lam, jc], 0)
  chex.assert_type(jc, float)
  checks.number("cost_limit", cost_limit, arrays=True)
  if upper_bound is not None:
    checks.number("upper_bound", upper_bound, low=0.0, arrays=True)
  grad = jax.grad(lagrange_multiplier_loss)(state.lam, jc, cost_limit=cost_limit)
  updates, opt_state = tx.update(grad, opt_state)
  lam = jnp.maximum(state.lam + updates, 0.0)
  if upper_bound is not None:
    lam = jnp.minimum(lam, upper_bound)
  return LagrangeState(lam=lam), opt_state


class PIDLagrangeState(NamedTuple):
  integral: Array  # I_k >= 0, starts at lam_init
  p_ema: Array  # EMA of the error J_c - d
  d_ema: Array  # EMA of the cost J_c (not of the error)
  d_history: Array  # [delay] ring buffer of past d_ema values, zeros before they exist
  d_index: Array  # int32 scalar, slot holding d_ema from `delay` updates ago
  lam: Array  # current multiplier


def pid_lagrange_init(*, lam_init: float = 0.001, delay: int = 10) -> PIDLagrangeState:
  """Initial PID-Lagrangian state (OmniSafe CPPOPID defaults: lam_init 0.001, delay 10).

  ``lam`` starts at ``lam_init``: the controller output with P = D = 0 and I = lam_init.
  (OmniSafe reports 0.0 before its first update, but it updates the multiplier before the
  first policy step, so that value is never used.)
  """
  checks.number("lam_init", lam_init, low=0.0, arrays=True)
  checks.integer("delay", delay, low=1)
  zero = jnp.zeros((), jnp.float32)
  return PIDLagrangeState(
    integral=jnp.asarray(lam_init, jnp.float32),
    p_ema=zero,
    d_ema=zero,
    d_history=jnp.zeros((delay,), jnp.float32),
    d_index=jnp.zeros((), jnp.int32),
    lam=jnp.asarray(lam_init, jnp.float32),
  )


def pid_lagrange_update(
  state: PIDLagrangeState,
  jc: Array,
  *,
  cost_limit: Numeric,
  kp: float = 0.1,
  ki: float = 0.01,
  kd: float = 0.01,
  p_ema_alpha: float = 0.95,
  d_ema_alpha: float = 0.95,
  normalisation: str = "sum",
  penalty_max: float = 100.0,
) -> PIDLagrangeState:
  """PID-Lagrangian multiplier update (Stooke, Achiam, Abbeel, "Responsive Safety in RL by PID
  Lagrangian Methods", ICML 2020, arXiv:2007.03964; update rule as in the authors' rlpyt code).

  Batch-level, once per epoch, with ``e_k = J_c,k - d``:

  * ``I_k = [I_{k-1} + K_I e_k]_+`` (clamped to [0, 1] under diff normalisation);
  * ``P_k = a_p P_{k-1} + (1 - a_p) e_k``;
  * ``D~_k = a_d D~_{k-1} + (1 - a_d) J_c,k`` and ``D_k = [D~_k - D~_{k-delay}]_+`` with
    ``D~_j = 0`` for ``j <= 0``;
  * ``lam_k = [K_P P_k + I_k + K_D D_k]_+``, then ``min(lam, 1)`` under diff normalisation and
    ``min(lam, penalty_max)`` only when ``normalisation == "none"``.

  Matches OmniSafe ``common/pid_lagrange.py`` (@117d66f) step for step; its deque of length
  ``delay`` seeded with one 0 is the zero-initialised ring buffer here. Defaults are OmniSafe's
  CPPOPID values (rlpyt's original defaults are K_P 0, K_I 1, K_D 0, lam_init 1).

  Args:
    state: `PIDLagrangeState` from `pid_lagrange_init` (the delay is its buffer length).
      ``state.d_index`` outside [0, delay) (a state not made by these functions): the delayed
      cost is unknown, so the derivative term is 0, no slot of the buffer is written, and the
      next index is ``(d_index + 1) % delay``; an eager call with a concrete ``d_index`` raises a
      ValueError naming ``state.d_index`` instead.
    jc: float scalar, mean episodic cost of the batch.
    cost_limit: d, float or scalar array.
    kp, ki, kd: gains, finite floats >= 0.
    p_ema_alpha, d_ema_alpha: EMA factors in [0, 1).
    normalisation: "sum" (default), "diff" or "none"; see `lagrangian_combine`.
    penalty_max: cap applied only with ``normalisation="none"`` (OmniSafe parity).
  """
  jc = jnp.asarray(jc)
  chex.assert_rank([jc, state.integral, state.lam, state.d_index], 0)
  chex.assert_rank(state.d_history, 1)
  chex.assert_type(jc, float)
  chex.assert_type(state.d_index, int)
  checks.number("cost_limit", cost_limit, arrays=True)
  for name, gain in (("kp", kp), ("ki", ki), ("kd", kd)):
    checks.number(name, gain, low=0.0, arrays=True)
  for name, ema in (("p_ema_alpha", p_ema_alpha), ("d_ema_alpha", d_ema_alpha)):
    checks.number(name, ema, low=0.0, high=1.0, high_open=True, arrays=True)
  mode = _normalisation(normalisation)
  checks.number("penalty_max", penalty_max, low=0.0, arrays=True)

  dtype = state.integral.dtype
  jc = jc.astype(dtype)
  error = jc - cost_limit
  integral = jnp.maximum(state.integral + ki * error, 0.0)
  if mode is Normalisation.DIFF:
    integral = jnp.minimum(integral, 1.0)
  p_ema = p_ema_alpha * state.p_ema + (1.0 - p_ema_alpha) * error
  d_ema = d_ema_alpha * state.d_ema + (1.0 - d_ema_alpha) * jc
  delay = state.d_history.shape[0]
  known = checks.ids_in_range("state.d_index", state.d_index, delay)
  slot = jnp.clip(state.d_index, 0, delay - 1)
  delayed = state.d_history[slot]
  derivative = jnp.where(known, jnp.maximum(d_ema - delayed, 0.0), 0.0)
  lam = jnp.maximum(kp * p_ema + integral + kd * derivative, 0.0)
  if mode is Normalisation.DIFF:
    lam = jnp.minimum(lam, 1.0)
  elif mode is Normalisation.NONE:
    lam = jnp.minimum(lam, penalty_max)
  return PIDLagrangeState(
    integral=integral.astype(dtype),
    p_ema=p_ema.astype(dtype),
    d_ema=d_ema.astype(dtype),
    d_history=state.d_history.at[slot].set(jnp.where(known, d_ema.astype(dtype), delayed)),
    d_index=(state.d_index + 1) % delay,
    lam=lam.astype(dtype),
  )


class AugmentedLagrangeState(NamedTuple):
  lam: Array  # multiplier, in [0, lam_max]
  penalty_coeff: Array  # quadratic penalty coefficient c > 0


def augmented_lagrangian_penalty(
  state: AugmentedLagrangeState,
  g: Array,
  *,
  growth_factor: float,
  lam_max: float = 100.0,
  penalty_coeff_max: float = 1.0,
) -> Tuple[Array, AugmentedLagrangeState]:
  """Augmented-Lagrangian penalty for an inequality ``g <= 0`` and the next multiplier state.

  With ``cond = lam + c g``: ``psi = lam g + c g^2 / 2`` if ``cond > 0`` else
  ``psi = -lam^2 / (2 c)``; then ``lam <- clip(cond, 0, lam_max)`` and
  ``c <- min(c (1 + growth_factor), penalty_coeff_max)``. Nocedal & Wright, Numerical
  Optimization (2006), Eq. 17.65; defaults as the JAX reference ss2r
  (``algorithms/sac/penalizers.py``).

  Batch-level scalar: ``g`` is the constraint value (e.g. mean cost minus budget), which carries
  the policy gradient; add ``psi`` to the actor loss. The multiplier and the coefficient receive
  no gradient.

  Returns:
    ``(psi, new_state)``. A NaN ``g`` (or multiplier or coefficient) gives a NaN ``psi`` and a
    NaN multiplier: the branch test ``cond > 0`` alone would read NaN as False and return the
    finite ``-lam^2 / (2 c)``.
  """
  chex.assert_rank([g, state.lam, state.penalty_coeff], 0)
  chex.assert_type(g, float)
  checks.number("growth_factor", growth_factor, low=0.0, arrays=True)
  checks.number("lam_max", lam_max, low=0.0, arrays=True)
  checks.number("penalty_coeff_max", penalty_coeff_max, low=0.0, low_open=True, arrays=True)
  lam = jax.lax.stop_gradient(state.lam)
  coeff = jax.lax.stop_gradient(state.penalty_coeff)
  cond = lam + coeff * g
  psi = jnp.where(cond > 0, lam * g + 0.5 * coeff * jnp.square(g), -jnp.square(lam) / (2.0 * coeff))
  psi = jnp.where(jnp.isnan(cond), cond, psi)
  new_state = AugmentedLagrangeState(
    lam=jax.lax.stop_gradient(jnp.clip(cond, 0.0, lam_max)).astype(state.lam.dtype),
    penalty_coeff=jnp.minimum(coeff * (1.0 + growth_factor), penalty_coeff_max).astype(
      state.penalty_coeff.dtype
    ),
  )
  return psi, new_state


def per_step_cost_budget(cost_limit: float, gamma: float, horizon: int) -> float:
  """Per-step budget ``d (1 - gamma^T) / ((1 - gamma) T)`` for comparing a discounted Q_c.

  An episodic limit d spread evenly over T steps and discounted (a variant used by some SAC-Lag
  papers; OmniSafe and FSRL compare the episodic cost with d instead).
  Returns a Python float.
  """
  checks.number("cost_limit", cost_limit, low=0.0, arrays=True)
  checks.number("gamma", gamma, low=0.0, high=1.0, low_open=True, high_open=True, arrays=True)
  checks.integer("horizon", horizon, low=1)
  return cost_limit * (1.0 - gamma**horizon) / ((1.0 - gamma) * horizon)


def ppo_lag_advantage(adv_r: Array, adv_c: Array, lam: Array) -> Array:
  """PPO-Lag combined advantage ``(A_r - lam A_c) / (1 + lam)`` (elementwise, any shape).

  OmniSafe ``ppo_lag.py`` (Ray, Achiam, Amodei 2019). Feed the result to the clipped surrogate.
  ``lam`` is a scalar and receives no gradient. OmniSafe centres (does not scale) ``adv_c``
  before this; that is left to the caller.
  """
  chex.assert_equal_shape([adv_r, adv_c])
  chex.assert_type([adv_r, adv_c], float)
  chex.assert_rank(lam, 0)
  lam = jax.lax.stop_gradient(lam)
  return (adv_r - lam * adv_c) / (1.0 + lam)


def lagrangian_combine(
  loss_r: Array, loss_c: Array, lam: Array, *, normalisation: str = "sum"
) -> Array:
  """Combine a reward objective and a cost objective with multiplier ``lam`` (no gradient).

  ``"sum"``: ``(L_r + lam L_c) / (1 + lam)``; ``"diff"``: ``(1 - lam) L_r + lam L_c`` (lam in
  [0, 1]); ``"none"``: ``L_r + lam L_c``. Stooke et al., arXiv:2007.03964 (reward-scale
  invariance; forms as in rlpyt/OmniSafe ``sum_norm``/``diff_norm``); elementwise.
  """
  chex.assert_equal_shape([loss_r, loss_c])
  chex.assert_type([loss_r, loss_c], float)
  chex.assert_rank(lam, 0)
  mode = _normalisation(normalisation)
  lam = jax.lax.stop_gradient(lam)
  if mode is Normalisation.SUM:
    return (loss_r + lam * loss_c) / (1.0 + lam)
  if mode is Normalisation.DIFF:
    return (1.0 - lam) * loss_r + lam * loss_c
  return loss_r + lam * loss_c


def sac_lag_actor_loss(alpha: Array, log_prob: Array, q_r: Array, q_c: Array, lam: Array) -> Array:
  """SAC-Lag actor loss ``(alpha log pi - Q_r + lam Q_c) / (1 + lam)``, per example.

  OmniSafe ``off_policy/sac_lag.py``; average the vmapped value over the batch. ``q_r`` should be
  ``min(Q_r1, Q_r2)`` and ``q_c`` the pessimistic ``max`` of twin cost critics (FSRL uses their
  min, which is optimistic for costs). ``alpha`` and ``lam`` receive no gradient.
  """
  chex.assert_rank([alpha, log_prob, q_r, q_c, lam], 0)
  chex.assert_type([alpha, log_prob, q_r, q_c, lam], float)
  alpha = jax.lax.stop_gradient(alpha)
  lam = jax.lax.stop_gradient(lam)
  return (alpha * log_prob - q_r + lam * q_c) / (1.0 + lam)
