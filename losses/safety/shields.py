"""Action shields: half-space (control-barrier-function) projection, polytope projection, the CBF
shield of a single integrator among discs, the Dalal et al. safety layer and a priority-ordered
hierarchical composition of shields.

Per-example: one action; the caller vmaps. Every shield returns `(action, info)` with
`info.intervened`. A constraint row `(a_i, b_i)` is satisfied when `a_i . u + b_i >= 0`.
"""

import enum
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks

Array = chex.Array
Numeric = Union[chex.Array, float]

# Above this many rows the exact polytope projection (2**m active sets) is refused.
MAX_EXACT_CONSTRAINTS = 12
# A Gram sub-matrix whose correlation determinant is below this is treated as rank deficient.
_RANK_TOLERANCE = 1e-6


class ShieldInfo(NamedTuple):
  intervened: Array  # bool scalar: the shield changed the proposed action
  correction: Array  # [d] safe_action - proposed_action
  slack: Array  # [m] a_i . safe_action + b_i; >= 0 (up to tolerance) when satisfied


class HierarchicalShieldInfo(NamedTuple):
  intervened: Array  # bool [num_units], per unit in application order
  unit_actions: Array  # [num_units, d] action after each unit
  correction: Array  # [d] final action - proposed action
  slack: Array  # [m] slack of every constraint at the final action


class ProjectionMethod(str, enum.Enum):
  EXACT = "exact"  # active-set enumeration: exact Euclidean projection, m <= 12
  DYKSTRA = "dykstra"  # Dykstra's alternating projections, fixed number of sweeps


def _projection_method(value) -> ProjectionMethod:
  try:
    return ProjectionMethod(value)
  except ValueError:
    allowed = ", ".join(repr(m.value) for m in ProjectionMethod)
    raise ValueError(f"method: expected one of {allowed}, got {value!r}") from None


def _halfspace_step(u: Array, a: Array, b: Array) -> Array:
  """``u + [-(a.u + b)]_+ / |a|^2 a``; a zero row moves nothing (and has zero gradient)."""
  norm_sq = jnp.sum(jnp.square(a))
  nonzero = norm_sq > 0
  safe_norm_sq = jnp.where(nonzero, norm_sq, 1.0)
  step = jnp.where(nonzero, jnp.maximum(-(jnp.dot(a, u) + b), 0.0) / safe_norm_sq, 0.0)
  return u + step * a


def halfspace_project(u: Array, a: Array, b: Array) -> Tuple[Array, ShieldInfo]:
  """Closed-form CBF filter for one affine constraint ``a.u + b >= 0``.

  ``u* = u + [-(a.u + b)]_+ / |a|^2 * a``, the Euclidean projection onto the half-space, i.e.
  the solution of ``min |u - u_RL|^2 s.t. L_f h + L_g h u + kappa(h) >= 0`` with
  ``a = L_g h^T`` and ``b = L_f h + kappa(h)`` (Ames et al., "Control Barrier Functions: Theory
  and Applications", ECC 2019, arXiv:1903.11199, the single-constraint CBF-QP). Per-example;
  differentiable almost everywhere. Safe actions are returned unchanged. A zero ``a`` (the
  constraint does not depend on the action) leaves ``u`` unchanged; check ``info.slack``.

  Args:
    u: float ``[d]`` proposed action.
    a: float ``[d]`` constraint normal.
    b: float scalar offset.

  Returns:
    ``(safe_action, ShieldInfo)`` with ``slack`` of shape ``[1]``.
  """
  chex.assert_rank([u, a, b], [1, 1, 0])
  chex.assert_equal_shape([u, a])
  chex.assert_type([u, a, b], float)
  # Select rather than add a zero step, so a safe action comes back bit for bit.
  violated = jnp.dot(a, u) + b < 0
  x = jnp.where(violated, _halfspace_step(u, a, b), u)
  slack = (jnp.dot(a, x) + b)[None]
  return x, ShieldInfo(intervened=jnp.any(x != u), correction=x - u, slack=slack)


