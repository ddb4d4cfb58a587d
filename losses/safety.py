"""Safety critics, Lagrange multipliers and action shields.

Four families, all pure functions of arrays (spec: ``shared/specs/safety_critics.md``):

* **Risk critics.** Recovery RL's twin-head Q_risk TD loss (also Bresa's reflex critic), SQRL's
  class-weighted soft-label cross-entropy and its Lagrangian pieces, and the Conservative Safety
  Critic (CSC) loss. Per-transition: every array is a scalar for one transition; the caller
  ``jax.vmap``s over the batch and averages. ``discount_t`` follows rlax: it is the cost discount
  times ``(1 - terminated_t)``. On *truncation* pass the full discount and a next-state value
  evaluated at the true next observation; on *termination* pass 0.
* **Lagrange multipliers.** Projected gradient ascent and PID-Lagrangian updates as functional
  ``state -> state`` maps on NamedTuple states (jittable, checkpointable pytrees), the augmented
  Lagrangian penalty, and the Lagrangian-penalised policy objective pieces (PPO-Lag advantage,
  sum/diff normalisation, SAC-Lag actor loss). The multiplier never receives a gradient from a
  policy objective.
* **Shields.** Half-space (control-barrier-function) projection in closed form, polytope
  projection for several constraints (exact active-set enumeration or Dykstra's algorithm with a
  static sweep count), the Dalal et al. safety layer, a priority-ordered hierarchical composition
  of shields each owning a subset of constraints (after Shielded Controller Units), and the
  Recovery-RL / Bresa reflex switch. Per-example: one action; the caller vmaps. Every shield
  returns ``(action, info)`` with ``info.intervened``.

Conventions for constraints: a constraint row ``(a_i, b_i)`` is satisfied when
``a_i . u + b_i >= 0``.
"""

import enum
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import chex
import jax
import jax.numpy as jnp

Array = chex.Array
Numeric = Union[chex.Array, float]

# Above this many rows the exact polytope projection (2**m active sets) is refused.
MAX_EXACT_CONSTRAINTS = 12
# A Gram sub-matrix whose correlation determinant is below this is treated as rank deficient.
_RANK_TOLERANCE = 1e-6


# ---------------------------------------------------------------------------------------------
# Argument validation.
# ---------------------------------------------------------------------------------------------


def _is_python_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_number(name: str, value, *, low: Optional[float] = None,
                  high: Optional[float] = None, low_open: bool = False,
                  high_open: bool = False, expected: str = "") -> None:
  """Raises ValueError if a Python-valued argument is not finite or out of range.

  Arrays (possibly traced, e.g. a schedule) are accepted without a value check.
  """
  if not _is_python_number(value):
    if hasattr(value, "shape"):
      return
    raise ValueError(f"{name}: expected {expected}, got {value!r}")
  bad = value != value or value in (float("inf"), float("-inf"))
  if low is not None:
    bad = bad or (value <= low if low_open else value < low)
  if high is not None:
    bad = bad or (value >= high if high_open else value > high)
  if bad:
    raise ValueError(f"{name}: expected {expected}, got {value!r}")


def _check_bool(name: str, value) -> None:
  if not isinstance(value, bool):
    raise ValueError(f"{name}: expected a Python bool, got {value!r}")


def _check_int(name: str, value, *, low: int, expected: str) -> None:
  if not isinstance(value, int) or isinstance(value, bool) or value < low:
    raise ValueError(f"{name}: expected {expected}, got {value!r}")


class Normalisation(str, enum.Enum):
  """How a Lagrangian objective combines reward and cost terms (Stooke et al. 2020)."""
  SUM = "sum"    # (L_r + lam * L_c) / (1 + lam)
  DIFF = "diff"  # (1 - lam) * L_r + lam * L_c, lam in [0, 1]
  NONE = "none"  # L_r + lam * L_c


def _normalisation(value) -> Normalisation:
  try:
    return Normalisation(value)
  except ValueError:
    allowed = ", ".join(repr(m.value) for m in Normalisation)
    raise ValueError(f"normalisation: expected one of {allowed}, got {value!r}") from None


# ---------------------------------------------------------------------------------------------
# Recovery RL / Bresa: twin-head Q_risk.
# ---------------------------------------------------------------------------------------------


class QRiskExtras(NamedTuple):
  target: Array       # y, the (stopped) TD target
  td_error_1: Array   # y - q1_tm1
  td_error_2: Array   # y - q2_tm1
  risk_tm1: Array     # max(q1_tm1, q2_tm1), the pessimistic risk estimate


def risk_value(q1: Array, q2: Array) -> Array:
  """Pessimistic risk of a twin safety critic, ``max(q1, q2)`` (elementwise).

  Recovery RL (Thananjeyan et al., "Recovery RL: Safe Reinforcement Learning with Learned
  Recovery Zones", arXiv:2010.15920) uses the larger of the two heads everywhere: in the TD
  target, for the switching threshold and as the model-free recovery policy's loss, so risk is
  over- rather than under-estimated.

  Args:
    q1, q2: float arrays of equal shape.
  """
  chex.assert_equal_shape([q1, q2])
  chex.assert_type([q1, q2], float)
  return jnp.maximum(q1, q2)


