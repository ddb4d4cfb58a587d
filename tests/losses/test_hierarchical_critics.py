"""Tests for hrljax.losses.hierarchical_critics (ArCHer, Offline ArCHer, filtered BC, CHAI).

Expected values are vectors computed by hand from the reference code's formulas (the ArCHer and
Offline ArCHer critics and actors; docs/hierarchical_critics.md) or recomputed here in NumPy
float64, never produced by the code under test.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import hierarchical_critics as hc

GAMMA = 0.95

# A hand-computed vector (γ = 0.95, B = 2, E = 2), ensemble-first [E, B].
R = np.array([-1.0, 0.0])
DONE = np.array([0.0, 1.0])
Q = np.array([[-3.0, -0.5], [-2.8, -0.4]])
V = np.array([[-3.2, -0.6], [-3.1, -0.3]])
V_NEXT_TGT = np.array([[-2.0, -7.0], [-2.2, -7.0]])
Q_PI_TGT = np.array([[-3.3, -0.2], [-3.0, -0.1]])
Q_PI_ONLINE = np.array([[-2.9, -0.45], [-3.1, -0.35]])
# Summed log-probs [-12, -7.5], spread over tokens with one padded position each.
TOKEN_LOGP = np.array([[-5.0, -7.0, 0.0], [-7.5, 0.0, 0.0]])
TOKEN_MASK = np.array([[True, True, False], [True, False, False]])

IDENTITY_OR_JIT = pytest.mark.parametrize("wrap", [lambda f: f, jax.jit], ids=["nojit", "jit"])


def f32(x):
  return jnp.asarray(x, dtype=jnp.float32)


def critic_args():
  return tuple(map(f32, (Q, V, V_NEXT_TGT, Q_PI_TGT, R, DONE)))


def numpy_critic_loss(q, v, v_next, q_pi_tgt, r, done, gamma):
  """Sum over heads of batch-mean squared errors, head-wise targets, float64."""
  y = r[None] + gamma * (1.0 - done)[None] * v_next
  return np.sum(np.mean((q - y) ** 2, axis=1)) + np.sum(np.mean((v - q_pi_tgt) ** 2, axis=1))


# ----------------------------------------------------------------------------------------------
# ArCHer critic.
# ----------------------------------------------------------------------------------------------


def test_q_targets_match_the_hand_computed_vector():
  y = hc.archer_q_targets(f32(R), f32(DONE), f32(V_NEXT_TGT), GAMMA)
  np.testing.assert_allclose(y, [[-2.9, 0.0], [-3.09, 0.0]], atol=1e-6)


@IDENTITY_OR_JIT
def test_critic_loss_matches_the_hand_computed_vector(wrap):
  loss_fn = wrap(functools.partial(hc.archer_critic_loss, gamma=GAMMA))
  q, v, vn, qpt, r, d = critic_args()
  loss, extras = loss_fn(q, v, vn, qpt, r, terminated=d)
  np.testing.assert_allclose(loss, 0.362050, atol=1e-6)
  np.testing.assert_allclose(extras.q_head_loss, [0.13, 0.12205], atol=1e-6)
  np.testing.assert_allclose(extras.v_head_loss, [0.085, 0.025], atol=1e-6)
  np.testing.assert_allclose(extras.v_target, Q_PI_TGT, atol=1e-6)
  np.testing.assert_allclose(extras.q_td_error, [[0.1, 0.5], [-0.29, 0.4]], atol=1e-6)
  np.testing.assert_allclose(extras.v_error, Q_PI_TGT - V, atol=1e-6)
  np.testing.assert_allclose(extras.loss_sum, 2 * 0.362050, atol=1e-6)
  assert extras.denominator == 2.0
  np.testing.assert_allclose(
    loss, numpy_critic_loss(Q, V, V_NEXT_TGT, Q_PI_TGT, R, DONE, GAMMA), atol=1e-6
  )


def test_terminated_removes_bootstrap_truncated_keeps_it():
  r, vn = f32([0.5, 0.5]), f32([[4.0, 4.0], [2.0, 2.0]])
  # Example 0 terminated (no bootstrap); example 1 truncated by a time limit: terminated = 0 and
  # V̄ is evaluated at the true next state, so it bootstraps.
  y = hc.archer_q_targets(r, jnp.array([True, False]), vn, 0.9)
  np.testing.assert_allclose(y, [[0.5, 0.5 + 0.9 * 4.0], [0.5, 0.5 + 0.9 * 2.0]], atol=1e-6)
  # The terminated example's loss does not depend on V̄(s') at all.
  q, v, _, qpt, r2, d = critic_args()
  vn_changed = f32(V_NEXT_TGT).at[:, 1].set(123.0)
  a, _ = hc.archer_critic_loss(q, v, f32(V_NEXT_TGT), qpt, r2, d, GAMMA)
  b, _ = hc.archer_critic_loss(q, v, vn_changed, qpt, r2, d, GAMMA)
  np.testing.assert_allclose(a, b, atol=1e-7)


def test_q_head_uses_matching_target_v_head():
  q, v, vn, qpt, r, d = critic_args()
  swapped = vn[::-1]
  a, _ = hc.archer_critic_loss(q, v, vn, qpt, r, d, GAMMA)
  b, _ = hc.archer_critic_loss(q, v, swapped, qpt, r, d, GAMMA)
  assert abs(float(a) - float(b)) > 1e-3
  expected = numpy_critic_loss(Q, V, V_NEXT_TGT[::-1], Q_PI_TGT, R, DONE, GAMMA)
  np.testing.assert_allclose(b, expected, atol=1e-6)
  # With the min over target heads, the head order no longer matters.
  a_min, _ = hc.archer_critic_loss(q, v, vn, qpt, r, d, GAMMA, q_target_heads="min")
  b_min, _ = hc.archer_critic_loss(q, v, swapped, qpt, r, d, GAMMA, q_target_heads="min")
  np.testing.assert_allclose(a_min, b_min, atol=1e-7)


def test_min_head_targets_hand_computed():
  q, v, vn, qpt, r, d = critic_args()
  loss, extras = hc.archer_critic_loss(
    q, v, vn, qpt, r, d, GAMMA, q_target_heads="min", v_target_heads="min"
  )
  y = R + GAMMA * (1.0 - DONE) * V_NEXT_TGT.min(axis=0)  # [-3.09, 0]
  z = Q_PI_TGT.min(axis=0)  # [-3.3, -0.2]
  expected = np.mean((Q - y[None]) ** 2, axis=1).sum() + np.mean((V - z[None]) ** 2, axis=1).sum()
  np.testing.assert_allclose(loss, expected, atol=1e-6)
  np.testing.assert_allclose(extras.q_target, np.stack([y, y]), atol=1e-6)
  np.testing.assert_allclose(extras.v_target, np.stack([z, z]), atol=1e-6)


def test_critic_gradients_and_target_stop_gradient():
  q, v, vn, qpt, r, d = critic_args()
  batch = Q.shape[1]
  y = R[None] + GAMMA * (1.0 - DONE)[None] * V_NEXT_TGT

  def loss(q, v, vn, qpt, stop):
    return hc.archer_critic_loss(q, v, vn, qpt, r, d, GAMMA, stop_target_gradients=stop)[0]

  g_q, g_v, g_vn, g_qpt = jax.grad(loss, argnums=(0, 1, 2, 3))(q, v, vn, qpt, True)
  np.testing.assert_allclose(g_q, 2.0 * (Q - y) / batch, atol=1e-6)
  np.testing.assert_allclose(g_v, 2.0 * (V - Q_PI_TGT) / batch, atol=1e-6)
  np.testing.assert_array_equal(g_vn, 0.0)
  np.testing.assert_array_equal(g_qpt, 0.0)

  _, _, g_vn, g_qpt = jax.grad(loss, argnums=(0, 1, 2, 3))(q, v, vn, qpt, False)
  np.testing.assert_allclose(g_vn, -2.0 * (Q - y) * GAMMA * (1.0 - DONE)[None] / batch, atol=1e-6)
  np.testing.assert_allclose(g_qpt, -2.0 * (V - Q_PI_TGT) / batch, atol=1e-6)


def test_valid_mask_ignores_padding_examples():
  q, v, vn, qpt, r, d = critic_args()
  pad = lambda x: jnp.concatenate([x, jnp.full(x.shape[:-1] + (1,), 77.0)], axis=-1)
  loss, extras = hc.archer_critic_loss(
    pad(q),
    pad(v),
    pad(vn),
    pad(qpt),
    pad(r),
    jnp.append(d, 0.0),
    GAMMA,
    valid=jnp.array([True, True, False]),
  )
  np.testing.assert_allclose(loss, 0.362050, atol=1e-6)
  np.testing.assert_allclose(extras.q_head_loss, [0.13, 0.12205], atol=1e-6)
  assert extras.denominator == 2.0


# ----------------------------------------------------------------------------------------------
# ArCHer actor.
# ----------------------------------------------------------------------------------------------


def test_advantage_matches_the_hand_computed_vector_and_has_no_gradient():
  adv = hc.archer_advantage(f32(Q_PI_ONLINE), f32(V))
  np.testing.assert_allclose(adv, [0.1, 0.15], atol=1e-6)
  g = jax.grad(lambda q, v: jnp.sum(hc.archer_advantage(q, v)), argnums=(0, 1))(
    f32(Q_PI_ONLINE), f32(V)
  )
  np.testing.assert_array_equal(g[0], 0.0)
  np.testing.assert_array_equal(g[1], 0.0)


@IDENTITY_OR_JIT
def test_actor_loss_matches_the_hand_computed_vector(wrap):
  loss, extras = wrap(hc.archer_actor_loss)(
    f32(TOKEN_LOGP), jnp.asarray(TOKEN_MASK), f32(Q_PI_ONLINE), f32(V)
  )
  np.testing.assert_allclose(loss, 1.1625, atol=1e-6)
  np.testing.assert_allclose(extras.sequence_log_prob, [-12.0, -7.5], atol=1e-6)
  np.testing.assert_allclose(extras.advantage, [0.1, 0.15], atol=1e-6)
  np.testing.assert_array_equal(extras.num_tokens, [2, 1])
  np.testing.assert_allclose(extras.loss_sum, 2 * 1.1625, rtol=1e-5)


def test_actor_gradient_flows_only_through_token_log_probs():
  def loss(logp, q, v):
    return hc.archer_actor_loss(logp, jnp.asarray(TOKEN_MASK), q, v)[0]

  g_logp, g_q, g_v = jax.grad(loss, argnums=(0, 1, 2))(f32(TOKEN_LOGP), f32(Q_PI_ONLINE), f32(V))
  adv = Q_PI_ONLINE.min(axis=0) - V.min(axis=0)
  np.testing.assert_allclose(g_logp, -adv[:, None] * TOKEN_MASK / 2.0, atol=1e-6)
  np.testing.assert_array_equal(g_q, 0.0)
  np.testing.assert_array_equal(g_v, 0.0)


def test_padded_tokens_contribute_nothing_even_if_not_finite():
  logp = f32(TOKEN_LOGP).at[0, 2].set(-jnp.inf).at[1, 1].set(jnp.nan).at[1, 2].set(1e6)
  float_mask = f32(TOKEN_MASK)  # a 0/1 float mask is accepted and means the same

  def loss(logp):
    return hc.archer_actor_loss(logp, float_mask, f32(Q_PI_ONLINE), f32(V))[0]

  np.testing.assert_allclose(loss(logp), 1.1625, atol=1e-6)
  g = jax.grad(loss)(logp)
  assert np.all(np.isfinite(g))
  np.testing.assert_array_equal(np.asarray(g)[~TOKEN_MASK], 0.0)


# ----------------------------------------------------------------------------------------------
# Token-level baseline variant.
# ----------------------------------------------------------------------------------------------

BASELINE = np.array([[0.05, -0.1, 9.0], [0.2, 9.0, 9.0]])


def numpy_baseline_loss(coef, denominator):
  adv = Q_PI_ONLINE.min(axis=0) - V.min(axis=0)
  resid = (adv[:, None] - BASELINE) * TOKEN_MASK
  pg = -np.mean(np.sum(resid * TOKEN_LOGP, axis=1))
  d = TOKEN_MASK.sum() if denominator == "valid_tokens" else TOKEN_MASK.size
  return pg + coef * np.sum(resid**2) / d, pg, resid


@pytest.mark.parametrize("denominator", ["valid_tokens", "all_tokens"])
def test_baseline_loss_hand_computed(denominator):
  loss, extras = hc.archer_baseline_actor_loss(
    f32(TOKEN_LOGP),
    jnp.asarray(TOKEN_MASK),
    f32(Q_PI_ONLINE),
    f32(V),
    f32(BASELINE),
    baseline_coef=0.5,
    baseline_denominator=denominator,
  )
  expected, pg, resid = numpy_baseline_loss(0.5, denominator)
  np.testing.assert_allclose(loss, expected, atol=1e-5)
  np.testing.assert_allclose(extras.pg_loss, pg, atol=1e-5)
  np.testing.assert_allclose(extras.residual_advantage, resid, atol=1e-6)
  assert extras.baseline_denominator == (3 if denominator == "valid_tokens" else 6)


def test_baseline_gradients_use_detached_residual():
  mask = jnp.asarray(TOKEN_MASK)

  def loss(logp, b, q, v):
    return hc.archer_baseline_actor_loss(logp, mask, q, v, b, baseline_coef=0.5)[0]

  g_logp, g_b, g_q, g_v = jax.grad(loss, argnums=(0, 1, 2, 3))(
    f32(TOKEN_LOGP), f32(BASELINE), f32(Q_PI_ONLINE), f32(V)
  )
  _, _, resid = numpy_baseline_loss(0.5, "valid_tokens")
  np.testing.assert_allclose(g_logp, -resid / 2.0, atol=1e-6)
  # Only the regression term reaches the baseline: d/db of 0.5·Σ mask·(A − b)²/3.
  np.testing.assert_allclose(g_b, 0.5 * -2.0 * resid / TOKEN_MASK.sum(), atol=1e-6)
  np.testing.assert_array_equal(g_q, 0.0)
  np.testing.assert_array_equal(g_v, 0.0)


def test_zero_baseline_reduces_to_plain_actor_loss():
  args = (f32(TOKEN_LOGP), jnp.asarray(TOKEN_MASK), f32(Q_PI_ONLINE), f32(V))
  plain, _ = hc.archer_actor_loss(*args)
  with_zero, extras = hc.archer_baseline_actor_loss(
    *args, jnp.zeros_like(f32(TOKEN_LOGP)), baseline_coef=0.0
  )
  np.testing.assert_allclose(with_zero, plain, atol=1e-6)
  adv = Q_PI_ONLINE.min(axis=0) - V.min(axis=0)
  np.testing.assert_allclose(extras.baseline_loss, (2 * adv[0] ** 2 + adv[1] ** 2) / 3, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Offline ArCHer.
# ----------------------------------------------------------------------------------------------


def test_offline_critic_expectile_matches_the_hand_computed_vector():
  # Q is at its target (terminal, r = 0, Q = 0), so only the expectile V term remains.
  zeros = jnp.zeros((1, 2))
  loss, extras = hc.offline_archer_critic_loss(
    zeros,
    f32([[1.5, 1.5]]),
    zeros,
    f32([[1.0, 2.0]]),
    jnp.zeros(2),
    jnp.ones(2),
    0.99,
    expectile=0.9,
  )
  np.testing.assert_allclose(loss, 0.125, atol=1e-6)
  np.testing.assert_allclose(extras.v_head_loss, [0.125], atol=1e-6)
  np.testing.assert_allclose(extras.v_error, [[-0.5, 0.5]], atol=1e-6)


def test_offline_critic_half_expectile_is_half_mse_and_targets_are_stopped():
  q, v, vn, qdt, r, d = critic_args()
  online, online_extras = hc.archer_critic_loss(q, v, vn, qdt, r, d, GAMMA)
  offline, _ = hc.offline_archer_critic_loss(q, v, vn, qdt, r, d, GAMMA, expectile=0.5)
  np.testing.assert_allclose(offline, online - 0.5 * jnp.sum(online_extras.v_head_loss), atol=1e-6)
  g_vn, g_qdt = jax.grad(
    lambda vn, qdt: hc.offline_archer_critic_loss(q, v, vn, qdt, r, d, GAMMA)[0], argnums=(0, 1)
  )(vn, qdt)
  np.testing.assert_array_equal(g_vn, 0.0)
  np.testing.assert_array_equal(g_qdt, 0.0)


ADV = np.array([-1.0, 0.0, 0.5, 2.0])
SEQ_LOGP = np.array([-2.0, -1.0, -3.0, -0.5])


@pytest.mark.parametrize(
  "inv_temp, max_weight, weights",
  [
    (1.0, None, [0.367879, 1.0, 1.648721, 7.389056]),
    (3.0, 100.0, [0.049787, 1.0, 4.481689, 100.0]),
  ],
)
def test_offline_actor_awr_weights_match_the_hand_computed_vector(inv_temp, max_weight, weights):
  v = jnp.zeros((2, 4))
  q_data = f32(np.stack([ADV, ADV + 1.0]))  # min over heads is ADV
  logp = f32(np.stack([SEQ_LOGP, np.zeros(4)], axis=1))
  mask = jnp.array([[True, False]] * 4)

  def loss(logp, q, v):
    return hc.offline_archer_actor_loss(logp, mask, q, v, inv_temp, max_weight)

  (value, extras) = loss(logp, q_data, v)
  np.testing.assert_allclose(extras.weight, weights, rtol=1e-5)
  np.testing.assert_allclose(value, -np.mean(np.array(weights) * SEQ_LOGP), rtol=1e-5)
  g_logp, g_q, g_v = jax.grad(lambda *a: loss(*a)[0], argnums=(0, 1, 2))(logp, q_data, v)
  np.testing.assert_allclose(g_logp[:, 0], -np.array(weights) / 4.0, rtol=1e-5)
  np.testing.assert_array_equal(g_logp[:, 1], 0.0)
  np.testing.assert_array_equal(g_q, 0.0)
  np.testing.assert_array_equal(g_v, 0.0)


def test_offline_actor_zero_temperature_is_behaviour_cloning():
  args = (f32(TOKEN_LOGP), jnp.asarray(TOKEN_MASK))
  awr, _ = hc.offline_archer_actor_loss(*args, f32(Q_PI_ONLINE), f32(V), inv_temp=0.0)
  bc, _ = hc.filtered_bc_loss(*args, jnp.ones(2, dtype=bool))
  np.testing.assert_allclose(awr, bc, atol=1e-6)
  np.testing.assert_allclose(bc, (12.0 + 7.5) / 2.0, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Filtered BC and CHAI.
# ----------------------------------------------------------------------------------------------


def test_filtered_bc_mask_matches_the_hand_computed_vector():
  keep = hc.filtered_bc_mask(f32([-20.0, -5.0, -3.0, 0.0, -1.0]), top_fraction=0.1)
  np.testing.assert_array_equal(keep, [False, False, False, True, False])


def test_filtered_bc_quantile_matches_numpy_and_ignores_invalid_slots():
  rng = np.random.default_rng(0)
  returns = rng.integers(-20, 1, size=37).astype(np.float64)  # integer returns: many ties
  expected = returns >= np.quantile(returns, 1 - 0.25)
  keep = hc.filtered_bc_mask(f32(returns), top_fraction=0.25)
  np.testing.assert_array_equal(keep, expected)
  # A fixed-capacity buffer: empty slots hold garbage and are never kept or counted.
  buffer = f32(np.concatenate([returns, [100.0, 100.0, -100.0]]))
  valid = jnp.arange(40) < 37
  keep_buffer = hc.filtered_bc_mask(buffer, top_fraction=0.25, valid=valid)
  np.testing.assert_array_equal(keep_buffer, np.concatenate([expected, [False] * 3]))


def test_filtered_bc_top_count_keeps_floor_fraction_first_index_on_ties():
  returns = f32([1.0, 5.0, 3.0, 5.0, 2.0, 0.0, 5.0])
  keep = hc.filtered_bc_mask(returns, top_fraction=0.3, method="top_count")  # floor(2.1) = 2
  np.testing.assert_array_equal(keep, [False, True, False, True, False, False, False])
  valid = jnp.array([True, False, True, True, True, True, True])  # 6 valid: floor(1.8) = 1
  keep = hc.filtered_bc_mask(returns, top_fraction=0.3, method="top_count", valid=valid)
  np.testing.assert_array_equal(keep, [False, False, False, True, False, False, False])


def test_filtered_bc_loss_averages_over_kept_examples():
  logp = f32([[-1.0, -2.0], [-4.0, jnp.nan], [-0.5, -0.5]])
  mask = jnp.array([[True, True], [True, False], [True, False]])
  loss, extras = hc.filtered_bc_loss(logp, mask, jnp.array([True, True, False]))
  np.testing.assert_allclose(loss, (3.0 + 4.0) / 2.0, atol=1e-6)
  assert extras.denominator == 2.0
  empty, _ = hc.filtered_bc_loss(logp, mask, jnp.zeros(3, dtype=bool))
  assert float(empty) == 0.0


def test_chai_select_takes_max_of_min_over_heads():
  q = f32(
    [[[1.0, 5.0, 2.0], [0.0, 0.0, -1.0]], [[3.0, 0.5, 2.5], [0.0, 0.0, 4.0]]]
  )  # [E=2, B=2, K=3]
  index, value = hc.chai_select(q)
  # min over heads: [[1, 0.5, 2], [0, 0, -1]] -> argmax [2, 0] (tie -> first).
  np.testing.assert_array_equal(index, [2, 0])
  np.testing.assert_allclose(value, [2.0, 0.0])


# ----------------------------------------------------------------------------------------------
# Bad inputs.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [-0.1, 1.5, float("nan"), "0.9", True])
def test_bad_gamma_raises(gamma):
  with pytest.raises(ValueError, match="gamma"):
    hc.archer_critic_loss(*critic_args(), gamma)


@pytest.mark.parametrize(
  "call, match",
  [
    (lambda: hc.archer_critic_loss(*critic_args(), GAMMA, q_target_heads="mean"), "heads"),
    (lambda: hc.archer_critic_loss(*critic_args(), GAMMA, v_target_heads="max"), "heads"),
    (lambda: hc.offline_archer_critic_loss(*critic_args(), GAMMA, expectile=1.0), "expectile"),
    (
      lambda: hc.offline_archer_actor_loss(
        f32(TOKEN_LOGP), TOKEN_MASK, f32(Q), f32(V), inv_temp=-1.0
      ),
      "inv_temp",
    ),
    (
      lambda: hc.offline_archer_actor_loss(
        f32(TOKEN_LOGP), TOKEN_MASK, f32(Q), f32(V), max_weight=0.0
      ),
      "max_weight",
    ),
    (
      lambda: hc.archer_baseline_actor_loss(
        f32(TOKEN_LOGP), TOKEN_MASK, f32(Q), f32(V), f32(BASELINE), baseline_denominator="tokens"
      ),
      "baseline_denominator",
    ),
    (
      lambda: hc.archer_baseline_actor_loss(
        f32(TOKEN_LOGP), TOKEN_MASK, f32(Q), f32(V), f32(BASELINE), baseline_coef=-1.0
      ),
      "baseline_coef",
    ),
    (lambda: hc.filtered_bc_mask(f32(R), top_fraction=0.0), "top_fraction"),
    (lambda: hc.filtered_bc_mask(f32(R), method="sorted"), "method"),
  ],
)
def test_bad_python_arguments_raise_value_error(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_bad_shapes_and_dtypes_raise():
  q, v, vn, qpt, r, d = critic_args()
  with pytest.raises(AssertionError):  # critic outputs without the ensemble axis
    hc.archer_critic_loss(q[0], v[0], vn[0], qpt[0], r, d, GAMMA)
  with pytest.raises(AssertionError):  # integer critic outputs
    hc.archer_critic_loss(q.astype(jnp.int32), v, vn, qpt, r, d, GAMMA)
  with pytest.raises(AssertionError):  # batch mismatch between rewards and critic
    hc.archer_critic_loss(q, v, vn, qpt, jnp.zeros(3), d, GAMMA)
  with pytest.raises(AssertionError):  # three heads of V against two of Q
    hc.archer_advantage(q, jnp.zeros((3, 2)))
  with pytest.raises(AssertionError):  # token mask shape differs from the log-probs
    hc.archer_actor_loss(f32(TOKEN_LOGP), TOKEN_MASK[:, :2], f32(Q_PI_ONLINE), f32(V))
  with pytest.raises(AssertionError):  # token batch differs from the critic batch
    hc.archer_actor_loss(f32(TOKEN_LOGP[:1]), TOKEN_MASK[:1], f32(Q_PI_ONLINE), f32(V))
  with pytest.raises(AssertionError):  # log-probs must be float
    hc.filtered_bc_loss(jnp.zeros((2, 3), jnp.int32), TOKEN_MASK, jnp.ones(2, bool))
  with pytest.raises(AssertionError):  # CHAI needs [E, B, K]
    hc.chai_select(q)


# ----------------------------------------------------------------------------------------------
# Token-level PPO's credit assignment (token_stream, token_level_advantages).
# ----------------------------------------------------------------------------------------------


def reference_token_gae(reward, terminated, done, value, next_value, mask, gamma, lam, token_gamma):
  """GAE over the read tokens only, in float64, written over the compacted stream of read
  tokens: returns `[T, L]` advantages (0 on unread tokens)."""
  steps = []
  for t in range(mask.shape[0]):
    n = int(mask[t].sum())
    for j in range(n):
      last = j == n - 1
      steps.append(
        dict(
          index=(t, j),
          r=reward[t] if last else 0.0,
          discount=gamma * (1.0 - terminated[t]) if last else token_gamma,
          v=value[t, j],
          v_next=next_value[t] if last else value[t, j + 1],
          done=bool(done[t]) if last else False,
        )
      )
  out = np.zeros(mask.shape)
  advantage = 0.0
  for s in reversed(steps):
    delta = s["r"] + s["discount"] * s["v_next"] - s["v"]
    advantage = delta + s["discount"] * lam * (1.0 - s["done"]) * advantage
    out[s["index"]] = advantage
  return out


def prefix_mask(lengths, num_tokens):
  return np.arange(num_tokens)[None, :] < np.asarray(lengths)[:, None]


@pytest.mark.parametrize("token_gamma", [1.0, 0.9], ids=["utterance", "token"])
def test_token_level_advantages_match_the_compacted_reference(token_gamma):
  """Two trajectories: one terminates at step 1 (a new game after), one is truncated at step 2
  (bootstraps from its true next dialogue, recursion cut)."""
  rng = np.random.default_rng(0)
  masks = [prefix_mask([4, 2, 3, 1], 4), prefix_mask([3, 3, 4, 2], 4)]
  terminated = [np.array([0, 1, 0, 0], bool), np.zeros(4, bool)]
  done = [np.array([0, 1, 0, 0], bool), np.array([0, 0, 1, 0], bool)]
  for mask, term, stop in zip(masks, terminated, done):
    reward, next_value = rng.normal(size=4), rng.normal(size=4)
    value = rng.normal(size=(4, 4))
    got = hc.token_level_advantages(
      f32(reward),
      jnp.asarray(term),
      jnp.asarray(stop),
      f32(value),
      f32(next_value),
      jnp.asarray(mask),
      0.9,
      0.8,
      token_gamma,
    )
    want = reference_token_gae(reward, term, stop, value, next_value, mask, 0.9, 0.8, token_gamma)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_token_level_advantages_of_a_terminal_utterance_hand_computed():
  """One utterance of 3 read tokens, reward 1, terminated, λ = 1: A_j = 1 − V_j; unread 0."""
  got = hc.token_level_advantages(
    jnp.ones(1),
    jnp.ones(1, bool),
    jnp.ones(1, bool),
    f32([[0.1, 0.2, 0.3, 0.4]]),
    f32([5.0]),
    jnp.array([[True, True, True, False]]),
    0.9,
    1.0,
  )
  np.testing.assert_allclose(np.asarray(got[0]), [0.9, 0.8, 0.7, 0.0], atol=1e-6)


def test_token_level_truncation_bootstraps_from_the_next_dialogue():
  """Truncated (done, not terminated): the last token bootstraps γ·V(next); nothing beyond."""
  got = hc.token_level_advantages(
    f32([0.0, 7.0]),
    jnp.zeros(2, bool),
    jnp.array([True, False]),
    jnp.zeros((2, 4)),
    f32([2.0, 0.0]),
    jnp.asarray(prefix_mask([1, 1], 4)),
    0.5,
    1.0,
  )
  np.testing.assert_allclose(np.asarray(got[:, 0]), [1.0, 7.0], atol=1e-6)


def test_token_stream_marks_unread_tokens_as_pass_through_steps():
  """Unread tokens: reward 0, value 0, discount 1, λ 1, not done (the next utterance's advantage
  passes through them unchanged); the last read token carries the reward and γ(1 − terminated)."""
  stream = hc.token_stream(
    f32([2.0]),
    jnp.ones(1, bool),
    jnp.ones(1, bool),
    f32([[0.5, 0.6, 0.7]]),
    f32([9.0]),
    jnp.array([[True, True, False]]),
    0.9,
    0.8,
    token_gamma=0.7,
  )
  np.testing.assert_allclose(stream.reward, [0.0, 2.0, 0.0])
  np.testing.assert_allclose(stream.discount, [0.7, 0.0, 1.0], atol=1e-7)
  np.testing.assert_allclose(stream.value, [0.5, 0.6, 0.0])
  np.testing.assert_allclose(stream.next_value, [0.6, 9.0, 0.0])
  np.testing.assert_allclose(stream.lambda_, [0.8, 0.8, 1.0], atol=1e-7)
  np.testing.assert_array_equal(stream.done, [False, True, False])


def test_normalize_token_advantages_uses_the_masked_tokens_only():
  adv = jnp.array([[1.0, 3.0, 100.0]])
  mask = jnp.array([[True, True, False]])
  np.testing.assert_allclose(
    np.asarray(hc.normalize_token_advantages(adv, mask)), [[-1.0, 1.0, 0.0]], atol=1e-6
  )


@pytest.mark.parametrize(
  "name, value", [("gamma", 1.5), ("gae_lambda", -0.1), ("token_gamma", 2.0)]
)
def test_token_level_discounts_outside_the_unit_interval_raise(name, value):
  kwargs = dict(gamma=0.9, gae_lambda=0.9, token_gamma=1.0)
  kwargs[name] = value
  with pytest.raises(ValueError, match=name):
    hc.token_level_advantages(
      f32([1.0]),
      jnp.ones(1, bool),
      jnp.ones(1, bool),
      f32([[0.1, 0.2]]),
      f32([0.0]),
      jnp.ones((1, 2), bool),
      **kwargs,
    )
