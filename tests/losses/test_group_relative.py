"""Tests for hrljax.losses.group_relative.

Expected values are hand-computed vectors (the GRPO-family vector and the GiGPO worked example are
in docs/group_relative.md) or are recomputed independently in float64 NumPy / plain Python inside
this file, never by the function under test.
"""

import functools
import importlib.util
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hrljax.losses import group_relative as gr
from hrljax.losses.group_relative import _anchor_hashing as hashing

from tests.fast_compile import fast_jit

# The project's one dictionary-based GiGPO reference lives in the benchmark script.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_bench_spec = importlib.util.spec_from_file_location(
  "advantages_benchmark", os.path.join(_ROOT, "experiments", "benchmarks", "advantages.py")
)
bench = importlib.util.module_from_spec(_bench_spec)
_bench_spec.loader.exec_module(bench)

JIT_OR_NOT = pytest.mark.parametrize("transform", [fast_jit, lambda f: f], ids=["jit", "nojit"])


def _jit(fn, **static):
  """fast_jit with the Python-valued keywords bound (eager dispatch is slow to warm up)."""
  return fast_jit(functools.partial(fn, **static))


_anchor_ids = fast_jit(gr.anchor_state_ids)


def _shuffle(rng, *arrays):
  """Applies one random row permutation to every array; returns (perm, arrays...)."""
  perm = rng.permutation(len(arrays[0]))
  return (perm,) + tuple(np.asarray(a)[perm] for a in arrays)


def _np_group_stats(x, ids, num_groups, ddof):
  """float64 per-group (count, mean, std) by explicit loops."""
  count, mean, std = np.zeros(num_groups), np.zeros(num_groups), np.zeros(num_groups)
  for g in range(num_groups):
    vals = np.asarray(x, np.float64)[np.asarray(ids) == g]
    count[g] = len(vals)
    if len(vals):
      mean[g] = vals.mean()
    if len(vals) > ddof:
      std[g] = vals.std(ddof=ddof)
  return count, mean, std


def _np_grpo(
  r, ids, num_groups, *, eps=1e-6, ddof=1, scale="group", singleton="zero", std_floor=0.0
):
  r = np.asarray(r, np.float64)
  count, mean, std = _np_group_stats(r, ids, num_groups, ddof)
  batch_std = r.std(ddof=ddof)
  out = np.zeros_like(r)
  for i, g in enumerate(ids):
    denom = {
      "group": max(std[g], std_floor) + eps,
      "batch": max(batch_std, std_floor) + eps,
      "none": 1.0,
    }[scale]
    if count[g] == 1:
      single_denom = 1.0 + eps if scale == "group" else denom
      out[i] = r[i] / single_denom if singleton == "raw" else 0.0
    else:
      out[i] = (r[i] - mean[g]) / denom
  return out


# The GRPO-family vector of docs/group_relative.md: groups of 4, 3 and 1 rows.
GRPO_REWARDS = np.array([1, 0, 1, 0, 0.5, 0.5, 0.5, 2.0], np.float32)
GRPO_GROUPS = np.array([0, 0, 0, 0, 1, 1, 1, 2], np.int32)


def _ragged_batch(seed=0, sizes=(1, 2, 3, 5, 8), dtype=np.float32):
  rng = np.random.default_rng(seed)
  ids = np.concatenate([np.full(n, g) for g, n in enumerate(sizes)]).astype(np.int32)
  r = rng.normal(size=len(ids)).astype(dtype)
  _, ids, r = _shuffle(rng, ids, r)
  return r, ids, len(sizes)


# ----------------------------------------------------------------------------------------------
# Segment statistics
# ----------------------------------------------------------------------------------------------


@JIT_OR_NOT
def test_segment_stats_match_numpy_on_ragged_shuffled_groups(transform):
  r, ids, num_groups = _ragged_batch(seed=1)
  num_groups += 1  # one empty group
  count, mean, std1 = _np_group_stats(r, ids, num_groups, ddof=1)
  _, _, std0 = _np_group_stats(r, ids, num_groups, ddof=0)
  got_count = transform(lambda i: gr.segment_count(i, num_groups))(ids)
  got_mean = transform(lambda x, i: gr.segment_mean(x, i, num_groups))(r, ids)
  got_std1 = transform(lambda x, i: gr.segment_std(x, i, num_groups, ddof=1))(r, ids)
  got_std0 = transform(lambda x, i: gr.segment_std(x, i, num_groups, ddof=0))(r, ids)
  np.testing.assert_array_equal(got_count, count)
  assert got_count.dtype == jnp.int32
  np.testing.assert_allclose(got_mean, mean, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got_std1, std1, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got_std0, std0, rtol=1e-5, atol=1e-6)
  # Singleton group (size 1) with ddof=1 and the empty group give 0, not NaN.
  assert got_std1[0] == 0 and got_std1[-1] == 0 and got_mean[-1] == 0


def test_invalid_rows_never_touch_segment_stats():
  r, ids, num_groups = _ragged_batch(seed=2)
  valid = np.ones(len(r), bool)
  valid[::3] = False
  poisoned = r.copy()
  poisoned[~valid] = np.nan
  count, mean, std = _np_group_stats(r[valid], ids[valid], num_groups, ddof=1)
  np.testing.assert_array_equal(gr.segment_count(ids, num_groups, valid), count)
  np.testing.assert_allclose(
    gr.segment_mean(poisoned, ids, num_groups, valid), mean, rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
    gr.segment_std(poisoned, ids, num_groups, valid=valid), std, rtol=1e-5, atol=1e-6
  )


def test_segment_std_is_nan_for_a_group_with_a_non_finite_value_of_any_size():
  # Groups: 0 = [1, NaN]; 1 = [NaN] (one row: the ddof fallback used to give 0); 2 = [2, Inf];
  # 3 = [1, 3] plus an invalid NaN row (ignored); 4 = [Inf] alone; 5 empty.
  values = np.array([1.0, np.nan, np.nan, 2.0, np.inf, 1.0, 3.0, np.nan, np.inf], np.float32)
  ids = np.array([0, 0, 1, 2, 2, 3, 3, 3, 4], np.int32)
  valid = np.array([True] * 7 + [False, True])
  for ddof in (0, 1):
    got = np.asarray(
      fast_jit(lambda v, i, m: gr.segment_std(v, i, 6, ddof=ddof, valid=m))(values, ids, valid)
    )
    np.testing.assert_array_equal(np.isnan(got), [True, True, True, False, True, False])
    np.testing.assert_allclose(got[3], np.std([1.0, 3.0], ddof=ddof), rtol=1e-6)
    assert got[5] == 0.0


EQUAL_REWARD_GROUPS = [(0.35, 4), (0.4, 8), (0.4, 7), (0.1, 16)]


def test_naive_two_pass_statistics_are_not_exact_on_regression_vectors():
  # Documents why the regression vectors below are meaningful: the unshifted float32 two-pass
  # std of [0.4] * 8 is not 0 (docs/group_relative.md).
  x = jnp.full((8,), 0.4, jnp.float32)
  ids = jnp.zeros(8, jnp.int32)
  mean = jax.ops.segment_sum(x, ids, 1) / 8
  naive_adv = (x - mean[ids]) / (jnp.sqrt(jnp.sum((x - mean[ids]) ** 2) / 7) + 1e-6)
  assert np.abs(np.asarray(naive_adv)).max() > 1e-3


def test_equal_rewards_give_exactly_zero_in_float32():
  # Regression vectors (NeMo-RL PR #4161): each is one group of a shuffled
  # batch that also holds an ordinary group (id 4).
  r = np.concatenate(
    [np.full(n, v, np.float32) for v, n in EQUAL_REWARD_GROUPS]
    + [np.array([0.3, 0.9, 0.1], np.float32)]
  )
  ids = np.concatenate(
    [np.full(n, g) for g, (_, n) in enumerate(EQUAL_REWARD_GROUPS)] + [np.full(3, 4)]
  ).astype(np.int32)
  _, r, ids = _shuffle(np.random.default_rng(3), r, ids)
  eq = ids < 4

  @fast_jit
  def everything(r, ids):
    grpo = [gr.grpo_advantages(r, ids, 5, scale=s) for s in ("group", "batch", "none")]
    return (
      grpo
      + [
        gr.grpo_advantages(r, ids, 5, eps=0.0),
        gr.rloo_advantages(r, ids, 5),
        gr.opmd_advantages(r, ids, 5, baseline="logavgexp"),
      ],
      gr.segment_std(r, ids, 5),
      gr.segment_mean(r, ids, 5),
    )

  advantages, std, mean = everything(r, ids)
  for adv in advantages:  # eps=0 included: a zero denominator gives 0, never NaN
    assert np.all(np.asarray(adv)[eq] == 0.0)
    assert np.all(np.asarray(adv)[~eq] != 0.0)
  np.testing.assert_array_equal(std[:4], 0.0)
  np.testing.assert_array_equal(mean[:4], np.array([v for v, _ in EQUAL_REWARD_GROUPS], np.float32))


# ----------------------------------------------------------------------------------------------
# group_normalize / GRPO / Dr. GRPO / RLOO
# ----------------------------------------------------------------------------------------------


def test_grpo_family_vector_shuffled_with_invalid_rows():
  rng = np.random.default_rng(3)
  # Invalid rows with garbage rewards inside groups 0 and 1 must not change anything.
  r = np.concatenate([GRPO_REWARDS, np.array([100.0, np.nan], np.float32)])
  ids = np.concatenate([GRPO_GROUPS, np.array([0, 1], np.int32)])
  valid = np.concatenate([np.ones(8, bool), np.zeros(2, bool)])
  perm, r, ids, valid = _shuffle(rng, r, ids, valid)
  inv = np.argsort(perm)

  def unshuffle(a):
    a = np.asarray(a)[inv]
    np.testing.assert_array_equal(a[8:], 0.0)  # invalid rows get 0
    return a[:8]

  kw = dict(valid=valid, singleton_mode="raw")
  np.testing.assert_allclose(
    unshuffle(gr.grpo_advantages(r, ids, 3, **kw)),
    [0.866024, -0.866024, 0.866024, -0.866024, 0, 0, 0, 1.999998],
    rtol=1e-5,
  )
  np.testing.assert_allclose(
    unshuffle(gr.grpo_advantages(r, ids, 3, eps=1e-4, **kw)),
    [0.865875, -0.865875, 0.865875, -0.865875, 0, 0, 0, 1.9998],
    rtol=1e-5,
  )
  np.testing.assert_allclose(
    unshuffle(gr.grpo_advantages(r, ids, 3, eps=1e-4, valid=valid))[7], 0.0
  )
  np.testing.assert_allclose(
    unshuffle(gr.dr_grpo_advantages(r, ids, 3, **kw)),
    [0.5, -0.5, 0.5, -0.5, 0, 0, 0, 2.0],
    rtol=1e-6,
  )
  np.testing.assert_allclose(
    unshuffle(gr.rloo_advantages(r, ids, 3, **kw)),
    [0.666667, -0.666667, 0.666667, -0.666667, 0, 0, 0, 2.0],
    rtol=1e-5,
  )
  np.testing.assert_allclose(unshuffle(gr.rloo_advantages(r, ids, 3, valid=valid))[7], 0.0)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("singleton", ["zero", "raw"])
