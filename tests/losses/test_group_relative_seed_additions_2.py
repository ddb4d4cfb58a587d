"""GTPO (Simoni et al.), LLDS, A-LoL, P3O and CGPO's CRPG / CRRAFT.

Every expected value is recomputed here in float64 NumPy with explicit loops over rows, tokens
and pairs, never by the function under test; the gradients too (each loss is linear in the
log-probs once its detached weights are known). None of the papers has a worked numerical example
that could be read, so the examples are small hand-built batches. Each function is compiled once
(per variant) and that one program serves the reference comparison, the masked-entry, permutation,
shift and out-of-range-id checks, which reuse its shapes.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import group_relative as gr
from tests.fast_compile import fast_jit

RTOL, ATOL = 2e-5, 2e-6


def _program(**configs):
  """One fast_jit program for a family: `run(logp, kw)` evaluates every configuration,
  `configs[name](logp, **kw) -> (loss, extras)`, and returns {name: (loss, extras, d loss/d logp)}.
  Every call passes the same keys in `kw`, so the program is compiled once."""

  def run(logp, kw):
    out = {}
    for name, call in configs.items():
      (loss, extras), grad = jax.value_and_grad(lambda lp: call(lp, **kw), has_aux=True)(logp)
      out[name] = (loss, extras, grad)
    return out

  return fast_jit(run)


def _close(got, want):
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=RTOL, atol=ATOL)


def _same(a, b):
  """Bit-identical outputs (loss, extras and gradient)."""
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _poison(x, where, value=np.nan):
  return np.where(where, value, x).astype(x.dtype)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------------------------------------
# GTPO (Simoni et al., arXiv 2508.03772)

# Group 0: rows 0 and 2 positive, row 1 negative, row 3 zero advantage (high entropy: filtered).
# Group 1: row 4 positive, row 5 negative, whose mask has a hole (positions count read tokens).
G_TOKENS = np.array(
  [
    [7, 8, 3, 4, 9, 2],
    [7, 8, 5, 9, 2, 0],
    [7, 1, 3, 9, 2, 0],
    [7, 8, 3, 4, 9, 2],
    [6, 8, 4, 2, 0, 0],
    [6, 0, 8, 5, 2, 0],
  ],
  np.int32,
)
G_MASK = np.array(
  [
    [1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 0, 0],
    [1, 0, 1, 1, 1, 0],
  ],
  bool,
)
G_ADV = np.array([1.0, -1.5, 0.5, 0.0, 0.8, -0.8], np.float32)
G_IDS = np.array([0, 0, 0, 0, 1, 1], np.int32)
G_RNG = np.random.default_rng(1)
G_LOGP = -G_RNG.uniform(0.1, 2.0, G_MASK.shape).astype(np.float32)
G_OLD = (G_LOGP + G_RNG.normal(0, 0.1, G_MASK.shape)).astype(np.float32)
G_ENT = G_RNG.uniform(0.1, 0.6, G_MASK.shape).astype(np.float32)
G_ENT[3] = 0.9  # above ln 2: row 3 is filtered
G_VALID = np.ones(6, bool)


def np_gtpo(logp, mask, tok, adv, ent, gid, valid, *, w=2.0, gamma=0.1, thr=math.log(2.0),
            initial=None, scope="prefix_suffix", norm="paper", old=None):  # fmt: skip
  """(loss, lambda, d loss / d logp) by loops; positions count each row's read tokens."""
  b, t = logp.shape
  read = mask & valid[:, None]
  seq = [[int(tok[i, s]) for s in range(t) if read[i, s]] for i in range(b)]
  where = [[s for s in range(t) if read[i, s]] for i in range(b)]
  sign = [(1 if adv[i] > 0 else -1 if adv[i] < 0 else 0) if valid[i] else 0 for i in range(b)]

  def match(i, k, from_end):
    tok_i = seq[i][len(seq[i]) - 1 - k] if from_end else seq[i][k]
    for j in range(b):
      if sign[j] == -sign[i] != 0 and gid[j] == gid[i] and k < len(seq[j]):
        if (seq[j][len(seq[j]) - 1 - k] if from_end else seq[j][k]) == tok_i:
          return True
    return False

  def f(conflict, i):
    return (w if sign[i] > 0 else 0.0) if conflict else 1.0

  lam = np.zeros((b, t))
  n_conf = np.zeros(b)
  for i in range(b):
    n = len(seq[i])
    if scope == "prefix_suffix":
      fwd, bwd = np.zeros(n, bool), np.zeros(n, bool)
      k = 0
      while k < n and sign[i] != 0 and match(i, k, False):
        fwd[k], k = True, k + 1
      k = 0
      while k < n and sign[i] != 0 and match(i, k, True):
        bwd[n - 1 - k], k = True, k + 1
      for k in range(n):
        lam[i, where[i][k]] = f(fwd[k], i) * f(bwd[k], i)
      n_conf[i] = np.sum(fwd | bwd)
    else:
      for k in range(n):
        c = sign[i] != 0 and match(i, k, False)
        lam[i, where[i][k]] = f(c, i)
        n_conf[i] += c
  n_tok = read.sum(1)
  h = np.array([ent[i][read[i]].astype(np.float64).mean() if n_tok[i] else 0.0 for i in range(b)])
  kept = valid & (h <= thr)
  if initial is not None:
    kept |= valid & (initial > thr)
  shaped = np.where(kept, adv - gamma * h, 0.0)
  ratio = np.ones((b, t)) if old is None else np.exp(logp.astype(np.float64) - old)
  per_row = np.array(
    [np.sum(-shaped[i] * lam[i] * ratio[i] * read[i]) / max(n_tok[i], 1) for i in range(b)]
  )
  d_row = -shaped[:, None] * lam * ratio * read / np.maximum(n_tok, 1)[:, None]
  if norm == "code":
    scale = 1.0 / np.maximum(n_conf, 1)
    return np.sum(per_row * scale), lam, d_row * scale[:, None]
  return np.sum(per_row) / valid.sum(), lam, d_row / valid.sum()


