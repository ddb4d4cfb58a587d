"""Hostile inputs for every public function of `hrljax.losses` (property-based, hypothesis).

Every public function of every loss family must have a case below (the first test enumerates the
families, a package's through its `__all__`, so a new loss without a case fails). The cases come
in one section per family (`<FAMILY>_CASES`); add a new function's case to its family's section.
For each case, hypothesis draws shapes and values
and checks: valid inputs give finite results; a wrong rank (one axis added or removed) is an
error; a NaN reaches the output (or the call raises), never a silent finite value; an Inf gives a
non-finite output or the finite limit of the function (the value at +-1e30); integer arrays where
floats are expected raise or give the result of the same values as floats; bad Python options
raise a ValueError naming the option; out-of-range group ids raise eagerly and are invalid rows
under jit, and empty groups change nothing. Out-of-range option, action and delay-slot indices
(options, safety) have their own tests at the end: they raise eagerly, and under jit their example
or step is invalid (0) and the others unchanged. A known failure is marked xfail(strict=True) with
its reason, so that a fix is noticed.

A case gives valid inputs as small specs, `"<kind>:<dims>"`, drawn per example:
  f  standard normal float32        u  uniform [0, 1) float32 (probabilities, discounts)
  pos  uniform [0.5, 2) float32     lp  log-probability, uniform (-3, -0.1) float32
  p  probability vector (last axis) b  random bool flags (False in the NaN/Inf tests)
  v  validity mask, bool (all True in the NaN/Inf tests)
  m  0/1 float mask (all ones in the NaN/Inf tests)
  i<X  int32 in [0, X) (X a dim letter or a number)      key  a PRNG key
Dims are letters (B, T, E, D, O, A, G, N, K, M, C, S, L, R) drawn by hypothesis, or numbers;
an empty dims part is a scalar. Python keywords are fixed (`kw`), where a string "$X" is the
value of dim X. `nan` lists the float arguments whose NaN must reach the first output (default:
every float argument); `rank` the arguments whose rank the function checks (default: every array
argument); `bad` maps Python keywords to bad values that must raise a ValueError naming them;
`nan_check` replaces "a NaN reaches the output" for integer outputs, which cannot carry a NaN,
by a check of the function's documented behaviour (e.g. an out-of-range sentinel index).
"""

import dataclasses
import importlib
import inspect
import pkgutil
from typing import Any, Callable, Optional

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import hrljax.losses

from hrljax.losses import goal_conditioned as gc
from hrljax.losses import group_relative as gr
from hrljax.losses import hierarchical_critics as hc
from hrljax.losses import latent_skills as lsk
from hrljax.losses import options as op
from hrljax.losses import policy_gradient as pg
from hrljax.losses import safety as sf
from hrljax.losses import soft_actor_critic as soft_ac
from hrljax.losses import value_based as vb

FLOAT_KINDS = ("f", "u", "pos", "lp", "p")


@dataclasses.dataclass
class Case:
  fn: Callable
  arrays: dict
  kw: dict = dataclasses.field(default_factory=dict)
  nan: Optional[tuple] = None  # float args whose NaN must reach the output (None: all)
  inf: Optional[tuple] = None  # float args for the Inf test (None: as `nan`)
  rank: Optional[tuple] = None  # args whose rank is checked (None: all arrays)
  bad: dict = dataclasses.field(default_factory=dict)  # keyword -> bad value
  dims: dict = dataclasses.field(default_factory=dict)  # fixed dims
  groups: Optional[dict] = None  # {"ids": arg, "num": keyword or dim, "valid": arg}
  output: Callable = lambda out: out  # picks the checked output from the result
  # For an integer output, which cannot carry a NaN: nan_check(arrays, out) asserts the
  # documented behaviour on a poisoned input instead of "a NaN reaches the output".
  nan_check: Optional[Callable] = None
  why: str = ""  # why some args are not in `nan` / `rank`


def kind_of(spec) -> str:
  return spec.split(":")[0] if isinstance(spec, str) else "custom"


def float_args(case: Case) -> tuple:
  return tuple(k for k, s in case.arrays.items() if kind_of(s) in FLOAT_KINDS)


def array_args(case: Case) -> tuple:
  return tuple(k for k, s in case.arrays.items() if kind_of(s) not in ("key", "custom"))


def shape_of(spec: str, dims: dict) -> tuple:
  part = spec.split(":", 1)[1]
  return tuple(int(d) if d.isdigit() else dims[d] for d in part.split(",") if d)


def build(spec, rng: np.random.Generator, dims: dict, hostile: bool = False) -> Any:
  """One input from its spec; `hostile` makes masks all-valid and flags all False."""
  if callable(spec):
    return spec(rng, dims)
  kind = kind_of(spec)
  if kind == "key":
    return jax.random.key(int(rng.integers(1 << 30)))
  shape = shape_of(spec, dims)
  if kind == "f":
    x = rng.normal(size=shape)
  elif kind == "u":
    x = rng.uniform(size=shape)
  elif kind == "pos":
    x = rng.uniform(0.5, 2.0, size=shape)
  elif kind == "lp":
    x = -rng.uniform(0.1, 3.0, size=shape)
  elif kind == "p":
    e = rng.uniform(0.1, 1.0, size=shape)
    x = e / e.sum(-1, keepdims=True)
  elif kind == "b":
    return jnp.asarray(np.zeros(shape, bool) if hostile else rng.uniform(size=shape) < 0.3)
  elif kind == "v":
    return jnp.asarray(np.ones(shape, bool) if hostile else rng.uniform(size=shape) < 0.8)
  elif kind == "m":
    return jnp.asarray(
      np.ones(shape, np.float32) if hostile else (rng.uniform(size=shape) < 0.8).astype(np.float32)
    )
  elif kind.startswith("i<"):
    bound = kind[2:]
    high = int(bound) if bound.isdigit() else dims[bound]
    return jnp.asarray(rng.integers(0, high, size=shape), jnp.int32)
  else:
    raise KeyError(spec)
  return jnp.asarray(x, jnp.float32)


def resolve_kw(kw: dict, dims: dict) -> dict:
  return {k: dims[v[1:]] if isinstance(v, str) and v.startswith("$") else v for k, v in kw.items()}


def first_leaf(out):
  return jax.tree.leaves(out)[0]


def _log_prob_fn(rep):
  return -jnp.sum(rep**2, axis=-1)


def _lagrange_state(rng, dims):
  return sf.lagrange_init(0.5)


def _pid_state(rng, dims):
  return sf.pid_lagrange_init(lam_init=0.5, delay=3)


def _aug_state(rng, dims):
  return sf.AugmentedLagrangeState(lam=jnp.float32(0.5), penalty_coeff=jnp.float32(0.1))


def _patterns(rng, dims):
  return jnp.asarray(rng.integers(0, 5, size=(2, 3)), jnp.int32)


def _observations(rng, dims):
  return jnp.asarray(rng.integers(0, 3, size=(dims["N"], 2)), jnp.int32)


def _obs_dense(rng, dims):
  return jnp.asarray(rng.integers(0, 3, size=(dims["T"], dims["N"], 2)), jnp.int32)


def _traj_ids(rng, dims):
  return jnp.repeat(jnp.arange(dims["C"], dtype=jnp.int32), dims["T"])


def _step_index(rng, dims):
  return jnp.tile(jnp.arange(dims["T"], dtype=jnp.int32), dims["C"])


def _traj_groups(rng, dims):  # group of each row: trajectory c lies in group c % G
  return jnp.repeat(jnp.arange(dims["C"], dtype=jnp.int32) % dims["G"], dims["T"])


def _pattern_lengths(rng, dims):
  return jnp.asarray(rng.integers(1, 4, size=(2,)), jnp.int32)


def _budget_values(rng, dims):
  return jnp.asarray([64.0, 128.0], jnp.float32)


def _lengths(rng, dims):
  return jnp.asarray(rng.integers(1, 200, size=(dims["B"],)), jnp.float32)


def _float_obs(rng, dims):
  return jnp.asarray(rng.normal(size=(dims["N"], dims["D"])), jnp.float32)


def _words(rng, dims):
  return jnp.asarray(rng.integers(0, 1 << 30, size=(dims["N"], 2)), jnp.uint32)


def _row_score(obs, action):
  """A row-wise critic score for the safety searches: Σ_i a_i + obs_0."""
  return jnp.sum(action, axis=-1) + obs[:, 0]


def _nan_row_gets_the_fallback(arrays, out):
  """`nearest_safe_action` fails safe: a row whose observation or nominal action holds a NaN
  gets its fallback action (a NaN score is never accepted)."""
  poisoned = np.isnan(arrays["obs"]).any(axis=1) | np.isnan(arrays["nominal"]).any(axis=1)
  np.testing.assert_array_equal(np.asarray(out)[poisoned], np.asarray(arrays["fallback"])[poisoned])


def _option_is_the_sentinel(arrays, out):
  """`sample_option` on probabilities with a NaN: the out-of-range index O."""
  assert int(out) == arrays["option_probs"].shape[0], out


def _selected_option_is_the_sentinel_or_kept(arrays, out):
  """`select_option` with a NaN beta or probability: the sentinel O, flagged as a switch, or
  (NaN probabilities only) the running option kept, which they do not affect."""
  option, switched = int(out[0]), bool(out[1])
  sentinel = arrays["option_probs_t"].shape[0]
  if np.isnan(np.asarray(arrays["beta_t"])) or switched:
    assert (option, switched) == (sentinel, True), out
  else:
    assert option == int(arrays["option_tm1"]), out


def _memory_reads_same_action_values(arrays, out):
  """`episodic_memory_lookup` with k = M: Q_mem is NaN exactly when a valid entry with the
  looked-up action holds a NaN value (the entries of other actions are not read)."""
  read = (np.asarray(arrays["actions"]) == int(arrays["action"])) & np.asarray(arrays["valid"])
  poisoned = bool(np.isnan(np.asarray(arrays["values"]))[read].any())
  assert bool(np.isnan(np.asarray(out[0]))) == poisoned, out


