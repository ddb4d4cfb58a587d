"""Tests for hrljax.agents.llm_grpo: advantages, loss gradient, one real step, the resumable driver.

A tiny randomly initialised Llama with SmolLM2's vocabulary and tokenizer serves the driver and
gradient tests (fast to compile); one full GRPO step runs on the real model truncated to its first
two layers (`load_smollm2(num_layers=2)`), as the issue asks.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hrljax import checkpoint, config_checks, llm_prompts, llm_weights, training
from hrljax.agents import llm_common, llm_grpo
from hrljax.losses import group_relative as gr
from hrljax.losses import policy_gradient as pg
from hrljax.networks import llama
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
  config.eval_problems = 4  # the training batch's shape: no second generate compile
  config.eval_every = 2
  config.checkpoint_every = 1
  config.num_updates = 2
  config.update(overrides)
  return config


# ------------------------------------------------------------------------------------------------
# Config


@pytest.mark.parametrize(
  "field, value, match",
  [
    ("loss_aggregation", "mean", "config.loss_aggregation"),
    ("estimator", "ppo", "config.estimator"),
    ("samples_per_prompt", 1, "config.samples_per_prompt"),
    ("learning_rate", 0.0, "config.learning_rate"),
    ("num_layers", -1, "config.num_layers"),
    ("hicra_alpha", 1.5, "config.hicra_alpha"),
    ("unlikeliness_beta", 1.5, "config.unlikeliness_beta"),
    ("llds_coef", -0.1, "config.llds_coef"),
    ("llds_gate", "token", "config.llds_gate"),
    ("kl_estimator", "k9", "config.kl_estimator"),
    ("prompt_bucket", 0, "config.prompt_bucket"),
    ("eval_samples", -1, "config.eval_samples"),
    ("objective", "ppo", "config.objective"),
    ("pacs_centring", "median", "config.pacs_centring"),
    ("cgpo_baseline", "mean", "config.cgpo_baseline"),
  ],
)
def test_validate_config_rejects(field, value, match):
  config = llm_grpo.get_config()
  config[field] = value
  with pytest.raises(config_checks.ConfigError, match=match):
    llm_grpo.validate_config(config)


def test_validate_config_task_and_devices():
  config = llm_grpo.get_config()
  llm_grpo.validate_config(config)
  with pytest.raises(config_checks.ConfigError, match="num_devices"):
    llm_grpo.validate_config(config, num_devices=2)
  config.task.operations = ("div",)
  with pytest.raises(config_checks.ConfigError, match="config.task.operations"):
    llm_grpo.validate_config(config)


def test_paper_defaults():
  config = llm_grpo.get_config()
  assert (config.clip_epsilon, config.kl_coef, config.kl_estimator, config.update_epochs) == (
    0.2,
    0.04,
    "k3",
    1,
  )
  assert config.loss_aggregation == "seq_mean_token_mean"
  assert config.estimator == "grpo"


# ------------------------------------------------------------------------------------------------
# Advantages (hand-computed)


def _advantage_config(**overrides):
  return llm_grpo.update_settings(
    small_config(**{"num_prompts": 2, "samples_per_prompt": 4, **overrides})
  )


REWARDS = jnp.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
MASK = jnp.array([[1, 1, 0]] * 8, bool)
NO_PATTERN = (jnp.zeros((1, 1), jnp.int32), jnp.zeros((1,), jnp.int32))


def test_grpo_advantages_hand_computed():
  response = jnp.zeros((8, 3), jnp.int32)
  adv, keep = llm_grpo.grpo_token_advantages(
    _advantage_config(), REWARDS, response, MASK, *NO_PATTERN
  )
  # Group 0: mean 0.25, unbiased std sqrt((0.75² + 3·0.25²) / 3) = 0.5.
  row = np.array([0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0]) / (0.5 + 1e-6)
  row[4:] = 0.0
  np.testing.assert_allclose(adv, row[:, None] * np.array([1, 1, 0]), rtol=1e-6)
  assert bool(jnp.all(keep))


def test_dr_grpo_rloo_and_dapo_filter():
  response = jnp.zeros((8, 3), jnp.int32)
  adv, keep = llm_grpo.grpo_token_advantages(
    _advantage_config(estimator="dr_grpo", dynamic_sampling=True),
    REWARDS,
    response,
    MASK,
    *NO_PATTERN,
  )
  np.testing.assert_allclose(adv[:, 0], [0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0], atol=1e-7)
  np.testing.assert_array_equal(keep, [True] * 4 + [False] * 4)  # group 1 is uninformative
  adv, _ = llm_grpo.grpo_token_advantages(
    _advantage_config(estimator="rloo"), REWARDS, response, MASK, *NO_PATTERN
  )
  # Leave-one-out: 1 - 0 = 1 and 0 - 1/3.
  np.testing.assert_allclose(adv[:4, 0], [1.0, -1 / 3, -1 / 3, -1 / 3], rtol=1e-6)


def test_unlikeliness_scales_the_correct_rewards_by_their_likelihood_rank():
  """Group 1 is all correct; the mean behaviour log-probs of rows 4-7 are -1, -3, -2, -0.5, so
  their ranks are 2, 0, 1, 3 (least likely first) and R' = 1 - 0.25 rank / 4 = 0.875, 1, 0.9375,
  0.8125, normalised in the group; a reversed rank would give row 5 the smallest reward. Group 0's
  equal log-probs rank by row: its one correct response (row 0) keeps R = 1 (GRPO's row)."""
  logp = np.zeros((8, 3), np.float32)
  logp[4:, :2] = np.array([-1.0, -3.0, -2.0, -0.5])[:, None]
  logp[:, 2] = 5.0  # masked: never read
  adv, _ = llm_grpo.grpo_token_advantages(
    _advantage_config(estimator="unlikeliness"),
    REWARDS,
    jnp.zeros((8, 3), jnp.int32),
    MASK,
    *NO_PATTERN,
    jnp.asarray(logp),
  )
  shaped = np.array([0.875, 1.0, 0.9375, 0.8125])
  expected = (shaped - shaped.mean()) / (shaped.std(ddof=1) + 1e-6)
  np.testing.assert_allclose(adv[4:, 0], expected, rtol=1e-5)
  grpo = np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6)
  np.testing.assert_allclose(adv[:4, 0], grpo, rtol=1e-6)
  np.testing.assert_array_equal(adv[:, 2], 0.0)


