"""Group-relative advantage estimators and the objectives specific to group methods.

Every estimator here compares a row (a response, a trajectory, an environment step) with the
other rows of its group (the responses to one prompt, the trajectories of one task). Groups span
the batch, so these functions are **batch-level**, not per-trajectory: they take the flat batch with

* ``group_ids``: int ``[B]`` in ``[0, num_groups)``; rows may come in any order and groups may
  have different sizes (verl's ``balance_batch`` reorders rows, so contiguity is never assumed);
* ``num_groups``: a static Python int (the number of segments; unused ids are empty groups);
* ``valid``: bool ``[B]`` (default all True). Invalid rows never touch any group statistic and get
  a zero advantage (the fix of verl PR #6452, where rows rejected by rollout correction still
  entered their group's mean and std).

Reductions use ``jax.ops.segment_*``. Group statistics are computed on values shifted by a member
of the group and with a two-pass variance, so a group of bit-identical rewards gives an advantage
of exactly zero in float32 (``docs/group_relative.md``). Advantages are returned under
``jax.lax.stop_gradient`` (targets carry no gradient). Combining an advantage with a clipped
surrogate, a KL estimator and an aggregation mode is the job of
``hrljax.losses.policy_gradient``; the losses here are only those specific to a group method.

Modules, one concept each (every public name is re-exported here, so
``from hrljax.losses import group_relative as gr; gr.grpo_advantages(...)`` works):

* ``normalize``: segment statistics, ``group_normalize``, layout helpers.
* ``grpo``: GRPO, Dr. GRPO, RLOO; DAPO's group filter and overlong penalty.
* ``anchors``: anchor-state ids on device (exact observation matches within a group).
* ``step_returns``: discounted step returns of ragged trajectories.
* ``gigpo``: GiGPO (episode plus anchor-state step advantages).
* ``rec``: REC, OPMD, AsymRE advantages and losses.
* ``hicra``, ``hbpo``, ``mgrpo``, ``disco``: one method each.
* ``gtpo``, ``llds``, ``alol``, ``p3o``, ``cgpo``: GTPO (Simoni et al.), LLDS, A-LoL, P3O and
  CGPO's CRPG / CRRAFT, one method each.
* ``step_credit``: SALT, SPA-RL, G-RA and Hi-Agent step credit from outcome rewards.
* ``two_level``: Hi-Agent's two-level group statistics (subgoals per state, actions per
  subgoal) over ragged groups.
* ``rover``, ``pacs``, ``unlikeliness``, ``rank_grpo``: ROVER, PACS, the unlikeliness reward
  and Rank-GRPO, one method each.
"""

from hrljax.losses.group_relative.alol import AlolExtras
from hrljax.losses.group_relative.alol import alol_loss
from hrljax.losses.group_relative.anchors import AnchorIds
from hrljax.losses.group_relative.anchors import anchor_state_ids
from hrljax.losses.group_relative.anchors import observation_hash
from hrljax.losses.group_relative.anchors import observation_words
from hrljax.losses.group_relative.cgpo import CgpoExtras
from hrljax.losses.group_relative.cgpo import crpg_loss
from hrljax.losses.group_relative.cgpo import crraft_loss
from hrljax.losses.group_relative.disco import DiscoExtras
from hrljax.losses.group_relative.disco import disco_loss
from hrljax.losses.group_relative.gigpo import GigpoAdvantages
from hrljax.losses.group_relative.gigpo import gigpo_advantages
from hrljax.losses.group_relative.gigpo import gigpo_grid_advantages
from hrljax.losses.group_relative.grpo import dr_grpo_advantages
from hrljax.losses.group_relative.grpo import grpo_advantages
from hrljax.losses.group_relative.grpo import informative_group_mask
from hrljax.losses.group_relative.grpo import overlong_penalty
from hrljax.losses.group_relative.grpo import OUTCOME_ESTIMATORS
from hrljax.losses.group_relative.grpo import outcome_advantages
from hrljax.losses.group_relative.grpo import rloo_advantages
from hrljax.losses.group_relative.gtpo import GtpoExtras
from hrljax.losses.group_relative.gtpo import gtpo_loss
from hrljax.losses.group_relative.hbpo import HbpoAdvantages
from hrljax.losses.group_relative.hbpo import hbpo_advantages
from hrljax.losses.group_relative.hbpo import hbpo_reward
from hrljax.losses.group_relative.hicra import hicra_advantages
from hrljax.losses.group_relative.hicra import hicra_verl_port_advantages
from hrljax.losses.group_relative.hicra import planning_token_mask
from hrljax.losses.group_relative.llds import LldsExtras
from hrljax.losses.group_relative.llds import llds_loss
from hrljax.losses.group_relative.mgrpo import Alignment
from hrljax.losses.group_relative.mgrpo import mgrpo_alignment
from hrljax.losses.group_relative.normalize import broadcast_to_tokens
from hrljax.losses.group_relative.normalize import contiguous_group_ids
from hrljax.losses.group_relative.normalize import group_normalize
from hrljax.losses.group_relative.normalize import group_normalize_dense
from hrljax.losses.group_relative.normalize import segment_count
from hrljax.losses.group_relative.normalize import segment_mean
from hrljax.losses.group_relative.normalize import segment_std
from hrljax.losses.group_relative.p3o import P3oExtras
from hrljax.losses.group_relative.p3o import p3o_loss
from hrljax.losses.group_relative.pacs import PacsExtras
from hrljax.losses.group_relative.pacs import PACS_CENTRINGS, pacs_loss
from hrljax.losses.group_relative.rank_grpo import RankGrpoExtras
from hrljax.losses.group_relative.rank_grpo import rank_grpo_advantages
from hrljax.losses.group_relative.rank_grpo import rank_grpo_loss
from hrljax.losses.group_relative.rank_grpo import rank_grpo_rewards
from hrljax.losses.group_relative.rec import RecAdvantages
from hrljax.losses.group_relative.rec import RecExtras
from hrljax.losses.group_relative.rec import TokenLossExtras
from hrljax.losses.group_relative.rec import asymre_advantages
from hrljax.losses.group_relative.rec import opmd_advantages
from hrljax.losses.group_relative.rec import opmd_loss
from hrljax.losses.group_relative.rec import rec_advantages
from hrljax.losses.group_relative.rec import rec_loss
from hrljax.losses.group_relative.rover import RoverExtras
from hrljax.losses.group_relative.rover import rover_loss
from hrljax.losses.group_relative.rover import rover_rewards
from hrljax.losses.group_relative.rover import uniform_policy_value
from hrljax.losses.group_relative.step_credit import GatedRewards
from hrljax.losses.group_relative.step_credit import SpaExtras
from hrljax.losses.group_relative.step_credit import foresight_rewards
from hrljax.losses.group_relative.step_credit import gated_reward_accumulation
from hrljax.losses.group_relative.step_credit import salt_advantages
from hrljax.losses.group_relative.step_credit import spa_progress_loss
from hrljax.losses.group_relative.step_credit import spa_step_rewards
from hrljax.losses.group_relative.step_returns import discounted_grid_returns
from hrljax.losses.group_relative.step_returns import discounted_step_returns
from hrljax.losses.group_relative.two_level import TwoLevelAdvantages
from hrljax.losses.group_relative.two_level import two_level_advantages
from hrljax.losses.group_relative.unlikeliness import UnlikelinessAdvantages
from hrljax.losses.group_relative.unlikeliness import group_ranks
from hrljax.losses.group_relative.unlikeliness import unlikeliness_advantages

