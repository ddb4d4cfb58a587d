"""Tests for Scaf-GRPO's hint scaffolding and variance-aware prompt sampling in
hrljax.agents.llm_grpo, on a tiny randomly initialised Llama with SmolLM2's tokenizer.

The tiny model answers nothing correctly, so where a test needs correct responses it replaces the
agent's scorer by a scripted one (which rows are correct is then known by construction).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import config_checks, training
from hrljax.agents import llm_grpo
from hrljax.data import hint_scaffold
from hrljax.envs import text_tasks
from tests.agents.tiny_llama import TINY, tiny_language_model


@pytest.fixture(scope="module")
def tiny_lm():
  return tiny_language_model()


def small_config(**overrides):
  config = llm_grpo.get_config()
  config.num_prompts = 2
  config.samples_per_prompt = 2
  config.max_new_tokens = 6
  config.lora_rank = TINY.lora_rank
  config.lora_alpha = TINY.lora_alpha
  config.eval_problems = 0
  config.checkpoint_every = 1
  config.num_updates = 2
  config.update(overrides)
  return config


# ------------------------------------------------------------------------------------------------
# Config and the task's hints


@pytest.mark.parametrize(
  "field, value, match",
  [
    ("hints", "always", "config.hints"),
    ("prompt_sampling", "weighted", "config.prompt_sampling"),
    ("vas_floor", 0.0, "config.vas_floor"),
    ("vas_mixture", 1.5, "config.vas_mixture"),
    ("vas_normalization", "softmax", "config.vas_normalization"),
    ("hint_warmup_updates", -1, "config.hint_warmup_updates"),
  ],
)
def test_validate_config_rejects(field, value, match):
  config = llm_grpo.get_config()
  config[field] = value
  with pytest.raises(config_checks.ConfigError, match=match):
    llm_grpo.validate_config(config)


def test_pool_smaller_than_the_uniform_draws_is_rejected():
  config = llm_grpo.get_config()
  config.update(prompt_sampling="variance_aware", num_prompts=8, prompt_pool=3)
  with pytest.raises(config_checks.ConfigError, match="config.prompt_pool"):
    llm_grpo.validate_config(config)


def test_defaults_are_off_and_uniform():
  config = llm_grpo.get_config()
  assert (config.hints, config.prompt_sampling) == ("off", "uniform")


def test_hint_levels_say_more_at_each_tier():
  problem = text_tasks.ArithmeticProblem("Tom has 7 apples and buys 4 more. ...", 11, "add", (7, 4))
  hints = [text_tasks.hint(problem, level) for level in range(text_tasks.HINT_LEVELS + 1)]
  assert hints[0] == "" and "add" in hints[1] and "11" not in hints[1]
  assert hints[2] == "Compute 7 + 4." and hints[3] == "7 + 4 = 11."
  assert text_tasks.hinted_prompt(problem, 0) == text_tasks.arithmetic_prompt(problem)
  assert text_tasks.hinted_prompt(problem, 2).startswith(
    problem.question + "\nHint: Compute 7 + 4."
  )
  for bad in (-1, 4, 1.0):
    with pytest.raises(ValueError, match="level"):
      text_tasks.hint(problem, bad)


# ------------------------------------------------------------------------------------------------
# Selection and replacement (host arrays, hand-made)


def test_all_fail_groups_and_lowest_solving_level():
  correct = np.array([0, 1, 0, 0, 0, 0, 1, 1], bool)
  np.testing.assert_array_equal(
    hint_scaffold.all_fail_groups(correct, 4, 2), [False, True, True, False]
  )
  grid = np.array([[0, 0, 0], [0, 1, 1], [1, 0, 1], [0, 0, 1]], bool)
  np.testing.assert_array_equal(hint_scaffold.lowest_solving_level(grid), [0, 2, 1, 3])
  with pytest.raises(ValueError, match="correct"):
    hint_scaffold.all_fail_groups(correct, 3, 2)
  with pytest.raises(ValueError, match="hinted_correct"):
    hint_scaffold.lowest_solving_level(correct)


def test_replace_with_hinted_touches_only_the_given_rows():
  batch = llm_grpo.RolloutBatch(
    np.arange(8, dtype=np.int32).reshape(4, 2) + 10,
    np.ones((4, 2), bool),
    np.arange(12, dtype=np.int32).reshape(4, 3),
    np.ones((4, 3), bool),
    np.array([1.0, 0.0, 0.0, 0.0], np.float32),
  )
  hinted = llm_grpo.RolloutBatch(
    np.array([[7, 7, 7], [8, 8, 8]], np.int32),
    np.array([[0, 1, 1], [1, 1, 1]], bool),
    np.array([[50, 51, 52], [60, 61, 62]], np.int32),
    np.array([[1, 1, 0], [1, 1, 1]], bool),
    np.array([0.5, 1.5], np.float32),
  )
  out = hint_scaffold.replace_with_hinted(batch, np.array([2]), hinted, np.array([1]), pad_id=0)
  # Prompts left-padded to the hinted width (3); row 2 takes the hinted prompt, the others keep
  # theirs.
  np.testing.assert_array_equal(out.prompt_tokens[[0, 1, 3], 1:], batch.prompt_tokens[[0, 1, 3]])
  assert not out.prompt_mask[[0, 1, 3], 0].any() and out.prompt_mask[[0, 1, 3], 1:].all()
  np.testing.assert_array_equal(out.prompt_tokens[2], [8, 8, 8])
  np.testing.assert_array_equal(out.response[2], [60, 61, 62])
  np.testing.assert_array_equal(out.response[[0, 1, 3]], batch.response[[0, 1, 3]])
  np.testing.assert_array_equal(out.rewards, [1.0, 0.0, 1.5, 0.0])
  # Without the hint in the context, the row keeps its own prompt.
  bare = hint_scaffold.replace_with_hinted(
    batch, np.array([2]), hinted, np.array([0]), pad_id=0, in_context=False
  )
  np.testing.assert_array_equal(bare.prompt_tokens, batch.prompt_tokens)
  np.testing.assert_array_equal(bare.response[2], [50, 51, 52])
  np.testing.assert_array_equal(bare.response_mask[2], [1, 1, 0])


# ------------------------------------------------------------------------------------------------
# One scaffolded step with a scripted scorer


class Recorder:
  """Wraps the agent's sampling, scoring and update: records texts and batches; scores by script."""

  def __init__(self, agent, scripted_correct):
    self.texts, self.responses, self.batches = [], [], []
    self.scripted = list(scripted_correct)
    sample_texts, update = agent.sample_texts, agent.update

    def record_sample(lora, texts, key, greedy=False):
      self.texts.append(list(texts))
      self.responses.append(sample_texts(lora, texts, key, greedy=greedy))
      return self.responses[-1]

    def scripted_rewards(responses, problems, samples):
      correct = np.asarray(self.scripted.pop(0), bool)
      assert correct.shape == (len(responses),)
      return 1.0 + correct.astype(np.float32) + np.arange(len(correct)) / 100, correct, correct

    def record_update(state, batch):
      self.batches.append(batch)
      return update(state, batch)

    agent.sample_texts, agent.rewards, agent.update = record_sample, scripted_rewards, record_update