def test_hicra_amplifies_planning_tokens():
  response = jnp.array([[7, 8, 9]] * 8, jnp.int32)
  patterns, lengths = jnp.array([[8, 9]], jnp.int32), jnp.array([2], jnp.int32)
  mask = jnp.ones((8, 3), bool)
  adv, _ = llm_grpo.grpo_token_advantages(
    _advantage_config(estimator="dr_grpo", hicra_alpha=0.2),
    REWARDS,
    response,
    mask,
    patterns,
    lengths,
  )
  # Tokens 8, 9 are the planning phrase: A + 0.2 |A|; token 7 unchanged.
  np.testing.assert_allclose(adv[0], [0.75, 0.9, 0.9], rtol=1e-6)
  np.testing.assert_allclose(adv[1], [-0.25, -0.2, -0.2], rtol=1e-6)


def test_phrase_patterns_tokenise_both_spacings(tiny_lm):
  patterns, lengths = llm_prompts.phrase_patterns(tiny_lm.tokenizer, ("First,",))
  enc = tiny_lm.tokenizer.encode
  expected = [
    enc("First,", add_special_tokens=False).ids,
    enc(" First,", add_special_tokens=False).ids,
  ]
  assert len(lengths) == 2
  for row, ids in enumerate(expected):
    assert list(patterns[row, : lengths[row]]) == ids


