"""Tests for ROVER, PACS, the unlikeliness reward and Rank-GRPO (hrljax.losses.group_relative).

Expected values are recomputed here in float64 NumPy from the formulas of the docstrings (the
authors' code, read, not run), never by the function under test. None of the four papers'
stored copies reachable here shows a worked numeric example, so the hand examples are ours.
Shapes are fixed per function so that each jitted program compiles once.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hrljax.losses import group_relative as gr

from tests.fast_compile import fast_jit


def _jit(fn, **static):
  return fast_jit(functools.partial(fn, **static))


def _value_and_grads(fn, **variants):
  """One jitted program: {name: ((loss, extras), d loss / d logp)} for each keyword set of
  `variants`, of a loss whose first argument is logp (one compilation for all of them)."""

  def all_variants(logp, args, kw):
    return {
      name: jax.value_and_grad(lambda lp: fn(lp, *args, **kw, **static), has_aux=True)(logp)
      for name, static in variants.items()
    }

  inner = fast_jit(all_variants)

  def call(*args, **kw):
    if "logp" in kw:
      return inner(kw.pop("logp"), args, kw)
    return inner(args[0], args[1:], kw)

  return call


def _np_bce(x, y):
  return np.log1p(np.exp(x)) - x * y


# ----------------------------------------------------------------------------------------------
# ROVER
# ----------------------------------------------------------------------------------------------

# Three responses, T = 3: rows 0 and 1 answer prompt 0, row 2 prompt 1; row 1 has 2 tokens.
ROVER_MASK = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1]], np.float32)
ROVER_REWARDS = np.array([1.0, 0.0, 1.0], np.float32)
ROVER_GROUPS = np.array([0, 0, 1], np.int32)
ROVER_LOGP = np.array([[-0.5, -1.0, -0.2], [-0.8, -0.3, -9.0], [-1.2, -0.4, -0.6]], np.float32)
ROVER_OLD = np.array([[-0.6, -0.9, -0.2], [-0.7, -0.5, -9.0], [-1.0, -0.4, -0.9]], np.float32)
ROVER_VM = np.array([[-9.0, -8.0, -7.5], [-9.1, -8.2, -7.0], [-8.8, -8.1, -7.7]], np.float32)
ROVER_OLD_VM = np.array([[-9.0, -8.3, -7.4], [-9.0, -8.0, -6.0], [-8.8, -8.4, -7.9]], np.float32)


def _np_rover(lp, olp, vm, ovm, mask, shaped, rho=1.0, scale=1.0, clip=None):
  lp, olp, vm, ovm, mask = (np.asarray(a, np.float64) for a in (lp, olp, vm, ovm, mask))
  q = rho * (lp - olp)
  nv = np.zeros_like(q)
  nv[:, :-1] = scale * rho * (vm[:, 1:] - ovm[:, 1:]) * mask[:, 1:]
  y = np.asarray(shaped, np.float64)[:, None] + nv
  active = np.ones_like(q)
  if clip is not None:
    hi, lo = np.log(1 + clip), np.log(1 - clip)
    above, below = (y > q) & (q > hi), (y < q) & (q < lo)
    q = np.where(above, hi, np.where(below, lo, q))
    active = (~(above | below)).astype(np.float64)
  n = mask.sum()
  loss = (mask * (q - y) ** 2).sum() / n
  grad = 2 * rho * (q - y) * mask * active / n
  return loss, grad, q * mask, y * mask


_rover_all = _value_and_grads(
  gr.rover_loss,
  plain=dict(num_groups=2),
  scaled=dict(num_groups=2, rho=2.0, next_value_scale=0.5),
  clip=dict(num_groups=2, clip_epsilon=0.2),
)


def _rover(**kw):
  return _rover_all(**kw)["plain"]


def _rover_args(**over):
  args = dict(
    logp=ROVER_LOGP,
    old_logp=ROVER_OLD,
    vocab_mean_logp=ROVER_VM,
    old_vocab_mean_logp=ROVER_OLD_VM,
    mask=ROVER_MASK,
    rewards=ROVER_REWARDS,
    group_ids=ROVER_GROUPS,
    valid=np.ones(3, bool),
  )
  args.update(over)
  return args


def test_rover_hand_computed_loss_target_and_gradient():
  # Mean-centred reward: prompt 0 has mean 0.5; prompt 1 is a one-row group (0, "zero" mode).
  shaped = np.array([0.5, -0.5, 0.0])
  results = _rover_all(**_rover_args())
  for name, rho, scale in (("plain", 1.0, 1.0), ("scaled", 2.0, 0.5)):
    (loss, ex), grad = results[name]
    want, want_grad, q, y = _np_rover(
      ROVER_LOGP, ROVER_OLD, ROVER_VM, ROVER_OLD_VM, ROVER_MASK, shaped, rho, scale
    )
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-6)
    np.testing.assert_allclose(ex.q, q, atol=1e-6)
    np.testing.assert_allclose(ex.target, y, atol=1e-6)
    np.testing.assert_allclose(ex.shaped_rewards, shaped, atol=1e-7)
  # V = 0 after the last token: row 1's token 1 (token 2 is padding) and every row's token 2.
  np.testing.assert_array_equal(np.asarray(ex.next_value)[:, 2], 0.0)
  assert ex.next_value[1, 1] == 0.0 and ex.next_value[0, 1] != 0.0


def test_rover_clip_freezes_tokens_that_moved_away_past_the_bound():
  lp = ROVER_LOGP.copy()
  lp[0, 0] = ROVER_OLD[0, 0] + 0.5  # Q = 0.5 > log 1.2 and y = 0.5 + 0.3 above it: clipped
  lp[1, 0] = ROVER_OLD[1, 0] - 0.6  # Q = -0.6 < log 0.8 and y = -0.5 - 0.2 below it: clipped
  lp[2, 1] = ROVER_OLD[2, 1] + 0.3  # Q = 0.3 > log 1.2 but y = 0 + 0.2 below it: not clipped
  (loss, ex), grad = _rover_all(**_rover_args(logp=lp))["clip"]
  shaped = np.array([0.5, -0.5, 0.0])
  want, want_grad, q, _ = _np_rover(
    lp, ROVER_OLD, ROVER_VM, ROVER_OLD_VM, ROVER_MASK, shaped, clip=0.2
  )
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, atol=1e-6)
  np.testing.assert_allclose(ex.q, q, atol=1e-6)
  np.testing.assert_allclose(ex.clip_fraction, 2 / 8)


def test_rover_reward_forms():
  r = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], np.float32)
  ids = np.array([0, 0, 0, 1, 1, 2], np.int32)
  valid = np.array([1, 1, 1, 1, 1, 0], bool)
  forms = fast_jit(
    lambda r, ids, valid: {
      f: gr.rover_rewards(r, ids, 3, valid=valid, form=f) for f in gr.rover.ROVER_REWARD_FORMS
    }
  )
  got = forms(r, ids, valid)
  # The released math code's form over the 5 valid rows: p+ = 3/5, p- = 2/5.
  want = [5 * 0.4, -2 * 0.6, -2 * 0.6, 5 * 0.4, 5 * 0.4, 0]
  np.testing.assert_allclose(got["math_release"], want, rtol=1e-6)
  np.testing.assert_allclose(got["mean_centred"], [2 / 3, -1 / 3, -1 / 3, 0, 0, 0], atol=1e-6)
  std = np.std([1.0, 0, 0], ddof=1)
  want = np.array([2, -1, -1]) / 3 / (std + 1e-6)
  np.testing.assert_allclose(got["grpo"][:3], want, rtol=1e-5)
  # The paper's reward is invariant to a shift of every reward, and so is the loss.
  shifted = forms(r + 3.0, ids, valid)
  np.testing.assert_allclose(shifted["mean_centred"], got["mean_centred"], atol=1e-6)
  # A NaN reward of a valid row stays NaN, in a one-row group too (never a silent 0).
  r[5] = np.nan
  for form, x in forms(r, ids, np.ones(6, bool)).items():
    assert np.isnan(x[5]), form
  (l0, _), g0 = _rover(**_rover_args())
  (l1, _), g1 = _rover(**_rover_args(rewards=ROVER_REWARDS + 3.0))
  np.testing.assert_allclose(l1, l0, rtol=1e-6)
  np.testing.assert_allclose(g1, g0, atol=1e-7)


def test_uniform_policy_value_is_the_mean_log_softmax():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
  allowed = np.array([1, 1, 0, 1, 0], bool)

  @fast_jit
  def values(x, poisoned):
    masked = lambda y: jnp.sum(gr.uniform_policy_value(y, vocab_mask=allowed))  # noqa: E731
    plain = gr.uniform_policy_value(x, temperature=0.7)
    return plain, gr.uniform_policy_value(poisoned, vocab_mask=allowed), jax.grad(masked)(poisoned)

  # A vocabulary mask: the uniform policy over the allowed entries; -inf and NaN there are not
  # read, the value and the gradient stay finite.
  poisoned = logits.copy()
  poisoned[..., 2], poisoned[..., 4] = -np.inf, np.nan
  plain, masked, g = values(logits, poisoned)
  want = (logits / 0.7).mean(-1) - np.log(np.exp(logits / 0.7).sum(-1))
  np.testing.assert_allclose(plain, want, rtol=1e-5)
  z = logits[..., allowed]
  want = z.mean(-1) - np.log(np.exp(z).sum(-1))
  np.testing.assert_allclose(masked, want, rtol=1e-5)
  g = np.asarray(g)
  assert np.isfinite(g).all() and (g[..., ~allowed] == 0).all()
  np.testing.assert_allclose(g[..., allowed].sum(-1), 0.0, atol=1e-6)  # mean - softmax sums to 0


def test_rover_masked_tokens_and_invalid_rows_change_nothing():
  valid = np.array([1, 1, 0], bool)
  (l0, e0), g0 = _rover(**_rover_args(valid=valid))
  bad = {}
  for name in ("logp", "old_logp", "vocab_mean_logp", "old_vocab_mean_logp"):
    x = _rover_args()[name].copy()
    x[1, 2] = np.nan  # padding
    x[2, :] = np.inf if name != "logp" else -np.inf  # the invalid row
    bad[name] = x
  r = ROVER_REWARDS.copy()
  r[2] = np.nan
  (l1, e1), g1 = _rover(**_rover_args(valid=valid, rewards=r, **bad))
  np.testing.assert_array_equal(l1, l0)
  np.testing.assert_array_equal(g1, g0)
  np.testing.assert_array_equal(e1.target, e0.target)
  assert (np.asarray(g1)[2] == 0).all()


def test_rover_row_permutation_and_group_ids():
  perm = np.array([2, 0, 1])
  args = {k: v[perm] for k, v in _rover_args().items()}
  (l0, _), g0 = _rover(**_rover_args())
  (l1, _), g1 = _rover(**args)
  np.testing.assert_allclose(l1, l0, rtol=1e-6)
  np.testing.assert_allclose(g1, np.asarray(g0)[perm], atol=1e-7)
  # Out of range: eager ValueError; under jit the row is invalid.
  bad_ids = np.array([0, 0, 7], np.int32)
  with pytest.raises(ValueError, match="group_ids"):
    gr.rover_loss(**_rover_args(group_ids=bad_ids), num_groups=2)
  (l2, _), g2 = _rover(**_rover_args(group_ids=bad_ids))
  (l3, _), g3 = _rover(**_rover_args(valid=np.array([1, 1, 0], bool)))
  np.testing.assert_array_equal(l2, l3)
  np.testing.assert_array_equal(g2, g3)


# ----------------------------------------------------------------------------------------------
# PACS
# ----------------------------------------------------------------------------------------------

# Four responses, T = 3: rows 0-2 answer prompt 0 (one correct), row 3 prompt 1 (singleton).
PACS_MASK = np.array([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]], np.float32)
PACS_REWARDS = np.array([1.0, 0.0, 0.0, 1.0], np.float32)
PACS_GROUPS = np.array([0, 0, 0, 1], np.int32)
PACS_LOGP = np.array(
  [[-0.5, -1.0, -3.0], [-0.8, -0.3, -0.9], [-1.2, -4.0, -2.0], [-0.4, -0.6, -1.0]], np.float32
)
PACS_OLD = np.array(
  [[-0.7, -1.1, -3.0], [-0.6, -0.3, -1.0], [-1.0, -4.0, -2.0], [-0.5, -0.5, -1.0]], np.float32
)

_pacs_all = _value_and_grads(
  gr.pacs_loss,
  balanced=dict(num_groups=2, beta=2.0, weighting="balanced"),
  plain=dict(num_groups=2),
  **{c: dict(num_groups=2, centring=c, score="mean_logp") for c in ("zscore", "mean", "raw")},
)


def _pacs(**kw):
  return _pacs_all(**kw)["balanced"]


def _pacs_args(**over):
  args = dict(
    logp=PACS_LOGP,
    old_logp=PACS_OLD,
    mask=PACS_MASK,
    rewards=PACS_REWARDS,
    group_ids=PACS_GROUPS,
    valid=np.ones(4, bool),
  )
  args.update(over)
  return args


def test_pacs_hand_computed_leave_one_out_with_balanced_weights():
  (loss, ex), grad = _pacs(**_pacs_args())
  m = PACS_MASK.astype(np.float64)
  r_hat = 2.0 * (m * (PACS_LOGP - PACS_OLD)).sum(1)
  s = r_hat[:3].sum()
  psi = np.array([r_hat[i] - (s - r_hat[i]) / 2 for i in range(3)] + [0.0])
  w = np.array([3 / 2, 3 / 4, 3 / 4, 1.0])  # n / (2 n_c) in the mixed group; 1 alone
  per_row = w * _np_bce(psi, PACS_REWARDS)
  np.testing.assert_allclose(ex.implicit_rewards, r_hat, rtol=1e-5)
  np.testing.assert_allclose(ex.logits, psi, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ex.weights, w, rtol=1e-6)
  np.testing.assert_allclose(loss, per_row.sum() / 4, rtol=1e-5)
  # d loss / d logp_it = sum_j w_j (sigmoid(psi_j) - R_j) / 4 * d psi_j / d r^_i * beta * m_it.
  d_psi = w * (1 / (1 + np.exp(-psi)) - PACS_REWARDS) / 4
  jac = np.array([[1, -0.5, -0.5], [-0.5, 1, -0.5], [-0.5, -0.5, 1]])  # d psi_j / d r^_i
  d_r = np.concatenate([jac.T @ d_psi[:3], [0.0]])  # the singleton's psi is 0, no gradient
  np.testing.assert_allclose(grad, 2.0 * d_r[:, None] * m, atol=1e-6)


@pytest.mark.parametrize("centring", ["zscore", "mean", "raw"])
def test_pacs_centrings_and_mean_logp_score(centring):
  (loss, ex), _ = _pacs_all(**_pacs_args())[centring]
  m = PACS_MASK.astype(np.float64)
  r_hat = (m * PACS_LOGP).sum(1) / m.sum(1)
  g = r_hat[:3]
  psi = {
    "zscore": np.append((g - g.mean()) / (g.std(ddof=1) + 1e-6), 0.0),
    "mean": np.append(g - g.mean(), 0.0),
    "raw": r_hat,
  }[centring]
  np.testing.assert_allclose(ex.logits, psi, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(loss, _np_bce(psi, PACS_REWARDS).mean(), rtol=1e-5)


def test_pacs_gradient_raises_correct_and_lowers_incorrect_responses():
  # On policy (logp = old_logp) every logit is 0; in every weighting the descent direction
  # -grad raises the log-probs of the correct responses and lowers those of the wrong ones.
  rng = np.random.default_rng(1)
  lp = -rng.uniform(0.1, 2.0, size=(4, 3)).astype(np.float32)
  m = PACS_MASK.astype(bool)
  results = _pacs_all(**_pacs_args(logp=lp, old_logp=lp))
  for name in ("balanced", "plain"):
    (_, ex), grad = results[name]
    np.testing.assert_array_equal(ex.logits, 0.0)
    g = np.asarray(grad)
    assert (g[0][m[0]] < 0).all()  # correct, in a mixed group
    assert (g[1][m[1]] > 0).all() and (g[2][m[2]] > 0).all()  # wrong
    assert (g[3] == 0).all()  # a one-row group has no baseline and no gradient
    assert (g[~m] == 0).all()


def test_pacs_masked_tokens_invalid_rows_and_group_ids():
  valid = np.array([1, 1, 1, 0], bool)
  (l0, e0), g0 = _pacs(**_pacs_args(valid=valid))
  lp, old, r = PACS_LOGP.copy(), PACS_OLD.copy(), PACS_REWARDS.copy()
  lp[0, 2], old[2, 1:] = np.nan, -np.inf
  lp[3], r[3] = np.inf, np.nan
  (l1, e1), g1 = _pacs(**_pacs_args(valid=valid, logp=lp, old_logp=old, rewards=r))
  np.testing.assert_array_equal(l1, l0)
  np.testing.assert_array_equal(g1, g0)
  np.testing.assert_array_equal(e1.logits, e0.logits)
  perm = np.array([1, 3, 0, 2])
  (l2, e2), g2 = _pacs(**{k: v[perm] for k, v in _pacs_args().items()})
  (l3, e3), g3 = _pacs(**_pacs_args())
  np.testing.assert_allclose(l2, l3, rtol=1e-6)
  np.testing.assert_allclose(g2, np.asarray(g3)[perm], atol=1e-7)
  # A NaN log-prob at a read token reaches the loss, even in a one-row group.
  lp = PACS_LOGP.copy()
  lp[3, 0] = np.nan
  (l5, e5), _ = _pacs(**_pacs_args(logp=lp))
  assert np.isnan(l5) and np.isnan(e5.logits[3])
  bad_ids = np.array([0, 0, 0, -1], np.int32)
  with pytest.raises(ValueError, match="group_ids"):
    gr.pacs_loss(**_pacs_args(group_ids=bad_ids), num_groups=2)
  (l4, _), g4 = _pacs(**_pacs_args(group_ids=bad_ids))
  np.testing.assert_array_equal(l4, l0)
  np.testing.assert_array_equal(g4, g0)


# ----------------------------------------------------------------------------------------------
# Unlikeliness reward
# ----------------------------------------------------------------------------------------------


def _np_unlikely(r, ell, ids, valid, beta=0.25):
  """Ranks (stable argsort of argsort, least likely = 0) and R' per group, in NumPy."""
  ranks, shaped = np.zeros(len(r), int), np.zeros(len(r))
  for g in np.unique(ids[valid]):
    rows = np.flatnonzero((ids == g) & valid)
    order = np.argsort(np.argsort(ell[rows], kind="stable"), kind="stable")
    ranks[rows] = order
    shaped[rows] = r[rows] * (1 - beta * order / len(rows))
  return ranks, shaped