# ================================================================================= goal_conditioned
# Cases of hrljax.losses.goal_conditioned: one per public function; add the new ones here.
GOAL_CONDITIONED_CASES = {
  "goal_conditioned.dual_f": Case(
    gc.dual_f,
    {"t": "f:B"},
    kw={"divergence": "chi_square"},
    rank=(),
    bad={"divergence": "hellinger"},
    why="elementwise, any rank",
  ),
  "goal_conditioned.dual_conjugate": Case(
    gc.dual_conjugate,
    {"y": "f:B"},
    kw={"divergence": "chi_square"},
    rank=(),
    bad={"divergence": "js", "nonnegative": 1},
    why="elementwise, any rank",
  ),
  "goal_conditioned.dual_ratio": Case(
    gc.dual_ratio,
    {"y": "f:B"},
    kw={"divergence": "kl"},
    rank=(),
    bad={"divergence": "tv", "nonnegative": None},
    why="elementwise, any rank",
  ),
  "goal_conditioned.dual_v_loss": Case(
    gc.dual_v_loss,
    {"v_tm1": "f:B", "v_t": "f:B", "r_t": "f:B", "discount_t": "u:B", "v_init": "f:N"},
    kw={"gamma": 0.9, "alpha": 1.0},
    bad={"gamma": 1.0, "alpha": 0.0, "divergence": "nope", "semi_gradient": "yes"},
  ),
  "goal_conditioned.fdvl_value_loss": Case(
    gc.fdvl_value_loss,
    {"q_tgt": "f:B,E", "v": "f:B"},
    kw={"lam": 0.8},
    bad={"divergence": "kl", "lam": 0.0, "clip_at_zero": None, "temperature": -1.0},
  ),
  "goal_conditioned.fdvl_critic_loss": Case(
    gc.fdvl_critic_loss,
    {"q": "f:B,E", "v_t": "f:B", "r_t": "f:B", "discount_t": "u:B"},
    bad={"huber_delta": 0.0},
  ),
  "goal_conditioned.fdvl_actor_loss": Case(
    gc.fdvl_actor_loss,
    {"log_prob": "lp:B", "q_tgt": "f:B,E", "v": "f:B"},
    bad={"temperature": -1.0, "max_weight": 0.0, "weighting": "adv", "divergence": "x"},
  ),
  "goal_conditioned.smore_score_loss": Case(
    gc.smore_score_loss,
    {"s_data": "f:B,E", "s_goal": "f:G,E", "m_t": "f:B"},
    kw={"discount": 0.9},
    bad={"discount": 1.0, "variant": "fast", "regularizer": -1.0},
  ),
  "goal_conditioned.smore_value_loss": Case(
    gc.smore_value_loss, {"s_tgt": "f:B,E", "m": "f:B"}, bad={"expectile": 1.0}
  ),
  "goal_conditioned.smore_actor_loss": Case(
    gc.smore_actor_loss,
    {"log_prob": "lp:B", "s_tgt": "f:B,E", "m": "f:B"},
    bad={"temperature": -0.5, "max_weight": -1.0},
  ),
  "goal_conditioned.expectile_loss": Case(
    gc.expectile_loss,
    {"diff": "f:B"},
    kw={"expectile": 0.7},
    rank=(),
    bad={"expectile": 1.5},
    why="elementwise, any rank",
  ),
  "goal_conditioned.awr_weights": Case(
    gc.awr_weights,
    {"advantage": "f:B"},
    kw={"alpha": 3.0},
    rank=(),
    bad={"alpha": -1.0, "max_weight": -2.0},
    why="elementwise, any rank",
  ),
  "goal_conditioned.awr_loss": Case(
    gc.awr_loss,
    {"log_prob": "lp:B", "advantage": "f:B"},
    kw={"alpha": 3.0},
    bad={"alpha": -1.0, "max_weight": 0.0},
  ),
  "goal_conditioned.ivl_value_loss": Case(
    gc.ivl_value_loss,
    {"v_tm1": "f:E", "v_tgt_tm1": "f:E", "v_tgt_t": "f:E", "r_t": "f:", "discount_t": "u:"},
    kw={"expectile": 0.7},
    bad={"expectile": 0.0},
  ),
  "goal_conditioned.ivl_value_loss_batch": Case(
    gc.ivl_value_loss_batch,
    {"v_tm1": "f:B,E", "v_tgt_tm1": "f:B,E", "v_tgt_t": "f:B,E", "r_t": "f:B", "discount_t": "u:B"},
    kw={"expectile": 0.7},
    bad={"expectile": 1.0},
  ),
  "goal_conditioned.length_normalize": Case(
    gc.length_normalize,
    {"x": "f:B,D"},
    rank=(),
    bad={"eps": -1.0},
    why="rank-polymorphic over leading axes",
  ),
  "goal_conditioned.hiql_low_advantage": Case(
    gc.hiql_low_advantage, {"v_next_w": "f:B,E", "v_w": "f:B,E"}
  ),
  "goal_conditioned.hiql_high_advantage": Case(
    gc.hiql_high_advantage, {"v_subgoal_g": "f:B,E", "v_g": "f:B,E"}
  ),
  "goal_conditioned.hiql_low_actor_loss": Case(
    gc.hiql_low_actor_loss,
    {"subgoal_rep": "f:B,R", "v_next_w": "f:B,E", "v_w": "f:B,E"},
    kw={"log_prob_fn": _log_prob_fn, "alpha": 3.0},
    bad={"alpha": -1.0},
  ),
  "goal_conditioned.hiql_high_actor_loss": Case(
    gc.hiql_high_actor_loss,
    {"target_rep": "f:B,R", "v_subgoal_g": "f:B,E", "v_g": "f:B,E"},
    kw={"log_prob_fn": _log_prob_fn, "alpha": 3.0},
    bad={"alpha": -1.0},
  ),
  "goal_conditioned.hiql_actor_losses": Case(
    gc.hiql_actor_losses,
    {
      "subgoal_rep": "f:B,R",
      "v_next_w": "f:B,E",
      "v_w": "f:B,E",
      "target_rep": "f:B,R",
      "v_subgoal_g": "f:B,E",
      "v_g": "f:B,E",
    },
    kw={
      "low_log_prob_fn": _log_prob_fn,
      "high_log_prob_fn": _log_prob_fn,
      "low_alpha": 3.0,
      "high_alpha": 3.0,
    },
    bad={"low_alpha": -1.0, "high_alpha": -1.0},
  ),
  "goal_conditioned.ota_option_indices": Case(
    gc.ota_option_indices,
    {
      "idx": "i<5:B",
      "traj_end": "i<3:B",
      "goal_idx": "i<9:B",
      "traj_mask": "b:B",
      "cur_mask": "b:B",
    },
    kw={"n": 2},
    bad={"n": 0},
    rank=(),
    why="integer index arithmetic, any shape",
  ),
  "goal_conditioned.ota_option_value_target": Case(
    gc.ota_option_value_target,
    {"r_option": "f:", "mask_option": "u:", "v_tgt_option": "f:E"},
    kw={"high_discount": 0.99},
    bad={"high_discount": 1.5},
  ),
  "goal_conditioned.ota_high_value_loss": Case(
    gc.ota_high_value_loss,
    {
      "v_tm1": "f:E",
      "v_tgt_tm1": "f:E",
      "v_tgt_option": "f:E",
      "r_option": "f:",
      "mask_option": "u:",
    },
    kw={"high_discount": 0.99, "expectile": 0.7},
    bad={"high_discount": -0.1, "expectile": 2.0},
  ),
  "goal_conditioned.hilp_value": Case(
    gc.hilp_value,
    {"phi_s": "f:B,D", "phi_g": "f:B,D"},
    bad={"eps_sq": -1.0},
    rank=(),
    why="rank-polymorphic over leading axes",
  ),
  "goal_conditioned.hilp_representation_loss": Case(
    gc.hilp_representation_loss,
    {
      "phi_s": "f:E,D",
      "phi_g": "f:E,D",
      "phi_tgt_s": "f:E,D",
      "phi_tgt_next": "f:E,D",
      "phi_tgt_g": "f:E,D",
      "r_t": "f:",
      "discount_t": "u:",
    },
    kw={"expectile": 0.95},
    bad={"expectile": -0.5, "eps_sq": -1.0},
  ),
  "goal_conditioned.hilp_skill_value_loss": Case(
    gc.hilp_skill_value_loss,
    {"q_tgt": "f:B,E", "v": "f:B"},
    kw={"expectile": 0.9},
    bad={"expectile": 1.0, "stop_target_gradients": 1},
  ),
  "goal_conditioned.hilp_skill_critic_loss": Case(
    gc.hilp_skill_critic_loss,
    {"q_tm1": "f:B,E", "r_t": "f:B", "discount_t": "u:B", "v_t": "f:B"},
    bad={"stop_target_gradients": 1},
    rank=("q_tm1", "r_t", "v_t"),
    why="discount_t is a scalar γ or a [B] γ·mask",
  ),
  "goal_conditioned.hilp_intrinsic_reward": Case(
    gc.hilp_intrinsic_reward,
    {"phi_s": "f:B,D", "phi_next": "f:B,D", "z": "f:B,D"},
    rank=(),
    why="rank-polymorphic over leading axes",
  ),
  "goal_conditioned.hilp_goal_prompt": Case(
    gc.hilp_goal_prompt,
    {"phi_s": "f:B,D", "phi_g": "f:B,D"},
    rank=(),
    bad={"scale": 0.0, "eps": -1.0},
    why="rank-polymorphic over leading axes",
  ),
  "goal_conditioned.hilp_reward_prompt": Case(
    gc.hilp_reward_prompt, {"phi": "f:N,D", "rewards": "f:N"}, bad={"scale": -1.0, "eps": 0.0}
  ),
  "goal_conditioned.hilp_sample_skills": Case(
    gc.hilp_sample_skills,
    {"key": "key"},
    kw={"num_skills": 3, "dim": 2},
    bad={"num_skills": 0, "dim": 0},
  ),
  "goal_conditioned.hilp_plan_midpoint": Case(
    gc.hilp_plan_midpoint,
    {"phi_s": "f:D", "phi_goal": "f:D", "phi_dataset": "f:M,D"},
    kw={"k": 2, "recursions": 2},
    dims={"M": 4},
    bad={"k": 0, "recursions": 0},
  ),
  "goal_conditioned.hiro_goal_transition": Case(
    gc.hiro_goal_transition,
    {"s_t": "f:B,D", "g_t": "f:B,D", "s_next": "f:B,D"},
    rank=(),
    why="elementwise",
  ),
  "goal_conditioned.hiro_low_reward": Case(
    gc.hiro_low_reward,
    {"s_t": "f:B,D", "g_t": "f:B,D", "s_next": "f:B,D"},
    rank=(),
    why="rank-polymorphic over leading axes",
  ),
  "goal_conditioned.hiro_candidate_goals": Case(
    gc.hiro_candidate_goals,
    {"key": "key", "g_orig": "f:D", "s_t": "f:D", "s_tc": "f:D", "scale": "pos:D"},
    kw={"num_random": 3},
    bad={"num_random": -1},
  ),
  "goal_conditioned.hiro_propagate_goals": Case(
    gc.hiro_propagate_goals, {"candidates": "f:C,D", "s_seq": "f:T,D"}
  ),
  "goal_conditioned.hiro_relabel": Case(
    gc.hiro_relabel,
    {"candidates": "f:C,D", "policy_actions": "f:C,T,A", "actions": "f:T,A", "valid": "v:T"},
    output=lambda out: out[1],
    nan=("policy_actions", "actions"),
    why="a NaN candidate goal need not be chosen: the choice is by the action likelihoods",
  ),
  "goal_conditioned.hac_target": Case(
    gc.hac_target,
    {"r_t": "f:B", "terminal_t": "b:B", "q_t": "f:B"},
    kw={"gamma": 0.98, "horizon": 10},
    bad={"gamma": 1.5, "horizon": 0},
  ),
  "goal_conditioned.hac_goal_reward": Case(
    gc.hac_goal_reward, {"achieved": "f:B,D", "goal": "f:B,D", "thresholds": "pos:D"}, rank=()
  ),
  "goal_conditioned.hac_hindsight_action": Case(
    gc.hac_hindsight_action,
    {"proposed_subgoal": "f:B,D", "achieved_subgoal": "f:B,D", "subgoal_reached": "b:B"},
    nan=("achieved_subgoal",),
    why="the proposed subgoal is not used where it was not reached (flags False in the NaN test)",
  ),
  "goal_conditioned.hac_hindsight_goals": Case(
    gc.hac_hindsight_goals,
    {"key": "key", "achieved": "f:T,D"},
    kw={"num_goals": 3},
    bad={"num_goals": 0},
    nan=(),
    why="samples rows of `achieved`: a NaN row may not be drawn",
  ),
  "goal_conditioned.hac_subgoal_test_penalty": Case(
    gc.hac_subgoal_test_penalty, {}, kw={"horizon": 10}, bad={"horizon": 0}
  ),
}


