"""Dual RL (f-DVL) and SMORe losses of `hrljax.losses.goal_conditioned`.

Conjugates against a numerical sup over a grid, hand-computed loss vectors, NumPy renderings of
the authors' formulas (`hari-sikchi/DVL` `offline/critic.py` and `offline/actor.py`,
`hari-sikchi/SMORe` `critic_gcrl.py` and `actor.py`) on random batches, the semi-gradient, a
tabular check that the minimiser of the dual-V objective gives a visitation that satisfies the
Bellman-flow constraints with no duality gap, and hostile inputs (NaN / Inf / wrong rank / bad
options) by the rules of `test_hostile_inputs.py`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import goal_conditioned as gc

# ---------------------------------------------------------------------------------- conjugates


def numerical_conjugate(y, divergence, nonnegative):
  """sup_t (t·y − f(t)) on a fine grid of t (t >= 0, or t in [−20, 20])."""
  t = np.linspace(0.0 if nonnegative else -20.0, 20.0, 400_001)
  f = np.asarray(gc.dual_f(jnp.asarray(t, jnp.float32), divergence), np.float64)
  values = t[None, :] * np.asarray(y)[:, None] - f[None, :]
  return values.max(axis=1), t[values.argmax(axis=1)]


@pytest.mark.parametrize(
  "divergence, ys",
  [
    ("chi_square", [-3.0, -1.0, 0.0, 0.5, 2.0]),
    ("total_variation", [-0.4, -0.1, 0.0, 0.3]),
    ("kl", [-1.0, 0.0, 0.5, 2.0]),
  ],
)
@pytest.mark.parametrize("nonnegative", [True, False])
def test_conjugate_and_ratio_match_the_numerical_sup_and_argmax(divergence, ys, nonnegative):
  sup, argmax = numerical_conjugate(ys, divergence, nonnegative)
  y = jnp.asarray(ys, jnp.float32)
  np.testing.assert_allclose(gc.dual_conjugate(y, divergence, nonnegative), sup, atol=2e-4)
  if divergence != "total_variation":  # TV's argmax is an interval at the grid's kinks
    np.testing.assert_allclose(gc.dual_ratio(y, divergence, nonnegative), argmax, atol=2e-3)


def test_chi_square_and_kl_conjugates_at_hand_values():
  y = jnp.asarray([-1.0, 0.0, 0.5, 2.0])
  np.testing.assert_allclose(
    gc.dual_conjugate(y, "chi_square", nonnegative=False), [-0.75, 0.0, 0.5625, 3.0], atol=1e-6
  )
  # The nonnegative conjugate equals f* for y >= −2 and is −f(0) = −1 below.
  np.testing.assert_allclose(
    gc.dual_conjugate(jnp.asarray([-3.0, -2.0, 1.0]), "chi_square"), [-1.0, -1.0, 1.25], atol=1e-6
  )
  np.testing.assert_allclose(
    gc.dual_conjugate(jnp.asarray([0.0, 2.0]), "kl"), [0.367879, 2.718282], atol=1e-6
  )


def test_total_variation_conjugate_is_infinite_outside_its_domain():
  y = jnp.asarray([-0.7, 0.6])
  assert np.isinf(np.asarray(gc.dual_conjugate(y, "total_variation", nonnegative=False))).all()
  np.testing.assert_allclose(gc.dual_conjugate(y[:1], "total_variation"), [-0.5])
  assert np.isinf(float(gc.dual_conjugate(y[1:], "total_variation")[0]))
  np.testing.assert_array_equal(gc.dual_ratio(jnp.asarray([-0.7, 0.2]), "total_variation"), [0, 1])


@pytest.mark.parametrize("divergence", ["chi_square", "kl"])
def test_ratio_is_the_derivative_of_the_conjugate(divergence):
  y = jnp.asarray([-2.5, -0.7, 0.0, 0.4, 1.3])
  grad = jax.vmap(jax.grad(lambda x: gc.dual_conjugate(x, divergence)))(y)
  np.testing.assert_allclose(grad, gc.dual_ratio(y, divergence), atol=1e-6)


# -------------------------------------------------------------------------------- dual-V loss


def test_dual_v_loss_hand_values_and_semi_gradient():
  v_tm1 = jnp.asarray([0.0, 1.0, -1.0])
  v_t = jnp.asarray([1.0, 0.5, 0.0])
  r = jnp.asarray([1.0, -1.0, 0.0])
  disc = jnp.asarray([0.5, 0.5, 0.0])
  v_init = jnp.asarray([2.0])
  loss, extras = gc.dual_v_loss(v_tm1, v_t, r, disc, v_init, gamma=0.5, alpha=2.0)
  # δ = [1.5, −1.75, 1]; δ/α = [0.75, −0.875, 0.5]; f*_p = [0.890625, −0.6835938, 0.5625]
  np.testing.assert_allclose(extras.residual, [1.5, -1.75, 1.0], atol=1e-6)
  np.testing.assert_allclose(extras.ratio, [1.375, 0.5625, 1.25], atol=1e-6)
  expected = 0.5 * 2.0 + 2.0 * np.mean([0.890625, -0.68359375, 0.5625])
  np.testing.assert_allclose(loss, expected, atol=1e-6)

  def grad_next(semi):
    fn = lambda vt: gc.dual_v_loss(v_tm1, vt, r, disc, v_init, 0.5, 2.0, semi_gradient=semi)[0]
    return np.asarray(jax.grad(fn)(v_t))

  np.testing.assert_array_equal(grad_next(True), 0.0)
  # Without the stop: ∂/∂V(s') = α·mean(ratio·γ·m/α) per row, nonzero where γ·m ≠ 0.
  np.testing.assert_allclose(grad_next(False), [1.375 * 0.5 / 3, 0.5625 * 0.5 / 3, 0.0], atol=1e-6)


# A deterministic 3-state, 2-action MDP: next state and reward of each (s, a); d^O uniform over
# the six pairs, d0 = state 0.
NEXT = np.array([[1, 2], [2, 0], [2, 1]])
REWARD = np.array([[0.0, 0.2], [0.0, 1.0], [0.5, 0.0]])
GAMMA, ALPHA = 0.9, 0.5


@pytest.mark.parametrize("divergence", ["chi_square", "kl"])
def test_tabular_dual_minimiser_gives_a_feasible_visitation_without_duality_gap(divergence):
  """At the minimiser V*, d = d^O·t*(δ/α) satisfies the Bellman-flow constraints and
  E_d[r] − α·D_f(d ‖ d^O) equals the dual value (strong duality); both fail away from V*."""
  import scipy.optimize  # here, not at module level: collection would import it on every worker

  s = np.repeat(np.arange(3), 2)
  nxt, rew = NEXT.reshape(-1), REWARD.reshape(-1)

  with jax.enable_x64(True):

    def loss(v, semi=False):
      v = jnp.asarray(v)
      return gc.dual_v_loss(
        v[s],
        v[nxt],
        jnp.asarray(rew),
        jnp.full(6, GAMMA),
        v[:1],
        GAMMA,
        ALPHA,
        divergence,
        semi_gradient=semi,
      )

    value_and_grad = jax.jit(jax.value_and_grad(lambda v: loss(v)[0]))
    fun = lambda v: tuple(np.asarray(x, np.float64) for x in value_and_grad(v))
    result = scipy.optimize.minimize(fun, np.zeros(3), jac=True, method="BFGS", tol=1e-12)

    def gap_and_flow(v):
      dual_value, extras = loss(v)
      ratio = np.asarray(extras.ratio)
      d = ratio / 6.0  # d^O(s, a) = 1/6
      inflow = np.zeros(3)
      np.add.at(inflow, nxt, GAMMA * d)
      inflow[0] += 1.0 - GAMMA
      outflow = np.bincount(s, weights=d, minlength=3)
      f = np.asarray(gc.dual_f(jnp.asarray(ratio), divergence))
      primal = np.sum(d * rew) - ALPHA * np.mean(f)
      return float(dual_value) - primal, outflow - inflow

    gap, flow = gap_and_flow(result.x)
    np.testing.assert_allclose(flow, 0.0, atol=1e-6)
    np.testing.assert_allclose(gap, 0.0, atol=1e-6)
    far_gap, far_flow = gap_and_flow(result.x + np.array([0.3, -0.2, 0.1]))
    assert far_gap > 1e-3 and np.abs(far_flow).max() > 1e-3
    # The semi-gradient's fixed point is another V (its gradient is not the dual's).
    semi_grad = jax.grad(lambda v: loss(v, semi=True)[0])(jnp.asarray(result.x))
    assert np.abs(np.asarray(semi_grad)).max() > 1e-3


# ------------------------------------------------------------------- f-DVL (authors' formulas)


def reference_dvl_value_loss(q1, q2, v, f, loss_temp, max_clip):
  """NumPy rendering of `offline/critic.py:update_v` (double Q: the minimum of the heads)."""
  diff = np.minimum(q1, q2) - v
  if f == "chi_square":
    loss = loss_temp * np.maximum(diff + diff**2 / 4, 0) - (1 - loss_temp) * diff
  elif f == "total_variation":
    loss = loss_temp * np.maximum(diff, 0) - (1 - loss_temp) * diff
  else:
    z = np.minimum(diff / loss_temp, max_clip)
    max_z = max(z.max(), -1.0)
    loss = np.exp(z - max_z) - z * np.exp(-max_z) - np.exp(-max_z)
  return loss.mean()


def reference_huber(x, delta):
  quadratic = np.minimum(np.abs(x), delta)
  return 0.5 * quadratic**2 + delta * (np.abs(x) - quadratic)


def test_fdvl_value_loss_hand_values():
  q = jnp.asarray([[1.0, 2.0], [0.0, 0.5], [-3.0, 1.0]])
  v = jnp.asarray([0.0, 1.0, -1.0])  # y = [1, −1, −2]
  loss, extras = gc.fdvl_value_loss(q, v, "chi_square", lam=0.8)
  np.testing.assert_allclose(extras.diff, [1.0, -1.0, -2.0])
  np.testing.assert_allclose(extras.loss_per_example, [0.8, 0.2, 0.4], atol=1e-6)
  np.testing.assert_allclose(loss, 1.4 / 3, atol=1e-6)
  np.testing.assert_allclose(
    gc.fdvl_value_loss(q, v, "total_variation", lam=0.8)[0], 0.4, atol=1e-6
  )
  # Without the code's clip at 0: λ·f*_p(y) − (1 − λ)·y = [0.8, −0.4, −0.4].
  np.testing.assert_allclose(
    gc.fdvl_value_loss(q, v, "chi_square", lam=0.8, clip_at_zero=False)[0], 0.0, atol=1e-6
  )
  # Gumbel, β = 1, max z = 1: [1 − 2/e, e^−2, e^−3 + e^−1].
  e = np.e
  np.testing.assert_allclose(
    gc.fdvl_value_loss(q, v, "reverse_kl")[0], np.mean([1 - 2 / e, e**-2, e**-3 + 1 / e]), atol=1e-6
  )


@pytest.mark.parametrize(
  "divergence, kw",
  [
    ("chi_square", {"lam": 1.0}),
    ("chi_square", {"lam": 0.8}),
    ("total_variation", {"lam": 0.8}),
    ("reverse_kl", {"temperature": 0.8, "max_clip": 5.0}),
    ("reverse_kl", {"temperature": 0.3, "max_clip": 2.0}),
  ],
)
def test_fdvl_value_loss_matches_the_authors_formula_on_random_batches(divergence, kw):
  rng = np.random.default_rng(0)
  for batch in (3, 17):
    q1, q2, v = (rng.normal(scale=2.0, size=batch) for _ in range(3))
    q = jnp.asarray(np.stack([q1, q2], -1), jnp.float32)
    loss, _ = gc.fdvl_value_loss(q, jnp.asarray(v, jnp.float32), divergence, **kw)
    loss_temp = kw.get("lam", kw.get("temperature"))
    expected = reference_dvl_value_loss(q1, q2, v, divergence, loss_temp, kw.get("max_clip"))
    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)


def test_fdvl_value_loss_trains_only_v():
  q = jnp.asarray([[1.0, 2.0], [0.0, 0.5]])
  v = jnp.asarray([0.0, 1.0])
  for divergence in ("chi_square", "total_variation", "reverse_kl"):
    loss = lambda q, v, f=divergence: gc.fdvl_value_loss(q, v, f, lam=0.8)[0]
    dq, dv = jax.grad(loss, (0, 1))(q, v)
    np.testing.assert_array_equal(dq, 0.0)
    assert np.abs(np.asarray(dv)).max() > 0


def test_fdvl_critic_loss_hand_values_and_no_gradient_into_the_next_value():
  q = jnp.asarray([[1.0, 2.0], [0.0, 30.0]])
  v_t, r, disc = jnp.asarray([1.0, 0.0]), jnp.asarray([0.5, 1.0]), jnp.asarray([0.9, 0.0])
  loss, extras = gc.fdvl_critic_loss(q, v_t, r, disc)
  np.testing.assert_allclose(extras.targets, [1.4, 1.0], atol=1e-6)
  # Huber δ = 20: head 0 (0.08 + 0.5)/2, head 1 (0.18 + 200 + 20·9)/2.
  np.testing.assert_allclose(loss, 0.29 + 190.09, rtol=1e-6)
  np.testing.assert_allclose(
    gc.fdvl_critic_loss(q, v_t, r, disc, None)[0], 0.29 + 210.34, rtol=1e-6
  )
  grad = jax.grad(lambda x: gc.fdvl_critic_loss(q, x, r, disc)[0])(v_t)
  np.testing.assert_array_equal(grad, 0.0)

  rng = np.random.default_rng(1)
  q, v_t, r = rng.normal(scale=15, size=(9, 2)), rng.normal(size=9), rng.normal(size=9)
  mask = rng.uniform(size=9) < 0.8
  expected = sum(reference_huber(q[:, i] - (r + 0.99 * mask * v_t), 20.0).mean() for i in range(2))
  got = gc.fdvl_critic_loss(*(jnp.asarray(x, jnp.float32) for x in (q, v_t, r, 0.99 * mask)))[0]
  np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_fdvl_actor_loss_awr_and_ratio_weights():
  log_prob = jnp.asarray([-1.0, -2.0, -0.5])
  q = jnp.asarray([[1.0, 2.0], [0.0, 0.5], [-3.0, 1.0]])
  v = jnp.asarray([0.0, 1.0, -1.0])  # y = [1, −1, −2]
  loss, extras = gc.fdvl_actor_loss(log_prob, q, v, temperature=0.1)
  weights = np.minimum(np.exp(0.1 * np.array([1.0, -1.0, -2.0])), 100.0)
  np.testing.assert_allclose(extras.weights, weights, rtol=1e-6)
  np.testing.assert_allclose(loss, -np.mean(weights * np.array([-1.0, -2.0, -0.5])), rtol=1e-6)
  loss, extras = gc.fdvl_actor_loss(log_prob, q, v, weighting="ratio")
  np.testing.assert_allclose(extras.weights, [1.5, 0.5, 0.0])  # max(1 + y/2, 0)
  np.testing.assert_allclose(loss, -(1.5 * -1.0 + 0.5 * -2.0) / 3, rtol=1e-6)
  grad = jax.grad(lambda q, v: gc.fdvl_actor_loss(log_prob, q, v)[0], (0, 1))(q, v)
  for g in grad:
    np.testing.assert_array_equal(g, 0.0)


# -------------------------------------------------------------------- SMORe (authors' formulas)


def reference_smore_critic_loss(q, next_v, discount, stable):
  """NumPy rendering of `critic_gcrl.py:update_q_smore_stable` / `update_q_smore` for one head
  on the code's concatenated batch (data half first, goal-transition half second)."""
  half = q.shape[0] // 2
  neg_r = -2
  if stable:
    target = neg_r + discount * next_v
    return (
      ((q[half:] + neg_r / (1 - discount)) ** 2).mean()
      + (1 - discount) * 1e-4 * (q[:half] ** 2).mean()
      + 0.5 * ((q[:half] - target[:half]) ** 2).mean()
    )
  target = discount * next_v
  return -q[half:].mean() + 1e-4 * q[:half].mean() + 0.5 * ((q[:half] - target[:half]) ** 2).mean()