def test_hints_only_for_all_fail_groups_escalate_and_stay_out_of_the_loss(tiny_lm):
  agent = llm_grpo.LLMGRPO(small_config(hints="scaffold", hint_warmup_updates=0), tiny_lm)
  levels = text_tasks.HINT_LEVELS
  # Batch: group 0 has a correct response, group 1 none. Hinted rows: group 1 at levels 1, 2, 3
  # (then padding repeats): levels 2 and 3 solve it, so level 2 is taken.
  recorder = Recorder(agent, [[1, 0, 0, 0], [0, 1, 1, 0, 1, 1]])
  state = agent.init(0)
  problems = agent.problems(0, 0)
  _, metrics = agent.step(state)
  assert len(recorder.texts) == 2
  hinted_texts = recorder.texts[1]
  assert hinted_texts[:levels] == [text_tasks.hinted_prompt(problems[1], lv) for lv in (1, 2, 3)]
  assert len(hinted_texts) == 2 * levels  # G·L rows whatever the number of failing groups
  assert not any(problems[0].question in text for text in hinted_texts)
  assert metrics["all_fail_fraction"] == 0.5
  assert metrics["hint_rate"] == 0.5 and metrics["hint_level"] == 2.0

  plain, hinted = recorder.responses
  batch = jax.tree.map(np.asarray, recorder.batches[0])
  width = plain.prompt_tokens.shape[1]
  # Group 0 (solved) and the second response of group 1 are untouched.
  for row in (0, 1, 3):
    np.testing.assert_array_equal(batch.prompt_tokens[row, -width:], plain.prompt_tokens[row])
    np.testing.assert_array_equal(batch.prompt_mask[row, -width:], plain.prompt_mask[row])
    assert not batch.prompt_mask[row, :-width].any()
    np.testing.assert_array_equal(batch.response[row], plain.generation.tokens[row])
  np.testing.assert_allclose(batch.rewards[[0, 1, 3]], [2.0, 1.01, 1.03])
  # Row 2 is the level-2 hinted response, its reward as scored, its prompt the hinted prompt.
  np.testing.assert_array_equal(batch.response[2], hinted.generation.tokens[1])
  np.testing.assert_array_equal(batch.response_mask[2], hinted.generation.mask[1])
  np.testing.assert_allclose(batch.rewards[2], 2.01)
  hinted_width = hinted.prompt_tokens.shape[1]
  np.testing.assert_array_equal(batch.prompt_tokens[2, -hinted_width:], hinted.prompt_tokens[1])
  # The hint is context: its tokens are prompt tokens, and the loss mask is the response mask.
  hint_ids = tiny_lm.tokenizer.encode(" Compute", add_special_tokens=False).ids
  prompt_ids = batch.prompt_tokens[2][batch.prompt_mask[2]].tolist()
  assert any(prompt_ids[i : i + len(hint_ids)] == hint_ids for i in range(len(prompt_ids)))
  assert not any(
    batch.response[2][i : i + len(hint_ids)].tolist() == hint_ids
    for i in range(batch.response.shape[1])
  )