def circle_cbf_constraint(
  x: Array, centre: Array, radius: Numeric, *, dt: float, gamma: float, margin: Numeric = 0.0
) -> Tuple[Array, Array]:
  """Linearised discrete-time CBF row ``(a, b)`` keeping a single integrator out of a disc.

  For ``x+ = x + dt u`` and ``h(x) = |x - o|^2 - (r + margin)^2``, the discrete CBF condition
  ``h(x+) >= (1 - gamma) h(x)`` linearised at ``x`` is ``a.u + b >= 0`` with
  ``a = 2 (x - o) dt`` and ``b = gamma h(x)``. Because h is convex the linearisation is
  conservative (the true ``h(x+)`` is at least its linear estimate). The margin adds robustness
  to process noise (`docs/safety.md`, "CBF shields"). Per-example.

  Args:
    x, centre: float ``[d]`` position and disc centre.
    radius, margin: float scalars (or Python floats).
    dt: step length, a float > 0. gamma: CBF decay in (0, 1].
  """
  chex.assert_rank([x, centre], 1)
  chex.assert_equal_shape([x, centre])
  chex.assert_type([x, centre], float)
  checks.number("dt", dt, low=0.0, low_open=True, arrays=True)
  checks.number("gamma", gamma, low=0.0, high=1.0, low_open=True, arrays=True)
  offset = x - centre
  h = jnp.sum(jnp.square(offset)) - jnp.square(radius + margin)
  return 2.0 * dt * offset, gamma * h


def _row_tolerance(A: Array, b: Array, x: Array, tol: float) -> Array:
  """Per-row feasibility tolerance scaled with the magnitudes involved."""
  row_norm = jnp.sqrt(jnp.sum(jnp.square(A), axis=1))
  return tol * (1.0 + jnp.abs(b) + row_norm * jnp.sqrt(jnp.sum(jnp.square(x))))


def _exact_projection(u: Array, A: Array, b: Array, tol: float) -> Tuple[Array, Array]:
  """Exact projection onto ``{x : A x + b >= 0}`` by enumerating candidate active sets.

  For each subset S of rows with linearly independent normals, project ``u`` onto the affine
  set ``{A_S x + b_S = 0}``. The projection onto the polytope is one of these points (an
  optimal KKT multiplier can always be supported on independent active rows), and it is the
  feasible candidate closest to ``u``: every feasible point is at least that far. So no
  multiplier-sign test is needed. Returns ``(x, found_feasible)``; with an empty feasible set
  the candidate with the smallest worst violation is returned.
  """
  m = A.shape[0]
  masks = ((jnp.arange(2**m)[:, None] >> jnp.arange(m)[None, :]) & 1).astype(bool)
  gram = A @ A.T
  residual = A @ u + b

  def candidate(mask):
    pair = mask[:, None] & mask[None, :]
    g = jnp.where(pair, gram, 0.0) + jnp.diag(jnp.where(mask, 0.0, 1.0))
    # Rank test on the correlation matrix (scale free); rank-deficient subsets are skipped and
    # solved against the identity so that no NaN reaches the backward pass.
    diag = jnp.diagonal(g)
    positive = jnp.all(diag > 0)
    safe_diag = jnp.where(diag > 0, diag, 1.0)
    inv_sqrt = jax.lax.rsqrt(safe_diag)
    corr = g * inv_sqrt[:, None] * inv_sqrt[None, :]
    well_posed = jax.lax.stop_gradient(positive & (jnp.linalg.det(corr) > _RANK_TOLERANCE))
    g = jnp.where(well_posed, g, jnp.eye(m, dtype=g.dtype))
    mu = jnp.linalg.solve(g, jnp.where(mask, -residual, 0.0))
    x = u + A.T @ jnp.where(mask, mu, 0.0)
    return x, well_posed

  xs, well_posed = jax.vmap(candidate)(masks)
  slack = xs @ A.T + b[None, :]
  tolerance = jax.vmap(lambda x: _row_tolerance(A, b, x, tol))(xs)
  finite = jnp.all(jnp.isfinite(xs), axis=1)
  usable = jax.lax.stop_gradient(well_posed & finite)
  feasible = usable & jnp.all(slack >= -tolerance, axis=1)
  distance = jnp.sum(jnp.square(xs - u[None, :]), axis=1)
  worst = jnp.max(-slack, axis=1)
  any_feasible = jnp.any(feasible)
  score = jnp.where(
    any_feasible, jnp.where(feasible, distance, jnp.inf), jnp.where(usable, worst, jnp.inf)
  )
  best = jnp.argmin(jax.lax.stop_gradient(score))
  return xs[best], any_feasible


