"""Masked and padded entries never poison a batch.

Two properties of the functions of `hrljax.losses` that take logits, log-probs or per-token
(per-row) values together with a mask or validity flag, as rlax, distrax, verl and TRL hold them:

* a -inf logit or log-prob where the semantics allow it (a masked action, an impossible option,
  a padded token) gives the mathematically right value and gradient, checked against float64
  NumPy computed here by hand;
* whatever a masked-out or invalid position holds (+inf, -inf, NaN, 1e30) changes no output and
  no gradient: each case is run on its batch with zeros there and with each poison there, and
  every output leaf (loss and extras) and the gradient of the sum of the float outputs with
  respect to every float input that is not a mask must be identical, the gradient finite.

A case builds small inputs and marks, per array, the entries that are masked out or invalid.
Token masks are 0/1 floats where the function accepts them, so that no compiler rewrite of
`x * mask` into a select can hide a poisoned product. Each case compiles one program (with the
fast-compile options: the batches are compared with each other, never with another program): the
function's value and gradient, vmapped over the five batches.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import goal_conditioned as gc
from hrljax.losses import group_relative as gr
from hrljax.losses import hierarchical_critics as hc
from hrljax.losses import options as op
from hrljax.losses import policy_gradient as pg
from tests.fast_compile import fast_jit

POISONS = (np.inf, -np.inf, np.nan, 1e30)
# Masks and validity flags, float ones included, are not differentiated.
FLAGS = ("mask", "token_mask", "mask_option", "valid", "keep")

# Shapes: B rows of T tokens, E critic heads, G groups.
B, T, E, G = 4, 3, 2, 2
# Token mask: row 0 full, row 1 a prefix, row 2 one token, row 3 empty (all padding).
TOKEN_MASK = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]], np.float32)
# Row validity: row 1 is invalid (e.g. a padded example); each group keeps two valid rows.
VALID = np.array([True, False, True, True])
GROUP_IDS = np.array([0, 0, 1, 1], np.int32)

TOKEN_PAD = TOKEN_MASK == 0  # [B, T] padding
ROW_PAD = ~VALID  # [B] invalid rows
TOKEN_OR_ROW_PAD = TOKEN_PAD | ROW_PAD[:, None]  # [B, T] padding, or any token of an invalid row
EMPTY_ROW = TOKEN_PAD.all(axis=1)  # [B] rows with no unmasked token


@dataclasses.dataclass(frozen=True)
class Masked:
  """A call with the entries that are masked out or invalid marked."""

  fn: Callable  # fn(**arrays) -> the function's output
  arrays: dict  # name -> np.ndarray; masked entries hold zeros
  masked: dict  # name -> bool np.ndarray of that array's shape, True where masked or invalid


def masked(fn: Callable, arrays: dict, **where) -> Masked:
  """`where[name]` (broadcast to that array's shape) marks its masked entries, set to zero."""
  marks = {n: np.broadcast_to(w, arrays[n].shape) for n, w in where.items()}
  zeroed = {
    n: np.where(marks[n], 0, x).astype(x.dtype) if n in marks else x for n, x in arrays.items()
  }
  return Masked(fn, zeroed, marks)


RNG = np.random.default_rng(0)  # the cases are built once, at import, in a fixed order


def normal(*shape) -> np.ndarray:
  return RNG.normal(size=shape).astype(np.float32)


def log_probs(*shape) -> np.ndarray:
  return -RNG.uniform(0.1, 3.0, size=shape).astype(np.float32)


# ------------------------------------------------------------------------------ policy_gradient


def token_logps() -> dict:
  return {"logp": log_probs(B, T), "old_logp": log_probs(B, T), "advantages": normal(B, T)}


def token_objective(logp, old_logp, ref_logp, advantages, mask):
  """The token-level PPO/GRPO objective: surrogate + k3 KL per token, aggregated with the mask
  (token mean and sequence mean), and the logged means."""
  loss, extras = pg.clipped_surrogate_loss(logp, old_logp, advantages, mask=mask)
  kl = pg.kl_divergence(logp, ref_logp, "k3", mask=mask)
  per_token = loss + 0.1 * kl
  return (
    pg.aggregate(per_token, mask, "token_mean"),
    pg.aggregate(per_token, mask, "seq_mean_token_mean"),
    pg.masked_mean(extras.approx_kl, mask),
    pg.masked_mean(kl, mask),
  )


def all_aggregations(loss, mask):
  return [pg.aggregate(loss, mask, mode) for mode in pg.AGGREGATION_MODES]


POLICY_GRADIENT = {
  "clipped_surrogate_loss": lambda: masked(
    lambda **a: pg.clipped_surrogate_loss(**a, dual_clip=3.0),
    dict(token_logps(), mask=TOKEN_MASK),
    logp=TOKEN_PAD,
    old_logp=TOKEN_PAD,
    advantages=TOKEN_PAD,
  ),
  "kl_divergence": lambda: masked(
    lambda **a: pg.kl_divergence(**a, estimator="k3+"),
    {"logp": log_probs(B, T), "ref_logp": log_probs(B, T), "mask": TOKEN_MASK},
    logp=TOKEN_PAD,
    ref_logp=TOKEN_PAD,
  ),
  "sequence_log_ratio": lambda: masked(
    pg.sequence_log_ratio,
    {"logp": log_probs(B, T), "old_logp": log_probs(B, T), "mask": TOKEN_MASK},
    logp=TOKEN_PAD,
    old_logp=TOKEN_PAD,
  ),
  "masked_mean": lambda: masked(
    pg.masked_mean, {"x": normal(B, T), "mask": TOKEN_MASK}, x=TOKEN_PAD
  ),
  "aggregate": lambda: masked(
    all_aggregations, {"loss": normal(B, T), "mask": TOKEN_MASK}, loss=TOKEN_PAD
  ),
  "surrogate, kl and aggregate": lambda: masked(
    token_objective,
    dict(token_logps(), ref_logp=log_probs(B, T), mask=TOKEN_MASK),
    **dict.fromkeys(("logp", "old_logp", "ref_logp", "advantages"), TOKEN_PAD),
  ),
}


# -------------------------------------------------------------------------------------- options


def value_over_options() -> Masked:
  probs = np.array([[0.5, 0.0, 0.5], [0.0, 0.0, 1.0]], np.float32)
  arrays = {"q_s": normal(2, 3), "option_probs": probs}
  return masked(jax.vmap(op.value_over_options), arrays, q_s=probs == 0)


def termination_loss() -> Masked:
  mask = np.array([1.0, 0.0, 1.0, 0.0], np.float32)
  arrays = {"beta": RNG.uniform(size=B).astype(np.float32), "q_option": normal(B), "v": normal(B)}
  fn = jax.vmap(lambda beta, q_option, v, mask: op.termination_loss(beta, q_option, v, 0.01, mask))
  return masked(fn, dict(arrays, mask=mask), **dict.fromkeys(arrays, mask == 0))


def trajectory_termination_loss(state: str) -> Callable[[], Masked]:
  def case() -> Masked:
    terminated = np.array([False, True, False, False])
    truncated = np.array([False, False, False, True])
    ended = np.zeros((B + 1, 1), bool)  # the states the ended transitions would look at
    ended[np.flatnonzero(terminated | truncated) + (1 if state == "next" else 0)] = True
    arrays = {
      "beta": RNG.uniform(size=(B + 1, 3)).astype(np.float32),
      "q": normal(B + 1, 3),
      "option_tm1": np.array([0, 2, 1, 1], np.int32),
      "terminated_t": terminated,
      "truncated_t": truncated,
    }
    fn = lambda **a: op.trajectory_termination_loss(**a, xi=0.01, state_for_termination=state)
    return masked(fn, arrays, beta=ended, q=ended)

  return case


OPTIONS = {
  "value_over_options": value_over_options,
  "termination_loss": termination_loss,
  "trajectory_termination_loss next": trajectory_termination_loss("next"),
  "trajectory_termination_loss current": trajectory_termination_loss("current"),
}


# ------------------------------------------------------------------------- hierarchical_critics


def critic(fn: Callable) -> Callable[[], Masked]:
  def case() -> Masked:
    critics = {name: normal(E, B) for name in ("q", "v", "v_next_tgt", "q_tgt")}
    arrays = dict(critics, r=normal(B), terminated=np.array([0, 0, 1, 0], bool), valid=VALID)

    def call(q, v, v_next_tgt, q_tgt, r, terminated, valid):
      return fn(q, v, v_next_tgt, q_tgt, r, terminated, 0.9, valid=valid)

    return masked(call, arrays, r=ROW_PAD, **dict.fromkeys(critics, ROW_PAD))

  return case


def actor(fn: Callable, *token_arrays: str) -> Callable[[], Masked]:
  """An actor loss of token log-probs, critic values and (for the baseline) `token_arrays`."""

  def case() -> Masked:
    extra = {name: normal(B, T) for name in token_arrays}
    arrays = dict(token_logp=log_probs(B, T), token_mask=TOKEN_MASK, q=normal(E, B), v=normal(E, B))

    def call(token_logp, token_mask, q, v, valid, **extra):
      return fn(token_logp, token_mask, q, v, *extra.values(), valid=valid)

    pads = dict.fromkeys(("token_logp", *token_arrays), TOKEN_OR_ROW_PAD)
    return masked(call, dict(arrays, valid=VALID, **extra), q=ROW_PAD, v=ROW_PAD, **pads)

  return case


def token_credit() -> Masked:
  prefix = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]], bool)
  arrays = {
    "reward": normal(B),
    "terminated": np.array([0, 0, 1, 0], bool),
    "done": np.array([0, 0, 1, 1], bool),
    "value": normal(B, T),
    "next_dialogue_value": normal(B),
    "mask": prefix,
  }
  fn = lambda **a: hc.token_level_advantages(**a, gamma=0.9, gae_lambda=0.95)
  return masked(fn, arrays, value=~prefix)