def test_smore_score_loss_hand_values():
  s_data, s_goal, m_t = jnp.asarray([[1.0], [2.0]]), jnp.asarray([[3.0]]), jnp.asarray([2.0, -2.0])
  loss, extras = gc.smore_score_loss(s_data, s_goal, m_t, 0.5, regularizer=0.1)
  np.testing.assert_allclose(extras.targets, [-1.0, -3.0])
  np.testing.assert_allclose(
    [extras.goal_term, extras.regularizer_term, extras.bellman_term], [1.0, 0.125, 7.25], atol=1e-6
  )
  np.testing.assert_allclose(loss, 8.375, atol=1e-6)
  loss, extras = gc.smore_score_loss(s_data, s_goal, m_t, 0.5, "original", regularizer=0.1)
  np.testing.assert_allclose(extras.targets, [1.0, -1.0])
  np.testing.assert_allclose(loss, -3.0 + 0.15 + 2.25, atol=1e-6)


@pytest.mark.parametrize("variant", ["stable", "original"])
def test_smore_score_loss_matches_the_authors_formula_on_random_batches(variant):
  rng = np.random.default_rng(2)
  for half in (2, 7):
    q = rng.normal(scale=3.0, size=(2 * half, 2))
    next_v = rng.normal(scale=3.0, size=2 * half)
    expected = sum(
      reference_smore_critic_loss(q[:, i], next_v, 0.99, variant == "stable") for i in range(2)
    )
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    got = gc.smore_score_loss(f32(q[:half]), f32(q[half:]), f32(next_v[:half]), 0.99, variant)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_smore_value_and_actor_losses_match_the_authors_formulas():
  rng = np.random.default_rng(3)
  s, m = rng.normal(size=(11, 2)), rng.normal(size=11)
  log_prob = -rng.uniform(0.1, 3.0, size=11)
  diff = s.min(-1) - m
  weight = np.where(diff > 0, 0.8, 0.2)
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  np.testing.assert_allclose(
    gc.smore_value_loss(f32(s), f32(m)), np.mean(weight * diff**2), rtol=1e-5
  )
  exp_a = np.minimum(np.exp(diff * 3.0), 100.0)
  loss, extras = gc.smore_actor_loss(f32(log_prob), f32(s), f32(m))
  np.testing.assert_allclose(loss, -np.mean(exp_a * log_prob), rtol=1e-5)
  # The extraction weight is monotone in S − M.
  order = np.argsort(diff)
  assert np.all(np.diff(np.asarray(extras.weights)[order]) >= 0)


