"""Tests for hrljax.losses.safety: risk critics, Lagrange multipliers and shields.

Expected values are computed by hand (the reference vectors, with the papers and reference codes
they were checked against) or recomputed here in NumPy float64 / closed form, never from the code
under test.
"""

import functools

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import safety

JIT_OR_NOT = pytest.mark.parametrize("transform", [jax.jit, lambda f: f], ids=["jit", "nojit"])


def f32(x):
  return jnp.asarray(x, jnp.float32)


# ---------------------------------------------------------------------------------------------
# Recovery RL Q_risk.
# ---------------------------------------------------------------------------------------------


@JIT_OR_NOT
@pytest.mark.parametrize(
  "c, mask, forced, expected",
  [
    (0.0, 1.0, True, 0.2),
    (0.0, 0.0, True, 0.0),
    (1.0, 0.0, True, 1.0),
    (1.0, 1.0, False, 1.2),
    (1.0, 1.0, True, 1.0),
  ],
)
def test_qrisk_target_hand_computed_vector(transform, c, mask, forced, expected):
  # γ_risk = 0.5, target heads 0.2 and 0.4; the max head is used.
  fn = transform(functools.partial(safety.qrisk_td_target, terminal_on_violation=forced))
  target = fn(f32(c), f32(0.5 * mask), f32(0.2), f32(0.4))
  np.testing.assert_allclose(target, expected, rtol=1e-6)


def test_qrisk_truncation_bootstraps_termination_does_not():
  # A time-limit cut (no violation) keeps the discount; termination passes discount 0.
  truncated = safety.qrisk_td_target(f32(0.0), f32(0.9), f32(0.3), f32(0.1))
  terminated = safety.qrisk_td_target(f32(0.0), f32(0.0), f32(0.3), f32(0.1))
  np.testing.assert_allclose(truncated, 0.27, rtol=1e-6)
  np.testing.assert_allclose(terminated, 0.0)


def test_risk_value_is_pessimistic():
  q1, q2 = jax.random.uniform(jax.random.PRNGKey(0), (2, 64))
  risk = safety.risk_value(q1, q2)
  assert bool(jnp.all(risk >= q1)) and bool(jnp.all(risk >= q2))
  np.testing.assert_array_equal(risk, np.maximum(q1, q2))


def test_qrisk_loss_value_and_gradients():
  args = tuple(f32(v) for v in (0.3, 0.6, 0.0, 0.5, 0.2, 0.4))  # q1, q2, c, disc, q1', q2'
  y = 0.0 + 0.5 * 0.4
  loss, extras = safety.qrisk_loss(*args)
  np.testing.assert_allclose(loss, (0.3 - y) ** 2 + (0.6 - y) ** 2, rtol=1e-6)
  np.testing.assert_allclose(extras.target, y, rtol=1e-6)
  np.testing.assert_allclose(extras.risk_tm1, 0.6)
  np.testing.assert_allclose(extras.td_error_1, y - 0.3, rtol=1e-6)

  grads = jax.grad(lambda *a: safety.qrisk_loss(*a)[0], argnums=tuple(range(6)))(*args)
  np.testing.assert_allclose(grads[0], -2 * (y - 0.3), rtol=1e-6)
  np.testing.assert_allclose(grads[1], -2 * (y - 0.6), rtol=1e-6)
  for g in grads[2:]:  # the target carries no gradient
    assert float(g) == 0.0

  grads = jax.grad(
    lambda *a: safety.qrisk_loss(*a, stop_target_gradients=False)[0], argnums=(4, 5)
  )(*args)
  dloss_dy = 2 * (y - 0.3) + 2 * (y - 0.6)
  np.testing.assert_allclose(grads[0], 0.0)  # q1' is not the max head
  np.testing.assert_allclose(grads[1], dloss_dy * 0.5, rtol=1e-5)


def _chain1d(gamma, slip=0.0, h=0.05, step=2):
  """Chain1D on the grid x_i = i h, policy u = +v with v dt = step * h.

  With probability ``slip`` the agent stays put. Reaching x >= 1 is a violation that ends the
  episode. Returns the transition matrix over grid states, the violation flags of each
  (i, j) successor and the exact discounted violation probability by a float64 linear solve.
  """
  n = int(round(1 / h))
  p = np.zeros((n, n + step))
  for i in range(n):
    p[i, i + step] += 1 - slip
    p[i, i] += slip
  p_violate = p[:, n:].sum(axis=1)
  p_safe = p[:, :n]
  exact = np.linalg.solve(np.eye(n) - gamma * p_safe, p_violate)
  return p, exact


def _closed_form_qrisk(x, gamma, v=1.0, dt=0.1):
  # k = ceil((1 - x) / (v dt)), rounded first so that x = 0.7 gives 3, not 4 (a float pitfall).
  k = np.ceil(np.round((1 - np.asarray(x)) / (v * dt), 9))
  return gamma ** (k - 1)