_GTPO = _program(
  default=lambda lp, old_logp, **k: gr.gtpo_loss(lp, num_groups=2, **k),
  code=lambda lp, old_logp, **k: gr.gtpo_loss(
    lp,
    num_groups=2,
    old_logp=old_logp,
    conflict_scope="position",
    normalization="code",
    initial_entropy=1.0,
    **k,
  ),
)
_G_ARGS = dict(mask=G_MASK, token_ids=G_TOKENS, advantages=G_ADV, entropies=G_ENT, group_ids=G_IDS)


def _gtpo(logp=G_LOGP, **over):
  return _GTPO(logp, {**_G_ARGS, "valid": G_VALID, "old_logp": G_OLD, **over})


def test_gtpo_matches_numpy_and_protects_conflict_tokens():
  loss, extras, grad = _gtpo()["default"]
  want_loss, want_lam, want_grad = np_gtpo(G_LOGP, G_MASK, G_TOKENS, G_ADV, G_ENT, G_IDS, G_VALID)
  _close(loss, want_loss)
  _close(extras.token_weights, want_lam)
  _close(grad, want_grad)
  # Written out: row 0 shares "7 8" with the negative row 1 at the start and "9 2" at the end.
  np.testing.assert_array_equal(extras.token_weights[0], [2, 2, 1, 1, 2, 2])
  np.testing.assert_array_equal(extras.token_weights[1], [0, 0, 1, 0, 0, 0])
  np.testing.assert_array_equal(extras.token_weights[2], [2, 1, 1, 2, 2, 0])
  # Row 5's hole: its read tokens are 6 8 5 2, so "6 8" matches row 4's opening, "2" its end.
  np.testing.assert_array_equal(extras.token_weights[4], [2, 2, 1, 2, 0, 0])
  np.testing.assert_array_equal(extras.token_weights[5], [0, 0, 0, 1, 0, 0])
  np.testing.assert_array_equal(extras.kept, [True, True, True, False, True, True])
  # Gradient direction: positive rows are pushed up (descent raises logp), doubly on conflicts;
  # the negative row's conflict tokens get no gradient, its other tokens are pushed down.
  g = np.asarray(grad)
  assert np.all(g[0] < 0) and g[0, 0] == pytest.approx(2 * g[0, 2])
  assert np.all(g[1, [0, 1, 3, 4]] == 0) and g[1, 2] > 0
  assert np.all(g[3] == 0)  # filtered


