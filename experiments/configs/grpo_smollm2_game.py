"""GRPO over groups of games with a LoRA-adapted SmolLM2-135M-Instruct policy on the text token
game, for 2 CPU cores: the critic-free baseline of `archer_smollm2_game` and
`token_ppo_smollm2_game`, on the same game, prompts and parsing.

`agents/llm_game_grpo.py`: 2 hidden items x 4 games each per update (8 games of 4 items, 2 binary
properties, 3 turns, the item table in the prompt), every game played to its end (at most 24
lines per update, as `token_ppo_smollm2_game`'s 24), the group z-score of each game's return on
every token of its lines, one epoch of the clipped surrogate. Compare with the other arms at
equal lines (`python -m experiments.summarize ... --steps=START:END`; this agent counts the
window, 24 lines per update, and logs the lines played as `lines`). Memory: the backward pass
over the update's 24 lines peaks at 11.7 GB; `--config.micro_batches=4` computes the same update
four slices at a time, at 5.1 GB.

  python -m experiments.train --config=experiments/configs/grpo_smollm2_game.py \\
      --workdir=runs/grpo_smollm2_game
"""

from hrljax.agents import llm_game_grpo


def get_config():
  config = llm_game_grpo.get_config()
  config.env_kwargs.num_items = 4
  config.env_kwargs.num_attributes = 2
  config.env_kwargs.num_values = 2
  config.env_kwargs.max_turns = 3
  config.num_groups = 2  # hidden items per update
  config.group_size = 4  # games per item
  config.max_new_tokens = 12  # one short line
  config.temperature = 0.7
  # As archer_smollm2_game: read the model's free text, reward understood lines a little.
  config.lenient_parsing = True
  config.valid_move_bonus = 0.1
  config.num_updates = 40
  config.actor_learning_rate = 3e-4  # LoRA rate, as archer_smollm2_game
  config.eval_episodes = 16  # greedy games per evaluation
  config.eval_every = 10
  return config
