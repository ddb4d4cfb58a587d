"""Tests for hrljax.losses.options (option-critic).

Golden values are computed by hand from the option-critic target (Bacon et al. 2017,
arXiv:1609.05140, Eq. 2-3: G = r + gamma * ((1 - beta) Q(s', w) + beta max_w' Q(s', w')) = 1.882
for the vector below) and from OTA's option terminals (Ahn et al. 2025, arXiv:2505.12737,
Section 4); other expected values are computed here in float64 NumPy, never by the functions
under test.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from hrljax.losses import options

GAMMA = 0.99
# The golden vector: option w = 0.
Q_S = np.array([1.0, 2.0, 0.5], np.float32)
Q_NEXT_TARGET = np.array([1.5, 0.8, 2.5], np.float32)
Q_NEXT_ONLINE_DOUBLE = np.array([1.4, 2.9, 2.4], np.float32)
Q_NEXT_ONLINE_TERM = np.array([1.4, 0.9, 2.4], np.float32)
BETA_NEXT = 0.3
REWARD = 0.1

JIT_OR_NOT = pytest.mark.parametrize("transform", [lambda f: f, jax.jit], ids=["nojit", "jit"])


def _f32(x):
  return jnp.asarray(x, jnp.float32)


# ---------------------------------------------------------------------------------------------
# Independent float64 NumPy references.


def _np_window_returns(r, d, b, end, n, truncated=None, beta=None, v=None):
  """Forward expansion of the option-aware n-step return, one window at a time."""
  r, d, b = (np.asarray(x, np.float64) for x in (r, d, b))
  num_steps = len(r)
  truncated = np.zeros(num_steps, bool) if truncated is None else np.asarray(truncated, bool)
  out = np.zeros(num_steps)
  for t in range(num_steps):
    total, weight, k = 0.0, 1.0, t
    while True:
      last = k == num_steps - 1 or bool(end[k]) or truncated[k] or k - t + 1 == n
      if beta is None:
        total += weight * r[k]
        if last:
          total += weight * d[k] * b[k]
          break
        weight *= d[k]
      else:
        total += weight * (r[k] + d[k] * beta[k] * v[k])
        if last:
          total += weight * d[k] * (1.0 - beta[k]) * b[k]
          break
        weight *= d[k] * (1.0 - beta[k])
      k += 1
    out[t] = total
  return out


def _random_trajectory(seed, num_steps=7, num_options=3):
  rng = np.random.default_rng(seed)
  return dict(
    r=rng.normal(size=num_steps).astype(np.float32),
    d=(GAMMA * (rng.uniform(size=num_steps) > 0.15)).astype(np.float32),
    q=rng.normal(size=(num_steps, num_options)).astype(np.float32),
    q_sel=rng.normal(size=(num_steps, num_options)).astype(np.float32),
    beta=rng.uniform(size=num_steps).astype(np.float32),
    option=np.repeat(rng.integers(0, num_options, size=(num_steps + 2) // 3), 3)[:num_steps].astype(
      np.int32
    ),
    end=rng.uniform(size=num_steps) < 0.25,
    truncated=rng.uniform(size=num_steps) < 0.15,
  )


# ---------------------------------------------------------------------------------------------
# The golden vector.


@JIT_OR_NOT
def test_golden_critic_target_and_l2_loss(transform):
  target_fn = transform(options.intra_option_q_target)
  g = target_fn(_f32(REWARD), _f32(GAMMA), _f32(Q_NEXT_TARGET), _f32(BETA_NEXT), jnp.int32(0))
  np.testing.assert_allclose(g, 1.882, rtol=1e-6)
  loss, extras = transform(options.option_critic_loss)(_f32(Q_S), jnp.int32(0), g)
  np.testing.assert_allclose(loss, 0.388962, rtol=1e-5)
  np.testing.assert_allclose(extras.td_error, 0.882, rtol=1e-5)
  np.testing.assert_allclose(extras.target, 1.882, rtol=1e-6)


def test_golden_double_q_target():
  g = options.intra_option_q_target(
    REWARD, GAMMA, _f32(Q_NEXT_TARGET), BETA_NEXT, 0, _f32(Q_NEXT_ONLINE_DOUBLE)
  )
  np.testing.assert_allclose(g, 1.3771, rtol=1e-6)


@JIT_OR_NOT
def test_golden_termination_losses(transform):
  fn = transform(options.termination_loss)
  # Reference-code form at s_t: V(s_t) = max Q(s_t) = 2.
  loss, extras = fn(_f32(0.4), _f32(Q_S[0]), _f32(Q_S.max()), 0.01)
  np.testing.assert_allclose(loss, -0.396, rtol=1e-6)
  np.testing.assert_allclose(extras.advantage, -1.0, rtol=1e-6)
  # Paper form at s': online Q(s', .) = [1.4, 0.9, 2.4].
  loss, _ = fn(_f32(BETA_NEXT), _f32(Q_NEXT_ONLINE_TERM[0]), _f32(Q_NEXT_ONLINE_TERM.max()), 0.01)
  np.testing.assert_allclose(loss, -0.297, rtol=1e-5)
  loss, _ = fn(_f32(BETA_NEXT), _f32(1.4), _f32(2.4), 0.01, _f32(0.0))  # done
  assert float(loss) == 0.0


@JIT_OR_NOT
def test_golden_policy_gradient_loss(transform):
  fn = transform(options.intra_option_pg_loss)
  logits = jnp.zeros(4)  # uniform: log pi = ln 0.25
  loss, extras = fn(logits, jnp.int32(2), _f32(1.882), _f32(1.0))
  np.testing.assert_allclose(loss, 1.222712, rtol=1e-6)
  np.testing.assert_allclose(extras.log_prob, np.log(0.25), rtol=1e-6)
  np.testing.assert_allclose(extras.entropy, 1.386294, rtol=1e-6)
  loss, _ = fn(logits, jnp.int32(2), _f32(1.882), _f32(1.0), 0.01)
  np.testing.assert_allclose(loss, 1.208849, rtol=1e-6)


@pytest.mark.parametrize(
  "mode, terminated, expected",
  [
    ("current", False, -0.396),
    ("next", False, -0.297),
    ("next", True, 0.0),
    ("current", True, 0.0),
  ],
)
def test_golden_trajectory_termination_picks_the_state(mode, terminated, expected):
  # One transition s_0 -> s_1 with option 0: beta(s_0) = 0.4, beta(s_1) = 0.3.
  beta = _f32([[0.4, 0.9, 0.9], [0.3, 0.9, 0.9]])
  q = _f32(np.stack([Q_S, Q_NEXT_ONLINE_TERM]))
  loss, extras = options.trajectory_termination_loss(
    beta,
    q,
    jnp.array([0], jnp.int32),
    jnp.array([terminated]),
    jnp.array([False]),
    0.01,
    state_for_termination=mode,
  )
  np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(extras.num_valid, 0.0 if terminated else 1.0)


# ---------------------------------------------------------------------------------------------
# One-step target: limits and episode ends.


def test_beta_one_is_q_learning_over_options():
  rng = np.random.default_rng(0)
  for _ in range(3):
    q_tm1, q_t, q_sel = (_f32(rng.normal(size=4)) for _ in range(3))
    r, d, w = _f32(rng.normal()), _f32(GAMMA), jnp.int32(rng.integers(4))
    g = options.intra_option_q_target(r, d, q_t, _f32(1.0), w)
    q_learning_target = rlax.q_learning(q_tm1, w, r, d, q_t) + q_tm1[w]
    np.testing.assert_allclose(g, q_learning_target, rtol=1e-6)
    g_double = options.intra_option_q_target(r, d, q_t, _f32(1.0), w, q_sel)
    double_target = rlax.double_q_learning(q_tm1, w, r, d, q_t, q_sel) + q_tm1[w]
    np.testing.assert_allclose(g_double, double_target, rtol=1e-6)


def test_beta_zero_bootstraps_from_the_same_option():
  g = options.intra_option_q_target(REWARD, GAMMA, _f32(Q_NEXT_TARGET), 0.0, 1)
  np.testing.assert_allclose(g, REWARD + GAMMA * 0.8, rtol=1e-6)


def test_termination_does_not_bootstrap_truncation_does():
  huge = _f32([1e6, -1e6, 3e6])
  terminated = options.intra_option_q_target(REWARD, 0.0, huge, BETA_NEXT, 0)
  np.testing.assert_allclose(terminated, REWARD)
  # Truncated: discount stays gamma, values come from the true final observation.
  truncated = options.intra_option_q_target(REWARD, GAMMA, _f32(Q_NEXT_TARGET), BETA_NEXT, 0)
  np.testing.assert_allclose(truncated, REWARD + GAMMA * (0.7 * 1.5 + 0.3 * 2.5), rtol=1e-6)


def test_critic_target_gradient():
  def target(q_t, stop):
    return options.intra_option_q_target(
      REWARD, GAMMA, q_t, BETA_NEXT, 0, stop_target_gradients=stop
    )

  grad_stopped = jax.grad(target)(_f32(Q_NEXT_TARGET), True)
  np.testing.assert_array_equal(grad_stopped, np.zeros(3))
  grad_free = jax.grad(target)(_f32(Q_NEXT_TARGET), False)
  # dG/dq_t = gamma [(1 - beta) e_w + beta e_argmax]; argmax = 2.
  np.testing.assert_allclose(grad_free, [GAMMA * 0.7, 0.0, GAMMA * 0.3], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Critic loss.


def test_critic_loss_gradients_and_huber():
  q_tm1 = _f32([1.0, 2.0, 0.5])

  def loss_fn(q, target, **kw):
    return options.option_critic_loss(q, jnp.int32(0), target, **kw)[0]

  # L2: dL/dq_w = -(G - q_w); the target gets no gradient.
  grad_q, grad_target = jax.grad(loss_fn, argnums=(0, 1))(q_tm1, _f32(1.882))
  np.testing.assert_allclose(grad_q, [-0.882, 0.0, 0.0], rtol=1e-5)
  assert float(grad_target) == 0.0
  # Huber (delta 1): quadratic inside, linear outside.
  small, _ = options.option_critic_loss(q_tm1, jnp.int32(0), _f32(1.5), loss_type="huber")
  np.testing.assert_allclose(small, 0.125, rtol=1e-6)
  large, _ = options.option_critic_loss(q_tm1, jnp.int32(0), _f32(4.0), loss_type="huber")
  np.testing.assert_allclose(large, 1.0 * (3.0 - 0.5), rtol=1e-6)
  large2, _ = options.option_critic_loss(
    q_tm1, jnp.int32(0), _f32(4.0), loss_type="huber", huber_delta=2.0
  )
  np.testing.assert_allclose(large2, 2.0 * (3.0 - 1.0), rtol=1e-6)
  grad_huber = jax.grad(functools.partial(loss_fn, loss_type="huber"))(q_tm1, _f32(4.0))
  np.testing.assert_allclose(grad_huber, [-1.0, 0.0, 0.0])
  # Without the stop, the target receives the opposite gradient.
  grad_target = jax.grad(functools.partial(loss_fn, stop_target_gradients=False), argnums=1)(
    q_tm1, _f32(1.882)
  )
  np.testing.assert_allclose(grad_target, 0.882, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Option-aware n-step returns and targets.


def test_n_step_returns_hand_case():
  # Option ends on arrival after transition 2; truncation after transition 4; terminal after 6.
  r = _f32([1, 2, 3, 4, 5, 6, 7])
  d = _f32([0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.0])
  b = _f32([10, 20, 30, 40, 50, 60, 1e6])
  end = jnp.array([0, 0, 1, 0, 0, 0, 0])
  truncated = jnp.array([0, 0, 0, 0, 1, 0, 0])
  g = options.option_aware_n_step_returns(r, d, b, end, 3, truncated_t=truncated)
  expected = [
    1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 30,  # stops at the option end
    2 + 0.5 * 3 + 0.25 * 30,
    3 + 0.5 * 30,
    4 + 0.5 * 5 + 0.25 * 50,  # stops at the truncation, bootstraps there
    5 + 0.5 * 50,
    6 + 0.5 * 7,  # terminal: no bootstrap after the last reward
    7.0,
  ]
  np.testing.assert_allclose(g, expected, rtol=1e-6)


@JIT_OR_NOT
@pytest.mark.parametrize("n", [1, 2, 3, 9])
def test_n_step_returns_match_numpy(transform, n):
  traj = _random_trajectory(seed=n)
  b, v = traj["q"][:, 0], traj["q"][:, 1]
  plain = transform(functools.partial(options.option_aware_n_step_returns, n=n))(
    _f32(traj["r"]),
    _f32(traj["d"]),
    _f32(b),
    jnp.asarray(traj["end"]),
    truncated_t=jnp.asarray(traj["truncated"]),
  )
  np.testing.assert_allclose(
    plain,
    _np_window_returns(traj["r"], traj["d"], b, traj["end"], n, traj["truncated"]),
    rtol=1e-5,
    atol=1e-6,
  )
  mixed = transform(functools.partial(options.option_aware_n_step_returns, n=n))(
    _f32(traj["r"]),
    _f32(traj["d"]),
    _f32(b),
    jnp.asarray(traj["end"]),
    truncated_t=jnp.asarray(traj["truncated"]),
    beta_t=_f32(traj["beta"]),
    v_t=_f32(v),
  )
  np.testing.assert_allclose(
    mixed,
    _np_window_returns(traj["r"], traj["d"], b, traj["end"], n, traj["truncated"], traj["beta"], v),
    rtol=1e-5,
    atol=1e-6,
  )


@pytest.mark.parametrize("n", [1, 3, 10])
def test_n_step_returns_without_option_ends_match_rlax(n):
  traj = _random_trajectory(seed=10 + n)
  r, d, v = _f32(traj["r"]), _f32(traj["d"]), _f32(traj["q"][:, 0])
  ours = options.option_aware_n_step_returns(r, d, v, jnp.zeros(7, bool), n)
  np.testing.assert_allclose(
    ours, rlax.n_step_bootstrapped_returns(r, d, v, n), rtol=1e-5, atol=1e-6
  )


@pytest.mark.parametrize("double", [False, True])
def test_n_step_target_with_n_one_is_the_one_step_target(double):
  traj = _random_trajectory(seed=3)
  q_sel = _f32(traj["q_sel"]) if double else None
  n_step = options.intra_option_n_step_targets(
    _f32(traj["r"]),
    _f32(traj["d"]),
    _f32(traj["q"]),
    _f32(traj["beta"]),
    jnp.asarray(traj["option"]),
    jnp.asarray(traj["end"]),
    1,
    truncated_t=jnp.asarray(traj["truncated"]),
    q_t_selector=q_sel,
  )
  selector_axis = None if q_sel is None else 0
  one_step = jax.vmap(options.intra_option_q_target, in_axes=(0, 0, 0, 0, 0, selector_axis))(
    _f32(traj["r"]),
    _f32(traj["d"]),
    _f32(traj["q"]),
    _f32(traj["beta"]),
    jnp.asarray(traj["option"]),
    q_sel,
  )
  np.testing.assert_allclose(n_step, one_step, rtol=1e-6)


def test_n_step_target_matches_numpy_and_stops_at_option_changes():
  traj = _random_trajectory(seed=5)
  traj["d"] = np.full(7, GAMMA, np.float32)
  q = traj["q"].astype(np.float64)
  option = np.array([0, 0, 0, 2, 2, 1, 1], np.int32)
  end = np.array([0, 0, 0, 0, 0, 0, 1], bool)  # no flag where the option changes
  b = q[np.arange(7), option]
  v = q.max(axis=1)
  changes = np.array([0, 0, 1, 0, 1, 0, 0], bool)
  expected = _np_window_returns(traj["r"], traj["d"], b, end | changes, 4, None, traj["beta"], v)
  got = options.intra_option_n_step_targets(
    _f32(traj["r"]),
    _f32(traj["d"]),
    _f32(q),
    _f32(traj["beta"]),
    jnp.asarray(option),
    jnp.asarray(end),
    4,
  )
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  ignoring_changes = _np_window_returns(traj["r"], traj["d"], b, end, 4, None, traj["beta"], v)
  assert np.abs(ignoring_changes - expected).max() > 1e-3


def test_n_step_target_gradients():
  traj = _random_trajectory(seed=7)

  def total(q_t, stop):
    return jnp.sum(
      options.intra_option_n_step_targets(
        _f32(traj["r"]),
        _f32(traj["d"]),
        q_t,
        _f32(traj["beta"]),
        jnp.asarray(traj["option"]),
        jnp.asarray(traj["end"]),
        3,
        stop_target_gradients=stop,
      )
    )

  q = _f32(traj["q"])
  np.testing.assert_array_equal(jax.grad(total)(q, True), np.zeros_like(traj["q"]))
  assert np.abs(jax.grad(total)(q, False)).sum() > 0.0


def test_segment_ends_reproduce_ota_option_terminals():
  # OTA's terminals, n = 5, traj_end = 100: transitions 0..99, option_end[k] = (k + 1 == goal).
  def option_terminal(i, goal):
    flags = jnp.zeros(100, bool) if goal is None else jnp.zeros(100, bool).at[goal - 1].set(True)
    return int(options.option_segment_ends(flags, 5)[i]) + 1

  assert option_terminal(10, 40) == 15
  assert option_terminal(10, 12) == 12  # early termination at the goal
  assert option_terminal(97, None) == 100  # random goal: timeout clipped at the trajectory end


def test_segment_ends_brute_force():
  rng = np.random.default_rng(1)
  end, episode_end = rng.uniform(size=12) < 0.2, rng.uniform(size=12) < 0.1
  for n in (1, 2, 4, 20):
    got = options.option_segment_ends(jnp.asarray(end), n, episode_end_t=jnp.asarray(episode_end))
    for t in range(12):
      k = t
      while not (k == 11 or end[k] or episode_end[k] or k - t + 1 == n):
        k += 1
      assert int(got[t]) == k, (n, t)
    assert got.dtype == jnp.int32


# ---------------------------------------------------------------------------------------------
# Termination and policy gradients.


def test_termination_gradient_only_into_beta():
  def loss(beta, q_option, v, xi=0.01):
    return options.termination_loss(beta, q_option, v, xi)[0]

  grads = jax.grad(loss, argnums=(0, 1, 2))(_f32(0.3), _f32(1.4), _f32(2.4))
  np.testing.assert_allclose(grads[0], 1.4 - 2.4 + 0.01, rtol=1e-5)
  assert float(grads[1]) == 0.0 and float(grads[2]) == 0.0
  # Greedy option: A = 0, the gradient is +xi and descent pushes beta down.
  grad_greedy = jax.grad(loss)(_f32(0.3), _f32(2.4), _f32(2.4))
  np.testing.assert_allclose(grad_greedy, 0.01, rtol=1e-5)


@pytest.mark.parametrize("mode", ["next", "current"])
def test_trajectory_termination_matches_numpy(mode):
  rng = np.random.default_rng(2)
  num_steps, num_options = 6, 3
  beta = rng.uniform(size=(num_steps + 1, num_options)).astype(np.float32)
  q = rng.normal(size=(num_steps + 1, num_options)).astype(np.float32)
  probs = rng.dirichlet(np.ones(num_options), size=num_steps + 1).astype(np.float32)
  option = rng.integers(0, num_options, size=num_steps).astype(np.int32)
  terminated = np.array([0, 0, 1, 0, 0, 0], bool)
  truncated = np.array([0, 0, 0, 0, 1, 0], bool)
  v = (probs * q).sum(axis=1)
  loss, extras = options.trajectory_termination_loss(
    _f32(beta),
    _f32(q),
    jnp.asarray(option),
    jnp.asarray(terminated),
    jnp.asarray(truncated),
    0.05,
    v=_f32(v),
    state_for_termination=mode,
  )
  idx = np.arange(num_steps) + (1 if mode == "next" else 0)
  mask = ~(terminated | truncated)
  per_step = beta[idx, option] * (q[idx, option] - v[idx] + 0.05) * mask
  np.testing.assert_allclose(extras.per_step_loss, per_step, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(extras.loss_sum, per_step.sum(), rtol=1e-5)
  np.testing.assert_allclose(extras.num_valid, mask.sum())
  np.testing.assert_allclose(loss, per_step.sum() / mask.sum(), rtol=1e-5)
  grad_q = jax.grad(
    lambda q_: options.trajectory_termination_loss(
      _f32(beta),
      q_,
      jnp.asarray(option),
      jnp.asarray(terminated),
      jnp.asarray(truncated),
      0.05,
      state_for_termination=mode,
    )[0]
  )(_f32(q))
  np.testing.assert_array_equal(grad_q, np.zeros_like(q))


def test_policy_gradient_gradients():
  logits = _f32([0.2, -0.5, 1.0])
  action, target, baseline, coef = jnp.int32(1), _f32(2.0), _f32(0.5), 0.1

  def loss(logits_, target_, baseline_):
    return options.intra_option_pg_loss(logits_, action, target_, baseline_, coef)[0]

  g_logits, g_target, g_baseline = jax.grad(loss, argnums=(0, 1, 2))(logits, target, baseline)
  p = np.exp(np.float64(logits)) / np.exp(np.float64(logits)).sum()
  entropy = -(p * np.log(p)).sum()
  one_hot = np.eye(3)[1]
  # d(-A log p_a)/dz = -A (e_a - p); d(-c H)/dz = c p (log p + H).
  expected = -1.5 * (one_hot - p) + coef * p * (np.log(p) + entropy)
  np.testing.assert_allclose(g_logits, expected, rtol=1e-5, atol=1e-7)
  assert float(g_target) == 0.0 and float(g_baseline) == 0.0
  # No baseline (jeanharb default): -log pi(a) * G.
  no_baseline, _ = options.intra_option_pg_loss(logits, action, target, _f32(0.0))
  np.testing.assert_allclose(no_baseline, -np.log(p[1]) * 2.0, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Policy over options.


def test_option_probabilities_and_values():
  q = _f32([1.0, 3.0, 3.0, 0.0])
  np.testing.assert_allclose(options.epsilon_greedy_option_probs(q, 0.0), [0, 0.5, 0.5, 0])
  np.testing.assert_allclose(options.epsilon_greedy_option_probs(q, 1.0), [0.25] * 4)
  np.testing.assert_allclose(
    options.epsilon_greedy_option_probs(_f32([1.0, 2.0, 0.5]), 0.1),
    [0.1 / 3, 0.9 + 0.1 / 3, 0.1 / 3],
    rtol=1e-6,
  )
  e = np.exp(np.array([1.0, 3.0, 3.0, 0.0]) / 2.0)
  np.testing.assert_allclose(options.softmax_option_probs(q, 2.0), e / e.sum(), rtol=1e-6)
  np.testing.assert_allclose(options.value_over_options(q), 3.0)
  np.testing.assert_allclose(
    options.value_over_options(q, _f32([0.1, 0.2, 0.3, 0.4])), 0.1 + 0.6 + 0.9, rtol=1e-6
  )


def test_sampling_options():
  probs = _f32([0.2, 0.0, 0.8])
  keys = jax.random.split(jax.random.PRNGKey(0), 2000)
  draws = np.asarray(jax.jit(jax.vmap(options.sample_option, in_axes=(0, None)))(keys, probs))
  assert (draws != 1).all()
  assert abs((draws == 2).mean() - 0.8) < 0.04  # > 4 standard errors
  key = jax.random.PRNGKey(1)
  assert int(options.sample_option(key, probs)) == int(options.sample_option(key, probs))

  select = jax.jit(options.select_option)
  greedy_other = _f32([0.0, 0.0, 1.0])
  option, switched = select(key, jnp.int32(0), _f32(0.0), greedy_other)
  assert int(option) == 0 and not bool(switched)
  option, switched = select(key, jnp.int32(0), _f32(1.0), greedy_other)
  assert int(option) == 2 and bool(switched)
  option, switched = select(key, jnp.int32(0), _f32(0.0), greedy_other, True)
  assert int(option) == 2 and bool(switched)
  switched = jax.jit(jax.vmap(options.select_option, in_axes=(0, None, None, None)))(
    keys, jnp.int32(0), _f32(0.3), greedy_other
  )[1]
  assert abs(float(switched.mean()) - 0.3) < 0.05  # > 4 standard errors


def test_nan_option_values_give_nan_probabilities():
  probs = options.epsilon_greedy_option_probs(_f32([1.0, np.nan, 0.0]), 0.1)
  assert np.all(np.isnan(np.asarray(probs)))
  # +-Inf values keep a well-defined greedy option.
  np.testing.assert_allclose(
    options.epsilon_greedy_option_probs(_f32([1.0, np.inf, -np.inf]), 0.4),
    [0.4 / 3, 0.6 + 0.4 / 3, 0.4 / 3],
    rtol=1e-6,
  )


def test_sample_option_returns_the_sentinel_when_the_probabilities_are_not_a_distribution():
  sample = jax.jit(jax.vmap(options.sample_option, in_axes=(0, None)))
  keys = jax.random.split(jax.random.PRNGKey(3), 64)
  for bad in ([0.5, np.nan, 0.5], [0.0, 0.0, 0.0], [1.2, -0.2, 0.0]):
    np.testing.assert_array_equal(sample(keys, _f32(bad)), 3)  # O = 3 options: out of range
  draws = np.asarray(sample(keys, _f32([0.0, 1.0, 0.0])))
  np.testing.assert_array_equal(draws, 1)
  # The sentinel is out of range on purpose: a gather in the default mode turns it into NaN.
  assert np.isnan(
    float(jnp.take(_f32([1.0, 2.0, 3.0]), options.sample_option(keys[0], _f32([np.nan] * 3))))
  )


def test_select_option_with_nan_inputs_returns_the_sentinel_or_the_unaffected_option():
  select = jax.jit(options.select_option)
  key = jax.random.PRNGKey(4)
  probs, nan_probs = _f32([0.0, 0.0, 1.0]), _f32([np.nan, 0.5, 0.5])
  nan = _f32(np.nan)
  # A NaN termination probability: whether the option ends is unknown.
  option, switched = select(key, jnp.int32(1), nan, probs)
  assert (int(option), bool(switched)) == (3, True)
  # ... unless a new option must be drawn anyway.
  option, switched = select(key, jnp.int32(1), nan, probs, True)
  assert (int(option), bool(switched)) == (2, True)
  # NaN probabilities matter only when a new option is drawn.
  option, switched = select(key, jnp.int32(1), _f32(1.0), nan_probs)
  assert (int(option), bool(switched)) == (3, True)
  option, switched = select(key, jnp.int32(1), _f32(0.0), nan_probs)
  assert (int(option), bool(switched)) == (1, False)


# ---------------------------------------------------------------------------------------------
# Bad inputs.


def test_bad_python_arguments_raise_value_error():
  q = _f32(Q_S)
  with pytest.raises(ValueError, match="loss_type: expected one of"):
    options.option_critic_loss(q, jnp.int32(0), _f32(1.0), loss_type="mse")
  with pytest.raises(ValueError, match="huber_delta: expected a finite float > 0"):
    options.option_critic_loss(q, jnp.int32(0), _f32(1.0), loss_type="huber", huber_delta=0.0)
  with pytest.raises(ValueError, match=r"xi: expected a finite float >= 0.0, got -1.0"):
    options.termination_loss(_f32(0.3), _f32(1.0), _f32(2.0), -1.0)
  with pytest.raises(ValueError, match="entropy_coef"):
    options.intra_option_pg_loss(jnp.zeros(3), jnp.int32(0), _f32(1.0), _f32(0.0), float("nan"))
  with pytest.raises(ValueError, match="epsilon: expected a finite float >= 0.0 and <= 1.0"):
    options.epsilon_greedy_option_probs(q, 1.5)
  with pytest.raises(ValueError, match="temperature: expected a finite float > 0"):
    options.softmax_option_probs(q, 0.0)
  traj = dict(
    r_t=jnp.zeros(4),
    discount_t=jnp.ones(4),
    bootstrap_t=jnp.zeros(4),
    option_end_t=jnp.zeros(4, bool),
  )
  for bad_n in (0, 2.0, True):
    with pytest.raises(ValueError, match="n: expected a Python int >= 1"):
      options.option_aware_n_step_returns(**traj, n=bad_n)
  with pytest.raises(ValueError, match="beta_t, v_t: expected both"):
    options.option_aware_n_step_returns(**traj, n=2, beta_t=jnp.zeros(4))
  with pytest.raises(ValueError, match="state_for_termination: expected one of"):
    options.trajectory_termination_loss(
      jnp.zeros((3, 2)),
      jnp.zeros((3, 2)),
      jnp.zeros(2, jnp.int32),
      jnp.zeros(2, bool),
      jnp.zeros(2, bool),
      0.0,
      state_for_termination="now",
    )


def test_bad_shapes_and_dtypes_raise_assertion_error():
  with pytest.raises(AssertionError):  # option must be an int
    options.intra_option_q_target(REWARD, GAMMA, _f32(Q_NEXT_TARGET), BETA_NEXT, 0.0)
  with pytest.raises(AssertionError):  # q_t must be rank 1
    options.intra_option_q_target(REWARD, GAMMA, _f32(Q_NEXT_TARGET)[None], BETA_NEXT, 0)
  with pytest.raises(AssertionError):  # selector shape mismatch
    options.intra_option_q_target(REWARD, GAMMA, _f32(Q_NEXT_TARGET), BETA_NEXT, 0, jnp.zeros(4))
  with pytest.raises(AssertionError):  # rewards must be float
    options.option_aware_n_step_returns(
      jnp.zeros(4, jnp.int32), jnp.ones(4), jnp.zeros(4), jnp.zeros(4, bool), 2
    )
  with pytest.raises(AssertionError):  # mismatched lengths
    options.option_aware_n_step_returns(
      jnp.zeros(4), jnp.ones(5), jnp.zeros(4), jnp.zeros(4, bool), 2
    )
  with pytest.raises(AssertionError, match="expected 3 states for 2 transitions"):
    options.trajectory_termination_loss(
      jnp.zeros((2, 2)),
      jnp.zeros((2, 2)),
      jnp.zeros(2, jnp.int32),
      jnp.zeros(2, bool),
      jnp.zeros(2, bool),
      0.0,
    )
  with pytest.raises(AssertionError):  # the action must be an int
    options.intra_option_pg_loss(jnp.zeros(3), 1.0, _f32(1.0), _f32(0.0))
  with pytest.raises(AssertionError):  # q_t of the n-step target must be [T, O]
    options.intra_option_n_step_targets(
      jnp.zeros(4),
      jnp.ones(4),
      jnp.zeros(4),
      jnp.zeros(4),
      jnp.zeros(4, jnp.int32),
      jnp.zeros(4, bool),
      2,
    )
