"""Hugging Face transformers side of `llm_sampling.py` (runs in a separate PyTorch venv).

  <ref venv>/bin/python experiments/benchmarks/llm_sampling_reference.py --gguf=<file.gguf> \
      --inputs=<json file with "input_ids"> --new_tokens=64

Loads SmolLM2 from the same GGUF file (`AutoModelForCausalLM.from_pretrained(dir,
gguf_file=...)`, dequantised to `--dtype`, float32 or bfloat16; `--num_layers` keeps the first
layers), or with `--shape` builds a `LlamaForCausalLM` of that shape with random weights; runs on
the GPU where torch sees one; prints one JSON line with the last-position logits of
the first prompt (for the cross-check), then serves the parent over stdin/stdout: on each line
"run" it samples `new_tokens` tokens for the whole batch with `model.generate` (KV cache,
`do_sample=True`, temperature 1, no top-k/top-p, eos suppressed by `min_new_tokens` so every
row produces exactly `new_tokens` tokens; `--num_return_sequences` samples per prompt) and prints {"seconds", "cpu_seconds", "tokens"}; "quit"
ends it. Nothing in hrljax imports this file.
"""

import argparse
import json
import os
import resource
import sys
import time


def main() -> None:
  parser = argparse.ArgumentParser()
  model = parser.add_mutually_exclusive_group(required=True)
  model.add_argument("--gguf", help="the GGUF file whose weights both sides read")
  model.add_argument("--shape", help="JSON LlamaConfig fields: random weights of that shape")
  parser.add_argument("--inputs", required=True)
  parser.add_argument("--new_tokens", type=int, default=64)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
  parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
  parser.add_argument("--num_layers", type=int, default=0, help="0: all; n: the first n layers")
  parser.add_argument(
    "--num_return_sequences", type=int, default=1, help="samples per prompt (GRPO's group)"
  )
  args = parser.parse_args()

  import torch
  from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

  torch.manual_seed(args.seed)
  if args.threads:
    torch.set_num_threads(args.threads)
  device = "cuda" if torch.cuda.is_available() else "cpu"
  if args.gguf:
    model = AutoModelForCausalLM.from_pretrained(
      os.path.dirname(args.gguf),
      gguf_file=os.path.basename(args.gguf),
      dtype=getattr(torch, args.dtype),
    )
  else:
    shape = LlamaConfig(**json.loads(args.shape), tie_word_embeddings=True)
    model = LlamaForCausalLM(shape).to(getattr(torch, args.dtype))
  model = model.to(device)
  if args.num_layers:
    model.model.layers = model.model.layers[: args.num_layers]
    model.config.num_hidden_layers = args.num_layers
  model.eval()
  with open(args.inputs) as f:
    input_ids = torch.tensor(json.load(f)["input_ids"], dtype=torch.long, device=device)
  attention_mask = torch.ones_like(input_ids)
  with torch.inference_mode():
    logits = model(input_ids[:1]).logits[0, -1].float().tolist()
  print(
    json.dumps(
      {
        "ready": True,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "last_logits": logits,
      }
    ),
    flush=True,
  )

  for line in sys.stdin:
    command = line.strip()
    if command == "quit":
      break
    if command != "run":
      continue
    start, cpu_start = time.perf_counter(), time.process_time()
    with torch.inference_mode():
      out = model.generate(
        input_ids,
        attention_mask=attention_mask,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        use_cache=True,
        pad_token_id=model.config.pad_token_id,
        num_return_sequences=args.num_return_sequences,
      )
    if device == "cuda":  # generate's last kernels may still be running
      torch.cuda.synchronize()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    tokens = int(out.shape[0] * (out.shape[1] - input_ids.shape[1]))
    print(
      json.dumps(
        {
          "seconds": seconds,
          "cpu_seconds": cpu_seconds,
          "tokens": tokens,
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB
        }
      ),
      flush=True,
    )


if __name__ == "__main__":
  main()