def qrisk_td_target(c_t: Array, discount_t: Array, q1_t: Array, q2_t: Array, *,
                    terminal_on_violation: bool = True,
                    stop_target_gradients: bool = True) -> Array:
  """Recovery-RL safety-critic target ``y = c_t + discount_t * max(q1_t, q2_t)``.

  Per-transition (all arguments are scalars; vmap for a batch). Q_risk estimates the discounted
  probability of a future constraint violation, E[sum_k gamma_risk^k c_{t+k}] with episodes that
  end at the first violation (Thananjeyan et al., arXiv:2010.15920, Sec. IV; the verified
  reference ``recovery_rl/qrisk.py`` computes ``c + mask * gamma_risk * max(Q1', Q2')``).

  Args:
    c_t: float scalar, constraint cost of the transition (1.0 on violation, else 0.0).
    discount_t: float scalar, ``gamma_risk * (1 - terminated_t)``. Truncation is not
      termination: on a time-limit cut pass ``gamma_risk`` with ``q*_t`` evaluated at the true
      next state, so the target still bootstraps.
    q1_t, q2_t: float scalars, target-network heads at ``(s_t, a_t)`` with ``a_t`` drawn from the
      task policy (as the reference) or the executed next action (SARSA, as for Bresa's
      control-rate stream).
    terminal_on_violation: if True (default) a violation (``c_t > 0``) never bootstraps, whatever
      ``discount_t`` says. This makes "c = 1 implies target 1" hold also for data from
      environments that continue after a violation; Recovery RL's data satisfies it by
      construction (``mask = not constraint``). With False, ``c = 1, discount > 0`` gives a
      target above 1 (discounted expected cost, not a probability).
    stop_target_gradients: if True, no gradient flows into any argument.

  Returns:
    The float scalar target.
  """
  chex.assert_rank([c_t, discount_t, q1_t, q2_t], 0)
  chex.assert_type([c_t, discount_t, q1_t, q2_t], float)
  _check_bool("terminal_on_violation", terminal_on_violation)
  _check_bool("stop_target_gradients", stop_target_gradients)
  if terminal_on_violation:
    discount_t = jnp.where(c_t > 0, jnp.zeros_like(discount_t), discount_t)
  target = c_t + discount_t * jnp.maximum(q1_t, q2_t)
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def qrisk_loss(q1_tm1: Array, q2_tm1: Array, c_t: Array, discount_t: Array, q1_t: Array,
               q2_t: Array, *, terminal_on_violation: bool = True,
               stop_target_gradients: bool = True) -> Tuple[Array, QRiskExtras]:
  """Recovery-RL / Bresa twin-head safety-critic loss ``(q1 - y)^2 + (q2 - y)^2``.

  Per-transition; ``jnp.mean`` of the vmapped loss equals the reference's
  ``MSE(Q1, y) + MSE(Q2, y)`` (Thananjeyan et al., arXiv:2010.15920, Sec. IV; reference
  ``recovery_rl/qrisk.py``). Bresa (Zhang, Solak, Ajoudani, arXiv:2503.21989) trains the same
  critic on control-rate transitions; pass the per-control-step discount there.

  Args:
    q1_tm1, q2_tm1: float scalars, online heads at ``(s_{t-1}, a_{t-1})`` (the executed action).
    c_t, discount_t, q1_t, q2_t: as in `qrisk_td_target`.
    terminal_on_violation, stop_target_gradients: as in `qrisk_td_target`.

  Returns:
    ``(loss, QRiskExtras)``; loss is a float scalar.

  Deviations: none from the reference loss. The reference's violation-implies-terminal
  invariant comes from its data; here it is the explicit ``terminal_on_violation`` flag.
  """
  chex.assert_rank([q1_tm1, q2_tm1], 0)
  chex.assert_type([q1_tm1, q2_tm1], float)
  target = qrisk_td_target(c_t, discount_t, q1_t, q2_t,
                           terminal_on_violation=terminal_on_violation,
                           stop_target_gradients=stop_target_gradients)
  td_error_1 = target - q1_tm1
  td_error_2 = target - q2_tm1
  loss = jnp.square(td_error_1) + jnp.square(td_error_2)
  return loss, QRiskExtras(target=target, td_error_1=td_error_1, td_error_2=td_error_2,
                           risk_tm1=jnp.maximum(q1_tm1, q2_tm1))


def reflex_select(risk: Array, a_task: Array, a_recovery: Array, *,
                  threshold: Numeric) -> Tuple[Array, Array]:
  """Recovery-RL / Bresa switch: execute ``a_recovery`` iff ``risk > threshold`` (strict).

  Per-example. Recovery RL (arXiv:2010.15920, Sec. IV; reference ``get_action`` with
  ``recovery_thresh``) and Bresa's reflex (arXiv:2503.21989, project-page flowchart) replace
  the task action rather than project it. ``risk == threshold`` does not trigger; a NaN risk
  does (fail safe: a critic that has diverged must not let the task action through).

  Args:
    risk: float scalar, ``max(Q1, Q2)(s, a_task)``.
    a_task, a_recovery: actions of equal shape and dtype.
    threshold: eps_risk (Recovery RL default 0.1), a float in [0, 1] or a scalar array.

  Returns:
    ``(a_exec, intervened)`` with ``intervened`` a bool scalar.
  """
  chex.assert_rank(risk, 0)
  chex.assert_type(risk, float)
  chex.assert_equal_shape([a_task, a_recovery])
  chex.assert_trees_all_equal_dtypes(a_task, a_recovery)
  _check_number("threshold", threshold, expected="a finite float")
  intervened = ~(risk <= threshold)  # True for NaN risk
  return jnp.where(intervened, a_recovery, a_task), intervened


# ---------------------------------------------------------------------------------------------
# SQRL.
# ---------------------------------------------------------------------------------------------


class SQRLExtras(NamedTuple):
  target: Array         # y, soft label in [0, 1]
  weight: Array         # class weight of the transition
  cross_entropy: Array  # unweighted BCE(y, sigmoid(logit_tm1))
  p_fail_tm1: Array     # sigmoid(logit_tm1)