def test_encode_prompts_bucket_one_pads_to_the_longest(tiny_lm):
  texts = ["What is 2 + 3?", "What is 12 - 7 after you add 4 to it?"]
  lengths = [len(llm_weights.chat_prompt(tiny_lm.tokenizer, t)) for t in texts]
  tokens, mask = llm_common.encode_prompts(tiny_lm, texts, bucket=1)
  assert tokens.shape == (2, max(lengths)) and list(mask.sum(1)) == lengths
  assert not mask[np.argmin(lengths), 0] and mask[:, -1].all()  # left padding
  tokens16, _ = llm_common.encode_prompts(tiny_lm, texts)
  assert tokens16.shape[1] == -(-max(lengths) // 16) * 16


# ------------------------------------------------------------------------------------------------
# Loss and gradient on the tiny model


def _tiny_batch(rewards):
  key = jax.random.key(3)
  prompt = jax.random.randint(key, (4, 5), 3, 200, dtype=jnp.int32)
  prompt_mask = jnp.array([[0, 1, 1, 1, 1]] * 2 + [[1] * 5] * 2, bool)
  response = jax.random.randint(jax.random.key(4), (4, 4), 3, 200, dtype=jnp.int32)
  response_mask = jnp.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], bool)
  return llm_grpo.RolloutBatch(
    prompt, prompt_mask, response, response_mask, jnp.asarray(rewards, jnp.float32)
  )


def test_response_logprobs_match_token_logprobs(tiny_lm):
  batch = _tiny_batch([0, 1, 0, 1])
  lora = llama.init_lora(TINY, jax.random.key(1))
  lora = jax.tree.map(lambda x: x + 0.1, lora)  # non-zero adapters
  ours = llm_common.response_logprobs(
    TINY,
    tiny_lm.params,
    lora,
    batch.prompt_tokens,
    batch.prompt_mask,
    batch.response,
    batch.response_mask,
  )
  tokens = jnp.concatenate([batch.prompt_tokens, batch.response], 1)
  mask = jnp.concatenate([batch.prompt_mask, batch.response_mask], 1)
  theirs = llama.token_logprobs(TINY, tiny_lm.params, lora, tokens, mask)[:, 4:]
  np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_grpo_gradient_is_the_policy_gradient(tiny_lm):
  """One epoch, no KL, seq_mean_token_mean: ∇L = −(1/B) Σ_i A_i / |o_i| Σ_t ∇log π(o_it)."""
  config = _advantage_config(num_prompts=2, samples_per_prompt=2, kl_coef=0.0)
  batch = _tiny_batch([1.0, 0.0, 0.0, 2.0])
  lora = jax.tree.map(lambda x: x + 0.05, llama.init_lora(TINY, jax.random.key(1)))
  adv, keep = llm_grpo.grpo_token_advantages(
    config, batch.rewards, batch.response, batch.response_mask, *NO_PATTERN
  )
  grads = jax.jit(
    jax.grad(
      lambda l, p: llm_grpo.llm_grpo_objective(
        l, p, TINY, config, batch, adv, batch.response_mask, None, None
      )[0]
    )
  )(lora, tiny_lm.params)
  # Advantages by hand: each group (1, 0) / (0, 2) is ±1/sqrt(2)·... z-scores ±0.7071 / std.
  a = np.array([0.5, -0.5, -1.0, 1.0]) / (np.array([0.5, 0.5, 1.0, 1.0]) * np.sqrt(2) + 1e-6)
  lengths = np.asarray(batch.response_mask.sum(1), np.float64)

  def reference(l, p):
    logp = llm_common.response_logprobs(
      TINY, p, l, batch.prompt_tokens, batch.prompt_mask, batch.response, batch.response_mask
    )
    return -jnp.sum(jnp.asarray(a / lengths, jnp.float32) * logp.sum(1)) / 4

  expected = jax.jit(jax.grad(reference))(lora, tiny_lm.params)
  jax.tree.map(lambda g, e: np.testing.assert_allclose(g, e, rtol=2e-4, atol=1e-7), grads, expected)


