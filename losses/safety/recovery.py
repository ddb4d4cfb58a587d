"""Recovery actions of a switching safety layer: the threshold switch of Recovery RL and Bresa, and
the search for the action nearest a nominal one that a learned safety critic accepts.

`reflex_select` is per-example. The searches are batch-level over a leading axis `B` and take the
critic as a row-wise score function `score_fn(obs [B, ...], action [B, |A|]) -> [B]` (row b
depends on row b only), the critic's logit: Q_risk = sigmoid(score). Working on the logit keeps a
linearisation informative where the sigmoid saturates near 0 or 1.
"""

import math
from typing import Callable, Tuple, Union

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks
from hrljax.losses.safety.shields import dalal_safety_layer

Array = chex.Array
Numeric = Union[chex.Array, float]
ScoreFn = Callable[[Array, Array], Array]

RECOVERY_SEARCHES = ("critic_projection", "safe_sampling")


def reflex_select(
  risk: Array, a_task: Array, a_recovery: Array, *, threshold: Numeric
) -> Tuple[Array, Array]:
  """Recovery-RL / Bresa switch: execute ``a_recovery`` iff ``risk > threshold`` (strict).

  Per-example. Recovery RL (arXiv:2010.15920, Sec. IV; reference ``get_action`` with
  ``recovery_thresh``) and Bresa's reflex (arXiv:2503.21989, project-page flowchart) replace
  the task action rather than project it. ``risk == threshold`` does not trigger; a NaN risk
  does (fail safe: a critic that has diverged must not let the task action through).

  Args:
    risk: float scalar, ``max(Q1, Q2)(s, a_task)``.
    a_task, a_recovery: actions of equal shape and dtype.
    threshold: ε_risk (Recovery RL default 0.1), a float in [0, 1] or a scalar array.

  Returns:
    ``(a_exec, intervened)`` with ``intervened`` a bool scalar.
  """
  chex.assert_rank(risk, 0)
  chex.assert_type(risk, float)
  chex.assert_equal_shape([a_task, a_recovery])
  chex.assert_trees_all_equal_dtypes(a_task, a_recovery)
  checks.number("threshold", threshold, arrays=True)
  intervened = ~(risk <= threshold)  # True for NaN risk
  return jnp.where(intervened, a_recovery, a_task), intervened


def critic_projection(
  score_fn: ScoreFn, obs, nominal: Array, limit: float, low: tuple, high: tuple, num_steps: int
) -> Array:
  """`num_steps` Dalal projections of `nominal` `[B, |A|]` onto score(s, a) <= `limit`, each on
  the score linearised at the current action, clipped to the action bounds `[low, high]`.

  Dalal, Dvijotham, Vecerik, Hester, Paduraru, Tassa, "Safe Exploration in Continuous Action
  Spaces", arXiv:1801.08757, Section 4: with the linear model score(s, a') ≈ c + g·a'
  (g = ∇_a score(s, a), c = score(s, a) − g·a) the closest action under the limit is
  a − [(score(s, a) − limit)/|g|²]_+ g (`dalal_safety_layer`). The score should be the critic's
  logit, not its sigmoid: linearised, a sigmoid near 0 or 1 has a vanishing gradient and the
  step overshoots to the box's boundary. A score that is not linear in a (an MLP's) makes the
  repeated step a Newton iteration towards {score = limit}; an action already under the limit
  stays. `score_fn` must be row-wise, so that the gradient of its sum is each row's own
  ∇_a score.
  """
  chex.assert_rank(nominal, 2)
  chex.assert_type(nominal, float)
  checks.integer("num_steps", num_steps, low=1)
  low_array, high_array = _bound_arrays(low, high, nominal.ndim)
  limits = jnp.full((1,), limit, jnp.float32)
  project = jax.vmap(lambda a, g, c: dalal_safety_layer(a, g[None], c[None], limits)[0])

  def one_step(action, _):
    score, pullback = jax.vjp(lambda a: score_fn(obs, a), action)
    grad = pullback(jnp.ones_like(score))[0]
    offset = score - jnp.sum(grad * action, axis=-1)
    return jnp.clip(project(action, grad, offset), low_array, high_array), None

  action, _ = jax.lax.scan(one_step, nominal, None, length=num_steps)
  return action


def _bound_arrays(low: tuple, high: tuple, ndim: int) -> Tuple[Array, Array]:
  """The action bounds as float32 arrays of rank `ndim` (trailing axis |A|), for broadcasting."""
  shape = (1,) * (ndim - 1) + (len(low),)
  return (
    jnp.asarray(low, jnp.float32).reshape(shape),
    jnp.asarray(high, jnp.float32).reshape(shape),
  )


def sampling_offsets(num_samples: int, low: tuple, high: tuple) -> Tuple[Array, Array]:
  """The fixed candidate set of `safe_sampling`: `(offsets, points)`, `[num_samples // 2, |A|]`
  and `[the rest, |A|]`: offsets from the nominal action (Gaussian, σ a quarter of the action
  range, so that most candidates are near it) and points uniform in the action box (so that a
  safe action far from it can be found). Drawn once from a fixed key: the candidates are
  constants of the compiled program, and no randomness is taken from the caller's keys."""
  checks.integer("num_samples", num_samples, low=1)
  low_array, high_array = _bound_arrays(low, high, 2)
  near_key, box_key = jax.random.split(jax.random.key(0))
  num_near = num_samples // 2
  offsets = 0.25 * (high_array - low_array) * jax.random.normal(near_key, (num_near, len(low)))
  points = jax.random.uniform(
    box_key, (num_samples - num_near, len(low)), minval=low_array, maxval=high_array
  )
  return offsets, points


