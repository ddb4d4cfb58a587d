"""Tests of the SmolLM2 benchmarks (experiments/benchmarks/llm_sampling.py, llm_grpo_step.py).

Both run here on the first two layers of the model at tiny sizes, hrljax side only (the
PyTorch/TRL side needs a venv of its own): the records' fields and the numbers they are derived
from, the trainable parameter count against a count by hand, the prompts sent to TRL against the
tokens our side samples from, and the reward protocol with the reference process (a stand-in
script). Timings are never asserted.
"""

import json
import statistics
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.benchmarks import llm_grpo_step, llm_sampling
from hrljax import llm_weights
from hrljax.envs import text_tasks
from hrljax.networks import llama

NUM_LAYERS = 2


def test_sampling_record_fields_and_rates():
  records = llm_sampling.run(
    batch=2, prompt_len=8, new_tokens=3, reps=2, num_layers=NUM_LAYERS, group_size=2
  )
  assert len(records) == 1  # no reference side without reference_python
  ours = records[0]
  assert ours["side"] == "hrljax" and ours["num_layers"] == NUM_LAYERS
  assert ours["group_size"] == 2  # one prompt sampled twice: still 2 x 3 tokens per run
  assert ours["tokens_per_run"] == 2 * 3 and ours["dtype"] == "float32"
  seconds, cpu = ours["run_seconds"], ours["cpu_seconds"]
  assert len(seconds) == len(cpu) == 2
  assert ours["tokens_per_second_median"] == pytest.approx(6 / statistics.median(seconds))
  assert ours["tokens_per_second_best"] == pytest.approx(6 / min(seconds))
  assert ours["tokens_per_cpu_second_median"] == pytest.approx(6 / statistics.median(cpu))
  assert ours["compile_seconds"] > 0
  assert ours["peak_rss_mb"] > 100  # this process holds jax and the model: more than 100 MB
  json.dumps(ours)  # one JSON line


def test_sampling_rejects_bad_arguments():
  with pytest.raises(ValueError, match="reps: expected an int >= 1, got 0"):
    llm_sampling.run(reps=0, num_layers=NUM_LAYERS)
  with pytest.raises(ValueError, match="dtype: expected one of"):
    llm_sampling.run(dtype="float16", num_layers=NUM_LAYERS)
  with pytest.raises(ValueError, match="group_size: expected an int >= 1 dividing batch=8, got 3"):
    llm_sampling.run(group_size=3, num_layers=NUM_LAYERS)
  # Prompts longer than the text repeat it; every window is distinct.
  windows = llm_sampling.prompts(llm_weights.load_tokenizer(), 8, 256)
  assert [len(w) for w in windows] == [256] * 8 and len({tuple(w) for w in windows}) == 8


def _lora_parameters_by_hand(rank: int, layers: int) -> int:
  # SmolLM2-135M: width 576, 9 query heads and 3 key/value heads of 64, FFN 1536; an adapter
  # on a [in, out] projection has rank * (in + out) parameters.
  shapes = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)]
  return layers * sum(rank * (n_in + n_out) for n_in, n_out in shapes)


def test_grpo_step_record_fields_and_counts():
  """With a shared prefix and a long system prompt (the flags of the long-prompt comparison)."""
  records = llm_grpo_step.run(
    num_prompts=2,
    samples_per_prompt=2,
    max_new_tokens=3,
    num_layers=NUM_LAYERS,
    reps=1,
    shared_prefix=True,
    system_prompt_tokens=40,
  )
  assert len(records) == 1
  ours = records[0]
  assert ours["side"] == "hrljax" and ours["num_layers"] == NUM_LAYERS
  assert ours["shared_prefix"] and ours["system_prompt_tokens"] == 40
  assert ours["trainable_parameters"] == _lora_parameters_by_hand(8, NUM_LAYERS)
  assert ours["completion_length_mean"] == [3.0]  # the stop token is not honoured
  # Prompts padded to the longest one (prompt_bucket=1), as TRL pads them.
  config = llm_grpo_step.grpo_config(2, 2, 3, 8, NUM_LAYERS, seed=0)
  assert config.prompt_bucket == 1
  problems = text_tasks.arithmetic_problems(
    0, 2, max_operand=config.task.max_operand, operations=tuple(config.task.operations)
  )
  tokenizer = llm_weights.load_tokenizer()
  system = llm_grpo_step.long_system_prompt(tokenizer, 40)
  assert abs(len(tokenizer.encode(system, add_special_tokens=False).ids) - 40) <= 2
  assert ours["prompt_width"] == max(
    len(llm_weights.chat_prompt(tokenizer, text_tasks.arithmetic_prompt(p), system=system))
    for p in problems
  )
  assert ours["step_seconds_median"] == ours["run_seconds"][0] == ours["step_seconds_best"]
  assert ours["first_step_seconds"] > 0 and len(ours["reward_mean"]) == 1
  assert ours["peak_rss_mb"] > 100
  assert 0.0 <= ours["reward_mean"][0] <= 1.5
  json.dumps(ours)


