"""Safety critics: Recovery RL's twin-head Q_risk, SQRL's classifier critic, Conservative Safety Critics.

Per-transition: every array is a scalar for one transition; the caller `jax.vmap`s over the batch
and averages. `discount_t` follows rlax: the cost discount times `(1 - terminated_t)`. On
*truncation* pass the full discount and a next-state value evaluated at the true next
observation; on *termination* pass 0.
"""

from typing import NamedTuple, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks

Array = chex.Array


class QRiskExtras(NamedTuple):
  target: Array  # y, the (stopped) TD target
  td_error_1: Array  # y - q1_tm1
  td_error_2: Array  # y - q2_tm1
  risk_tm1: Array  # max(q1_tm1, q2_tm1), the pessimistic risk estimate


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


def qrisk_td_target(
  c_t: Array,
  discount_t: Array,
  q1_t: Array,
  q2_t: Array,
  *,
  terminal_on_violation: bool = True,
  stop_target_gradients: bool = True,
) -> Array:
  """Recovery-RL safety-critic target ``y = c_t + discount_t * max(q1_t, q2_t)``.

  Per-transition (all arguments are scalars; vmap for a batch). Q_risk estimates the discounted
  probability of a future constraint violation, E[sum_k γ_risk^k c_{t+k}] with episodes that
  end at the first violation (Thananjeyan et al., arXiv:2010.15920, Sec. IV; the verified
  reference ``recovery_rl/qrisk.py`` computes ``c + mask * γ_risk * max(Q1', Q2')``).

  Args:
    c_t: float scalar, constraint cost of the transition (1.0 on violation, else 0.0).
    discount_t: float scalar, ``γ_risk * (1 - terminated_t)``. Truncation is not
      termination: on a time-limit cut pass ``γ_risk`` with ``q*_t`` evaluated at the true
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
  checks.boolean("terminal_on_violation", terminal_on_violation)
  checks.boolean("stop_target_gradients", stop_target_gradients)
  if terminal_on_violation:
    discount_t = jnp.where(c_t > 0, jnp.zeros_like(discount_t), discount_t)
  target = c_t + discount_t * jnp.maximum(q1_t, q2_t)
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def qrisk_loss(
  q1_tm1: Array,
  q2_tm1: Array,
  c_t: Array,
  discount_t: Array,
  q1_t: Array,
  q2_t: Array,
  *,
  terminal_on_violation: bool = True,
  stop_target_gradients: bool = True,
) -> Tuple[Array, QRiskExtras]:
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
  target = qrisk_td_target(
    c_t,
    discount_t,
    q1_t,
    q2_t,
    terminal_on_violation=terminal_on_violation,
    stop_target_gradients=stop_target_gradients,
  )
  td_error_1 = target - q1_tm1
  td_error_2 = target - q2_tm1
  loss = jnp.square(td_error_1) + jnp.square(td_error_2)
  return loss, QRiskExtras(
    target=target,
    td_error_1=td_error_1,
    td_error_2=td_error_2,
    risk_tm1=jnp.maximum(q1_tm1, q2_tm1),
  )


class SQRLExtras(NamedTuple):
  target: Array  # y, soft label in [0, 1]
  weight: Array  # class weight of the transition
  cross_entropy: Array  # unweighted BCE(y, sigmoid(logit_tm1))
  p_fail_tm1: Array  # sigmoid(logit_tm1)


def sqrl_target(
  fail_t: Array, discount_t: Array, logit_t: Array, *, stop_target_gradients: bool = True
) -> Array:
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
  checks.boolean("stop_target_gradients", stop_target_gradients)
  target = fail_t + (1.0 - fail_t) * discount_t * jax.nn.sigmoid(logit_t)
  return jax.lax.stop_gradient(target) if stop_target_gradients else target


def sqrl_loss(
  logit_tm1: Array,
  fail_t: Array,
  discount_t: Array,
  logit_t: Array,
  *,
  fail_weight: float = 0.75,
  stop_target_gradients: bool = True,
) -> Tuple[Array, SQRLExtras]:
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
  so its loss is ``mean(w) * mean(BCE)`` rather than the per-transition weighting the paper
  describes; this function weights per transition (``extras`` has both factors if the
  reference's form is wanted).
  """
  chex.assert_rank(logit_tm1, 0)
  chex.assert_type(logit_tm1, float)
  checks.number("fail_weight", fail_weight, low=0.0, high=1.0, arrays=True)
  target = sqrl_target(fail_t, discount_t, logit_t, stop_target_gradients=stop_target_gradients)
  cross_entropy = jax.nn.softplus(logit_tm1) - target * logit_tm1
  weight = jnp.where(fail_t > 0, fail_weight / 0.5, (1.0 - fail_weight) / 0.5)
  weight = weight.astype(cross_entropy.dtype)
  return weight * cross_entropy, SQRLExtras(
    target=target, weight=weight, cross_entropy=cross_entropy, p_fail_tm1=jax.nn.sigmoid(logit_tm1)
  )


