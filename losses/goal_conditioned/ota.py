"""OTA: the option-aware, temporally abstracted high-level value.

"Option-aware Temporally Abstracted Value for Offline Goal-Conditioned Reinforcement Learning"
(Ahn, Choi, Han, Moon, arXiv:2505.12737): one option of n env steps is one Bellman step of the
high-level value V^h, with reward −1 and one discount γ per option.
"""

from typing import NamedTuple, Tuple

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks as checks
from hrljax.losses import _masking
from hrljax.losses.goal_conditioned.value import IVLExtras, ivl_value_loss

Array = chex.Array
Numeric = chex.Numeric


class OTAOptionIndices(NamedTuple):
  """Option-terminal index arithmetic of OTA, elementwise over the input shape."""

  option_idx: Array  # int, o: the dataset index where the option terminates.
  goal_idx: Array  # int, the high-value goal (the option terminal when "cur" was drawn).
  reward: Array  # float, 1[o == g] − 1 (gc_negative) or 1[o == g].
  mask: Array  # float, 1 − 1[o == g].


def ota_option_indices(
  idx: Array,
  traj_end: Array,
  goal_idx: Array,
  traj_mask: Array,
  cur_mask: Array,
  n: int,
  gc_negative: bool = True,
) -> OTAOptionIndices:
  """OTA's option-terminal index o, high-value goal, reward and mask (pure index arithmetic).

  See "Option-aware Temporally Abstracted Value for Offline Goal-Conditioned Reinforcement
  Learning" by Ahn, Choi, Han, Moon (arXiv 2505.12737), option-aware value learning; read in the
  official code vendored in ktolnos/TTGS `impls/ota-v/utils/datasets.py:HGCDataset
  .sample_high_goals` @4408b01. Elementwise (any shape; e.g. [B]); the randomness (which goal,
  traj vs random, cur) stays in the sampler, so this function is deterministic:

    o = min(i + n, goal)      for a trajectory goal (the option ends early at the goal),
    o = min(i + n, traj_end)  for a random goal (time-out, clipped at the trajectory end);
    g := o if cur_mask (the "current-state" goal of the high value is the option terminal);
    reward = 1[o == g] − 1 and mask = 1 − 1[o == g] (success by index equality, as in OGBench).

  Args:
      idx: int array of dataset indices i.
      traj_end: int array, the index of the last state of i's trajectory.
      goal_idx: int array, the drawn goal (a future index of i's trajectory where traj_mask,
          else a uniformly random dataset index).
      traj_mask: bool array, True for a trajectory goal.
      cur_mask: bool array, True where the sampler drew the "current" goal.
      n: the abstraction factor (option length in env steps), an int >= 1 (OTA default 5).
      gc_negative: rewards 0/−1 (default, OGBench `gc_negative=True`) or 1/0.

  Returns:
      OTAOptionIndices (indices int32, reward/mask float32).
  """
  chex.assert_type([idx, traj_end, goal_idx], int)
  chex.assert_type([traj_mask, cur_mask], bool)
  chex.assert_equal_shape([idx, traj_end, goal_idx, traj_mask, cur_mask])
  checks.integer("n", n)
  checks.boolean("gc_negative", gc_negative)

  timeout_idx = jnp.minimum(idx + n, traj_end)
  early_idx = jnp.minimum(idx + n, goal_idx)
  option_idx = jnp.where(traj_mask, early_idx, timeout_idx)
  goal_idx = jnp.where(cur_mask, option_idx, goal_idx)
  success = (option_idx == goal_idx).astype(jnp.float32)
  reward = success - 1.0 if gc_negative else success
  return OTAOptionIndices(
    option_idx=option_idx, goal_idx=goal_idx, reward=reward, mask=1.0 - success
  )


def ota_option_value_target(
  r_option: Numeric, mask_option: Numeric, v_tgt_option: Array, high_discount: float
) -> Array:
  """OTA's option-aware TD target per head: y_i = r^h + γ·m^h·V̄^h_i(s_o, g).

  See OTA (Ahn et al., arXiv 2505.12737), the option-aware TD objective
  L(V^h, n) = E[L₂^τ(r(s^Ω, g) + γ·V̄^h(s^Ω, g) − V^h(s, g))]; vendored official
  `OTAAgent.high_value_loss`. Per-example: `v_tgt_option` is [E] (target high-value heads at
  the option terminal s_o). The reward is −1 per OPTION (not a sum of n per-step rewards) and
  one discount γ applies per option: γ, not γⁿ (the reference sets `high_discount = discount`).
  V^h therefore counts roughly −(number of options to the goal), the horizon contraction.
  Passing `high_discount=γ**n` gives the SMDP-style alternative, which is not OTA. Returns the
  target with its gradient stopped. Where m^h = 0 (the option reached the goal) V̄^h(s_o, g) is
  not read: whatever it holds, the target is r^h.

  Args:
      r_option: scalar float r^h from `ota_option_indices`.
      mask_option: scalar float m^h from `ota_option_indices`.
      v_tgt_option: [E] float target V̄^h(s_o, g).
      high_discount: γ in [0, 1] (OTA: equal to the low-level discount, 0.99).

  Returns:
      [E] targets.
  """
  chex.assert_rank([r_option, mask_option, v_tgt_option], [0, 0, 1])
  chex.assert_type([r_option, mask_option, v_tgt_option], float)
  checks.discount("high_discount", high_discount)
  (v_tgt_option,) = _masking.zero_masked(mask_option, v_tgt_option)
  return jax.lax.stop_gradient(r_option + high_discount * mask_option * v_tgt_option)


def ota_high_value_loss(
  v_tm1: Array,
  v_tgt_tm1: Array,
  v_tgt_option: Array,
  r_option: Numeric,
  mask_option: Numeric,
  high_discount: float,
  expectile: float,
  stop_target_gradients: bool = True,
) -> Tuple[Array, IVLExtras]:
  """OTA's high-level value loss for one example: IVL on (s_i, s_o, g) with γ per option.

  See OTA (Ahn et al., arXiv 2505.12737); vendored official `OTAAgent.high_value_loss`.
  Per-example (`jax.vmap` over the batch; or call `ivl_value_loss_batch` with
  `discount_t = high_discount * mask_option`). Identical to `ivl_value_loss` with the next state
  replaced by the option terminal s_o and discount γ·m^h (see `ota_option_value_target`):

    A = r^h + γ·m^h·min_i V̄^h_i(s_o, g) − mean_i V̄^h_i(s_i, g),
    L = Σ_i w(A)·(r^h + γ·m^h·V̄^h_i(s_o, g) − V^h_i(s_i, g))².

  Args:
      v_tm1: [E] online V^h(s_i, g).
      v_tgt_tm1: [E] target V̄^h(s_i, g).
      v_tgt_option: [E] target V̄^h(s_o, g); not read where m^h = 0.
      r_option, mask_option: scalar float r^h and m^h (`ota_option_indices`).
      high_discount: γ in [0, 1] (not γⁿ).
      expectile: τ in (0, 1), 0.7 in OTA.
      stop_target_gradients: as in `ivl_value_loss`.

  Returns:
      (scalar loss, IVLExtras).
  """
  chex.assert_rank([r_option, mask_option], 0)
  checks.discount("high_discount", high_discount)
  (v_tgt_option,) = _masking.zero_masked(mask_option, v_tgt_option)
  return ivl_value_loss(
    v_tm1,
    v_tgt_tm1,
    v_tgt_option,
    r_option,
    high_discount * mask_option,
    expectile,
    stop_target_gradients,
  )
