"""HILP: Hilbert representations, their value loss, the skill policy's losses, zero-shot prompts.

"Foundation Policies with Hilbert Representations" (Park, Kreiman, Levine, arXiv:2402.15567):
a representation φ with V(s, g) = −‖φ(s) − φ(g)‖ learned by action-free IQL (Sec. 4), a
latent-conditioned policy with reward (φ(s') − φ(s))ᵀz (Sec. 5), and zero-shot prompting.
"""

from typing import NamedTuple, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks
from hrljax.losses.goal_conditioned.value import IVLExtras, expectile_loss, ivl_value_loss

Array = chex.Array
Numeric = chex.Numeric


def hilp_value(phi_s: Array, phi_g: Array, eps_sq: float = 1e-6) -> Array:
  """HILP's distance-parametrised value V(s, g) = −‖φ(s) − φ(g)‖, as −√max(‖·‖², eps).

  See "Foundation Policies with Hilbert Representations" by Park, Kreiman, Levine
  (arXiv 2402.15567) (V(s, g) = −‖φ(s) − φ(g)‖); reference seohongpark/HILP
  `hilp_gcrl/src/special_networks.py:GoalConditionedPhiValue` (the eps floor is the reference's:
  it keeps the gradient finite at s = g, where V = −√eps). Elementwise over leading axes
  ([d] -> scalar, [E, d] -> [E], [B, E, d] -> [B, E]).

  Args:
      phi_s, phi_g: float arrays [..., d].
      eps_sq: floor of the squared distance, >= 0 (1e-6 in the reference).

  Returns:
      Values of shape phi_s.shape[:-1], all <= −√eps_sq.
  """
  chex.assert_rank([phi_s, phi_g], {1, 2, 3})
  chex.assert_type([phi_s, phi_g], float)
  chex.assert_equal_shape([phi_s, phi_g])
  checks.nonnegative("eps_sq", eps_sq)
  sq_dist = jnp.sum(jnp.square(phi_s - phi_g), axis=-1)
  return -jnp.sqrt(jnp.maximum(sq_dist, eps_sq))


def hilp_representation_loss(
  phi_s: Array,
  phi_g: Array,
  phi_tgt_s: Array,
  phi_tgt_next: Array,
  phi_tgt_g: Array,
  r_t: Numeric,
  discount_t: Numeric,
  expectile: float,
  eps_sq: float = 1e-6,
  stop_target_gradients: bool = True,
) -> Tuple[Array, IVLExtras]:
  """HILP's representation loss for one example: the IVL loss on V_i = −‖φ_i(s) − φ_i(g)‖.

  See HILP (Park, Kreiman, Levine, arXiv 2402.15567) (φ is learned by action-free
  expectile value learning on the Hilbert value); reference `hilp_gcrl/src/agents/hilp.py:
  compute_value_loss`, which is exactly OGBench's IVL loss (`ivl_value_loss`) with head i using
  its own φ_i (ensemble of E = 2 φ networks) and a Polyak target φ̄_i. Per-example.

  Gradient routing: the online heads differentiate through φ_i(s) AND φ_i(g); the target heads
  (φ̄ at s, s' and g) carry no gradient unless `stop_target_gradients=False`.

  Args:
      phi_s, phi_g: [E, d] online φ_i(s), φ_i(g).
      phi_tgt_s, phi_tgt_next, phi_tgt_g: [E, d] target φ̄_i(s), φ̄_i(s'), φ̄_i(g).
      r_t: scalar reward (0 at the goal, −1 otherwise).
      discount_t: scalar γ·mask (mask 0 at the goal); γ = 0.99 in `hilp_gcrl`.
      expectile: τ in (0, 1) (0.95 in `hilp_gcrl`; 0.5 in `hilp_zsrl`).
      eps_sq: squared-distance floor of `hilp_value`.
      stop_target_gradients: as in `ivl_value_loss`.

  Returns:
      (scalar loss, IVLExtras).
  """
  chex.assert_rank([phi_s, phi_g, phi_tgt_s, phi_tgt_next, phi_tgt_g], 2)
  chex.assert_equal_shape([phi_s, phi_g, phi_tgt_s, phi_tgt_next, phi_tgt_g])
  v_tm1 = hilp_value(phi_s, phi_g, eps_sq)
  v_tgt_tm1 = hilp_value(phi_tgt_s, phi_tgt_g, eps_sq)
  v_tgt_t = hilp_value(phi_tgt_next, phi_tgt_g, eps_sq)
  return ivl_value_loss(
    v_tm1, v_tgt_tm1, v_tgt_t, r_t, discount_t, expectile, stop_target_gradients
  )