HIERARCHICAL_CRITICS = {
  "archer_critic_loss": critic(hc.archer_critic_loss),
  "offline_archer_critic_loss": critic(hc.offline_archer_critic_loss),
  "archer_actor_loss": actor(hc.archer_actor_loss),
  "archer_baseline_actor_loss": actor(hc.archer_baseline_actor_loss, "token_baseline"),
  "offline_archer_actor_loss": actor(hc.offline_archer_actor_loss),
  "filtered_bc_loss": lambda: masked(
    hc.filtered_bc_loss,
    {"token_logp": log_probs(B, T), "token_mask": TOKEN_MASK, "keep": VALID},
    token_logp=TOKEN_OR_ROW_PAD,
  ),
  "normalize_token_advantages": lambda: masked(
    hc.normalize_token_advantages,
    {"advantage": normal(B, T), "mask": TOKEN_MASK != 0},
    advantage=TOKEN_PAD,
  ),
  "token_level_advantages": token_credit,
}


# ------------------------------------------------------------------------------- group_relative


def rows(fn: Callable, **kw) -> Callable[[], Masked]:
  """A group-relative function of per-row rewards, group ids and a validity flag."""

  def case() -> Masked:
    arrays = {"rewards": normal(B), "group_ids": GROUP_IDS, "valid": VALID}
    return masked(lambda **a: fn(**a, num_groups=G, **kw), arrays, rewards=ROW_PAD)

  return case