def test_reference_prompts_are_the_tokens_our_side_samples_from():
  config = llm_grpo_step.grpo_config(3, 2, 4, 8, NUM_LAYERS, seed=5)
  problems = text_tasks.arithmetic_problems(5, 3)
  spec = llm_grpo_step.reference_spec(config, problems, threads=1)
  tokenizer = llm_weights.load_tokenizer()
  for text, problem in zip(spec["prompts"], problems):
    sent = tokenizer.encode(text, add_special_tokens=False).ids
    assert sent == llm_weights.chat_prompt(tokenizer, text_tasks.arithmetic_prompt(problem))
  assert spec["answers"] == [p.answer for p in problems]
  assert (spec["num_generations"], spec["max_completion_length"], spec["beta"]) == (2, 4, 0.04)


_FAKE_REFERENCE = textwrap.dedent("""
    import json, sys
    print("a log line that is not JSON", flush=True)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
      if line.strip() != "run":
        break
      request = {"completions": ["Answer: 7", "it is 7", "Answer: 6"], "answers": [7, 7, 7]}
      print(json.dumps({"reward_request": request}), flush=True)
      rewards = json.loads(sys.stdin.readline())["rewards"]
      print(json.dumps({"seconds": 2.0, "cpu_seconds": 1.0, "rewards": rewards,
                        "reward_mean": sum(rewards) / len(rewards),
                        "completion_length_mean": 4.0}), flush=True)
""")


def test_reference_reward_requests_are_scored_by_our_reward(tmp_path):
  script = tmp_path / "fake_reference.py"
  script.write_text(_FAKE_REFERENCE)
  config = llm_grpo_step.grpo_config(2, 2, 4, 8, NUM_LAYERS, seed=0)
  reference = llm_grpo_step._Reference(
    sys.executable, "unused.gguf", {"threads": 0}, 1, config, script=str(script)
  )
  try:
    assert reference.ready == {"ready": True}
    result = reference.run()
  finally:
    reference.close()
  # Strict answer mode, weights 1 (correct) and 0.5 (format): formatted and right, unformatted,
  # formatted and wrong.
  assert result["rewards"] == [1.5, 0.0, 0.5]
  summary = llm_grpo_step.summary("trl", [result])
  assert summary["step_seconds_median"] == 2.0 and summary["reward_mean"] == [2.0 / 3.0]


_TINY = llama.smollm2_config(
  num_layers=2, vocab_size=61, dim=24, num_heads=4, num_kv_heads=2, hidden_dim=40, lora_rank=2
)


def test_logits_from_keeps_the_last_positions_of_the_full_forward():
  # `llama.forward(..., logits_from=k)` is the optimisation suggested for the GRPO update's
  # response log-probs: it must equal the full forward's logits sliced at k.
  params = llama.init_params(_TINY, jax.random.key(0))
  lora = jax.tree.map(lambda a: a + 0.1, llama.init_lora(_TINY, jax.random.key(1)))
  tokens = jax.random.randint(jax.random.key(2), (3, 7), 0, _TINY.vocab_size)
  mask = jnp.arange(7)[None, :] >= jnp.array([[0], [2], [3]])  # left padding
  positions = llama.positions_from_mask(mask)
  # One program for both (an eager call traces and compiles the layer scan anew).
  full, kept = jax.jit(
    lambda p, l: (
      llama.forward(_TINY, p, l, tokens, positions, mask)[0],
      llama.forward(_TINY, p, l, tokens, positions, mask, logits_from=4)[0],
    )
  )(params, lora)
  assert kept.shape == (3, 3, _TINY.vocab_size)
  np.testing.assert_allclose(np.asarray(kept), np.asarray(full[:, 4:]), rtol=1e-5, atol=1e-6)
  for bad in (7, -1, 1.0):
    with pytest.raises(ValueError, match=r"logits_from: expected an int in \[0, 7\)"):
      llama.forward(_TINY, params, lora, tokens, positions, mask, logits_from=bad)