# Prompt 0: four responses, three correct; prompt 1: two; row 6 invalid.
UNL_REWARDS = np.array([1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0], np.float32)
UNL_GROUPS = np.array([0, 0, 0, 0, 1, 1, 0], np.int32)
UNL_VALID = np.array([1, 1, 1, 1, 1, 1, 0], bool)
UNL_MASK = np.array(
  [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]], np.float32
)
UNL_OLD = np.array(
  [
    [-0.1, -0.3, -9.0],  # mean -0.2: the most likely of prompt 0
    [-1.0, -2.0, -1.5],  # mean -1.5: the least likely
    [-0.7, -9.0, -9.0],  # mean -0.7
    [-0.9, -0.8, -1.0],  # mean -0.9
    [-2.0, -1.0, -9.0],  # mean -1.5
    [-0.1, -0.2, -0.3],  # mean -0.2
    [-5.0, -5.0, -5.0],  # invalid
  ],
  np.float32,
)


@fast_jit
def _unlikely_all(r, old_logp, mask, ids, valid):
  """The default advantages, beta = 0, and the gradient of their sum (none: a target)."""
  fn = functools.partial(gr.unlikeliness_advantages, num_groups=2, valid=valid)
  total = lambda r, lp: jnp.sum(fn(r, lp, mask, ids).advantages)  # noqa: E731
  return dict(
    default=fn(r, old_logp, mask, ids),
    beta0=fn(r, old_logp, mask, ids, beta=0.0),
    grad=jax.grad(total, argnums=(0, 1))(r, old_logp),
  )