def test_llds_adds_its_penalty_on_the_preserved_tokens_that_lost_likelihood(tiny_lm):
  """The objective with `llds_coef` = 0.2 is the objective without it plus
  `llds_loss(logp, old_logp, A, mask)` of the adapters being trained; 0 when they are the
  behaviour adapters."""
  batch = _tiny_batch([1.0, 0.0, 0.0, 2.0])
  behaviour = jax.tree.map(lambda x: x + 0.05, llama.init_lora(TINY, jax.random.key(1)))
  moved = jax.tree.map(lambda x: x - 0.3, behaviour)
  logprobs = jax.jit(
    lambda l: llm_common.batch_logprobs(TINY, tiny_lm.params, l, batch, temperature=1.0)
  )
  old_logp = logprobs(behaviour)
  results = {}
  for coef in (0.0, 0.2):
    config = _advantage_config(num_prompts=2, samples_per_prompt=2, kl_coef=0.0, llds_coef=coef)
    adv, _ = llm_grpo.grpo_token_advantages(
      config, batch.rewards, batch.response, batch.response_mask, *NO_PATTERN
    )
    objective = jax.jit(
      lambda l, config=config, adv=adv: llm_grpo.llm_grpo_objective(
        l, tiny_lm.params, TINY, config, batch, adv, batch.response_mask, old_logp, None
      )
    )
    results[coef] = (objective(moved), objective(behaviour), adv)
  adv = results[0.2][2]
  expected, _ = gr.llds_loss(logprobs(moved), old_logp, adv, batch.response_mask, coef=0.2)
  assert float(expected) > 0
  with_llds, metrics = results[0.2][0]
  np.testing.assert_allclose(
    float(with_llds), float(results[0.0][0][0]) + float(expected), rtol=1e-5
  )
  np.testing.assert_allclose(float(metrics["llds"]), float(expected), rtol=1e-5)
  assert float(results[0.2][1][1]["llds"]) == 0.0


def test_pacs_objective_is_the_cross_entropy_of_the_implicit_reward(tiny_lm):
  """`objective="pacs"`: the loss is `pacs_loss` of the batch's log-probs against the behaviour
  log-probs with the rewards as labels, and its gradient raises the correct responses."""
  config = _advantage_config(
    num_prompts=2, samples_per_prompt=2, kl_coef=0.0, objective="pacs", pacs_beta=2.0
  )
  batch = _tiny_batch([1.0, 0.0, 0.0, 1.0])
  behaviour = jax.tree.map(lambda x: x + 0.05, llama.init_lora(TINY, jax.random.key(1)))
  moved = jax.tree.map(lambda x: x - 0.1, behaviour)
  old_logp = llm_common.batch_logprobs(TINY, tiny_lm.params, behaviour, batch, temperature=1.0)
  adv = jnp.zeros((4, 4))

  def objective(l):
    return llm_grpo.llm_grpo_objective(
      l, tiny_lm.params, TINY, config, batch, adv, batch.response_mask, old_logp, None
    )

  (loss, metrics), grads = jax.jit(jax.value_and_grad(objective, has_aux=True))(moved)
  logp = llm_common.batch_logprobs(TINY, tiny_lm.params, moved, batch, temperature=1.0)
  expected, _ = gr.pacs_loss(
    logp, old_logp, batch.response_mask, batch.rewards, jnp.array([0, 0, 1, 1]), 2, beta=2.0
  )
  np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)
  assert float(metrics["kl"]) == 0.0 and float(optax.tree.norm(grads)) > 0