# =================================================================================== group_relative
# Cases of hrljax.losses.group_relative: one per public function; add the new ones here.
GROUP_RELATIVE_CASES = {
  "group_relative.segment_count": Case(
    gr.segment_count,
    {"group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid", "per": "group"},
    bad={"num_groups": 0},
  ),
  "group_relative.segment_mean": Case(
    gr.segment_mean,
    {"values": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid", "per": "group"},
    bad={"num_groups": 0},
  ),
  "group_relative.segment_std": Case(
    gr.segment_std,
    {"values": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid", "per": "group"},
    bad={"num_groups": 0, "ddof": -1},
  ),
  "group_relative.contiguous_group_ids": Case(
    gr.contiguous_group_ids,
    {},
    kw={"num_groups": 2, "group_size": 3},
    bad={"num_groups": 0, "group_size": -1},
  ),
  "group_relative.group_normalize": Case(
    gr.group_normalize,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"scale": "nope", "eps": -1.0, "ddof": -1, "singleton_mode": "nope"},
  ),
  "group_relative.group_normalize_dense": Case(
    gr.group_normalize_dense,
    {"rewards": "f:G,K", "valid": "v:G,K"},
    bad={"scale": "nope", "eps": -1.0},
  ),
  "group_relative.broadcast_to_tokens": Case(
    gr.broadcast_to_tokens, {"advantages": "f:B", "mask": "m:B,T"}
  ),
  "group_relative.grpo_advantages": Case(
    gr.grpo_advantages,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"scale": "nope", "eps": -1.0, "singleton_mode": "nope"},
  ),
  "group_relative.dr_grpo_advantages": Case(
    gr.dr_grpo_advantages,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"singleton_mode": "nope"},
  ),
  "group_relative.rloo_advantages": Case(
    gr.rloo_advantages,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"singleton_mode": "nope"},
  ),
  "group_relative.outcome_advantages": Case(
    gr.outcome_advantages,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"estimator": "nope", "scale": "nope", "eps": -1.0, "singleton_mode": "nope"},
  ),
  "group_relative.informative_group_mask": Case(
    gr.informative_group_mask,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"rule": "nope"},
    nan=(),
    why="returns a bool mask: NaN cannot be represented",
  ),
  "group_relative.overlong_penalty": Case(
    gr.overlong_penalty,
    {"lengths": _lengths},
    kw={"max_len": 150, "cache_len": 50},
    rank=(),
    bad={"cache_len": 0, "max_len": -1},
  ),
  "group_relative.observation_words": Case(
    gr.observation_words,
    {"observations": _float_obs},
    rank=(),
    why="bit patterns of any [N, ...] observation array (a NaN observation is a valid key; "
    "integers give their own bit patterns, so no float-vs-int or NaN test)",
  ),
  "group_relative.observation_hash": Case(
    gr.observation_hash, {"words": _words}, nan=(), why="integer hash"
  ),
  "group_relative.anchor_state_ids": Case(
    gr.anchor_state_ids,
    {"observations": _observations, "group_ids": "i<G:N", "valid": "v:N"},
    nan=(),
    bad={"method": "nope", "max_probe_rounds": 0},
    rank=("group_ids", "valid"),
    why="integer ids of exact observation matches",
  ),
  "group_relative.discounted_step_returns": Case(
    gr.discounted_step_returns,
    {"rewards": "f:N", "traj_ids": _traj_ids, "step_index": _step_index, "valid": "v:N"},
    kw={"gamma": 0.9, "num_traj": "$C"},
    dims={"N": None},
    bad={"gamma": 1.5},
  ),
  "group_relative.discounted_grid_returns": Case(
    gr.discounted_grid_returns,
    {"rewards": "f:T,C", "valid": "v:T,C"},
    kw={"gamma": 0.9},
    bad={"gamma": -0.5},
  ),
  "group_relative.gigpo_advantages": Case(
    gr.gigpo_advantages,
    {
      "step_rewards": "f:N",
      "traj_ids": _traj_ids,
      "step_index": _step_index,
      "group_ids": _traj_groups,
      "anchor_ids": "i<K:N",
      "valid": "v:N",
    },
    kw={"num_groups": "$G", "num_traj": "$C", "num_anchors": "$K"},
    dims={"N": None},
    bad={
      "norm": "nope",
      "gamma": 2.0,
      "episode_stat_weighting": "nope",
      "episode_singleton_mode": "nope",
      "eps": -1.0,
    },
  ),
  "group_relative.gigpo_grid_advantages": Case(
    gr.gigpo_grid_advantages,
    {"step_rewards": "f:T,N", "group_ids": "i<G:N", "observations": _obs_dense, "valid": "v:T,N"},
    kw={"num_groups": "$G"},
    rank=("step_rewards", "group_ids", "valid"),
    bad={"norm": "nope", "gamma": -1.0, "anchor_method": "nope"},
  ),
  "group_relative.rec_advantages": Case(
    gr.rec_advantages,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"drop": "nope", "eps": -1.0},
  ),
  "group_relative.opmd_advantages": Case(
    gr.opmd_advantages,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"baseline": "nope", "tau": 0.0},
  ),
  "group_relative.asymre_advantages": Case(
    gr.asymre_advantages,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"baseline_shift": float("nan")},
  ),
  "group_relative.rec_loss": Case(
    gr.rec_loss,
    {"logp": "lp:B,T", "old_logp": "lp:B,T", "advantages": "f:B,T", "mask": "m:B,T"},
    bad={
      "clip_mode": "nope",
      "weight": "nope",
      "regularizer": "nope",
      "reg_coef": -1.0,
      "temp": 0.0,
    },
  ),
  "group_relative.opmd_loss": Case(
    gr.opmd_loss, {"logp": "lp:B,T", "advantages": "f:B,T", "mask": "m:B,T"}, bad={"tau": -1.0}
  ),
  "group_relative.hicra_advantages": Case(
    gr.hicra_advantages,
    {"token_advantages": "f:B,T", "planning_mask": "b:B,T"},
    rank=(),
    bad={"alpha": 2.0},
    why="elementwise, any rank",
  ),
  "group_relative.hicra_verl_port_advantages": Case(
    gr.hicra_verl_port_advantages,
    {
      "sequence_advantages": "f:B",
      "mask": "m:B,T",
      "entropies": "pos:B,T",
      "group_ids": "i<G:B",
      "valid": "v:B",
    },
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"alpha": -0.5, "top_fraction": 0.0},
  ),
  "group_relative.planning_token_mask": Case(
    gr.planning_token_mask,
    {"tokens": "i<5:B,T", "patterns": _patterns, "pattern_lengths": _pattern_lengths},
    nan=(),
    why="integer token matching",
  ),
  "group_relative.hbpo_reward": Case(
    gr.hbpo_reward,
    {"lengths": _lengths, "budgets": _lengths, "correct": "v:B"},
    bad={"form": "nope", "max_len": 0},
  ),
  "group_relative.hbpo_advantages": Case(
    gr.hbpo_advantages,
    {
      "rewards": "f:B",
      "budget_ids": "i<2:B",
      "group_ids": "i<G:B",
      "budget_values": _budget_values,
      "valid": "v:B",
    },
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"singleton_mode": "nope", "eps": -1.0},
  ),
  "group_relative.mgrpo_alignment": Case(
    gr.mgrpo_alignment,
    {"rollout_ids": "i<G:M", "key": "key", "valid": "v:M"},
    kw={"num_rollouts": "$G", "slots_per_rollout": 2},
    nan=(),
    bad={"num_rollouts": 0, "slots_per_rollout": 0},
    why="integer alignment",
  ),
  "group_relative.disco_loss": Case(
    gr.disco_loss,
    {
      "logp": "lp:B,T",
      "old_logp": "lp:B,T",
      "mask": "m:B,T",
      "rewards": "v:B",
      "group_ids": "i<G:B",
      "valid": "v:B",
    },
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"score": "nope", "variant": "nope", "kl_estimator": "nope", "tau": -1.0},
  ),
  "group_relative.salt_advantages": Case(
    gr.salt_advantages,
    {"trajectory_advantages": "f:N", "node_ids": "i<K:N", "traj_ids": "i<C:N", "valid": "v:N"},
    kw={"num_nodes": "$K"},
    groups={"ids": "node_ids", "num": "num_nodes", "valid": "valid"},
    bad={"num_nodes": 0},
  ),
  "group_relative.spa_step_rewards": Case(
    gr.spa_step_rewards, {"progress": "u:N", "executable": "b:N", "is_last": "b:N"}
  ),
  "group_relative.spa_progress_loss": Case(
    gr.spa_progress_loss,
    {"progress": "u:N", "traj_ids": "i<C:N", "traj_returns": "f:C", "valid": "v:N"},
    kw={"num_traj": "$C"},
    groups={"ids": "traj_ids", "num": "num_traj", "valid": "valid", "extend": False},
    bad={"num_traj": 0},
  ),
  "group_relative.gated_reward_accumulation": Case(
    gr.gated_reward_accumulation,
    {"low_rewards": "f:N", "high_rewards": "f:C", "traj_ids": "i<C:N", "valid": "v:N"},
    kw={"threshold": 0.0},
    bad={"threshold": float("nan")},
  ),
  "group_relative.foresight_rewards": Case(
    gr.foresight_rewards,
    {"format_rewards": "f:B", "execution_rewards": "f:B"},
    rank=(),
    bad={"lam": -1.0},
    why="elementwise, any shape",
  ),
  "group_relative.two_level_advantages": Case(
    gr.two_level_advantages,
    {
      "format_rewards": "f:M",
      "state_ids": "i<G:M",
      "execution_success": "u:N",
      "low_rewards": "f:N",
      "subgoal_ids": "i<M:N",
      "subgoal_valid": "v:M",
      "action_valid": "v:N",
    },
    kw={"num_states": "$G"},
    groups={"ids": "state_ids", "num": "num_states", "valid": "subgoal_valid"},
    # both levels' advantages: a NaN in a low-level reward reaches only the second
    output=lambda out: jnp.concatenate([out.subgoal_advantages, out.action_advantages]),
    bad={"lam": -1.0, "scale": "nope", "eps": -1.0, "singleton_mode": "nope", "num_states": 0},
  ),
  "group_relative.gtpo_loss": Case(
    gr.gtpo_loss,
    {
      "logp": "lp:B,T",
      "mask": "m:B,T",
      "token_ids": "i<3:B,T",
      "advantages": "f:B",
      "entropies": "pos:B,T",
      "group_ids": "i<G:B",
      "old_logp": "lp:B,T",
      "valid": "v:B",
    },
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={
      "conflict_weight": 0.5,
      "entropy_coef": -1.0,
      "entropy_threshold": 0.0,
      "conflict_scope": "nope",
      "normalization": "nope",
    },
  ),
  "group_relative.llds_loss": Case(
    gr.llds_loss,
    {"logp": "lp:B,T", "old_logp": "lp:B,T", "advantages": "f:B,T", "mask": "m:B,T"},
    bad={"coef": -1.0, "gate": "nope"},
  ),
  "group_relative.alol_loss": Case(
    gr.alol_loss,
    {
      "logp": "lp:B,T",
      "mask": "m:B,T",
      "rewards": "f:B",
      "values": "f:B",
      "ref_logp": "lp:B,T",
      "valid": "v:B",
    },
    bad={"variant": "nope", "epsilon": 2.0, "kl_coef": -1.0, "positive_only": 1},
  ),
  "group_relative.p3o_loss": Case(
    gr.p3o_loss,
    {
      "logp": "lp:B,T",
      "old_logp": "lp:B,T",
      "mask": "m:B,T",
      "rewards": "f:B",
      "group_ids": "i<G:B",
      "valid": "v:B",
    },
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"variant": "nope", "epsilon": 0.0, "num_groups": 0},
  ),
  "group_relative.crpg_loss": Case(
    gr.crpg_loss,
    {
      "logp": "lp:B,T",
      "mask": "m:B,T",
      "rewards": "f:B",
      "baseline_rewards": "f:B",
      "passed": "b:B",
      "group_ids": "i<G:B",
      "valid": "v:B",
      "kl": "u:B",
    },
    kw={"num_groups": "$G", "kl_threshold": 0.5},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"baseline": "nope", "kl_threshold": -1.0},
  ),
  "group_relative.crraft_loss": Case(
    gr.crraft_loss,
    {
      "logp": "lp:B,T",
      "mask": "m:B,T",
      "rewards": "f:B",
      "baseline_rewards": "f:B",
      "passed": "b:B",
      "group_ids": "i<G:B",
      "valid": "v:B",
      "kl": "u:B",
      "fallback": "b:B",
    },
    kw={"num_groups": "$G", "kl_threshold": 0.5},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"kl_threshold": 0.0, "num_groups": 0},
  ),
  "group_relative.uniform_policy_value": Case(
    gr.uniform_policy_value,
    {"logits": "f:B,A"},
    rank=(),
    bad={"temperature": 0.0},
    why="any leading shape; the vocabulary is the last axis",
  ),
  "group_relative.rover_rewards": Case(
    gr.rover_rewards,
    {"rewards": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"form": "nope", "singleton_mode": "nope", "eps": -1.0, "positive_scale": -1.0},
  ),
  "group_relative.rover_loss": Case(
    gr.rover_loss,
    {
      "logp": "lp:B,T",
      "old_logp": "lp:B,T",
      "vocab_mean_logp": "lp:B,T",
      "old_vocab_mean_logp": "lp:B,T",
      "mask": "m:B,T",
      "rewards": "f:B",
      "group_ids": "i<G:B",
      "valid": "v:B",
    },
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    nan=("logp", "old_logp", "rewards"),
    why="the vocabulary means at position 0 (the value of the first state) are not in the loss",
    bad={"reward_form": "nope", "rho": 0.0, "clip_epsilon": 1.0, "aggregation": "nope"},
  ),
  "group_relative.pacs_loss": Case(
    gr.pacs_loss,
    {
      "logp": "lp:B,T",
      "old_logp": "lp:B,T",
      "mask": "m:B,T",
      "rewards": "u:B",
      "group_ids": "i<G:B",
      "valid": "v:B",
    },
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"beta": 0.0, "score": "nope", "centring": "nope", "weighting": "nope"},
  ),
  "group_relative.group_ranks": Case(
    gr.group_ranks,
    {"values": "f:B", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    nan=(),
    bad={"num_groups": 0},
    why="integer ranks (a NaN value ranks above every number)",
  ),
  "group_relative.unlikeliness_advantages": Case(
    gr.unlikeliness_advantages,
    {"rewards": "f:B", "old_logp": "lp:B,T", "mask": "m:B,T", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"beta": 2.0, "normalize": 1, "scale": "nope"},
  ),
  "group_relative.rank_grpo_rewards": Case(
    gr.rank_grpo_rewards, {"relevance": "u:B,N"}, bad={"reward": "nope"}
  ),
  "group_relative.rank_grpo_advantages": Case(
    gr.rank_grpo_advantages,
    {"rank_rewards": "f:B,N", "group_ids": "i<G:B", "valid": "v:B"},
    kw={"num_groups": "$G"},
    groups={"ids": "group_ids", "num": "num_groups", "valid": "valid"},
    bad={"scale": "nope", "eps": -1.0, "singleton_mode": "nope"},
  ),
  "group_relative.rank_grpo_loss": Case(
    gr.rank_grpo_loss,
    {
      "logp": "lp:B,T",
      "old_logp": "lp:B,T",
      "mask": "m:B,T",
      "item_ids": "i<N:B,T",
      "advantages": "f:B,N",
    },
    nan=("logp", "old_logp"),
    why="the advantage of a rank with no token is not read",
    bad={"aggregation": "nope", "epsilon": -1.0, "log_ratio_clamp": 0.0},
  ),
}