def _unlikely(r, old_logp, mask, ids, valid):
  return _unlikely_all(r, old_logp, mask, ids, valid)["default"]


def test_unlikeliness_hand_computed_with_the_authors_beta():
  results = _unlikely_all(UNL_REWARDS, UNL_OLD, UNL_MASK, UNL_GROUPS, UNL_VALID)
  out = results["default"]
  np.testing.assert_allclose(out.log_likelihood, [-0.2, -1.5, -0.7, -0.9, -1.5, -0.2, 0], atol=1e-6)
  np.testing.assert_array_equal(out.ranks, [3, 0, 2, 1, 0, 1, 0])
  # beta = 0.25, G = 4: the most likely correct keeps 1 - 0.25 * 3/4, the least likely all of
  # it; prompt 1 (G = 2): the correct response is the least likely, rank 0.
  shaped = np.array([0.8125, 1.0, 0.0, 0.9375, 1.0, 0.0, 0.0])
  np.testing.assert_allclose(out.shaped_rewards, shaped, rtol=1e-6)
  g0 = shaped[:4]
  want = np.concatenate(
    [(g0 - g0.mean()) / (g0.std(ddof=1) + 1e-6), np.array([1, -1]) / (np.sqrt(0.5) + 1e-6), [0]]
  )
  want[4:6] *= 0.5
  np.testing.assert_allclose(out.advantages, want, rtol=1e-5)
  # Not the reversed port: among the correct responses of prompt 0 the least likely (row 1)
  # gets the largest advantage and the most likely (row 0) the smallest.
  a = np.asarray(out.advantages)
  assert a[1] > a[3] > a[0] > a[2]
  # beta = 0 is GRPO.
  g0 = UNL_REWARDS[:4].astype(np.float64)
  want = np.concatenate(
    [(g0 - g0.mean()) / (g0.std(ddof=1) + 1e-6), np.array([0.5, -0.5]) / (np.sqrt(0.5) + 1e-6), [0]]
  )
  np.testing.assert_allclose(results["beta0"].advantages, want, rtol=1e-5)
  # The advantage is a target: no gradient reaches the rewards or the log-probs.
  for g in results["grad"]:
    np.testing.assert_array_equal(g, 0.0)