def test_gtpo_objective_reads_the_completion_advantages_and_the_token_entropies(tiny_lm):
  """`objective="gtpo"`: the loss is `gtpo_loss` of the completion advantages and the entropies
  of the distributions the log-probs come from (checked against the model's full logits)."""
  config = _advantage_config(
    num_prompts=2, samples_per_prompt=2, kl_coef=0.0, objective="gtpo", estimator="dr_grpo"
  )
  batch = _tiny_batch([1.0, 0.0, 0.0, 1.0])
  lora = jax.tree.map(lambda x: x + 0.05, llama.init_lora(TINY, jax.random.key(1)))
  adv, _ = llm_grpo.grpo_token_advantages(
    config, batch.rewards, batch.response, batch.response_mask, *NO_PATTERN
  )
  loss, metrics = jax.jit(
    lambda l: llm_grpo.llm_grpo_objective(
      l, tiny_lm.params, TINY, config, batch, adv, batch.response_mask, None, None
    )
  )(lora)
  logp, stats = llm_common.batch_logprobs(
    TINY, tiny_lm.params, lora, batch, temperature=1.0, with_stats=True
  )
  entropy = stats.entropy
  tokens = jnp.concatenate([batch.prompt_tokens, batch.response], 1)
  mask = jnp.concatenate([batch.prompt_mask, batch.response_mask], 1)
  logits, _ = llama.forward(
    TINY, tiny_lm.params, lora, tokens, llama.positions_from_mask(mask), mask
  )
  logits = logits[:, 4:-1]  # the positions predicting the response
  for got, want in (
    (entropy, pg.categorical_entropy(logits)),
    (stats.vocab_mean_logp, gr.uniform_policy_value(logits)),
  ):
    np.testing.assert_allclose(got, np.where(batch.response_mask, want, 0.0), atol=1e-4)
  expected, _ = gr.gtpo_loss(
    logp,
    batch.response_mask,
    batch.response,
    jnp.array([0.5, -0.5, -0.5, 0.5]),
    entropy,
    jnp.array([0, 0, 1, 1]),
    2,
  )
  np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)
  assert float(metrics["kl"]) == 0.0


def test_rover_objective_regresses_the_log_ratio_on_the_uniform_backup(tiny_lm):
  """`objective="rover"`: the loss is `rover_loss` of the trained adapters' log-probs and
  vocabulary means against the behaviour adapters' (passed as the update passes them)."""
  config = _advantage_config(num_prompts=2, samples_per_prompt=2, kl_coef=0.0, objective="rover")
  batch = _tiny_batch([1.0, 0.0, 0.0, 1.0])
  behaviour = jax.tree.map(lambda x: x + 0.05, llama.init_lora(TINY, jax.random.key(1)))
  moved = jax.tree.map(lambda x: x - 0.1, behaviour)

  def logprobs(lora):
    return llm_common.batch_logprobs(
      TINY, tiny_lm.params, lora, batch, temperature=1.0, with_stats=True
    )

  old_logp, old_stats = jax.jit(logprobs)(behaviour)
  loss, _ = jax.jit(
    lambda l: llm_grpo.llm_grpo_objective(
      l,
      tiny_lm.params,
      TINY,
      config,
      batch,
      jnp.zeros((4, 4)),
      batch.response_mask,
      old_logp,
      None,
      old_stats,
    )
  )(moved)
  logp, stats = jax.jit(logprobs)(moved)
  expected, _ = gr.rover_loss(
    logp,
    old_logp,
    stats.vocab_mean_logp,
    old_stats.vocab_mean_logp,
    batch.response_mask,
    batch.rewards,
    jnp.array([0, 0, 1, 1]),
    2,
  )
  assert float(expected) > 0
  np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)