# ============================================================================= hierarchical_critics
# Cases of hrljax.losses.hierarchical_critics: one per public function; add the new ones here.
HIERARCHICAL_CRITICS_CASES = {
  "hierarchical_critics.archer_q_targets": Case(
    hc.archer_q_targets,
    {"r": "f:B", "terminated": "b:B", "v_next_tgt": "f:E,B"},
    kw={"gamma": 0.95},
    bad={"gamma": 1.5, "heads": "nope"},
  ),
  "hierarchical_critics.archer_v_targets": Case(
    hc.archer_v_targets, {"q_pi_tgt": "f:E,B"}, bad={"heads": "nope"}
  ),
  "hierarchical_critics.archer_critic_loss": Case(
    hc.archer_critic_loss,
    {
      "q": "f:E,B",
      "v": "f:E,B",
      "v_next_tgt": "f:E,B",
      "q_pi_tgt": "f:E,B",
      "r": "f:B",
      "terminated": "b:B",
      "valid": "v:B",
    },
    kw={"gamma": 0.95},
    bad={"gamma": -0.1, "q_target_heads": "nope", "v_target_heads": "x"},
  ),
  "hierarchical_critics.archer_advantage": Case(hc.archer_advantage, {"q": "f:E,B", "v": "f:E,B"}),
  "hierarchical_critics.mean_over_samples": Case(
    hc.mean_over_samples, {"values": "f:E,6"}, kw={"samples": 3}, rank=(), bad={"samples": 4}
  ),
  "hierarchical_critics.archer_sample_mean_baseline": Case(
    hc.archer_sample_mean_baseline, {"q_pi": "f:E,6"}, kw={"samples": 2}, bad={"samples": 0}
  ),
  "hierarchical_critics.archer_standardized_advantage": Case(
    hc.archer_standardized_advantage, {"q_pi": "f:E,B", "v": "f:E,B"}, bad={"eps": -1.0}
  ),
  "hierarchical_critics.archer_actor_loss": Case(
    hc.archer_actor_loss,
    {"token_logp": "lp:B,L", "token_mask": "m:B,L", "q_pi": "f:E,B", "v": "f:E,B", "valid": "v:B"},
  ),
  "hierarchical_critics.archer_baseline_actor_loss": Case(
    hc.archer_baseline_actor_loss,
    {
      "token_logp": "lp:B,L",
      "token_mask": "m:B,L",
      "q_pi": "f:E,B",
      "v": "f:E,B",
      "token_baseline": "f:B,L",
      "valid": "v:B",
    },
    bad={"baseline_coef": -1.0, "baseline_denominator": "nope"},
  ),
  "hierarchical_critics.offline_archer_critic_loss": Case(
    hc.offline_archer_critic_loss,
    {
      "q": "f:E,B",
      "v": "f:E,B",
      "v_next_tgt": "f:E,B",
      "q_data_tgt": "f:E,B",
      "r": "f:B",
      "terminated": "b:B",
      "valid": "v:B",
    },
    kw={"gamma": 0.99},
    bad={"gamma": 2.0, "expectile": 1.0, "q_target_heads": "nope"},
  ),
  "hierarchical_critics.offline_archer_actor_loss": Case(
    hc.offline_archer_actor_loss,
    {
      "token_logp": "lp:B,L",
      "token_mask": "m:B,L",
      "q_data": "f:E,B",
      "v": "f:E,B",
      "valid": "v:B",
    },
    bad={"inv_temp": -1.0, "max_weight": 0.0},
  ),
  "hierarchical_critics.filtered_bc_mask": Case(
    hc.filtered_bc_mask,
    {"returns": "f:N", "valid": "v:N"},
    nan=(),
    bad={"top_fraction": 0.0, "method": "nope"},
    why="returns a bool mask",
  ),
  "hierarchical_critics.filtered_bc_loss": Case(
    hc.filtered_bc_loss, {"token_logp": "lp:B,L", "token_mask": "m:B,L", "keep": "v:B"}
  ),
  "hierarchical_critics.chai_select": Case(
    hc.chai_select, {"q_candidates_tgt": "f:E,B,K"}, output=lambda out: out[1]
  ),
  "hierarchical_critics.token_stream": Case(
    hc.token_stream,
    {
      "reward": "f:T",
      "terminated": "b:T",
      "done": "b:T",
      "value": "f:T,L",
      "next_dialogue_value": "f:T",
      "mask": "v:T,L",
    },
    kw={"gamma": 0.9, "gae_lambda": 0.95},
    output=lambda out: jnp.stack(
      [out.reward, out.discount, out.value, out.next_value, out.lambda_]
    ),
    bad={"gamma": 1.5, "gae_lambda": -0.1, "token_gamma": 2.0},
  ),
  "hierarchical_critics.token_level_advantages": Case(
    hc.token_level_advantages,
    {
      "reward": "f:T",
      "terminated": "b:T",
      "done": "b:T",
      "value": "f:T,L",
      "next_dialogue_value": "f:T",
      "mask": "v:T,L",
    },
    kw={"gamma": 0.9, "gae_lambda": 0.95},
    bad={"gamma": -1.0, "token_gamma": 1.5},
  ),
  "hierarchical_critics.normalize_token_advantages": Case(
    hc.normalize_token_advantages,
    {"advantage": "f:B,L", "mask": "v:B,L"},
    rank=(),
    bad={"eps": -1.0},
    why="any shape",
  ),
}


