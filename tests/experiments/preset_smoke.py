"""The smoke runs of the presets in `experiments/configs/`, shared by the `test_configs_*` files.

One preset per agent trains through the driver; a preset whose agent another preset already
trains there, or whose agent's own test runs the learner (a whole run, or init and steps: test
ids in `TRACED`), is validated and traced instead: its learner's init, one step and the
evaluation, abstractly (`jax.eval_shape`), which finds every config, shape and dtype error of
its code path without paying for a compilation; and, where no preset of its agent trains, a
checkpoint of its run state (zeros of the traced shapes) is saved and restored as the driver
does. Each preset runs with tiny overrides (network widths, budgets, dataset and game sizes) through
`experiments.train.experiment`, the function behind `python -m experiments.train`: validation,
the agent's learner, `training.run`, logging, checkpointing and the final evaluation. The
overrides keep every run to a few seconds of compiled work; they change sizes, never the code path.
"""

import importlib
import math
import os

import jax

from experiments import train as train_cli
from hrljax import checkpoint
from hrljax.logging import read_jsonl

CONFIG_DIR = os.path.join(
  os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
  "experiments",
  "configs",
)
NOT_PRESETS = {"__init__", "token_game_common", "pointhazard_layouts"}  # shared pieces of presets
PRESETS = sorted(
  name[:-3]
  for name in os.listdir(CONFIG_DIR)
  if name.endswith(".py") and name[:-3] not in NOT_PRESETS
)

RUN = {"log_every": 2, "checkpoint_every": 2, "eval_every": 0}
FOUR_ROOMS = {"eval_episodes": 4, "rollout_unroll": 1}
# the sizes of tests/agents/test_group_relative_agent.py, so the compilation cache shares programs
GROUPED = {
  **FOUR_ROOMS,
  "num_groups": 2,
  "group_size": 4,
  "num_steps": 8,
  "total_timesteps": 128,
  "update_epochs": 2,
  "num_minibatches": 2,
  "hidden_sizes": (16,),
}

# Hi-Agent: GROUPED's tasks, widths, passes and budget (4 updates of 2 tasks x 2 decisions x
# 2 subgoals x 2 segments x 2 steps); tests/agents/test_hi_agent.py uses the same sizes.
HI_AGENT = {
  **FOUR_ROOMS,
  "num_groups": GROUPED["num_groups"],
  "num_decisions": 2,
  "num_subgoals": 2,
  "num_segments": 2,
  "segment_steps": 2,
  "subgoal_radius": 1,
  "total_timesteps": GROUPED["total_timesteps"],
  "update_epochs": GROUPED["update_epochs"],
  "num_minibatches": GROUPED["num_minibatches"],
  "hidden_sizes": GROUPED["hidden_sizes"],
}

# Off-policy safety runs: a few Learner steps of 2 environments (Bresa: K = 10 control steps per
# decision, so 4 Learner steps of 2 x 10).
OFF_POLICY = {
  "total_timesteps": 48,
  "learning_starts": 16,
  "batch_size": 16,
  "num_envs": 2,
  "hidden_sizes": (16,),
  "buffer_size": 64,
  "eval_episodes": 2,
}
RISK = {
  "risk_hidden_sizes": (16,),
  "risk_batch_size": 16,
  "risk_buffer_size": 64,
  "risk_pretrain_updates": 2,
}
BRESA = {
  **OFF_POLICY,
  **RISK,
  "total_timesteps": 80,
  "learning_starts": 40,
  "risk_updates_per_step": 2,
}
PPO_HAZARD = {
  "num_envs": 4,
  "num_steps": 20,
  "total_timesteps": 4 * 20 * 4,
  "update_epochs": 1,
  "num_minibatches": 2,
  "hidden_sizes": (16, 16),
  "eval_episodes": 2,
}
# Offline runs read the random-walk dataset of tests/conftest.py; one OGBench evaluation episode
# of 10 steps per task smokes the host evaluation too.
OFFLINE = {
  "num_updates": 2,
  "batch_size": 8,
  "value_hidden_sizes": (8,),
  "actor_hidden_sizes": (8,),
  "eval_episodes": 1,
  "eval_max_episode_steps": 10,
}
TOKEN_GAME = {
  "d_model": 16,
  "num_layers": 1,
  "num_heads": 2,
  "bc_steps": 20,
  "bc_batch_size": 8,
  "bc_dataset_episodes": 8,
  "eval_episodes": 8,
  "total_timesteps": 192,
}
# SmolLM2 truncated to its first layer, LoRA rank 2, two updates.
LLM = {"num_layers": 1, "lora_rank": 2, "lora_alpha": 4.0, "num_updates": 2, "max_new_tokens": 4}
# The text-game presets without the shared prompt beginning (a second prefill and forward per
# program to compile): test_llm_archer runs it on SmolLM2, test_llm_game_grpo checks it.
TEXT_GAME = {**LLM, "shared_prompt_prefix": False}