def test_cgpo_objective_is_the_policy_gradient_of_the_judged_calibrated_reward(tiny_lm):
  """`objective="cgpo"`: rewards (1, 0, 0, 1) against a reference reward 1, the third reply
  rejected by the judge: calibrated (0.5, σ(−1), 0, 0.5), weights minus their batch mean, loss
  −Σ_i w_i log π(y_i) / #tokens (CRPG) by hand."""
  config = _advantage_config(num_prompts=2, samples_per_prompt=2, kl_coef=0.0, objective="cgpo")
  batch = _tiny_batch([1.0, 0.0, 0.0, 1.0])._replace(
    passed=jnp.array([True, True, False, True]), baseline_rewards=jnp.ones(4)
  )
  lora = jax.tree.map(lambda x: x + 0.05, llama.init_lora(TINY, jax.random.key(1)))
  adv = jnp.zeros((4, 4))
  loss, metrics = jax.jit(
    lambda l: llm_grpo.llm_grpo_objective(
      l, tiny_lm.params, TINY, config, batch, adv, batch.response_mask, None, None
    )
  )(lora)
  calibrated = np.array([0.5, 1 / (1 + np.e), 0.0, 0.5])
  weights = calibrated - calibrated.mean()
  logp = llm_common.batch_logprobs(TINY, tiny_lm.params, lora, batch, temperature=1.0)
  seq_logp = np.asarray(jnp.sum(jnp.where(batch.response_mask, logp, 0), axis=1))
  expected = -np.sum(weights * seq_logp) / float(batch.response_mask.sum())
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  np.testing.assert_allclose(float(metrics["cgpo_calibrated"]), calibrated.mean(), rtol=1e-6)