def test_gtpo_position_scope_code_normalization_ratio_and_initial_entropy():
  loss, extras, grad = _gtpo()["code"]
  want = np_gtpo(G_LOGP, G_MASK, G_TOKENS, G_ADV, G_ENT, G_IDS, G_VALID, initial=1.0,
                 scope="position", norm="code", old=G_OLD)  # fmt: skip
  _close(loss, want[0])
  _close(extras.token_weights, want[1])
  _close(grad, want[2])
  assert bool(extras.kept[3])  # initial entropy above ln 2: the paper's rule keeps every row


def test_gtpo_masked_entries_permutation_nan_and_group_ids():
  clean = _gtpo()
  pad = ~G_MASK
  # Garbage at padding (a token 7 there would match every opening if it were read).
  dirty = _gtpo(
    _poison(G_LOGP, pad),
    token_ids=np.where(pad, 7, G_TOKENS),
    entropies=_poison(G_ENT, pad, np.inf),
    old_logp=_poison(G_OLD, pad, -np.inf),
  )
  _same(clean, dirty)
  perm = np.array([4, 2, 0, 5, 3, 1])
  permuted = _gtpo(G_LOGP[perm], **{k: v[perm] for k, v in _G_ARGS.items()}, old_logp=G_OLD[perm])
  for name in ("default", "code"):
    _close(permuted[name][0], float(clean[name][0]))
    _close(permuted[name][2], np.asarray(clean[name][2])[perm])
  # A NaN advantage on a valid row is not hidden by the entropy filter.
  assert np.isnan(_gtpo(advantages=_poison(G_ADV, np.arange(6) == 3))["default"][0])
  # An invalid row is left out, whatever it holds.
  invalid = G_VALID.copy()
  invalid[5] = False
  masked = _gtpo(valid=invalid)
  want = np_gtpo(G_LOGP, G_MASK, G_TOKENS, G_ADV, G_ENT, G_IDS, invalid)
  _close(masked["default"][0], want[0])
  _close(masked["default"][2], want[2])
  row = ~invalid
  dirty = _gtpo(
    _poison(G_LOGP, row[:, None]),
    valid=invalid,
    advantages=_poison(G_ADV, row),
    entropies=_poison(G_ENT, row[:, None]),
    token_ids=np.where(row[:, None], 7, G_TOKENS),
  )
  _same(masked, dirty)
  # Out-of-range group ids: eager ValueError naming them; under jit the row is invalid.
  bad = G_IDS.copy()
  bad[5] = 2
  with pytest.raises(ValueError, match="group_ids"):
    gr.gtpo_loss(jnp.asarray(G_LOGP), **{**_G_ARGS, "group_ids": bad}, num_groups=2)
  _same(_gtpo(group_ids=bad), masked)


# ---------------------------------------------------------------------------------------------
# LLDS (Deng et al., arXiv 2512.04220)

