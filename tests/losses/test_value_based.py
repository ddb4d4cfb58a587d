"""Tests of hrljax.losses.value_based: QMIX's monotonic mixer and the SMDP target against
hand-computed vectors, monotonicity by `jax.grad`, the (double) Q-learning target and loss against
rlax, masked entries, out-of-range action ids and bad arguments."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from hrljax.losses import value_based as vb


def variants(fn):
  """The function itself and its jitted version (the losses are pure functions of arrays)."""
  return [fn, jax.jit(fn)]


def f32(x):
  return jnp.asarray(x, jnp.float32)


# The mixer's test vector. By hand (float64): |W1| = [[1, 2], [0.5, 1]], |W1|ᵀq = [2, 4],
# + b1 = [-1, 4], ELU = [e^-1 - 1, 4] = [-0.6321206, 4], · |w2| = [1, 0.5] -> 1.3678794,
# + b2 -> 1.4678794.
Q_AGENTS = f32([1.0, 2.0])
W1 = f32([[1.0, -2.0], [0.5, 1.0]])
B1 = f32([-3.0, 0.0])
W2 = f32([-1.0, 0.5])
B2 = f32(0.1)


def numpy_mix(q, w1, b1, w2, b2):
  h = np.asarray(q, np.float64) @ np.abs(np.asarray(w1, np.float64)) + np.asarray(b1, np.float64)
  h = np.where(h > 0, h, np.expm1(np.minimum(h, 0)))
  return h @ np.abs(np.asarray(w2, np.float64)) + np.asarray(b2, np.float64)


def test_the_mixer_vector_recomputes_by_hand():
  expected = (math.exp(-1.0) - 1.0) * 1.0 + 4.0 * 0.5 + 0.1
  assert expected == pytest.approx(1.467879, abs=5e-7)
  # float64 from the float32 inputs (b2 = 0.1 is 0.10000000149 in float32)
  assert numpy_mix(Q_AGENTS, W1, B1, W2, B2) == pytest.approx(expected, abs=1e-8)


@pytest.mark.parametrize("fn", variants(vb.monotonic_mix))
def test_monotonic_mix_matches_the_vector(fn):
  np.testing.assert_allclose(fn(Q_AGENTS, W1, B1, W2, B2), 1.467879, rtol=1e-6)


def test_monotonic_mix_takes_leading_batch_axes():
  rng = np.random.default_rng(0)
  q, w1 = f32(rng.normal(size=(2, 3, 4))), f32(rng.normal(size=(2, 3, 4, 5)))
  b1, w2, b2 = (
    f32(rng.normal(size=(2, 3, 5))),
    f32(rng.normal(size=(2, 3, 5))),
    f32(rng.normal(size=(2, 3))),
  )
  out = vb.monotonic_mix(q, w1, b1, w2, b2)
  assert out.shape == (2, 3)
  np.testing.assert_allclose(out, numpy_mix_batched(q, w1, b1, w2, b2), rtol=1e-5, atol=1e-6)


def numpy_mix_batched(q, w1, b1, w2, b2):
  lead = q.shape[:-1]
  out = np.empty(lead)
  for index in np.ndindex(*lead):
    out[index] = numpy_mix(q[index], w1[index], b1[index], w2[index], b2[index])
  return out


def test_the_mixed_value_is_monotonic_in_every_agent_value():
  """∂Q_tot/∂q_i >= 0 (jax.grad) for random values and raw hypernetwork outputs of both signs,
  and > 0 where every weight is nonzero; without the absolute values it would be negative for
  some draws."""
  rng = np.random.default_rng(1)
  draws, agents, hidden = 256, 3, 4
  q = f32(rng.normal(size=(draws, agents)) * 3)
  w1 = f32(rng.normal(size=(draws, agents, hidden)))
  b1, w2 = f32(rng.normal(size=(draws, hidden))), f32(rng.normal(size=(draws, hidden)))
  b2 = f32(rng.normal(size=(draws,)))
  grad = jax.jit(jax.vmap(jax.grad(vb.monotonic_mix)))(q, w1, b1, w2, b2)
  assert grad.shape == (draws, agents)
  assert np.all(np.asarray(grad) > 0.0)

  def signed_mix(q, w1, b1, w2, b2):  # the same network without the constraint
    return jnp.sum(jax.nn.elu(q @ w1 + b1) * w2) + b2

  assert np.any(np.asarray(jax.jit(jax.vmap(jax.grad(signed_mix)))(q, w1, b1, w2, b2)) < 0.0)


def test_permuting_agents_with_their_weight_rows_changes_nothing():
  rng = np.random.default_rng(2)
  q, w1 = f32(rng.normal(size=4)), f32(rng.normal(size=(4, 3)))
  b1, w2, b2 = f32(rng.normal(size=3)), f32(rng.normal(size=3)), f32(0.3)
  perm = np.array([2, 0, 3, 1])
  np.testing.assert_allclose(
    vb.monotonic_mix(q[perm], w1[perm], b1, w2, b2), vb.monotonic_mix(q, w1, b1, w2, b2), rtol=1e-6
  )


@pytest.mark.parametrize(
  "args, name",
  [
    ((Q_AGENTS, W1[:, :1], B1, W2, B2), "b1"),  # M = 1 from w1, b1 has 2
    ((Q_AGENTS, W1[:1], B1, W2, B2), "w1"),  # one agent's row for two agents
    ((Q_AGENTS, W1, B1, W2[:1], B2), "w2"),
    ((Q_AGENTS, W1, B1, W2, f32([0.1, 0.1])), "b2"),
    ((Q_AGENTS[None], W1, B1, W2, B2), "w1"),  # a batch axis on q alone
    ((f32(1.0), W1, B1, W2, B2), "q_agents"),
  ],
)
def test_monotonic_mix_names_the_argument_of_a_wrong_shape(args, name):
  with pytest.raises(ValueError, match=rf"^{name}: expected "):
    vb.monotonic_mix(*args)


def test_monotonic_mix_rejects_integer_values():
  with pytest.raises(AssertionError):
    vb.monotonic_mix(jnp.array([1, 2]), W1, B1, W2, B2)


# ------------------------------------------------------------------------------------ SMDP target
# The test vector: rewards [1, 0, 1], γ = 0.9, c = 3, Q̄ = 2: 1 + 0 + 0.81 + 0.729·2 = 3.268.
R3, G3, Q3 = f32([1.0, 0.0, 1.0]), f32([0.9, 0.9, 0.9]), f32(2.0)


@pytest.mark.parametrize("fn", variants(vb.smdp_target))
def test_smdp_target_matches_the_vector(fn):
  assert 1.0 + 0.0 * 0.9 + 1.0 * 0.81 + 0.729 * 2.0 == pytest.approx(3.268, abs=1e-12)
  np.testing.assert_allclose(fn(R3, G3, Q3), 3.268, rtol=1e-6)


def test_a_one_step_window_is_the_one_step_target():
  def both(discount):
    return (
      vb.smdp_target(f32([1.5]), discount[None], f32(2.0)),
      vb.q_learning_target(f32(1.5), discount, f32([2.0, -1.0])),
    )

  smdp, one_step = jax.jit(jax.vmap(both))(f32([0.9, 0.0]))
  np.testing.assert_allclose(smdp, one_step, rtol=1e-6)
  np.testing.assert_allclose(smdp, [1.5 + 0.9 * 2.0, 1.5], rtol=1e-6)


@pytest.mark.parametrize("fn", variants(vb.smdp_target))
def test_a_termination_inside_the_window_stops_the_sum_and_the_bootstrap(fn):
  """Terminated after the second step: y = 1 + 0.9·0 = 1, whatever follows (NaN) or Q̄ (NaN)."""
  rewards = f32([1.0, 0.0, np.nan])
  discounts = f32([0.9, 0.0, np.nan])
  np.testing.assert_allclose(fn(rewards, discounts, f32(np.nan)), 1.0, rtol=1e-6)


def test_a_truncated_window_ends_with_its_mask_and_bootstraps():
  """The option was cut by a time limit after two steps: y = 1 + 0 + 0.81·Q̄(final observation);
  the padding (NaN) is not read."""
  rewards, discounts = f32([1.0, 0.0, np.nan, np.nan]), f32([0.9, 0.9, np.nan, np.nan])
  mask = jnp.array([True, True, False, False])
  fn = jax.jit(vb.smdp_target)
  np.testing.assert_allclose(fn(rewards, discounts, f32(2.0), mask), 1.0 + 0.81 * 2.0, rtol=1e-6)
  # Everything from the first False on is padding, even a True after it.
  holey = jnp.array([True, True, False, True])
  np.testing.assert_allclose(fn(rewards, discounts, f32(2.0), holey), 1.0 + 0.81 * 2.0, rtol=1e-6)


def test_an_empty_window_is_an_invalid_example():
  out = vb.smdp_target(f32([np.nan, 1.0]), f32([np.nan, 0.9]), f32(np.nan), jnp.array([0, 1]))
  assert float(out) == 0.0


def test_masked_entries_get_no_gradient_and_leak_no_nan():
  rewards = f32([1.0, 0.5, np.nan])
  discounts = f32([0.9, 0.0, np.nan])

  def total(r, d, q):
    return vb.smdp_target(r, d, q, stop_target_gradients=False)

  grads = jax.jit(jax.grad(total, argnums=(0, 1, 2)))(rewards, discounts, f32(np.inf))
  np.testing.assert_allclose(grads[0], [1.0, 0.9, 0.0], rtol=1e-6)  # ∂y/∂r_i = Π_{j<i} d_j
  np.testing.assert_allclose(grads[1], [0.5, 0.0, 0.0], rtol=1e-6)  # ∂y/∂d_0 = r_1
  assert float(grads[2]) == 0.0
  stopped = jax.jit(jax.grad(lambda r: vb.smdp_target(r, discounts, f32(2.0))))(rewards)
  assert float(jnp.abs(stopped).sum()) == 0.0


def test_smdp_target_shapes_are_checked():
  with pytest.raises(AssertionError):
    vb.smdp_target(R3, G3[:2], Q3)
  with pytest.raises(AssertionError):
    vb.smdp_target(R3, G3, f32([2.0]))
  with pytest.raises(AssertionError):
    vb.smdp_target(R3, G3, Q3, jnp.ones(2, bool))


# ------------------------------------------------------------------------------- (double) Q-learning
# A constructed next state where the online network prefers action 0 (selector [1, 0]) and the
# target network values the actions [1, 3]: DQN bootstraps from max = 3, Double DQN from the
# target network's value of the online choice, 1.
Q_T = f32([1.0, 3.0])
SELECTOR = f32([1.0, 0.0])


@pytest.mark.parametrize("fn", variants(vb.q_learning_target))
def test_q_learning_target_single_and_double(fn):
  np.testing.assert_allclose(fn(f32(0.5), f32(0.9), Q_T), 0.5 + 0.9 * 3.0, rtol=1e-6)
  np.testing.assert_allclose(fn(f32(0.5), f32(0.9), Q_T, SELECTOR), 0.5 + 0.9 * 1.0, rtol=1e-6)


def test_a_terminal_transition_reads_no_next_values():
  nan = f32([np.nan, np.nan])
  assert float(vb.q_learning_target(f32(0.5), f32(0.0), nan, nan)) == 0.5
  _, extras = vb.q_learning_loss(f32([1.0, 2.0]), jnp.int32(0), f32(0.5), f32(0.0), nan, nan)
  assert float(extras.target) == 0.5 and float(extras.td_error) == -0.5
  grad = jax.grad(lambda q: vb.q_learning_loss(q, jnp.int32(0), f32(0.5), f32(0.0), nan)[0])(
    f32([1.0, 2.0])
  )
  np.testing.assert_allclose(grad, [0.5, 0.0])


def test_a_nan_selector_gives_a_nan_target_not_a_silent_action():
  out = vb.q_learning_target(f32(0.5), f32(0.9), Q_T, f32([np.nan, 0.0]))
  assert np.isnan(float(out))
  _, extras = vb.q_learning_loss(
    f32([1.0, 2.0]), jnp.int32(0), f32(0.5), f32(0.9), Q_T, f32([0.0, np.nan])
  )
  assert np.isnan(float(extras.td_error))


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("loss_type", ["l2", "huber"])
def test_q_learning_loss_is_rlax_td_error_with_the_house_loss(double, loss_type):
  rng = np.random.default_rng(3)
  q_tm1, q_t, selector = (f32(rng.normal(size=(8, 4)) * 2) for _ in range(3))
  a_tm1 = jnp.asarray(rng.integers(0, 4, size=8), jnp.int32)
  r_t = f32(rng.normal(size=8))
  discount_t = f32(np.where(rng.uniform(size=8) < 0.25, 0.0, 0.99))
  sel = selector if double else None

  def one(q_tm1, a_tm1, r_t, discount_t, q_t, selector):
    return vb.q_learning_loss(q_tm1, a_tm1, r_t, discount_t, q_t, selector, loss_type=loss_type)

  loss, extras = jax.jit(jax.vmap(one))(q_tm1, a_tm1, r_t, discount_t, q_t, sel)
  if double:
    td = jax.jit(jax.vmap(rlax.double_q_learning))(q_tm1, a_tm1, r_t, discount_t, q_t, selector)
  else:
    td = jax.jit(jax.vmap(rlax.q_learning))(q_tm1, a_tm1, r_t, discount_t, q_t)
  np.testing.assert_allclose(extras.td_error, td, rtol=1e-6, atol=1e-6)
  q_value = np.take_along_axis(np.asarray(q_tm1), np.asarray(a_tm1)[:, None], axis=1)[:, 0]
  np.testing.assert_allclose(extras.q_value, q_value)
  np.testing.assert_allclose(extras.target, td + q_value, rtol=1e-5, atol=1e-5)
  expected = rlax.l2_loss(td) if loss_type == "l2" else rlax.huber_loss(td, 1.0)
  np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)


def test_the_huber_loss_clips_the_error_term():
  """The gradient in Q(s, a) is −clip(td, −δ, δ) (Mnih et al. 2015's clipped error term)."""

  def grad(td, delta):
    def loss(q):
      return vb.q_learning_loss(
        q, jnp.int32(1), td, f32(0.0), f32([0.0, 0.0]), loss_type="huber", huber_delta=delta
      )[0]

    return jax.grad(loss)(f32([0.0, 0.0]))

  grads = jax.jit(jax.vmap(grad))(f32([5.0, 0.3, -5.0]), f32([1.0, 1.0, 2.0]))
  np.testing.assert_allclose(grads, [[0.0, -1.0], [0.0, -0.3], [0.0, 2.0]], rtol=1e-6)


def test_targets_carry_no_gradient_unless_asked():
  def loss(q_t, stop):
    return vb.q_learning_loss(
      f32([0.0, 1.0]),
      jnp.int32(0),
      f32(1.0),
      f32(0.9),
      q_t,
      loss_type="l2",
      stop_target_gradients=stop,
    )[0]

  assert float(jnp.abs(jax.grad(loss)(Q_T, True)).sum()) == 0.0
  # ½(y − q)², y = 1 + 0.9·3: ∂/∂q_t = (y − q)·0.9 at the max.
  np.testing.assert_allclose(jax.grad(loss)(Q_T, False), [0.0, 0.9 * 3.7], rtol=1e-6)


# ------------------------------------------------------------------------------- the mixed TD loss
Q_TM1 = f32([[1.0, 5.0], [-1.0, 2.0]])  # [N=2, A=2]; the chosen actions give Q_AGENTS
A_TM1 = jnp.array([0, 1], jnp.int32)


@pytest.mark.parametrize("fn", variants(vb.qmix_loss))
def test_qmix_loss_on_the_vector(fn):
  loss, extras = fn(Q_TM1, A_TM1, W1, B1, W2, B2, Q3)
  np.testing.assert_allclose(extras.q_tot, 1.467879, rtol=1e-6)
  np.testing.assert_allclose(extras.td_error, 2.0 - 1.467879, rtol=1e-5)
  np.testing.assert_allclose(loss, 0.5 * (2.0 - 1.467879) ** 2, rtol=1e-5)


def test_qmix_loss_gradient_is_the_td_error_times_the_mixer_gradient():
  """∂L/∂q_tm1 = −td·∂Q_tot/∂q_i at each agent's chosen action, 0 elsewhere; ∂L/∂w1 flows too."""
  loss = lambda q, w1: vb.qmix_loss(q, A_TM1, w1, B1, W2, B2, Q3)[0]
  grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(Q_TM1, W1)
  mixer_grad = jax.jit(jax.grad(vb.monotonic_mix))(Q_AGENTS, W1, B1, W2, B2)
  td = 2.0 - 1.467879
  expected = np.zeros((2, 2))
  expected[0, 0], expected[1, 1] = -td * mixer_grad[0], -td * mixer_grad[1]
  np.testing.assert_allclose(grads[0], expected, rtol=1e-4, atol=1e-7)
  assert float(jnp.abs(grads[1]).sum()) > 0.0


def test_one_agent_with_an_identity_mixer_is_single_agent_smdp_q_learning():
  """N = 1, W1 = w2 = 1, b1 large (ELU is then the identity), b2 = −b1: Q_tot = q, and the
  mixed loss on the SMDP target is the single-agent loss of that target."""
  q_tm1, a_tm1 = f32([[0.3, 1.2]]), jnp.array([1], jnp.int32)
  target = vb.smdp_target(R3, G3, Q3)
  loss, extras = vb.qmix_loss(
    q_tm1, a_tm1, f32([[1.0]]), f32([10.0]), f32([1.0]), f32(-10.0), target
  )
  np.testing.assert_allclose(extras.q_tot, 1.2, rtol=1e-6)
  np.testing.assert_allclose(loss, 0.5 * (3.268 - 1.2) ** 2, rtol=1e-5)


def test_qmix_loss_shapes_are_checked():
  with pytest.raises(ValueError, match="^a_tm1: expected shape"):
    vb.qmix_loss(Q_TM1, A_TM1[:1], W1, B1, W2, B2, Q3)
  with pytest.raises(ValueError, match="^w1: expected shape"):
    vb.qmix_loss(Q_TM1, A_TM1, W1[:1], B1, W2, B2, Q3)
  with pytest.raises(AssertionError):
    vb.qmix_loss(Q_TM1[0], A_TM1, W1, B1, W2, B2, Q3)


# ------------------------------------------------------------------ out-of-range action ids, options
@pytest.mark.parametrize("bad", [2, -1])
def test_an_out_of_range_action_raises_eagerly_naming_it(bad):
  with pytest.raises(ValueError, match=rf"a_tm1: expected indices in \[0, 2\).*\[{bad}\]"):
    vb.q_learning_loss(f32([1.0, 2.0]), jnp.int32(bad), f32(1.0), f32(0.9), Q_T)
  with pytest.raises(ValueError, match=rf"a_tm1: expected indices in \[0, 2\).*\[{bad}\]"):
    vb.qmix_loss(Q_TM1, jnp.array([0, bad], jnp.int32), W1, B1, W2, B2, Q3)


def test_an_out_of_range_action_is_an_invalid_example_under_jit():
  """Rows 1 and 3 hold A and −1 (and NaN values): loss, extras and gradient 0 there; rows 0 and 2
  as when every row is valid."""
  rng = np.random.default_rng(4)
  q_tm1 = np.asarray(rng.normal(size=(4, 2)), np.float32)
  q_tm1[[1, 3]] = np.nan
  actions = jnp.array([0, 2, 1, -1], jnp.int32)
  args = (f32(np.ones(4)), f32(np.full(4, 0.9)), f32(rng.normal(size=(4, 2))))

  @jax.jit
  def run(q, a):
    per_row = lambda q, a: jax.vmap(vb.q_learning_loss)(q, a, *args)
    return per_row(q, a), jax.grad(lambda q: per_row(q, a)[0].sum())(q)

  (loss, extras), grad = run(f32(q_tm1), actions)
  (good_loss, good_extras), good_grad = run(f32(np.nan_to_num(q_tm1)), jnp.array([0, 1, 1, 1]))
  for got, ref in zip((loss, *extras, grad), (good_loss, *good_extras, good_grad)):
    np.testing.assert_array_equal(np.asarray(got)[[0, 2]], np.asarray(ref)[[0, 2]])
    np.testing.assert_array_equal(np.asarray(got)[[1, 3]], 0.0)

  # The mixed loss: one agent out of range makes the whole team example invalid.
  qmix = jax.jit(lambda q, a: vb.qmix_loss(q, a, W1, B1, W2, B2, Q3))
  loss, extras = qmix(f32([[np.nan, 1.0], [2.0, 3.0]]), jnp.array([0, 2], jnp.int32))
  assert float(loss) == 0.0 and all(float(x) == 0.0 for x in extras)
  grad = jax.jit(jax.grad(lambda q: vb.qmix_loss(q, jnp.array([0, 2]), W1, B1, W2, B2, Q3)[0]))(
    Q_TM1
  )
  assert float(jnp.abs(grad).sum()) == 0.0


@pytest.mark.parametrize(
  "fn, args",
  [
    (vb.q_learning_loss, (f32([1.0, 2.0]), jnp.int32(0), f32(1.0), f32(0.9), Q_T)),
    (vb.qmix_loss, (Q_TM1, A_TM1, W1, B1, W2, B2, Q3)),
  ],
)
@pytest.mark.parametrize("option, value", [("loss_type", "mse"), ("huber_delta", 0.0)])
def test_bad_options_are_value_errors_naming_them(fn, args, option, value):
  with pytest.raises(ValueError, match=rf"^{option}: expected"):
    fn(*args, **{option: value})