def test_group_normalize_matches_numpy(scale, ddof, singleton):
  r, ids, num_groups = _ragged_batch(seed=4)
  expected = _np_grpo(r, ids, num_groups, ddof=ddof, scale=scale, singleton=singleton)
  got = gr.group_normalize(r, ids, num_groups, scale=scale, ddof=ddof, singleton_mode=singleton)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_std_floor_and_eps():
  r = np.array([1.0, 1.001, 5.0, 7.0], np.float32)
  ids = np.array([0, 0, 1, 1], np.int32)
  got = gr.group_normalize(r, ids, 2, std_floor=1e-2, eps=0.0)
  expected = _np_grpo(r, ids, 2, std_floor=1e-2, eps=0.0)
  np.testing.assert_allclose(got, expected, rtol=1e-4)
  # The floor bites only in group 0: |A| = 0.0005 / 0.01 there, ordinary z-scores in group 1.
  np.testing.assert_allclose(np.abs(got[:2]), 0.05, rtol=1e-2)


def test_rloo_equals_leave_one_out_baseline():
  r, ids, num_groups = _ragged_batch(seed=5)
  expected = np.zeros(len(r))
  for i in range(len(r)):
    others = [r[j] for j in range(len(r)) if ids[j] == ids[i] and j != i]
    expected[i] = r[i] - np.mean(others, dtype=np.float64) if others else 0.0
  np.testing.assert_allclose(gr.rloo_advantages(r, ids, num_groups), expected, rtol=1e-5, atol=1e-6)


def test_grpo_properties():
  r, ids, num_groups = _ragged_batch(seed=6, sizes=(2, 3, 4, 6))
  adv = np.asarray(gr.grpo_advantages(r, ids, num_groups))
  # Zero-sum within each group.
  for g in range(num_groups):
    assert abs(adv[ids == g].sum()) < 1e-5
  # Relabelling group ids.
  relabel = np.array([3, 0, 2, 1], np.int32)
  np.testing.assert_allclose(gr.grpo_advantages(r, relabel[ids], num_groups), adv, atol=1e-6)
  # Permutation equivariance.
  perm = np.random.default_rng(0).permutation(len(r))
  np.testing.assert_allclose(
    gr.grpo_advantages(r[perm], ids[perm], num_groups), adv[perm], atol=1e-6
  )
  # Per-group shift invariance and positive scale invariance (up to eps).
  shift = np.array([10.0, -3.0, 0.5, 7.0], np.float32)
  np.testing.assert_allclose(gr.grpo_advantages(r + shift[ids], ids, num_groups), adv, atol=1e-4)
  np.testing.assert_allclose(gr.grpo_advantages(3.0 * r, ids, num_groups), adv, atol=1e-5)
  # Dr. GRPO is not scale invariant: doubling the rewards doubles A.
  dr = np.asarray(gr.dr_grpo_advantages(r, ids, num_groups))
  np.testing.assert_allclose(gr.dr_grpo_advantages(2 * r, ids, num_groups), 2 * dr, atol=1e-6)


def test_advantages_carry_no_gradient_but_primitive_does():
  r, ids, num_groups = _ragged_batch(seed=7, sizes=(3, 4))
  fns = (
    gr.grpo_advantages,
    gr.dr_grpo_advantages,
    gr.rloo_advantages,
    gr.opmd_advantages,
    gr.asymre_advantages,
  )
  grads = fast_jit(
    jax.grad(lambda x: sum(jnp.sum(fn(x, ids, num_groups) * jnp.arange(7.0)) for fn in fns))
  )(r)
  np.testing.assert_array_equal(grads, 0.0)
  # d/dr_j of sum_i w_i (r_i - mean) = w_j - mean_g(w) for scale="none".
  w = np.arange(7.0)
  g = fast_jit(
    jax.grad(lambda x: jnp.sum(gr.group_normalize(x, ids, num_groups, scale="none") * w))
  )(r)
  expected = np.array([w[j] - w[ids == ids[j]].mean() for j in range(7)])
  np.testing.assert_allclose(g, expected, atol=1e-5)


def test_dense_layout_equals_segment_path():
  rng = np.random.default_rng(8)
  r = rng.normal(size=(3, 4)).astype(np.float32)
  valid = rng.random((3, 4)) > 0.2
  dense = gr.group_normalize_dense(r, valid=valid, singleton_mode="raw")
  ids = np.repeat(np.arange(3), 4).astype(np.int32)
  flat = gr.group_normalize(r.reshape(-1), ids, 3, valid=valid.reshape(-1), singleton_mode="raw")
  np.testing.assert_allclose(dense.reshape(-1), flat, rtol=1e-6)
  np.testing.assert_array_equal(gr.contiguous_group_ids(3, 4), ids)
  expected = _np_grpo(r[0], np.zeros(4, int), 1)
  np.testing.assert_allclose(gr.group_normalize_dense(r)[0], expected, rtol=1e-5)


def test_broadcast_to_tokens():
  got = gr.broadcast_to_tokens(jnp.array([2.0, -1.0]), jnp.array([[1, 1, 0], [1, 0, 0]]))
  np.testing.assert_array_equal(got, [[2, 2, 0], [-1, 0, 0]])


def test_group_normalize_bad_inputs():
  r, ids = jnp.zeros(4), jnp.zeros(4, jnp.int32)
  with pytest.raises(ValueError, match="scale"):
    gr.group_normalize(r, ids, 1, scale="prompt")
  with pytest.raises(ValueError, match="singleton_mode"):
    gr.group_normalize(r, ids, 1, singleton_mode="one")
  with pytest.raises(ValueError, match="eps"):
    gr.group_normalize(r, ids, 1, eps=-1.0)
  with pytest.raises(ValueError, match="std_floor"):
    gr.group_normalize(r, ids, 1, std_floor=float("nan"))
  with pytest.raises(ValueError, match="ddof"):
    gr.group_normalize(r, ids, 1, ddof=-1)
  with pytest.raises(ValueError, match="num_groups"):
    gr.group_normalize(r, ids, 0)
  with pytest.raises(AssertionError):
    gr.group_normalize(r[:, None], ids, 1)  # wrong rank
  with pytest.raises(AssertionError):
    gr.group_normalize(r, ids[:3], 1)  # wrong shape
  with pytest.raises(AssertionError):
    gr.group_normalize(r, ids.astype(jnp.float32), 1)  # float ids
  with pytest.raises(AssertionError):
    gr.group_normalize(r, ids, 1, valid=jnp.ones(4))  # float valid
  with pytest.raises(AssertionError):
    gr.rloo_advantages(ids, ids, 1)  # int rewards


# ----------------------------------------------------------------------------------------------
# DAPO
# ----------------------------------------------------------------------------------------------


def test_informative_group_mask_vector_and_rules():
  # Hand-computed: [1,1,1], [0,1,0], [0,0,0], [1] -> [F, T, F, T] (verl "std" rule).
  r = np.array([1, 1, 1, 0, 1, 0, 0, 0, 0, 1], np.float32)
  ids = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3], np.int32)
  _, r, ids = _shuffle(np.random.default_rng(9), r, ids)
  np.testing.assert_array_equal(
    gr.informative_group_mask(r, ids, 5), [False, True, False, True, False]
  )
  np.testing.assert_array_equal(
    gr.informative_group_mask(r, ids, 5, keep_singletons=False), [False, True, False, False, False]
  )
  # OpenRLHF: fixed exclusive bounds on the group mean.
  np.testing.assert_array_equal(
    gr.informative_group_mask(r, ids, 5, rule="range"), [False, True, False, False, False]
  )
  # Invalid rows are ignored: hiding the 1 of group 1 leaves [0, 0], which is uninformative.
  valid = ~((ids == 1) & (r == 1))
  assert not gr.informative_group_mask(r, ids, 5, valid=valid)[1]
  # Bit-identical non-dyadic rewards are uninformative.
  r2 = np.full(7, 0.4, np.float32)
  assert not gr.informative_group_mask(r2, np.zeros(7, np.int32), 1)[0]
  with pytest.raises(ValueError, match="rule"):
    gr.informative_group_mask(r, ids, 5, rule="minmax")


def test_overlong_penalty_vector():
  # Hand-computed.
  lengths = jnp.array([10000, 16384, 18432, 20480, 20481])
  np.testing.assert_allclose(gr.overlong_penalty(lengths), [0, 0, -0.5, -1, -1], atol=1e-7)
  np.testing.assert_allclose(
    gr.overlong_penalty(lengths, hard_branch=False),
    [0, 0, -0.5, -1, (16384 - 20481) / 4096],
    rtol=1e-6,
  )
  np.testing.assert_allclose(gr.overlong_penalty(lengths, factor=0.5), [0, 0, -0.25, -0.5, -0.5])
  with pytest.raises(ValueError, match="cache_len"):
    gr.overlong_penalty(lengths, max_len=100, cache_len=200)
  with pytest.raises(ValueError, match="factor"):
    gr.overlong_penalty(lengths, factor=-1.0)


# ----------------------------------------------------------------------------------------------
# Anchor states
# ----------------------------------------------------------------------------------------------


def _same_partition(ids_a, ids_b):
  """True iff two labelings induce the same partition of the rows."""
  a, b = np.asarray(ids_a).tolist(), np.asarray(ids_b).tolist()
  return len(set(zip(a, b))) == len(set(a)) == len(set(b))


def test_anchor_ids_same_group_share_other_groups_do_not():
  obs = np.array([[1, 2], [3, 4], [1, 2], [1, 2], [3, 4], [5, 6]], np.int32)
  groups = np.array([0, 0, 0, 1, 1, 0], np.int32)
  res = _anchor_ids(obs, groups)
  ids = np.asarray(res.ids)
  assert ids[0] == ids[2]  # same obs, same group
  assert ids[0] != ids[3]  # same obs, different group
  assert ids[1] != ids[4]
  assert len({ids[0], ids[1], ids[3], ids[4], ids[5]}) == 5
  assert int(res.num_anchors) == 5
  assert ids.min() == 0 and ids.max() == 4  # dense labels


@pytest.mark.parametrize(
  "hash_fn",
  [
    lambda w: jnp.zeros(w.shape[0], jnp.uint32),  # every row collides
    lambda w: (w[:, 0] % 2).astype(jnp.uint32),  # some rows collide
  ],
  ids=["constant", "parity"],
)
def test_anchor_ids_forced_hash_collision_never_merges(hash_fn):
  rng = np.random.default_rng(10)
  obs = rng.integers(0, 3, size=(40, 3)).astype(np.int32)
  groups = rng.integers(0, 3, size=40).astype(np.int32)
  expected = {}
  for i in range(40):
    expected.setdefault((groups[i], obs[i].tobytes()), len(expected))
  expected_ids = [expected[(groups[i], obs[i].tobytes())] for i in range(40)]
  got = fast_jit(lambda o, g: gr.anchor_state_ids(o, g, hash_fn=hash_fn))(obs, groups)
  assert _same_partition(got.ids, expected_ids)
  assert int(got.num_anchors) == len(expected)
  # The default hash gives the same partition.
  assert _same_partition(_anchor_ids(obs, groups).ids, expected_ids)