# Row 0: two actions (tool output masked between them); row 1: negative advantage; row 2: one
# action whose likelihood rose in sum though one token fell.
L_MASK = np.array([[1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
L_ADV = np.repeat(np.array([[0.5], [-1.0], [0.0]], np.float32), 6, axis=1)
L_OLD = np.full((3, 6), -1.0, np.float32)
L_LOGP = np.array(
  [
    [-1.5, -0.8, -9.0, -0.5, -1.2, -0.9],  # action 1 net -0.3 (fell), action 2 net +0.4
    [-2.0, -2.0, -2.0, -2.0, -5.0, -5.0],  # negative advantage: never penalised
    [-1.6, -0.2, -0.6, -0.9, -1.0, -4.0],  # net +0.1 (rose): gate closed despite token 0
  ],
  np.float32,
)
L_ANSWER = np.zeros((3, 6), bool)
L_ANSWER[0, 1] = True


def np_llds(logp, old, adv, mask, coef, gate, answer=None, answer_coef=None):
  drop = old.astype(np.float64) - logp
  keep = mask & (adv >= 0)
  gated = np.zeros(mask.shape, bool)
  for i in range(mask.shape[0]):
    if gate == "response":
      gated[i] = keep[i] & (drop[i][keep[i]].sum() > 0)
      continue
    s = 0
    while s < mask.shape[1]:
      if not keep[i, s]:
        s += 1
        continue
      e = s
      while e < mask.shape[1] and keep[i, e]:
        e += 1
      gated[i, s:e] = drop[i, s:e].sum() > 0
      s = e
  c = np.full(mask.shape, coef)
  if answer is not None:
    c[answer] = min(answer_coef, coef)
  loss = np.sum(gated * c * np.maximum(drop, 0)) / mask.sum()
  return loss, gated, -(gated & (drop > 0)).astype(float) * c / mask.sum()


_LLDS = _program(
  action=lambda lp, old, adv, mask, answer: gr.llds_loss(lp, old, adv, mask),
  response=lambda lp, old, adv, mask, answer: gr.llds_loss(
    lp, old, adv, mask, gate="response", coef=0.5, answer_mask=answer, answer_coef=0.1
  ),
)


def _llds(logp=L_LOGP, old=L_OLD, adv=L_ADV, mask=L_MASK):
  return _LLDS(logp, dict(old=old, adv=adv, mask=mask, answer=L_ANSWER))


def test_llds_action_gate_matches_numpy():
  loss, extras, grad = _llds()["action"]
  want_loss, want_gated, want_grad = np_llds(L_LOGP, L_OLD, L_ADV, L_MASK, 0.2, "action")
  _close(loss, want_loss)
  np.testing.assert_array_equal(extras.gated, want_gated)
  np.testing.assert_array_equal(extras.gated[0], [1, 1, 0, 0, 0, 0])
  _close(grad, want_grad)
  # Only the tokens whose likelihood fell, in a gated action, are pushed up.
  assert grad[0, 0] < 0 and grad[0, 1] == 0 and np.all(np.asarray(grad[1:]) == 0)


def test_llds_response_gate_answer_mask_masked_entries_and_nan():
  loss, extras, grad = _llds()["response"]
  want = np_llds(L_LOGP, L_OLD, L_ADV, L_MASK, 0.5, "response", L_ANSWER, 0.1)
  _close(loss, want[0])
  np.testing.assert_array_equal(extras.gated, want[1])
  _close(grad, want[2])
  pad = ~L_MASK
  dirty = _llds(_poison(L_LOGP, pad), _poison(L_OLD, pad, -np.inf), _poison(L_ADV, pad))
  _same(_llds(), dirty)
  # A NaN log-prob of a read token in a closed gate still reaches the loss.
  assert np.isnan(_llds(_poison(L_LOGP, np.eye(3, 6, 4, bool)))["action"][0])


# ---------------------------------------------------------------------------------------------
# A-LoL (Baheti et al., arXiv 2305.14718)

A_MASK = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], bool)
A_RNG = np.random.default_rng(2)
A_LOGP = -A_RNG.uniform(0.1, 1.5, (4, 4)).astype(np.float32)
A_REF = (A_LOGP + np.array([[0.5], [-0.05], [-1.2], [0.0]])).astype(np.float32)
A_R = np.array([0.9, 0.2, 0.7, 0.6], np.float32)
A_V = np.array([0.4, 0.5, 0.3, 0.6], np.float32)  # advantages 0.5, -0.3, 0.4, 0


def np_alol(logp, mask, r, v, ref, variant, eps=0.9, kl_coef=0.0):
  lp, rf = np.where(mask, logp, 0).astype(np.float64), np.where(mask, ref, 0).astype(np.float64)
  a = np.maximum(r.astype(np.float64) - v, 0)
  seq, seq_ref = lp.sum(1), rf.sum(1)
  rho = np.clip(np.exp(seq - seq_ref), 1 - eps, 1 + eps)
  rho_t = np.clip(np.exp(lp - rf), 1 - eps, 1 + eps) * mask
  b = len(r)
  if variant == "alol":
    return -np.sum(a * rho * seq) / b, -(a * rho)[:, None] * mask / b
  if variant == "alol_seq":
    return -np.sum(a * (rho_t * lp).sum(1)) / b, -a[:, None] * rho_t / b
  if variant == "ref_free":
    return -np.sum(a * seq) / b, -a[:, None] * mask / b
  return (np.sum(-a * seq + kl_coef * (seq - seq_ref)) / b, (kl_coef - a)[:, None] * mask / b)


_ALOL_VARIANTS = ("alol", "alol_seq", "ref_free", "kl")
_ALOL = _program(
  **{
    v: (
      lambda v: lambda lp, **k: gr.alol_loss(lp, variant=v, kl_coef=0.3 if v == "kl" else None, **k)
    )(v)
    for v in _ALOL_VARIANTS
  }
)


def _alol(logp=A_LOGP, **over):
  return _ALOL(logp, {"mask": A_MASK, "rewards": A_R, "values": A_V, "ref_logp": A_REF,
                      "valid": np.ones(4, bool), **over})  # fmt: skip


def test_alol_variants_match_numpy():
  out = _alol()
  for variant in _ALOL_VARIANTS:
    loss, extras, grad = out[variant]
    want_loss, want_grad = np_alol(A_LOGP, A_MASK, A_R, A_V, A_REF, variant, kl_coef=0.3)
    _close(loss, want_loss)
    _close(grad, want_grad)
    np.testing.assert_array_equal(extras.kept, [True, False, True, False])
    if variant != "kl":  # the positive-advantage rows are pushed up, the others not at all
      assert np.all(np.asarray(grad)[[0, 2]][A_MASK[[0, 2]]] < 0)
      assert np.all(np.asarray(grad)[[1, 3]] == 0)
  # The detached sequence ratios pi / pi_ref before clipping (row 2's 121.5 is clipped to 1.9).
  _close(out["alol"][1].ratio, np.exp([-0.5 * 3, 0.05 * 2, 1.2 * 4, 0.0]))


def test_alol_masked_entries_invalid_rows_and_options():
  row = np.array([False, False, False, True])
  clean = _alol(valid=~row)
  pad = ~A_MASK
  dirty = _alol(
    _poison(A_LOGP, pad | row[:, None]),
    rewards=_poison(A_R, row),
    values=_poison(A_V, row, np.inf),
    ref_logp=_poison(A_REF, pad, -np.inf),
    valid=~row,
  )
  _same(clean, dirty)
  assert np.isnan(_alol(rewards=_poison(A_R, ~row))["alol"][0])
  with pytest.raises(ValueError, match="kl_coef"):
    gr.alol_loss(jnp.asarray(A_LOGP), A_MASK, A_R, A_V, A_REF, variant="kl")
  with pytest.raises(ValueError, match="ref_logp"):
    gr.alol_loss(jnp.asarray(A_LOGP), A_MASK, A_R, A_V)
  with pytest.raises(ValueError, match="epsilon"):
    gr.alol_loss(jnp.asarray(A_LOGP), A_MASK, A_R, A_V, A_REF, epsilon=1.5)


# ---------------------------------------------------------------------------------------------
# P3O (Wu et al., arXiv 2310.00212)

# Group 0 has three responses (three pairs), group 1 two, group 2 one (no pair).
P_IDS = np.array([0, 1, 0, 2, 1, 0], np.int32)
P_R = np.array([1.0, 0.3, -0.5, 2.0, 0.9, 0.2], np.float32)
P_MASK = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0]], bool)
P_RNG = np.random.default_rng(3)
P_LOGP = -P_RNG.uniform(0.2, 2.0, (6, 3)).astype(np.float32)
# Sequence log-ratios 0.3, -0.05, 0, 0, 0.12, -0.4: some outside the band [0.8, 1.2].
P_OLD = (P_LOGP - np.array([[0.1], [-0.025], [0.0], [0.0], [0.04], [-0.2]])).astype(np.float32)
P_VALID = np.ones(6, bool)


