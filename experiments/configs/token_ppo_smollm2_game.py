"""Token-level PPO with a LoRA-adapted SmolLM2-135M-Instruct policy on the text token game, for 2
CPU cores: the on-policy baseline of `archer_smollm2_game`, on the same game, prompts and parsing.

`agents/llm_token_ppo.py`: 8 parallel games of 4 items (2 binary properties, 3 turns, the item
table in the prompt), 3 lines of at most 12 tokens per game per update (24 lines), a value head
on SmolLM2's first 4 layers (frozen), 2 epochs x 2 minibatches of the clipped surrogate. 40
updates are 960 lines, three times the lines of `archer_smollm2_game`'s 40 iterations: compare
the two at equal lines (`python -m experiments.summarize ... --steps=START:END`).

  python -m experiments.train --config=experiments/configs/token_ppo_smollm2_game.py \\
      --workdir=runs/token_ppo_smollm2
"""

from hrljax.agents import llm_token_ppo


def get_config():
  config = llm_token_ppo.get_config()
  config.env_kwargs.num_items = 4
  config.env_kwargs.num_attributes = 2
  config.env_kwargs.num_values = 2
  config.env_kwargs.max_turns = 3
  config.num_envs = 8  # parallel games
  config.num_steps = 3  # lines per game per update
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