# The value-based multi-agent presets (QMIX, and GMAH with its low level) on MPE and the rooms.
QMIX_TINY = {
  "total_timesteps": 2 * 2 * 4,
  "num_envs": 2,
  "num_steps": 2,
  "learning_starts": 4,
  "batch_size": 8,
  "buffer_size": 32,
  "target_update_interval": 2,
  "hidden_sizes": (16,),
  "mixer_embed_dim": 8,
  "hypernet_hidden": 8,
  "eval_episodes": 2,
}
GMAH_TINY = {**QMIX_TINY, "low_hidden_sizes": (16,)}

# preset -> (overrides, a file argument of the config or None). Several presets of one agent
# share the compiled shapes where they can.
SMOKE = {
  "ppo_cartpole": (
    {
      "total_timesteps": 4 * 16 * 4,
      "num_steps": 16,
      "update_epochs": 1,
      "num_minibatches": 2,
      "eval_episodes": 4,
    },
    None,
  ),
  "ppo_fourrooms": (
    {
      **FOUR_ROOMS,
      "total_timesteps": 16 * 16 * 4,
      "num_steps": 16,
      "update_epochs": 1,
      "num_minibatches": 2,
    },
    None,
  ),
  "option_critic_fourrooms": ({**FOUR_ROOMS, "total_timesteps": 16 * 8 * 4}, None),
  "dqn_cartpole": (
    {
      "total_timesteps": 2 * 2 * 4,
      "num_envs": 2,
      "num_steps": 2,
      "learning_starts": 4,
      "batch_size": 8,
      "buffer_size": 32,
      "target_update_interval": 2,
      "hidden_sizes": (16,),
      "eval_episodes": 4,
    },
    None,
  ),
  "qmix_simple_spread": (QMIX_TINY, None),
  "qmix_two_agent_rooms_random_split": (QMIX_TINY, None),
  "ippo_simple_spread": (
    {
      "total_timesteps": 2 * 4 * 2,
      "num_envs": 2,
      "num_steps": 4,
      "update_epochs": 1,
      "num_minibatches": 2,
      "hidden_sizes": (8,),
      "eval_episodes": 2,
    },
    None,
  ),
  "gmah_simple_spread": (GMAH_TINY, None),
  "gmah_two_agent_rooms": (GMAH_TINY, None),
  "gmah_two_agent_rooms_split": (GMAH_TINY, None),
  "gmah_two_agent_rooms_random_split": (GMAH_TINY, None),
  "dqn_fourrooms": (
    {
      **FOUR_ROOMS,
      "total_timesteps": 2 * 2 * 4,
      "num_envs": 2,
      "learning_starts": 4,
      "batch_size": 8,
      "buffer_size": 32,
      "target_update_interval": 2,
      "hidden_sizes": (16,),
    },
    "lower_right",
  ),
  "macro_mixture_fourrooms": (
    {
      **FOUR_ROOMS,
      "total_timesteps": 2 * 2 * 4,
      "num_envs": 2,
      "learning_starts": 4,
      "batch_size": 8,
      "buffer_size": 32,
      "memory_size": 8,
      "num_neighbours": 2,
      "hyper_hidden_size": 8,
    },
    "soft",
  ),
  "grpo_fourrooms": (GROUPED, None),
  "gigpo_fourrooms": (GROUPED, None),
  "hi_agent_fourrooms": (HI_AGENT, None),
  "ppo_doorkey": (
    {
      **FOUR_ROOMS,
      "total_timesteps": 16 * 16 * 4,
      "num_steps": 16,
      "update_epochs": 1,
      "num_minibatches": 2,
      "hidden_sizes": (16,),
    },
    None,
  ),
  "option_critic_doorkey": (
    {**FOUR_ROOMS, "total_timesteps": 16 * 8 * 4, "hidden_sizes": (16,)},
    None,
  ),
  "latent_skills_distill_fourrooms": (
    {
      **FOUR_ROOMS,
      "total_timesteps": 4 * 8 * 4,
      "num_envs": 4,
      "num_steps": 8,
      "latent_dim": 2,
      "skill_hidden_sizes": (16,),
      "distill_epochs": 1,
      "num_minibatches": 2,
    },
    None,
  ),
  "latent_skills_fourrooms": (
    {
      **FOUR_ROOMS,
      "total_timesteps": 4 * 8 * 4,
      "num_envs": 4,
      "num_steps": 8,
      "update_epochs": 1,
      "num_minibatches": 2,
      "hidden_sizes": (16,),
    },
    None,
  ),
  "ppo_fourrooms_moved": (  # also the expert of the latent-skills presets (`tiny_skill_run`)
    {
      **FOUR_ROOMS,
      "total_timesteps": 4 * 8 * 4,
      "num_envs": 4,
      "num_steps": 8,
      "update_epochs": 1,
      "num_minibatches": 2,
      "hidden_sizes": (16,),
    },
    None,
  ),
  "sac_pendulum": ({**OFF_POLICY}, None),
  "sac_pointhazard": (OFF_POLICY, None),
  "recovery_rl_pointhazard": ({**OFF_POLICY, **RISK}, None),
  "recovery_rl_lagrangian_pointhazard": ({**OFF_POLICY, **RISK}, None),
  "bresa_pointhazard": (BRESA, None),
  "bresa_lagrangian_pointhazard": (BRESA, "random_hazards"),  # also covers a layout argument
  "ppo_pointhazard": (PPO_HAZARD, None),
  "ppo_lagrangian_pointhazard": (PPO_HAZARD, None),
  "ppo_pid_lagrangian_pointhazard": (PPO_HAZARD, None),
  "shielded_ppo_pointhazard": (PPO_HAZARD, None),
  "gcivl_pointmaze": (OFFLINE, None),
  "hiql_pointmaze": ({**OFFLINE, "subgoal_steps": 5}, None),
  "ota_pointmaze": ({**OFFLINE, "subgoal_steps": 5}, None),
  "hilp_pointmaze": ({**OFFLINE, "skill_dim": 4}, None),
  "smore_pointmaze": ({**OFFLINE, "score_hidden_sizes": (8,)}, None),
  "archer_token_game": (
    {
      **TOKEN_GAME,
      "critic_d_model": 16,
      "critic_num_layers": 1,
      "num_envs": 8,
      "num_steps": 4,
      "batch_size": 16,
      "critic_updates": 2,
      "actor_updates": 1,
      "warmup_iters": 1,
      "warmup_q_gap": 0.0,
      "buffer_size": 256,
      "train_eval_episodes": 4,
    },
    None,
  ),
  "token_ppo_token_game": (
    {
      **TOKEN_GAME,
      "value_d_model": 16,
      "num_envs": 8,
      "num_steps": 4,
      "update_epochs": 2,
      "num_minibatches": 2,
    },
    None,
  ),
  "token_filtered_bc_token_game": (
    {**TOKEN_GAME, "num_envs": 8, "bc_updates": 2, "batch_size": 8},
    None,
  ),
  "token_grpo_token_game": (
    {**TOKEN_GAME, "num_groups": 2, "group_size": 4, "num_minibatches": 2},
    None,
  ),
  "token_offline_token_game": (
    {
      **{k: v for k, v in TOKEN_GAME.items() if k != "total_timesteps"},
      "dataset_episodes": 8,
      "num_updates": 2,
      "batch_size": 8,
    },
    None,
  ),
  "archer_smollm2_game": (
    {
      **LLM,
      "num_envs": 2,
      "critic_updates": 2,
      "warmup_iters": 1,
      "batch_size": 4,
      "critic_d_model": 16,
      "eval_episodes": 2,
    },
    None,
  ),
  "grpo_smollm2_arithmetic": (
    {**LLM, "num_prompts": 2, "samples_per_prompt": 2, "eval_problems": 2, "update_epochs": 1},
    None,
  ),
  "token_ppo_smollm2_game": (
    {**TEXT_GAME, "num_envs": 2, "num_steps": 2, "value_llm_layers": 1, "eval_episodes": 2},
    None,
  ),
  "grpo_smollm2_game": (
    {**TEXT_GAME, "num_groups": 1, "group_size": 2, "eval_episodes": 2},
    None,
  ),
}
OFFLINE_PRESETS = {
  "gcivl_pointmaze",
  "hiql_pointmaze",
  "ota_pointmaze",
  "hilp_pointmaze",
  "smore_pointmaze",
}
# Mixtures of frozen experts: trained on the experts of `tiny_expert_runs`.
EXPERT_MIXTURE_PRESETS = {"macro_mixture_fourrooms"}
# latent skills: the distillation needs a trained PPO run, the high level a distillation run
SKILL_PRESETS = {
  "latent_skills_distill_fourrooms": "expert_run",
  "latent_skills_fourrooms": "skill_run",
}
# One test file per group, so that the test workers (one file each at a time) share the load.
GROUPS = {
  "online": [
    "ppo_cartpole",
    "ppo_fourrooms",
    "option_critic_fourrooms",
    "dqn_cartpole",
    "dqn_fourrooms",
    "macro_mixture_fourrooms",
    "qmix_simple_spread",
    "qmix_two_agent_rooms_random_split",
    "ippo_simple_spread",
    "gmah_simple_spread",
    "gmah_two_agent_rooms",
    "gmah_two_agent_rooms_split",
    "gmah_two_agent_rooms_random_split",
    "grpo_fourrooms",
    "gigpo_fourrooms",
    "hi_agent_fourrooms",
    "ppo_doorkey",
    "option_critic_doorkey",
    "latent_skills_distill_fourrooms",
    "latent_skills_fourrooms",
    "ppo_fourrooms_moved",
  ],
  "safety_on_policy": [
    "ppo_pointhazard",
    "ppo_lagrangian_pointhazard",
    "ppo_pid_lagrangian_pointhazard",
    "shielded_ppo_pointhazard",
  ],
  "safety_off_policy": [
    "sac_pendulum",
    "sac_pointhazard",
    "recovery_rl_pointhazard",
    "recovery_rl_lagrangian_pointhazard",
    "bresa_pointhazard",
    "bresa_lagrangian_pointhazard",
  ],
  "offline": sorted(OFFLINE_PRESETS),
  "token_game": [
    "archer_token_game",
    "token_ppo_token_game",
    "token_filtered_bc_token_game",
    "token_grpo_token_game",
    "token_offline_token_game",
  ],
  "smollm2": [
    "archer_smollm2_game",
    "grpo_smollm2_arithmetic",
    "token_ppo_smollm2_game",
    "grpo_smollm2_game",
  ],
}
# preset -> the preset that trains the same agent through the driver, or the test that runs the
# agent's learner (`path::test`)
TRACED = {
  "ppo_fourrooms": "ppo_cartpole",
  "ppo_pointhazard": "ppo_lagrangian_pointhazard",
  "grpo_fourrooms": "tests/agents/test_group_relative_agent.py::test_gigpo_learns_fourrooms",
  "gigpo_fourrooms": "tests/agents/test_group_relative_agent.py::test_gigpo_learns_fourrooms",
  "hi_agent_fourrooms": "tests/agents/test_hi_agent.py::"
  "test_both_levels_learn_what_they_are_rewarded_for",
  "sac_pointhazard": "tests/experiments/test_safety_table.py::"
  "test_off_policy_row_has_training_and_evaluation_numbers_per_seed",  # agent recovery_rl
  "recovery_rl_pointhazard": "tests/experiments/test_safety_table.py::"
  "test_off_policy_row_has_training_and_evaluation_numbers_per_seed",  # through the driver
  "recovery_rl_lagrangian_pointhazard": "tests/experiments/test_safety_table.py::"
  "test_off_policy_row_has_training_and_evaluation_numbers_per_seed",
  "bresa_pointhazard": "tests/agents/test_bresa.py::test_two_rate_run_is_deterministic_and_evaluates",
  "bresa_lagrangian_pointhazard": "tests/agents/test_task_risk_penalty.py::"
  "test_jitted_learner_trains_the_multiplier_only_after_pre_training",  # agent recovery_rl
  "ppo_pid_lagrangian_pointhazard": "ppo_lagrangian_pointhazard",
  "shielded_ppo_pointhazard": "ppo_lagrangian_pointhazard",
  "gcivl_pointmaze": "tests/agents/test_gcivl.py::test_learner_step_is_deterministic_and_acts_in_bounds",
  "ppo_doorkey": "ppo_cartpole",
  "option_critic_doorkey": "option_critic_fourrooms",
  "dqn_fourrooms": "dqn_cartpole",
  "latent_skills_fourrooms": "latent_skills_distill_fourrooms",
  "ppo_fourrooms_moved": "ppo_cartpole",
  "archer_token_game": "tests/agents/test_archer.py::test_replayed_transitions_keep_terminated_and_the_true_successor",
  "token_grpo_token_game": "tests/agents/test_token_grpo.py::test_short_run_changes_params_and_stays_finite",
  "ota_pointmaze": "tests/agents/test_ota.py::test_learner_step_is_deterministic_and_acts_like_hiql",
  "hilp_pointmaze": "tests/agents/test_hilp.py::"
  "test_update_polyaks_phi_and_critic_with_pre_step_parameters",
  "sac_pendulum": "tests/agents/test_sac.py::test_sac_learns_pendulum",
  "token_ppo_token_game": "tests/agents/test_token_ppo.py::"
  "test_short_run_changes_params_and_stays_finite",
  "smore_pointmaze": "tests/agents/test_smore.py::"
  "test_learner_steps_are_deterministic_act_in_bounds_and_evaluate",
  "token_offline_token_game": "tests/agents/test_token_offline.py::"
  "test_short_run_moves_the_policy_and_keeps_the_reference",
  "token_filtered_bc_token_game": "tests/agents/test_token_filtered_bc.py::"
  "test_short_run_stays_finite_and_counts_utterances",
  "gmah_simple_spread": "tests/agents/test_gmah.py::test_a_tiny_run_is_one_program_with_finite_metrics",
  "gmah_two_agent_rooms": "tests/agents/test_gmah.py::"
  "test_a_learner_step_and_an_evaluation_in_four_rooms",
  "gmah_two_agent_rooms_split": "tests/agents/test_gmah.py::"
  "test_a_learner_step_and_an_evaluation_in_four_rooms",
  "gmah_two_agent_rooms_random_split": "tests/agents/test_gmah.py::"
  "test_a_learner_step_and_an_evaluation_in_four_rooms",
  "macro_mixture_fourrooms": "tests/agents/test_macro_mixture.py::"
  "test_a_few_updates_train_the_hyper_agent_and_leave_the_experts_frozen",
  "qmix_simple_spread": "tests/agents/test_qmix.py::test_a_tiny_vdn_run_is_one_program_with_finite_metrics",
  "qmix_two_agent_rooms_random_split": "tests/agents/test_qmix.py::"
  "test_a_tiny_qmix_run_on_the_two_agent_four_rooms_has_finite_metrics_and_its_shapes",
  # host-driven SmolLM2 agents: validated as the driver does; the named test runs the agent (on
  # SmolLM2 cut to its first layers, or through the driver's loop on the tiny model);
  # llm_token_ppo's preset trains here
  "archer_smollm2_game": "tests/agents/test_llm_archer.py::"
  "test_one_archer_iteration_on_the_truncated_smollm2_with_its_pretrained_critic",
  "grpo_smollm2_arithmetic": "tests/agents/test_llm_grpo.py::test_one_grpo_step_on_the_truncated_smollm2",
  "grpo_smollm2_game": "tests/agents/test_llm_game_grpo.py::test_run_logs_and_resumes_exactly",
}


