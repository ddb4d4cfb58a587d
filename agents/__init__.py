"""One module per agent: get_config, create, update, act (and make_train for on-policy agents).

`get(name)` returns the agent module a config's `agent` field names.
"""

import importlib

AGENTS = (
  "ppo",
  "sac",
  "dqn",
  "qmix",
  "ippo",
  "gmah",
  "macro_mixture",
  "latent_skills",
  "option_critic",
  "group_relative",
  "hi_agent",
  "gcivl",
  "hiql",
  "ota",
  "hilp",
  "smore",
  "ppo_lagrangian",
  "recovery_rl",
  "archer",
  "token_ppo",
  "token_filtered_bc",
  "token_grpo",
  "token_offline",
  "llm_grpo",
  "llm_archer",
  "llm_token_ppo",
  "llm_game_grpo",
)

# The metrics each agent's progress line shows after its update and step count: names of its
# training records (`<name>_sum` metrics appear as `<name>`, their mean over the episodes that
# ended) or, failing that, of its latest evaluation. Four rooms and the goal-reaching games
# count steps to the goal (`episode_length`); the safety agents show their episode cost and
# their Lagrange multiplier (`lagrange_multiplier`, or the learned `task_risk_nu` of the
# Lagrangian variants of recovery_rl); the goal-conditioned agents their success.
HEADLINE_METRICS = {
  "ppo": ("episode_return", "episode_length"),
  "sac": ("episode_return", "alpha"),
  "dqn": ("episode_return", "epsilon"),
  "qmix": ("episode_return", "epsilon"),
  "ippo": ("episode_return", "entropy"),
  "gmah": ("episode_return", "epsilon", "subgoal_coverage"),
  "macro_mixture": ("episode_length", "episode_return", "weight_entropy"),
  "latent_skills": ("episode_length", "episode_return", "prior_accuracy", "a_hi_norm"),
  "option_critic": ("episode_length", "episode_return", "option_termination_rate"),
  "group_relative": ("success_rate", "episode_length", "episode_return"),
  "hi_agent": ("success", "execution_rate", "episode_length"),
  "gcivl": ("value_loss", "actor_loss", "success"),
  "hiql": ("value_loss", "high_actor_loss", "low_actor_loss", "success"),
  "ota": ("high_value_loss", "value_loss", "low_actor_loss", "success"),
  "hilp": ("representation_loss", "skill_value_loss", "skill_actor_loss", "success"),
  "smore": ("score_loss", "value_loss", "actor_loss", "success"),
  "ppo_lagrangian": ("episode_return", "episode_cost", "lagrange_multiplier", "intervention_rate"),
  "recovery_rl": ("episode_return", "episode_cost", "intervention_rate", "task_risk_nu"),
  "archer": ("episode_return", "eval_return", "q_gap"),
  "token_ppo": ("episode_return", "episode_length"),
  "token_filtered_bc": ("episode_return", "kept_fraction"),
  "token_grpo": ("episode_return", "kl_to_reference"),
  "token_offline": ("loss", "eval_return"),
  "llm_grpo": ("reward", "correct", "formatted"),
  "llm_archer": ("episode_return", "valid_move_fraction"),
  "llm_token_ppo": ("episode_return", "valid_move_fraction"),
  "llm_game_grpo": ("episode_return", "lines", "valid_move_fraction"),
}
# Trained from a fixed dataset: their step count is of dataset samples, not environment steps.
OFFLINE_AGENTS = ("gcivl", "hiql", "ota", "hilp", "smore", "token_offline")


def get(name: str):
  """The module `hrljax.agents.<name>`; ValueError naming the known agents otherwise."""
  if name not in AGENTS:
    raise ValueError(f"agent: expected one of {list(AGENTS)}, got {name!r}")
  return importlib.import_module(f"hrljax.agents.{name}")