def test_cgpo_step_judges_the_format_and_calibrates_against_the_reference_reply(tiny_lm):
  """The agent's CGPO batch: the judge's verdict is each reply's format, the baseline the task's
  reward of the problem's reference reply (here 1: `format_weight` 0)."""
  config = small_config(objective="cgpo", kl_coef=0.0, num_updates=1)
  config.task.format_weight = 0.0
  agent = llm_grpo.LLMGRPO(config, tiny_lm)
  seen = {}

  def update(state, batch):
    seen["batch"] = batch
    return state, {}

  agent.update = update
  agent.rewards = lambda texts, problems, k: (
    np.zeros(len(texts), np.float32),
    np.zeros(len(texts), bool),
    np.array([True, False] * (len(texts) // 2)),
  )
  agent.step(agent.init(0))
  np.testing.assert_array_equal(seen["batch"].passed, [True, False, True, False])
  np.testing.assert_array_equal(seen["batch"].baseline_rewards, np.ones(4, np.float32))
  with pytest.raises(config_checks.ConfigError, match=r"config\.hints: expected 'off'"):
    llm_grpo.validate_config(small_config(objective="cgpo", kl_coef=0.0, hints="scaffold"))


def test_shared_prefix_update_equals_the_repeated_prompt_update(tiny_lm):
  """`shared_prefix=True` (each problem's prompt run once for its samples): the same SGD update
  (KL reference and behaviour passes included) as the repeated forward, to float32 rounding."""
  batch = _tiny_batch([1.0, 0.0, 0.0, 2.0])
  grouped = batch.prompt_tokens.at[1].set(batch.prompt_tokens[0]).at[3].set(batch.prompt_tokens[2])
  masks = batch.prompt_mask.at[1].set(batch.prompt_mask[0]).at[3].set(batch.prompt_mask[2])
  batch = batch._replace(prompt_tokens=grouped, prompt_mask=masks)
  results = []
  for shared in (False, True):
    config = small_config(
      optimizer="sgd", learning_rate=0.5, update_epochs=2, kl_coef=0.04, shared_prefix=shared
    )
    agent = llm_grpo.LLMGRPO(config, tiny_lm)
    state = agent.init(0)
    state = state.replace(lora=jax.tree.map(lambda x: x + 0.05, state.lora))
    results.append(agent.update(state, batch))
  (plain, plain_metrics), (shared, shared_metrics) = results
  moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), plain.lora, shared.lora)
  assert max(jax.tree.leaves(moved)) < 1e-5
  np.testing.assert_allclose(shared_metrics["loss"], plain_metrics["loss"], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(shared_metrics["kl"], plain_metrics["kl"], rtol=1e-3, atol=1e-7)
  with pytest.raises(config_checks.ConfigError, match=r"config\.hints: expected 'off'"):
    llm_grpo.validate_config(small_config(shared_prefix=True, hints="scaffold"))


def test_shared_prefix_sampling_gives_the_repeated_prompt_samples(tiny_lm):
  """`shared_prefix=True` samples each problem's K responses from one prefill of its prompt: the
  same prompts (one row per response), tokens and texts as sampling the repeated prompts."""
  runs = []
  for shared in (False, True):
    agent = llm_grpo.LLMGRPO(small_config(shared_prefix=shared), tiny_lm)
    lora = jax.tree.map(lambda x: x + 0.05, agent.init(0).lora)
    runs.append(agent.sample(lora, agent.problems(0, 0), jax.random.key(3), 2))
  plain, shared = runs
  np.testing.assert_array_equal(shared.prompt_tokens, plain.prompt_tokens)
  np.testing.assert_array_equal(shared.prompt_mask, plain.prompt_mask)
  np.testing.assert_array_equal(shared.generation.tokens, plain.generation.tokens)
  np.testing.assert_allclose(
    shared.generation.logprobs, plain.generation.logprobs, rtol=1e-5, atol=1e-6
  )
  assert shared.texts == plain.texts and len(shared.texts) == 4


def test_pacs_and_gtpo_configs_name_what_they_cannot_take():
  with pytest.raises(config_checks.ConfigError, match=r"config\.hicra_alpha: expected 0"):
    llm_grpo.validate_config(small_config(objective="gtpo", kl_coef=0.0, hicra_alpha=0.2))
  with pytest.raises(config_checks.ConfigError, match=r"config\.kl_coef: expected 0"):
    llm_grpo.validate_config(small_config(objective="gtpo", kl_coef=0.04))
  with pytest.raises(config_checks.ConfigError, match=r"config\.task\.format_weight"):
    llm_grpo.validate_config(small_config(objective="pacs", kl_coef=0.0))
  with pytest.raises(config_checks.ConfigError, match=r"config\.kl_coef"):
    config = small_config(objective="pacs", kl_coef=0.04)
    config.task.format_weight = 0.0
    llm_grpo.validate_config(config)


def test_kl_term_is_zero_at_the_reference_and_positive_away(tiny_lm):
  config = _advantage_config(num_prompts=2, samples_per_prompt=2, kl_coef=1.0)
  batch = _tiny_batch([0.0, 0.0, 0.0, 0.0])  # zero advantages: the loss is the KL alone
  zero_adv = jnp.zeros((4, 4))
  ref = llm_common.response_logprobs(
    TINY,
    tiny_lm.params,
    None,
    batch.prompt_tokens,
    batch.prompt_mask,
    batch.response,
    batch.response_mask,
    use_lora=False,
  )
  lora0 = llama.init_lora(TINY, jax.random.key(1))  # b = 0: the reference policy
  loss0, m0 = llm_grpo.llm_grpo_objective(
    lora0, tiny_lm.params, TINY, config, batch, zero_adv, batch.response_mask, None, ref
  )
  assert abs(float(loss0)) < 1e-6 and abs(m0["kl"]) < 1e-6
  lora1 = jax.tree.map(lambda x: x + 0.2, lora0)
  loss1, m1 = llm_grpo.llm_grpo_objective(
    lora1, tiny_lm.params, TINY, config, batch, zero_adv, batch.response_mask, None, ref
  )
  assert float(loss1) > 1e-4 and float(m1["kl"]) > 1e-4


# ------------------------------------------------------------------------------------------------
# The driver on the tiny model: logging, checkpoints, resume


def _run(config, workdir, lm):
  """`python -m experiments.train` in process: the learner of `config` run in `workdir` (a
  resume may raise `num_updates`, a change `config_history.jsonl` records)."""
  learner = llm_grpo.make_learner(config, lm)
  return training.run(learner, config, str(workdir), allow_config_change=True)


def test_evaluation_reports_pass_at_k_over_the_samples_of_each_problem(tiny_lm):
  """`eval_samples` = 2 on 2 held-out problems, the sampled replies scored correct as
  [[1, 0], [0, 0]] (the tiny model answers nothing right, so the scorer is replaced): pass@2 is
  1/2 of the problems, the sampled correct rate 1/4; the greedy replies are scored first."""
  agent = llm_grpo.LLMGRPO(small_config(eval_problems=2, eval_samples=2), tiny_lm)
  calls = []

  def rewards(texts, problems, samples):
    calls.append((len(texts), samples))
    correct = np.array([True, False, False, False]) if samples == 2 else np.zeros(2, bool)
    return np.zeros(len(texts), np.float32), correct, np.zeros(len(texts), bool)

  agent.rewards = rewards
  metrics = agent.evaluate(agent.init(0).lora)
  assert calls == [(2, 1), (4, 2)]
  assert metrics["eval_pass_at_k"] == 0.5 and metrics["eval_sampled_correct"] == 0.25
  assert metrics["eval_correct"] == 0.0


def test_run_writes_metrics_and_resumes_exactly(tiny_lm, tmp_path):
  straight = _run(small_config(num_updates=2), tmp_path / "a", tiny_lm)
  _run(small_config(num_updates=1), tmp_path / "b", tiny_lm)
  resumed = _run(small_config(num_updates=2), tmp_path / "b", tiny_lm)
  assert int(resumed.update) == 2
  jax.tree.map(np.testing.assert_array_equal, straight.lora, resumed.lora)
  records = [json.loads(line) for line in open(tmp_path / "b" / "metrics.jsonl")]
  train = [r for r in records if r.get("phase") != "eval"]
  assert [r["update"] for r in train] == [1, 2]
  assert [r["env_steps"] for r in train] == [4, 8]
  assert all(np.isfinite(r["loss"]) for r in train)
  evals = [r for r in records if r.get("phase") == "eval"]
  assert evals[0]["update"] == 0 and 0.0 <= evals[0]["eval_reward"] <= 1.5
  assert checkpoint.Checkpointer(str(tmp_path / "b" / "checkpoints")).latest_step() == 2
  assert json.load(open(tmp_path / "b" / "config.json"))["agent"] == "llm_grpo"


# ------------------------------------------------------------------------------------------------
# One full GRPO step on the truncated real model


def test_one_grpo_step_on_the_truncated_smollm2():
  """With the unlikeliness estimator, whose advantages read the behaviour log-probs the update
  computes (the default estimator's update runs in the driver test above)."""
  config = small_config(
    num_layers=2,
    lora_rank=4,
    lora_alpha=8.0,
    max_new_tokens=8,
    kl_coef=0.04,
    estimator="unlikeliness",
  )
  agent = llm_grpo.LLMGRPO(config)
  assert agent.lm.config.num_layers == 2
  params_before = jax.tree.map(np.array, agent.lm.params)
  state = agent.init(0)
  lora_before = jax.tree.map(np.array, state.lora)
  problems = agent.problems(0, 0)
  tokens, mask, generation, responses = agent.sample(state.lora, problems, jax.random.key(0), 2)
  assert len(responses) == 4 and generation.tokens.shape == (4, 8)
  # Real rewards of a 2-layer model are all 0; informative ones exercise the whole update.
  batch = llm_grpo.RolloutBatch(
    jnp.asarray(tokens),
    jnp.asarray(mask),
    jnp.asarray(generation.tokens),
    jnp.asarray(generation.mask),
    jnp.array([1.5, 0.0, 0.5, 0.0], jnp.float32),
  )
  new_state, metrics = agent.update(state, batch)
  assert int(new_state.update) == 1
  assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
  assert metrics["advantage_abs"] > 0
  assert abs(metrics["kl"]) < 1e-5  # b = 0 at init: the policy is the reference
  # Every adapter matrix b moves (a gets no gradient while b = 0).
  for name in llama.PROJECTIONS:
    assert np.any(
      np.asarray(new_state.lora["layers"][name]["b"]) != lora_before["layers"][name]["b"]
    ), name
  jax.tree.map(np.testing.assert_array_equal, agent.lm.params, params_before)
