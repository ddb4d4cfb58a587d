"""Tests of hrljax.losses.safety.recovery: the search for the action nearest a nominal one that a
safety critic accepts (critic-linearised Dalal projections, safe sampling) against closed forms on
hand-made critic scores, its fallback and jit/vmap invariance, and the task-following recovery
loss against a hand-computed vector. (The switch `reflex_select`: tests/losses/test_safety.py.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import safety

W = jnp.asarray([2.0, -1.0])
CENTRE, RADIUS = jnp.asarray([0.2, 0.1]), 0.6
BOX = ((-1.0, -1.0), (1.0, 1.0))


def linear_score(obs, action):
  """A hand-made row-wise critic score, w·a + obs[:, 0] (Q_risk = its sigmoid): the accepted set
  {score <= L} is a half-space, onto which the Euclidean projection has a closed form."""
  return action @ W + obs[:, 0]


def disc_score(obs, action):
  """A hazard-shaped score, 4·(r² − |a − p|²): risky inside a disc. The accepted set is the
  outside of a circle, the nearest accepted action the radial projection onto it."""
  del obs
  return 4.0 * (RADIUS**2 - jnp.sum(jnp.square(action - CENTRE[None]), axis=-1))


def search(method, threshold=0.5, margin=0.05, **overrides):
  """`nearest_safe_action`'s keywords: ε = 0.5, margin 0.05, the box [-1, 1]^2."""
  return dict(
    method=method, threshold=threshold, margin=margin, low=BOX[0], high=BOX[1], **overrides
  )


def risky_rows(num_rows=32, seed=11):
  """Nominal actions in [-0.5, 0.5]^2 and offsets obs_0 in [0, 1]: many rows above ε = 0.5."""
  keys = jax.random.split(jax.random.key(seed))
  nominal = jax.random.uniform(keys[0], (num_rows, 2), minval=-0.5, maxval=0.5)
  obs = jnp.concatenate(
    [jax.random.uniform(keys[1], (num_rows, 1), minval=0.0, maxval=1.0), jnp.zeros((num_rows, 9))],
    axis=1,
  )
  return obs, nominal


def nearest(score_fn, obs, nominal, keywords, fallback=None):
  # 7 is no valid action: where it comes back, the fallback was used.
  fallback = jnp.full_like(nominal, 7.0) if fallback is None else fallback
  return np.asarray(safety.nearest_safe_action(score_fn, obs, nominal, fallback, **keywords))


def test_critic_projection_of_a_linear_score_is_the_closed_form_halfspace_projection():
  obs, nominal = risky_rows()
  action = nearest(linear_score, obs, nominal, search("critic_projection", num_steps=1))
  score = np.asarray(linear_score(obs, nominal), np.float64)
  limit = np.log(0.45 / 0.55)  # Q_risk <= ε − margin = 0.45
  # min |a − â|² s.t. w·a + obs_0 <= limit: â − [(w·â + obs_0 − limit)/|w|²]_+ w, checked where
  # it lies inside the action box (elsewhere the projection is clipped).
  expected = np.asarray(nominal) - np.maximum(score - limit, 0.0)[:, None] / 5.0 * np.asarray(W)
  inside = np.all(np.abs(expected) <= 1.0, axis=1)
  safe = score <= 0.0  # Q_risk <= 0.5
  assert (~safe & inside).sum() >= 5 and safe.sum() >= 3
  np.testing.assert_allclose(action[~safe & inside], expected[~safe & inside], atol=1e-5)
  np.testing.assert_array_equal(action[safe], np.asarray(nominal)[safe])
  assert np.all(np.asarray(linear_score(obs, jnp.asarray(action))) <= 1e-6)


def test_critic_projection_of_the_disc_is_one_newton_step_onto_its_circle():
  """Inside the disc the score is concave in the action, so the first Dalal step from â lands
  radially outside the accepted circle |a − p|² = r² − L/4, at the radius of one Newton step,
  (d² + R²)/(2d) with d = |â − p| and R² = r² − L/4; the following steps find it accepted and
  stay."""
  obs, nominal = risky_rows(64, seed=12)
  action = nearest(disc_score, obs, nominal, search("critic_projection"))
  offset = np.asarray(nominal, np.float64) - np.asarray(CENTRE)
  d = np.linalg.norm(offset, axis=1)
  safe = np.asarray(disc_score(obs, nominal)) <= 0.0
  big_r_sq = RADIUS**2 - np.log(0.45 / 0.55) / 4.0
  newton = (d**2 + big_r_sq) / (2.0 * d)
  expected = np.asarray(CENTRE) + offset * (newton / d)[:, None]
  inside = np.all(np.abs(expected) <= 1.0, axis=1)
  assert (~safe & inside).sum() >= 20 and safe.sum() >= 3
  np.testing.assert_allclose(action[~safe & inside], expected[~safe & inside], atol=1e-4)
  np.testing.assert_array_equal(action[safe], np.asarray(nominal)[safe])


