"""Tests for hrljax.losses.goal_conditioned.

Expected values are hand-computed vectors (written out next to each test) or are recomputed
independently in float64 NumPy inside the tests.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import goal_conditioned as gc

JIT_OR_NOT = pytest.mark.parametrize("transform", [jax.jit, lambda f: f], ids=["jit", "nojit"])


# ----------------------------------------------------------------------------------------------
# expectile_loss
# ----------------------------------------------------------------------------------------------


def test_expectile_loss_iql_vector():
  # By hand: Q̄ − V = [−0.5, 0.5], τ = 0.9 -> [0.1·0.25, 0.9·0.25] = [0.025, 0.225].
  diff = jnp.array([1.0, 2.0]) - jnp.array([1.5, 1.5])
  np.testing.assert_allclose(gc.expectile_loss(diff, 0.9), [0.025, 0.225], rtol=1e-6)


@JIT_OR_NOT
def test_expectile_loss_matches_numpy_any_shape(transform):
  diff = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
  tau = 0.7
  expected = np.where(diff < 0, 1 - tau, tau) * diff.astype(np.float64) ** 2
  got = transform(lambda d: gc.expectile_loss(d, tau))(jnp.asarray(diff))
  assert got.shape == (3, 4)
  np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_expectile_half_is_half_square_and_gradient():
  diff = jnp.array([-2.0, 0.0, 3.0])
  np.testing.assert_allclose(gc.expectile_loss(diff, 0.5), 0.5 * np.array([4.0, 0.0, 9.0]))
  grad = jax.grad(lambda d: gc.expectile_loss(d, 0.8).sum())(diff)
  np.testing.assert_allclose(grad, [2 * 0.2 * -2.0, 0.0, 2 * 0.8 * 3.0], rtol=1e-6)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5, float("nan"), "0.7", None])
def test_expectile_loss_rejects_bad_expectile(bad):
  with pytest.raises(ValueError, match="expectile"):
    gc.expectile_loss(jnp.zeros(3), bad)


def test_expectile_loss_rejects_int_diff():
  with pytest.raises(AssertionError):
    gc.expectile_loss(jnp.zeros(3, jnp.int32), 0.7)


# ----------------------------------------------------------------------------------------------
# awr_weights
# ----------------------------------------------------------------------------------------------


def test_awr_weights_vectors():
  adv = jnp.array([-1.0, 0.0, 0.5, 2.0])
  # OGBench's form, α = 3, clip 100: exp(3·A) = e^-3, 1, e^1.5, min(e^6, 100).
  np.testing.assert_allclose(gc.awr_weights(adv, 3.0), [0.049787, 1.0, 4.481689, 100.0], rtol=1e-5)
  # Offline ArCHer's form, β = 1, no clip: exp(A).
  np.testing.assert_allclose(
    gc.awr_weights(adv, 1.0, None), [0.367879, 1.0, 1.648721, 7.389056], rtol=1e-5
  )


def test_awr_weights_carry_no_gradient_and_alpha_zero_is_bc():
  adv = jnp.array([-1.0, 0.3, 2.0])
  grad = jax.grad(lambda a: gc.awr_weights(a, 3.0).sum())(adv)
  np.testing.assert_array_equal(grad, np.zeros(3))
  np.testing.assert_array_equal(gc.awr_weights(adv, 0.0), np.ones(3))


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(alpha=-1.0), "alpha"),
    (dict(alpha=float("inf")), "alpha"),
    (dict(alpha=3.0, max_weight=0.0), "max_weight"),
    (dict(alpha=3.0, max_weight=-5.0), "max_weight"),
  ],
)
def test_awr_weights_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    gc.awr_weights(jnp.zeros(2), **kwargs)


# ----------------------------------------------------------------------------------------------
# awr_loss
# ----------------------------------------------------------------------------------------------


def test_awr_loss_value_gradient_and_extras():
  log_prob = jnp.array([-1.0, -2.0, -0.5, -3.0])
  adv = jnp.array([-1.0, 0.0, 0.5, 2.0])
  w = np.array([np.exp(-3.0), 1.0, np.exp(1.5), 100.0])
  expected = -np.mean(w * np.array([-1.0, -2.0, -0.5, -3.0]))
  loss, extras = gc.awr_loss(log_prob, adv, 3.0)
  np.testing.assert_allclose(loss, expected, rtol=1e-6)
  np.testing.assert_allclose(extras.loss_sum / extras.count, expected, rtol=1e-6)
  assert float(extras.count) == 4.0
  g_lp, g_adv = jax.grad(lambda lp, a: gc.awr_loss(lp, a, 3.0)[0], argnums=(0, 1))(log_prob, adv)
  np.testing.assert_allclose(g_lp, -w / 4, rtol=1e-6)
  np.testing.assert_array_equal(g_adv, np.zeros(4))


def test_awr_loss_bad_shapes():
  with pytest.raises(AssertionError):
    gc.awr_loss(jnp.zeros((2, 3)), jnp.zeros((2, 3)), 1.0)
  with pytest.raises(AssertionError):
    gc.awr_loss(jnp.zeros(3), jnp.zeros(4), 1.0)


# ----------------------------------------------------------------------------------------------
# IVL value loss
# ----------------------------------------------------------------------------------------------

GAMMA, TAU = 0.99, 0.7
IVL_R = np.array([-1.0, -1.0, 0.0, -1.0])
IVL_M = np.array([1.0, 1.0, 0.0, 1.0])
IVL_V = np.array([[-5.0, -2.0, -0.5, -10.0], [-4.0, -3.0, 0.5, -9.0]]).T  # [B, E]
IVL_VT = np.array([[-5.5, -2.5, -0.2, -9.0], [-4.5, -2.0, 0.1, -9.5]]).T
IVL_NVT = np.array([[-4.0, -3.0, -1.0, -9.0], [-4.2, -1.0, -2.0, -8.0]]).T


def _ivl_args(dtype=jnp.float32):
  return tuple(jnp.asarray(x, dtype) for x in (IVL_V, IVL_VT, IVL_NVT, IVL_R, GAMMA * IVL_M))


@JIT_OR_NOT
def test_ivl_golden_vector(transform):
  fn = transform(lambda *a: gc.ivl_value_loss_batch(*a, expectile=TAU))
  loss, extras = fn(*_ivl_args())
  np.testing.assert_allclose(loss, 0.556855, rtol=1e-5)
  np.testing.assert_allclose(extras.advantage, [-0.158, -1.72, 0.05, -0.66], atol=1e-5)
  np.testing.assert_allclose(extras.weight, [0.3, 0.3, 0.7, 0.3], rtol=1e-6)
  np.testing.assert_allclose(extras.loss_sum / extras.count, loss, rtol=1e-6)


def test_ivl_differs_from_per_head_iql_expectile():
  # The contrast: per-head own-residual weights (rlax / IQL) give 0.635475 on the same vector.
  targets = IVL_R[:, None] + GAMMA * IVL_M[:, None] * IVL_NVT
  diff = jnp.asarray(targets - IVL_V, jnp.float32)
  iql = float(jnp.sum(jnp.mean(gc.expectile_loss(diff, TAU), axis=0)))
  np.testing.assert_allclose(iql, 0.635475, rtol=1e-5)
  ivl, _ = gc.ivl_value_loss_batch(*_ivl_args(), expectile=TAU)
  assert abs(float(ivl) - iql) > 0.05


def test_ivl_per_example_vmap_matches_batch():
  args = _ivl_args()
  per_ex = jax.vmap(lambda *a: gc.ivl_value_loss(*a, expectile=TAU)[0])(*args)
  batch, extras = gc.ivl_value_loss_batch(*args, expectile=TAU)
  np.testing.assert_allclose(per_ex, extras.loss_per_example, rtol=1e-6)
  np.testing.assert_allclose(per_ex.mean(), batch, rtol=1e-6)


def test_ivl_mask_zero_removes_bootstrap_and_tie_goes_to_tau():
  v = jnp.array([-1.0, -2.0])
  # m = 0: targets equal r whatever the next values are.
  _, ex = gc.ivl_value_loss(v, jnp.array([0.5, 0.5]), jnp.array([-50.0, 7.0]), 0.0, 0.0, 0.7)
  np.testing.assert_array_equal(ex.targets, [0.0, 0.0])
  # A = r + γ·min v̄' − mean v̄ = −1 + 0.5·(−2) − (−2) = 0 exactly: weight τ.
  loss, ex = gc.ivl_value_loss(v, jnp.array([-1.0, -3.0]), jnp.array([-2.0, 4.0]), -1.0, 0.5, 0.8)
  assert float(ex.advantage) == 0.0
  np.testing.assert_allclose(ex.weight, 0.8)
  expected = 0.8 * ((-2.0 + 1.0) ** 2 + (1.0 + 2.0) ** 2)
  np.testing.assert_allclose(loss, expected, rtol=1e-6)


def test_ivl_half_expectile_is_half_summed_mse():
  v, vt, nvt, r, d = _ivl_args()
  loss, _ = gc.ivl_value_loss_batch(v, vt, nvt, r, d, expectile=0.5)
  targets = IVL_R[:, None] + GAMMA * IVL_M[:, None] * IVL_NVT
  expected = 0.5 * np.sum(np.mean((targets - IVL_V) ** 2, axis=0))
  np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_ivl_gradient_only_into_online_heads():
  args = _ivl_args()
  loss_fn = lambda *a: gc.ivl_value_loss_batch(*a, expectile=TAU)[0]  # noqa: E731
  grads = jax.grad(loss_fn, argnums=(0, 1, 2, 3, 4))(*args)
  targets = IVL_R[:, None] + GAMMA * IVL_M[:, None] * IVL_NVT
  w = np.array([0.3, 0.3, 0.7, 0.3])[:, None]
  np.testing.assert_allclose(grads[0], -2 * w * (targets - IVL_V) / 4, rtol=1e-5, atol=1e-6)
  for g in grads[1:]:
    np.testing.assert_array_equal(g, np.zeros_like(g))
  # Without the stop, the bootstrap values receive gradient.
  g_next = jax.grad(
    lambda n: gc.ivl_value_loss_batch(
      args[0], args[1], n, args[3], args[4], TAU, stop_target_gradients=False
    )[0]
  )(args[2])
  assert np.abs(np.asarray(g_next)).sum() > 0


@pytest.mark.parametrize(
  "mutate, exc, match",
  [
    (lambda a: (a[0][:, :1],) + a[1:], AssertionError, None),  # head count mismatch
    (lambda a: (a[0][0],) + a[1:], AssertionError, None),  # wrong rank
    (lambda a: a[:3] + (a[3][:2],) + a[4:], AssertionError, None),  # batch mismatch
    (lambda a: (a[0].astype(jnp.int32),) + a[1:], AssertionError, None),  # int values
  ],
)
def test_ivl_bad_shapes_and_dtypes(mutate, exc, match):
  with pytest.raises(exc):
    gc.ivl_value_loss_batch(*mutate(_ivl_args()), expectile=TAU)


def test_ivl_bad_python_arguments():
  with pytest.raises(ValueError, match="expectile"):
    gc.ivl_value_loss_batch(*_ivl_args(), expectile=1.0)
  with pytest.raises(ValueError, match="stop_target_gradients"):
    gc.ivl_value_loss(
      jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), 0.0, 0.0, 0.7, stop_target_gradients=1
    )


# ----------------------------------------------------------------------------------------------
# HIQL: parity with OGBench's formulas on one random batch, and gradient routing.
# ----------------------------------------------------------------------------------------------

B, D, A, R, E = 32, 4, 2, 3, 2


def _hiql_setup(seed=0):
  rng = np.random.default_rng(seed)
  params = {
    "phi": rng.normal(size=(2 * D, R)),
    "value": rng.normal(size=(E, D + R)) * 0.5,
    "target_value": rng.normal(size=(E, D + R)) * 0.5,
    "low": rng.normal(size=(D + R, A)) * 0.5,
    "high": rng.normal(size=(2 * D, R)) * 0.5,
  }
  batch = {
    k: rng.normal(size=(B, D))
    for k in (
      "observations",
      "next_observations",
      "value_goals",
      "low_actor_goals",
      "high_actor_goals",
      "high_actor_targets",
    )
  }
  batch["actions"] = rng.normal(size=(B, A))
  batch["masks"] = (rng.random(B) < 0.8).astype(np.float64)
  batch["rewards"] = batch["masks"] - 1.0
  params = {k: v.astype(np.float32) for k, v in params.items()}
  batch = {k: v.astype(np.float32) for k, v in batch.items()}
  return params, batch


def _np_ogbench_hiql_losses(p, b, discount=0.99, expectile=0.7, alpha=3.0):
  """OGBench hiql.py formulas, restated in float64 NumPy with toy linear networks."""
  p = {k: v.astype(np.float64) for k, v in p.items()}
  b = {k: v.astype(np.float64) for k, v in b.items()}

  def phi(s, g):
    x = np.concatenate([s, g], -1) @ p["phi"]
    return x / np.linalg.norm(x, axis=-1, keepdims=True) * np.sqrt(x.shape[-1])

  def value(w, s, g):  # returns a tuple of heads, each [B]
    x = np.concatenate([s, phi(s, g)], -1)
    return tuple(x @ w[i] for i in range(E))

  def gauss_logp(mean, x):
    return -0.5 * np.sum((x - mean) ** 2, -1) - 0.5 * mean.shape[-1] * np.log(2 * np.pi)

  # value_loss
  nv1_t, nv2_t = value(p["target_value"], b["next_observations"], b["value_goals"])
  q = b["rewards"] + discount * b["masks"] * np.minimum(nv1_t, nv2_t)
  v1_t, v2_t = value(p["target_value"], b["observations"], b["value_goals"])
  adv = q - (v1_t + v2_t) / 2
  q1 = b["rewards"] + discount * b["masks"] * nv1_t
  q2 = b["rewards"] + discount * b["masks"] * nv2_t
  v1, v2 = value(p["value"], b["observations"], b["value_goals"])
  weight = np.where(adv >= 0, expectile, 1 - expectile)
  value_loss = (weight * (q1 - v1) ** 2).mean() + (weight * (q2 - v2) ** 2).mean()

  # low_actor_loss
  v1, v2 = value(p["value"], b["observations"], b["low_actor_goals"])
  nv1, nv2 = value(p["value"], b["next_observations"], b["low_actor_goals"])
  exp_a = np.minimum(np.exp(((nv1 + nv2) / 2 - (v1 + v2) / 2) * alpha), 100.0)
  rep = phi(b["observations"], b["low_actor_goals"])
  mean = np.concatenate([b["observations"], rep], -1) @ p["low"]
  low_loss = -(exp_a * gauss_logp(mean, b["actions"])).mean()

  # high_actor_loss
  v1, v2 = value(p["value"], b["observations"], b["high_actor_goals"])
  nv1, nv2 = value(p["value"], b["high_actor_targets"], b["high_actor_goals"])
  exp_a = np.minimum(np.exp(((nv1 + nv2) / 2 - (v1 + v2) / 2) * alpha), 100.0)
  mean = np.concatenate([b["observations"], b["high_actor_goals"]], -1) @ p["high"]
  target = phi(b["observations"], b["high_actor_targets"])
  high_loss = -(exp_a * gauss_logp(mean, target)).mean()
  return value_loss, low_loss, high_loss


def _jax_hiql_losses(p, b, low_rep_grad=False, discount=0.99, expectile=0.7, alpha=3.0):
  """The same toy networks in JAX, composed with the hrljax losses."""
  import distrax

  def phi(s, g):
    return gc.length_normalize(jnp.concatenate([s, g], -1) @ p["phi"], eps=0.0)

  def value(w, s, g):  # [B, E]
    return jnp.concatenate([s, phi(s, g)], -1) @ w.T

  def gauss_log_prob(mean, x):
    return distrax.MultivariateNormalDiag(mean, jnp.ones_like(mean)).log_prob(x)

  obs = b["observations"]
  value_loss, _ = gc.ivl_value_loss_batch(
    value(p["value"], obs, b["value_goals"]),
    value(p["target_value"], obs, b["value_goals"]),
    value(p["target_value"], b["next_observations"], b["value_goals"]),
    b["rewards"],
    discount * b["masks"],
    expectile,
  )
  low_loss, _ = gc.hiql_low_actor_loss(
    lambda rep: gauss_log_prob(jnp.concatenate([obs, rep], -1) @ p["low"], b["actions"]),
    phi(obs, b["low_actor_goals"]),
    value(p["value"], b["next_observations"], b["low_actor_goals"]),
    value(p["value"], obs, b["low_actor_goals"]),
    alpha,
    rep_grad=low_rep_grad,
  )
  high_mean = jnp.concatenate([obs, b["high_actor_goals"]], -1) @ p["high"]
  high_loss, _ = gc.hiql_high_actor_loss(
    lambda target: gauss_log_prob(high_mean, target),
    phi(obs, b["high_actor_targets"]),
    value(p["value"], b["high_actor_targets"], b["high_actor_goals"]),
    value(p["value"], obs, b["high_actor_goals"]),
    alpha,
  )
  return value_loss, low_loss, high_loss


def test_hiql_parity_with_ogbench_formulas():
  params, batch = _hiql_setup(seed=0)
  expected = _np_ogbench_hiql_losses(params, batch)
  got = jax.jit(_jax_hiql_losses)(
    jax.tree.map(jnp.asarray, params), jax.tree.map(jnp.asarray, batch)
  )
  for name, e, g in zip(("value", "low_actor", "high_actor"), expected, got):
    np.testing.assert_allclose(g, e, rtol=2e-5, err_msg=name)


@pytest.mark.parametrize("low_rep_grad", [False, True])
def test_hiql_gradient_routing(low_rep_grad):
  params, batch = _hiql_setup(seed=1)
  params = jax.tree.map(jnp.asarray, params)
  batch = jax.tree.map(jnp.asarray, batch)

  # One compiled reverse pass per loss: jacobian of the three losses w.r.t. every parameter.
  jac = jax.jit(jax.jacrev(lambda p: jnp.stack(_jax_hiql_losses(p, batch, low_rep_grad))))(params)

  def nonzero(i):
    return {k: bool(np.abs(np.asarray(v[i])).sum() > 0) for k, v in jac.items()}

  value_g, low_g, high_g = nonzero(0), nonzero(1), nonzero(2)
  # Value loss trains {value, phi}; the target network gets no gradient.
  assert value_g == dict(phi=True, value=True, target_value=False, low=False, high=False)
  # Low actor trains {low}, plus phi only with low_actor_rep_grad.
  assert low_g == dict(phi=low_rep_grad, value=False, target_value=False, low=True, high=False)
  # High actor trains {high}; the target latent phi([s; s_{t+k}]) is a constant.
  assert high_g == dict(phi=False, value=False, target_value=False, low=False, high=True)


def test_hiql_advantages_and_shapes():
  v_next = jnp.array([[-1.0, -3.0], [0.0, 2.0]])
  v_now = jnp.array([[-4.0, -2.0], [1.0, 1.0]])
  np.testing.assert_allclose(gc.hiql_low_advantage(v_next, v_now), [1.0, 0.0])
  np.testing.assert_allclose(gc.hiql_high_advantage(v_next[0], v_now[0]), 1.0)
  with pytest.raises(AssertionError):
    gc.hiql_low_advantage(v_next, v_now[:, :1])


def test_hiql_actor_bad_inputs():
  lp = lambda rep: jnp.zeros(rep.shape[0])  # noqa: E731
  with pytest.raises(ValueError, match="rep_grad"):
    gc.hiql_low_actor_loss(
      lp, jnp.zeros((3, 2)), jnp.zeros((3, 2)), jnp.zeros((3, 2)), 3.0, rep_grad="yes"
    )
  with pytest.raises(AssertionError):  # log_prob_fn returning the wrong shape
    gc.hiql_high_actor_loss(
      lambda t: jnp.zeros(4), jnp.zeros((3, 2)), jnp.zeros((3, 2)), jnp.zeros((3, 2)), 3.0
    )


def test_length_normalize():
  x = jax.random.normal(jax.random.PRNGKey(0), (5, 10))
  norms = jnp.linalg.norm(gc.length_normalize(x), axis=-1)
  np.testing.assert_allclose(norms, 3.1622777, rtol=1e-5)
  np.testing.assert_array_equal(gc.length_normalize(jnp.zeros((1, 4))), np.zeros((1, 4)))
  with pytest.raises(ValueError, match="eps"):
    gc.length_normalize(x, eps=-1.0)


# ----------------------------------------------------------------------------------------------
# OTA
# ----------------------------------------------------------------------------------------------


@JIT_OR_NOT
def test_ota_golden_index_cases(transform):
  # Rows: plain trajectory goal; early termination at the goal; random goal, time-out clipped at
  # the trajectory end; "cur" -> the option terminal becomes the goal.
  idx = jnp.array([10, 10, 97, 10])
  traj_end = jnp.array([100, 100, 100, 100])
  goal = jnp.array([40, 12, 5000, 40])
  traj = jnp.array([True, True, False, True])
  cur = jnp.array([False, False, False, True])
  out = transform(lambda *a: gc.ota_option_indices(*a, n=5))(idx, traj_end, goal, traj, cur)
  np.testing.assert_array_equal(out.option_idx, [15, 12, 100, 15])
  np.testing.assert_array_equal(out.goal_idx, [40, 12, 5000, 15])
  np.testing.assert_array_equal(out.reward, [-1.0, 0.0, -1.0, 0.0])
  np.testing.assert_array_equal(out.mask, [1.0, 0.0, 1.0, 0.0])


def test_ota_index_properties_on_random_cases():
  rng = np.random.default_rng(0)
  size, n = 500, 7
  idx = rng.integers(0, 1000, size)
  traj_end = idx + rng.integers(0, 40, size)
  traj = rng.random(size) < 0.6
  future = np.minimum(idx + rng.geometric(0.05, size), traj_end)
  goal = np.where(traj, future, rng.integers(0, 2000, size))
  cur = rng.random(size) < 0.2
  out = gc.ota_option_indices(*(jnp.asarray(x) for x in (idx, traj_end, goal, traj, cur)), n=n)
  o = np.asarray(out.option_idx)
  assert np.all(o >= idx) and np.all(o <= np.minimum(idx + n, traj_end))
  # Success exactly when the option terminal is the goal; cur always succeeds.
  np.testing.assert_array_equal(np.asarray(out.mask) == 0, o == np.asarray(out.goal_idx))
  assert np.all(np.asarray(out.reward)[cur] == 0.0)
  # gc_negative=False shifts the reward to 1/0.
  pos = gc.ota_option_indices(
    *(jnp.asarray(x) for x in (idx, traj_end, goal, traj, cur)), n=n, gc_negative=False
  )
  np.testing.assert_array_equal(pos.reward, np.asarray(out.reward) + 1.0)


def test_ota_n_one_is_one_step():
  idx = jnp.array([3, 8])
  out = gc.ota_option_indices(
    idx,
    jnp.array([50, 50]),
    jnp.array([20, 9]),
    jnp.array([True, True]),
    jnp.array([False, False]),
    n=1,
  )
  np.testing.assert_array_equal(out.option_idx, [4, 9])  # s_{i+1}; success checked there
  np.testing.assert_array_equal(out.reward, [-1.0, 0.0])


def test_ota_target_uses_gamma_not_gamma_n_and_loss_is_ivl():
  gamma = 0.9
  one, minus_one = jnp.float32(1.0), jnp.float32(-1.0)
  y = gc.ota_option_value_target(minus_one, one, jnp.array([-2.0, -3.0]), gamma)
  np.testing.assert_allclose(y, [-1.0 + 0.9 * -2.0, -1.0 + 0.9 * -3.0], rtol=1e-6)
  # Hand-computed OTA high-value loss: A = −1 + 0.9·(−3) − (−3.5) = −0.2 -> weight 1 − τ.
  v, vt, vo = jnp.array([-2.5, -3.0]), jnp.array([-3.0, -4.0]), jnp.array([-2.0, -3.0])
  loss, ex = gc.ota_high_value_loss(v, vt, vo, minus_one, one, gamma, 0.7)
  np.testing.assert_allclose(ex.advantage, -0.2, rtol=1e-5)
  np.testing.assert_allclose(loss, 0.3 * ((-2.8 + 2.5) ** 2 + (-3.7 + 3.0) ** 2), rtol=1e-5)
  # Reaching the goal at the option terminal (m = 0) removes the bootstrap.
  zero = jnp.float32(0.0)
  y0 = gc.ota_option_value_target(zero, zero, jnp.array([-2.0, -3.0]), gamma)
  np.testing.assert_array_equal(y0, [0.0, 0.0])


def test_ota_bad_inputs():
  i = jnp.array([1, 2])
  b = jnp.array([True, False])
  with pytest.raises(ValueError, match="n: expected a Python int >= 1"):
    gc.ota_option_indices(i, i, i, b, b, n=0)
  with pytest.raises(ValueError, match="n: "):
    gc.ota_option_indices(i, i, i, b, b, n=2.5)
  with pytest.raises(AssertionError):  # float indices
    gc.ota_option_indices(i.astype(jnp.float32), i, i, b, b, n=5)
  with pytest.raises(AssertionError):  # int masks
    gc.ota_option_indices(i, i, i, i, b, n=5)
  with pytest.raises(ValueError, match="high_discount"):
    gc.ota_option_value_target(jnp.float32(0.0), jnp.float32(1.0), jnp.zeros(2), 1.5)


# ----------------------------------------------------------------------------------------------
# HILP
# ----------------------------------------------------------------------------------------------


def test_hilp_vectors():
  phi_s, phi_g = jnp.array([0.0, 3.0]), jnp.array([4.0, 0.0])
  np.testing.assert_allclose(gc.hilp_value(phi_s, phi_g), -5.0)
  np.testing.assert_allclose(gc.hilp_value(phi_g, phi_s), -5.0)  # symmetric
  np.testing.assert_allclose(gc.hilp_goal_prompt(phi_s, phi_g), [0.8, -0.6], rtol=1e-6)
  np.testing.assert_allclose(
    gc.hilp_intrinsic_reward(phi_s, jnp.array([1.0, 2.5]), jnp.array([0.8, -0.6])), 1.1, rtol=1e-6
  )
  phi = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  r = jnp.array([1.0, 2.0, 3.0])
  np.testing.assert_allclose(
    gc.hilp_reward_prompt(phi, r, scale=float(np.sqrt(2.0))), [0.632456, 1.264911], rtol=1e-5
  )
  np.testing.assert_allclose(
    gc.hilp_reward_prompt(phi, r), np.array([1.0, 2.0]) / np.sqrt(5.0), rtol=1e-5
  )


def test_hilp_value_at_goal_is_finite():
  phi = jnp.array([0.3, -1.2, 2.0])
  np.testing.assert_allclose(gc.hilp_value(phi, phi), -1e-3, rtol=1e-5)
  g = jax.grad(lambda p: gc.hilp_value(p, phi))(phi)
  assert np.all(np.isfinite(g))
  vals = gc.hilp_value(
    jax.random.normal(jax.random.PRNGKey(1), (4, 2, 3)),
    jax.random.normal(jax.random.PRNGKey(2), (4, 2, 3)),
  )
  assert vals.shape == (4, 2) and np.all(np.asarray(vals) <= 0)
  np.testing.assert_array_equal(gc.hilp_goal_prompt(phi, phi), np.zeros(3))


def test_hilp_representation_loss_is_ivl_on_distances():
  keys = jax.random.split(jax.random.PRNGKey(0), 5)
  phis = [jax.random.normal(k, (2, 3)) for k in keys]
  r, d = jnp.float32(-1.0), jnp.float32(0.99)
  loss, ex = gc.hilp_representation_loss(*phis, r, d, 0.95)
  p = [np.asarray(x, np.float64) for x in phis]
  dist = lambda a, b: np.sqrt(np.maximum(((a - b) ** 2).sum(-1), 1e-6))  # noqa: E731
  v, vt, nvt = -dist(p[0], p[1]), -dist(p[2], p[4]), -dist(p[3], p[4])
  adv = -1.0 + 0.99 * nvt.min() - vt.mean()
  w = 0.95 if adv >= 0 else 0.05
  np.testing.assert_allclose(loss, np.sum(w * (-1.0 + 0.99 * nvt - v) ** 2), rtol=1e-5)
  # Gradient reaches the online φ(s) and φ(g), never the target φ̄.
  grads = jax.grad(
    lambda *a: gc.hilp_representation_loss(*a, r, d, 0.95)[0], argnums=(0, 1, 2, 3, 4)
  )(*phis)
  assert all(np.abs(np.asarray(g)).sum() > 0 for g in grads[:2])
  assert all(np.abs(np.asarray(g)).sum() == 0 for g in grads[2:])


def test_hilp_skills_and_reward_gradient():
  z1 = gc.hilp_sample_skills(jax.random.PRNGKey(0), 6, 4)
  z2 = gc.hilp_sample_skills(jax.random.PRNGKey(1), 6, 4)
  np.testing.assert_allclose(jnp.linalg.norm(z1, axis=-1), np.ones(6), rtol=1e-5)
  np.testing.assert_array_equal(z1, gc.hilp_sample_skills(jax.random.PRNGKey(0), 6, 4))
  assert not np.allclose(z1, z2)  # a fresh key gives fresh skills (HILP README issue)
  g = jax.grad(lambda p: gc.hilp_intrinsic_reward(p, p + 1.0, z1[0]))(jnp.zeros(4))
  np.testing.assert_array_equal(g, np.zeros(4))  # φ is not trained by the skill reward
  with pytest.raises(ValueError, match="dim"):
    gc.hilp_sample_skills(jax.random.PRNGKey(0), 2, 0)


def test_hilp_skill_value_loss_vector_and_gradient():
  # min over the target critics [1, −1]; V = [0.5, −0.5]: diff [0.5, −0.5], weights 0.9 / 0.1,
  # loss mean(0.9·0.25, 0.1·0.25) = 0.125; dL/dV = −2·w·diff / B = [−0.45, 0.05]; no gradient
  # into the critics
  q_tgt = jnp.array([[1.0, 2.0], [0.0, -1.0]])
  v = jnp.array([0.5, -0.5])
  loss, extras = gc.hilp_skill_value_loss(q_tgt, v, 0.9)
  np.testing.assert_allclose(loss, 0.125, rtol=1e-6)
  np.testing.assert_allclose(extras.q_target, [1.0, -1.0])
  np.testing.assert_allclose(extras.diff, [0.5, -0.5])
  grad_q, grad_v = jax.grad(lambda q, v: gc.hilp_skill_value_loss(q, v, 0.9)[0], argnums=(0, 1))(
    q_tgt, v
  )
  np.testing.assert_allclose(grad_v, [-0.45, 0.05], rtol=1e-6)
  np.testing.assert_array_equal(grad_q, np.zeros((2, 2)))
  with pytest.raises(ValueError, match="expectile"):
    gc.hilp_skill_value_loss(q_tgt, v, 1.0)
  with pytest.raises(AssertionError):
    gc.hilp_skill_value_loss(q_tgt, v[:1], 0.9)


def test_hilp_skill_critic_loss_vector_gradient_and_mask():
  # targets r + γ·V(s') = [−1 + 0.5·2, 0.5 + 0.5·1] = [0, 1]; TD errors [[1, 2], [−1, 0]];
  # Σ_i squares [5, 1], mean 3; dL/dQ = 2·td / B = td; no gradient into V(s')
  q = jnp.array([[1.0, 2.0], [0.0, 1.0]])
  r, v_next = jnp.array([-1.0, 0.5]), jnp.array([2.0, 1.0])
  loss, extras = gc.hilp_skill_critic_loss(q, r, 0.5, v_next)
  np.testing.assert_allclose(loss, 3.0, rtol=1e-6)
  np.testing.assert_allclose(extras.targets, [0.0, 1.0])
  grad_q, grad_v = jax.grad(
    lambda q, v: gc.hilp_skill_critic_loss(q, r, 0.5, v)[0], argnums=(0, 1)
  )(q, v_next)
  np.testing.assert_allclose(grad_q, [[1.0, 2.0], [-1.0, 0.0]], rtol=1e-6)
  np.testing.assert_array_equal(grad_v, np.zeros(2))
  # a per-example γ·mask stops the bootstrap of the second transition: targets [0, 0.5]
  masked, _ = gc.hilp_skill_critic_loss(q, r, jnp.array([0.5, 0.0]), v_next)
  np.testing.assert_allclose(masked, (5.0 + 0.5) / 2, rtol=1e-6)
  with pytest.raises(ValueError, match="stop_target_gradients"):
    gc.hilp_skill_critic_loss(q, r, 0.5, v_next, stop_target_gradients=1)


def test_hilp_plan_midpoint_moves_goal_toward_state():
  line = jnp.linspace(0.0, 10.0, 101)[:, None]
  phi_s, phi_goal = jnp.array([0.0]), jnp.array([10.0])
  planned = [
    float(gc.hilp_plan_midpoint(phi_s, phi_goal, line, k=5, recursions=r)[0]) for r in (1, 2, 3)
  ]
  np.testing.assert_allclose(planned[0], 5.0, atol=1e-5)  # the midpoint of the segment
  assert 10.0 > planned[0] > planned[1] > planned[2] > 0.0
  with pytest.raises(ValueError, match="k"):
    gc.hilp_plan_midpoint(phi_s, phi_goal, line, k=1000)


@pytest.mark.parametrize("poisoned", ["phi_s", "phi_goal", "phi_dataset"])
def test_hilp_plan_midpoint_nan_input_gives_nan_goal(poisoned):
  # A NaN distance would otherwise be ranked by top_k like any number: a finite, arbitrary goal.
  args = dict(
    phi_s=jnp.array([0.0]),
    phi_goal=jnp.array([10.0]),
    phi_dataset=jnp.linspace(0.0, 10.0, 11)[:, None],
  )
  args[poisoned] = args[poisoned].at[0].set(jnp.nan)
  planned = jax.jit(gc.hilp_plan_midpoint, static_argnames=("k", "recursions"))(**args, k=3)
  assert np.all(np.isnan(np.asarray(planned)))


# ----------------------------------------------------------------------------------------------
# HIRO
# ----------------------------------------------------------------------------------------------


def test_hiro_goal_transition_and_reward_vector():
  s, g, s_next = jnp.array([0.0, 0.0]), jnp.array([2.0, 1.0]), jnp.array([0.5, 0.5])
  np.testing.assert_allclose(gc.hiro_goal_transition(s, g, s_next), [1.5, 0.5])
  np.testing.assert_allclose(gc.hiro_low_reward(s, g, s_next), -1.581139, rtol=1e-6)


@JIT_OR_NOT
def test_hiro_relabel_vector(transform):
  # 1-D toy: μ(s, g) = 0.5·g, c = 2, states [0, 1, 1.5], actions [1, 0.5].
  candidates = jnp.array([[3.0], [1.5], [2.0], [0.5]])
  s_seq = jnp.array([[0.0], [1.0]])
  goals = gc.hiro_propagate_goals(candidates, s_seq)
  np.testing.assert_allclose(goals[0, :, 0], [3.0, 2.0])
  mu = 0.5 * goals
  g_best, ex = transform(gc.hiro_relabel)(candidates, mu, jnp.array([[1.0], [0.5]]))
  np.testing.assert_allclose(ex.log_likelihood, [-0.25, -0.0625, 0.0, -0.5625], atol=1e-6)
  np.testing.assert_allclose(g_best, [2.0])
  assert int(ex.best_index) == 2


def test_hiro_relabel_ties_mask_and_exact_policy():
  cands = jnp.array([[1.0, 0.0], [2.0, 0.0]])
  acts = jnp.zeros((3, 2))
  same = jnp.zeros((2, 3, 2))
  g, ex = gc.hiro_relabel(cands, same, acts)
  np.testing.assert_array_equal(ex.log_likelihood, [0.0, 0.0])  # exact policy: loglik 0
  np.testing.assert_array_equal(g, [1.0, 0.0])  # tie -> first (original) candidate
  # Steps past the end of a terminated window are ignored.
  mu = jnp.array([[[0.0, 0.0], [0.0, 0.0], [9.0, 9.0]], [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])
  _, ex = gc.hiro_relabel(cands, mu, acts, valid=jnp.array([True, True, False]))
  np.testing.assert_allclose(ex.log_likelihood, [0.0, -0.5])


def test_hiro_candidates():
  key = jax.random.PRNGKey(3)
  g0, s_t, s_tc = jnp.array([0.5, -0.5]), jnp.array([0.0, 0.0]), jnp.array([8.0, 1.0])
  scale = jnp.array([5.0, 5.0])
  c = gc.hiro_candidate_goals(key, g0, s_t, s_tc, scale, num_random=8)
  assert c.shape == (10, 2)
  np.testing.assert_array_equal(c[0], g0)
  np.testing.assert_array_equal(c[1], [8.0, 1.0])  # s_{t+c} − s_t, unclipped as in the reference
  assert np.all(np.abs(np.asarray(c[2:])) <= 5.0)
  again = gc.hiro_candidate_goals(key, g0, s_t, s_tc, scale, num_random=8)
  np.testing.assert_array_equal(c, again)  # same key, same candidates
  with pytest.raises(ValueError, match="num_random"):
    gc.hiro_candidate_goals(key, g0, s_t, s_tc, scale, num_random=-1)


# ----------------------------------------------------------------------------------------------
# HAC
# ----------------------------------------------------------------------------------------------


def test_hac_target_vector_and_gradient():
  r = jnp.array([-1.0, 0.0, -10.0, -1.0])
  term = jnp.array([False, True, True, False])
  q = jnp.array([-3.0, -5.0, -5.0, -12.0])
  np.testing.assert_allclose(
    gc.hac_target(r, term, q, 0.98, 10), [-3.94, 0.0, -10.0, -10.0], rtol=1e-6
  )
  g = jax.grad(lambda x: gc.hac_target(r, term, x, 0.98, 10).sum())(q)
  np.testing.assert_array_equal(g, np.zeros(4))
  with pytest.raises(ValueError, match="horizon"):
    gc.hac_target(r, term, q, 0.98, 0)
  with pytest.raises(ValueError, match="gamma"):
    gc.hac_target(r, term, q, 1.5, 10)


def test_hac_goal_reward_hindsight_and_penalty():
  achieved = jnp.array([[0.0, 0.0], [0.1, -0.1], [0.3, 0.0]])
  goal = jnp.zeros((3, 2))
  r, done = gc.hac_goal_reward(achieved, goal, jnp.array([0.1, 0.1]))
  np.testing.assert_array_equal(r, [0.0, 0.0, -1.0])  # a distance equal to the threshold passes
  np.testing.assert_array_equal(done, [True, True, False])
  act = gc.hac_hindsight_action(jnp.array([1.0, 1.0]), jnp.array([0.2, 0.3]), jnp.array(False))
  np.testing.assert_allclose(act, [0.2, 0.3])
  act = gc.hac_hindsight_action(jnp.array([1.0, 1.0]), jnp.array([0.2, 0.3]), jnp.array(True))
  np.testing.assert_array_equal(act, [1.0, 1.0])
  goals, idx = gc.hac_hindsight_goals(jax.random.PRNGKey(0), achieved, num_goals=3)
  assert goals.shape == (3, 2) and int(idx[-1]) == 2
  np.testing.assert_array_equal(goals[-1], achieved[-1])
  assert np.all((np.asarray(idx) >= 0) & (np.asarray(idx) <= 2))
  pen_r, pen_t = gc.hac_subgoal_test_penalty(10)
  assert float(pen_r) == -10.0 and bool(pen_t)


def test_hac_goal_reward_nan_distance_or_threshold_is_undecided():
  achieved = jnp.array([[0.0, np.nan], [0.05, 0.0], [0.3, 0.0], [0.3, np.inf]])
  goal = jnp.zeros((4, 2))
  r, done = gc.hac_goal_reward(achieved, goal, jnp.array([0.1, 0.1]))
  np.testing.assert_array_equal(r, [np.nan, 0.0, -1.0, -1.0])  # an Inf distance fails
  np.testing.assert_array_equal(done, [False, True, False, False])
  r, done = gc.hac_goal_reward(achieved[1:3], goal[1:3], jnp.array([np.nan, 0.1]))
  np.testing.assert_array_equal(r, [np.nan, np.nan])
  np.testing.assert_array_equal(done, [False, False])