def np_p3o(logp, old, mask, r, gid, valid, variant, eps=0.2):
  d = np.sum(np.where(mask, logp.astype(np.float64) - old, 0), axis=1)
  b = len(r)
  loss, grad_d, n = 0.0, np.zeros(b), 0

  def clipped(rho, a):  # value of -min(rho a, clip(rho) a), d value / d log rho
    u, c = rho * a, np.clip(rho, 1 - eps, 1 + eps) * a
    return -min(u, c), (-u if u <= c else 0.0)

  for i in range(b):
    for j in range(i + 1, b):
      if gid[i] != gid[j] or not (valid[i] and valid[j]):
        continue
      n += 1
      a = (r[i] - r[j]) / 2
      if variant == "separate":
        (v1, g1), (v2, g2) = clipped(np.exp(d[i]), a), clipped(np.exp(d[j]), -a)
        loss, grad_d[i], grad_d[j] = loss + v1 + v2, grad_d[i] + g1, grad_d[j] + g2
      else:  # winner first
        w, l = (i, j) if a >= 0 else (j, i)
        v, g = clipped(np.exp(d[w] - d[l]), abs(a))
        loss, grad_d[w], grad_d[l] = loss + v, grad_d[w] + g, grad_d[l] - g
  return loss / n, grad_d[:, None] * mask / n