@pytest.mark.parametrize("gamma", [0.5, 0.9])
def test_chain1d_td_fixed_point_equals_closed_form(gamma):
  n_states = 20
  p, exact = _chain1d(gamma)
  x = np.arange(n_states) * 0.05
  np.testing.assert_allclose(exact, _closed_form_qrisk(x, gamma), rtol=1e-12)

  successor = np.argmax(p, axis=1)  # deterministic chain
  violation = successor >= n_states
  c = f32(violation.astype(np.float32))
  # The data does not mark violations terminal: the flag must do it.
  discount = f32(np.full(n_states, gamma))
  nxt = jnp.asarray(np.minimum(successor, n_states - 1))

  @jax.jit
  def iterate(q):
    def sweep(q, _):
      return jax.vmap(safety.qrisk_td_target)(c, discount, q[nxt], q[nxt]), None

    return jax.lax.scan(sweep, q, None, length=n_states + 1)[0]

  q = iterate(jnp.zeros(n_states))
  np.testing.assert_allclose(q, exact, rtol=1e-5, atol=1e-7)
  # Closed-form vectors (dt = 0.1, v = 1).
  table = {0.5: [(0.5, 0.0625), (0.95, 1.0), (0.7, 0.25)], 0.9: [(0.0, 0.387420)]}
  for x_value, expected in table[gamma]:
    np.testing.assert_allclose(q[int(round(x_value / 0.05))], expected, rtol=1e-5)


def test_chain1d_stochastic_expected_target_fixed_point_equals_linear_solve():
  gamma, slip, n_states = 0.8, 0.3, 20
  p, exact = _chain1d(gamma, slip=slip)
  rows, cols = np.nonzero(p)
  weights = f32(p[rows, cols])
  c = f32((cols >= n_states).astype(np.float32))
  discount = f32(np.full(rows.shape, gamma))
  nxt = jnp.asarray(np.minimum(cols, n_states - 1))
  rows_j = jnp.asarray(rows)

  @jax.jit
  def iterate(q):
    def sweep(q, _):
      # Average the per-transition targets with the exact transition probabilities.
      targets = jax.vmap(safety.qrisk_td_target)(c, discount, q[nxt], q[nxt])
      return jax.ops.segment_sum(weights * targets, rows_j, num_segments=n_states), None

    return jax.lax.scan(sweep, q, None, length=300)[0]

  np.testing.assert_allclose(iterate(jnp.zeros(n_states)), exact, rtol=1e-4, atol=1e-6)


def test_chain1d_tabular_critic_trained_with_qrisk_loss_converges():
  # Two sigmoid heads over the grid trained by semi-gradient descent on the loss, where the
  # targets are computed from the same parameters: only the stop-gradient keeps this TD.
  gamma, n_states = 0.5, 20
  successor = np.arange(n_states) + 2
  c = f32((successor >= n_states).astype(np.float32))
  discount = f32(np.full(n_states, gamma))
  nxt = jnp.asarray(np.minimum(successor, n_states - 1))

  def loss_fn(params):
    q1, q2 = jax.nn.sigmoid(params[0]), jax.nn.sigmoid(params[1])
    loss, _ = jax.vmap(safety.qrisk_loss)(q1, q2, c, discount, q1[nxt], q2[nxt])
    return jnp.mean(loss)

  @jax.jit
  def train(params):
    def step(params, _):
      return params - 20.0 * jax.grad(loss_fn)(params), None

    return jax.lax.scan(step, params, None, length=2000)[0]

  params = train(jnp.stack([jnp.full(n_states, -2.0), jnp.full(n_states, 1.0)]))
  risk = safety.risk_value(jax.nn.sigmoid(params[0]), jax.nn.sigmoid(params[1]))
  expected = _closed_form_qrisk(np.arange(n_states) * 0.05, gamma)
  assert np.max(np.abs(np.asarray(risk) - expected)) < 0.02  # the grid error: about 0.05


def test_qrisk_bad_inputs():
  with pytest.raises(AssertionError, match="rank"):
    safety.qrisk_td_target(jnp.zeros(3), f32(0.5), f32(0.2), f32(0.4))
  with pytest.raises(AssertionError):
    safety.qrisk_loss(f32(0.1), f32(0.1), jnp.asarray(0, jnp.int32), f32(0.5), f32(0.2), f32(0.4))
  with pytest.raises(AssertionError):
    safety.risk_value(jnp.zeros(3), jnp.zeros(4))
  with pytest.raises(ValueError, match="terminal_on_violation"):
    safety.qrisk_td_target(f32(0.0), f32(0.5), f32(0.2), f32(0.4), terminal_on_violation=1)


def test_reflex_select_is_strict_and_vmaps():
  risk = f32([0.05, 0.1, 0.2])
  a_task = jnp.zeros((3, 2))
  a_rec = jnp.ones((3, 2))
  fn = jax.jit(jax.vmap(functools.partial(safety.reflex_select, threshold=0.1)))
  action, intervened = fn(risk, a_task, a_rec)
  np.testing.assert_array_equal(intervened, [False, False, True])  # risk == eps: no reflex
  np.testing.assert_array_equal(action, [[0, 0], [0, 0], [1, 1]])
  with pytest.raises(ValueError, match="threshold"):
    safety.reflex_select(f32(0.3), a_task[0], a_rec[0], threshold=float("nan"))


# ---------------------------------------------------------------------------------------------
# SQRL.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
  "fail, disc, logit, expected",
  [
    (0.0, 1.0, 0.0, 0.35),
    (1.0, 1.0, 0.0, 1.0),
    (0.0, 0.0, 2.0, 0.0),
  ],
)
def test_sqrl_target_hand_computed_vector(fail, disc, logit, expected):
  # γ_safe = 0.7, so discount_t = 0.7 * discount'.
  target = safety.sqrl_target(f32(fail), f32(0.7 * disc), f32(logit))
  np.testing.assert_allclose(target, expected, rtol=1e-6)


