"""One module per agent: get_config, create, update, act (and make_train for on-policy agents).

`get(name)` returns the agent module a config's `agent` field names.
"""

import importlib

AGENTS = (
  "ppo",
  "sac",
  "option_critic",
  "group_relative",
  "gcivl",
  "hiql",
  "ota",
  "hilp",
  "ppo_lagrangian",
  "shielded_ppo",
  "recovery_rl",
  "bresa",
  "archer",
  "token_ppo",
  "token_filtered_bc",
  "token_grpo",
  "llm_grpo",
  "llm_archer",
)


def get(name: str):
  """The module `hrljax.agents.<name>`; ValueError naming the known agents otherwise."""
  if name not in AGENTS:
    raise ValueError(f"agent: expected one of {list(AGENTS)}, got {name!r}")
  return importlib.import_module(f"hrljax.agents.{name}")