def sqrl_target(fail_t: Array, discount_t: Array, logit_t: Array, *,
                stop_target_gradients: bool = True) -> Array:
  """SQRL safety-critic soft label ``y = f_t + (1 - f_t) * discount_t * sigmoid(logit_t)``.

  Per-transition. Srinivasan, Eysenbach, Ha, Tan, Finn, "Learning to be Safe: Deep RL with a
  Safety Critic", arXiv:2010.14603, Sec. 4 (Q_safe Bellman target); verified against the
  reference ``algos/safe_sac_agent.py::safety_critic_loss`` (krishpop/sqrl @ 6743b3c).

  Args:
    fail_t: float scalar, 1.0 if the transition ends in failure, else 0.0.
    discount_t: float scalar, ``gamma_safe * (1 - terminated_t)``; truncation keeps
      ``gamma_safe`` (bootstrap from the true next state).
    logit_t: float scalar, target critic logit at ``(s_t, a_t)`` with ``a_t`` from the
      safety-filtered policy (as the reference).
    stop_target_gradients: if True, no gradient flows into the target.
  """
  chex.assert_rank([fail_t, discount_t, logit_t], 0)
  chex.assert_type([fail_t, discount_t, logit_t], float)
  _check_bool("stop_target_gradients", stop_target_gradients)
  target = fail_t + (1.0 - fail_t) * discount_t * jax.nn.sigmoid(logit_t)
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def sqrl_loss(logit_tm1: Array, fail_t: Array, discount_t: Array, logit_t: Array, *,
              fail_weight: float = 0.75,
              stop_target_gradients: bool = True) -> Tuple[Array, SQRLExtras]:
  """SQRL class-weighted soft-label binary cross-entropy, per transition.

  ``loss = w * BCE(y, sigmoid(logit_tm1))`` with ``w = fail_weight / 0.5`` on failures and
  ``(1 - fail_weight) / 0.5`` otherwise, ``BCE(y, p) = -[y log p + (1 - y) log(1 - p)]``
  computed from the logit (``softplus(x) - y x``). Srinivasan et al., arXiv:2010.14603, Sec. 4;
  defaults from the reference ``configs/sqrl.gin`` (FAIL_WEIGHT 0.75, SAFETY_GAMMA 0.7).

  Args:
    logit_tm1: float scalar, online critic logit at ``(s_{t-1}, a_{t-1})``.
    fail_t, discount_t, logit_t: as in `sqrl_target`.
    fail_weight: float in [0, 1]; 0.5 gives unit weights (the reference's ``fail_weight=None``).
    stop_target_gradients: as in `sqrl_target`.

  Returns:
    ``(loss, SQRLExtras)``; loss is a float scalar. Average the vmapped loss over the batch.

  Deviations from the reference code: the BCE is computed from logits, without Keras's
  probability clipping to [1e-7, 1 - 1e-7]. The reference applies the class weights after
  ``tf.keras.losses.binary_crossentropy`` has already averaged over its last (here: batch) axis,
  so its loss is ``mean(w) * mean(BCE)`` rather than the per-transition weighting the paper and
  the spec describe; this function weights per transition (``extras`` has both factors if the
  reference's form is wanted).
  """
  chex.assert_rank(logit_tm1, 0)
  chex.assert_type(logit_tm1, float)
  _check_number("fail_weight", fail_weight, low=0.0, high=1.0,
                expected="a finite float in [0, 1]")
  target = sqrl_target(fail_t, discount_t, logit_t,
                       stop_target_gradients=stop_target_gradients)
  cross_entropy = jax.nn.softplus(logit_tm1) - target * logit_tm1
  weight = jnp.where(fail_t > 0, fail_weight / 0.5, (1.0 - fail_weight) / 0.5)
  weight = weight.astype(cross_entropy.dtype)
  return weight * cross_entropy, SQRLExtras(target=target, weight=weight,
                                             cross_entropy=cross_entropy,
                                             p_fail_tm1=jax.nn.sigmoid(logit_tm1))


def sqrl_actor_penalty(log_lambda: Array, logit: Array, *, target_safety: float = 0.1,
                       stop_penalty_gradient: bool = False) -> Array:
  """SQRL actor penalty ``lambda * (sigmoid(logit) - eps)``, ``lambda = exp(log_lambda)``.

  Per-example; add it to the SAC actor loss with ``logit = Q_safe(s, a)`` at a reparameterised
  ``a ~ pi``. Srinivasan et al., arXiv:2010.14603, Sec. 4 (Lagrangian fine-tuning objective).
  The multiplier gets no gradient here (it is trained by `sqrl_lambda_loss`).

  Args:
    log_lambda: float scalar, the multiplier variable (reference ``initial_log_lambda = 0``).
    logit: float scalar, safety-critic logit at the policy action.
    target_safety: eps (reference TARGET_SAFETY 0.1), a float in (0, 1).
    stop_penalty_gradient: False (default) is the paper's form: the actor is pushed towards
      lower failure probability. True reproduces the reference code at HEAD, which wraps the
      whole penalty in a stop-gradient so it sends no gradient to the actor.
  """
  chex.assert_rank([log_lambda, logit], 0)
  chex.assert_type([log_lambda, logit], float)
  _check_number("target_safety", target_safety, low=0.0, high=1.0, low_open=True,
                high_open=True, expected="a finite float in (0, 1)")
  _check_bool("stop_penalty_gradient", stop_penalty_gradient)
  penalty = jnp.exp(jax.lax.stop_gradient(log_lambda)) * (jax.nn.sigmoid(logit) - target_safety)
  return jax.lax.stop_gradient(penalty) if stop_penalty_gradient else penalty


def sqrl_lambda_loss(log_lambda: Array, logit: Array, *, target_safety: float = 0.1) -> Array:
  """SQRL multiplier loss ``log_lambda * sg(log eps - log sigmoid(logit))``, per example.

  Minimising it raises ``log_lambda`` when the failure probability exceeds eps and lowers it
  otherwise (reference ``lambda_loss`` with ``log_lambda=True``; Srinivasan et al.,
  arXiv:2010.14603, Sec. 4). Only ``log_lambda`` receives a gradient.
  """
  chex.assert_rank([log_lambda, logit], 0)
  chex.assert_type([log_lambda, logit], float)
  _check_number("target_safety", target_safety, low=0.0, high=1.0, low_open=True,
                high_open=True, expected="a finite float in (0, 1)")
  log_p_fail = jax.nn.log_sigmoid(logit)
  return log_lambda * jax.lax.stop_gradient(jnp.log(target_safety) - log_p_fail)