def load_preset(name: str, argument=None):
  module = importlib.import_module(f"experiments.configs.{name}")
  return module.get_config() if argument is None else module.get_config(argument)


def smoke_config(preset, request):
  """The preset's config with the run settings and its smoke overrides."""
  overrides, argument = SMOKE[preset]
  config = load_preset(preset, argument)
  for field, value in {**RUN, **overrides}.items():
    config[field] = value
  if preset in OFFLINE_PRESETS:
    config.dataset_path = request.getfixturevalue("random_walk_path")
  if preset in EXPERT_MIXTURE_PRESETS:
    config.expert_runs = tiny_expert_runs(request)
  if preset in SKILL_PRESETS:
    config[SKILL_PRESETS[preset]] = tiny_skill_run(request, SKILL_PRESETS[preset])
  return config


def tiny_expert_runs(request) -> tuple:
  """The frozen experts of a mixture preset: one smoke run of dqn_fourrooms, named twice (the
  mixture needs trained Q-networks of one architecture, not good ones)."""
  workdir = str(request.getfixturevalue("tmp_path_factory").mktemp("experts") / "expert")
  train_cli.experiment(smoke_config("dqn_fourrooms", request), workdir)
  return (workdir, workdir)


_SKILL_RUNS: dict = {}  # test session's base temp -> {"expert_run": ..., "skill_run": ...}