def test_anchor_ids_dtypes_and_float_canonicalisation():
  f = np.array([[0.0, 1.5], [-0.0, 1.5], [np.nan, 1.0], [np.nan, 1.0], [0.0, 1.25]], np.float32)
  ids = np.asarray(_anchor_ids(f, np.zeros(5, np.int32)).ids)
  assert ids[0] == ids[1] and ids[2] == ids[3] and len(set(ids.tolist())) == 3
  img = np.random.default_rng(11).integers(0, 2, size=(6, 4, 4, 3)).astype(np.uint8)
  img[3] = img[0]
  ids = np.asarray(_anchor_ids(img, np.zeros(6, np.int32)).ids)
  assert ids[0] == ids[3] and len(set(ids.tolist())) == 5
  b = np.array([[True, False], [True, False], [False, False]])
  ids = np.asarray(_anchor_ids(b, np.zeros(3, np.int32)).ids)
  assert ids[0] == ids[1] != ids[2]


def test_anchor_ids_invalid_rows_never_share_with_valid_rows():
  obs = np.array([[1], [1], [1]], np.int32)
  valid = np.array([True, False, True])
  ids = np.asarray(_anchor_ids(obs, np.zeros(3, np.int32), valid=valid).ids)
  assert ids[0] == ids[2] != ids[1]


def test_anchor_ids_bad_inputs():
  with pytest.raises(AssertionError):
    gr.anchor_state_ids(jnp.zeros((3, 2)), jnp.zeros(4, jnp.int32))
  with pytest.raises(AssertionError):
    gr.anchor_state_ids(jnp.zeros((3, 2)), jnp.zeros(3))
  with pytest.raises(AssertionError):  # a hash of the wrong shape
    gr.anchor_state_ids(
      jnp.zeros((3, 2)), jnp.zeros(3, jnp.int32), hash_fn=lambda w: jnp.zeros(2, jnp.uint32)
    )
  with pytest.raises(ValueError, match="observations"):
    gr.anchor_state_ids(jnp.float32(1.0), jnp.zeros(1, jnp.int32))


# ----------------------------------------------------------------------------------------------
# Discounted step returns and GiGPO
# ----------------------------------------------------------------------------------------------


def test_discounted_step_returns_ragged_shuffled_with_gaps():
  rng = np.random.default_rng(12)
  lengths = [1, 4, 2, 6]
  traj = np.concatenate([np.full(n, t) for t, n in enumerate(lengths)]).astype(np.int32)
  step = np.concatenate([np.arange(n) * (2 if t == 3 else 1) for t, n in enumerate(lengths)])
  step = step.astype(np.int32)
  r = rng.normal(size=len(traj)).astype(np.float32)
  valid = np.ones(len(r), bool)
  valid[3] = False  # drops step 2 of trajectory 1: its step 3 then follows step 1 (gap 2)
  gamma = 0.9
  expected = np.zeros(len(r))
  for i in range(len(r)):
    if valid[i]:
      later = (traj == traj[i]) & (step >= step[i]) & valid
      expected[i] = np.sum(r[later] * gamma ** (step[later] - step[i]))
  perm, traj_s, step_s, r_s, valid_s = _shuffle(rng, traj, step, r, valid)
  got = _jit(gr.discounted_step_returns, gamma=gamma)(r_s, traj_s, step_s, valid=valid_s)
  np.testing.assert_allclose(got, expected[perm], rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="gamma"):
    gr.discounted_step_returns(r, traj, step, gamma=1.5)


# The GiGPO worked example of docs/group_relative.md (group 0), plus a second group (1) that
# reuses the observations s0 and s1: it must not be pooled with group 0.
S = {name: np.array([k, 10 * k], np.int32) for k, name in enumerate(["s0", "s1", "s2", "s3", "s4"])}
GIGPO_ROWS = [  # (group, traj, step, state, reward)
  (0, 0, 0, "s0", 0.0),
  (0, 0, 1, "s1", 0.0),
  (0, 0, 2, "s2", 10.0),
  (0, 1, 0, "s0", 0.0),
  (0, 1, 1, "s1", 0.0),
  (0, 1, 2, "s3", 0.0),
  (0, 2, 0, "s0", 0.0),
  (0, 2, 1, "s4", 10.0),
  (1, 3, 0, "s0", 0.0),
  (1, 3, 1, "s1", 5.0),
  (1, 4, 0, "s0", 0.0),
  (1, 4, 1, "s1", 1.0),
]


def _gigpo_example(seed=13):
  group, traj, step, states, r = zip(*GIGPO_ROWS)
  obs = np.stack([S[s] for s in states])
  arrays = [
    np.array(group, np.int32),
    np.array(traj, np.int32),
    np.array(step, np.int32),
    obs,
    np.array(r, np.float32),
  ]
  perm, *shuffled = _shuffle(np.random.default_rng(seed), *arrays)
  return np.argsort(perm), shuffled


@pytest.mark.parametrize(
  "weighting,expected",
  [
    ("trajectory", [6.1833, 8.0833, 3.3333, -12.8417, -11.4167, -6.6667, 6.6583, 3.3333]),
    ("step", [6.6, 8.5, 3.75, -12.425, -11.0, -6.25, 7.075, 3.75]),
  ],
)
def test_gigpo_worked_example(weighting, expected):
  inv, (group, traj, step, obs, r) = _gigpo_example()
  anchors = _anchor_ids(obs, group)
  out = _jit(
    gr.gigpo_advantages,
    num_groups=2,
    num_traj=5,
    num_anchors=len(r),
    gamma=0.95,
    omega=1.0,
    episode_stat_weighting=weighting,
  )(r, traj, step, group, anchors.ids)
  np.testing.assert_allclose(np.asarray(out.advantages)[inv][:8], expected, atol=1e-4)
  np.testing.assert_allclose(
    np.asarray(out.step_returns)[inv][:8], [9.025, 9.5, 10, 0, 0, 0, 9.5, 10], rtol=1e-6
  )
  np.testing.assert_allclose(
    np.asarray(out.step_advantages)[inv][:8], [2.85, 4.75, 0, -6.175, -4.75, 0, 3.325, 0], atol=1e-5
  )
  # Group 1: s0 returns 4.75 / 0.95, s1 returns 5 / 1, each pooled only with its own group.
  np.testing.assert_allclose(
    np.asarray(out.step_advantages)[inv][8:], [1.9, 2.0, -1.9, -2.0], atol=1e-5
  )


def test_gigpo_worked_example_mean_std():
  inv, (group, traj, step, obs, r) = _gigpo_example(seed=14)
  anchors = _anchor_ids(obs, group)
  out = _jit(gr.gigpo_advantages, num_groups=2, num_traj=5, num_anchors=len(r), norm="mean_std")(
    r, traj, step, group, anchors.ids
  )
  episode = np.asarray(out.episode_advantages)[inv][:8]
  np.testing.assert_allclose(episode, [0.5774] * 3 + [-1.1547] * 3 + [0.5774] * 2, atol=1e-4)
  step_adv = np.asarray(out.step_advantages)[inv]
  np.testing.assert_allclose(step_adv[[0, 3, 6]], [0.5324, -1.1536, 0.6211], atol=1e-4)
  np.testing.assert_allclose(step_adv[[1, 4]], [0.7071, -0.7071], atol=1e-4)


def _random_agent_batch(seed, num_groups=3, num_states=4, pad_to=None):
  """Ragged trajectories revisiting a few states, shuffled; optionally padded (invalid rows)."""
  rng = np.random.default_rng(seed)
  rows, t = [], 0
  for g in range(num_groups):
    for _ in range(rng.integers(1, 5)):
      for k in range(rng.integers(1, 6)):
        rows.append((g, t, k, rng.integers(0, num_states), rng.integers(0, 3) * 0.5))
      t += 1
  group, traj, step, state, r = (np.array(c) for c in zip(*rows))
  obs = np.stack([state, state * 3 + 1], axis=1).astype(np.int32)
  arrays = [
    group.astype(np.int32),
    traj.astype(np.int32),
    step.astype(np.int32),
    obs,
    r.astype(np.float32),
    np.ones(len(r), bool),
  ]
  if pad_to is not None:
    extra = pad_to - len(r)
    assert extra >= 0
    arrays = [
      np.concatenate([a, np.full((extra,) + a.shape[1:], a.dtype.type(7))]) for a in arrays[:-1]
    ] + [np.arange(pad_to) < len(r)]
  _, *arrays = _shuffle(rng, *arrays)
  return arrays, t


@pytest.mark.parametrize("norm,weighting", [("mean_std", "trajectory"), ("mean", "step")])
def test_gigpo_matches_dictionary_reference_on_random_batches(norm, weighting):
  @fast_jit
  def run(obs, r, traj, step, group, valid):
    anchors = gr.anchor_state_ids(obs, group, valid=valid)
    return gr.gigpo_advantages(
      r,
      traj,
      step,
      group,
      anchors.ids,
      num_groups=8,
      num_traj=64,
      num_anchors=r.shape[0],
      valid=valid,
      gamma=0.9,
      omega=0.7,
      norm=norm,
      episode_stat_weighting=weighting,
    ).advantages

  for seed in range(3):
    # Padding rows are invalid and carry garbage (group 7, traj 7, step 7, reward 7).
    (group, traj, step, obs, r, valid), _ = _random_agent_batch(seed + 20, pad_to=64)
    expected = bench.reference_gigpo(
      obs[valid],
      r[valid],
      traj[valid],
      step[valid],
      group[valid],
      gamma=0.9,
      omega=0.7,
      norm=norm,
      eps=1e-6,
      weighting=weighting,
    )
    got = np.asarray(run(obs, r, traj, step, group, valid))
    np.testing.assert_allclose(got[valid], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[~valid], 0.0)


def test_gigpo_properties_and_invalid_rows():
  (group, traj, step, obs, r, _), num_traj = _random_agent_batch(30)
  anchors = np.asarray(_anchor_ids(obs, group).ids)
  kw = dict(num_groups=3, num_traj=num_traj, num_anchors=len(r))
  out = _jit(gr.gigpo_advantages, **kw)(r, traj, step, group, anchors)
  # A^S sums to zero within each anchor group.
  for a in np.unique(anchors):
    assert abs(np.asarray(out.step_advantages)[anchors == a].sum()) < 1e-4
  # omega = 0 reduces to the episode-level Dr. GRPO advantage over trajectories.
  no_step = _jit(gr.gigpo_advantages, omega=0.0, **kw)(r, traj, step, group, anchors).advantages
  traj_return = np.zeros(num_traj)
  np.add.at(traj_return, traj, r)
  traj_group = np.zeros(num_traj, np.int32)
  traj_group[traj] = group
  per_traj = gr.dr_grpo_advantages(traj_return.astype(np.float32), traj_group, 3)
  np.testing.assert_allclose(no_step, np.asarray(per_traj)[traj], atol=1e-5)
  with pytest.raises(ValueError, match="norm"):
    gr.gigpo_advantages(r, traj, step, group, anchors, norm="std", **kw)
  with pytest.raises(ValueError, match="episode_stat_weighting"):
    gr.gigpo_advantages(r, traj, step, group, anchors, episode_stat_weighting="x", **kw)
  with pytest.raises(ValueError, match="num_traj"):
    gr.gigpo_advantages(r, traj, step, group, anchors, num_groups=3, num_traj=0, num_anchors=4)


# ----------------------------------------------------------------------------------------------
# Fast paths: hash-table anchors, grid returns, gigpo_grid_advantages (against the sort paths)
# ----------------------------------------------------------------------------------------------