@pytest.mark.parametrize("fail", [0.0, 1.0])
def test_sqrl_class_weights_and_ln2(fail):
  loss, extras = safety.sqrl_loss(f32(0.0), f32(fail), f32(0.7), f32(0.4))
  expected_weight = 1.5 if fail else 0.5
  np.testing.assert_allclose(extras.weight, expected_weight)
  np.testing.assert_allclose(extras.cross_entropy, np.log(2.0), rtol=1e-6)  # p = 0.5, any y
  np.testing.assert_allclose(loss, expected_weight * np.log(2.0), rtol=1e-6)


def test_sqrl_loss_hand_computed_and_gradient():
  x, disc, logit_next = 0.3, 0.7, -0.5
  y = disc / (1 + np.exp(-logit_next))
  p = 1 / (1 + np.exp(-x))
  expected = 0.5 * -(y * np.log(p) + (1 - y) * np.log(1 - p))
  loss, extras = safety.sqrl_loss(f32(x), f32(0.0), f32(disc), f32(logit_next))
  np.testing.assert_allclose(extras.target, y, rtol=1e-6)
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  grads = jax.grad(lambda a, b: safety.sqrl_loss(a, f32(0.0), f32(disc), b)[0], argnums=(0, 1))(
    f32(x), f32(logit_next)
  )
  np.testing.assert_allclose(grads[0], 0.5 * (p - y), rtol=1e-5)
  assert float(grads[1]) == 0.0


def test_sqrl_actor_penalty_paper_gradient_and_parity_flag():
  log_lam, logit = f32(np.log(2.0)), f32(0.4)
  p = 1 / (1 + np.exp(-0.4))
  penalty = safety.sqrl_actor_penalty(log_lam, logit, target_safety=0.1)
  np.testing.assert_allclose(penalty, 2.0 * (p - 0.1), rtol=1e-6)
  grad_paper = jax.grad(safety.sqrl_actor_penalty, argnums=(0, 1))(log_lam, logit)
  np.testing.assert_allclose(grad_paper[1], 2.0 * p * (1 - p), rtol=1e-5)
  assert float(grad_paper[0]) == 0.0  # the multiplier is trained by its own loss
  grad_parity = jax.grad(
    functools.partial(safety.sqrl_actor_penalty, stop_penalty_gradient=True), argnums=1
  )(log_lam, logit)
  assert float(grad_parity) == 0.0


@pytest.mark.parametrize("logit, raises", [(1.0, True), (-4.0, False)])  # p = 0.73 / 0.018
def test_sqrl_lambda_loss_direction(logit, raises):
  log_lam = f32(0.0)
  grad = jax.grad(safety.sqrl_lambda_loss)(log_lam, f32(logit), target_safety=0.1)
  p = 1 / (1 + np.exp(-logit))
  np.testing.assert_allclose(grad, np.log(0.1) - np.log(p), rtol=1e-5)
  new_log_lam = log_lam - 0.1 * grad
  assert (float(new_log_lam) > 0.0) == raises


def test_sqrl_bad_inputs():
  for bad in (-0.1, 1.5, float("inf")):
    with pytest.raises(ValueError, match="fail_weight"):
      safety.sqrl_loss(f32(0.0), f32(0.0), f32(0.7), f32(0.0), fail_weight=bad)
  with pytest.raises(ValueError, match="target_safety"):
    safety.sqrl_lambda_loss(f32(0.0), f32(0.0), target_safety=0.0)
  with pytest.raises(AssertionError):
    safety.sqrl_target(jnp.zeros(2), f32(0.7), f32(0.0))


# ---------------------------------------------------------------------------------------------
# Conservative Safety Critics.
# ---------------------------------------------------------------------------------------------


def test_csc_conservative_term_hand_computed_vector():
  # alpha = 5, Q(data) = [0.2, 0.4], Q(pi) = [0.5, 0.7] -> 5 (0.3 - 0.6) = -1.5.
  # The Bellman term is zeroed by making each target equal to the data value.
  q_data = f32([0.2, 0.4])
  loss, extras = jax.vmap(functools.partial(safety.csc_loss, alpha=5.0))(
    q_data, q_data, jnp.zeros(2), jnp.zeros(2), f32([[0.5], [0.7]])
  )
  np.testing.assert_allclose(jnp.mean(loss), -1.5, rtol=1e-6)
  np.testing.assert_allclose(extras.td_error, 0.0)


def test_csc_gradients_and_bellman_coefficient():
  q, c, disc, q_next = 0.3, 1.0, 0.9, 0.5
  q_pi = f32([0.1, 0.4, 0.7, 0.2])
  y = c + disc * q_next
  for coeff in (0.5, 1.0):
    fn = functools.partial(safety.csc_loss, alpha=2.0, bellman_coeff=coeff)
    loss, _ = fn(f32(q), f32(c), f32(disc), f32(q_next), q_pi)
    np.testing.assert_allclose(loss, 2.0 * (q - 0.35) + coeff * (y - q) ** 2, rtol=1e-5)
    grads = jax.grad(lambda *a: fn(*a)[0], argnums=(0, 3, 4))(
      f32(q), f32(c), f32(disc), f32(q_next), q_pi
    )
    np.testing.assert_allclose(grads[0], 2.0 - 2 * coeff * (y - q), rtol=1e-5)
    assert float(grads[1]) == 0.0  # no gradient into the target
    np.testing.assert_allclose(grads[2], np.full(4, -2.0 / 4), rtol=1e-6)


