"""ArCHer with a LoRA-adapted SmolLM2-135M-Instruct actor on the text token game, for 2 CPU cores.

`agents/llm_archer.py`: 8 parallel games of 4 items (2 binary properties, 3 turns, the item
table in the prompt), one line of at most 12 tokens per game per iteration, a small from-scratch
twin Q/V critic on the game's tokens (20 critic steps per iteration, γ 0.95, τ 0.1 as the
reference), one LoRA actor step per iteration after 3 critic-only iterations. A uniformly random
guess on the first turn wins a quarter of the games. Scale up by overrides, e.g.
`--config.env_kwargs.num_items=16 --config.env_kwargs.num_attributes=4
--config.env_kwargs.max_turns=6 --config.num_envs=64`.

  python -m experiments.train --config=experiments/configs/archer_smollm2_game.py \\
      --workdir=runs/archer_smollm2
"""

from hrljax.agents import llm_archer


def get_config():
  config = llm_archer.get_config()
  config.env_kwargs.num_items = 4
  config.env_kwargs.num_attributes = 2
  config.env_kwargs.num_values = 2
  config.env_kwargs.max_turns = 3
  config.num_envs = 8  # parallel games, one line each per iteration
  config.max_new_tokens = 12  # one short line
  config.temperature = 0.7
  # SmolLM2-135M writes the exact commands in under 10% of sampled lines; read its free text
  # and reward understood lines a little so that the actor has a signal before its first wins.
  config.lenient_parsing = True
  config.valid_move_bonus = 0.1
  config.num_updates = 40  # iterations
  config.critic_updates = 20  # critic steps per iteration
  config.warmup_iters = 3  # critic-only iterations
  config.actor_learning_rate = 3e-4  # LoRA rate
  config.eval_episodes = 16  # greedy games per evaluation
  config.eval_every = 20
  return config