_P3O = _program(
  separate=lambda lp, **k: gr.p3o_loss(lp, num_groups=3, **k),
  joint=lambda lp, **k: gr.p3o_loss(lp, num_groups=3, variant="joint", **k),
)


def _p3o(logp=P_LOGP, **over):
  return _P3O(logp, {"old_logp": P_OLD, "mask": P_MASK, "rewards": P_R, "group_ids": P_IDS,
                     "valid": P_VALID, **over})  # fmt: skip


def test_p3o_matches_numpy_shift_and_permutation_invariance():
  out = _p3o()
  # Invariant to a per-prompt reward shift r + delta(x) (the point of relative feedback).
  shifted = _p3o(rewards=(P_R + np.array([10.0, -3.0, 100.0])[P_IDS]).astype(np.float32))
  # Row order does not matter.
  perm = np.array([5, 3, 1, 0, 4, 2])
  permuted = _p3o(P_LOGP[perm], old_logp=P_OLD[perm], mask=P_MASK[perm], rewards=P_R[perm],
                  group_ids=P_IDS[perm])  # fmt: skip
  # On-policy (old = current), the better response of a pair is pushed up, the worse down.
  on_policy = _p3o(old_logp=P_LOGP)
  for variant in ("separate", "joint"):
    loss, extras, grad = out[variant]
    want_loss, want_grad = np_p3o(P_LOGP, P_OLD, P_MASK, P_R, P_IDS, P_VALID, variant)
    _close(loss, want_loss)
    _close(grad, want_grad)
    assert float(extras.num_pairs) == 4 and 0 < float(extras.clip_fraction) < 1
    _close(shifted[variant][0], float(loss))
    _close(shifted[variant][2], np.asarray(grad))
    _close(permuted[variant][0], float(loss))
    _close(permuted[variant][2], np.asarray(grad)[perm])
    g = np.asarray(on_policy[variant][2])
    assert np.all(g[4] < 0) and np.all(g[1][P_MASK[1]] > 0) and np.all(g[3] == 0)


def test_p3o_masked_entries_nan_and_group_ids():
  pad = ~P_MASK
  _same(_p3o(), _p3o(_poison(P_LOGP, pad, -np.inf), old_logp=_poison(P_OLD, pad)))
  invalid = P_VALID.copy()
  invalid[0] = False
  masked = _p3o(valid=invalid)
  _close(masked["separate"][0], np_p3o(P_LOGP, P_OLD, P_MASK, P_R, P_IDS, invalid, "separate")[0])
  dirty = _p3o(_poison(P_LOGP, ~invalid[:, None]), rewards=_poison(P_R, ~invalid), valid=invalid)
  _same(masked, dirty)
  # A NaN reward on the valid row that is in no pair still reaches the loss.
  assert np.isnan(_p3o(rewards=_poison(P_R, P_IDS == 2))["separate"][0])
  bad = P_IDS.copy()
  bad[0] = -1
  with pytest.raises(ValueError, match="group_ids"):
    gr.p3o_loss(jnp.asarray(P_LOGP), P_OLD, P_MASK, P_R, bad, 3)
  _same(_p3o(group_ids=bad), masked)