def test_csc_one_step_raises_policy_values_and_lowers_data_values():
  # Sign regression test: the OmniSafe-based fork pushes policy-action costs down.
  q_data = f32([0.2, 0.4, 0.6])
  q_pi = f32([[0.5, 0.1], [0.3, 0.3], [0.9, 0.2]])

  def conservative_only(params):
    data, pi = params
    loss, _ = jax.vmap(functools.partial(safety.csc_loss, alpha=1.0))(
      data, jax.lax.stop_gradient(data), jnp.zeros(3), jnp.zeros(3), pi
    )
    return jnp.mean(loss)

  grads = jax.grad(conservative_only)((q_data, q_pi))
  new_data, new_pi = q_data - 0.1 * grads[0], q_pi - 0.1 * grads[1]
  assert float(jnp.mean(new_pi)) > float(jnp.mean(q_pi))
  assert float(jnp.mean(new_data)) < float(jnp.mean(q_data))


def test_csc_bad_inputs():
  args = (f32(0.3), f32(0.0), f32(0.9), f32(0.5), f32([0.1, 0.2]))
  with pytest.raises(ValueError, match="alpha"):
    safety.csc_loss(*args, alpha=-1.0)
  with pytest.raises(ValueError, match="bellman_coeff"):
    safety.csc_loss(*args, alpha=1.0, bellman_coeff=0.0)
  with pytest.raises(AssertionError):
    safety.csc_loss(*args[:4], f32(0.1), alpha=1.0)  # q_pi_tm1 must be [N]


# ---------------------------------------------------------------------------------------------
# Lagrange multipliers and Lagrangian objectives.
# ---------------------------------------------------------------------------------------------


@JIT_OR_NOT
@pytest.mark.parametrize(
  "lam, jc, expected", [(0.5, 30.0, 0.55), (0.5, 10.0, 0.35), (0.1, 0.0, 0.0)]
)
def test_lagrange_update_hand_computed_vector(transform, lam, jc, expected):
  fn = transform(functools.partial(safety.lagrange_update, cost_limit=25.0, learning_rate=0.01))
  new = fn(safety.LagrangeState(lam=f32(lam)), f32(jc))
  np.testing.assert_allclose(new.lam, expected, rtol=1e-5, atol=1e-7)


def test_lagrange_update_properties():
  keys = jax.random.split(jax.random.PRNGKey(1), 2)
  lam = jax.random.uniform(keys[0], (256,), maxval=2.0)
  jc = jax.random.uniform(keys[1], (256,), maxval=50.0)
  update = jax.vmap(
    lambda l, j: (
      safety.lagrange_update(
        safety.LagrangeState(lam=l), j, cost_limit=25.0, learning_rate=0.05
      ).lam
    )
  )
  new = update(lam, jc)
  assert bool(jnp.all(new >= 0))
  np.testing.assert_array_equal(new > lam, jc > 25.0)
  capped = safety.lagrange_update(
    safety.lagrange_init(0.9), f32(100.0), cost_limit=25.0, learning_rate=1.0, upper_bound=1.0
  )
  np.testing.assert_allclose(capped.lam, 1.0)
  np.testing.assert_allclose(safety.lagrange_init().lam, 0.001)
  # A traced cost limit (e.g. a schedule) is accepted.
  traced = jax.jit(
    lambda d: (
      safety.lagrange_update(
        safety.lagrange_init(0.5), f32(30.0), cost_limit=d, learning_rate=0.01
      ).lam
    )
  )(f32(25.0))
  np.testing.assert_allclose(traced, 0.55, rtol=1e-6)


def test_lagrange_multiplier_loss_gradient_raises_lambda_iff_cost_above_limit():
  for jc, sign in ((30.0, -1.0), (10.0, 1.0)):
    grad = jax.grad(safety.lagrange_multiplier_loss)(f32(0.5), f32(jc), cost_limit=25.0)
    np.testing.assert_allclose(grad, -(jc - 25.0))
    assert np.sign(grad) == sign  # descent direction -grad raises lam iff jc > d


PID_SEQUENCE = {  # OmniSafe CPPOPID defaults; costs [50, 40, 30, 20, 10], d = 25.
  "integral": [0.251, 0.401, 0.451, 0.401, 0.251],
  "p_ema": [1.25, 1.9375, 2.090625, 1.736094, 0.899289],
  "d_ema": [2.5, 4.375, 5.65625, 6.373438, 6.554766],
  "lam_delay10": [0.401, 0.6385, 0.716625, 0.638344, 0.406477],
  "lam_delay2": [0.401, 0.6385, 0.691625, 0.594594, 0.349914],
}


@JIT_OR_NOT
@pytest.mark.parametrize("delay", [10, 2])
def test_pid_lagrange_hand_computed_sequence(transform, delay):
  update = transform(functools.partial(safety.pid_lagrange_update, cost_limit=25.0))

  def run(state, jc):
    state = update(state, jc)
    return state, state

  _, states = jax.lax.scan(
    run, safety.pid_lagrange_init(delay=delay), f32([50.0, 40.0, 30.0, 20.0, 10.0])
  )
  np.testing.assert_allclose(states.integral, PID_SEQUENCE["integral"], rtol=1e-5)
  np.testing.assert_allclose(states.p_ema, PID_SEQUENCE["p_ema"], rtol=1e-5)
  np.testing.assert_allclose(states.d_ema, PID_SEQUENCE["d_ema"], rtol=1e-5)
  np.testing.assert_allclose(states.lam, PID_SEQUENCE[f"lam_delay{delay}"], rtol=1e-5)