# ========================================================================================== options
# Cases of hrljax.losses.options: one per public function; add the new ones here.
OPTIONS_CASES = {
  "options.value_over_options": Case(op.value_over_options, {"q_s": "f:O", "option_probs": "p:O"}),
  "options.epsilon_greedy_option_probs": Case(
    op.epsilon_greedy_option_probs, {"q_s": "f:O"}, kw={"epsilon": 0.1}, bad={"epsilon": 1.5}
  ),
  "options.softmax_option_probs": Case(
    op.softmax_option_probs, {"q_s": "f:O"}, bad={"temperature": 0.0}
  ),
  "options.sample_option": Case(
    op.sample_option,
    {"key": "key", "option_probs": "p:O"},
    nan_check=_option_is_the_sentinel,
    why="an int index cannot carry a NaN: the documented sentinel O instead",
  ),
  "options.select_option": Case(
    op.select_option,
    {"key": "key", "option_tm1": "i<O:", "beta_t": "u:", "option_probs_t": "p:O"},
    nan_check=_selected_option_is_the_sentinel_or_kept,
    why="an int index cannot carry a NaN: the documented sentinel O instead",
  ),
  "options.intra_option_q_target": Case(
    op.intra_option_q_target,
    {"r_t": "f:", "discount_t": "u:", "q_t": "f:O", "beta_t": "u:", "option_tm1": "i<O:"},
  ),
  "options.option_critic_loss": Case(
    op.option_critic_loss,
    {"q_tm1": "f:O", "option_tm1": "i<O:", "target_tm1": "f:"},
    bad={"loss_type": "nope", "huber_delta": 0.0},
    nan=("target_tm1",),
    why="only the executing option's value enters the loss",
  ),
  "options.option_segment_ends": Case(
    op.option_segment_ends,
    {"option_end_t": "b:T", "episode_end_t": "b:T"},
    kw={"n": 2},
    nan=(),
    bad={"n": 0},
    why="integer window ends",
  ),
  "options.option_aware_n_step_returns": Case(
    op.option_aware_n_step_returns,
    {
      "r_t": "f:T",
      "discount_t": "u:T",
      "bootstrap_t": "f:T",
      "option_end_t": "b:T",
      "truncated_t": "b:T",
    },
    kw={"n": 2},
    bad={"n": 0},
  ),
  "options.intra_option_n_step_targets": Case(
    op.intra_option_n_step_targets,
    {
      "r_t": "f:T",
      "discount_t": "u:T",
      "q_t": "f:T,O",
      "beta_t": "u:T",
      "option_tm1": "i<O:T",
      "option_end_t": "b:T",
      "truncated_t": "b:T",
    },
    kw={"n": 2},
    bad={"n": 0},
  ),
  "options.termination_loss": Case(
    op.termination_loss,
    {"beta": "u:", "q_option": "f:", "v": "f:"},
    kw={"xi": 0.01},
    bad={"xi": -1.0},
  ),
  "options.trajectory_termination_loss": Case(
    op.trajectory_termination_loss,
    {
      "beta": "u:T1,O",
      "q": "f:T1,O",
      "option_tm1": "i<O:T",
      "terminated_t": "b:T",
      "truncated_t": "b:T",
    },
    kw={"xi": 0.01},
    bad={"xi": -1.0, "state_for_termination": "nope"},
    nan=(),
    why="only the executed option's column, and not every row, of beta enters the loss",
  ),
  "options.intra_option_pg_loss": Case(
    op.intra_option_pg_loss,
    {"logits_tm1": "f:A", "a_tm1": "i<A:", "target_tm1": "f:", "baseline_tm1": "f:"},
    bad={"entropy_coef": -1.0},
  ),
}


# ================================================================================== policy_gradient
# Cases of hrljax.losses.policy_gradient: one per public function; add the new ones here.
POLICY_GRADIENT_CASES = {
  "policy_gradient.generalized_advantage_estimation": Case(
    pg.generalized_advantage_estimation,
    {"r_t": "f:T", "discount_t": "u:T", "v_tm1": "f:T", "v_t": "f:T", "done_t": "b:T"},
    kw={"lambda_": 0.95},
    bad={"unroll": 0},
  ),
  "policy_gradient.clipped_surrogate_loss": Case(
    pg.clipped_surrogate_loss,
    {"logp": "lp:B", "old_logp": "lp:B", "advantages": "f:B"},
    bad={"epsilon": -0.1, "dual_clip": 0.5},
  ),
  "policy_gradient.sequence_log_ratio": Case(
    pg.sequence_log_ratio, {"logp": "lp:B,T", "old_logp": "lp:B,T", "mask": "m:B,T"}
  ),
  "policy_gradient.value_loss": Case(
    pg.value_loss,
    {"value": "f:B", "target": "f:B", "old_value": "f:B"},
    kw={"clip_epsilon": 0.2},
    bad={"clip_epsilon": -0.2},
  ),
  "policy_gradient.ppo_loss": Case(
    pg.ppo_loss,
    {
      "logp": "lp:B",
      "old_logp": "lp:B",
      "advantages": "f:B",
      "value": "f:B",
      "old_value": "f:B",
      "target": "f:B",
      "entropy": "f:B",
    },
    bad={"clip_value": 1},
  ),
  "policy_gradient.categorical_entropy": Case(
    pg.categorical_entropy, {"logits": "f:B,A"}, rank=(), why="rank-polymorphic"
  ),
  "policy_gradient.kl_divergence": Case(
    pg.kl_divergence,
    {"logp": "lp:B", "ref_logp": "lp:B"},
    rank=(),
    bad={"estimator": "nope", "clamp": -1.0},
    why="elementwise, any shape",
  ),
  "policy_gradient.aggregate": Case(
    pg.aggregate, {"loss": "f:B,T", "mask": "m:B,T"}, bad={"mode": "nope", "constant": -1.0}
  ),
  "policy_gradient.masked_mean": Case(pg.masked_mean, {"x": "f:B,T", "mask": "m:B,T"}),
}


# =========================================================================================== safety
# Cases of hrljax.losses.safety: one per public function; add the new ones here.
SAFETY_CASES = {
  "safety.risk_value": Case(sf.risk_value, {"q1": "f:B", "q2": "f:B"}, rank=(), why="elementwise"),
  "safety.qrisk_td_target": Case(
    sf.qrisk_td_target, {"c_t": "u:", "discount_t": "u:", "q1_t": "u:", "q2_t": "u:"}
  ),
  "safety.qrisk_loss": Case(
    sf.qrisk_loss,
    {"q1_tm1": "u:", "q2_tm1": "u:", "c_t": "u:", "discount_t": "u:", "q1_t": "u:", "q2_t": "u:"},
  ),
  "safety.reflex_select": Case(
    sf.reflex_select,
    {"risk": "u:", "a_task": "f:A", "a_recovery": "f:A"},
    kw={"threshold": 0.5},
    bad={"threshold": float("nan")},
    nan=(),
    why="selects one of two actions; a NaN risk fails safe: test_nan_risk_executes_the_recovery_action",
  ),
  "safety.sqrl_target": Case(sf.sqrl_target, {"fail_t": "u:", "discount_t": "u:", "logit_t": "f:"}),
  "safety.sqrl_loss": Case(
    sf.sqrl_loss,
    {"logit_tm1": "f:", "fail_t": "u:", "discount_t": "u:", "logit_t": "f:"},
    bad={"fail_weight": 1.5},
  ),
  "safety.sqrl_actor_penalty": Case(
    sf.sqrl_actor_penalty, {"log_lambda": "f:", "logit": "f:"}, bad={"target_safety": 0.0}
  ),
  "safety.sqrl_lambda_loss": Case(
    sf.sqrl_lambda_loss, {"log_lambda": "f:", "logit": "f:"}, bad={"target_safety": 1.0}
  ),
  "safety.csc_loss": Case(
    sf.csc_loss,
    {"q_tm1": "f:", "c_t": "u:", "discount_t": "u:", "q_t": "f:", "q_pi_tm1": "f:N"},
    kw={"alpha": 1.0},
    bad={"alpha": -1.0, "bellman_coeff": -1.0},
  ),
  "safety.lagrange_init": Case(sf.lagrange_init, {}, bad={"lam_init": -1.0}),
  "safety.lagrange_update": Case(
    sf.lagrange_update,
    {"state": _lagrange_state, "jc": "f:"},
    kw={"cost_limit": 0.5, "learning_rate": 0.1},
    bad={"learning_rate": 0.0, "upper_bound": -1.0},
  ),
  "safety.lagrange_update_with_optimizer": Case(
    sf.lagrange_update_with_optimizer,
    {"state": _lagrange_state, "jc": "f:"},
    kw={"opt_state": optax.sgd(0.1).init(0.5), "tx": optax.sgd(0.1), "cost_limit": 0.5},
    bad={"upper_bound": -1.0},
  ),
  "safety.lagrange_multiplier_loss": Case(
    sf.lagrange_multiplier_loss, {"lam": "pos:", "jc": "f:"}, kw={"cost_limit": 0.5}
  ),
  "safety.pid_lagrange_init": Case(sf.pid_lagrange_init, {}, bad={"lam_init": -1.0, "delay": 0}),
  "safety.pid_lagrange_update": Case(
    sf.pid_lagrange_update,
    {"state": _pid_state, "jc": "f:"},
    kw={"cost_limit": 0.5},
    bad={"kp": -1.0, "p_ema_alpha": 1.0, "normalisation": "nope"},
  ),
  "safety.augmented_lagrangian_penalty": Case(
    sf.augmented_lagrangian_penalty,
    {"state": _aug_state, "g": "f:"},
    kw={"growth_factor": 0.1},
    bad={"growth_factor": -1.0, "lam_max": -1.0},
  ),
  "safety.per_step_cost_budget": Case(
    sf.per_step_cost_budget,
    {},
    kw={"cost_limit": 25.0, "gamma": 0.99, "horizon": 100},
    bad={"gamma": 1.5, "horizon": 0},
  ),
  "safety.ppo_lag_advantage": Case(
    sf.ppo_lag_advantage,
    {"adv_r": "f:B", "adv_c": "f:B", "lam": "pos:"},
    rank=("lam",),
    why="elementwise over the advantages, any shape",
  ),
  "safety.lagrangian_combine": Case(
    sf.lagrangian_combine,
    {"loss_r": "f:B", "loss_c": "f:B", "lam": "u:"},
    rank=("lam",),
    bad={"normalisation": "nope"},
    why="elementwise over the losses",
  ),
  "safety.sac_lag_actor_loss": Case(
    sf.sac_lag_actor_loss,
    {"alpha": "pos:", "log_prob": "lp:", "q_r": "f:", "q_c": "f:", "lam": "pos:"},
  ),
  "safety.halfspace_project": Case(sf.halfspace_project, {"u": "f:D", "a": "f:D", "b": "f:"}),
  "safety.circle_cbf_constraint": Case(
    sf.circle_cbf_constraint,
    {"x": "f:D", "centre": "f:D", "radius": "pos:"},
    kw={"dt": 0.1, "gamma": 0.5},
    bad={"dt": 0.0, "gamma": 1.5},
  ),
  "safety.circle_cbf_shield": Case(
    sf.circle_cbf_shield,
    {"x": "f:D", "u": "f:D", "centres": "f:K,D", "radii": "pos:K"},
    kw={"dt": 0.1, "gamma": 0.5, "margin": 0.0},
    bad={"dt": 0.0, "gamma": 1.5},
  ),
  "safety.polytope_project": Case(
    sf.polytope_project,
    {"u": "f:D", "A": "f:K,D", "b": "f:K"},
    bad={"method": "nope", "num_sweeps": 0, "feasibility_tol": 0.0},
  ),
  "safety.dalal_safety_layer": Case(
    sf.dalal_safety_layer, {"a": "f:D", "g": "f:K,D", "c": "f:K", "limit": "pos:K"}
  ),
  "safety.hierarchical_shield": Case(
    sf.hierarchical_shield,
    {"u": "f:D", "A": "f:2,D", "b": "f:2"},
    kw={"units": ((0,), (1,))},
    bad={"method": "nope", "units": ((0,),)},
  ),
  "safety.task_recovery_loss": Case(
    sf.task_recovery_loss,
    {"q_task": "f:K,B", "risk": "u:B"},
    kw={"risk_target": 0.1, "risk_weight": 10.0},
    bad={"risk_target": 1.5, "risk_weight": 0.0},
  ),
  "safety.sampling_offsets": Case(
    sf.sampling_offsets,
    {},
    kw={"num_samples": 4, "low": (-1.0, -1.0), "high": (1.0, 1.0)},
    bad={"num_samples": 0},
  ),
  "safety.critic_projection": Case(
    sf.critic_projection,
    {"obs": "f:B,D", "nominal": "f:B,A"},
    kw={
      "score_fn": _row_score,
      "limit": 0.0,
      "low": (-1.0, -1.0),
      "high": (1.0, 1.0),
      "num_steps": 2,
    },
    dims={"A": 2},
    rank=("nominal",),
    bad={"num_steps": 0},
    why="the observation is only passed to the row-wise score function",
  ),
  "safety.safe_sampling": Case(
    sf.safe_sampling,
    {"obs": "f:B,D", "nominal": "f:B,A"},
    kw={
      "score_fn": _row_score,
      "limit": 0.0,
      "low": (-1.0, -1.0),
      "high": (1.0, 1.0),
      "num_samples": 4,
    },
    dims={"A": 2},
    rank=("nominal",),
    nan=("nominal",),
    bad={"num_samples": 0},
    why="a NaN score accepts no candidate, so the nominal action comes back (the caller's "
    "check, nearest_safe_action's, then rejects it); the observation is only passed to "
    "the row-wise score function",
  ),
  "safety.nearest_safe_action": Case(
    sf.nearest_safe_action,
    {"obs": "f:B,D", "nominal": "f:B,A", "fallback": "f:B,A"},
    kw={
      "score_fn": _row_score,
      "method": "critic_projection",
      "threshold": 0.5,
      "margin": 0.05,
      "low": (-1.0, -1.0),
      "high": (1.0, 1.0),
      "num_steps": 2,
    },
    dims={"A": 2},
    rank=("nominal", "fallback"),
    nan_check=_nan_row_gets_the_fallback,
    bad={"method": "nope", "threshold": 1.5, "margin": -1.0},
    why="the observation is only passed to the row-wise score function",
  ),
  # ---------------------------------------------------------------- soft_actor_critic
  "soft_actor_critic.soft_q_target": Case(
    soft_ac.soft_q_target,
    {"r_t": "f:B", "discount_t": "u:B", "q_t": "f:K,B", "log_prob_t": "lp:B", "alpha": "pos:"},
  ),
  "soft_actor_critic.critic_loss": Case(soft_ac.critic_loss, {"q_tm1": "f:K,B", "target": "f:B"}),
  "soft_actor_critic.actor_loss": Case(
    soft_ac.actor_loss,
    {"log_prob": "lp:B", "q_value": "f:K,B", "alpha": "pos:"},
    bad={"q_reduction": "max"},
  ),
  "soft_actor_critic.temperature_loss": Case(
    soft_ac.temperature_loss,
    {"log_alpha": "f:", "log_prob": "lp:B"},
    kw={"target_entropy": -2.0},
    bad={"form": "nope", "target_entropy": float("nan")},
  ),
}