def _first_occurrence_ids(obs, groups, valid):
  """Anchor ids by a Python dictionary over (valid, group, bytes), numbered by first row."""
  seen = {}
  return np.array(
    [
      seen.setdefault((bool(v), int(g), o.tobytes()), len(seen))
      for o, g, v in zip(np.asarray(obs), groups, valid)
    ]
  )


def _anchor_batch(seed, rows=96, dims=2, values=3, groups=3):
  rng = np.random.default_rng(seed)
  obs = rng.integers(0, values, size=(rows, dims)).astype(np.int32)
  return obs, rng.integers(0, groups, size=rows).astype(np.int32), rng.random(rows) < 0.85


_CONSTANT_HASH = lambda w: jnp.zeros(w.shape[0], jnp.uint32)  # noqa: E731
_PARITY_HASH = lambda w: (w[:, 0] % 2).astype(jnp.uint32)  # noqa: E731


def test_hash_anchor_ids_equal_sort_anchor_ids_and_first_occurrence_labels():
  # A colliding hash (parity of the first word) on random rows with invalid rows.
  @fast_jit
  def both(obs, groups, valid):
    return tuple(
      gr.anchor_state_ids(obs, groups, valid=valid, hash_fn=_PARITY_HASH, method=m)
      for m in ("hash", "sort")
    )

  obs, groups, valid = _anchor_batch(40)
  fast, slow = both(obs, groups, valid)
  expected = _first_occurrence_ids(obs, groups, valid)
  np.testing.assert_array_equal(fast.ids, expected)
  np.testing.assert_array_equal(slow.ids, expected)
  assert int(fast.num_anchors) == int(slow.num_anchors) == expected.max() + 1


def test_hash_table_alone_resolves_forced_collisions_exactly():
  # The table path itself (no fallback): a constant hash sends every key of a group to one
  # slot each round, so keys resolve one per round per group and must never merge.
  obs, groups, valid = _anchor_batch(42, rows=64, values=2)
  keys, hashes = hashing.anchor_keys(
    gr.observation_words(jnp.asarray(obs)), jnp.asarray(groups), jnp.asarray(valid), _CONSTANT_HASH
  )
  table = fast_jit(hashing.heads_by_table, static_argnums=3)
  head = np.asarray(table(keys, hashes, hashing.key_fingerprint(keys), 64))
  first_row = {}
  expected = [
    first_row.setdefault(k, i)
    for i, k in enumerate(zip(valid.tolist(), groups.tolist(), [o.tobytes() for o in obs]))
  ]
  np.testing.assert_array_equal(head, expected)
  # One round is not enough for colliding keys: rows are left unresolved (-1).
  assert np.any(np.asarray(table(keys, hashes, hashing.key_fingerprint(keys), 1)) < 0)


def test_hash_anchor_fallbacks_give_the_exact_partition(monkeypatch):
  obs, groups, valid = _anchor_batch(43)
  expected = _first_occurrence_ids(obs, groups, valid)
  # Too few rounds for a constant hash: the unresolved rows send it to the sort.
  few = fast_jit(
    lambda o, g, v: gr.anchor_state_ids(o, g, valid=v, hash_fn=_CONSTANT_HASH, max_probe_rounds=1)
  )
  np.testing.assert_array_equal(few(obs, groups, valid).ids, expected)
  # Every fingerprint equal: the table merges different keys, the exact check catches it.
  monkeypatch.setattr(hashing, "key_fingerprint", lambda keys: jnp.zeros(keys.shape[0], jnp.uint32))
  merged = fast_jit(lambda o, g, v: gr.anchor_state_ids(o, g, valid=v))
  np.testing.assert_array_equal(merged(obs, groups, valid).ids, expected)


def test_hash_anchor_ids_bad_inputs():
  f = np.zeros((5, 2), np.float32)
  with pytest.raises(ValueError, match="method"):
    gr.anchor_state_ids(f, np.zeros(5, np.int32), method="radix")
  with pytest.raises(ValueError, match="max_probe_rounds"):
    gr.anchor_state_ids(f, np.zeros(5, np.int32), max_probe_rounds=0)


def _grid_batch(seed, num_steps=6, num_groups=3, group_size=3, states=4):
  """A [T, N] time-major grouped rollout: trajectories revisit a few states; each episode ends
  at a random step (valid False afterwards) and some have an invalid step inside (a gap)."""
  rng = np.random.default_rng(seed)
  n = num_groups * group_size
  group_ids = np.repeat(np.arange(num_groups), group_size).astype(np.int32)
  lengths = rng.integers(1, num_steps + 1, size=n)
  valid = np.arange(num_steps)[:, None] < lengths[None, :]
  valid[rng.integers(0, num_steps), rng.integers(0, n)] = False
  state = rng.integers(0, states, size=(num_steps, n))
  obs = np.stack([state, 3 * state + 1], axis=-1).astype(np.int32)
  rewards = (rng.integers(0, 3, size=(num_steps, n)) * 0.5).astype(np.float32)
  rewards[~valid] = 9.0  # garbage that must be ignored
  return rewards, group_ids, obs, valid


def test_grid_returns_equal_sorted_returns_and_a_hand_loop():
  rewards, _, _, valid = _grid_batch(50)
  num_steps, n = rewards.shape
  traj = np.broadcast_to(np.arange(n, dtype=np.int32), rewards.shape).reshape(-1)
  step = np.broadcast_to(np.arange(num_steps, dtype=np.int32)[:, None], rewards.shape).reshape(-1)
  expected = np.zeros(rewards.shape)
  for j in range(n):
    for t in range(num_steps):
      if valid[t, j]:
        later = np.arange(t, num_steps)[valid[t:, j]]
        expected[t, j] = np.sum(rewards[later, j] * 0.9 ** (later - t))
  dense = _jit(gr.discounted_grid_returns, gamma=0.9)(rewards, valid=valid)
  np.testing.assert_allclose(dense, expected, rtol=1e-5, atol=1e-6)

  @fast_jit
  def rows(r, tr, st, v):  # grid detected / not detected (rows shuffled) / no num_traj
    perm = jnp.asarray(np.random.default_rng(51).permutation(r.shape[0]))
    shuffled = gr.discounted_step_returns(
      r[perm], tr[perm], st[perm], gamma=0.9, valid=v[perm], num_traj=n
    )
    return (
      gr.discounted_step_returns(r, tr, st, gamma=0.9, valid=v, num_traj=n),
      jnp.zeros_like(r).at[perm].set(shuffled),
      gr.discounted_step_returns(r, tr, st, gamma=0.9, valid=v),
    )

  for got in rows(rewards.reshape(-1), traj, step, valid.reshape(-1)):
    np.testing.assert_allclose(
      np.asarray(got).reshape(rewards.shape), expected, rtol=1e-5, atol=1e-6
    )
  with pytest.raises(AssertionError):
    gr.discounted_grid_returns(rewards.reshape(-1), gamma=0.9)


@pytest.mark.parametrize(
  "options",
  [
    dict(norm="mean", episode_stat_weighting="step", episode_singleton_mode="zero"),
    dict(
      norm="mean_std",
      episode_stat_weighting="trajectory",
      episode_singleton_mode="raw",
      episode_returns=True,
    ),
  ],
  ids=["mean-step", "mean_std-trajectory-returns"],
)
def test_gigpo_grid_equals_row_version_and_reference(options):
  options = dict(options)
  use_returns = options.pop("episode_returns", False)
  # Group 2 has a single trajectory (episode singleton rule).
  rewards, group_ids, obs, valid = _grid_batch(52, num_groups=3, group_size=3)
  group_ids = np.array([0, 0, 0, 1, 1, 1, 1, 1, 2], np.int32)
  num_steps, n = rewards.shape
  episode = np.broadcast_to((rewards * valid).sum(0) + 1.0, rewards.shape).astype(np.float32)
  kw = dict(gamma=0.9, omega=0.7, **options)

  @fast_jit
  def both(rewards, obs, valid, episode):
    returns = episode if use_returns else None
    dense = gr.gigpo_grid_advantages(
      rewards, jnp.asarray(group_ids), obs, num_groups=3, valid=valid, episode_returns=returns, **kw
    )
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    row_groups = flat(jnp.broadcast_to(jnp.asarray(group_ids), rewards.shape))
    anchors = gr.anchor_state_ids(flat(obs), row_groups, valid=flat(valid), method="sort")
    traj = flat(jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), rewards.shape))
    step = flat(jnp.broadcast_to(jnp.arange(num_steps, dtype=jnp.int32)[:, None], rewards.shape))
    rows = gr.gigpo_advantages(
      flat(rewards),
      traj,
      step,
      row_groups,
      anchors.ids,
      num_groups=3,
      num_traj=n,
      num_anchors=num_steps * n,
      valid=flat(valid),
      episode_returns=flat(episode) if use_returns else None,
      **kw,
    )
    return dense, rows

  dense, rows = both(rewards, obs, valid, episode)
  for field in gr.GigpoAdvantages._fields:
    np.testing.assert_allclose(
      np.asarray(getattr(dense, field)).reshape(-1),
      getattr(rows, field),
      rtol=1e-5,
      atol=1e-5,
      err_msg=field,
    )
  assert np.all(np.asarray(dense.advantages)[~valid] == 0)
  if options["episode_singleton_mode"] == "zero" and not use_returns:
    v = valid.reshape(-1)
    flat_groups = np.broadcast_to(group_ids, rewards.shape).reshape(-1)
    traj = np.broadcast_to(np.arange(n), rewards.shape).reshape(-1)
    step = np.broadcast_to(np.arange(num_steps)[:, None], rewards.shape).reshape(-1)
    expected = bench.reference_gigpo(
      obs.reshape(-1, 2)[v],
      rewards.reshape(-1)[v],
      traj[v],
      step[v],
      flat_groups[v],
      gamma=0.9,
      omega=0.7,
      norm=options["norm"],
      weighting=options["episode_stat_weighting"],
    )
    np.testing.assert_allclose(
      np.asarray(dense.advantages).reshape(-1)[v], expected, rtol=1e-4, atol=1e-4
    )


def test_gigpo_grid_bad_inputs():
  rewards, group_ids, obs, valid = _grid_batch(53)
  with pytest.raises(AssertionError):  # rows instead of the grid
    gr.gigpo_grid_advantages(rewards.reshape(-1), group_ids, obs, num_groups=3)
  with pytest.raises(AssertionError):  # observations of another grid
    gr.gigpo_grid_advantages(rewards, group_ids, obs[:, :-1], num_groups=3)
  with pytest.raises(AssertionError):  # group ids per row instead of per trajectory
    gr.gigpo_grid_advantages(rewards, np.zeros(rewards.size, np.int32), obs, num_groups=3)
  with pytest.raises(ValueError, match="norm"):
    gr.gigpo_grid_advantages(rewards, group_ids, obs, num_groups=3, norm="std")
  with pytest.raises(ValueError, match="anchor_method|method"):
    gr.gigpo_grid_advantages(rewards, group_ids, obs, num_groups=3, anchor_method="x")


