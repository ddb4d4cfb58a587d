"""Sampling speed of SmolLM2-135M with the KV cache: hrljax (JAX) against transformers (PyTorch).

  python -m experiments.benchmarks.llm_sampling [--batch=8 --prompt_len=32 --new_tokens=64]
      [--group_size=4]
  python -m experiments.benchmarks.llm_sampling --reference_python=.venv-ref/bin/python \
      [--single_thread] [--dtype=bfloat16] [--weights=random]

Our side: `hrljax.networks.llama.generate` (prefill + `lax.while_loop` of cached decode steps,
one jitted program; temperature-1 sampling, no stop token so that every row produces
`new_tokens` tokens), timed after compile, each run ending in `block_until_ready`.

Reference side (with `--reference_python`, a venv with torch + transformers + gguf + accelerate):
`llm_sampling_reference.py` in a subprocess loads the same GGUF with transformers and runs
`model.generate(do_sample=True, use_cache=True, ...)` on the same token ids. The two sides are
executed alternately, rep by rep (while one runs the other waits), and the median and min of
each are reported; the ratios are ours / reference in tokens per second (median, best) and in
tokens per CPU second of each process. Both read the same weights in the same dtype (`--dtype`:
float32 or bfloat16 on both sides): the last-position logits of the first prompt are compared
as a cross-check. `run()` is the same benchmark as a function (the tests call it on a truncated
model, `num_layers=2`).

`--single_thread` runs both sides on one compute thread (XLA without its Eigen pool, torch
`set_num_threads(1)` + `OMP_NUM_THREADS=1`): on a machine shared with many other jobs, a pool of
threads that spin-wait for each other mostly measures the scheduler (a 2-thread torch run at load
40 burned minutes of CPU per sampling run).

Prints one JSON line per side, the ratio, and a summary line on stderr.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags; defined only when run as a program, so that importing the module
  (the tests, other benchmarks) never registers them twice."""
  flags.DEFINE_integer("batch", 8, "Sequences sampled together (prompts x group_size).")
  flags.DEFINE_integer(
    "group_size",
    1,
    "Samples per prompt (GRPO's K): batch / group_size distinct prompts; hrljax prefills each "
    "once (generate's group_size), transformers takes num_return_sequences.",
  )
  flags.DEFINE_integer("prompt_len", 32, "Tokens per prompt.")
  flags.DEFINE_integer("new_tokens", 64, "Tokens sampled per prompt.")
  flags.DEFINE_integer("reps", 5, "Timed runs per side after warm-up (median and min reported).")
  flags.DEFINE_enum(
    "dtype", "float32", ["float32", "bfloat16"], "Weights and compute dtype of both sides."
  )
  flags.DEFINE_integer("num_layers", 0, "0: the full model; n > 0: its first n layers (tests).")
  flags.DEFINE_enum(
    "weights",
    "smollm2",
    WEIGHTS,
    "smollm2: the GGUF's weights on both sides; random: random weights of its shape on each "
    "side and random prompt tokens (where the GGUF is absent, e.g. on an accelerator machine).",
  )
  flags.DEFINE_string(
    "reference_python",
    None,
    "Python of a venv with torch, transformers, gguf, accelerate (None: ours only).",
  )
  flags.DEFINE_integer("seed", 0, "PRNG seed.")
  flags.DEFINE_bool(
    "single_thread",
    False,
    "One compute thread per side (XLA: no Eigen thread pool; torch: "
    "set_num_threads(1)). On an oversubscribed machine, multi-threaded runs mostly "
    "measure spinning thread pools.",
  )


DTYPES = ("float32", "bfloat16")
WEIGHTS = ("smollm2", "random")
# One Eigen thread for XLA:CPU's ops. A bare `intra_op_parallelism_threads=1`, often seen beside
# it, is not an XLA flag, and XLA stops reading XLA_FLAGS at the first token without `--`.
SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false"

_TEXT = (
  "The history of the city begins with a small settlement on an island in the river. "
  "Over the centuries it grew into a centre of trade, learning and art, and its bridges, "
  "markets and churches drew travellers from every part of the continent. Today it is "
  "known for its museums, its food and the long walks along the water."
)