def sqrl_actor_penalty(
  log_lambda: Array,
  logit: Array,
  *,
  target_safety: float = 0.1,
  hinge: bool = False,
  stop_penalty_gradient: bool = False,
) -> Array:
  """SQRL actor penalty ``lambda * (sigmoid(logit) - eps)``, ``lambda = exp(log_lambda)``.

  Per-example; add it to the SAC actor loss with ``logit = Q_safe(s, a)`` at a reparameterised
  ``a ~ pi``. Srinivasan et al., arXiv:2010.14603, Sec. 4 (Lagrangian fine-tuning objective).
  The multiplier gets no gradient here (it is trained by `sqrl_lambda_loss`).

  Args:
    log_lambda: float scalar, the multiplier variable (reference ``initial_log_lambda = 0``).
    logit: float scalar, safety-critic logit at the policy action.
    target_safety: eps (reference TARGET_SAFETY 0.1), a float in (0, 1).
    hinge: True gives ``lambda * max(sigmoid(logit) - eps, 0)``, which pushes only the actions
      whose failure probability exceeds eps (with a positive lambda the linear form also pulls
      the safe ones further down).
    stop_penalty_gradient: False (default) is the paper's form: the actor is pushed towards
      lower failure probability. True reproduces the reference code at HEAD, which wraps the
      whole penalty in a stop-gradient so it sends no gradient to the actor.
  """
  chex.assert_rank([log_lambda, logit], 0)
  chex.assert_type([log_lambda, logit], float)
  checks.number(
    "target_safety", target_safety, low=0.0, high=1.0, low_open=True, high_open=True, arrays=True
  )
  checks.boolean("hinge", hinge)
  checks.boolean("stop_penalty_gradient", stop_penalty_gradient)
  penalty = jnp.exp(jax.lax.stop_gradient(log_lambda)) * (jax.nn.sigmoid(logit) - target_safety)
  if hinge:
    penalty = jnp.maximum(penalty, 0.0)
  return jax.lax.stop_gradient(penalty) if stop_penalty_gradient else penalty


def sqrl_lambda_loss(log_lambda: Array, logit: Array, *, target_safety: float = 0.1) -> Array:
  """SQRL multiplier loss ``log_lambda * sg(log eps - log sigmoid(logit))``, per example.

  Minimising it raises ``log_lambda`` when the failure probability exceeds eps and lowers it
  otherwise (reference ``lambda_loss`` with ``log_lambda=True``; Srinivasan et al.,
  arXiv:2010.14603, Sec. 4). Only ``log_lambda`` receives a gradient.
  """
  chex.assert_rank([log_lambda, logit], 0)
  chex.assert_type([log_lambda, logit], float)
  checks.number(
    "target_safety", target_safety, low=0.0, high=1.0, low_open=True, high_open=True, arrays=True
  )
  log_p_fail = jax.nn.log_sigmoid(logit)
  return log_lambda * jax.lax.stop_gradient(jnp.log(target_safety) - log_p_fail)


class CSCExtras(NamedTuple):
  target: Array  # c_t + discount_t * q_t (stopped)
  td_error: Array  # target - q_tm1
  conservative_gap: Array  # q_tm1 - mean(q_pi_tm1); the loss pushes it down


def csc_loss(
  q_tm1: Array,
  c_t: Array,
  discount_t: Array,
  q_t: Array,
  q_pi_tm1: Array,
  *,
  alpha: float,
  bellman_coeff: float = 0.5,
  stop_target_gradients: bool = True,
) -> Tuple[Array, CSCExtras]:
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
    bellman_coeff: weight of the squared TD error; 0.5 as in the paper's objective (its Sec. 3,
      from memory: not checked against the paper's equation), 1.0 for parity with "gentle" (``mean((qc - backup)^2)``).
    stop_target_gradients: if True, no gradient flows into the TD target.

  Returns:
    ``(loss, CSCExtras)``.

  Avoided reference bug: the OmniSafe-based CSC fork uses reward-side CQL (logsumexp over
  sampled actions minus data), which pushes sampled-action costs *down*; this function uses the
  sign of the paper and of "gentle".
  """
  chex.assert_rank([q_tm1, c_t, discount_t, q_t, q_pi_tm1], [0, 0, 0, 0, 1])
  chex.assert_type([q_tm1, c_t, discount_t, q_t, q_pi_tm1], float)
  checks.number("alpha", alpha, low=0.0, arrays=True)
  checks.number("bellman_coeff", bellman_coeff, low=0.0, low_open=True, arrays=True)
  checks.boolean("stop_target_gradients", stop_target_gradients)
  target = c_t + discount_t * q_t
  if stop_target_gradients:
    target = jax.lax.stop_gradient(target)
  td_error = target - q_tm1
  gap = q_tm1 - jnp.mean(q_pi_tm1)
  loss = alpha * gap + bellman_coeff * jnp.square(td_error)
  return loss, CSCExtras(target=target, td_error=td_error, conservative_gap=gap)
