"""Wall time of one GRPO step on SmolLM2-135M + LoRA: hrljax (JAX) against TRL's GRPOTrainer.

  python -m experiments.benchmarks.llm_grpo_step [--num_prompts=4 --samples_per_prompt=4 \
      --max_new_tokens=48 --reps=3]
  python -m experiments.benchmarks.llm_grpo_step --reference_python=.venv-ref/bin/python \
      [--single_thread] [--shared_prefix] [--system_prompt_tokens=256 --num_prompts=8]

One step, both sides (the settings of `agents/llm_grpo.py`'s default config): G = `num_prompts`
arithmetic problems (`hrljax.envs.text_tasks`, the same G for every step), K =
`samples_per_prompt` sampled completions each, of exactly N = `max_new_tokens` tokens (the stop
token is not honoured on either side, so both sample the same number of tokens), the same
reward (`text_tasks.arithmetic_rewards`), group-normalised advantages, one gradient step of
GRPO's loss (clipped surrogate + 0.04 k3 KL to the adapter-free model, per-sequence token
mean) on LoRA adapters of rank 8 on the seven projections, with global-norm clipping and Adam.

- hrljax (`our_step`): `LLMGRPO.sample` (one jitted `llama.generate` on the G*K chat prompts,
  left-padded to the longest prompt as TRL pads them: `prompt_bucket=1`),
  host-side decode + reward, `LLMGRPO.update` (one jitted XLA program: advantages, reference
  and policy log-probs, gradient, optax update), i.e. `LLMGRPO.step` with fixed problems. Timed
  after a warm-up step, whose time (compile included) is reported apart.
- TRL (`llm_grpo_step_reference.py`, with `--reference_python`): `trl.GRPOTrainer` + peft LoRA
  on the same GGUF, settings listed in that file; rewards are requested from this process.

The sides run alternately, step by step (while one runs the other waits). Reported: seconds per
step (median, best), CPU seconds per step, the ratio TRL / hrljax of step times (> 1: hrljax is
faster), and cross-checks (same trainable parameter count, same prompt lengths, rewards).
Prints one JSON line per side and one for the ratio; a summary line on stderr.
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
REFERENCE_SCRIPT = os.path.join(
  os.path.dirname(os.path.abspath(__file__)), "llm_grpo_step_reference.py"
)


def define_flags() -> None:
  """Command-line flags; defined only when run as a program, so that importing the module
  (the tests, other benchmarks) never registers them twice."""
  flags.DEFINE_integer("num_prompts", 4, "G: problems per step.")
  flags.DEFINE_integer("samples_per_prompt", 4, "K: completions per problem.")
  flags.DEFINE_integer("max_new_tokens", 48, "N: tokens per completion (all have N).")
  flags.DEFINE_integer("lora_rank", 8, "LoRA rank on both sides.")
  flags.DEFINE_integer("num_layers", 0, "0: the full model; n > 0: its first n layers.")
  flags.DEFINE_integer("reps", 3, "Timed steps per side after one warm-up step.")
  flags.DEFINE_integer("seed", 0, "Seed of the problems and of both sides' sampling.")
  flags.DEFINE_string(
    "reference_python",
    None,
    "Python of a venv with torch, transformers, gguf, accelerate, trl, peft (None: hrljax only).",
  )
  flags.DEFINE_bool(
    "shared_prefix",
    False,
    "hrljax prefills each problem's prompt once for its K samples and its update runs it once "
    "for them (llm_grpo's shared_prefix: Prefix Grouper's forward).",
  )
  flags.DEFINE_integer(
    "system_prompt_tokens",
    0,
    "0: the chat template's default system prompt; n > 0: a system prompt of about n tokens "
    "on both sides (a long prompt shared by the K samples).",
  )
  flags.DEFINE_bool(
    "single_thread",
    False,
    "One compute thread per side (see llm_sampling.py): on an oversubscribed "
    "machine multi-threaded runs mostly measure spinning thread pools.",
  )


# The long system prompt's text, repeated and cut to the requested number of tokens.
_INSTRUCTIONS = (
  "You are a careful tutor who solves arithmetic word problems for young students. Read the "
  "problem twice, name the quantities it gives, say which operation joins them and why, "
  "compute the result step by step, check it against the story, and then state the number. "
)


def long_system_prompt(tokenizer, tokens: int) -> str:
  """A system prompt of `tokens` tokens (the instructions repeated, cut at a token)."""
  ids = tokenizer.encode(_INSTRUCTIONS, add_special_tokens=False).ids
  ids = (ids * (1 + tokens // len(ids)))[:tokens]
  return tokenizer.decode(ids).strip()


def grpo_config(
  num_prompts: int,
  samples_per_prompt: int,
  max_new_tokens: int,
  lora_rank: int,
  num_layers: int,
  seed: int,
  shared_prefix: bool = False,
  system_prompt: str = "",
):
  """`agents/llm_grpo.py`'s default config with the benchmark's sizes (no evaluation), prompts
  padded to the longest one (`prompt_bucket=1`, as TRL pads), so both sides process the same
  number of positions; `shared_prefix` and the system prompt as the agent's fields."""
  from hrljax.agents import llm_grpo

  config = llm_grpo.get_config()
  config.num_prompts = num_prompts
  config.samples_per_prompt = samples_per_prompt
  config.max_new_tokens = max_new_tokens
  config.lora_rank = lora_rank
  config.num_layers = num_layers
  config.seeds = (seed,)
  config.prompt_bucket = 1
  config.eval_problems = 0
  config.shared_prefix = shared_prefix
  config.task.system_prompt = system_prompt
  llm_grpo.validate_config(config)
  return config