def prompts(tokenizer, batch: int, length: int):
  """`batch` different windows of `length` tokens of a fixed text, repeated as often as the
  length needs (no padding)."""
  text = tokenizer.encode(_TEXT, add_special_tokens=False).ids
  ids = text * (1 + (length + batch) // len(text))
  return [ids[i : i + length] for i in range(batch)]


def _summary(name: str, runs, tokens: int) -> dict:
  seconds = [r["seconds"] for r in runs]
  cpu = [r["cpu_seconds"] for r in runs]
  return {
    "side": name,
    "tokens_per_run": tokens,
    "tokens_per_second_median": tokens / statistics.median(seconds),
    "tokens_per_second_best": tokens / min(seconds),
    "tokens_per_cpu_second_median": tokens / statistics.median(cpu),
    "run_seconds": seconds,
    "cpu_seconds": cpu,
    # the process's peak resident memory after its last run (Linux reports KiB)
    "peak_rss_mb": max(r.get("peak_rss_mb", float("nan")) for r in runs),
  }


def _shape_json(config) -> str:
  """The model's shape as transformers' `LlamaConfig` fields (random weights of that shape)."""
  return json.dumps(
    {
      "vocab_size": config.vocab_size,
      "hidden_size": config.dim,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_heads,
      "num_key_value_heads": config.num_kv_heads,
      "intermediate_size": config.hidden_dim,
      "rope_theta": config.rope_theta,
      "rms_norm_eps": config.norm_eps,
      "max_position_embeddings": config.max_seq_len,
    }
  )


class _Reference:
  """The transformers subprocess, driven line by line."""

  def __init__(
    self,
    python: str,
    model_flag: str,
    input_ids,
    new_tokens: int,
    seed: int,
    threads: int,
    dtype: str = "float32",
    num_layers: int = 0,
    group_size: int = 1,
  ):
    self._inputs = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"input_ids": input_ids}, self._inputs)
    self._inputs.close()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm_sampling_reference.py")
    self._proc = subprocess.Popen(
      [
        python,
        script,
        model_flag,
        f"--inputs={self._inputs.name}",
        f"--new_tokens={new_tokens}",
        f"--seed={seed}",
        f"--threads={threads}",
        f"--dtype={dtype}",
        f"--num_layers={num_layers}",
        f"--num_return_sequences={group_size}",
      ],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      text=True,
      bufsize=1,
      env={**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})},
    )
    self.ready = self._read()

  def _read(self) -> dict:
    line = self._proc.stdout.readline()
    if not line:
      raise RuntimeError(f"reference process exited with code {self._proc.wait()}")
    return json.loads(line)

  def run(self) -> dict:
    self._proc.stdin.write("run\n")
    return self._read()

  def close(self) -> None:
    if self._proc.poll() is None:
      self._proc.stdin.write("quit\n")
      self._proc.stdin.close()
      self._proc.wait(timeout=60)
    os.unlink(self._inputs.name)