def tiny_skill_run(request, field: str) -> str:
  """The workdir a latent-skills preset reads: `"expert_run"`, a smoke run of
  ppo_fourrooms_moved (the expert: any trained PPO run on four rooms will do), or
  `"skill_run"`, a smoke run of the distillation from it (the skill model); each trained once
  per test session, when first asked for."""
  factory = request.getfixturevalue("tmp_path_factory")
  runs = _SKILL_RUNS.setdefault(factory.getbasetemp(), {})
  if "expert_run" not in runs:
    runs["expert_run"] = str(factory.mktemp("skills") / "expert")
    train_cli.experiment(smoke_config("ppo_fourrooms_moved", request), runs["expert_run"])
  if field == "skill_run" and field not in runs:
    workdir = str(factory.mktemp("skills") / "distill")
    train_cli.experiment(smoke_config("latent_skills_distill_fourrooms", request), workdir)
    runs[field] = workdir
  return runs[field]


def smoke_test(preset, tmp_path, request):
  """`trace_preset` for the presets in `TRACED`, `train_preset` for the others."""
  if preset in TRACED:
    trace_preset(preset, request)
  else:
    train_preset(preset, tmp_path, request)


def trace_preset(preset, request):
  """Validates `preset` as the driver does and traces its learner: a step keeps the run state's
  structure, shapes and dtypes, and the step's and the evaluation's metrics are scalars; where no
  preset of its agent trains (`TRACED` names a test), a run state of its shapes goes through a
  checkpoint and back."""
  config = smoke_config(preset, request)
  agent, _ = train_cli.prepare(config)
  if config.agent in train_cli.LLM_AGENTS:  # a host learner: nothing to trace
    return
  learner = agent.make_learner(config)
  key = jax.random.key(0)
  state = jax.eval_shape(learner.init, key)
  new_state, metrics = jax.eval_shape(learner.step, state)
  assert jax.tree.structure(new_state) == jax.tree.structure(state), preset
  for before, after in zip(jax.tree.leaves(state), jax.tree.leaves(new_state)):
    assert (before.shape, before.dtype) == (after.shape, after.dtype), preset
  evaluation = jax.eval_shape(learner.evaluate, state, key)
  assert metrics and evaluation, preset
  assert all(v.shape == () for v in jax.tree.leaves((metrics, evaluation))), preset
  if "::" in TRACED[preset]:
    checkpoint_round_trip(state, request.getfixturevalue("tmp_path"))