def token_loss(fn: Callable, *names: str, **kw) -> Callable[[], Masked]:
  def case() -> Masked:
    arrays = {name: x for name, x in token_logps().items() if name in names}
    pads = dict.fromkeys(names, TOKEN_PAD)
    return masked(lambda **a: fn(**a, **kw), dict(arrays, mask=TOKEN_MASK), **pads)

  return case


def disco(**kw) -> Callable[[], Masked]:
  def case() -> Masked:
    arrays = {
      "logp": log_probs(B, T),
      "old_logp": log_probs(B, T),
      "mask": TOKEN_MASK,
      "rewards": np.array([1, 0, 0, 1], np.float32),
      "group_ids": GROUP_IDS,
      "valid": VALID,
    }
    fn = lambda **a: gr.disco_loss(**a, num_groups=G, **kw)
    pad = TOKEN_OR_ROW_PAD
    return masked(fn, arrays, logp=pad, old_logp=pad, rewards=ROW_PAD)

  return case


def hicra_verl_port() -> Masked:
  arrays = {
    "sequence_advantages": normal(B),
    "mask": TOKEN_MASK,
    "entropies": RNG.uniform(0.5, 2.0, size=(B, T)).astype(np.float32),
    "group_ids": GROUP_IDS,
    "valid": VALID,
  }
  fn = lambda **a: gr.hicra_verl_port_advantages(**a, num_groups=G)
  return masked(fn, arrays, sequence_advantages=ROW_PAD, entropies=TOKEN_OR_ROW_PAD)