def make_agent(config):
  """The GRPO agent on a model that never stops early: every completion has N tokens."""
  from hrljax.agents import llm_common, llm_grpo

  lm = llm_common.load_language_model(
    config.num_layers, config.dtype, config.lora_rank, config.lora_alpha
  )
  return llm_grpo.LLMGRPO(config, lm._replace(eos_id=None))


def our_step(agent, state, problems, key):
  """`LLMGRPO.step` on fixed `problems`: sample G*K completions, score them, one update."""
  import jax
  import jax.numpy as jnp

  from hrljax.agents import llm_grpo

  k = agent.config.samples_per_prompt
  start = time.perf_counter()
  tokens, mask, generation, responses = agent.sample(state.lora, problems, key, k)
  sample_seconds = time.perf_counter() - start
  rewards, _, _ = agent.rewards(responses, problems, k)
  batch = llm_grpo.RolloutBatch(
    jnp.asarray(tokens),
    jnp.asarray(mask),
    jnp.asarray(generation.tokens),
    jnp.asarray(generation.mask),
    jnp.asarray(rewards),
  )
  start = time.perf_counter()
  state, metrics = agent.update(state, batch)
  jax.block_until_ready(state)
  metrics.update(
    sample_seconds=sample_seconds,
    update_seconds=time.perf_counter() - start,
    reward=float(rewards.mean()),
    completion_length_mean=float(generation.mask.sum(axis=1).mean()),
    prompt_width=int(tokens.shape[1]),
  )
  return state, metrics


def score(config, completions, answers) -> list:
  """The arithmetic reward of each completion (what both sides train on)."""
  from hrljax.envs import text_tasks

  task = config.task
  rewards, _, _ = text_tasks.arithmetic_rewards(
    completions,
    answers,
    correct_weight=task.correct_weight,
    format_weight=task.format_weight,
    answer_mode=task.answer_mode,
  )
  return [float(r) for r in rewards]


def reference_spec(config, problems, threads: int) -> dict:
  """What `llm_grpo_step_reference.py` needs: the rendered chat prompts and the settings."""
  from hrljax import llm_weights
  from hrljax.envs import text_tasks

  system = config.task.system_prompt
  prompts = []
  for problem in problems:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text_tasks.arithmetic_prompt(problem)})
    prompts.append(llm_weights.render_chat(messages))
  return {
    "prompts": prompts,
    "answers": [p.answer for p in problems],
    "num_generations": config.samples_per_prompt,
    "max_completion_length": config.max_new_tokens,
    "lora_rank": config.lora_rank,
    "lora_alpha": config.lora_alpha,
    "learning_rate": config.learning_rate,
    "beta": config.kl_coef,
    "epsilon": config.clip_epsilon,
    "temperature": config.temperature,
    "max_grad_norm": config.max_grad_norm,
    "seed": config.seeds[0],
    "threads": threads,
    "num_layers": config.num_layers,
  }


def lora_parameter_count(lora) -> int:
  import jax

  return int(sum(leaf.size for leaf in jax.tree.leaves(lora)))