# ====================================================================================== value_based
# Cases of hrljax.losses.value_based: one per public function; add the new ones here.
VALUE_BASED_CASES = {
  "value_based.q_learning_target": Case(
    vb.q_learning_target,
    {"r_t": "f:", "discount_t": "u:", "q_t": "f:A", "q_t_selector": "f:A"},
    nan=("r_t", "discount_t", "q_t_selector"),
    why="with the selector, only the selected action's value of q_t is read",
  ),
  "value_based.q_learning_loss": Case(
    vb.q_learning_loss,
    {
      "q_tm1": "f:A",
      "a_tm1": "i<A:",
      "r_t": "f:",
      "discount_t": "u:",
      "q_t": "f:A",
      "q_t_selector": "f:A",
    },
    bad={"loss_type": "nope", "huber_delta": 0.0},
    nan=("r_t", "discount_t", "q_t_selector"),
    why="only the replayed action of q_tm1 and the selected action of q_t are read",
  ),
  "value_based.monotonic_mix": Case(
    vb.monotonic_mix,
    {"q_agents": "f:B,N", "w1": "f:B,N,M", "b1": "f:B,M", "w2": "f:B,M", "b2": "f:B"},
  ),
  "value_based.smdp_target": Case(
    vb.smdp_target, {"r_t": "f:T", "discount_t": "u:T", "q_t": "f:", "mask": "v:T"}
  ),
  "value_based.qmix_loss": Case(
    vb.qmix_loss,
    {
      "q_tm1": "f:N,A",
      "a_tm1": "i<A:N",
      "w1": "f:N,M",
      "b1": "f:M",
      "w2": "f:M",
      "b2": "f:",
      "target": "f:",
    },
    bad={"loss_type": "nope", "huber_delta": 0.0},
    nan=("w1", "b1", "w2", "b2", "target"),
    why="only each agent's chosen action of q_tm1 enters Q_tot",
  ),
  "value_based.expert_mixture": Case(
    vb.expert_mixture, {"logits": "f:B,K", "q_experts": "f:B,K,A"}
  ),
  "value_based.expert_mixture_target": Case(
    vb.expert_mixture_target,
    {
      "r_t": "f:",
      "discount_t": "u:",
      "logits_t_target": "f:K",
      "logits_t_selector": "f:K",
      "q_experts_t": "f:K,A",
    },
  ),
  "value_based.demonstration_kl": Case(
    vb.demonstration_kl, {"q_mix": "f:A", "q_demo": "f:A"}, bad={"eps": -1.0}
  ),
  "value_based.episodic_memory_lookup": Case(
    vb.episodic_memory_lookup,
    {
      "query": "f:D",
      "action": "i<A:",
      "keys": "f:M,D",
      "actions": "i<A:M",
      "values": "f:M",
      "valid": "v:M",
    },
    kw={"num_neighbours": "$M"},
    bad={"num_neighbours": 0, "kernel_eps": 0.0},
    nan=("values",),
    nan_check=_memory_reads_same_action_values,
    why="a NaN key or query makes its entry no neighbour (found False, 0); with k = M every "
    "valid entry is a neighbour, and only those with the looked-up action are read",
  ),
  "value_based.expert_mixture_loss": Case(
    vb.expert_mixture_loss,
    {
      "logits_tm1": "f:K",
      "q_experts_tm1": "f:K,A",
      "a_tm1": "i<A:",
      "target": "f:",
      "q_memory": "f:",
      "q_demo": "f:A",
    },
    bad={"memory_coef": -1.0, "kl_coef": -1.0},
  ),
}


# ==================================================================================== latent_skills
# Cases of hrljax.losses.latent_skills: one per public function; add the new ones here.
LATENT_SKILLS_CASES = {
  "latent_skills.gaussian_kl": Case(
    lsk.gaussian_kl,
    {"q_mean": "f:B,D", "q_log_std": "f:B,D", "p_mean": "f:B,D", "p_log_std": "f:B,D"},
  ),
  "latent_skills.ar_smoothness": Case(
    lsk.ar_smoothness, {"mean_t": "f:T,D", "done_t": "b:T", "valid_t": "v:T"}
  ),
  "latent_skills.residual_skill": Case(
    lsk.residual_skill, {"prior_mean": "f:B,D", "a_hi": "f:B,D"}
  ),
  "latent_skills.distillation_loss": Case(
    lsk.distillation_loss,
    {
      "decoder_logits_t": "f:T,A",
      "expert_action_t": "i<A:T",
      "q_mean_t": "f:T,D",
      "q_log_std_t": "f:T,D",
      "p_mean_t": "f:T,D",
      "p_log_std_t": "f:T,D",
      "done_t": "b:T",
      "valid_t": "v:T",
    },
    bad={"kl_coef": -1.0, "ar_coef": float("nan")},
  ),
}


# Every case, keyed "<family>.<function>".
CASES = {
  **GOAL_CONDITIONED_CASES,
  **GROUP_RELATIVE_CASES,
  **HIERARCHICAL_CRITICS_CASES,
  **LATENT_SKILLS_CASES,
  **OPTIONS_CASES,
  **POLICY_GRADIENT_CASES,
  **SAFETY_CASES,
  **VALUE_BASED_CASES,
}


# ---------------------------------------------------------------------------- the properties
LETTERS = "BTEDOAGNKMCRL"
EXAMPLES = 1
SETTINGS = hypothesis.settings(
  max_examples=EXAMPLES,
  deadline=None,
  derandomize=True,
  suppress_health_check=list(hypothesis.HealthCheck),
)
# Known failures, {(test, case): reason}, each marked xfail(strict=True) so that a fix is
# noticed; empty while every family passes.
XFAIL: dict = {}


def loss_families() -> dict:
  """{family: module} of every public family of `hrljax.losses` (modules and packages)."""
  return {
    info.name: importlib.import_module(f"hrljax.losses.{info.name}")
    for info in pkgutil.iter_modules(hrljax.losses.__path__)
    if not info.name.startswith("_")
  }


def defined_functions(module) -> dict:
  """The public functions a module defines (not those it imports)."""
  return {
    name: obj
    for name, obj in vars(module).items()
    if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == module.__name__
  }


def public_functions() -> set:
  """`family.function` for every public function: a package's public names are its `__all__`."""
  names = set()
  for family, module in loss_families().items():
    if hasattr(module, "__path__"):
      functions = {n for n in module.__all__ if inspect.isfunction(getattr(module, n))}
    else:
      functions = set(defined_functions(module))
    names.update(f"{family}.{name}" for name in functions)
  return names


def test_every_public_loss_function_has_a_hostile_input_case():
  functions = public_functions()
  assert len(functions) > 100
  assert sorted(functions - set(CASES)) == [], "add a Case for these functions"
  assert sorted(set(CASES) - functions) == [], "these cases name no public function"