LOGP_OLD_ADV = ("logp", "old_logp", "advantages")
GROUP_RELATIVE = {
  "broadcast_to_tokens": lambda: masked(
    gr.broadcast_to_tokens, {"advantages": normal(B), "mask": TOKEN_MASK}, advantages=EMPTY_ROW
  ),
  "rec_loss one-side": token_loss(
    gr.rec_loss,
    *LOGP_OLD_ADV,
    clip_mode="one-side",
    weight="importance_sampling",
  ),
  "rec_loss gspo k2": token_loss(
    gr.rec_loss,
    *LOGP_OLD_ADV,
    clip_mode="gspo-one-side",
    weight="gspo_importance_sampling",
    regularizer="k2",
  ),
  "opmd_loss": token_loss(gr.opmd_loss, "logp", "advantages"),
  "disco_loss lse logL": disco(),
  "disco_loss basic Lratio k3": disco(variant="basic", score="Lratio", kl_estimator="k3"),
  "hicra_verl_port_advantages": hicra_verl_port,
  # Unchanged, here as the representatives of the estimators on per-row values.
  "grpo_advantages": rows(gr.grpo_advantages, singleton_mode="raw"),
  "rloo_advantages": rows(gr.rloo_advantages),
  "opmd_advantages": rows(gr.opmd_advantages, baseline="logavgexp"),
}


# ----------------------------------------------------------------------------- goal_conditioned


def ota(fn: Callable, *value_names: str, **kw) -> Callable[[], Masked]:
  """Where OTA's option mask m^h is 0 (the option reached the goal), V̄^h(s_o, g) is not read."""

  def case() -> Masked:
    mask_option = np.array([1.0, 0.0, 1.0], np.float32)
    arrays = {name: normal(3, E) for name in (*value_names, "v_tgt_option")}
    arrays.update(r_option=np.array([-1.0, 0.0, -1.0], np.float32), mask_option=mask_option)
    call = jax.vmap(lambda **a: fn(**a, high_discount=0.99, **kw))
    return masked(call, arrays, v_tgt_option=(mask_option == 0)[:, None])

  return case


GOAL_CONDITIONED = {
  "ota_option_value_target": ota(gc.ota_option_value_target),
  "ota_high_value_loss": ota(gc.ota_high_value_loss, "v_tm1", "v_tgt_tm1", expectile=0.7),
}


CASES = {
  f"{family}.{name}": case()
  for family, cases in (
    ("policy_gradient", POLICY_GRADIENT),
    ("options", OPTIONS),
    ("hierarchical_critics", HIERARCHICAL_CRITICS),
    ("group_relative", GROUP_RELATIVE),
    ("goal_conditioned", GOAL_CONDITIONED),
  )
  for name, case in cases.items()
}