def test_group_ranks_ragged_shuffled_with_ties():
  rng = np.random.default_rng(3)
  ids = rng.permutation(np.repeat(np.arange(4), [1, 3, 5, 7])).astype(np.int32)
  values = rng.choice(np.array([-1.0, -0.5, 0.0, -0.0, 2.0], np.float32), size=16)
  valid = rng.random(16) > 0.2
  ranks = fast_jit(lambda v, i, m: gr.group_ranks(v, i, 4, m))
  want, _ = _np_unlikely(np.zeros(16), values + 0.0, ids, valid)  # +0.0: -0.0 ties with 0.0
  np.testing.assert_array_equal(ranks(values, ids, valid), want)
  # Ties go by row position: equal values rank as the rows come.
  got = np.asarray(ranks(np.zeros(16, np.float32), ids, np.ones(16, bool)))
  for g in range(4):
    np.testing.assert_array_equal(got[ids == g], np.arange((ids == g).sum()))


def test_unlikeliness_permutation_masks_and_group_ids():
  base = _unlikely(UNL_REWARDS, UNL_OLD, UNL_MASK, UNL_GROUPS, UNL_VALID)
  perm = np.array([5, 2, 6, 0, 4, 1, 3])  # distinct likelihoods in each group: no tie order
  out = _unlikely(
    UNL_REWARDS[perm], UNL_OLD[perm], UNL_MASK[perm], UNL_GROUPS[perm], UNL_VALID[perm]
  )
  for got, want in zip(out, base):
    np.testing.assert_allclose(got, np.asarray(want)[perm], rtol=1e-6)
  old, r = UNL_OLD.copy(), UNL_REWARDS.copy()
  old[0, 2], old[2, 1], old[6], r[6] = np.nan, -np.inf, np.nan, np.inf
  poisoned = _unlikely(r, old, UNL_MASK, UNL_GROUPS, UNL_VALID)
  for got, want in zip(poisoned, base):
    np.testing.assert_array_equal(got, want)
  old[1, 0] = np.nan  # a read token: no rank, the group's advantages are NaN
  poisoned = _unlikely(r, old, UNL_MASK, UNL_GROUPS, UNL_VALID).advantages
  assert np.isnan(poisoned[:4]).all() and np.isfinite(poisoned[4:]).all()
  bad_ids = UNL_GROUPS.copy()
  bad_ids[6] = 2
  with pytest.raises(ValueError, match="group_ids"):
    gr.unlikeliness_advantages(UNL_REWARDS, UNL_OLD, UNL_MASK, bad_ids, 2)
  jitted = _unlikely(UNL_REWARDS, UNL_OLD, UNL_MASK, bad_ids, np.ones(7, bool))
  for got, want in zip(jitted, base):
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------------------------
# Rank-GRPO
# ----------------------------------------------------------------------------------------------


