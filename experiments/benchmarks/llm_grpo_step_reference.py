"""TRL side of `llm_grpo_step.py`: one GRPO step with `trl.GRPOTrainer` + peft LoRA (PyTorch CPU).

  <ref venv>/bin/python experiments/benchmarks/llm_grpo_step_reference.py --gguf=<file.gguf> \
      --inputs=<json file> --steps=<warm-up + timed steps>

Runs in a separate venv (torch, transformers, gguf, accelerate, trl, peft); nothing in hrljax
imports this file. The inputs file holds the settings and the G rendered chat prompts with their
answers (`prompts`, `answers`, `num_generations`, `max_completion_length`, `lora_rank`,
`lora_alpha`, `learning_rate`, `beta`, `epsilon`, `temperature`, `max_grad_norm`, `seed`,
`threads`, `num_layers`).

What it builds: SmolLM2 from the same GGUF (`AutoModelForCausalLM.from_pretrained(dir,
gguf_file=...)`, float32; `num_layers > 0` keeps the first layers, as hrljax's truncated model),
the tokenizer from the same file, peft `LoraConfig(r, lora_alpha, lora_dropout=0)` on the seven
projections (q, k, v, o, gate, up, down), and `GRPOTrainer` with: per-device batch = generation
batch = G * K, `num_generations=K`, `max_completion_length=N` and `min_new_tokens=N` (every
completion has N tokens, as `eos_id=None` on the hrljax side), temperature 1, no top-k/top-p,
`loss_type="grpo"` (per-sequence token mean, then mean over sequences), `scale_rewards="group"`,
`beta` (k3 KL to the adapter-disabled model: no second copy), `num_iterations=1`, AdamW with
zero weight decay and a constant learning rate, gradient clipping `max_grad_norm`, no gradient
checkpointing.

The reward function is the parent's: it sends the decoded completions and answers over stdout
(`{"reward_request": ...}`) and reads the rewards back on stdin, so both sides score with the
same `hrljax.envs.text_tasks.arithmetic_rewards`.

Protocol: prints `{"ready": ...}` (versions, the prompt token counts for the cross-check); then,
before each optimisation step, waits for a line "run" on stdin ("quit" stops training), and after
the step prints `{"seconds", "cpu_seconds", "reward_mean", "completion_length_mean"}`.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _send(message: dict) -> None:
  print(json.dumps(message), flush=True)


def _receive() -> str:
  line = sys.stdin.readline()
  if not line:
    raise SystemExit("parent closed stdin")
  return line.strip()


def load_model(gguf: str, num_layers: int):
  """The GGUF model in float32 (the first `num_layers` layers when > 0) and its tokenizer."""
  import torch
  from transformers import AutoModelForCausalLM, AutoTokenizer

  directory, name = os.path.dirname(gguf), os.path.basename(gguf)
  model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
  # transformers dequantises a GGUF file to plain float32 `nn.Linear` weights but keeps a
  # "quantized with GGUF" marker, which the Trainer refuses to train; the weights are not
  # quantized, so the marker is dropped.
  model.hf_quantizer = None
  model.is_quantized = False
  if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
  if num_layers:
    model.model.layers = model.model.layers[:num_layers]
    model.config.num_hidden_layers = num_layers
  tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
  tokenizer.padding_side = "left"
  return model, tokenizer


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--gguf", required=True)
  parser.add_argument("--inputs", required=True)
  parser.add_argument("--steps", type=int, required=True, help="warm-up + timed steps")
  args = parser.parse_args()
  with open(args.inputs) as f:
    spec = json.load(f)

  import torch
  import peft
  import transformers
  import trl
  from datasets import Dataset

  if spec["threads"]:
    torch.set_num_threads(spec["threads"])
  model, tokenizer = load_model(args.gguf, spec["num_layers"])
  group_size = spec["num_generations"]
  batch = len(spec["prompts"]) * group_size

  def reward(completions, answer, **unused):
    del unused
    _send({"reward_request": {"completions": list(completions), "answers": list(answer)}})
    return json.loads(_receive())["rewards"]

  timings = {}

  class StepTimer(transformers.TrainerCallback):
    """Blocks before each step until the parent says "run"; reports the step's wall/CPU time."""

    def on_step_begin(self, train_args, state, control, **kwargs):
      if _receive() != "run":
        control.should_training_stop = True
      timings["start"], timings["cpu"] = time.perf_counter(), time.process_time()

    def on_step_end(self, train_args, state, control, **kwargs):
      seconds = time.perf_counter() - timings["start"]
      cpu_seconds = time.process_time() - timings["cpu"]
      metrics = trainer._metrics["train"]  # lists appended once per step (never logged here)
      _send(
        {
          "seconds": seconds,
          "cpu_seconds": cpu_seconds,
          "reward_mean": metrics["reward"][-1],
          "completion_length_mean": metrics["completions/mean_length"][-1],
          # the process's peak resident memory so far (Linux: KiB)
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
      )

  config = trl.GRPOConfig(
    output_dir=tempfile.mkdtemp(prefix="trl_grpo_step_"),
    per_device_train_batch_size=batch,
    generation_batch_size=batch,
    num_generations=group_size,
    max_completion_length=spec["max_completion_length"],
    generation_kwargs={"min_new_tokens": spec["max_completion_length"]},
    temperature=spec["temperature"],
    top_p=1.0,
    top_k=0,
    beta=spec["beta"],
    epsilon=spec["epsilon"],
    loss_type="grpo",
    scale_rewards="group",
    num_iterations=1,
    learning_rate=spec["learning_rate"],
    lr_scheduler_type="constant",
    warmup_steps=0,
    weight_decay=0.0,
    optim="adamw_torch",
    max_grad_norm=spec["max_grad_norm"],
    gradient_checkpointing=False,
    max_steps=args.steps,
    logging_steps=10**9,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    bf16=False,
    seed=spec["seed"],
    disable_tqdm=True,
    dataloader_num_workers=0,
    shuffle_dataset=False,
  )
  lora = peft.LoraConfig(
    r=spec["lora_rank"],
    lora_alpha=spec["lora_alpha"],
    lora_dropout=0.0,
    target_modules=PROJECTIONS,
    task_type="CAUSAL_LM",
  )
  # Enough rows for every step (the trainer repeats each prompt num_generations times).
  rows = len(spec["prompts"]) * (args.steps + 1)
  dataset = Dataset.from_dict(
    {
      "prompt": (spec["prompts"] * (args.steps + 1))[:rows],
      "answer": (spec["answers"] * (args.steps + 1))[:rows],
    }
  )
  trainer = trl.GRPOTrainer(
    model=model,
    reward_funcs=reward,
    args=config,
    train_dataset=dataset,
    processing_class=tokenizer,
    peft_config=lora,
    callbacks=[StepTimer()],
  )
  prompt_tokens = [
    len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in spec["prompts"]
  ]
  trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
  _send(
    {
      "ready": True,
      "threads": torch.get_num_threads(),
      "torch": torch.__version__,
      "transformers": transformers.__version__,
      "trl": trl.__version__,
      "peft": peft.__version__,
      "prompt_tokens": prompt_tokens,
      "trainable_parameters": trainable,
    }
  )
  trainer.train()
  _receive()  # the parent's final "quit"


if __name__ == "__main__":
  main()