# ---------------------------------------------------------------------------------------------
# CGPO: CRPG and CRRAFT (Xu et al., arXiv 2409.20370)

# Group 0: rows 0-2 (row 1 violates a judge); group 1: rows 3-4 both violate, row 5 is its
# baseline (fallback) response; group 2: row 6 passes but is over the KL threshold.
C_IDS = np.array([0, 0, 0, 1, 1, 1, 2], np.int32)
C_R = np.array([1.0, 3.0, 0.5, 2.0, 1.0, 7.0, 4.0], np.float32)
C_BASE = np.array([0.5, 0.5, 0.5, 1.5, 1.5, 1.5, 0.0], np.float32)
C_PASSED = np.array([True, False, True, False, False, True, True])
C_FALLBACK = np.array([False, False, False, False, False, True, False])
C_KL = np.array([1.0, 0.5, 3.0, 0.0, 0.0, 0.5, 6.0], np.float32)
C_MASK = np.array(
  [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]], bool
)
C_LOGP = -np.random.default_rng(4).uniform(0.2, 2.0, (7, 3)).astype(np.float32)
C_VALID = np.ones(7, bool)


def np_crpg(logp, mask, r, base, passed, valid, kl=None, thr=None):
  cal = np.where(valid & passed, _sigmoid(r.astype(np.float64) - base), 0)
  if kl is not None:
    cal = cal * np.maximum(1 - kl / thr, 0)
  w = np.where(valid, cal - cal[valid].mean(), 0)
  seq = np.where(mask, logp, 0).astype(np.float64).sum(1)
  return -np.sum(w * seq) / mask[valid].sum(), -w[:, None] * mask / mask[valid].sum(), w


def np_crraft(logp, mask, r, base, passed, gid, valid, fallback, kl, thr):
  cal = np.where(valid & passed, _sigmoid(r.astype(np.float64) - base), 0)
  cal = np.where(fallback & valid & passed, 0.5, cal)
  cal = np.where(kl <= thr, cal, 0)
  chosen = np.zeros(len(r), bool)
  for g in np.unique(gid):
    rows = [i for i in range(len(r)) if gid[i] == g and valid[i]]
    gen = [i for i in rows if not fallback[i] and cal[i] > 0]
    pool = gen if gen else [i for i in rows if fallback[i] and cal[i] > 0]
    if pool:
      chosen[max(pool, key=lambda i: (cal[i], -i))] = True
  w = np.where(chosen, cal, 0)
  seq = np.where(mask, logp, 0).astype(np.float64).sum(1)
  return -np.sum(w * seq) / chosen.sum(), -w[:, None] * mask / chosen.sum(), chosen


_CGPO = _program(
  crpg=lambda lp, fallback, **k: gr.crpg_loss(lp, num_groups=3, kl_threshold=4.0, **k),
  crpg_group=lambda lp, fallback, kl, **k: gr.crpg_loss(lp, num_groups=3, baseline="group", **k),
  crraft=lambda lp, **k: gr.crraft_loss(lp, num_groups=3, kl_threshold=4.0, **k),
)
_C_ARGS = dict(
  mask=C_MASK, rewards=C_R, baseline_rewards=C_BASE, passed=C_PASSED, group_ids=C_IDS, kl=C_KL
)


def _cgpo(logp=C_LOGP, **over):
  return _CGPO(logp, {**_C_ARGS, "valid": C_VALID, "fallback": C_FALLBACK, **over})


def test_crpg_matches_numpy_and_pushes_violations_down():
  out = _cgpo()
  loss, extras, grad = out["crpg"]
  want_loss, want_grad, want_w = np_crpg(C_LOGP, C_MASK, C_R, C_BASE, C_PASSED, C_VALID, C_KL, 4.0)
  _close(loss, want_loss)
  _close(grad, want_grad)
  _close(extras.weights, want_w)
  g = np.asarray(grad)
  assert np.all(g[1][C_MASK[1]] > 0)  # violates a judge despite the highest reward: pushed down
  assert np.all(g[5] < 0)  # passes with the best calibrated reward: pushed up
  np.testing.assert_array_equal(np.asarray(extras.calibrated)[[1, 3, 4, 6]], 0)  # 6: KL > max
  # The group baseline centres within each prompt instead.
  cal = np.where(C_PASSED, _sigmoid(C_R.astype(np.float64) - C_BASE), 0)
  means = np.array([cal[C_IDS == g].mean() for g in range(3)])
  _close(out["crpg_group"][1].weights, cal - means[C_IDS])