def test_smore_losses_train_only_their_own_network():
  s_data, s_goal, m = jnp.asarray([[1.0, 0.5]]), jnp.asarray([[3.0, 2.0]]), jnp.asarray([0.2])
  grads = jax.grad(lambda a, b, c: gc.smore_score_loss(a, b, c, 0.9)[0], (0, 1, 2))(
    s_data, s_goal, m
  )
  np.testing.assert_array_equal(grads[2], 0.0)
  assert np.abs(np.asarray(grads[0])).max() > 0 and np.abs(np.asarray(grads[1])).max() > 0
  grads = jax.grad(lambda a, c: gc.smore_value_loss(a, c), (0, 1))(s_data, m)
  np.testing.assert_array_equal(grads[0], 0.0)
  assert np.abs(np.asarray(grads[1])).max() > 0


# ----------------------------------------------------------------------------- hostile inputs
# One case per public function, by the rules of test_hostile_inputs.py: valid inputs give finite
# results; a NaN reaches the output (or the call raises ValueError); an Inf gives a non-finite
# output or the output at ±1e30; a wrong rank is an error; a bad option is a one-line ValueError
# naming it. Shapes: B = 3 rows, E = 2 heads, G = 2 goal transitions.

SHAPES = {"B": 3, "E": 2, "G": 2, "B0": 2}
CASES = {
  "dual_f": (gc.dual_f, {"t": "B"}, {"divergence": "chi_square"}, {"divergence": "hellinger"}),
  "dual_conjugate": (
    gc.dual_conjugate,
    {"y": "B"},
    {"divergence": "chi_square"},
    {"divergence": "js", "nonnegative": 1},
  ),
  "dual_ratio": (
    gc.dual_ratio,
    {"y": "B"},
    {"divergence": "kl"},
    {"divergence": "tv", "nonnegative": None},
  ),
  "dual_v_loss": (
    gc.dual_v_loss,
    {"v_tm1": "B", "v_t": "B", "r_t": "B", "discount_t": "B", "v_init": "B0"},
    {"gamma": 0.9, "alpha": 1.0},
    {"gamma": 1.0, "alpha": 0.0, "divergence": "nope", "semi_gradient": "yes", "nonnegative": 0},
  ),
  "fdvl_value_loss": (
    gc.fdvl_value_loss,
    {"q_tgt": "B,E", "v": "B"},
    {"lam": 0.8},
    {"divergence": "kl", "lam": 0.0, "clip_at_zero": None, "temperature": -1.0, "max_clip": np.nan},
  ),
  "fdvl_critic_loss": (
    gc.fdvl_critic_loss,
    {"q": "B,E", "v_t": "B", "r_t": "B", "discount_t": "B"},
    {},
    {"huber_delta": 0.0},
  ),
  "fdvl_actor_loss": (
    gc.fdvl_actor_loss,
    {"log_prob": "B", "q_tgt": "B,E", "v": "B"},
    {},
    {"temperature": -1.0, "max_weight": 0.0, "weighting": "adv", "divergence": "x"},
  ),
  "smore_score_loss": (
    gc.smore_score_loss,
    {"s_data": "B,E", "s_goal": "G,E", "m_t": "B"},
    {"discount": 0.9},
    {"discount": 1.0, "variant": "fast", "step_reward": np.inf, "regularizer": -1.0},
  ),
  "smore_value_loss": (
    gc.smore_value_loss,
    {"s_tgt": "B,E", "m": "B"},
    {},
    {"expectile": 1.0},
  ),
  "smore_actor_loss": (
    gc.smore_actor_loss,
    {"log_prob": "B", "s_tgt": "B,E", "m": "B"},
    {},
    {"temperature": -0.5, "max_weight": -1.0},
  ),
}
ELEMENTWISE = ("dual_f", "dual_conjugate", "dual_ratio")  # any rank, no rank check