def test_the_losses_index_lists_every_family_and_public_function():
  indexed = {
    f"{family}.{name}" for family, names in hrljax.losses.FAMILIES.items() for name in names
  }
  assert sorted(hrljax.losses.FAMILIES) == sorted(loss_families())
  assert sorted(public_functions() - indexed) == [], "add these to hrljax.losses.FAMILIES"
  assert sorted(indexed - public_functions()) == [], "these index entries name no function"


def test_a_family_package_re_exports_every_public_function_of_its_modules():
  """So that the coverage test above, which reads `__all__`, sees every function."""
  for family, package in loss_families().items():
    if not hasattr(package, "__path__"):
      continue
    for info in pkgutil.iter_modules(package.__path__):
      if info.name.startswith("_"):
        continue
      module = importlib.import_module(f"{package.__name__}.{info.name}")
      missing = sorted(set(defined_functions(module)) - set(package.__all__))
      assert missing == [], f"{family}.{info.name}: add to __all__: {missing}"


# Two shape sets: the values, the poisoned argument and position, the rank change and so on
# vary per example, the shapes only between these two (every new shape costs a compile).
DIMS_SETS = (
  dict.fromkeys(LETTERS, 2),
  {
    "B": 3,
    "T": 3,
    "E": 1,
    "D": 3,
    "O": 3,
    "A": 3,
    "G": 2,
    "N": 5,
    "K": 3,
    "M": 4,
    "C": 2,
    "R": 1,
    "L": 4,
  },
)


@st.composite
def dims_strategy(draw, case: Case):
  dims = dict(draw(st.sampled_from(DIMS_SETS)))
  dims["T1"] = dims["T"] + 1
  for letter, value in case.dims.items():
    dims[letter] = value if value is not None else dims["C"] * dims["T"]
  return dims


def inputs(case: Case, dims: dict, seed: int, hostile: bool = False) -> dict:
  rng = np.random.default_rng(seed)
  return {k: build(spec, rng, dims, hostile) for k, spec in case.arrays.items()}


def call(case: Case, arrays: dict, dims: dict, **extra):
  return case.fn(**arrays, **resolve_kw(case.kw, dims), **extra)


def checked(case: Case, out) -> np.ndarray:
  return np.asarray(first_leaf(case.output(out)))


def float_leaves(out) -> list:
  return [
    np.asarray(x)
    for x in jax.tree.leaves(out)
    if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)
  ]


def params(test: str, names) -> list:
  return [
    pytest.param(
      *(n if isinstance(n, tuple) else (n,)),
      marks=pytest.mark.xfail(strict=True, reason=XFAIL[(test, n)]),
    )
    if (test, n) in XFAIL
    else n
    for n in names
  ]


def with_seed(test):
  return hypothesis.given(data=st.data(), seed=st.integers(0, 2**31 - 1))(test)


@pytest.mark.parametrize("name", sorted(CASES))
def test_valid_inputs_give_finite_results(name):
  case = CASES[name]

  @SETTINGS
  @with_seed
  def check(data, seed):
    dims = data.draw(dims_strategy(case))
    out = call(case, inputs(case, dims, seed), dims)
    for leaf in float_leaves(out):
      assert np.all(np.isfinite(leaf)), (name, dims, out)

  check()


RANK_CASES = sorted(n for n, c in CASES.items() if (array_args(c) if c.rank is None else c.rank))


@pytest.mark.parametrize("name", RANK_CASES)
def test_wrong_rank_is_an_error(name):
  """One argument gets an extra leading axis, or loses its first one (implicit rank promotion is
  allowed here, so that only the function's own checks count)."""
  case = CASES[name]
  ranked = array_args(case) if case.rank is None else case.rank

  @SETTINGS
  @with_seed
  def check(data, seed):
    dims = data.draw(dims_strategy(case))
    arrays = inputs(case, dims, seed)
    arg = data.draw(st.sampled_from(ranked))
    x = arrays[arg]
    grow = x.ndim == 0 or data.draw(st.booleans())
    arrays[arg] = jnp.stack([x, x]) if grow else x[0]
    with jax.numpy_rank_promotion("allow"):
      with pytest.raises((AssertionError, ValueError, TypeError)):
        call(case, arrays, dims)

  check()


NAN_CASES = sorted(n for n, c in CASES.items() if (float_args(c) if c.nan is None else c.nan))


def poison(case, data, seed, value_fn, args):
  dims = data.draw(dims_strategy(case))
  arrays = inputs(case, dims, seed, hostile=True)
  arg = data.draw(st.sampled_from(args))
  x = np.array(arrays[arg])
  index = tuple(data.draw(st.integers(0, n - 1)) for n in x.shape)
  value = value_fn(data)
  x[index] = value
  return dims, arrays, arg, index, value, x


@pytest.mark.parametrize("name", params("nan", NAN_CASES))
def test_nan_reaches_the_output_or_raises(name):
  case = CASES[name]
  args = float_args(case) if case.nan is None else case.nan

  @SETTINGS
  @with_seed
  def check(data, seed):
    dims, arrays, arg, index, _, x = poison(case, data, seed, lambda d: np.nan, args)
    arrays[arg] = jnp.asarray(x)
    try:
      out = call(case, arrays, dims)
    except ValueError:
      return
    if case.nan_check is not None:
      case.nan_check(arrays, out)
      return
    assert np.any(np.isnan(checked(case, out))), (name, arg, index, dims, out)

  check()


@pytest.mark.parametrize("name", params("inf", NAN_CASES))
def test_inf_gives_non_finite_or_the_limit(name):
  case = CASES[name]
  args = float_args(case) if case.inf is None else case.inf

  @SETTINGS
  @with_seed
  def check(data, seed):
    sign = lambda d: d.draw(st.sampled_from([np.inf, -np.inf]))
    dims, arrays, arg, index, value, x = poison(case, data, seed, sign, args)
    arrays[arg] = jnp.asarray(x)
    try:
      out = checked(case, call(case, arrays, dims))
    except ValueError:
      return
    if np.all(np.isfinite(out)):
      x[index] = np.sign(value) * 1e30
      arrays[arg] = jnp.asarray(x)
      limit = checked(case, call(case, arrays, dims))
      np.testing.assert_allclose(out, limit, rtol=1e-4, atol=1e-5, err_msg=f"{name} {arg}")

  check()


INT_CASES = sorted(n for n, c in CASES.items() if float_args(c))


@pytest.mark.parametrize("name", params("int", INT_CASES))
def test_integer_arrays_for_floats_raise_or_equal_the_float_result(name):
  case = CASES[name]

  @SETTINGS
  @with_seed
  def check(data, seed):
    dims = data.draw(dims_strategy(case))
    arrays = inputs(case, dims, seed)
    arg = data.draw(st.sampled_from(float_args(case)))
    rounded = jnp.round(arrays[arg] * 2)
    arrays[arg] = rounded
    expected = call(case, arrays, dims)
    arrays[arg] = rounded.astype(jnp.int32)
    try:
      out = call(case, arrays, dims)
    except (AssertionError, TypeError, ValueError):
      return
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(expected)):
      np.testing.assert_allclose(
        np.asarray(a, np.float64),
        np.asarray(b, np.float64),
        rtol=1e-5,
        atol=1e-6,
        err_msg=f"{name} {arg}",
      )

  check()


BAD_OPTIONS = sorted((n, k) for n, c in CASES.items() for k in c.bad)


@pytest.mark.parametrize("name, option", params("bad", BAD_OPTIONS))
def test_bad_python_option_is_a_value_error_naming_it(name, option):
  case = CASES[name]
  dims = {letter: 2 for letter in LETTERS} | {"T1": 3}
  dims |= {k: (v if v is not None else 4) for k, v in case.dims.items()}
  arrays = inputs(case, dims, 0)
  kw = resolve_kw(case.kw, dims) | {option: case.bad[option]}
  with pytest.raises(ValueError, match=option):
    case.fn(**arrays, **kw)


GROUP_CASES = sorted(n for n, c in CASES.items() if c.groups)


def group_inputs(case, data, seed):
  dims = data.draw(dims_strategy(case))
  arrays = inputs(case, dims, seed)
  valid = case.groups["valid"]
  arrays[valid] = jnp.ones_like(arrays[valid])
  return dims, arrays


def compare_outside(case, out, reference, row):
  """Equal outputs, except at `row` for per-row outputs."""
  for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(reference)):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if case.groups.get("per") != "group" and a.ndim >= 1:
      a, b = np.delete(a, row, axis=0), np.delete(b, row, axis=0)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", params("out_of_range", GROUP_CASES))
def test_out_of_range_group_id_raises_eagerly_and_is_an_invalid_row_under_jit(name):
  """A row whose group id is outside [0, num_groups): an eager call raises a ValueError naming
  the ids argument; under jit the row is an invalid row, so every output (that row's included)
  equals the batch with the row marked invalid and an in-range id."""
  case = CASES[name]

  @SETTINGS
  @with_seed
  def check(data, seed):
    dims, arrays = group_inputs(case, data, seed)
    ids, valid = case.groups["ids"], case.groups["valid"]
    num = resolve_kw(case.kw, dims)[case.groups["num"]]
    row = data.draw(st.integers(0, arrays[ids].shape[0] - 1))
    bad_id = data.draw(st.sampled_from([num, num + 1, -1]))
    reference = call(case, dict(arrays, **{valid: arrays[valid].at[row].set(False)}), dims)
    arrays[ids] = arrays[ids].at[row].set(bad_id)
    with pytest.raises(ValueError, match=ids):
      call(case, arrays, dims)
    out = jax.jit(lambda a: call(case, a, dims))(arrays)
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(reference)):
      np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=1e-5, atol=1e-6)

  check()


@pytest.mark.parametrize(
  "name", params("empty", [n for n in GROUP_CASES if CASES[n].groups.get("extend", True)])
)
def test_empty_groups_change_nothing(name):
  """Declaring more groups than are used (empty groups) leaves every result unchanged (per-group
  outputs: the used groups' entries; the empty ones are not checked)."""
  case = CASES[name]

  @SETTINGS
  @with_seed
  def check(data, seed):
    dims, arrays = group_inputs(case, data, seed)
    key = case.groups["num"]
    num = resolve_kw(case.kw, dims)[key]
    reference = call(case, arrays, dims)
    out = case.fn(**arrays, **(resolve_kw(case.kw, dims) | {key: num + 2}))
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(reference)):
      a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
      if a.ndim and b.ndim and (a.shape[0], b.shape[0]) == (num + 2, num):
        a = a[:num]  # a per-group output: the used groups' entries
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

  check()


def test_nan_risk_executes_the_recovery_action():
  """A diverged safety critic must not let the task action through."""
  a_task, a_recovery = jnp.array([1.0, 2.0]), jnp.array([-1.0, -2.0])
  action, intervened = sf.reflex_select(jnp.float32(np.nan), a_task, a_recovery, threshold=0.5)
  np.testing.assert_array_equal(np.asarray(action), np.asarray(a_recovery))
  assert bool(intervened)