def test_no_hint_pass_without_an_all_fail_group_or_before_the_warmup(tiny_lm):
  agent = llm_grpo.LLMGRPO(small_config(hints="scaffold", hint_warmup_updates=0), tiny_lm)
  recorder = Recorder(agent, [[1, 0, 0, 1]])  # every group has a correct response
  _, metrics = agent.step(agent.init(0))
  assert len(recorder.texts) == 1 and metrics["hint_rate"] == 0.0
  assert metrics["all_fail_fraction"] == 0.0
  agent = llm_grpo.LLMGRPO(small_config(hints="scaffold", hint_warmup_updates=1), tiny_lm)
  recorder = Recorder(agent, [[0, 0, 0, 0]])  # all fail, but inside the exemption period
  _, metrics = agent.step(agent.init(0))
  assert len(recorder.texts) == 1 and metrics["all_fail_fraction"] == 1.0
  np.testing.assert_array_equal(
    recorder.batches[0].response, recorder.responses[0].generation.tokens
  )


def test_inactive_hints_leave_the_run_bitwise_unchanged(tiny_lm):
  """Hints switched on but still in their exemption period: the same adapters as hints off, bit
  for bit (the hint code draws no randomness and touches nothing until it acts); the default
  state holds no leaf beyond the adapters, the optimizer state, the update and the seed."""
  results = []
  for overrides in ({}, {"hints": "scaffold", "hint_warmup_updates": 5}):
    agent = llm_grpo.LLMGRPO(small_config(**overrides), tiny_lm)
    state = agent.init(0)
    for _ in range(2):
      state, _ = agent.step(state)
    results.append(state)
  jax.tree.map(np.testing.assert_array_equal, results[0], results[1])
  assert results[0].prompt_stats is None
  bare = (results[0].lora, results[0].opt_state, results[0].update, results[0].seed)
  assert len(jax.tree.leaves(results[0])) == len(jax.tree.leaves(bare))


# ------------------------------------------------------------------------------------------------
# Variance-aware sampling in the driver


def test_variance_aware_run_resumes_exactly(tiny_lm, tmp_path):
  def run(num_updates, workdir):
    config = small_config(prompt_sampling="variance_aware", prompt_pool=5, num_updates=num_updates)
    learner = llm_grpo.make_learner(config, tiny_lm)
    return training.run(learner, config, str(workdir), allow_config_change=True)

  learner = llm_grpo.make_learner(
    small_config(prompt_sampling="variance_aware", prompt_pool=5), tiny_lm
  )
  straight = learner.init(0)
  for _ in range(2):
    straight, _ = learner.step(straight)
  run(1, tmp_path / "b")
  resumed = run(2, tmp_path / "b")  # restored from the checkpoint of update 1
  jax.tree.map(np.testing.assert_array_equal, straight, resumed)
  stats = resumed.prompt_stats
  assert stats.pass_rate.shape == (5,) and int(stats.visits.sum()) == 2 * 2
  # The tiny model solves nothing: every visited prompt has pass rate 0, the others the prior.
  visited = np.asarray(stats.visits) > 0
  np.testing.assert_array_equal(np.asarray(stats.pass_rate)[visited], 0.0)
  np.testing.assert_array_equal(np.asarray(stats.pass_rate)[~visited], 0.5)


def test_variance_aware_problems_come_from_the_pool(tiny_lm):
  agent = llm_grpo.LLMGRPO(small_config(prompt_sampling="variance_aware", prompt_pool=3), tiny_lm)
  recorder = Recorder(agent, [[1, 0, 0, 0]])
  state, metrics = agent.step(agent.init(4))
  pool = [text_tasks.arithmetic_prompt(p) for p in agent.task.pool_problems(4, range(3))]
  assert all(text in pool for text in recorder.texts[0])
  assert metrics["prompt_pass_rate"] == 0.25 and 0 < metrics["prompt_pool_seen"] <= 2 / 3 + 1e-6
  assert int(state.prompt_stats.visits.sum()) == 2
  np.testing.assert_array_equal(np.asarray(jnp.sort(state.prompt_stats.pass_rate))[-1], 0.5)