def test_rank_grpo_rewards_dcg_at_k_to_n_and_hit():
  rel = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]], np.float32)
  d = 1 / np.log2(np.arange(1, 5) + 1)  # 1, 1/log2 3, 1/2, 1/log2 5
  want = np.array([[(rel[i, k:] * d[k:]).sum() for k in range(4)] for i in range(2)])
  dcg, hit = fast_jit(lambda x: (gr.rank_grpo_rewards(x), gr.rank_grpo_rewards(x, reward="hit")))(
    rel
  )
  np.testing.assert_allclose(dcg, want, rtol=1e-6)
  tail = 1 / np.log2(5)  # rank 4's gain
  np.testing.assert_allclose(want[0], [1.5 + tail, 0.5 + tail, 0.5 + tail, tail], rtol=1e-12)
  np.testing.assert_array_equal(hit, rel)


RANK_GROUPS = np.array([0, 0, 0, 1], np.int32)
RANK_REWARDS = np.array(
  [[1.0, 0.5, 0.0], [0.0, 0.5, 0.0], [2.0, 0.0, 1.0], [1.0, 1.0, 1.0]], np.float32
)


def test_rank_grpo_advantages_per_rank_z_score():
  fn = _jit(gr.rank_grpo_advantages, num_groups=2)
  valid = np.array([1, 1, 1, 0], bool)
  got = fn(RANK_REWARDS, RANK_GROUPS, valid=valid)
  g = RANK_REWARDS[:3].astype(np.float64)
  want = (g - g.mean(0)) / (g.std(0, ddof=1) + 1e-4)
  np.testing.assert_allclose(got[:3], want, rtol=1e-5)
  np.testing.assert_array_equal(got[3], 0.0)
  perm = np.array([2, 3, 0, 1])
  got_p = fn(RANK_REWARDS[perm], RANK_GROUPS[perm], valid=valid[perm])
  np.testing.assert_allclose(got_p, np.asarray(got)[perm], rtol=1e-6)
  nan_rewards = RANK_REWARDS.copy()
  nan_rewards[3, 1] = np.nan  # a one-row group: NaN, not a silent 0
  assert np.isnan(fn(nan_rewards, RANK_GROUPS, valid=np.ones(4, bool))[3, 1])
  bad = np.array([0, 0, 0, 9], np.int32)
  with pytest.raises(ValueError, match="group_ids"):
    gr.rank_grpo_advantages(RANK_REWARDS, bad, 2)
  np.testing.assert_array_equal(fn(RANK_REWARDS, bad), got)