# ---------------------------------------------------------------------------------------------
# Conservative Safety Critics.
# ---------------------------------------------------------------------------------------------


class CSCExtras(NamedTuple):
  target: Array            # c_t + discount_t * q_t (stopped)
  td_error: Array          # target - q_tm1
  conservative_gap: Array  # q_tm1 - mean(q_pi_tm1); the loss pushes it down


def csc_loss(q_tm1: Array, c_t: Array, discount_t: Array, q_t: Array, q_pi_tm1: Array, *,
             alpha: float, bellman_coeff: float = 0.5,
             stop_target_gradients: bool = True) -> Tuple[Array, CSCExtras]:
  """Conservative Safety Critic loss, per transition.

  ``loss = alpha * (q_tm1 - mean_n q_pi_tm1[n]) + bellman_coeff * (q_tm1 - y)^2`` with
  ``y = c_t + discount_t * q_t``. Bharadhwaj, Kumar, Rhinehart, Levine, Shkurti, Garg,
  "Conservative Safety Critics for Exploration", ICLR 2021, arXiv:2010.14497, Sec. 3 (the
  CQL-style Q_C update, sign flipped for costs). Its batch mean is the paper's
  ``alpha (E_D[Q_C] - E_{s~D, a~pi}[Q_C]) + 1/2 E_D[(Q_C - B Q_C)^2]``: Q_C is pushed *up* on
  policy actions and *down* on data actions, so the risk of what the policy is about to do is
  over-estimated.

  Args:
    q_tm1: float scalar, Q_C at the data pair ``(s_{t-1}, a_{t-1})``.
    c_t: float scalar, the transition's cost.
    discount_t: float scalar, ``gamma_c * (1 - terminated_t)``; truncation keeps ``gamma_c``.
    q_t: float scalar, target Q_C at ``(s_t, a'~pi)``.
    q_pi_tm1: float ``[N]``, online Q_C at ``(s_{t-1}, a_n ~ pi)``; these get a gradient.
    alpha: conservatism weight, a float >= 0 (required; the third-party "gentle" implementation
      uses 5 with N = 100; the paper's value was not checked).
    bellman_coeff: weight of the squared TD error; 0.5 as in the paper's objective (recalled,
      see the spec), 1.0 for parity with "gentle" (``mean((qc - backup)^2)``).
    stop_target_gradients: if True, no gradient flows into the TD target.

  Returns:
    ``(loss, CSCExtras)``.

  Avoided reference bug: the OmniSafe-based CSC fork uses reward-side CQL (logsumexp over
  sampled actions minus data), which pushes sampled-action costs *down*; this function uses the
  sign of the paper and of "gentle".
  """
  chex.assert_rank([q_tm1, c_t, discount_t, q_t, q_pi_tm1], [0, 0, 0, 0, 1])
  chex.assert_type([q_tm1, c_t, discount_t, q_t, q_pi_tm1], float)
  _check_number("alpha", alpha, low=0.0, expected="a finite float >= 0")
  _check_number("bellman_coeff", bellman_coeff, low=0.0, low_open=True,
                expected="a finite float > 0")
  _check_bool("stop_target_gradients", stop_target_gradients)
  target = c_t + discount_t * q_t
  if stop_target_gradients:
    target = jax.lax.stop_gradient(target)
  td_error = target - q_tm1
  gap = q_tm1 - jnp.mean(q_pi_tm1)
  loss = alpha * gap + bellman_coeff * jnp.square(td_error)
  return loss, CSCExtras(target=target, td_error=td_error, conservative_gap=gap)


# ---------------------------------------------------------------------------------------------
# Lagrange multipliers.
# ---------------------------------------------------------------------------------------------


class LagrangeState(NamedTuple):
  lam: Array  # float scalar >= 0


def lagrange_init(lam_init: float = 0.001) -> LagrangeState:
  """Initial plain multiplier (OmniSafe ``lagrangian_multiplier_init`` default 0.001)."""
  _check_number("lam_init", lam_init, low=0.0, expected="a finite float >= 0")
  return LagrangeState(lam=jnp.asarray(lam_init, dtype=jnp.float32))


def lagrange_update(state: LagrangeState, jc: Array, *, cost_limit: Numeric,
                    learning_rate: float, upper_bound: Optional[float] = None) -> LagrangeState:
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
  _check_number("cost_limit", cost_limit, expected="a finite float")
  _check_number("learning_rate", learning_rate, low=0.0, low_open=True,
                expected="a finite float > 0")
  if upper_bound is not None:
    _check_number("upper_bound", upper_bound, low=0.0, expected="a finite float >= 0 or None")
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
  _check_number("cost_limit", cost_limit, expected="a finite float")
  return -lam * jax.lax.stop_gradient(jc - cost_limit)


class PIDLagrangeState(NamedTuple):
  integral: Array   # I_k >= 0, starts at lam_init
  p_ema: Array      # EMA of the error J_c - d
  d_ema: Array      # EMA of the cost J_c (not of the error)
  d_history: Array  # [delay] ring buffer of past d_ema values, zeros before they exist
  d_index: Array    # int32 scalar, slot holding d_ema from `delay` updates ago
  lam: Array        # current multiplier