# ------------------------------------------------------------------------------------ machinery


def is_float(x) -> bool:
  return jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)


def poisoned(case: Masked, value: float) -> dict:
  return {
    n: np.where(case.masked[n], np.asarray(value, x.dtype), x) if n in case.masked else x
    for n, x in case.arrays.items()
  }


def outputs_and_gradients(case: Masked) -> tuple:
  """The outputs, and the gradient of the sum of the float outputs with respect to the float
  inputs that are not masks, of the batch with zeros in the masked entries (index 0) and then
  with each of POISONS there (one leading axis)."""
  float_names = tuple(n for n, x in case.arrays.items() if is_float(x) and n not in FLAGS)
  others = {n: jnp.asarray(x) for n, x in case.arrays.items() if n not in float_names}
  batches = [case.arrays] + [poisoned(case, value) for value in POISONS]
  floats = {n: jnp.asarray(np.stack([b[n] for b in batches])) for n in float_names}

  def objective(floats, others):
    out = case.fn(**floats, **others)
    total = sum((jnp.sum(leaf) for leaf in jax.tree.leaves(out) if is_float(leaf)), 0.0)
    return jnp.asarray(total, jnp.float32), out

  value_and_grad = jax.value_and_grad(objective, has_aux=True)
  (_, out), grads = fast_jit(jax.vmap(value_and_grad, in_axes=(0, None)))(floats, others)
  return out, grads


def differences(case: Masked, out, grads, batch: int) -> list:
  """The outputs and gradients of `batch` that differ from those of batch 0 (zeros in the masked
  entries), and its non-finite gradients."""
  found = []
  for path, leaf in jax.tree.leaves_with_path(out):
    got, want = np.asarray(leaf[batch]), np.asarray(leaf[0])
    if not np.array_equal(got, want, equal_nan=True):
      found.append(f"output{jax.tree_util.keystr(path)}: {got} != {want}")
  for name, grad in grads.items():
    got, want = np.asarray(grad[batch]), np.asarray(grad[0])
    if not (np.all(np.isfinite(got)) and np.array_equal(got, want)):
      found.append(f"gradient {name}: {got} != {want}")
  return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_poison_in_masked_entries_changes_no_output_and_no_gradient(name):
  case = CASES[name]
  out, grads = outputs_and_gradients(case)
  for batch, value in enumerate(POISONS, start=1):
    assert differences(case, out, grads, batch) == [], (name, value)


# --------------------------------------------------------------- -inf logits and log-probs, float64


def softmax64(logits) -> np.ndarray:
  z = np.asarray(logits, np.float64)
  e = np.exp(z - z.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def entropy64(p: np.ndarray) -> np.ndarray:
  return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)


def entropy_gradient64(p: np.ndarray) -> np.ndarray:
  """dH/dz_i = -p_i (log p_i + H), 0 where p_i = 0."""
  log_p = np.log(np.where(p > 0, p, 1.0))
  return np.where(p > 0, -p * (log_p + entropy64(p)[..., None]), 0.0)


MASKED_LOGITS = np.array(
  [[0.0, -np.inf, 1.0], [2.0, -np.inf, -np.inf], [0.5, 0.1, -1.0]], np.float32
)