def _dykstra_projection(u: Array, A: Array, b: Array, num_sweeps: int) -> Array:
  """Dykstra's algorithm over the half-spaces, a static number of cyclic sweeps.

  Unlike plain cyclic projection, the per-constraint increments make the iterates converge to
  the Euclidean projection onto the intersection (Boyle & Dykstra 1986), not merely to some
  feasible point.
  """
  m, _ = A.shape

  def visit(x, row):
    a, offset, increment = row
    y = x + increment
    x_new = _halfspace_step(y, a, offset)
    return x_new, y - x_new

  def sweep(carry, _):
    x, increments = carry
    x, increments = jax.lax.scan(visit, x, (A, b, increments))
    return (x, increments), None

  (x, _), _ = jax.lax.scan(sweep, (u, jnp.zeros((m,) + u.shape, u.dtype)), None, length=num_sweeps)
  return x


def polytope_project(
  u: Array,
  A: Array,
  b: Array,
  *,
  method: str = "exact",
  num_sweeps: int = 50,
  lower: Optional[Array] = None,
  upper: Optional[Array] = None,
  feasibility_tol: float = 1e-5,
) -> Tuple[Array, ShieldInfo]:
  """Project an action onto ``{x : A x + b >= 0}`` (optionally within ``lower <= x <= upper``).

  The multi-constraint CBF-QP ``min |x - u|^2 s.t. A x + b >= 0`` (Ames et al.,
  arXiv:1903.11199). Per-example. Action bounds are added as constraint rows so the projection
  respects them (clipping after projecting can break the guarantee: `docs/safety.md`). A proposed
  action that is already feasible (within tolerance) is returned unchanged.

  Args:
    u: float ``[d]`` proposed action.
    A: float ``[m, d]`` constraint normals; b: float ``[m]`` offsets.
    method: ``"exact"`` (default): enumerates the ``2^m`` candidate active sets (``m`` counting
      bound rows, at most 12) and returns the exact projection, differentiable almost
      everywhere; cost ``O(2^m m^3)``. ``"dykstra"``: ``num_sweeps`` sweeps of Dykstra's
      alternating projections, ``O(num_sweeps m d)``, converging to the projection but not
      exactly feasible after finitely many sweeps (check ``info.slack``).
    num_sweeps: static sweep count for Dykstra, an int >= 1.
    lower, upper: optional float ``[d]`` action bounds.
    feasibility_tol: relative tolerance of the feasibility tests, a float > 0.

  Returns:
    ``(safe_action, ShieldInfo)``; ``slack`` has one entry per row of ``A`` followed by the
    ``lower`` rows and then the ``upper`` rows when given. If the constraint set is empty the
    exact method returns the candidate with the smallest worst violation (negative slack; if
    that candidate is the proposal itself, ``intervened`` is False).
  """
  chex.assert_rank([u, A, b], [1, 2, 1])
  chex.assert_type([u, A, b], float)
  chex.assert_equal_shape_prefix([A, b], 1)
  chex.assert_equal_shape_suffix([A, u], 1)
  mode = _projection_method(method)
  checks.integer("num_sweeps", num_sweeps, low=1)
  checks.number("feasibility_tol", feasibility_tol, low=0.0, low_open=True, arrays=True)
  d = u.shape[0]
  eye = jnp.eye(d, dtype=u.dtype)
  if lower is not None:
    chex.assert_equal_shape([u, lower])
    A, b = jnp.concatenate([A, eye]), jnp.concatenate([b, -lower.astype(b.dtype)])
  if upper is not None:
    chex.assert_equal_shape([u, upper])
    A, b = jnp.concatenate([A, -eye]), jnp.concatenate([b, upper.astype(b.dtype)])
  m = A.shape[0]
  if mode is ProjectionMethod.EXACT and m > MAX_EXACT_CONSTRAINTS:
    raise ValueError(
      f"A: the exact method takes at most {MAX_EXACT_CONSTRAINTS} constraint "
      f"rows including bounds, got {m}; use method='dykstra'"
    )

  u_slack = A @ u + b
  u_feasible = jnp.all(u_slack >= -_row_tolerance(A, b, u, feasibility_tol))
  if mode is ProjectionMethod.EXACT:
    projected, _ = _exact_projection(u, A, b, feasibility_tol)
  else:
    projected = _dykstra_projection(u, A, b, num_sweeps)
  x = jnp.where(u_feasible, u, projected)
  return x, ShieldInfo(intervened=jnp.any(x != u), correction=x - u, slack=A @ x + b)