def checkpoint_round_trip(shapes, directory) -> None:
  """A run state of `shapes` (zeros; typed keys from key 0) saved by the driver's `Checkpointer`
  and restored into the same structure, shapes and dtypes."""

  def concrete(leaf):
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      return jax.random.split(jax.random.key(0), leaf.shape) if leaf.shape else jax.random.key(0)
    return jax.numpy.zeros(leaf.shape, leaf.dtype)

  state = jax.tree.map(concrete, shapes)
  checkpointer = checkpoint.Checkpointer(str(directory / "checkpoints"))
  checkpointer.save(0, state)
  restored = checkpointer.restore(state)
  checkpointer.close()
  assert jax.tree.structure(restored) == jax.tree.structure(state)
  for before, after in zip(jax.tree.leaves(state), jax.tree.leaves(restored)):
    assert (before.shape, before.dtype) == (after.shape, after.dtype)


def train_preset(preset, tmp_path, request):
  """Trains `preset` with its smoke overrides through `experiments.train.experiment` and checks
  the log: training records up to update 2 or more, one final evaluation per seed, finite numbers,
  the config written beside them."""
  config = smoke_config(preset, request)
  workdir = str(tmp_path / preset)
  train_cli.experiment(config, workdir)
  records = read_jsonl(workdir)
  train = [r for r in records if r["phase"] == "train"]
  evals = [r for r in records if r["phase"] == "eval"]
  assert len(train) >= 1 and train[-1]["update"] >= 2
  final = [r for r in evals if r["update"] == train[-1]["update"]]
  assert sorted(r["seed"] for r in final) == sorted(config.seeds)  # one final evaluation each
  numbers = [v for r in records for k, v in r.items() if isinstance(v, float)]
  assert all(math.isfinite(v) for v in numbers), preset
  assert os.path.exists(os.path.join(workdir, "config.json"))