def summary(name: str, runs) -> dict:
  seconds = [r["seconds"] for r in runs]
  cpu = [r["cpu_seconds"] for r in runs]
  return {
    "side": name,
    "step_seconds_median": statistics.median(seconds),
    "step_seconds_best": min(seconds),
    "cpu_seconds_median": statistics.median(cpu),
    "run_seconds": seconds,
    "cpu_seconds": cpu,
    "reward_mean": [r["reward_mean"] for r in runs],
    "completion_length_mean": [r["completion_length_mean"] for r in runs],
    # the process's peak resident memory after its last step (the model, the activations)
    "peak_rss_mb": max((r.get("peak_rss_mb", float("nan")) for r in runs), default=float("nan")),
  }


class _Reference:
  """The TRL subprocess, driven step by step; answers its reward requests with `score`."""

  def __init__(
    self, python: str, gguf: str, spec: dict, steps: int, config, script: str = REFERENCE_SCRIPT
  ):
    self._config = config
    self._inputs = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(spec, self._inputs)
    self._inputs.close()
    threads = spec["threads"]
    self._proc = subprocess.Popen(
      [python, script, f"--gguf={gguf}", f"--inputs={self._inputs.name}", f"--steps={steps}"],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      text=True,
      bufsize=1,
      env={**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})},
    )
    try:
      self.ready = self._read()
    except RuntimeError:  # the child failed to start: nothing else will remove the inputs file
      os.unlink(self._inputs.name)
      raise

  def _read(self) -> dict:
    while True:
      line = self._proc.stdout.readline()
      if not line:
        raise RuntimeError(f"reference process exited with code {self._proc.wait()}")
      if line.startswith("{"):
        message = json.loads(line)
        if "reward_request" not in message:
          return message
        request = message["reward_request"]
        rewards = score(self._config, request["completions"], request["answers"])
        self._proc.stdin.write(json.dumps({"rewards": rewards}) + "\n")
        self._proc.stdin.flush()

  def run(self) -> dict:
    self._proc.stdin.write("run\n")
    self._proc.stdin.flush()
    return self._read()

  def close(self) -> None:
    if self._proc.poll() is None:
      try:
        self._proc.stdin.write("quit\n")
        self._proc.stdin.write("quit\n")
        self._proc.stdin.close()
        self._proc.wait(timeout=120)
      except (BrokenPipeError, subprocess.TimeoutExpired):
        self._proc.kill()
    os.unlink(self._inputs.name)