def circle_cbf_shield(
  x: Array, u: Array, centres: Array, radii: Array, *, dt: float, gamma: float, margin: Numeric
) -> Tuple[Array, Array]:
  """CBF shield of a single integrator among discs, in the action box ``[-1, 1]^d``.

  The proposal ``u`` is first clipped to the box (an environment clips it anyway, so clipping
  alone is not an intervention); it is then projected onto ``{u : a_i.u + b_i >= 0 for every
  disc i, -1 <= u <= 1}`` with one linearised discrete-time CBF row per disc
  (`circle_cbf_constraint` with radius ``r_i + margin``) by the exact multi-constraint
  projection `polytope_project` (one sweep of single projections is not enough with several
  discs, and clipping after projecting can break the guarantee, hence the box rows inside the
  projection: `docs/safety.md`). Because each ``h_i`` is convex the linearisation is
  conservative: from any state with every margin-inflated barrier ``>= 0`` the next state keeps
  them ``>= (1 - gamma) h_i >= 0`` (up to ``feasibility_tol``), so without process noise the
  system never enters a disc (Ames et al., "Control Barrier Functions: Theory and Applications",
  arXiv:1903.11199). Per-example.

  Args:
    x: float ``[d]`` position; u: ``[d]`` proposed action (cast to float32).
    centres: float ``[m, d]`` disc centres; radii: float ``[m]``.
    dt, gamma, margin: as `circle_cbf_constraint`.

  Returns:
    ``(executed_action, intervened)``: the safe action ``[d]`` and a bool scalar, True where
    the projection changed the clipped proposal.
  """
  chex.assert_rank([x, u, centres, radii], [1, 1, 2, 1])
  chex.assert_equal_shape([x, u, centres[0]])
  chex.assert_equal_shape([centres[:, 0], radii])
  a, b = jax.vmap(
    lambda centre, radius: circle_cbf_constraint(
      x, centre, radius, dt=dt, gamma=gamma, margin=margin
    )
  )(centres, radii)
  proposal = jnp.clip(u.astype(jnp.float32), -1.0, 1.0)
  ones = jnp.ones_like(proposal)
  executed, info = polytope_project(proposal, a, b, lower=-ones, upper=ones)
  return executed, info.intervened


def dalal_safety_layer(a: Array, g: Array, c: Array, limit: Array) -> Tuple[Array, ShieldInfo]:
  """Dalal et al. safety layer: correct the action along the most violated linear constraint.

  With a learned linear cost model ``c_i(s') ~ c_i(s) + g_i(s).a`` and limits ``C_i``:
  ``lam_i = [(g_i.a + c_i - C_i) / (g_i.g_i)]_+``, ``i* = argmax lam_i`` and
  ``a* = a - lam_i* g_i*``. Dalal, Dvijotham, Vecerik, Hester, Paduraru, Tassa, "Safe
  Exploration in Continuous Action Spaces", arXiv:1801.08757, Sec. 4 (closed form under at most
  one active constraint; equation numbers not checked). Per-example. With several
  simultaneously active constraints the result can still violate the others (the paper assumes
  at most one); use `polytope_project` then.

  Args:
    a: float ``[d]`` proposed action. g: float ``[n, d]`` constraint sensitivities.
    c: float ``[n]`` current costs. limit: float ``[n]`` limits C_i.

  Returns:
    ``(safe_action, ShieldInfo)`` with ``slack = C - c - g a*``.
  """
  chex.assert_rank([a, g, c, limit], [1, 2, 1, 1])
  chex.assert_type([a, g, c, limit], float)
  chex.assert_equal_shape([c, limit])
  chex.assert_equal_shape_prefix([g, c], 1)
  chex.assert_equal_shape_suffix([g, a], 1)
  norm_sq = jnp.sum(jnp.square(g), axis=1)
  nonzero = norm_sq > 0
  multipliers = jnp.where(
    nonzero, jnp.maximum((g @ a + c - limit) / jnp.where(nonzero, norm_sq, 1.0), 0.0), 0.0
  )
  worst = jnp.argmax(multipliers)
  x = a - multipliers[worst] * g[worst]
  return x, ShieldInfo(intervened=jnp.any(x != a), correction=x - a, slack=limit - c - g @ x)