def test_pid_lagrange_integral_clamp_diff_norm_and_penalty_max():
  costs = jax.random.uniform(jax.random.PRNGKey(2), (200,), maxval=60.0)

  def run(mode, penalty_max=100.0, ki=0.01):
    update = functools.partial(
      safety.pid_lagrange_update,
      cost_limit=25.0,
      ki=ki,
      normalisation=mode,
      penalty_max=penalty_max,
    )
    return jax.lax.scan(lambda s, j: (update(s, j),) * 2, safety.pid_lagrange_init(), costs)[1]

  states = run("sum")
  assert bool(jnp.all(states.integral >= 0)) and bool(jnp.all(states.lam >= 0))
  low = jax.lax.scan(
    lambda s, j: (safety.pid_lagrange_update(s, j, cost_limit=25.0),) * 2,
    safety.pid_lagrange_init(),
    jnp.zeros(50),
  )[1]
  np.testing.assert_array_equal(low.integral, 0.0)  # anti-windup: never below zero
  diff = run("diff", ki=0.1)
  assert bool(jnp.all((diff.lam >= 0) & (diff.lam <= 1) & (diff.integral <= 1)))
  # penalty_max caps lam only without normalisation (OmniSafe parity).
  big = jnp.full(20, 1e4)
  scan = lambda mode: (
    jax.lax.scan(
      lambda s, j: (
        (safety.pid_lagrange_update(s, j, cost_limit=25.0, normalisation=mode, penalty_max=5.0),)
        * 2
      ),
      safety.pid_lagrange_init(),
      big,
    )[1].lam
  )
  assert float(scan("sum")[-1]) > 5.0
  np.testing.assert_allclose(scan("none")[-1], 5.0)


def test_pid_lagrange_bad_inputs():
  state = safety.pid_lagrange_init()
  with pytest.raises(ValueError, match="normalisation"):
    safety.pid_lagrange_update(state, f32(1.0), cost_limit=25.0, normalisation="mean")
  with pytest.raises(ValueError, match="kp"):
    safety.pid_lagrange_update(state, f32(1.0), cost_limit=25.0, kp=-0.1)
  with pytest.raises(ValueError, match="p_ema_alpha"):
    safety.pid_lagrange_update(state, f32(1.0), cost_limit=25.0, p_ema_alpha=1.0)
  with pytest.raises(ValueError, match="delay"):
    safety.pid_lagrange_init(delay=0)
  with pytest.raises(ValueError, match="learning_rate"):
    safety.lagrange_update(safety.lagrange_init(), f32(1.0), cost_limit=25.0, learning_rate=0.0)
  with pytest.raises(AssertionError):
    safety.lagrange_update(safety.lagrange_init(), jnp.zeros(3), cost_limit=25.0, learning_rate=0.1)


@pytest.mark.parametrize(
  "adv_r, adv_c, lam, expected", [(1.0, 2.0, 0.5, 0.0), (2.0, 1.0, 1.0, 0.5), (1.0, 7.0, 0.0, 1.0)]
)
def test_ppo_lag_advantage_hand_computed_vector(adv_r, adv_c, lam, expected):
  out = safety.ppo_lag_advantage(f32([adv_r]), f32([adv_c]), f32(lam))
  np.testing.assert_allclose(out, [expected], atol=1e-7)
  grad = jax.grad(lambda l: jnp.sum(safety.ppo_lag_advantage(f32([adv_r]), f32([adv_c]), l)))(
    f32(lam)
  )
  assert float(grad) == 0.0


def test_lagrangian_combine_and_sac_lag_hand_computed_vectors():
  one, two = f32([1.0]), f32([2.0])
  np.testing.assert_allclose(safety.lagrangian_combine(one, two, f32(1.0)), [1.5])
  np.testing.assert_allclose(
    safety.lagrangian_combine(one, two, f32(0.25), normalisation="diff"), [1.25]
  )
  np.testing.assert_allclose(
    safety.lagrangian_combine(one, two, f32(0.25), normalisation="none"), [1.5]
  )
  with pytest.raises(ValueError, match="normalisation"):
    safety.lagrangian_combine(one, two, f32(0.25), normalisation="product")
  loss = safety.sac_lag_actor_loss(f32(0.2), f32(-1.0), f32(2.0), f32(0.5), f32(1.0))
  np.testing.assert_allclose(loss, -0.85, rtol=1e-6)
  grads = jax.grad(safety.sac_lag_actor_loss, argnums=(0, 1, 2, 3, 4))(
    f32(0.2), f32(-1.0), f32(2.0), f32(0.5), f32(1.0)
  )
  np.testing.assert_allclose(grads[1:4], [0.1, -0.5, 0.5], rtol=1e-6)
  assert float(grads[0]) == 0.0 and float(grads[4]) == 0.0