def hostile_inputs(name, seed=0):
  rng = np.random.default_rng(seed)
  _, specs, _, _ = CASES[name]
  arrays = {}
  for arg, dims in specs.items():
    shape = tuple(SHAPES[d] for d in dims.split(","))
    x = rng.uniform(0.1, 0.9, size=shape) if arg == "discount_t" else rng.normal(size=shape)
    arrays[arg] = x.astype(np.float32)
  return arrays


def call(name, arrays, **extra):
  fn, _, kw, _ = CASES[name]
  out = fn(**{k: jnp.asarray(v) for k, v in arrays.items()}, **(kw | extra))
  return np.asarray(jax.tree.leaves(out)[0])


def test_every_dual_rl_function_has_a_hostile_case():
  from hrljax.losses.goal_conditioned import dual

  public = {
    n
    for n, f in vars(dual).items()
    if callable(f) and getattr(f, "__module__", "") == dual.__name__
  }
  functions = {n for n in public if not n.startswith("_") and not n[0].isupper()}
  assert functions == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_valid_inputs_give_finite_results(name):
  assert np.all(np.isfinite(call(name, hostile_inputs(name))))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_hostile_nan_reaches_the_output_and_inf_is_non_finite_or_the_limit(name, value):
  for arg in CASES[name][1]:
    for index in (0, -1):
      arrays = hostile_inputs(name, seed=1)
      arrays[arg].reshape(-1)[index] = value
      try:
        out = call(name, arrays)
      except ValueError:
        continue
      if np.isnan(value):
        assert np.any(np.isnan(out)), (name, arg, index)
      elif np.all(np.isfinite(out)):
        arrays[arg].reshape(-1)[index] = np.sign(value) * 1e30
        np.testing.assert_allclose(out, call(name, arrays), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(set(CASES) - set(ELEMENTWISE)))
def test_hostile_wrong_rank_is_an_error(name):
  for arg in CASES[name][1]:
    for grow in (True, False):
      arrays = hostile_inputs(name)
      x = arrays[arg]
      arrays[arg] = np.stack([x, x]) if grow else x[0]
      with (
        jax.numpy_rank_promotion("allow"),
        pytest.raises((AssertionError, ValueError, TypeError)),
      ):
        call(name, arrays)


BAD = sorted((name, option) for name, case in CASES.items() for option in case[3])


@pytest.mark.parametrize("name, option", BAD)
def test_hostile_bad_option_is_a_one_line_value_error_naming_it(name, option):
  with pytest.raises(ValueError, match=option) as error:
    call(name, hostile_inputs(name), **{option: CASES[name][3][option]})
  message = str(error.value)
  assert message.startswith(f"{option}: expected") and "\n" not in message