def _np_gigpo_nan_rows(rewards, group_ids, obs, valid, episode_level):
  """Which valid cells of a `[T, N]` grid the NaN rewards must reach, by explicit loops.

  Episode level (when the episode returns are the reward sums): every row of a group holding a
  trajectory with a NaN reward (the group mean, or the trajectory itself when it is alone).
  Step level: rows whose return includes a NaN reward (the same or an earlier step of its
  trajectory), and every row sharing an anchor (group, observation) with one of those.
  """
  num_steps, num_traj = rewards.shape
  bad = np.isnan(rewards) & valid
  bad_groups = {group_ids[n] for n in range(num_traj) if episode_level and bad[:, n].any()}
  nan_return = np.zeros_like(valid)
  for n in range(num_traj):
    for t in range(num_steps):
      nan_return[t, n] = valid[t, n] and bad[t:, n].any()
  bad_anchors = {
    (group_ids[n], obs[t, n]) for t in range(num_steps) for n in range(num_traj) if nan_return[t, n]
  }
  expected = np.zeros_like(valid)
  for t in range(num_steps):
    for n in range(num_traj):
      expected[t, n] = valid[t, n] and (
        group_ids[n] in bad_groups or (group_ids[n], obs[t, n]) in bad_anchors
      )
  return expected


# One compile per case (each costs seconds): the dense version with finite episode returns given
# (only the step level sees the NaN rewards), the row version without (both levels do). The
# hostile-input tests run both versions without episode returns too.
@pytest.mark.parametrize(
  "version, given_returns, norm", [("dense", True, "mean_std"), ("rows", False, "mean")]
)
def test_gigpo_nan_reward_reaches_exactly_the_rows_it_enters(version, given_returns, norm):
  # Trajectories 0-2 form group 0 (shared observations), 3 is alone in group 1 with unique
  # observations (one-member group and anchors, which give 0 whatever their value), 4 is alone
  # in group 2 and has a NaN reward only on an invalid (padding) step.
  rng = np.random.default_rng(61)
  num_steps, num_traj = 5, 5
  rows = num_steps * num_traj
  group_ids = np.array([0, 0, 0, 1, 2], np.int32)
  obs = rng.integers(0, 3, size=(num_steps, num_traj)).astype(np.int32)
  obs[:, 3] = 10 + np.arange(num_steps)
  obs[:, 4] = 20 + np.arange(num_steps)
  rewards = rng.normal(size=(num_steps, num_traj)).astype(np.float32)
  valid = np.ones((num_steps, num_traj), bool)
  valid[3:, 4] = False
  rewards[2, 0] = rewards[3, 3] = rewards[4, 4] = np.nan
  expected = _np_gigpo_nan_rows(rewards, group_ids, obs, valid, not given_returns)
  # The cases are exercised: trajectory 3 has 5 NaN rows, or 4 (its steps up to the NaN).
  assert expected[:, 3].sum() == 5 - given_returns and not expected[:, 4].any()
  returns = np.broadcast_to(np.arange(num_traj, dtype=np.float32), rewards.shape)
  extra = dict(episode_returns=returns) if given_returns else {}
  if version == "dense":
    advantages = fast_jit(functools.partial(gr.gigpo_grid_advantages, num_groups=3, norm=norm))(
      rewards, group_ids, obs[..., None], valid=valid, **extra
    ).advantages
  else:
    row_groups = np.broadcast_to(group_ids[None, :], obs.shape)
    keys = list(zip(row_groups.reshape(rows), obs.reshape(rows)))
    anchors = np.array([keys.index(key) for key in keys], np.int32)  # first row of the key
    traj = np.tile(np.arange(num_traj, dtype=np.int32), num_steps)
    step = np.repeat(np.arange(num_steps, dtype=np.int32), num_traj)
    advantages = _jit(
      gr.gigpo_advantages, num_groups=3, num_traj=num_traj, num_anchors=rows, norm=norm
    )(
      rewards.reshape(rows),
      traj,
      step,
      row_groups.reshape(rows),
      anchors,
      valid=valid.reshape(rows),
      **{k: v.reshape(rows) for k, v in extra.items()},
    ).advantages
  advantages = np.asarray(advantages).reshape(num_steps, num_traj)
  np.testing.assert_array_equal(np.isnan(advantages), expected)
  assert np.all(np.isfinite(advantages[~expected]))
  np.testing.assert_array_equal(advantages[~valid], 0.0)


def _grid_keys(obs, group_ids, valid):
  """Python keys (group, observation bytes) of the valid rows of a [T, N] grid, None elsewhere."""
  num_steps, n = valid.shape
  return [
    [
      (int(group_ids[j]), np.asarray(obs[t, j]).tobytes()) if valid[t, j] else None
      for j in range(n)
    ]
    for t in range(num_steps)
  ]


@pytest.mark.parametrize("values, fits", [(2, True), (2**30, False)], ids=["small", "wide"])
def test_direct_anchor_slots_are_a_perfect_hash_of_group_and_observation(values, fits):
  # Group 3 is empty (its id is unused) and trajectory 4 has no valid row. Small values fit the
  # table (rows share a slot iff their keys are equal); spread-out values do not.
  rng = np.random.default_rng(60)
  num_steps, group_ids = 7, np.array([0, 0, 1, 1, 4, 2, 2, 4, 0], np.int32)
  obs = rng.integers(0, values, size=(num_steps, 9, 3)).astype(np.int32)
  obs[:, :, 1] += 1000 * group_ids  # a per-task constant, like FourRooms' goal
  valid = rng.random((num_steps, 9)) < 0.8
  valid[:, 4] = False
  rows = num_steps * 9

  @fast_jit
  def slots(obs, valid):
    words = gr.observation_words(obs.reshape(rows, 3)).reshape(num_steps, 9, 3)
    layout = hashing.direct_anchor_layout(words, jnp.asarray(group_ids), valid, 5, rows)
    return hashing.direct_anchor_index(words, jnp.asarray(group_ids), valid, layout), layout.fits

  slot, got_fits = (np.asarray(x) for x in slots(obs, valid))
  assert bool(got_fits) == fits
  if fits:
    keys = _grid_keys(obs, group_ids, valid)
    pairs = {
      (keys[t][j], int(slot[t, j])) for t in range(num_steps) for j in range(9) if valid[t, j]
    }
    assert len({k for k, _ in pairs}) == len({s for _, s in pairs}) == len(pairs)
    assert np.all((slot >= 0) & (slot < rows))
  np.testing.assert_array_equal(slot[~valid], 0)


def test_direct_layout_fits_exactly_at_capacity():
  # Two groups whose boxes have 3 * 2 = 6 and 1 cell: 7 slots needed.
  words = jnp.asarray(np.array([[[0, 5], [9, 9]], [[2, 6], [9, 9]]], np.uint32))
  group_ids, valid = jnp.asarray([0, 1], jnp.int32), jnp.ones((2, 2), bool)
  layout = fast_jit(hashing.direct_anchor_layout, static_argnums=(3, 4))
  assert bool(layout(words, group_ids, valid, 2, 7).fits)
  assert not bool(layout(words, group_ids, valid, 2, 6).fits)
  got = layout(words, group_ids, valid, 2, 7)
  np.testing.assert_array_equal(got.stride, [[1, 3], [1, 1]])
  np.testing.assert_array_equal(got.offset, [0, 6])


@pytest.mark.parametrize("values", [3, 2**30], ids=["direct", "hash-fallback"])
def test_gigpo_grid_anchor_methods_agree_even_with_forced_collisions(values):
  # "auto" (the direct table when it fits, else the hash path, here with a colliding hash_fn:
  # constant, every key in one slot per round) and "sort" must give the same advantages.
  rewards, group_ids, obs, valid = _grid_batch(
    61, num_steps=8, num_groups=3, group_size=3, states=3
  )
  if values > 3:
    obs = obs * (values // 10)  # spread out: the direct table does not fit
  kw = dict(num_groups=3, valid=valid, gamma=0.9, norm="mean_std")

  @fast_jit
  def all_methods(rewards, obs):
    return [
      gr.gigpo_grid_advantages(
        rewards, jnp.asarray(group_ids), obs, anchor_method=m, hash_fn=h, **kw
      )
      for m, h in (("auto", _CONSTANT_HASH), ("sort", _PARITY_HASH))
    ]

  results = all_methods(rewards, obs)
  for other in results[1:]:
    for field in gr.GigpoAdvantages._fields:
      np.testing.assert_allclose(
        getattr(other, field), getattr(results[0], field), rtol=1e-6, atol=1e-6, err_msg=field
      )
  # Against an independent loop: rows of one anchor have mean-zero, all-valid step advantages.
  keys = _grid_keys(obs, group_ids, valid)
  step_adv = np.asarray(results[0].step_advantages)
  members = {}
  for t in range(valid.shape[0]):
    for j in range(valid.shape[1]):
      if valid[t, j]:
        members.setdefault(keys[t][j], []).append(step_adv[t, j])
  assert any(len(m) > 1 for m in members.values())
  for m in members.values():
    assert abs(sum(m)) < 1e-4
  np.testing.assert_array_equal(step_adv[~valid], 0)


def test_gigpo_grid_direct_path_on_float_and_scalar_observations():
  # Scalar float observations [T, N] (one step): each group's words span one value, so the
  # direct table fits; -0.0 and 0.0 are one state (observation_words).
  obs = np.array([[0.0, -0.0, 5.0, 5.0]], np.float32)
  group_ids = np.array([0, 0, 1, 1], np.int32)
  words = gr.observation_words(obs.reshape(4)).reshape(1, 4, 1)
  assert bool(
    hashing.direct_anchor_layout(words, jnp.asarray(group_ids), jnp.ones((1, 4), bool), 2, 4).fits
  )
  run = fast_jit(functools.partial(gr.gigpo_grid_advantages, num_groups=2, norm="mean_std"))
  # Bit-identical returns in an anchor give exactly zero (shifted statistics).
  same = run(np.full((1, 4), 0.35, np.float32), group_ids, obs)
  np.testing.assert_array_equal(same.step_advantages, 0.0)
  # Different returns: -0.0 and 0.0 share the anchor (mean_std of two values is +-1/sqrt(2)).
  got = run(np.array([[0.35, 0.5, 1.0, 1.0]], np.float32), group_ids, obs)
  np.testing.assert_allclose(got.step_advantages, [[-0.7071, 0.7071, 0.0, 0.0]], atol=1e-4)


# ----------------------------------------------------------------------------------------------
# REC / OPMD / AsymRE
# ----------------------------------------------------------------------------------------------

RHO_46 = np.array([0.3, 0.7, 1.0, 1.3, 3.5], np.float32)


@pytest.mark.parametrize(
  "mode,keep_pos,keep_neg",
  [
    ("two-side", [0, 0, 1, 0, 0], [0, 0, 1, 0, 0]),
    ("one-side", [1, 1, 1, 0, 0], [0, 0, 1, 1, 1]),
    ("ring", [1, 0, 1, 0, 0], [0, 0, 1, 0, 1]),
    ("none", [1] * 5, [1] * 5),
  ],
)
def test_rec_keep_mask_vector(mode, keep_pos, keep_neg):
  # Hand-computed (eps 0.2 / 0.2, outer 0.6 / 2.0).
  old = np.zeros((2, 5), np.float32)
  logp = np.log(np.stack([RHO_46, RHO_46]))
  adv = np.array([[1.0] * 5, [-1.0] * 5], np.float32)
  _, extras = _jit(gr.rec_loss, clip_mode=mode)(logp, old, adv, np.ones((2, 5)))
  np.testing.assert_array_equal(extras.keep, [keep_pos, keep_neg])
  np.testing.assert_allclose(extras.clip_fraction, 1 - (sum(keep_pos) + sum(keep_neg)) / 10)


def _rec_inputs(seed=15):
  rng = np.random.default_rng(seed)
  logp = -rng.uniform(0.1, 2.0, size=(3, 4)).astype(np.float32)
  old = logp + rng.normal(scale=0.3, size=(3, 4)).astype(np.float32)
  adv = np.repeat(np.array([[1.5], [-0.5], [0.7]], np.float32), 4, axis=1)
  mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], np.float32)
  return logp, old, adv, mask