# Three lists of N = 2 items, T = 6: -1 marks separators and padding (off the mask).
ITEMS = np.array([[0, 0, -1, 1, 1, -1], [0, -1, 1, 1, 1, -1], [0, 0, 0, -1, 1, -1]], np.int32)
ITEM_MASK = (ITEMS >= 0).astype(np.float32)
ITEM_ADV = np.array([[1.0, -0.5], [-1.0, 0.8], [0.3, -0.3]], np.float32)
ITEM_OLD = np.array(
  [
    [-0.5, -0.2, -3.0, -1.0, -0.4, -2.0],
    [-0.9, -3.0, -0.3, -0.2, -0.7, -2.0],
    [-0.6, -0.1, -0.3, -3.0, -1.1, -2.0],
  ],
  np.float32,
)
ITEM_LOGP = ITEM_OLD + np.array(
  [
    [0.10, 0.02, 0.0, -0.30, -0.10, 0.0],  # rank 0: w = exp(0.06), rank 1: exp(-0.2) < 0.94
    [-0.20, 0.0, 0.05, 0.10, 0.0, 0.0],  # rank 0: exp(-0.2), rank 1: exp(0.05)
    [0.01, 0.02, 0.03, 0.0, 0.30, 0.0],  # rank 0: exp(0.02), rank 1: exp(0.3)
  ],
  np.float32,
)