def hilp_intrinsic_reward(phi_s: Array, phi_next: Array, z: Array) -> Array:
  """HILP skill reward r(s, s', z) = (φ(s') − φ(s))ᵀ z.

  See HILP (arXiv 2402.15567) (latent-conditioned policy reward); reference
  `hilp.py:loss_fn`, where φ is the FIRST ensemble member evaluated with the stored parameters
  (no gradient; stopped here too). Elementwise over leading axes ([d] -> scalar).

  Args:
      phi_s, phi_next, z: float arrays [..., d].

  Returns:
      Rewards of shape phi_s.shape[:-1].
  """
  chex.assert_rank([phi_s, phi_next, z], {1, 2})
  chex.assert_type([phi_s, phi_next, z], float)
  chex.assert_equal_shape([phi_s, phi_next, z])
  delta = jax.lax.stop_gradient(phi_next - phi_s)
  return jnp.sum(delta * z, axis=-1)


class SkillValueExtras(NamedTuple):
  """Per-example quantities of `hilp_skill_value_loss`."""

  q_target: Array  # [B] min_i Q̄_i(s, z, a), no gradient.
  diff: Array  # [B] q_target − V(s, z).


def hilp_skill_value_loss(
  q_tgt: Array, v: Array, expectile: float, stop_target_gradients: bool = True
) -> Tuple[Array, SkillValueExtras]:
  """HILP's skill value loss: mean_B L₂^τ(min_i Q̄_i(s, z, a) − V(s, z)), IQL's value loss.

  See HILP (Park, Kreiman, Levine, arXiv:2402.15567), Sec. 5: the latent-conditioned policy is
  trained with IQL ("Offline Reinforcement Learning with Implicit Q-Learning", Kostrikov, Nair,
  Levine, arXiv:2110.06169, Eq. 5) on the intrinsic reward; reference `hilp_gcrl/src/agents/
  hilp.py` (the value regresses on the minimum of the twin TARGET critics, τ = 0.9).
  Batch-level (mean over B); `expectile_loss` per element.

  Args:
      q_tgt: [B, E] target critics Q̄_i(s, z, a).
      v: [B] the online skill value V(s, z) (differentiated).
      expectile: τ in (0, 1).
      stop_target_gradients: stop the gradient of the critics' minimum (default).

  Returns:
      (scalar loss, SkillValueExtras).
  """
  chex.assert_rank([q_tgt, v], [2, 1])
  chex.assert_type([q_tgt, v], float)
  chex.assert_equal_shape_prefix([q_tgt, v], 1)
  checks.open_unit_interval("expectile", expectile)
  checks.boolean("stop_target_gradients", stop_target_gradients)
  q_target = jnp.min(q_tgt, axis=-1)
  if stop_target_gradients:
    q_target = jax.lax.stop_gradient(q_target)
  diff = q_target - v
  return jnp.mean(expectile_loss(diff, expectile)), SkillValueExtras(q_target=q_target, diff=diff)


class SkillCriticExtras(NamedTuple):
  """Per-example quantities of `hilp_skill_critic_loss`."""

  targets: Array  # [B] r + γ·V(s', z).
  td_errors: Array  # [B, E] Q_i(s, z, a) − target.