def _validate_units(units, num_rows: int) -> Tuple[Tuple[int, ...], ...]:
  try:
    parsed = tuple(tuple(unit) for unit in units)
  except TypeError:
    raise ValueError(
      f"units: expected a sequence of sequences of row indices, got {units!r}"
    ) from None
  if not parsed:
    raise ValueError(f"units: expected at least one unit, got {units!r}")
  flat = [row for unit in parsed for row in unit]
  if any(len(unit) == 0 for unit in parsed):
    raise ValueError(f"units: every unit must own at least one constraint, got {units!r}")
  if any(not isinstance(row, int) or isinstance(row, bool) for row in flat):
    raise ValueError(f"units: row indices must be ints, got {units!r}")
  if sorted(flat) != list(range(num_rows)):
    raise ValueError(
      f"units: expected a partition of the constraint rows 0..{num_rows - 1} "
      f"(each row owned by exactly one unit), got {units!r}"
    )
  return parsed


def hierarchical_shield(
  u: Array,
  A: Array,
  b: Array,
  units: Sequence[Sequence[int]],
  *,
  method: str = "exact",
  num_sweeps: int = 50,
  feasibility_tol: float = 1e-5,
) -> Tuple[Array, HierarchicalShieldInfo]:
  """Priority-ordered composition of shields, each owning a subset of constraint rows.

  After Shielded Controller Units (Nekoei, Blondin Masse, Hassani, Chandar, Mai,
  arXiv:2512.01046): the environment's constraints are split among units applied in a fixed
  order (a parent before its children). Unit ``k`` receives the action left by unit ``k - 1`` and
  projects it onto its own constraints intersected with those of all earlier units, so a later
  unit never undoes an earlier unit's guarantee and the final action satisfies every row. Each
  unit reports whether it intervened, which attributes corrections to the constraint owners.
  When the units' constraints involve disjoint action coordinates, the composition equals the
  joint projection.

  Per-example. Only the abstract of the SCU paper was available: this composition rule is our
  reading of "each SCU explicitly manages a subset of constraints", not the paper's equations.

  Args:
    u: float ``[d]`` proposed action. A: float ``[m, d]``; b: float ``[m]``.
    units: static partition of ``range(m)`` into non-empty tuples, in application order.
    method, num_sweeps, feasibility_tol: as in `polytope_project`, for every unit.

  Returns:
    ``(safe_action, HierarchicalShieldInfo)``.
  """
  chex.assert_rank([u, A, b], [1, 2, 1])
  chex.assert_type([u, A, b], float)
  chex.assert_equal_shape_prefix([A, b], 1)
  parsed = _validate_units(units, A.shape[0])
  x = u
  owned = []
  intervened, unit_actions = [], []
  for unit in parsed:
    owned.extend(unit)
    rows = jnp.asarray(owned)
    x, info = polytope_project(
      x, A[rows], b[rows], method=method, num_sweeps=num_sweeps, feasibility_tol=feasibility_tol
    )
    intervened.append(info.intervened)
    unit_actions.append(x)
  return x, HierarchicalShieldInfo(
    intervened=jnp.stack(intervened),
    unit_actions=jnp.stack(unit_actions),
    correction=x - u,
    slack=A @ x + b,
  )