def run(
  batch: int = 8,
  prompt_len: int = 32,
  new_tokens: int = 64,
  reps: int = 5,
  dtype: str = "float32",
  reference_python=None,
  seed: int = 0,
  single_thread: bool = False,
  num_layers: int = 0,
  weights: str = "smollm2",
  group_size: int = 1,
) -> list:
  """Both sides, alternately rep by rep; returns the JSON records (ours, [reference, ratio]).
  `batch` sequences: `batch / group_size` distinct prompts, `group_size` samples each."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from hrljax import llm_weights
  from hrljax.networks import llama

  if reps < 1:
    raise ValueError(f"reps: expected an int >= 1, got {reps!r}")
  if dtype not in DTYPES:
    raise ValueError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
  if weights not in WEIGHTS:
    raise ValueError(f"weights: expected one of {WEIGHTS}, got {weights!r}")
  if not (isinstance(group_size, int) and group_size >= 1 and batch % group_size == 0):
    raise ValueError(f"group_size: expected an int >= 1 dividing batch={batch}, got {group_size!r}")
  num_prompts = batch // group_size
  if weights == "random":
    config = llama.smollm2_config(num_layers or None, dtype=getattr(jnp, dtype))
    params = jax.tree.map(
      lambda a: a.astype(config.dtype), llama.init_params(config, jax.random.key(seed))
    )
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(0, config.vocab_size, (num_prompts, prompt_len)).tolist()
  else:
    fields, params = llm_weights.load_smollm2(
      num_layers=num_layers or None, dtype=getattr(jnp, dtype)
    )
    config = llama.LlamaConfig(**fields, dtype=getattr(jnp, dtype))
    input_ids = prompts(llm_weights.load_tokenizer(), num_prompts, prompt_len)
  tokens = jnp.asarray(input_ids, jnp.int32)
  mask = jnp.ones(tokens.shape, bool)
  per_run = batch * new_tokens

  def ours(key):
    out = llama.generate(
      config,
      params,
      None,
      tokens,
      mask,
      key,
      new_tokens,
      eos_id=None,
      pad_id=llm_weights.PAD_ID,
      group_size=group_size,
    )
    return jax.block_until_ready(out)

  start = time.perf_counter()
  ours(jax.random.key(seed))
  compile_seconds = time.perf_counter() - start

  reference = None
  if reference_python:
    reference = _Reference(
      reference_python,
      f"--gguf={llm_weights.find_gguf_path()}"
      if weights == "smollm2"
      else f"--shape={_shape_json(config)}",
      input_ids,
      new_tokens,
      seed,
      1 if single_thread else 0,
      dtype,
      num_layers,
      group_size,
    )
    ref_logits = np.asarray(reference.ready["last_logits"])
    our_logits, _ = llama.forward(
      config,
      params,
      None,
      tokens[:1],
      llama.positions_from_mask(mask[:1]),
      mask[:1],
      last_only=True,
    )
    our_logits = np.asarray(our_logits[0, -1])
    reference.run()  # warm-up
    print(f"warm-up done; compile {compile_seconds:.1f} s", file=sys.stderr, flush=True)
  load = os.getloadavg()[0]

  our_runs, ref_runs = [], []
  try:
    for rep in range(reps):
      start, cpu_start = time.perf_counter(), time.process_time()
      out = ours(jax.random.key(seed + 1 + rep))
      our_runs.append(
        {
          "seconds": time.perf_counter() - start,
          "cpu_seconds": time.process_time() - cpu_start,
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
      )
      if int(out.mask.sum()) != per_run:
        raise RuntimeError(f"hrljax sampled {int(out.mask.sum())} tokens, expected {per_run}")
      if reference is not None:
        result = reference.run()
        if result["tokens"] != per_run:
          raise RuntimeError(f"transformers sampled {result['tokens']} tokens, expected {per_run}")
        ref_runs.append(result)
      print(
        f"rep {rep}: hrljax {our_runs[-1]['seconds']:.2f} s"
        + (f", transformers {ref_runs[-1]['seconds']:.2f} s" if ref_runs else ""),
        file=sys.stderr,
        flush=True,
      )
  finally:
    if reference is not None:
      reference.close()

  common = {
    "single_thread": single_thread,
    "batch": batch,
    "group_size": group_size,
    "prompt_len": prompt_len,
    "new_tokens": new_tokens,
    "dtype": dtype,
    "num_layers": config.num_layers,
    "weights": weights,
    "load_average_1min": load,
    "reps": reps,
    "seed": seed,
  }
  records = [
    {
      **_summary("hrljax", our_runs, per_run),
      **common,
      "compile_seconds": compile_seconds,
      "jax": jax.__version__,
    }
  ]
  if reference is not None:
    ref_summary = {
      **_summary("transformers", ref_runs, per_run),
      **common,
      "threads": reference.ready["threads"],
      "torch": reference.ready["torch"],
      "device": reference.ready.get("device", "cpu"),
    }
    if weights == "smollm2":  # the same weights on both sides: their logits must agree
      ref_summary["last_logits_max_abs_diff"] = float(np.abs(ref_logits - our_logits).max())
      ref_summary["same_argmax"] = bool(ref_logits.argmax() == our_logits.argmax())
    records.append(ref_summary)
    ours_summary = records[0]
    records.append(
      {
        "ratio_median": (
          ours_summary["tokens_per_second_median"] / ref_summary["tokens_per_second_median"]
        ),
        "ratio_best": ours_summary["tokens_per_second_best"]
        / ref_summary["tokens_per_second_best"],
        "ratio_per_cpu_second": (
          ours_summary["tokens_per_cpu_second_median"] / ref_summary["tokens_per_cpu_second_median"]
        ),
      }
    )
  return records


def main(argv) -> None:
  del argv
  if FLAGS.single_thread:  # before jax initialises its backend
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SINGLE_THREAD_XLA}".strip()
  records = run(
    FLAGS.batch,
    FLAGS.prompt_len,
    FLAGS.new_tokens,
    FLAGS.reps,
    FLAGS.dtype,
    FLAGS.reference_python,
    FLAGS.seed,
    FLAGS.single_thread,
    FLAGS.num_layers,
    FLAGS.weights,
    FLAGS.group_size,
  )
  for record in records:
    print(json.dumps(record))
  ours = records[0]
  line = (
    f"hrljax {ours['tokens_per_second_median']:.1f} tokens/s (median, "
    f"best {ours['tokens_per_second_best']:.1f}, "
    f"{ours['tokens_per_cpu_second_median']:.1f} per CPU s)"
  )
  if len(records) > 1:
    ref, ratio = records[1], records[2]
    line += (
      f"; transformers {ref['tokens_per_second_median']:.1f} tokens/s (best "
      f"{ref['tokens_per_second_best']:.1f}, {ref['tokens_per_cpu_second_median']:.1f} "
      f"per CPU s); ratio {ratio['ratio_median']:.2f}x (best {ratio['ratio_best']:.2f}x,"
      f" per CPU s {ratio['ratio_per_cpu_second']:.2f}x)"
    )
    if "last_logits_max_abs_diff" in ref:
      line += f"; logits max |diff| {ref['last_logits_max_abs_diff']:.2e}"
  print(line + f"; load {ours['load_average_1min']:.1f}", file=sys.stderr)


if __name__ == "__main__":
  define_flags()
  app.run(main)