@pytest.mark.parametrize("method", ["critic_projection", "safe_sampling"])
def test_nearest_safe_action_is_accepted_by_the_critic_and_keeps_safe_actions(method):
  obs, nominal = risky_rows(64, seed=12)
  action = nearest(disc_score, obs, nominal, search(method))
  safe = np.asarray(disc_score(obs, nominal)) <= 0.0
  assert safe.sum() >= 3 and (~safe).sum() >= 20
  np.testing.assert_array_equal(action[safe], np.asarray(nominal)[safe])  # bit for bit
  found = np.all(action != 7.0, axis=1)
  assert found.all()  # the circle meets the box near every row
  assert np.all(np.asarray(jax.nn.sigmoid(disc_score(obs, jnp.asarray(action)))) <= 0.5)
  assert np.all(np.abs(action) <= 1.0)
  # Near the nominal action: within 0.3 of the accepted circle's nearest point (the radial one),
  # or of the first Newton step, which overshoots the circle from near the disc's centre.
  distance = np.linalg.norm(action - np.asarray(nominal), axis=1)
  d = np.linalg.norm(np.asarray(nominal) - np.asarray(CENTRE), axis=1)
  big_r_sq = RADIUS**2 - np.log(0.45 / 0.55) / 4.0
  bound = np.maximum(np.sqrt(big_r_sq) - d, (d**2 + big_r_sq) / (2.0 * d) - d) + 0.3
  assert np.all(distance[~safe] <= bound[~safe])


def test_safe_sampling_picks_the_nearest_accepted_candidate():
  obs, nominal = risky_rows(8, seed=13)
  action = nearest(linear_score, obs, nominal, search("safe_sampling", num_samples=16))
  offsets, points = (np.asarray(x) for x in safety.sampling_offsets(16, *BOX))
  risky = np.asarray(linear_score(obs, nominal)) > 0.0
  assert risky.sum() >= 3
  for row in np.flatnonzero(risky):
    candidates = np.concatenate([np.clip(np.asarray(nominal[row]) + offsets, -1.0, 1.0), points])
    score = candidates @ np.asarray(W) + float(obs[row, 0])
    accepted = candidates[score <= np.log(0.45 / 0.55)]
    assert len(accepted) > 0
    best = accepted[np.argmin(np.sum((accepted - np.asarray(nominal[row])) ** 2, axis=1))]
    np.testing.assert_allclose(action[row], best, atol=1e-6)


@pytest.mark.parametrize("method", ["critic_projection", "safe_sampling"])
def test_nearest_safe_action_falls_back_to_the_recovery_policy_where_nothing_passes(method):
  # Q_risk >= 0.9 everywhere: no action is accepted, π_rec's action is executed.
  obs, nominal = risky_rows(6, seed=14)
  everywhere_risky = lambda obs, action: 2.5 + jnp.tanh(action @ W)
  fallback = jnp.full_like(nominal, 0.25)
  action = nearest(everywhere_risky, obs, nominal, search(method), fallback)
  np.testing.assert_array_equal(action, fallback)


@pytest.mark.parametrize("method", ["critic_projection", "safe_sampling"])
def test_nearest_safe_action_under_jit_and_vmap_matches_the_eager_result(method):
  obs, nominal = risky_rows(12, seed=15)
  keywords = search(method)
  run = lambda o, a: safety.nearest_safe_action(disc_score, o, a, a + 7.0, **keywords)
  eager = np.asarray(run(obs, nominal))
  np.testing.assert_allclose(jax.jit(run)(obs, nominal), eager, atol=1e-6)
  batched = jax.vmap(run)(obs.reshape(3, 4, 10), nominal.reshape(3, 4, 2))
  np.testing.assert_allclose(np.asarray(batched).reshape(12, 2), eager, atol=1e-6)


@pytest.mark.parametrize(
  "option, value", [("method", "policy"), ("threshold", 1.5), ("margin", -0.1)]
)
def test_nearest_safe_action_names_a_bad_option(option, value):
  obs, nominal = risky_rows(2)
  with pytest.raises(ValueError, match=option):
    safety.nearest_safe_action(
      linear_score, obs, nominal, nominal, **(search("critic_projection") | {option: value})
    )


def test_task_recovery_loss_hand_computed():
  """−min_k Q_k + λ·(risk − ε)_+ with λ = 10, ε = 0.2."""
  q_task = jnp.asarray([[1.0, 0.5, -1.0, 2.0, 0.0], [0.5, 1.0, -2.0, 3.0, 1.0]])
  risk = jnp.asarray([0.0, 0.1, 0.15, 0.25, 0.9])
  loss = safety.task_recovery_loss(q_task, risk, risk_target=0.2, risk_weight=10.0)
  np.testing.assert_allclose(loss, [-0.5, -0.5, 2.0, -1.5, 7.0], rtol=1e-6, atol=1e-6)
  d_q, d_risk = jax.grad(
    lambda q, r: safety.task_recovery_loss(q, r, risk_target=0.2, risk_weight=10.0).sum(),
    argnums=(0, 1),
  )(q_task, risk)
  np.testing.assert_allclose(d_q, [[0, -1, 0, -1, -1], [-1, 0, -1, 0, 0]])  # −1 at each min
  np.testing.assert_allclose(d_risk, [0, 0, 0, 10, 10])  # λ above ε only