def test_crraft_matches_numpy_with_fallback_and_kl_filter():
  loss, extras, grad = _cgpo()["crraft"]
  want = np_crraft(C_LOGP, C_MASK, C_R, C_BASE, C_PASSED, C_IDS, C_VALID, C_FALLBACK, C_KL, 4.0)
  _close(loss, want[0])
  _close(grad, want[1])
  # Group 0: row 0 (sigmoid 0.5 > row 2's sigmoid 0); group 1: the fallback row at weight 0.5;
  # group 2: nothing (over the KL threshold).
  np.testing.assert_array_equal(extras.selected, [True, False, False, False, False, True, False])
  _close(extras.weights, [_sigmoid(0.5), 0, 0, 0, 0, 0.5, 0])
  assert np.all(np.asarray(grad)[[0, 5]] < 0) and np.all(np.asarray(grad)[[1, 2, 3, 4, 6]] == 0)


def test_cgpo_masked_entries_permutation_nan_and_group_ids():
  clean = _cgpo()
  _same(clean, _cgpo(_poison(C_LOGP, ~C_MASK, -np.inf)))
  perm = np.array([6, 2, 4, 0, 5, 1, 3])
  permuted = _cgpo(C_LOGP[perm], **{k: v[perm] for k, v in _C_ARGS.items()},
                   fallback=C_FALLBACK[perm])  # fmt: skip
  for name in ("crpg", "crpg_group", "crraft"):
    _close(permuted[name][0], float(clean[name][0]))
    _close(permuted[name][2], np.asarray(clean[name][2])[perm])
  # A NaN reward of a failing row is not hidden by the judge gate.
  poisoned = _cgpo(rewards=_poison(C_R, ~C_PASSED))
  assert all(np.isnan(poisoned[name][0]) for name in ("crpg", "crpg_group", "crraft"))
  invalid = C_VALID.copy()
  invalid[0] = False
  masked = _cgpo(valid=invalid)
  row = ~invalid
  dirty = _cgpo(_poison(C_LOGP, row[:, None]), valid=invalid, rewards=_poison(C_R, row),
                kl=_poison(C_KL, row))  # fmt: skip
  _same(masked, dirty)
  # Group 0 without row 0: CRRAFT falls to row 2 (sigmoid(0) = 0.5, KL 3 within the threshold).
  assert bool(masked["crraft"][1].selected[2])
  bad = C_IDS.copy()
  bad[0] = 3
  for eager in (gr.crpg_loss, gr.crraft_loss):
    with pytest.raises(ValueError, match="group_ids"):
      eager(jnp.asarray(C_LOGP), **{**_C_ARGS, "group_ids": bad}, num_groups=3, kl_threshold=4.0)
  _same(_cgpo(group_ids=bad), masked)


def test_option_checks_name_the_option():
  lp = jnp.zeros((2, 2))
  m = np.ones((2, 2), bool)
  ids = np.zeros(2, np.int32)
  r = np.zeros(2, np.float32)
  with pytest.raises(ValueError, match="conflict_scope"):
    gr.gtpo_loss(lp, m, np.zeros((2, 2), np.int32), r, lp, ids, 1, conflict_scope="x")
  with pytest.raises(ValueError, match="gate"):
    gr.llds_loss(lp, lp, lp, m, gate="x")
  with pytest.raises(ValueError, match="answer_coef"):
    gr.llds_loss(lp, lp, lp, m, answer_mask=m)
  with pytest.raises(ValueError, match="variant"):
    gr.p3o_loss(lp, lp, m, r, ids, 1, variant="x")
  with pytest.raises(ValueError, match="kl_threshold"):
    gr.crpg_loss(lp, m, r, r, np.ones(2, bool), ids, 1, kl=r)
  with pytest.raises(ValueError, match="baseline"):
    gr.crpg_loss(lp, m, r, r, np.ones(2, bool), ids, 1, baseline="x")