def pid_lagrange_init(*, lam_init: float = 0.001, delay: int = 10) -> PIDLagrangeState:
  """Initial PID-Lagrangian state (OmniSafe CPPOPID defaults: lam_init 0.001, delay 10).

  ``lam`` starts at ``lam_init``: the controller output with P = D = 0 and I = lam_init.
  (OmniSafe reports 0.0 before its first update, but it updates the multiplier before the
  first policy step, so that value is never used.)
  """
  _check_number("lam_init", lam_init, low=0.0, expected="a finite float >= 0")
  _check_int("delay", delay, low=1, expected="an int >= 1")
  zero = jnp.zeros((), jnp.float32)
  return PIDLagrangeState(integral=jnp.asarray(lam_init, jnp.float32), p_ema=zero, d_ema=zero,
                          d_history=jnp.zeros((delay,), jnp.float32),
                          d_index=jnp.zeros((), jnp.int32),
                          lam=jnp.asarray(lam_init, jnp.float32))


def pid_lagrange_update(state: PIDLagrangeState, jc: Array, *, cost_limit: Numeric,
                        kp: float = 0.1, ki: float = 0.01, kd: float = 0.01,
                        p_ema_alpha: float = 0.95, d_ema_alpha: float = 0.95,
                        normalisation: str = "sum",
                        penalty_max: float = 100.0) -> PIDLagrangeState:
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
  _check_number("cost_limit", cost_limit, expected="a finite float")
  for name, gain in (("kp", kp), ("ki", ki), ("kd", kd)):
    _check_number(name, gain, low=0.0, expected="a finite float >= 0")
  for name, ema in (("p_ema_alpha", p_ema_alpha), ("d_ema_alpha", d_ema_alpha)):
    _check_number(name, ema, low=0.0, high=1.0, high_open=True,
                  expected="a finite float in [0, 1)")
  mode = _normalisation(normalisation)
  _check_number("penalty_max", penalty_max, low=0.0, expected="a finite float >= 0")

  dtype = state.integral.dtype
  jc = jc.astype(dtype)
  error = jc - cost_limit
  integral = jnp.maximum(state.integral + ki * error, 0.0)
  if mode is Normalisation.DIFF:
    integral = jnp.minimum(integral, 1.0)
  p_ema = p_ema_alpha * state.p_ema + (1.0 - p_ema_alpha) * error
  d_ema = d_ema_alpha * state.d_ema + (1.0 - d_ema_alpha) * jc
  delayed = state.d_history[state.d_index]
  derivative = jnp.maximum(d_ema - delayed, 0.0)
  lam = jnp.maximum(kp * p_ema + integral + kd * derivative, 0.0)
  if mode is Normalisation.DIFF:
    lam = jnp.minimum(lam, 1.0)
  elif mode is Normalisation.NONE:
    lam = jnp.minimum(lam, penalty_max)
  delay = state.d_history.shape[0]
  return PIDLagrangeState(
      integral=integral.astype(dtype), p_ema=p_ema.astype(dtype), d_ema=d_ema.astype(dtype),
      d_history=state.d_history.at[state.d_index].set(d_ema.astype(dtype)),
      d_index=(state.d_index + 1) % delay, lam=lam.astype(dtype))


class AugmentedLagrangeState(NamedTuple):
  lam: Array            # multiplier, in [0, lam_max]
  penalty_coeff: Array  # quadratic penalty coefficient c > 0