def hilp_skill_critic_loss(
  q_tm1: Array, r_t: Array, discount_t: Numeric, v_t: Array, stop_target_gradients: bool = True
) -> Tuple[Array, SkillCriticExtras]:
  """HILP's skill critic loss: mean_B Σ_i (Q_i(s, z, a) − r − γ·V(s', z))², IQL's critic loss.

  See HILP (arXiv:2402.15567), Sec. 5, and IQL (arXiv:2110.06169, Eq. 6), as in the reference
  `hilp_gcrl/src/agents/hilp.py`: the twin critics are summed, not averaged; r is the intrinsic
  reward `hilp_intrinsic_reward`. The reference applies no done mask (its offline trajectories end
  by a time limit, so every transition bootstraps: terminated is not truncated); pass
  `discount_t` = γ·mask to stop the bootstrap at a true termination. Batch-level (mean over B).

  Args:
      q_tm1: [B, E] online critics Q_i(s, z, a) (differentiated).
      r_t: [B] rewards.
      discount_t: scalar γ or [B] γ·mask.
      v_t: [B] the skill value V(s', z).
      stop_target_gradients: stop the gradient of the target (default).

  Returns:
      (scalar loss, SkillCriticExtras).
  """
  chex.assert_rank([q_tm1, r_t, v_t], [2, 1, 1])
  chex.assert_rank(discount_t, {0, 1})
  chex.assert_type([q_tm1, r_t, v_t], float)
  chex.assert_equal_shape([r_t, v_t, q_tm1[:, 0]])
  checks.boolean("stop_target_gradients", stop_target_gradients)
  targets = r_t + discount_t * v_t
  if stop_target_gradients:
    targets = jax.lax.stop_gradient(targets)
  td_errors = q_tm1 - targets[:, None]
  loss = jnp.mean(jnp.sum(jnp.square(td_errors), axis=-1))
  return loss, SkillCriticExtras(targets=targets, td_errors=td_errors)


def _normalize(x: Array, scale: float, eps: float) -> Array:
  norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True))
  return scale * x / jnp.maximum(norm, eps)


def hilp_goal_prompt(phi_s: Array, phi_g: Array, scale: float = 1.0, eps: float = 1e-8) -> Array:
  """HILP zero-shot goal-reaching skill z* = scale·(φ(g) − φ(s)) / ‖φ(g) − φ(s)‖.

  See HILP (arXiv 2402.15567) (zero-shot goal-conditioned RL; recomputed at every step).
  `hilp_gcrl` uses scale 1 (unit skills); `hilp_zsrl` uses √d. Deviation: the norm is floored
  at `eps` so that φ(g) = φ(s) gives z = 0 instead of NaN. Elementwise over leading axes.

  Args:
      phi_s, phi_g: float arrays [..., d].
      scale: the length of z, > 0.
      eps: norm floor, > 0.

  Returns:
      z of shape [..., d].
  """
  chex.assert_rank([phi_s, phi_g], {1, 2})
  chex.assert_type([phi_s, phi_g], float)
  chex.assert_equal_shape([phi_s, phi_g])
  checks.positive("scale", scale)
  checks.positive("eps", eps)
  return _normalize(phi_g - phi_s, scale, eps)


def hilp_reward_prompt(phi: Array, rewards: Array, scale: float = 1.0, eps: float = 1e-8) -> Array:
  """HILP zero-shot skill for a reward: z* = argmin_z Σ_i (r_i − φ_iᵀ z)², rescaled to `scale`.

  See HILP (arXiv 2402.15567) (zero-shot RL by linear regression of rewards on φ);
  reference `hilp_zsrl` (least squares, then normalised to √z_dim: pass `scale=√d`). Use
  φ(s') − φ(s) rows for the reference's `feature_type="diff"`. Batch-level (the N samples of
  one task).

  Args:
      phi: [N, d] features of the labelled states.
      rewards: [N] rewards.
      scale: the length of z, > 0.
      eps: norm floor, > 0.

  Returns:
      z [d].
  """
  chex.assert_rank([phi, rewards], [2, 1])
  chex.assert_type([phi, rewards], float)
  chex.assert_equal_shape_prefix([phi, rewards], 1)
  checks.positive("scale", scale)
  checks.positive("eps", eps)
  z, _, _, _ = jnp.linalg.lstsq(phi, rewards)
  return _normalize(z, scale, eps)