def run(
  num_prompts: int = 4,
  samples_per_prompt: int = 4,
  max_new_tokens: int = 48,
  lora_rank: int = 8,
  num_layers: int = 0,
  reps: int = 3,
  seed: int = 0,
  reference_python=None,
  single_thread: bool = False,
  shared_prefix: bool = False,
  system_prompt_tokens: int = 0,
) -> list:
  """Both sides, interleaved step by step; returns the JSON records (ours, [TRL, ratio])."""
  import jax

  from hrljax import llm_weights
  from hrljax.envs import text_tasks

  if reps < 1:
    raise ValueError(f"reps: expected an int >= 1, got {reps!r}")
  if system_prompt_tokens < 0:
    raise ValueError(f"system_prompt_tokens: expected an int >= 0, got {system_prompt_tokens!r}")
  system = ""
  if system_prompt_tokens:
    system = long_system_prompt(llm_weights.load_tokenizer(), system_prompt_tokens)
  config = grpo_config(
    num_prompts,
    samples_per_prompt,
    max_new_tokens,
    lora_rank,
    num_layers,
    seed,
    shared_prefix,
    system,
  )
  agent = make_agent(config)
  state = agent.init(seed)
  problems = agent.problems(seed, 0)
  start = time.perf_counter()
  state, _ = our_step(agent, state, problems, jax.random.key(seed))
  first_step_seconds = time.perf_counter() - start

  reference = None
  if reference_python:
    spec = reference_spec(config, problems, 1 if single_thread else 0)
    reference = _Reference(reference_python, llm_weights.find_gguf_path(), spec, reps + 1, config)
    reference.run()  # warm-up step
  load = os.getloadavg()[0]
  our_runs, ref_runs = [], []
  try:
    for rep in range(reps):
      start, cpu_start = time.perf_counter(), time.process_time()
      state, metrics = our_step(agent, state, problems, jax.random.key(seed + 1 + rep))
      our_runs.append(
        {
          "seconds": time.perf_counter() - start,
          "cpu_seconds": time.process_time() - cpu_start,
          "reward_mean": metrics["reward"],
          "completion_length_mean": metrics["completion_length_mean"],
          "sample_seconds": metrics["sample_seconds"],
          "update_seconds": metrics["update_seconds"],
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
      )
      if reference is not None:
        ref_runs.append(reference.run())
      print(
        f"step {rep}: hrljax {our_runs[-1]['seconds']:.2f} s"
        + (f", TRL {ref_runs[-1]['seconds']:.2f} s" if ref_runs else ""),
        file=sys.stderr,
        flush=True,
      )
  finally:
    if reference is not None:
      reference.close()

  common = {
    "single_thread": single_thread,
    "num_prompts": num_prompts,
    "samples_per_prompt": samples_per_prompt,
    "max_new_tokens": max_new_tokens,
    "shared_prefix": shared_prefix,
    "system_prompt_tokens": system_prompt_tokens,
    "lora_rank": lora_rank,
    "num_layers": num_layers or agent.lm.config.num_layers,
    "reps": reps,
    "seed": seed,
    "load_average_1min": load,
  }
  ours = {
    **summary("hrljax", our_runs),
    **common,
    "first_step_seconds": first_step_seconds,
    "sample_seconds": [r["sample_seconds"] for r in our_runs],
    "update_seconds": [r["update_seconds"] for r in our_runs],
    "prompt_width": metrics["prompt_width"],
    "trainable_parameters": lora_parameter_count(state.lora),
    "jax": jax.__version__,
  }
  records = [ours]
  if reference is not None:
    ready = reference.ready
    our_prompt_tokens = [
      len(
        llm_weights.chat_prompt(
          agent.lm.tokenizer, text_tasks.arithmetic_prompt(p), system=system or None
        )
      )
      for p in problems
    ]
    theirs = {
      **summary("trl", ref_runs),
      **common,
      **{
        k: ready[k]
        for k in (
          "threads",
          "torch",
          "transformers",
          "trl",
          "peft",
          "trainable_parameters",
          "prompt_tokens",
        )
      },
      "same_prompt_tokens": ready["prompt_tokens"] == our_prompt_tokens,
      "same_prompt_width": max(ready["prompt_tokens"]) == ours["prompt_width"],
      "same_trainable_parameters": ready["trainable_parameters"] == ours["trainable_parameters"],
    }
    records.append(theirs)
    records.append(
      {
        "ratio_median": theirs["step_seconds_median"] / ours["step_seconds_median"],
        "ratio_best": theirs["step_seconds_best"] / ours["step_seconds_best"],
      }
    )
  return records


def main(argv) -> None:
  del argv
  if FLAGS.single_thread:  # before jax initialises its backend
    from experiments.benchmarks.llm_sampling import SINGLE_THREAD_XLA

    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SINGLE_THREAD_XLA}".strip()
  records = run(
    FLAGS.num_prompts,
    FLAGS.samples_per_prompt,
    FLAGS.max_new_tokens,
    FLAGS.lora_rank,
    FLAGS.num_layers,
    FLAGS.reps,
    FLAGS.seed,
    FLAGS.reference_python,
    FLAGS.single_thread,
    FLAGS.shared_prefix,
    FLAGS.system_prompt_tokens,
  )
  for record in records:
    print(json.dumps(record))
  ours = records[0]
  line = (
    f"hrljax {ours['step_seconds_median']:.2f} s/step (median, best "
    f"{ours['step_seconds_best']:.2f}; first step with compile "
    f"{ours['first_step_seconds']:.1f} s)"
  )
  if len(records) > 1:
    theirs, ratio = records[1], records[2]
    line += (
      f"; TRL {theirs['step_seconds_median']:.2f} s/step (best "
      f"{theirs['step_seconds_best']:.2f}); TRL/hrljax {ratio['ratio_median']:.2f}x "
      f"(best {ratio['ratio_best']:.2f}x); peak memory {ours['peak_rss_mb']:.0f} MB vs "
      f"{theirs['peak_rss_mb']:.0f} MB"
    )
  print(line + f"; load {ours['load_average_1min']:.1f}", file=sys.stderr)


if __name__ == "__main__":
  define_flags()
  app.run(main)