def test_rec_gradient_is_reinforce_whatever_old_logp():
  logp, old, adv, mask = _rec_inputs()
  for old_logp in (old, logp - 5.0):
    grad = fast_jit(jax.grad(lambda lp: gr.rec_loss(lp, old_logp, adv, mask)[0]))(logp)
    np.testing.assert_allclose(grad, -adv * mask / mask.sum(), rtol=1e-6)
  # One-side keep mask: the gradient is REINFORCE on the kept tokens only.
  (_, extras), grad = jax.value_and_grad(
    lambda lp: gr.rec_loss(lp, old, adv, mask, clip_mode="one-side"), has_aux=True
  )(logp)
  rho = np.exp(logp.astype(np.float64) - old)
  keep = ((adv >= 0) & (rho <= 1.2)) | ((adv <= 0) & (rho >= 0.8))
  np.testing.assert_array_equal(extras.keep[mask > 0], keep[mask > 0])  # padding counts as logp 0
  assert 0 < keep[mask > 0].sum() < mask.sum()  # the mask is not trivial on this input
  np.testing.assert_allclose(
    jax.grad(lambda lp: gr.rec_loss(lp, old, adv, mask, clip_mode="one-side")[0])(logp),
    -adv * keep * mask / mask.sum(),
    rtol=1e-6,
  )


def test_rec_importance_weight_gradient_equals_unclipped_ppo_gradient():
  logp, old, adv, mask = _rec_inputs(16)
  grad = jax.grad(lambda lp: gr.rec_loss(lp, old, adv, mask, weight="importance_sampling")[0])(logp)
  # d/dlogp of -A * exp(logp - old) at the same point: -A * rho.
  rho = np.exp(logp.astype(np.float64) - old)
  np.testing.assert_allclose(grad, -adv * rho * mask / mask.sum(), rtol=1e-5)
  # Advantage weighting: -A exp(A / temp).
  grad = jax.grad(lambda lp: gr.rec_loss(lp, old, adv, mask, weight="advantage", temp=2.0)[0])(logp)
  np.testing.assert_allclose(grad, -adv * np.exp(adv / 2.0) * mask / mask.sum(), rtol=1e-5)


def test_rec_regularizers_and_gspo_mode():
  logp, old, adv, mask = _rec_inputs(17)
  zero_adv = np.zeros_like(adv)
  grad = jax.grad(
    lambda lp: gr.rec_loss(lp, old, zero_adv, mask, regularizer="k2", reg_coef=0.5)[0]
  )(logp)
  np.testing.assert_allclose(grad, 0.5 * 2 * (logp - old) * mask / mask.sum(), rtol=1e-5)
  grad = jax.grad(
    lambda lp: gr.rec_loss(lp, old, zero_adv, mask, regularizer="forward-kl", reg_coef=0.3)[0]
  )(logp)
  np.testing.assert_allclose(grad, -0.3 * mask / mask.sum(), rtol=1e-6)
  # gspo-one-side: one keep decision per sequence, seq-mean-token-mean aggregation.
  loss, extras = gr.rec_loss(
    logp, old, adv, mask, clip_mode="gspo-one-side", weight="gspo_importance_sampling"
  )
  lr = (logp.astype(np.float64) - old) * mask
  seq_rho = np.exp(lr.sum(1) / mask.sum(1))
  a = adv[:, 0]
  keep = ((a >= 0) & (seq_rho <= 1.2)) | ((a <= 0) & (seq_rho >= 0.8))
  per_seq = (-(a * seq_rho * keep)[:, None] * logp * mask).sum(1) / mask.sum(1)
  np.testing.assert_allclose(loss, per_seq.mean(), rtol=1e-5)
  assert extras.denominator == 3
  with pytest.raises(ValueError, match="clip_mode"):
    gr.rec_loss(logp, old, adv, mask, clip_mode="dual")
  with pytest.raises(ValueError, match="eps_low"):
    gr.rec_loss(logp, old, adv, mask, eps_low=1.5)
  with pytest.raises(AssertionError):
    gr.rec_loss(logp, old[:, :3], adv, mask)


def test_rec_advantages_singleton_and_std():
  r = np.array([1.0, 0.0, 0.0, 1.0, 0.5, 3.0], np.float32)
  ids = np.array([0, 0, 0, 0, 1, 2], np.int32)
  out = gr.rec_advantages(r, ids, 3)  # singleton groups do not crash (Trinity NameError)
  np.testing.assert_allclose(out.advantages, [0.5, -0.5, -0.5, 0.5, 0.5, 3.0])
  out = gr.rec_advantages(r, ids, 3, std_normalize=True)
  np.testing.assert_allclose(
    out.advantages[:4], np.array([0.5, -0.5, -0.5, 0.5]) / (0.5 + 1e-6), rtol=1e-6
  )  # population std 0.5
  np.testing.assert_allclose(out.advantages[4:], r[4:] / (1 + 1e-6), rtol=1e-6)


def test_rec_balance_drop():
  rng = np.random.default_rng(18)
  r = (rng.random(60) < 0.3).astype(np.float32)  # mostly negatives
  ids = np.repeat(np.arange(6), 10).astype(np.int32)
  _, r, ids = _shuffle(rng, r, ids)
  fn = _jit(gr.rec_advantages, num_groups=6, drop="balance")
  out = fn(r, ids, key=jax.random.PRNGKey(0))
  kept = np.asarray(out.kept)
  for g in range(6):
    rg, kg = r[ids == g], kept[ids == g]
    pos = (rg >= rg.mean()).sum()
    if 0 < pos < len(rg):
      # Exactly min(#neg, #pos) negatives kept, every positive kept.
      assert kg[rg >= rg.mean()].all()
      assert kg[rg < rg.mean()].sum() == min(pos, len(rg) - pos)
    # Advantages use the kept rows' mean; dropped rows get 0.
    adv = np.asarray(out.advantages)[ids == g]
    if kg.sum() > 1:
      np.testing.assert_allclose(adv[kg], rg[kg] - rg[kg].mean(), atol=1e-6)
    np.testing.assert_array_equal(adv[~kg], 0.0)
  assert not np.array_equal(kept, fn(r, ids, key=jax.random.PRNGKey(1)).kept)
  with pytest.raises(ValueError, match="key"):
    gr.rec_advantages(r, ids, 6, drop="balance")


def test_opmd_and_asymre_vectors():
  r = np.array([1.0, 0.0, 0.0, 1.0, 2.0], np.float32)
  ids = np.array([0, 0, 0, 0, 1], np.int32)
  # Hand-computed.
  adv = gr.opmd_advantages(r, ids, 2, baseline="logavgexp", tau=1.0)
  np.testing.assert_allclose(adv, [0.379885, -0.620115, -0.620115, 0.379885, 2.0], rtol=1e-5)
  adv = gr.opmd_advantages(r, ids, 2, baseline="logavgexp", tau=0.5)
  np.testing.assert_allclose(1.0 - adv[0], 0.716890, rtol=1e-5)
  np.testing.assert_allclose(
    1.0 - gr.opmd_advantages(r, ids, 2, baseline="logavgexp", tau=1e4)[0], 0.5, atol=1e-4
  )
  np.testing.assert_allclose(
    1.0 - gr.opmd_advantages(r, ids, 2, baseline="logavgexp", tau=1e-3)[0], 1.0, atol=1e-2
  )
  np.testing.assert_allclose(gr.opmd_advantages(r, ids, 2), [0.5, -0.5, -0.5, 0.5, 2.0])
  np.testing.assert_allclose(
    gr.asymre_advantages(r, ids, 2), [0.6, -0.4, -0.4, 0.6, 2.0], rtol=1e-6
  )
  eq = np.full(7, 0.4, np.float32)
  zeros = np.zeros(7, np.int32)
  assert np.all(np.asarray(gr.opmd_advantages(eq, zeros, 1, baseline="logavgexp")) == 0)
  with pytest.raises(ValueError, match="tau"):
    gr.opmd_advantages(r, ids, 2, baseline="logavgexp", tau=0.0)