def safe_sampling(
  score_fn: ScoreFn, obs, nominal: Array, limit: float, low: tuple, high: tuple, num_samples: int
) -> Array:
  """The candidate action nearest `nominal` `[B, |A|]` (Euclidean) among those whose score is at
  most `limit`: the Q-sampling recovery of Thananjeyan et al., "Recovery RL: Safe Reinforcement
  Learning with Learned Recovery Zones", arXiv:2010.15920, Section IV-B (which samples actions and
  keeps the safest), restricted to the safe set and ranked by the distance to the nominal
  action. Candidates: `sampling_offsets` around the nominal action and over the box, clipped to
  `[low, high]`. Where no candidate is under the limit the nominal action is returned (the
  caller's final check then falls back)."""
  chex.assert_rank(nominal, 2)
  chex.assert_type(nominal, float)
  offsets, points = sampling_offsets(num_samples, low, high)
  batch, action_dim = nominal.shape
  low_array, high_array = _bound_arrays(low, high, 3)
  near = jnp.clip(nominal[:, None, :] + offsets[None], low_array, high_array)
  candidates = jnp.concatenate(
    [near, jnp.broadcast_to(points[None], (batch,) + points.shape)], axis=1
  )  # [B, M, |A|]
  repeated = jax.tree.map(lambda x: jnp.repeat(x, num_samples, axis=0), obs)
  score = score_fn(repeated, candidates.reshape(batch * num_samples, action_dim)).reshape(
    batch, num_samples
  )
  distance = jnp.where(
    score <= limit, jnp.sum(jnp.square(candidates - nominal[:, None, :]), -1), jnp.inf
  )
  best = jnp.take_along_axis(candidates, jnp.argmin(distance, axis=1)[:, None, None], 1)[:, 0]
  return jnp.where(jnp.isfinite(distance).any(axis=1)[:, None], best, nominal)


def nearest_safe_action(
  score_fn: ScoreFn,
  obs,
  nominal: Array,
  fallback: Array,
  *,
  method: str,
  threshold: float,
  margin: float,
  low: tuple,
  high: tuple,
  num_steps: int = 5,
  num_samples: int = 64,
) -> Array:
  """The action nearest the nominal one `[B, |A|]` that the safety critic accepts,
  Q_risk(s, a) = sigmoid(score(s, a)) <= `threshold`, else `fallback` `[B, |A|]`.

  A recovery that keeps the nominal action's progress where it can, instead of a recovery
  policy's, which minimises Q_risk and so backs straight off the hazard. The search aims at
  Q_risk <= threshold − `margin`, by critic-linearised Dalal projections (`method=
  "critic_projection"`, `num_steps` of them; Dalal et al. 2018, arXiv:1801.08757) or among
  `num_samples` sampled actions (`"safe_sampling"`, after Recovery RL's Q-sampling, Thananjeyan
  et al. 2021, arXiv:2010.15920). A nominal action the critic accepts comes back unchanged, and
  where the search ends above the threshold the `fallback` is returned, so the result is never
  an action the switch (`reflex_select`) would reject when the fallback would pass.
  """
  checks.choice("method", method, RECOVERY_SEARCHES)
  checks.number("threshold", threshold, low=0.0, high=1.0)
  checks.number("margin", margin, low=0.0)
  chex.assert_equal_shape([nominal, fallback])
  search_limit = _logit(threshold - margin)
  if method == "critic_projection":
    found = critic_projection(score_fn, obs, nominal, search_limit, low, high, num_steps)
  else:
    found = safe_sampling(score_fn, obs, nominal, search_limit, low, high, num_samples)
  # Accepted as the switch accepts: sigmoid(score) <= threshold.
  accepted = lambda action: jax.nn.sigmoid(score_fn(obs, action)) <= threshold
  action = jnp.where(accepted(found)[:, None], found, fallback)
  return jnp.where(accepted(nominal)[:, None], nominal, action)


def _logit(probability: float) -> float:
  """log(p / (1 − p)) of a Python float in [0, 1], ±inf at the ends."""
  if probability <= 0.0:
    return -math.inf
  if probability >= 1.0:
    return math.inf
  return math.log(probability / (1.0 - probability))


def task_recovery_loss(
  q_task: Array, risk: Array, *, risk_target: float, risk_weight: float
) -> Array:
  """A recovery policy's loss that follows the task critic among the actions the safety critic
  rates safe: −min_k Q_task,k(s, a) + λ·(Q_risk(s, a) − ε_rec)_+, per example `[B]`.

  A penalty form of max_a Q_task(s, a) s.t. Q_risk(s, a) <= ε_rec, with λ = `risk_weight` and
  ε_rec = `risk_target`. Recovery RL's model-free recovery (Thananjeyan et al., arXiv:2010.15920,
  Section IV-B) minimises Q_risk alone, which backs the agent straight off a hazard; this
  objective (a deviation from the paper: its reference code has no such objective) slides along
  the hazard's edge instead. Gradients reach `q_task` and `risk` (differentiate through the
  recovery policy's reparameterised action; keep the critics' parameters fixed).

  Args:
    q_task: the task critics at (s, a), float `[K, B]`.
    risk: Q_risk(s, a), float `[B]`.
    risk_target: ε_rec, a float in [0, 1].
    risk_weight: λ, a float > 0.
  """
  chex.assert_rank([q_task, risk], [2, 1])
  chex.assert_type([q_task, risk], float)
  chex.assert_equal_shape([q_task[0], risk])
  checks.number("risk_target", risk_target, low=0.0, high=1.0, arrays=True)
  checks.number("risk_weight", risk_weight, low=0.0, low_open=True, arrays=True)
  excess = jnp.maximum(risk - risk_target, 0.0)
  return -jnp.min(q_task, axis=0) + risk_weight * excess
