"""GRPO with LoRA on SmolLM2-135M-Instruct, arithmetic word problems, sized for 2 CPU cores.

`agents/llm_grpo.py` with 4 problems x 4 samples per update, 32 new tokens at temperature 0.7,
LoRA rank 8. Changes from the agent's (paper) defaults, for a short CPU run: no KL penalty
(β = 0, as Dr. GRPO and DAPO; saves the reference forward pass), a LoRA learning rate of 3e-4,
and the lenient answer mode (the last number of an unformatted reply still counts as the answer)
so that the reward has a correctness part before the format is learnt. Scale up by overrides,
e.g. `--config.num_prompts=16 --config.samples_per_prompt=16 --config.max_new_tokens=256`.

  python -m experiments.train --config=experiments/configs/grpo_smollm2_arithmetic.py \\
      --workdir=runs/grpo_smollm2
"""

from hrljax.agents import llm_grpo


def get_config():
  config = llm_grpo.get_config()
  config.num_prompts = 4  # problems per update
  config.samples_per_prompt = 4  # samples per problem
  config.max_new_tokens = 32
  config.temperature = 0.7
  config.learning_rate = 3e-4
  config.kl_coef = 0.0  # no reference forward pass
  config.task.answer_mode = "last_number"  # an unformatted reply's last number counts
  config.num_updates = 30
  config.eval_problems = 16  # greedy replies per evaluation
  config.eval_every = 10
  config.checkpoint_every = 5
  return config