@pytest.mark.parametrize(
  "lam, coeff, g, factor, psi, new_lam, new_coeff",
  [
    (1.0, 1.0, 0.5, 0.0, 0.625, 1.5, 1.0),
    (0.2, 1.0, -0.5, 0.0, -0.02, 0.0, 1.0),
    (0.5, 0.1, 0.5, 1.0, 0.2625, 0.55, 0.2),
  ],
)
def test_augmented_lagrangian_hand_computed_vector(lam, coeff, g, factor, psi, new_lam, new_coeff):
  state = safety.AugmentedLagrangeState(lam=f32(lam), penalty_coeff=f32(coeff))
  out, new = safety.augmented_lagrangian_penalty(state, f32(g), growth_factor=factor)
  np.testing.assert_allclose(out, psi, rtol=1e-5)
  np.testing.assert_allclose(new.lam, new_lam, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(new.penalty_coeff, new_coeff, rtol=1e-5)


@pytest.mark.parametrize("poisoned", ["g", "lam", "penalty_coeff"])
def test_augmented_lagrangian_nan_gives_nan_penalty_and_multiplier(poisoned):
  # Without the NaN check, `cond > 0` reads NaN as False: psi = -lam^2 / (2 c), finite.
  values = dict(g=-0.5, lam=0.2, penalty_coeff=1.0) | {poisoned: np.nan}
  state = safety.AugmentedLagrangeState(
    lam=f32(values["lam"]), penalty_coeff=f32(values["penalty_coeff"])
  )
  psi, new = safety.augmented_lagrangian_penalty(state, f32(values["g"]), growth_factor=0.0)
  assert np.isnan(float(psi)) and np.isnan(float(new.lam))
  # The gradient of a finite penalty is unchanged on either branch: d psi / d g = lam + c g, 0.
  for g, grad in ((0.5, 0.2 + 0.5), (-0.5, 0.0)):
    state = safety.AugmentedLagrangeState(lam=f32(0.2), penalty_coeff=f32(1.0))
    got = jax.grad(lambda x: safety.augmented_lagrangian_penalty(state, x, growth_factor=0.0)[0])(
      f32(g)
    )
    np.testing.assert_allclose(got, grad, rtol=1e-6)


def test_per_step_cost_budget_hand_computed_vector():
  np.testing.assert_allclose(safety.per_step_cost_budget(25.0, 0.99, 1000), 2.499892, rtol=1e-6)
  with pytest.raises(ValueError, match="horizon"):
    safety.per_step_cost_budget(25.0, 0.99, 0)


# ---------------------------------------------------------------------------------------------
# Shields.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
  "u, a, b, expected",
  [
    ([1.0, 0.0], [-1.0, 0.0], 0.5, [0.5, 0.0]),
    ([0.2, 0.3], [-1.0, 0.0], 0.5, [0.2, 0.3]),
    ([1.0, 1.0], [-1.0, -1.0], 0.5, [0.25, 0.25]),
  ],
)
def test_halfspace_hand_computed_vectors(u, a, b, expected):
  x, info = jax.jit(safety.halfspace_project)(f32(u), f32(a), f32(b))
  np.testing.assert_allclose(x, expected, rtol=1e-6)
  assert bool(info.intervened) == (expected != u)
  np.testing.assert_allclose(info.correction, np.subtract(expected, u), atol=1e-7)
  assert float(info.slack[0]) >= -1e-6


def test_circle_cbf_hand_computed_vector():
  x, centre = f32([0.5, 0.0]), f32([0.0, 0.0])
  a, b = safety.circle_cbf_constraint(x, centre, 0.3, dt=0.05, gamma=0.3)
  np.testing.assert_allclose(a, [0.05, 0.0], rtol=1e-6)
  np.testing.assert_allclose(b, 0.048, rtol=1e-5)
  u, info = safety.halfspace_project(f32([-1.0, 0.0]), a, b)
  np.testing.assert_allclose(u, [-0.96, 0.0], rtol=1e-5)
  assert bool(info.intervened)
  next_x = np.asarray(x, np.float64) + 0.05 * np.asarray(u, np.float64)
  h_next = np.sum(next_x**2) - 0.09
  np.testing.assert_allclose(h_next, 0.114304, rtol=1e-5)
  assert h_next >= (1 - 0.3) * 0.16  # the linearised condition is conservative
  with pytest.raises(ValueError, match="dt"):
    safety.circle_cbf_constraint(x, centre, 0.3, dt=0.0, gamma=0.3)


_halfspace_jit = jax.jit(safety.halfspace_project)


@hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
@hypothesis.given(
  st.lists(st.floats(-3, 3, allow_subnormal=False), min_size=5, max_size=5), st.floats(0.1, 3)
)
def test_halfspace_properties(values, norm):
  u = np.asarray(values[:2])
  direction = np.asarray(values[2:4])
  hypothesis.assume(np.linalg.norm(direction) > 1e-2)
  a = norm * direction / np.linalg.norm(direction)
  b = values[4]
  x, info = _halfspace_jit(f32(u), f32(a), f32(b))
  x64 = u + max(0.0, -(a @ u + b)) / (a @ a) * a  # the analytic projection, in float64
  np.testing.assert_allclose(x, x64, atol=1e-5)
  assert float(a @ np.asarray(x, np.float64) + b) >= -1e-5
  if a @ u + b >= 1e-5:  # clear of the float32 rounding at the boundary
    np.testing.assert_array_equal(x, f32(u))
    assert not bool(info.intervened)
  if a @ u + b <= -1e-5:
    assert bool(info.intervened)
  again, info_again = _halfspace_jit(x, f32(a), f32(b))
  np.testing.assert_allclose(again, x, atol=1e-6)
  np.testing.assert_allclose(info.correction, np.asarray(x) - np.asarray(f32(u)), atol=1e-6)


def _random_polytopes(seed, batch, m, d):
  """Random non-empty polytopes {x : A x + b >= 0} (a random point z is made feasible)."""
  rng = np.random.default_rng(seed)
  A = rng.normal(size=(batch, m, d))
  z = rng.normal(size=(batch, d))
  b = -np.einsum("bmd,bd->bm", A, z) + rng.uniform(0.0, 1.0, size=(batch, m))
  u = rng.normal(scale=2.0, size=(batch, d))
  return A, b, u