_rank_all = _value_and_grads(
  gr.rank_grpo_loss, token_mean={}, rank_mean=dict(aggregation="rank_mean")
)


def _rank(*args):
  return _rank_all(*args)["token_mean"]


def _np_rank_loss(lp, old, items, adv, lo=0.06, hi=0.08, mode="token_mean"):
  batch, num_ranks = adv.shape
  per_rank, dldw, counts = np.zeros(adv.shape), np.zeros(adv.shape), np.zeros(adv.shape)
  w = np.ones(adv.shape)
  for i in range(batch):
    for k in range(num_ranks):
      sel = items[i] == k
      counts[i, k] = sel.sum()
      w[i, k] = np.exp(np.mean(lp[i, sel].astype(np.float64) - old[i, sel]))
      a = adv[i, k]
      unclipped, clipped = -a * w[i, k], -a * np.clip(w[i, k], 1 - lo, 1 + hi)
      per_rank[i, k] = max(unclipped, clipped)
      inside = 1 - lo < w[i, k] < 1 + hi
      dldw[i, k] = -a if (unclipped >= clipped or inside) else 0.0
  mask = items >= 0
  if mode == "token_mean":
    loss = (per_rank * counts).sum() / counts.sum()
    weight = np.ones(adv.shape) / counts.sum() * counts  # each token carries its rank's loss
  else:
    loss = per_rank.sum() / (counts > 0).sum()
    weight = np.ones(adv.shape) / (counts > 0).sum()
  grad = np.zeros(lp.shape)
  for i in range(batch):
    for t in np.flatnonzero(mask[i]):
      k = items[i, t]
      grad[i, t] = weight[i, k] * dldw[i, k] * w[i, k] / counts[i, k]
  return loss, grad, per_rank, w