def hilp_sample_skills(key: chex.PRNGKey, num_skills: int, dim: int) -> Array:
  """Skills z ~ Unif(S^{d−1}) (normalised Gaussians), for the HILP skill policy.

  See HILP (arXiv 2402.15567). Pass a fresh key every update: the original code's jitted
  update reused one batch of skills throughout training (fixed on its master, README 2025-09-29).

  Args:
      key: a PRNG key.
      num_skills: int >= 1.
      dim: skill dimension d, int >= 1.

  Returns:
      [num_skills, dim] float32 unit vectors.
  """
  checks.integer("num_skills", num_skills)
  checks.integer("dim", dim)
  z = jax.random.normal(key, (num_skills, dim))
  return _normalize(z, 1.0, 1e-12)


def _nan_if_any_nan(result: Array, *inputs: Array) -> Array:
  """`result`, or all NaN when one of `inputs` has a NaN that a selection step would hide."""
  poisoned = jnp.any(jnp.stack([jnp.any(jnp.isnan(x)) for x in inputs]))
  return jnp.where(poisoned, jnp.asarray(jnp.nan, result.dtype), result)


def hilp_plan_midpoint(
  phi_s: Array, phi_goal: Array, phi_dataset: Array, k: int = 50, recursions: int = 3
) -> Array:
  """HILP-Plan: moves the goal feature to a midpoint between φ(s) and φ_goal, `recursions` times.

  See HILP (arXiv 2402.15567), test-time planning; reference `hilp_gcrl/jaxrl_m/evaluation.py`
  (50k dataset states, k = 50, 3 recursions). Each recursion keeps the k dataset features with
  the smallest max(‖φ_x − φ(s)‖, ‖φ_x − φ_goal‖) and replaces φ_goal by their mean. Per-example;
  the caller then prompts with `hilp_goal_prompt(phi_s, result)`.

  Args:
      phi_s: [d] φ(s).
      phi_goal: [d] φ(g).
      phi_dataset: [M, d] features of candidate dataset states, M >= k.
      k: number of nearest candidates averaged, int >= 1.
      recursions: int >= 1.

  Returns:
      [d] the planned goal feature; all NaN if any input has a NaN (a NaN distance makes the
      nearest-neighbour ranking undefined, and `top_k` would silently rank it anyway).
  """
  chex.assert_rank([phi_s, phi_goal, phi_dataset], [1, 1, 2])
  chex.assert_type([phi_s, phi_goal, phi_dataset], float)
  chex.assert_equal_shape([phi_s, phi_goal, phi_dataset[0]])
  checks.integer("k", k)
  checks.integer("recursions", recursions)
  if k > phi_dataset.shape[0]:
    num = phi_dataset.shape[0]
    raise ValueError(f"k: expected at most phi_dataset.shape[0]={num}, got {k}")
  phi_goal_in = phi_goal
  dist_s = jnp.linalg.norm(phi_dataset - phi_s[None, :], axis=-1)
  for _ in range(recursions):
    dist_goal = jnp.linalg.norm(phi_dataset - phi_goal[None, :], axis=-1)
    _, nearest = jax.lax.top_k(-jnp.maximum(dist_s, dist_goal), k)
    phi_goal = jnp.mean(phi_dataset[nearest], axis=0)
  return _nan_if_any_nan(phi_goal, phi_s, phi_goal_in, phi_dataset)