def _reference_projection(u, A, b):
  """Independent QP solve (SciPy SLSQP, float64) of min |x - u|^2 s.t. A x + b >= 0."""
  import scipy.optimize  # here, not at module level: collection would import it on every worker

  result = scipy.optimize.minimize(
    lambda x: np.sum((x - u) ** 2),
    x0=np.zeros_like(u),
    jac=lambda x: 2 * (x - u),
    constraints=[{"type": "ineq", "fun": lambda x: A @ x + b, "jac": lambda x: A}],
    method="SLSQP",
    options={"ftol": 1e-12, "maxiter": 500},
  )
  assert result.success
  return result.x


@pytest.mark.parametrize("m, d", [(4, 2), (5, 3)])
def test_exact_polytope_projection_properties(m, d):
  A, b, u = _random_polytopes(seed=m, batch=256, m=m, d=d)
  project = jax.jit(jax.vmap(safety.polytope_project))
  x, info = project(f32(u), f32(A), f32(b))
  x = np.asarray(x, np.float64)
  slack = np.einsum("bmd,bd->bm", A, x) + b
  assert slack.min() >= -1e-4  # every owned constraint holds
  feasible = np.all(np.einsum("bmd,bd->bm", A, u) + b >= 1e-4, axis=1)
  assert feasible.any() and (~feasible).any()
  np.testing.assert_array_equal(x[feasible], np.asarray(f32(u))[feasible])  # safe: untouched
  np.testing.assert_array_equal(np.asarray(info.intervened), np.any(info.correction != 0, axis=1))
  again, _ = project(f32(x), f32(A), f32(b))
  np.testing.assert_allclose(again, x, atol=1e-5)  # idempotent
  for i in np.flatnonzero(~feasible)[:12]:  # minimal norm: matches an independent QP solver
    np.testing.assert_allclose(x[i], _reference_projection(u[i], A[i], b[i]), atol=1e-4)


def test_polytope_projection_respects_action_bounds():
  A, b, u = _random_polytopes(seed=7, batch=128, m=3, d=2)
  lower, upper = f32([-1.0, -1.0]), f32([1.0, 1.0])
  # Make the polytope intersect the box: the feasible point z must lie inside it.
  rng = np.random.default_rng(7)
  z = rng.uniform(-0.9, 0.9, size=(128, 2))
  b = -np.einsum("bmd,bd->bm", A, z) + rng.uniform(0.0, 0.3, size=(128, 3))
  project = jax.jit(jax.vmap(functools.partial(safety.polytope_project, lower=lower, upper=upper)))
  x, info = project(f32(u), f32(A), f32(b))
  assert info.slack.shape == (128, 3 + 4)
  assert float(jnp.min(info.slack)) >= -1e-4
  assert bool(jnp.all((x >= -1 - 1e-5) & (x <= 1 + 1e-5)))


def test_dykstra_converges_to_exact_projection():
  A, b, u = _random_polytopes(seed=3, batch=128, m=4, d=2)
  exact, _ = jax.jit(jax.vmap(safety.polytope_project))(f32(u), f32(A), f32(b))

  @functools.partial(jax.jit, static_argnums=0)
  def dykstra(sweeps):
    return jax.vmap(
      functools.partial(safety.polytope_project, method="dykstra", num_sweeps=sweeps)
    )(f32(u), f32(A), f32(b))

  approx, info = dykstra(300)
  np.testing.assert_allclose(approx, exact, atol=2e-3)
  assert float(jnp.min(info.slack)) >= -2e-3
  # More sweeps get closer to the projection (one sweep is a plain cyclic projection).
  errors = [float(jnp.mean(jnp.linalg.norm(dykstra(n)[0] - exact, axis=1))) for n in (1, 10)]
  assert errors[0] > errors[1] > float(jnp.mean(jnp.linalg.norm(approx - exact, axis=1)))


def test_exact_projection_jacobian():
  A = f32([[-1.0, 0.0], [0.0, -1.0]])  # x <= 0.5, y <= 0.5
  b = f32([0.5, 0.5])
  jac_fn = jax.jit(jax.jacobian(lambda v: safety.polytope_project(v, A, b)[0]))
  jac = lambda u: jac_fn(f32(u))
  np.testing.assert_allclose(jac([0.0, 0.0]), np.eye(2), atol=1e-6)  # interior: identity
  np.testing.assert_allclose(jac([1.0, 0.0]), [[0, 0], [0, 1]], atol=1e-6)  # one active face
  np.testing.assert_allclose(jac([1.0, 2.0]), np.zeros((2, 2)), atol=1e-6)  # vertex
  # A slanted face: I - a a^T / |a|^2.
  a = np.array([-1.0, -2.0])
  jac_face = jax.jit(
    jax.jacobian(lambda v: safety.polytope_project(v, f32(a[None]), f32([1.0]))[0])
  )(f32([1.0, 1.0]))
  np.testing.assert_allclose(jac_face, np.eye(2) - np.outer(a, a) / (a @ a), atol=1e-5)


def test_polytope_projection_degenerate_and_infeasible_sets_stay_finite():
  # Duplicate rows (rank-deficient active sets) still give the right projection and gradient.
  A = f32([[-1.0, 0.0], [-1.0, 0.0], [-2.0, 0.0]])
  b = f32([0.5, 0.5, 1.0])
  x, info = jax.jit(safety.polytope_project)(f32([1.0, 0.3]), A, b)
  np.testing.assert_allclose(x, [0.5, 0.3], atol=1e-6)
  grad = jax.jit(jax.grad(lambda v: jnp.sum(safety.polytope_project(v, A, b)[0])))(f32([1.0, 0.3]))
  np.testing.assert_allclose(grad, [0.0, 1.0], atol=1e-6)
  # x >= 1 and x <= 0 cannot both hold: the least-violating candidate is returned.
  x, info = jax.jit(safety.polytope_project)(f32([0.5]), f32([[1.0], [-1.0]]), f32([-1.0, 0.0]))
  np.testing.assert_allclose(x, [0.5])  # the proposal itself violates least (by 0.5)
  assert not bool(info.intervened)
  np.testing.assert_allclose(jnp.min(info.slack), -0.5, atol=1e-6)


