"""Pure-function losses of hierarchical reinforcement learning, one module per family.

    from hrljax.losses import group_relative as gr
    advantages = gr.grpo_advantages(rewards, group_ids, num_groups)

A loss is a pure function of arrays (no network, optimizer, environment or global state) that
returns ``(loss, extras)`` or the quantity it names. Temporal losses take one trajectory (the
caller vmaps); group-relative ones take the flat batch with ``group_ids``. Loss modules import
only jax, chex, rlax, distrax, optax and each other.

Masked entries are never read. A position that a mask or validity flag leaves out (``mask``,
``token_mask``, ``valid``, ``keep``, an option of probability 0, a step that does not count) may
hold anything (-inf, +inf, NaN, 1e30: the log of a zero probability, padding never written): it
changes no loss, no extra and no gradient, and its own per-position extras are those of zeros
there (rec_loss's per-token ``ratio`` and ``keep`` diagnostics, documented, report every token as
given). Functions select rather than multiply by a 0/1 mask (``0 * inf`` is NaN), and select the
inputs before any operation that could turn them non-finite, not only the output (the cotangent
0 of a select times an infinite derivative is NaN again). A -inf logit or log-prob where the
semantics allow it (a masked action or vocabulary entry, an impossible option) gives the
mathematically right value with a finite gradient: ``p log p`` is 0 at ``p = 0``, as in distrax
and rlax. This is why the element-wise ``policy_gradient.clipped_surrogate_loss`` and
``kl_divergence`` take the token mask too: a select in ``aggregate`` alone cannot keep a padded
-inf log-prob out of the gradient.

Indices never gather silently. A function that takes indices (group ids, anchor ids, option and
action ids, delay slots) raises a ``ValueError`` naming the argument, the expected range and the
bad value when the indices are concrete; under ``jit`` or ``vmap`` a row whose index lies outside
its range is invalid: its advantage, loss, extras and gradient are 0 and it enters no statistic
(JAX would otherwise clamp the gather and read another group's or option's value).

``FAMILIES`` below is the index of the library: every family and its public functions. A family
module is imported on first use (``hrljax.losses.options`` or ``from hrljax.losses import
options``), so importing one family does not import the others.
"""

import importlib