@pytest.mark.parametrize("mode", ["token_mean", "rank_mean"])
def test_rank_grpo_loss_hand_computed(mode):
  (loss, ex), grad = _rank_all(ITEM_LOGP, ITEM_OLD, ITEM_MASK, ITEMS, ITEM_ADV)[mode]
  want, want_grad, per_rank, w = _np_rank_loss(ITEM_LOGP, ITEM_OLD, ITEMS, ITEM_ADV, mode=mode)
  np.testing.assert_allclose(ex.ratio, w, rtol=1e-5)
  np.testing.assert_allclose(ex.per_rank_loss, per_rank, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, atol=1e-6)
  np.testing.assert_array_equal(ex.rank_tokens, [[2, 2], [1, 3], [3, 1]])
  # The clipped branch is active where A < 0 and w < 1 - 0.06 (row 0 rank 1, row 1 rank 0);
  # row 2 rank 1 has A < 0 and w > 1 + 0.08, where the unclipped branch is the larger.
  np.testing.assert_array_equal(ex.clipped, [[0, 1], [1, 0], [0, 0]])


def test_rank_grpo_loss_masks_item_ids_and_gradient_direction():
  (l0, e0), g0 = _rank(ITEM_LOGP, ITEM_OLD, ITEM_MASK, ITEMS, ITEM_ADV)
  lp, old, items = ITEM_LOGP.copy(), ITEM_OLD.copy(), ITEMS.copy()
  lp[:, 5], old[0, 2], items[:, 5], items[1, 1] = np.nan, -np.inf, 99, -7
  (l1, e1), g1 = _rank(lp, old, ITEM_MASK, items, ITEM_ADV)
  np.testing.assert_array_equal(l1, l0)
  np.testing.assert_array_equal(g1, g0)
  np.testing.assert_array_equal(e1.per_token_loss, e0.per_token_loss)
  # A read token with an out-of-range item: eager ValueError; under jit the token is not read.
  bad = ITEMS.copy()
  bad[2, 4] = 2
  with pytest.raises(ValueError, match="item_ids"):
    gr.rank_grpo_loss(ITEM_LOGP, ITEM_OLD, ITEM_MASK, bad, ITEM_ADV)
  (l2, _), g2 = _rank(ITEM_LOGP, ITEM_OLD, ITEM_MASK, bad, ITEM_ADV)
  unread = ITEM_MASK.copy()
  unread[2, 4] = 0
  (l3, _), g3 = _rank(ITEM_LOGP, ITEM_OLD, unread, ITEMS, ITEM_ADV)
  np.testing.assert_array_equal(l2, l3)
  np.testing.assert_array_equal(g2, g3)
  # On policy, the descent direction raises every token of a positive-advantage rank and
  # lowers every token of a negative one, each rank on its own.
  (_, _), g = _rank(ITEM_OLD, ITEM_OLD, ITEM_MASK, ITEMS, ITEM_ADV)
  sign = np.where(ITEMS >= 0, np.sign(np.take_along_axis(ITEM_ADV, np.maximum(ITEMS, 0), 1)), 0)
  np.testing.assert_array_equal(np.sign(-np.asarray(g)), sign)


def test_bad_options_raise_one_line_errors():
  with pytest.raises(ValueError, match="form"):
    gr.rover_rewards(ROVER_REWARDS, ROVER_GROUPS, 2, form="paper")
  with pytest.raises(ValueError, match="clip_epsilon"):
    gr.rover_loss(**_rover_args(), num_groups=2, clip_epsilon=1.5)
  with pytest.raises(ValueError, match="centring"):
    gr.pacs_loss(**_pacs_args(), num_groups=2, centring="rloo")
  with pytest.raises(ValueError, match="weighting"):
    gr.pacs_loss(**_pacs_args(), num_groups=2, weighting="question")
  with pytest.raises(ValueError, match="beta"):
    gr.unlikeliness_advantages(UNL_REWARDS, UNL_OLD, UNL_MASK, UNL_GROUPS, 2, beta=1.5)
  with pytest.raises(ValueError, match="reward"):
    gr.rank_grpo_rewards(RANK_REWARDS, reward="ndcg")
  with pytest.raises(ValueError, match="aggregation"):
    gr.rank_grpo_loss(ITEM_LOGP, ITEM_OLD, ITEM_MASK, ITEMS, ITEM_ADV, aggregation="seq")