def test_polytope_bad_inputs():
  u, A, b = f32([0.0, 0.0]), jnp.ones((3, 2)), jnp.zeros(3)
  with pytest.raises(ValueError, match="method"):
    safety.polytope_project(u, A, b, method="osqp")
  with pytest.raises(ValueError, match="num_sweeps"):
    safety.polytope_project(u, A, b, method="dykstra", num_sweeps=0)
  with pytest.raises(ValueError, match="at most 12"):
    safety.polytope_project(u, jnp.ones((13, 2)), jnp.zeros(13))
  with pytest.raises(AssertionError):
    safety.polytope_project(u, A, jnp.zeros(4))
  with pytest.raises(AssertionError):
    safety.polytope_project(u, jnp.ones((3, 3)), b)
  with pytest.raises(AssertionError):
    safety.halfspace_project(u, f32([1.0, 0.0, 0.0]), f32(0.0))


def test_dalal_safety_layer_hand_computed_vector_and_most_violated_constraint():
  x, info = safety.dalal_safety_layer(f32([1.0, 0.0]), f32([[1.0, 0.0]]), f32([0.5]), f32([1.0]))
  np.testing.assert_allclose(x, [0.5, 0.0], rtol=1e-6)  # lambda = 0.5, c + g.a* = C
  np.testing.assert_allclose(info.slack, [0.0], atol=1e-7)
  assert bool(info.intervened)
  g = f32([[1.0, 0.0], [0.0, 2.0]])
  # lambda = [(1 + 0 - 0.5)/1, (2*1 + 0 - 0.5)/4] = [0.5, 0.375]: correct along row 0.
  x, info = safety.dalal_safety_layer(f32([1.0, 1.0]), g, f32([0.0, 0.0]), f32([0.5, 0.5]))
  np.testing.assert_allclose(x, [0.5, 1.0], rtol=1e-6)
  x, info = safety.dalal_safety_layer(f32([0.2, 0.1]), g, f32([0.0, 0.0]), f32([0.5, 0.5]))
  np.testing.assert_array_equal(x, f32([0.2, 0.1]))
  assert not bool(info.intervened)


def test_hierarchical_shield_satisfies_every_owned_constraint():
  m, d = 5, 2
  A, b, u = _random_polytopes(seed=11, batch=200, m=m, d=d)
  units = ((3,), (0, 4), (1, 2))
  shield = jax.jit(jax.vmap(functools.partial(safety.hierarchical_shield, units=units)))
  x, info = shield(f32(u), f32(A), f32(b))
  assert float(jnp.min(info.slack)) >= -1e-4
  owned = []
  for k, unit in enumerate(units):  # each unit leaves its own and its ancestors' rows satisfied
    owned.extend(unit)
    unit_slack = np.einsum("bmd,bd->bm", A[:, owned], np.asarray(info.unit_actions[:, k]))
    assert (unit_slack + b[:, owned]).min() >= -1e-4
  safe = np.all(np.einsum("bmd,bd->bm", A, u) + b >= 1e-4, axis=1)
  assert safe.any()
  np.testing.assert_array_equal(np.asarray(x)[safe], np.asarray(f32(u))[safe])
  assert not bool(jnp.any(info.intervened[safe]))
  changed = np.any(np.asarray(info.correction) != 0, axis=1)
  np.testing.assert_array_equal(np.any(np.asarray(info.intervened), axis=1), changed)


def test_hierarchical_shield_on_disjoint_coordinates_equals_joint_projection():
  rng = np.random.default_rng(5)
  batch = 128
  # Unit 0 constrains coordinate 0 only, unit 1 coordinates 1 and 2 only.
  A = np.zeros((batch, 4, 3))
  A[:, 0, 0] = rng.choice([-1.0, 1.0], size=batch) * rng.uniform(0.5, 2, size=batch)
  A[:, 1:, 1:] = rng.normal(size=(batch, 3, 2))
  z = rng.normal(size=(batch, 3))
  b = -np.einsum("bmd,bd->bm", A, z) + rng.uniform(0, 1, size=(batch, 4))
  u = rng.normal(scale=2.0, size=(batch, 3))
  x, info = jax.jit(
    jax.vmap(functools.partial(safety.hierarchical_shield, units=((0,), (1, 2, 3))))
  )(f32(u), f32(A), f32(b))
  joint, _ = jax.jit(jax.vmap(safety.polytope_project))(f32(u), f32(A), f32(b))
  np.testing.assert_allclose(x, joint, atol=1e-5)
  # Unit 0 intervenes exactly when its own row is violated by the proposal.
  own_violation = np.einsum("bd,bd->b", A[:, 0], u) + b[:, 0] < 0
  np.testing.assert_array_equal(np.asarray(info.intervened[:, 0]), own_violation)


@pytest.mark.parametrize(
  "units", [((0, 1),), ((0,), (0, 1)), ((0,), ()), ((0,), (1,), (5,)), (), ((0.0,), (1,))]
)
def test_hierarchical_shield_bad_units(units):
  with pytest.raises(ValueError, match="units"):
    safety.hierarchical_shield(f32([0.0, 0.0]), jnp.ones((3, 2)), jnp.zeros(3), units)