# --------------------------------------------------------- out-of-range option, action and slot ids
# An option index (`option_tm1`), an action index (`a_tm1`) or the PID delay slot
# (`state.d_index`) outside its range: an eager call raises a ValueError naming it; under jit the
# example or step is invalid (0, in no count), whatever its float inputs hold (NaN here), and the
# other examples are what they are when every example is valid. Examples 1 and 3 hold O and -1 (a
# negative index would wrap around to the last option, O would be clamped to it).
NUM = 3  # options, actions
BAD_ROWS, GOOD_ROWS = np.array([1, 3]), np.array([0, 2])


def _batch(rng, index_name, **floats):
  """Four examples: `floats` ({name: trailing shape}) standard normal, NaN in the bad rows; the
  index argument valid in rows 0 and 2, NUM in row 1 and -1 in row 3."""
  arrays = {}
  for name, shape in floats.items():
    x = rng.normal(size=(4, *shape)).astype(np.float32)
    x[BAD_ROWS] = np.nan
    arrays[name] = jnp.asarray(x)
  arrays[index_name] = jnp.asarray([0, NUM, 2, -1], jnp.int32)
  return arrays


def _per_example_cases():
  rng = np.random.default_rng(0)
  u = lambda x: jnp.abs(jnp.tanh(x))  # a probability, NaN stays NaN

  def q_target(r_t, discount_t, q_t, beta_t, option_tm1):
    return op.intra_option_q_target(
      r_t, u(discount_t), q_t, u(beta_t), option_tm1, stop_target_gradients=False
    )

  select = _batch(rng, "option_tm1")  # finite beta and probabilities: only the index is bad
  select |= {
    "key": jax.random.split(jax.random.key(0), 4),
    "beta_t": jnp.full(4, 0.5),
    "option_probs_t": jnp.full((4, NUM), 1.0 / NUM),
  }
  return {
    "select_option": (op.select_option, select, "option_tm1", None),
    "intra_option_q_target": (
      q_target,
      _batch(rng, "option_tm1", r_t=(), discount_t=(), q_t=(NUM,), beta_t=()),
      "option_tm1",
      "q_t",
    ),
    "option_critic_loss": (
      lambda **a: op.option_critic_loss(**a, loss_type="huber"),
      _batch(rng, "option_tm1", q_tm1=(NUM,), target_tm1=()),
      "option_tm1",
      "q_tm1",
    ),
    "intra_option_pg_loss": (
      lambda **a: op.intra_option_pg_loss(**a, entropy_coef=0.01, stop_target_gradients=False),
      _batch(rng, "a_tm1", logits_tm1=(NUM,), target_tm1=(), baseline_tm1=()),
      "a_tm1",
      "logits_tm1",
    ),
    "q_learning_loss": (
      lambda discount_t, **a: vb.q_learning_loss(**a, discount_t=u(discount_t)),
      _batch(rng, "a_tm1", q_tm1=(NUM,), r_t=(), discount_t=(), q_t=(NUM,)),
      "a_tm1",
      "q_tm1",
    ),
  }


PER_EXAMPLE_CASES = _per_example_cases()


def _vmapped_with_grad(fn, grad_of):
  """The function over a batch and, with `grad_of`, the gradient of its summed first output."""

  def run(arrays):
    over_batch = lambda a: jax.vmap(lambda x: fn(**x))(a)
    out = over_batch(arrays)
    if grad_of is None:
      return out
    total = lambda x: jnp.sum(first_leaf(over_batch(dict(arrays, **{grad_of: x}))))
    return out, jax.grad(total)(arrays[grad_of])

  return jax.jit(run)


def _rows(arrays, rows):
  return {k: v[rows] for k, v in arrays.items()}


def _repaired(arrays, index):
  """The batch with the bad examples made valid (index 1, floats 0), for the good examples'
  results from the same compiled program."""
  fixed = {k: v.at[BAD_ROWS].set(0) if v.dtype == jnp.float32 else v for k, v in arrays.items()}
  return fixed | {index: arrays[index].at[BAD_ROWS].set(1)}


@pytest.mark.parametrize("name", sorted(PER_EXAMPLE_CASES))
def test_an_out_of_range_option_or_action_raises_eagerly_naming_it_and_the_range(name):
  fn, arrays, index, _ = PER_EXAMPLE_CASES[name]
  for row, bad in zip(BAD_ROWS, (NUM, -1)):
    example = {k: v[GOOD_ROWS[0]] for k, v in arrays.items()} | {index: arrays[index][row]}
    with pytest.raises(ValueError, match=rf"{index}: expected indices in \[0, {NUM}\).*\[{bad}\]"):
      fn(**example)


@pytest.mark.parametrize("name", sorted(PER_EXAMPLE_CASES))
def test_an_out_of_range_option_or_action_is_an_invalid_example_under_jit(name):
  """Bad examples: every output and the gradient 0 (select_option: the sentinel O, switched),
  although their floats are NaN; good examples: bit for bit as when every example is valid."""
  fn, arrays, index, grad_of = PER_EXAMPLE_CASES[name]
  run = _vmapped_with_grad(fn, grad_of)
  out, alone = run(arrays), run(_repaired(arrays, index))
  for got, expected in zip(jax.tree.leaves(out), jax.tree.leaves(alone)):
    np.testing.assert_array_equal(np.asarray(got)[GOOD_ROWS], np.asarray(expected)[GOOD_ROWS])
  if name == "select_option":
    option, switched = map(np.asarray, out)
    np.testing.assert_array_equal(option[BAD_ROWS], NUM)
    assert switched[BAD_ROWS].all()
    return
  for leaf in jax.tree.leaves(out):
    np.testing.assert_array_equal(np.asarray(leaf)[BAD_ROWS], 0.0)


def test_an_unchecked_running_option_is_ignored_when_a_new_option_must_be_chosen():
  """`must_choose` ignores the running option, so a placeholder there neither raises nor counts."""
  key, probs = jax.random.key(0), jnp.asarray([0.0, 0.0, 1.0])
  for placeholder in (-1, NUM):
    option, switched = op.select_option(key, jnp.int32(placeholder), jnp.float32(0.0), probs, True)
    assert (int(option), bool(switched)) == (2, True)


def _n_step_inputs(option_tm1):
  rng = np.random.default_rng(1)
  num_steps = len(option_tm1)
  floats = {
    "r_t": rng.normal(size=num_steps),
    "discount_t": rng.uniform(0.5, 1.0, size=num_steps),
    "q_t": rng.normal(size=(num_steps, NUM)),
    "beta_t": rng.uniform(size=num_steps),
  }
  arrays = {k: np.asarray(v, np.float32) for k, v in floats.items()}
  bad = (np.asarray(option_tm1) < 0) | (np.asarray(option_tm1) >= NUM)
  for x in arrays.values():
    x[bad] = np.nan
  arrays = {k: jnp.asarray(v) for k, v in arrays.items()}
  arrays["option_tm1"] = jnp.asarray(option_tm1, jnp.int32)
  arrays["option_end_t"] = jnp.zeros(num_steps, bool)
  return arrays


def test_an_out_of_range_option_ends_the_n_step_windows_around_its_step():
  """The bad step's target is 0 and its NaN is not read; the steps before and after it get the
  targets of the trajectory split there (windows of 3 would otherwise cross it)."""
  targets = lambda a: op.intra_option_n_step_targets(**a, n=3)
  run = jax.jit(lambda *trajectories: tuple(map(targets, trajectories)))
  for bad in (NUM, -1):
    arrays = _n_step_inputs([1, 1, bad, 1, 1])
    with pytest.raises(ValueError, match=rf"option_tm1: expected indices in \[0, 3\).*\[{bad}\]"):
      op.intra_option_n_step_targets(**arrays, n=3)
    out, before, after = run(arrays, _rows(arrays, slice(0, 2)), _rows(arrays, slice(3, 5)))
    assert float(out[2]) == 0.0
    # the same sums, in programs XLA may fuse differently: equal to float32 rounding
    np.testing.assert_allclose(out[:2], before, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out[3:], after, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("state_for_termination", ["next", "current"])
def test_an_out_of_range_option_is_a_skipped_step_of_the_termination_loss(state_for_termination):
  """The bad step: mask, loss, extras and the gradient of the state it would read 0, not counted;
  the rest equals the trajectory with that transition (and its state) removed."""
  rng = np.random.default_rng(2)
  beta = jnp.asarray(rng.uniform(size=(5, NUM)), jnp.float32)
  q = jnp.asarray(rng.normal(size=(5, NUM)), jnp.float32)
  flags = jnp.zeros(4, bool)
  offset = 1 if state_for_termination == "next" else 0

  def loss_and_grad(beta, q, option_tm1):
    fn = lambda b: op.trajectory_termination_loss(
      b,
      q,
      option_tm1,
      flags[: len(option_tm1)],
      flags[: len(option_tm1)],
      0.01,
      state_for_termination=state_for_termination,
    )
    return fn(beta), jax.grad(lambda b: fn(b)[0])(beta)

  run = jax.jit(lambda full, alone: (loss_and_grad(*full), loss_and_grad(*alone)))
  for bad in (NUM, -1):
    option_tm1 = jnp.asarray([0, bad, 2, 1], jnp.int32)
    with pytest.raises(ValueError, match=rf"option_tm1: expected indices in \[0, 3\).*\[{bad}\]"):
      op.trajectory_termination_loss(beta, q, option_tm1, flags, flags, 0.01)
    state = 1 + offset  # the state transition 1 would read
    poisoned = (beta.at[state].set(jnp.nan), q.at[state].set(jnp.nan), option_tm1)
    keep_states = np.delete(np.arange(5), state)
    alone = (beta[keep_states], q[keep_states], option_tm1[np.array([0, 2, 3])])
    ((loss, extras), grad), ((loss_alone, extras_alone), grad_alone) = run(poisoned, alone)
    assert float(extras.num_valid) == 3.0 and float(loss) == float(loss_alone)
    for step_leaf, alone_leaf in zip(extras[:4], extras_alone[:4]):  # the per-step extras
      assert float(step_leaf[1]) == 0.0
      np.testing.assert_array_equal(np.delete(np.asarray(step_leaf), 1), alone_leaf)
    np.testing.assert_array_equal(np.asarray(grad)[state], 0.0)
    np.testing.assert_array_equal(np.delete(np.asarray(grad), state, axis=0), grad_alone)


def test_an_out_of_range_pid_delay_slot_raises_eagerly_and_drops_the_derivative_under_jit():
  state = sf.pid_lagrange_init(lam_init=0.5, delay=3)
  update = jax.jit(lambda s, kd: sf.pid_lagrange_update(s, jnp.float32(4.0), cost_limit=1.0, kd=kd))
  for _ in range(2):
    state = update(state, 0.01)
  for bad in (3, -1):
    broken = state._replace(d_index=jnp.int32(bad))
    with pytest.raises(
      ValueError, match=rf"state.d_index: expected indices in \[0, 3\).*\[{bad}\]"
    ):
      sf.pid_lagrange_update(broken, jnp.float32(4.0), cost_limit=1.0)
    out, no_derivative = update(broken, 0.5), update(state, 0.0)
    assert float(out.lam) == float(no_derivative.lam)  # the D term is 0, not a clamped slot's
    np.testing.assert_array_equal(out.d_history, state.d_history)  # no slot written
    assert int(out.d_index) == (bad + 1) % 3