__all__ = (
  # Segment statistics and normalisation.
  "segment_count",
  "segment_mean",
  "segment_std",
  "contiguous_group_ids",
  "group_normalize",
  "group_normalize_dense",
  "broadcast_to_tokens",
  # GRPO family and DAPO pieces.
  "grpo_advantages",
  "dr_grpo_advantages",
  "rloo_advantages",
  "OUTCOME_ESTIMATORS",
  "outcome_advantages",
  "informative_group_mask",
  "overlong_penalty",
  # Anchor states, step returns and GiGPO.
  "AnchorIds",
  "anchor_state_ids",
  "observation_words",
  "observation_hash",
  "discounted_step_returns",
  "discounted_grid_returns",
  "GigpoAdvantages",
  "gigpo_advantages",
  "gigpo_grid_advantages",
  # REC, OPMD, AsymRE.
  "RecAdvantages",
  "rec_advantages",
  "opmd_advantages",
  "asymre_advantages",
  "RecExtras",
  "rec_loss",
  "TokenLossExtras",
  "opmd_loss",
  # HICRA.
  "hicra_advantages",
  "hicra_verl_port_advantages",
  "planning_token_mask",
  # HBPO.
  "hbpo_reward",
  "HbpoAdvantages",
  "hbpo_advantages",
  # M-GRPO.
  "Alignment",
  "mgrpo_alignment",
  # DisCO.
  "DiscoExtras",
  "disco_loss",
  # GTPO (Simoni et al.), LLDS, A-LoL, P3O, CGPO.
  "GtpoExtras",
  "gtpo_loss",
  "LldsExtras",
  "llds_loss",
  "AlolExtras",
  "alol_loss",
  "P3oExtras",
  "p3o_loss",
  "CgpoExtras",
  "crpg_loss",
  "crraft_loss",
  # Step credit from outcome rewards.
  "salt_advantages",
  "spa_step_rewards",
  "SpaExtras",
  "spa_progress_loss",
  "GatedRewards",
  "gated_reward_accumulation",
  "foresight_rewards",
  # Hi-Agent's two-level groups (subgoals per state, actions per subgoal).
  "TwoLevelAdvantages",
  "two_level_advantages",
  # ROVER.
  "uniform_policy_value",
  "rover_rewards",
  "RoverExtras",
  "rover_loss",
  # PACS.
  "PacsExtras",
  "PACS_CENTRINGS",
  "pacs_loss",
  # Unlikeliness reward.
  "group_ranks",
  "UnlikelinessAdvantages",
  "unlikeliness_advantages",
  # Rank-GRPO.
  "rank_grpo_rewards",
  "rank_grpo_advantages",
  "RankGrpoExtras",
  "rank_grpo_loss",
)