def test_entropy_of_a_softmax_with_minus_inf_logits_matches_float64_with_a_finite_gradient():
  def total(logits):
    entropy = pg.categorical_entropy(logits)
    return entropy.sum(), entropy

  (_, entropy), gradient = fast_jit(jax.value_and_grad(total, has_aux=True))(
    jnp.asarray(MASKED_LOGITS)
  )
  p = softmax64(MASKED_LOGITS)
  np.testing.assert_allclose(entropy, entropy64(p), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(entropy[0], 0.5822, atol=1e-4)  # distrax / rlax give the same
  np.testing.assert_allclose(gradient, entropy_gradient64(p), rtol=1e-5, atol=1e-7)
  assert np.all(np.isfinite(gradient))


def test_intra_option_policy_gradient_with_a_masked_action_matches_float64():
  logits = np.array([0.3, -np.inf, 1.2, -np.inf], np.float32)
  action, target, baseline, coef = 2, 1.5, 0.5, 0.1

  def loss_fn(z):
    return op.intra_option_pg_loss(z, jnp.int32(action), target, baseline, coef)

  (loss, extras), gradient = fast_jit(jax.value_and_grad(loss_fn, has_aux=True))(
    jnp.asarray(logits)
  )
  p = softmax64(logits)
  advantage = target - baseline
  log_prob = np.log(p[action])
  np.testing.assert_allclose(extras.log_prob, log_prob, rtol=1e-6)
  np.testing.assert_allclose(extras.entropy, entropy64(p), rtol=1e-6)
  np.testing.assert_allclose(loss, -log_prob * advantage - coef * entropy64(p), rtol=1e-6)
  # d(-log p_a)/dz_i = p_i - 1[i = a]; the masked actions get exactly 0.
  want = (p - np.eye(4)[action]) * advantage - coef * entropy_gradient64(p)
  np.testing.assert_allclose(gradient, want, rtol=1e-5, atol=1e-7)
  assert np.all(np.asarray(gradient)[[1, 3]] == 0.0)


def test_value_over_options_reads_no_value_of_an_impossible_option():
  q = np.array([1.0, -np.inf, 2.0], np.float32)
  probs = np.array([0.25, 0.0, 0.75], np.float32)
  value, (dq, dp) = jax.value_and_grad(op.value_over_options, argnums=(0, 1))(
    jnp.asarray(q), jnp.asarray(probs)
  )
  np.testing.assert_allclose(value, 0.25 * 1.0 + 0.75 * 2.0, rtol=1e-7)
  np.testing.assert_array_equal(dq, probs)
  np.testing.assert_array_equal(dp, [1.0, 0.0, 2.0])


def test_token_objective_with_minus_inf_log_probs_at_padding_matches_float64():
  """Padded tokens hold -inf under all three policies (the log of a probability 0)."""
  rng = np.random.default_rng(1)
  logp, old_logp, ref_logp = (-rng.uniform(0.1, 3.0, size=(B, T)) for _ in range(3))
  advantages = rng.normal(size=(B, T))
  poisoned_inputs = [np.where(TOKEN_PAD, -np.inf, x).astype(np.float32) for x in (logp, old_logp)]
  ref32, adv32 = np.where(TOKEN_PAD, -np.inf, ref_logp).astype(np.float32), advantages

  def objective(logp32):
    (value, _), *_ = token_objective(
      logp32, poisoned_inputs[1], jnp.asarray(ref32), jnp.asarray(adv32, jnp.float32), TOKEN_MASK
    )
    return value

  value, gradient = fast_jit(jax.value_and_grad(objective))(jnp.asarray(poisoned_inputs[0]))

  # float64 by hand on the unmasked tokens: PPO's clipped surrogate (epsilon 0.2) and k3.
  ratio = np.exp(logp - old_logp)
  unclipped, clipped = -advantages * ratio, -advantages * np.clip(ratio, 0.8, 1.2)
  d = ref_logp - logp
  per_token = np.maximum(unclipped, clipped) + 0.1 * (np.exp(d) - d - 1.0)
  count = TOKEN_MASK.sum()
  want_value = np.sum(np.where(TOKEN_PAD, 0.0, per_token)) / count
  surrogate_gradient = np.where(unclipped >= clipped, -advantages * ratio, 0.0)
  want_gradient = (surrogate_gradient + 0.1 * (1.0 - np.exp(d))) / count
  np.testing.assert_allclose(value, want_value, rtol=1e-5)
  np.testing.assert_allclose(
    gradient, np.where(TOKEN_PAD, 0.0, want_gradient), rtol=1e-4, atol=1e-7
  )