def augmented_lagrangian_penalty(
    state: AugmentedLagrangeState, g: Array, *, growth_factor: float,
    lam_max: float = 100.0, penalty_coeff_max: float = 1.0
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
  _check_number("growth_factor", growth_factor, low=0.0, expected="a finite float >= 0")
  _check_number("lam_max", lam_max, low=0.0, expected="a finite float >= 0")
  _check_number("penalty_coeff_max", penalty_coeff_max, low=0.0, low_open=True,
                expected="a finite float > 0")
  lam = jax.lax.stop_gradient(state.lam)
  coeff = jax.lax.stop_gradient(state.penalty_coeff)
  cond = lam + coeff * g
  psi = jnp.where(cond > 0, lam * g + 0.5 * coeff * jnp.square(g),
                  -jnp.square(lam) / (2.0 * coeff))
  psi = jnp.where(jnp.isnan(cond), cond, psi)
  new_state = AugmentedLagrangeState(
      lam=jax.lax.stop_gradient(jnp.clip(cond, 0.0, lam_max)).astype(state.lam.dtype),
      penalty_coeff=jnp.minimum(coeff * (1.0 + growth_factor),
                                penalty_coeff_max).astype(state.penalty_coeff.dtype))
  return psi, new_state


def per_step_cost_budget(cost_limit: float, gamma: float, horizon: int) -> float:
  """Per-step budget ``d (1 - gamma^T) / ((1 - gamma) T)`` for comparing a discounted Q_c.

  An episodic limit d spread evenly over T steps and discounted (spec Sec. 5.3 variant, used by
  some SAC-Lag papers; OmniSafe and FSRL compare the episodic cost with d instead).
  Returns a Python float.
  """
  _check_number("cost_limit", cost_limit, low=0.0, expected="a finite float >= 0")
  _check_number("gamma", gamma, low=0.0, high=1.0, low_open=True, high_open=True,
                expected="a finite float in (0, 1)")
  _check_int("horizon", horizon, low=1, expected="an int >= 1")
  return cost_limit * (1.0 - gamma ** horizon) / ((1.0 - gamma) * horizon)


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


def lagrangian_combine(loss_r: Array, loss_c: Array, lam: Array, *,
                       normalisation: str = "sum") -> Array:
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


def sac_lag_actor_loss(alpha: Array, log_prob: Array, q_r: Array, q_c: Array,
                       lam: Array) -> Array:
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


# ---------------------------------------------------------------------------------------------
# Shields.
# ---------------------------------------------------------------------------------------------


class ShieldInfo(NamedTuple):
  intervened: Array  # bool scalar: the shield changed the proposed action
  correction: Array  # [d] safe_action - proposed_action
  slack: Array       # [m] a_i . safe_action + b_i; >= 0 (up to tolerance) when satisfied


class HierarchicalShieldInfo(NamedTuple):
  intervened: Array    # bool [num_units], per unit in application order
  unit_actions: Array  # [num_units, d] action after each unit
  correction: Array    # [d] final action - proposed action
  slack: Array         # [m] slack of every constraint at the final action


class ProjectionMethod(str, enum.Enum):
  EXACT = "exact"      # active-set enumeration: exact Euclidean projection, m <= 12
  DYKSTRA = "dykstra"  # Dykstra's alternating projections, fixed number of sweeps


def _projection_method(value) -> ProjectionMethod:
  try:
    return ProjectionMethod(value)
  except ValueError:
    allowed = ", ".join(repr(m.value) for m in ProjectionMethod)
    raise ValueError(f"method: expected one of {allowed}, got {value!r}") from None


def _halfspace_step(u: Array, a: Array, b: Array) -> Array:
  """``u + [-(a.u + b)]_+ / |a|^2 a``; a zero row moves nothing (and has zero gradient)."""
  norm_sq = jnp.sum(jnp.square(a))
  nonzero = norm_sq > 0
  safe_norm_sq = jnp.where(nonzero, norm_sq, 1.0)
  step = jnp.where(nonzero, jnp.maximum(-(jnp.dot(a, u) + b), 0.0) / safe_norm_sq, 0.0)
  return u + step * a


def halfspace_project(u: Array, a: Array, b: Array) -> Tuple[Array, ShieldInfo]:
  """Closed-form CBF filter for one affine constraint ``a.u + b >= 0``.

  ``u* = u + [-(a.u + b)]_+ / |a|^2 * a``, the Euclidean projection onto the half-space, i.e.
  the solution of ``min |u - u_RL|^2 s.t. L_f h + L_g h u + kappa(h) >= 0`` with
  ``a = L_g h^T`` and ``b = L_f h + kappa(h)`` (Ames et al., "Control Barrier Functions: Theory
  and Applications", ECC 2019, arXiv:1903.11199, the single-constraint CBF-QP). Per-example;
  differentiable almost everywhere. Safe actions are returned unchanged. A zero ``a`` (the
  constraint does not depend on the action) leaves ``u`` unchanged; check ``info.slack``.

  Args:
    u: float ``[d]`` proposed action.
    a: float ``[d]`` constraint normal.
    b: float scalar offset.

  Returns:
    ``(safe_action, ShieldInfo)`` with ``slack`` of shape ``[1]``.
  """
  chex.assert_rank([u, a, b], [1, 1, 0])
  chex.assert_equal_shape([u, a])
  chex.assert_type([u, a, b], float)
  # Select rather than add a zero step, so a safe action comes back bit for bit.
  violated = jnp.dot(a, u) + b < 0
  x = jnp.where(violated, _halfspace_step(u, a, b), u)
  slack = (jnp.dot(a, x) + b)[None]
  return x, ShieldInfo(intervened=jnp.any(x != u), correction=x - u, slack=slack)


def circle_cbf_constraint(x: Array, centre: Array, radius: Numeric, *, dt: float, gamma: float,
                          margin: Numeric = 0.0) -> Tuple[Array, Array]:
  """Linearised discrete-time CBF row ``(a, b)`` keeping a single integrator out of a disc.

  For ``x+ = x + dt u`` and ``h(x) = |x - o|^2 - (r + margin)^2``, the discrete CBF condition
  ``h(x+) >= (1 - gamma) h(x)`` linearised at ``x`` is ``a.u + b >= 0`` with
  ``a = 2 (x - o) dt`` and ``b = gamma h(x)``. Because h is convex the linearisation is
  conservative (the true ``h(x+)`` is at least its linear estimate). The margin adds robustness
  to process noise (spec Sec. 6.3). Per-example.

  Args:
    x, centre: float ``[d]`` position and disc centre.
    radius, margin: float scalars (or Python floats).
    dt: step length, a float > 0. gamma: CBF decay in (0, 1].
  """
  chex.assert_rank([x, centre], 1)
  chex.assert_equal_shape([x, centre])
  chex.assert_type([x, centre], float)
  _check_number("dt", dt, low=0.0, low_open=True, expected="a finite float > 0")
  _check_number("gamma", gamma, low=0.0, high=1.0, low_open=True,
                expected="a finite float in (0, 1]")
  offset = x - centre
  h = jnp.sum(jnp.square(offset)) - jnp.square(radius + margin)
  return 2.0 * dt * offset, gamma * h


def _row_tolerance(A: Array, b: Array, x: Array, tol: float) -> Array:
  """Per-row feasibility tolerance scaled with the magnitudes involved."""
  row_norm = jnp.sqrt(jnp.sum(jnp.square(A), axis=1))
  return tol * (1.0 + jnp.abs(b) + row_norm * jnp.sqrt(jnp.sum(jnp.square(x))))


def _exact_projection(u: Array, A: Array, b: Array, tol: float) -> Tuple[Array, Array]:
  """Exact projection onto ``{x : A x + b >= 0}`` by enumerating candidate active sets.

  For each subset S of rows with linearly independent normals, project ``u`` onto the affine
  set ``{A_S x + b_S = 0}``. The projection onto the polytope is one of these points (an
  optimal KKT multiplier can always be supported on independent active rows), and it is the
  feasible candidate closest to ``u``: every feasible point is at least that far. So no
  multiplier-sign test is needed. Returns ``(x, found_feasible)``; with an empty feasible set
  the candidate with the smallest worst violation is returned.
  """
  m = A.shape[0]
  masks = ((jnp.arange(2 ** m)[:, None] >> jnp.arange(m)[None, :]) & 1).astype(bool)
  gram = A @ A.T
  residual = A @ u + b

  def candidate(mask):
    pair = mask[:, None] & mask[None, :]
    g = jnp.where(pair, gram, 0.0) + jnp.diag(jnp.where(mask, 0.0, 1.0))
    # Rank test on the correlation matrix (scale free); rank-deficient subsets are skipped and
    # solved against the identity so that no NaN reaches the backward pass.
    diag = jnp.diagonal(g)
    positive = jnp.all(diag > 0)
    safe_diag = jnp.where(diag > 0, diag, 1.0)
    inv_sqrt = jax.lax.rsqrt(safe_diag)
    corr = g * inv_sqrt[:, None] * inv_sqrt[None, :]
    well_posed = jax.lax.stop_gradient(positive & (jnp.linalg.det(corr) > _RANK_TOLERANCE))
    g = jnp.where(well_posed, g, jnp.eye(m, dtype=g.dtype))
    mu = jnp.linalg.solve(g, jnp.where(mask, -residual, 0.0))
    x = u + A.T @ jnp.where(mask, mu, 0.0)
    return x, well_posed

  xs, well_posed = jax.vmap(candidate)(masks)
  slack = xs @ A.T + b[None, :]
  tolerance = jax.vmap(lambda x: _row_tolerance(A, b, x, tol))(xs)
  finite = jnp.all(jnp.isfinite(xs), axis=1)
  usable = jax.lax.stop_gradient(well_posed & finite)
  feasible = usable & jnp.all(slack >= -tolerance, axis=1)
  distance = jnp.sum(jnp.square(xs - u[None, :]), axis=1)
  worst = jnp.max(-slack, axis=1)
  any_feasible = jnp.any(feasible)
  score = jnp.where(any_feasible, jnp.where(feasible, distance, jnp.inf),
                    jnp.where(usable, worst, jnp.inf))
  best = jnp.argmin(jax.lax.stop_gradient(score))
  return xs[best], any_feasible


def _dykstra_projection(u: Array, A: Array, b: Array, num_sweeps: int) -> Array:
  """Dykstra's algorithm over the half-spaces, a static number of cyclic sweeps.

  Unlike plain cyclic projection, the per-constraint increments make the iterates converge to
  the Euclidean projection onto the intersection (Boyle & Dykstra 1986), not merely to some
  feasible point.
  """
  m, _ = A.shape

  def visit(x, row):
    a, offset, increment = row
    y = x + increment
    x_new = _halfspace_step(y, a, offset)
    return x_new, y - x_new

  def sweep(carry, _):
    x, increments = carry
    x, increments = jax.lax.scan(visit, x, (A, b, increments))
    return (x, increments), None

  (x, _), _ = jax.lax.scan(sweep, (u, jnp.zeros((m,) + u.shape, u.dtype)), None,
                           length=num_sweeps)
  return x


def polytope_project(u: Array, A: Array, b: Array, *, method: str = "exact",
                     num_sweeps: int = 50, lower: Optional[Array] = None,
                     upper: Optional[Array] = None,
                     feasibility_tol: float = 1e-5) -> Tuple[Array, ShieldInfo]:
  """Project an action onto ``{x : A x + b >= 0}`` (optionally within ``lower <= x <= upper``).

  The multi-constraint CBF-QP ``min |x - u|^2 s.t. A x + b >= 0`` (Ames et al.,
  arXiv:1903.11199). Per-example. Action bounds are added as constraint rows so the projection
  respects them (clipping after projecting can break the guarantee, spec Sec. 6.3). A proposed
  action that is already feasible (within tolerance) is returned unchanged.

  Args:
    u: float ``[d]`` proposed action.
    A: float ``[m, d]`` constraint normals; b: float ``[m]`` offsets.
    method: ``"exact"`` (default): enumerates the ``2^m`` candidate active sets (``m`` counting
      bound rows, at most 12) and returns the exact projection, differentiable almost
      everywhere; cost ``O(2^m m^3)``. ``"dykstra"``: ``num_sweeps`` sweeps of Dykstra's
      alternating projections, ``O(num_sweeps m d)``, converging to the projection but not
      exactly feasible after finitely many sweeps (check ``info.slack``).
    num_sweeps: static sweep count for Dykstra, an int >= 1.
    lower, upper: optional float ``[d]`` action bounds.
    feasibility_tol: relative tolerance of the feasibility tests, a float > 0.

  Returns:
    ``(safe_action, ShieldInfo)``; ``slack`` has one entry per row of ``A`` followed by the
    ``lower`` rows and then the ``upper`` rows when given. If the constraint set is empty the
    exact method returns the candidate with the smallest worst violation (negative slack; if
    that candidate is the proposal itself, ``intervened`` is False).
  """
  chex.assert_rank([u, A, b], [1, 2, 1])
  chex.assert_type([u, A, b], float)
  chex.assert_equal_shape_prefix([A, b], 1)
  chex.assert_equal_shape_suffix([A, u], 1)
  mode = _projection_method(method)
  _check_int("num_sweeps", num_sweeps, low=1, expected="an int >= 1")
  _check_number("feasibility_tol", feasibility_tol, low=0.0, low_open=True,
                expected="a finite float > 0")
  d = u.shape[0]
  eye = jnp.eye(d, dtype=u.dtype)
  if lower is not None:
    chex.assert_equal_shape([u, lower])
    A, b = jnp.concatenate([A, eye]), jnp.concatenate([b, -lower.astype(b.dtype)])
  if upper is not None:
    chex.assert_equal_shape([u, upper])
    A, b = jnp.concatenate([A, -eye]), jnp.concatenate([b, upper.astype(b.dtype)])
  m = A.shape[0]
  if mode is ProjectionMethod.EXACT and m > MAX_EXACT_CONSTRAINTS:
    raise ValueError(f"A: the exact method takes at most {MAX_EXACT_CONSTRAINTS} constraint "
                     f"rows including bounds, got {m}; use method='dykstra'")

  u_slack = A @ u + b
  u_feasible = jnp.all(u_slack >= -_row_tolerance(A, b, u, feasibility_tol))
  if mode is ProjectionMethod.EXACT:
    projected, _ = _exact_projection(u, A, b, feasibility_tol)
  else:
    projected = _dykstra_projection(u, A, b, num_sweeps)
  x = jnp.where(u_feasible, u, projected)
  return x, ShieldInfo(intervened=jnp.any(x != u), correction=x - u, slack=A @ x + b)


def dalal_safety_layer(a: Array, g: Array, c: Array, limit: Array) -> Tuple[Array, ShieldInfo]:
  """Dalal et al. safety layer: correct the action along the most violated linear constraint.

  With a learned linear cost model ``c_i(s') ~ c_i(s) + g_i(s).a`` and limits ``C_i``:
  ``lam_i = [(g_i.a + c_i - C_i) / (g_i.g_i)]_+``, ``i* = argmax lam_i`` and
  ``a* = a - lam_i* g_i*``. Dalal, Dvijotham, Vecerik, Hester, Paduraru, Tassa, "Safe
  Exploration in Continuous Action Spaces", arXiv:1801.08757, Sec. 4 (closed form under at most
  one active constraint; equation numbers not checked). Per-example. With several
  simultaneously active constraints the result can still violate the others (the paper assumes
  at most one); use `polytope_project` then.

  Args:
    a: float ``[d]`` proposed action. g: float ``[n, d]`` constraint sensitivities.
    c: float ``[n]`` current costs. limit: float ``[n]`` limits C_i.

  Returns:
    ``(safe_action, ShieldInfo)`` with ``slack = C - c - g a*``.
  """
  chex.assert_rank([a, g, c, limit], [1, 2, 1, 1])
  chex.assert_type([a, g, c, limit], float)
  chex.assert_equal_shape([c, limit])
  chex.assert_equal_shape_prefix([g, c], 1)
  chex.assert_equal_shape_suffix([g, a], 1)
  norm_sq = jnp.sum(jnp.square(g), axis=1)
  nonzero = norm_sq > 0
  multipliers = jnp.where(
      nonzero, jnp.maximum((g @ a + c - limit) / jnp.where(nonzero, norm_sq, 1.0), 0.0), 0.0)
  worst = jnp.argmax(multipliers)
  x = a - multipliers[worst] * g[worst]
  return x, ShieldInfo(intervened=jnp.any(x != a), correction=x - a, slack=limit - c - g @ x)


def _validate_units(units, num_rows: int) -> Tuple[Tuple[int, ...], ...]:
  try:
    parsed = tuple(tuple(unit) for unit in units)
  except TypeError:
    raise ValueError(f"units: expected a sequence of sequences of row indices, got {units!r}"
                     ) from None
  if not parsed:
    raise ValueError(f"units: expected at least one unit, got {units!r}")
  flat = [row for unit in parsed for row in unit]
  if any(len(unit) == 0 for unit in parsed):
    raise ValueError(f"units: every unit must own at least one constraint, got {units!r}")
  if any(not isinstance(row, int) or isinstance(row, bool) for row in flat):
    raise ValueError(f"units: row indices must be ints, got {units!r}")
  if sorted(flat) != list(range(num_rows)):
    raise ValueError(f"units: expected a partition of the constraint rows 0..{num_rows - 1} "
                     f"(each row owned by exactly one unit), got {units!r}")
  return parsed


def hierarchical_shield(u: Array, A: Array, b: Array, units: Sequence[Sequence[int]], *,
                        method: str = "exact", num_sweeps: int = 50,
                        feasibility_tol: float = 1e-5
                        ) -> Tuple[Array, HierarchicalShieldInfo]:
  """Priority-ordered composition of shields, each owning a subset of constraint rows.

  After Shielded Controller Units (Nekoei, Blondin Masse, Hassani, Chandar, Mai,
  arXiv:2512.01046): the environment's constraints are split among units applied in a fixed
  order (a parent before its children). Unit ``k`` receives the action left by unit ``k - 1`` and
  projects it onto its own constraints intersected with those of all earlier units, so a later
  unit never undoes an earlier unit's guarantee and the final action satisfies every row. Each
  unit reports whether it intervened, which attributes corrections to the constraint owners.
  When the units' constraints involve disjoint action coordinates, the composition equals the
  joint projection.

  Per-example. Only the abstract of the SCU paper was available: this composition rule is our
  reading of "each SCU explicitly manages a subset of constraints", not the paper's equations.

  Args:
    u: float ``[d]`` proposed action. A: float ``[m, d]``; b: float ``[m]``.
    units: static partition of ``range(m)`` into non-empty tuples, in application order.
    method, num_sweeps, feasibility_tol: as in `polytope_project`, for every unit.

  Returns:
    ``(safe_action, HierarchicalShieldInfo)``.
  """
  chex.assert_rank([u, A, b], [1, 2, 1])
  chex.assert_type([u, A, b], float)
  chex.assert_equal_shape_prefix([A, b], 1)
  parsed = _validate_units(units, A.shape[0])
  x = u
  owned = []
  intervened, unit_actions = [], []
  for unit in parsed:
    owned.extend(unit)
    rows = jnp.asarray(owned)
    x, info = polytope_project(x, A[rows], b[rows], method=method, num_sweeps=num_sweeps,
                               feasibility_tol=feasibility_tol)
    intervened.append(info.intervened)
    unit_actions.append(x)
  return x, HierarchicalShieldInfo(intervened=jnp.stack(intervened),
                                   unit_actions=jnp.stack(unit_actions), correction=x - u,
                                   slack=A @ x + b)