FAMILIES = {
  # clipped surrogates, value loss, KL estimators, entropy, GAE, token aggregation
  "policy_gradient": (
    "generalized_advantage_estimation",
    "clipped_surrogate_loss",
    "sequence_log_ratio",
    "value_loss",
    "ppo_loss",
    "categorical_entropy",
    "kl_divergence",
    "aggregate",
    "masked_mean",
  ),
  # GRPO, Dr. GRPO, RLOO, DAPO pieces, GiGPO, REC/OPMD/AsymRE, HICRA, HBPO, M-GRPO, DisCO,
  # SALT, SPA-RL, G-RA, Hi-Agent
  "group_relative": (
    "segment_count",
    "segment_mean",
    "segment_std",
    "contiguous_group_ids",
    "group_normalize",
    "group_normalize_dense",
    "broadcast_to_tokens",
    "grpo_advantages",
    "dr_grpo_advantages",
    "rloo_advantages",
    "outcome_advantages",
    "informative_group_mask",
    "overlong_penalty",
    "anchor_state_ids",
    "observation_words",
    "observation_hash",
    "discounted_step_returns",
    "discounted_grid_returns",
    "gigpo_advantages",
    "gigpo_grid_advantages",
    "rec_advantages",
    "opmd_advantages",
    "asymre_advantages",
    "rec_loss",
    "opmd_loss",
    "hicra_advantages",
    "hicra_verl_port_advantages",
    "planning_token_mask",
    "hbpo_reward",
    "hbpo_advantages",
    "mgrpo_alignment",
    "disco_loss",
    "gtpo_loss",
    "llds_loss",
    "alol_loss",
    "p3o_loss",
    "crpg_loss",
    "crraft_loss",
    "salt_advantages",
    "spa_step_rewards",
    "spa_progress_loss",
    "gated_reward_accumulation",
    "foresight_rewards",
    "two_level_advantages",
    "uniform_policy_value",
    "rover_rewards",
    "rover_loss",
    "pacs_loss",
    "group_ranks",
    "unlikeliness_advantages",
    "rank_grpo_rewards",
    "rank_grpo_advantages",
    "rank_grpo_loss",
  ),
  # option-critic: intra-option targets, termination, intra-option policy gradient
  "options": (
    "value_over_options",
    "epsilon_greedy_option_probs",
    "softmax_option_probs",
    "sample_option",
    "select_option",
    "intra_option_q_target",
    "option_critic_loss",
    "option_segment_ends",
    "option_aware_n_step_returns",
    "intra_option_n_step_targets",
    "termination_loss",
    "trajectory_termination_loss",
    "intra_option_pg_loss",
  ),
  # goal-conditioned values, AWR actors, HIQL, OTA, HILP, HIRO/HAC relabelling, Dual RL / SMORe
  "goal_conditioned": (
    "expectile_loss",
    "awr_weights",
    "awr_loss",
    "ivl_value_loss",
    "ivl_value_loss_batch",
    "length_normalize",
    "hiql_low_advantage",
    "hiql_high_advantage",
    "hiql_low_actor_loss",
    "hiql_high_actor_loss",
    "hiql_actor_losses",
    "ota_option_indices",
    "ota_option_value_target",
    "ota_high_value_loss",
    "hilp_value",
    "hilp_representation_loss",
    "hilp_intrinsic_reward",
    "hilp_skill_value_loss",
    "hilp_skill_critic_loss",
    "hilp_goal_prompt",
    "hilp_reward_prompt",
    "hilp_sample_skills",
    "hilp_plan_midpoint",
    "hiro_goal_transition",
    "hiro_low_reward",
    "hiro_candidate_goals",
    "hiro_propagate_goals",
    "hiro_relabel",
    "hac_target",
    "hac_goal_reward",
    "hac_hindsight_action",
    "hac_hindsight_goals",
    "hac_subgoal_test_penalty",
    "dual_f",
    "dual_conjugate",
    "dual_ratio",
    "dual_v_loss",
    "fdvl_value_loss",
    "fdvl_critic_loss",
    "fdvl_actor_loss",
    "smore_score_loss",
    "smore_value_loss",
    "smore_actor_loss",
  ),
  # ArCHer utterance-level critics and token-level actor, token-level GAE over dialogues
  "hierarchical_critics": (
    "archer_q_targets",
    "archer_v_targets",
    "archer_critic_loss",
    "archer_advantage",
    "mean_over_samples",
    "archer_sample_mean_baseline",
    "archer_standardized_advantage",
    "archer_actor_loss",
    "archer_baseline_actor_loss",
    "offline_archer_critic_loss",
    "offline_archer_actor_loss",
    "filtered_bc_mask",
    "filtered_bc_loss",
    "chai_select",
    "token_stream",
    "token_level_advantages",
    "normalize_token_advantages",
  ),
  # safety critics, Lagrange multipliers, shields, projections, Recovery RL's recovery policy
  "safety": (
    "risk_value",
    "qrisk_td_target",
    "qrisk_loss",
    "reflex_select",
    "sqrl_target",
    "sqrl_loss",
    "sqrl_actor_penalty",
    "sqrl_lambda_loss",
    "csc_loss",
    "lagrange_init",
    "lagrange_update",
    "lagrange_update_with_optimizer",
    "lagrange_multiplier_loss",
    "pid_lagrange_init",
    "pid_lagrange_update",
    "augmented_lagrangian_penalty",
    "per_step_cost_budget",
    "ppo_lag_advantage",
    "lagrangian_combine",
    "sac_lag_actor_loss",
    "halfspace_project",
    "circle_cbf_constraint",
    "circle_cbf_shield",
    "polytope_project",
    "dalal_safety_layer",
    "hierarchical_shield",
    "critic_projection",
    "nearest_safe_action",
    "safe_sampling",
    "sampling_offsets",
    "task_recovery_loss",
  ),
  # soft actor-critic: soft Q target, twin-critic, actor and temperature losses
  "soft_actor_critic": (
    "soft_q_target",
    "critic_loss",
    "actor_loss",
    "temperature_loss",
  ),
  # PULSE's latent skills: KL to the learned prior, latent smoothness, distillation, residual skill
  "latent_skills": (
    "gaussian_kl",
    "ar_smoothness",
    "residual_skill",
    "distillation_loss",
  ),
  # value-based: (double) DQN target and loss, QMIX's monotonic mixer and its TD loss, SMDP target
  "value_based": (
    "q_learning_target",
    "q_learning_loss",
    "monotonic_mix",
    "smdp_target",
    "qmix_loss",
    # MacroHFT's hyper-agent: mixture of frozen experts, its target, memory lookup, KL, loss
    "expert_mixture",
    "expert_mixture_target",
    "episodic_memory_lookup",
    "demonstration_kl",
    "expert_mixture_loss",
  ),
}

__all__ = tuple(FAMILIES)


def __getattr__(name: str):
  if name in FAMILIES:
    return importlib.import_module(f"{__name__}.{name}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(FAMILIES))
