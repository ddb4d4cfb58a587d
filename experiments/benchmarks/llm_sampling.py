"""Sampling speed of SmolLM2-135M with the KV cache: hrljax (JAX) against transformers (PyTorch).

  python -m experiments.benchmarks.llm_sampling [--batch=8 --prompt_len=32 --new_tokens=64]
  python -m experiments.benchmarks.llm_sampling --reference_python=/work/refvenv/bin/python \
      [--single_thread]

Our side: `hrljax.networks.llama.generate` (prefill + `lax.while_loop` of cached decode steps,
one jitted program; temperature-1 sampling, no stop token so that every row produces
`new_tokens` tokens), timed after compile, each run ending in `block_until_ready`.

Reference side (with `--reference_python`, a venv with torch + transformers + gguf + accelerate):
`llm_sampling_reference.py` in a subprocess loads the same GGUF with transformers and runs
`model.generate(do_sample=True, use_cache=True, ...)` on the same token ids. The two sides are
executed alternately, rep by rep (while one runs the other waits), and the median and min of
each are reported; the ratio is ours / reference in tokens per second. Both read the same
weights: the last-position logits of the first prompt are compared as a cross-check.

`--single_thread` runs both sides on one compute thread (XLA without its Eigen pool, torch
`set_num_threads(1)` + `OMP_NUM_THREADS=1`): on a machine shared with many other jobs, a pool of
threads that spin-wait for each other mostly measures the scheduler (a 2-thread torch run at load
40 burned minutes of CPU per sampling run).

Prints one JSON line per side, the ratio, and a summary line on stderr.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch", 8, "Prompts sampled together.")
flags.DEFINE_integer("prompt_len", 32, "Tokens per prompt.")
flags.DEFINE_integer("new_tokens", 64, "Tokens sampled per prompt.")
flags.DEFINE_integer("reps", 5, "Timed runs per side after warm-up (median and min reported).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Our weights/compute dtype.")
flags.DEFINE_string("reference_python", None,
                    "Python of a venv with torch, transformers, gguf, accelerate (None: ours "
                    "only).")
flags.DEFINE_integer("seed", 0, "PRNG seed.")
flags.DEFINE_bool("single_thread", False,
                  "One compute thread per side (XLA: no Eigen thread pool; torch: "
                  "set_num_threads(1)). On an oversubscribed machine, multi-threaded runs mostly "
                  "measure spinning thread pools.")

_TEXT = ("The history of the city begins with a small settlement on an island in the river. "
         "Over the centuries it grew into a centre of trade, learning and art, and its bridges, "
         "markets and churches drew travellers from every part of the continent. Today it is "
         "known for its museums, its food and the long walks along the water.")


def prompts(tokenizer, batch: int, length: int):
  """`batch` different windows of `length` tokens of a fixed text (no padding)."""
  ids = tokenizer.encode(_TEXT, add_special_tokens=False).ids
  if len(ids) < length + batch:
    raise ValueError(f"prompt_len: expected at most {len(ids) - batch} for this text, got {length}")
  return [ids[i:i + length] for i in range(batch)]


def _summary(name: str, runs, tokens: int) -> dict:
  seconds = [r["seconds"] for r in runs]
  cpu = [r["cpu_seconds"] for r in runs]
  return {"side": name, "tokens_per_run": tokens,
          "tokens_per_second_median": tokens / statistics.median(seconds),
          "tokens_per_second_best": tokens / min(seconds),
          "tokens_per_cpu_second_median": tokens / statistics.median(cpu),
          "run_seconds": seconds, "cpu_seconds": cpu}


class _Reference:
  """The transformers subprocess, driven line by line."""

  def __init__(self, python: str, gguf: str, input_ids, new_tokens: int, seed: int,
               threads: int):
    self._inputs = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"input_ids": input_ids}, self._inputs)
    self._inputs.close()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm_sampling_reference.py")
    self._proc = subprocess.Popen(
        [python, script, f"--gguf={gguf}", f"--inputs={self._inputs.name}",
         f"--new_tokens={new_tokens}", f"--seed={seed}", f"--threads={threads}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        env={**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})})
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


def main(argv) -> None:
  del argv
  if FLAGS.single_thread:  # before jax initialises its backend
    single = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {single}".strip()
  import jax
  import jax.numpy as jnp
  import numpy as np

  from hrljax import llm_weights
  from hrljax.networks import llama

  dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[FLAGS.dtype]
  config, params = llm_weights.load_smollm2(dtype=dtype)
  tokenizer = llm_weights.load_tokenizer()
  input_ids = prompts(tokenizer, FLAGS.batch, FLAGS.prompt_len)
  tokens = jnp.asarray(input_ids, jnp.int32)
  mask = jnp.ones(tokens.shape, bool)
  per_run = FLAGS.batch * FLAGS.new_tokens

  def ours(key):
    out = llama.generate(config, params, None, tokens, mask, key, FLAGS.new_tokens,
                         eos_id=None, pad_id=llm_weights.PAD_ID)
    return jax.block_until_ready(out)

  start = time.perf_counter()
  ours(jax.random.key(FLAGS.seed))
  compile_seconds = time.perf_counter() - start

  reference = None
  if FLAGS.reference_python:
    reference = _Reference(FLAGS.reference_python, llm_weights.find_gguf_path(), input_ids,
                           FLAGS.new_tokens, FLAGS.seed, 1 if FLAGS.single_thread else 0)
    ref_logits = np.asarray(reference.ready["last_logits"])
    our_logits, _ = llama.forward(config, params, None, tokens[:1], llama.positions_from_mask(
        mask[:1]), mask[:1], last_only=True)
    our_logits = np.asarray(our_logits[0, -1])
    reference.run()  # warm-up
    print(f"warm-up done; compile {compile_seconds:.1f} s", file=sys.stderr, flush=True)
  load = os.getloadavg()[0]

  our_runs, ref_runs = [], []
  try:
    for rep in range(FLAGS.reps):
      start, cpu_start = time.perf_counter(), time.process_time()
      out = ours(jax.random.key(FLAGS.seed + 1 + rep))
      our_runs.append({"seconds": time.perf_counter() - start,
                       "cpu_seconds": time.process_time() - cpu_start})
      assert int(out.mask.sum()) == per_run
      if reference is not None:
        result = reference.run()
        assert result["tokens"] == per_run, result
        ref_runs.append(result)
      print(f"rep {rep}: hrljax {our_runs[-1]['seconds']:.2f} s"
            + (f", transformers {ref_runs[-1]['seconds']:.2f} s" if ref_runs else ""),
            file=sys.stderr, flush=True)
  finally:
    if reference is not None:
      reference.close()

  common = {"single_thread": FLAGS.single_thread, "batch": FLAGS.batch,
            "prompt_len": FLAGS.prompt_len, "new_tokens": FLAGS.new_tokens,
            "load_average_1min": load, "reps": FLAGS.reps}
  ours_summary = {**_summary("hrljax", our_runs, per_run), **common, "dtype": FLAGS.dtype,
                  "compile_seconds": compile_seconds, "jax": jax.__version__}
  print(json.dumps(ours_summary))
  line = (f"hrljax {ours_summary['tokens_per_second_median']:.1f} tokens/s (median, "
          f"best {ours_summary['tokens_per_second_best']:.1f})")
  if reference is not None:
    ref_summary = {**_summary("transformers", ref_runs, per_run), **common,
                   "threads": reference.ready["threads"], "torch": reference.ready["torch"],
                   "last_logits_max_abs_diff": float(np.abs(ref_logits - our_logits).max()),
                   "same_argmax": bool(ref_logits.argmax() == our_logits.argmax())}
    print(json.dumps(ref_summary))
    ratio = ours_summary["tokens_per_second_median"] / ref_summary["tokens_per_second_median"]
    best_ratio = ours_summary["tokens_per_second_best"] / ref_summary["tokens_per_second_best"]
    print(json.dumps({"ratio_median": ratio, "ratio_best": best_ratio}))
    line += (f"; transformers {ref_summary['tokens_per_second_median']:.1f} tokens/s (best "
             f"{ref_summary['tokens_per_second_best']:.1f}); ratio {ratio:.2f}x (best "
             f"{best_ratio:.2f}x); logits max |diff| {ref_summary['last_logits_max_abs_diff']:.2e}")
  print(line + f"; load {load:.1f}", file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