def test_opmd_loss_value_and_gradient():
  logp, _, adv, mask = _rec_inputs(19)
  loss, extras = gr.opmd_loss(logp, adv, mask, tau=1.0)
  np.testing.assert_allclose(loss, (-adv * logp * mask).sum() / mask.sum() / 2, rtol=1e-6)
  np.testing.assert_allclose(extras.denominator, mask.sum())
  grad = jax.grad(lambda lp: gr.opmd_loss(lp, adv, mask, tau=1.0)[0])(logp)
  np.testing.assert_allclose(grad, -adv * mask / mask.sum() / 2, rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# HICRA
# ----------------------------------------------------------------------------------------------


def test_hicra_vector_and_properties():
  # Hand-computed.
  a = jnp.array([[0.5, 0.5, 0.5], [-0.5, -0.5, -0.5]])
  plan = jnp.array([[0, 1, 0], [1, 0, 0]])
  out = gr.hicra_advantages(a, plan, alpha=0.2)
  np.testing.assert_allclose(out, [[0.5, 0.6, 0.5], [-0.4, -0.5, -0.5]], rtol=1e-6)
  # Not a no-op (the TRL PR #4997 regression), never flips signs, alpha = 0 is the identity.
  assert not np.allclose(out, a)
  rng = np.random.default_rng(21)
  a = rng.normal(size=(4, 6)).astype(np.float32)
  plan = rng.random((4, 6)) < 0.5
  out = np.asarray(gr.hicra_advantages(a, plan, alpha=0.9))
  assert np.all(np.sign(out) == np.sign(a))
  np.testing.assert_array_equal(out[~plan], a[~plan])
  np.testing.assert_array_equal(gr.hicra_advantages(a, plan, alpha=0.0), a)
  with pytest.raises(ValueError, match="alpha"):
    gr.hicra_advantages(a, plan, alpha=1.5)


def test_planning_token_mask():
  tokens = np.array([[5, 1, 2, 3, 1, 2, 9], [1, 2, 1, 2, 3, 0, 0], [7, 7, 4, 1, 2, 3, 3]], np.int32)
  mask = np.array([[1] * 7, [1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 0]], bool)
  patterns = np.array([[1, 2, 3], [2, 1, 0], [3, 3, 0]], np.int32)
  lengths = np.array([3, 2, 2], np.int32)
  got = np.asarray(fast_jit(gr.planning_token_mask)(tokens, patterns, lengths, mask))
  expected = np.zeros_like(mask)
  for b in range(3):
    for s in range(3):
      pat = patterns[s, : lengths[s]]
      for p in range(7 - len(pat) + 1):
        if np.array_equal(tokens[b, p : p + len(pat)], pat) and mask[b, p : p + len(pat)].all():
          expected[b, p : p + len(pat)] = True
  np.testing.assert_array_equal(got, expected)
  assert got[0, 1:4].all() and got[1, 1:5].all()  # overlapping matches are or-ed
  assert got[2, 3:6].all() and not got[2, 6]  # "3 3" would need the padding token: no match


# ----------------------------------------------------------------------------------------------
# HBPO
# ----------------------------------------------------------------------------------------------


def _np_hbpo_reward(n, b, correct, form="paper"):
  f1 = 4 * np.cos(np.pi * n / 8192) - np.abs(n - b) / 4096
  f2 = 4 * np.cos(np.pi * b / 8192)
  r = np.where(n <= b, f2, f1) if form == "paper" else np.minimum(f1, f2)
  return np.where(correct & (n <= 4096), r, 0.0)


def test_hbpo_reward_vector_and_forms():
  # Hand-computed (paper piecewise form).
  n = jnp.array([300, 700, 700, 3000, 3000])
  b = jnp.array([512, 512, 1024, 2560, 512])
  c = jnp.ones(5, bool)
  np.testing.assert_allclose(
    gr.hbpo_reward(n, b, c), [3.923141, 3.810838, 3.695518, 1.524755, 1.024755], rtol=1e-5
  )
  # The released code's min(f1, f2) differs inside the budget at (300, 512).
  code = np.asarray(gr.hbpo_reward(n, b, c, form="code_min"))
  np.testing.assert_allclose(
    code, _np_hbpo_reward(np.asarray(n), np.asarray(b), True, "code_min"), rtol=1e-5
  )
  assert abs(code[0] - 3.923141) > 1e-3
  # Wrong or too long answers get incorrect_reward; continuity at n = b; f2 decreasing in b.
  r = gr.hbpo_reward(
    jnp.array([300, 5000, 512, 512]),
    jnp.array([512, 512, 512, 1024]),
    jnp.array([False, True, True, True]),
    incorrect_reward=-0.5,
  )
  np.testing.assert_allclose(r[:2], [-0.5, -0.5])
  f1_at_b = 4 * np.cos(np.pi * 512 / 8192)
  np.testing.assert_allclose(r[2], f1_at_b, rtol=1e-6)
  assert r[3] < r[2]


def test_hbpo_advantages_vector():
  # Hand-computed, shuffled.
  budgets = np.array([512, 512, 1024, 1024, 2048, 2048, 2560, 2560])
  lengths = np.array([300, 900, 800, 1200, 1500, 2600, 2000, 4000])
  correct = np.array([1, 0, 1, 1, 1, 0, 1, 1], bool)
  budget_values = np.array([512, 1024, 2048, 2560], np.float32)
  budget_ids = np.searchsorted(budget_values, budgets).astype(np.int32)
  perm, lengths_s, budgets_s, correct_s, bid_s = _shuffle(
    np.random.default_rng(22), lengths, budgets, correct, budget_ids
  )
  inv = np.argsort(perm)
  r = fast_jit(gr.hbpo_reward)(
    jnp.asarray(lengths_s), jnp.asarray(budgets_s), jnp.asarray(correct_s)
  )
  np.testing.assert_allclose(
    np.asarray(r)[inv],
    [3.923141, 0, 3.695518, 3.540896, 2.828427, 0, 2.222281, -0.204334],
    rtol=1e-5,
    atol=1e-6,
  )
  ids = np.zeros(8, np.int32)
  hbpo = _jit(gr.hbpo_advantages, num_groups=1)
  out = hbpo(r, bid_s, ids, budget_values=budget_values)
  np.testing.assert_allclose(
    np.asarray(out.intra)[inv],
    np.repeat([-1.961571, -0.077311, -1.414214, -1.213307], 2),
    rtol=1e-5,
  )
  np.testing.assert_allclose(
    np.asarray(out.inter)[inv],
    [1.071255, -1.114910, 0.944412, 0.858249, 0.461227, -1.114910, 0.123453, -1.228775],
    rtol=1e-5,
  )
  np.testing.assert_allclose(
    np.asarray(out.advantages)[inv],
    [-0.890316, -3.076481, 0.867101, 0.780938, -0.952987, -2.529124, -1.089855, -2.442082],
    rtol=1e-5,
  )
  doubled = _jit(gr.hbpo_advantages, num_groups=1, double_intra=True)(
    r, bid_s, ids, budget_values=budget_values
  )
  np.testing.assert_allclose(doubled.advantages, out.inter + 2 * out.intra, rtol=1e-6)


def test_hbpo_intra_zero_for_all_correct_within_budget():
  r = fast_jit(gr.hbpo_reward)(
    jnp.array([100, 200, 300]), jnp.array([512, 512, 512]), jnp.ones(3, bool)
  )
  out = _jit(gr.hbpo_advantages, num_groups=1)(
    r, jnp.zeros(3, jnp.int32), jnp.zeros(3, jnp.int32), budget_values=jnp.array([512.0])
  )
  np.testing.assert_allclose(out.intra, 0.0, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# M-GRPO
# ----------------------------------------------------------------------------------------------


def test_mgrpo_alignment():
  rollout = np.array([0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 4], np.int32)  # d = [5, 2, 3, 0, 1]
  _, rollout = _shuffle(np.random.default_rng(23), rollout)
  align = _jit(gr.mgrpo_alignment, num_rollouts=5, slots_per_rollout=3)
  out = align(rollout, key=jax.random.PRNGKey(0))
  index, slot_valid = np.asarray(out.index).reshape(5, 3), np.asarray(out.slot_valid)
  assert index.size == 15
  np.testing.assert_array_equal(slot_valid.reshape(5, 3).all(1), [True, True, True, False, True])
  for k in (0, 1, 2, 4):
    assert np.all(rollout[index[k]] == k)  # every slot belongs to the right rollout
  own = {k: set(np.flatnonzero(rollout == k)) for k in range(5)}
  assert len(set(index[0])) == 3  # d > D: without replacement
  assert set(index[1]) == own[1]  # d < D: all kept, one duplicate
  assert sorted(index[2]) == sorted(own[2])  # d == D: a permutation
  assert set(index[4]) == own[4]
  np.testing.assert_array_equal(align(rollout, key=jax.random.PRNGKey(0)).index, out.index)
  # Statistics are computed before duplication and gathered: duplicates do not move the mean.
  sub_rewards = np.random.default_rng(24).normal(size=len(rollout)).astype(np.float32)
  query = np.zeros(len(rollout), np.int32)
  adv = np.asarray(gr.grpo_advantages(sub_rewards, query, 1))
  np.testing.assert_allclose(
    adv, (sub_rewards - sub_rewards.mean()) / (sub_rewards.std(ddof=1) + 1e-6), rtol=1e-4, atol=1e-5
  )
  aligned = adv[np.asarray(out.index)]
  assert aligned.shape == (15,)


# ----------------------------------------------------------------------------------------------
# DisCO
# ----------------------------------------------------------------------------------------------


def _disco_batch(scores, rewards, groups):
  """One token per response, so the logL score is the token log-prob itself."""
  logp = jnp.asarray(np.asarray(scores, np.float32)[:, None])
  return logp, jnp.asarray(np.asarray(rewards, np.float32)), jnp.asarray(groups, jnp.int32)


def test_disco_objective_and_gradient_vector():
  # Hand-computed: positives [-1, -2], negatives [-1.5, -0.5].
  logp, r, ids = _disco_batch([-1.0, -1.5, -2.0, -0.5], [1, 0, 1, 0], [0, 0, 0, 0])
  mask = jnp.ones_like(logp)

  def value_and_grad(tau, variant="lse"):
    def loss_fn(lp):
      return gr.disco_loss(lp, jax.lax.stop_gradient(lp), mask, r, ids, 1, tau=tau, variant=variant)

    return fast_jit(jax.value_and_grad(loss_fn, has_aux=True))(logp)

  (loss, extras), grad = value_and_grad(1.0)
  np.testing.assert_allclose(loss, 1.313262, rtol=1e-5)
  np.testing.assert_allclose(extras.objective, [-1.313262], rtol=1e-5)
  # d loss / d s = -dJ/ds: positives -1/2, negatives softmax(s_neg / tau).
  np.testing.assert_allclose(grad[:, 0], [-0.5, 0.268941, -0.5, 0.731059], rtol=1e-5)
  (loss, _), grad = value_and_grad(10.0)
  np.testing.assert_allclose(loss, 7.443967, rtol=1e-5)
  np.testing.assert_allclose(grad[[1, 3], 0], [0.475021, 0.524979], rtol=1e-5)
  (loss, _), grad = value_and_grad(1.0, "basic")
  np.testing.assert_allclose(grad[:, 0], [-0.5, 0.5, -0.5, 0.5], rtol=1e-6)
  np.testing.assert_allclose(loss, 0.5, rtol=1e-6)


def test_disco_gradient_equals_reference_surrogate_on_ragged_groups():
  rng = np.random.default_rng(25)
  b, t = 9, 5
  logp = jnp.asarray(-rng.uniform(0.1, 3, size=(b, t)).astype(np.float32))
  old = logp + jnp.asarray(rng.normal(scale=0.05, size=(b, t)).astype(np.float32))
  mask = jnp.asarray((rng.random((b, t)) < 0.8) | (np.arange(t) == 0))
  r = jnp.array([1, 0, 0, 1, 1, 1, 0, 1, 0], jnp.float32)
  ids = jnp.array([0, 0, 0, 1, 1, 2, 2, 2, 3], jnp.int32)  # group 1 all positive, 3 singleton
  r_np, ids_np = np.asarray(r), np.asarray(ids)
  tau, beta, delta = 2.0, 1e3, 1e-4

  def reference_surrogate(lp):
    # The reference code's form: S / sg(S) for the log-sum-exp, sg(hinge) * KL for the
    # constraint; grouped with explicit Python loops.
    m = mask.astype(jnp.float32)
    s = (lp * m).sum(1) / m.sum(1)
    kl = ((old - lp) * m).sum() / m.sum()
    total = 0.0
    for g in range(4):
      pos = [i for i in range(b) if ids_np[i] == g and r_np[i] == 1]
      neg = [i for i in range(b) if ids_np[i] == g and r_np[i] == 0]
      if pos and neg:
        zs = jnp.stack([s[i] / tau for i in neg])
        sum_exp = jnp.exp(zs - jax.lax.stop_gradient(zs.max())).sum()
        surrogate = sum_exp / jax.lax.stop_gradient(sum_exp)
        total = total + sum(s[i] - tau * surrogate for i in pos) / len(pos)
    hinge = jax.lax.stop_gradient(jnp.maximum(beta * (kl - delta), 0.0))
    return -total / 4 + hinge * kl

  def ours(lp):
    return gr.disco_loss(lp, old, mask, r, ids, 4, tau=tau, beta=beta, delta=delta)[0]

  np.testing.assert_allclose(
    fast_jit(jax.grad(ours))(logp),
    fast_jit(jax.grad(reference_surrogate))(logp),
    rtol=1e-4,
    atol=1e-7,
  )
  _, extras = _jit(gr.disco_loss, num_groups=4, tau=tau)(logp, old, mask, r, ids)
  np.testing.assert_array_equal(extras.valid_questions, [True, False, True, False])
  assert extras.num_questions == 4  # invalid questions still count in the denominator


def test_disco_kl_penalty_and_no_valid_question():
  # Hand-computed: KL = 2e-4, delta = 1e-4, beta = 1e3 -> penalty 5e-6, coefficient 0.1.
  logp = jnp.full((2, 3), -1.0)
  old = logp + 2e-4
  mask = jnp.ones((2, 3))
  r = jnp.array([1.0, 1.0])  # no negative: no valid question
  ids = jnp.zeros(2, jnp.int32)
  (loss, extras), grad = fast_jit(
    jax.value_and_grad(lambda lp: gr.disco_loss(lp, old, mask, r, ids, 1), has_aux=True)
  )(logp)
  np.testing.assert_allclose(extras.kl, 2e-4, rtol=1e-3)
  np.testing.assert_allclose(loss, 5e-6, rtol=1e-2)
  # d/dlogp [0.5 beta (KL - delta)^2] = beta (KL - delta) * dKL/dlogp = 0.1 * (-1/6).
  np.testing.assert_allclose(grad, np.full((2, 3), -0.1 / 6), rtol=1e-2)
  assert np.all(np.isfinite(grad))
  # Within the budget the penalty and its gradient vanish.
  g0 = fast_jit(jax.grad(lambda lp: gr.disco_loss(lp, lp + 1e-5, mask, r, ids, 1)[0]))(logp)
  np.testing.assert_array_equal(g0, 0.0)
  with pytest.raises(ValueError, match="score"):
    gr.disco_loss(logp, old, mask, r, ids, 1, score="ratio")
  with pytest.raises(AssertionError):
    gr.disco_loss(logp, old, mask, r[:1], ids[:1], 1)


def test_disco_lratio_score():
  logp = jnp.log(jnp.array([[0.5, 0.25], [0.2, 0.2]]))
  old = jnp.log(jnp.array([[0.25, 0.25], [0.4, 0.1]]))
  _, extras = gr.disco_loss(
    logp, old, jnp.ones((2, 2)), jnp.array([1.0, 0.0]), jnp.zeros(2, jnp.int32), 1, score="Lratio"
  )
  np.testing.assert_allclose(extras.scores, [(2 + 1) / 2, (0.5 + 2) / 2], rtol=1e-5)
  np.testing.assert_allclose(extras.objective, [1.5 - 1.25], rtol=1e-5)  # tau 1, one negative


# ----------------------------------------------------------------------------------------------
# SALT, SPA, G-RA, Hi-Agent
# ----------------------------------------------------------------------------------------------


def test_salt_vector_and_properties():
  # Hand-computed: tau0 = (n0, n1), tau1 = (n0, n2), tau2 = (n0, n1, n3); A = [1, -1, 1].
  nodes = np.array([0, 1, 0, 2, 0, 1, 3], np.int32)
  traj = np.array([0, 0, 1, 1, 2, 2, 2], np.int32)
  adv = np.array([1, -1, 1], np.float32)[traj]
  perm, nodes_s, traj_s, adv_s = _shuffle(np.random.default_rng(26), nodes, traj, adv)
  got = np.asarray(gr.salt_advantages(adv_s, nodes_s, traj_s, 7))[np.argsort(perm)]
  node_value = {0: 1 / 3, 1: 1.0, 2: -1.0, 3: 1.0}
  np.testing.assert_allclose(got, [node_value[n] for n in nodes], rtol=1e-6)
  # No shared node: the base advantages come back.
  np.testing.assert_allclose(gr.salt_advantages(adv, np.arange(7, dtype=np.int32), traj, 7), adv)
  # Revisits: trajectory 1 visits n0 twice; dedup counts it once, otherwise twice.
  nodes_r = np.array([0, 1, 0, 0, 0, 1, 3], np.int32)
  dedup = gr.salt_advantages(adv, nodes_r, traj, 7)
  multi = gr.salt_advantages(adv, nodes_r, traj, 7, dedup_per_trajectory=False)
  np.testing.assert_allclose(dedup[0], 1 / 3, rtol=1e-6)
  np.testing.assert_allclose(multi[0], (1 - 1 - 1 + 1) / 4, atol=1e-7)
  np.testing.assert_allclose(dedup[1], multi[1])


def test_spa_rewards_and_progress_loss():
  # Hand-computed.
  r = gr.spa_step_rewards(
    jnp.array([0.2, 0.3, 0.5]), jnp.array([True, False, False]), jnp.array([False, False, True])
  )
  np.testing.assert_allclose(r, [0.7, 0.3, 1.0], rtol=1e-6)
  progress = np.array([0.2, 0.3, 0.5, 0.4, -0.1, 0.9], np.float32)
  traj = np.array([0, 0, 0, 1, 1, 2], np.int32)
  perm, progress_s, traj_s = _shuffle(np.random.default_rng(27), progress, traj)
  exact = np.array([1.0, 0.3, 0.9], np.float32)
  loss, extras = gr.spa_progress_loss(progress_s, traj_s, exact, 3)
  assert loss == 0.0
  targets = np.array([0.0, 1.0, 0.0], np.float32)
  loss, grad = jax.value_and_grad(lambda p: gr.spa_progress_loss(p, traj_s, targets, 3)[0])(
    progress_s
  )
  residual = np.array([1.0, -0.7, 0.9])
  np.testing.assert_allclose(loss, np.mean(residual**2), rtol=1e-5)
  np.testing.assert_allclose(grad, 2 * residual[traj_s] / 3, rtol=1e-5)


def test_gated_reward_accumulation_vector():
  # Hand-computed, shuffled.
  low = np.array([0.1, 0.2, 0.3, 0.1, 0.1], np.float32)
  traj = np.array([0, 0, 0, 1, 1], np.int32)
  perm, low_s, traj_s = _shuffle(np.random.default_rng(28), low, traj)
  high = jnp.array([1.0, 0.2])
  out = gr.gated_reward_accumulation(low_s, high, traj_s, threshold=0.5)
  np.testing.assert_allclose(
    np.asarray(out.step_rewards)[np.argsort(perm)], [0.1, 0.2, 0.3, 0, 0], rtol=1e-6
  )
  np.testing.assert_allclose(out.returns, [1.6, 0.2], rtol=1e-6)
  # The gate is >=, and -inf is direct accumulation.
  np.testing.assert_allclose(
    gr.gated_reward_accumulation(low, high, traj, threshold=0.2).returns, [1.6, 0.4], rtol=1e-6
  )
  np.testing.assert_allclose(
    gr.gated_reward_accumulation(low, high, traj, threshold=-math.inf).step_rewards, low
  )


def test_foresight_rewards():
  fmt = jnp.array([1.0, 0.0, 1.0, 1.0])
  exe = jnp.array([1.0, 1.0, 0.0, 0.0])
  np.testing.assert_allclose(gr.foresight_rewards(fmt, exe, lam=0.5), [1.5, 0.5, 1.0, 1.0])
  ids = jnp.zeros(4, jnp.int32)
  # lam = 0 reduces to GRPO on the format reward alone.
  np.testing.assert_allclose(
    gr.grpo_advantages(gr.foresight_rewards(fmt, exe, lam=0.0), ids, 1),
    gr.grpo_advantages(fmt, ids, 1),
  )
  with pytest.raises(ValueError, match="lam"):
    gr.foresight_rewards(fmt, exe, lam=-1.0)


def test_salt_and_gra_match_a_loop_over_the_stated_rules():
  # The papers' equations could not be read (see the docstrings); this pins the rules as the
  # docstrings state them, recomputed by plain loops on a random batch with revisits and masks.
  rng = np.random.default_rng(30)
  n, num_nodes, num_traj = 40, 12, 6
  nodes = rng.integers(0, num_nodes, n).astype(np.int32)
  traj = rng.integers(0, num_traj, n).astype(np.int32)
  valid = rng.random(n) > 0.2
  traj_adv = rng.normal(size=num_traj).astype(np.float32)
  for dedup in (True, False):
    salt = _jit(gr.salt_advantages, num_nodes=num_nodes, dedup_per_trajectory=dedup)
    got = np.asarray(salt(traj_adv[traj], nodes, traj, valid=valid))
    want = np.zeros(n)
    for i in np.flatnonzero(valid):
      # SALT: mean of the base advantages of the trajectories through the node (each counted
      # once with dedup, once per visit without).
      through = traj[valid & (nodes == nodes[i])]
      want[i] = traj_adv[np.unique(through) if dedup else through].mean()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # G-RA: r~_t = r_low_t if r_high >= Delta else 0; R = r_high + sum_t r~_t. Trajectory 2's
  # outcome equals Delta exactly (the gate passes), trajectory 5 is below it.
  low = rng.normal(size=n).astype(np.float32)
  high = np.array([1.0, 0.9, 0.5, 0.7, 0.6, 0.1], np.float32)
  out = gr.gated_reward_accumulation(low, jnp.asarray(high), traj, threshold=0.5, valid=valid)
  step = np.where(valid & (high[traj] >= 0.5), low, 0.0)
  np.testing.assert_allclose(out.step_rewards, step, rtol=1e-6)
  returns = high + np.array([step[traj == j].sum() for j in range(num_traj)])
  np.testing.assert_allclose(out.returns, returns, rtol=1e-5, atol=1e-6)


def test_hicra_verl_port_variant():
  # One group, lengths [4, 2, 3] (mean 3): only response 0 is correct *and* longer.
  seq_adv = jnp.array([1.0, 1.0, -1.0])
  mask = jnp.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], bool)
  ent = jnp.array([[0.1, 0.9, 0.5, 0.2], [0.9, 0.1, 0.0, 0.0], [0.9, 0.1, 0.1, 0.0]])
  plan = jnp.array([[0, 0, 0, 1], [1, 1, 0, 0], [1, 0, 0, 0]], bool)
  ids = jnp.zeros(3, jnp.int32)
  port = _jit(gr.hicra_verl_port_advantages, num_groups=1)
  out = np.asarray(port(seq_adv, mask, ent, ids))
  # Row 0: the 0.7 quantile of its entropies (linear interpolation) is np.quantile's.
  threshold = np.quantile([0.1, 0.9, 0.5, 0.2], 0.7)
  expected_row0 = np.where(np.array([0.1, 0.9, 0.5, 0.2]) > threshold, 1.2, 1.0)
  np.testing.assert_allclose(out[0], expected_row0, rtol=1e-6)
  np.testing.assert_allclose(out[1:], np.asarray(seq_adv)[1:, None] * np.asarray(mask)[1:])
  out = np.asarray(port(seq_adv, mask, ent, ids, planning_mask=plan))
  np.testing.assert_allclose(out[0], [1.0, 1.2, 1.0, 1.2], rtol=1e-6)
  # Constant entropies: no token is high-entropy, the planning mask alone acts, and it acts.
  flat = port(seq_adv, mask, jnp.full((3, 4), 0.5), ids, planning_mask=plan)
  np.testing.assert_allclose(flat[0], [1.0, 1.0, 1.0, 1.2], rtol=1e-6)
  assert not np.allclose(flat, np.asarray(seq_adv)[:, None] * np.asarray(mask))


def test_mgrpo_two_level_advantages_are_zero_mean_in_their_own_groups():
  rng = np.random.default_rng(29)
  main_r = rng.random(6).astype(np.float32)
  main_query = np.array([0, 0, 0, 1, 1, 1], np.int32)
  sub_r = rng.random(11).astype(np.float32)
  sub_query = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1], np.int32)  # all sub-calls of a query
  main_adv = np.asarray(gr.grpo_advantages(main_r, main_query, 2))
  sub_adv = np.asarray(gr.grpo_advantages(sub_r, sub_query, 2))
  for q in range(2):
    assert abs(main_adv[main_query == q].sum()) < 1e-5
    assert abs(sub_adv[sub_query == q].sum()) < 1e-5
