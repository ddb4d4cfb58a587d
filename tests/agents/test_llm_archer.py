"""Tests for hrljax.agents.llm_archer: config, the actor gradient, the resumable driver, and one
ArCHer iteration end to end on SmolLM2 truncated to its first two layers."""

import json


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import config_checks, training
from hrljax.agents import llm_archer, llm_common
from hrljax.envs import text_tasks, token_game
from hrljax.networks import llama
from tests.agents.tiny_llama import TINY_GAME as TINY
from tests.agents.tiny_llama import tiny_game_model


@pytest.fixture(scope="module")
def tiny_lm():
  return tiny_game_model()


def small_config(**overrides):
  config = llm_archer.get_config()
  config.lora_rank = TINY.lora_rank
  config.lora_alpha = TINY.lora_alpha
  config.include_table = False  # short prompts
  # one prefill and forward per program; the SmolLM2 iteration below runs the shared beginning
  config.shared_prompt_prefix = False
  config.num_envs = 4
  config.max_new_tokens = 4
  config.batch_size = 8
  config.critic_updates = 2
  config.warmup_iters = 1
  config.eval_episodes = 4  # = num_envs: evaluation reuses the training shapes
  config.eval_every = 3
  config.checkpoint_every = 1
  config.num_updates = 2
  config.update(overrides)
  return config


@pytest.mark.parametrize(
  "field, value, match",
  [
    ("gamma", 1.5, "config.gamma"),
    ("q_target_heads", "max", "config.q_target_heads"),
    ("critic_d_model", 33, "config.critic_d_model"),
    ("warmup_iters", -1, "config.warmup_iters"),
    ("env_name", "CartPole-v1", "config.env_name"),
    ("valid_move_bonus", -0.1, "config.valid_move_bonus"),
    ("critic_trunk", "roberta", "config.critic_trunk"),
    ("critic_head_hidden_sizes", (64, 0), "config.critic_head_hidden_sizes"),
    ("critic_llm_layers", 0, "config.critic_llm_layers"),
  ],
)
def test_validate_config_rejects(field, value, match):
  config = llm_archer.get_config()
  config[field] = value
  with pytest.raises(config_checks.ConfigError, match=match):
    llm_archer.validate_config(config)


def test_a_pretrained_critic_deeper_than_the_truncated_model_is_refused():
  config = llm_archer.get_config()
  config.update(critic_trunk="llm", num_layers=2, critic_llm_layers=3)
  with pytest.raises(
    config_checks.ConfigError,
    match=r"config\.critic_llm_layers: expected at most the model's 2 layers, got 3",
  ):
    llm_archer.validate_config(config)


def test_validate_config_game_size_and_devices():
  config = llm_archer.get_config()
  llm_archer.validate_config(config)
  with pytest.raises(config_checks.ConfigError, match="num_devices"):
    llm_archer.validate_config(config, num_devices=4)
  config.env_kwargs.num_items = 40
  config.env_kwargs.num_attributes = 6
  with pytest.raises(config_checks.ConfigError, match="num_items"):
    llm_archer.validate_config(config)


def test_reference_defaults():
  config = llm_archer.get_config()
  assert (config.gamma, config.tau, config.max_grad_norm, config.num_critics) == (0.95, 0.1, 1.0, 2)
  assert config.q_target_heads == config.v_target_heads == "per_head"


def test_actor_gradient_is_advantage_weighted_reinforce(tiny_lm):
  """∇L = −(1/B) Σ_i A_i Σ_t ∇log π(o_it), A_i = min_e Q_e − min_e V_e of the critic."""
  config = small_config()
  agent = llm_archer.LLMArcher(config, lm=tiny_lm)
  state = agent.init(0)
  game = agent.env_params
  vocab = token_game.vocabulary(game)
  dialogue = (
    jnp.zeros((3, token_game.max_dialogue_len(game)), jnp.int32).at[:, 0].set(token_game.BOS)
  )
  utterance = jnp.array(
    [[token_game.GUESS, vocab.item_start + i, token_game.END, 0] for i in range(3)], jnp.int32
  )
  batch = llm_archer.ActorBatch(
    dialogue,
    utterance,
    jax.random.randint(jax.random.key(1), (3, 5), 3, 300),
    jnp.ones((3, 5), bool),
    jax.random.randint(jax.random.key(2), (3, 3), 3, 300),
    jnp.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]], bool),
  )
  lora = jax.tree.map(lambda x: x + 0.05, state.lora)
  grads = jax.jit(
    jax.grad(lambda l, p, c: llm_archer.actor_objective(l, p, TINY, c, agent.critic, batch, 0.7)[0])
  )(lora, tiny_lm.params, state.critic_params)
  out = agent.critic.apply(
    state.critic_params, dialogue, utterance, jax.vmap(token_game.utterance_token_mask)(utterance)
  )
  advantage = np.min(np.asarray(out.q), 0) - np.min(np.asarray(out.v), 0)

  def reference(l, p):
    logp = llm_common.response_logprobs(
      TINY,
      p,
      l,
      batch.prompt_tokens,
      batch.prompt_mask,
      batch.response,
      batch.response_mask,
      temperature=0.7,
    )
    return -jnp.mean(jnp.asarray(advantage) * logp.sum(1))

  expected = jax.jit(jax.grad(reference))(lora, tiny_lm.params)
  jax.tree.map(lambda g, e: np.testing.assert_allclose(g, e, rtol=2e-4, atol=1e-8), grads, expected)


def _run(config, workdir, lm):
  """`python -m experiments.train` in process: the learner of `config` run in `workdir` (a
  resume may raise `num_updates`, a change `config_history.jsonl` records)."""
  learner = llm_archer.make_learner(config, lm)
  return training.run(learner, config, str(workdir), allow_config_change=True)


def test_run_logs_and_resumes_exactly(tiny_lm, tmp_path):
  straight = _run(small_config(num_updates=2), tmp_path / "a", tiny_lm)
  _run(small_config(num_updates=1), tmp_path / "b", tiny_lm)
  resumed = _run(small_config(num_updates=2), tmp_path / "b", tiny_lm)
  assert int(resumed.update) == 2
  for a, b in zip(
    jax.tree.leaves((straight.lora, straight.critic_params, straight.buffer.storage)),
    jax.tree.leaves((resumed.lora, resumed.critic_params, resumed.buffer.storage)),
  ):
    np.testing.assert_array_equal(a, b)
  records = [json.loads(line) for line in open(tmp_path / "b" / "metrics.jsonl")]
  train = [r for r in records if r.get("phase") != "eval"]
  assert [r["update"] for r in train] == [1, 2]
  assert "actor_loss" not in train[0] and "actor_loss" in train[1]  # one warm-up iteration
  assert all(np.isfinite(r["critic_loss"]) for r in train)
  evals = [r for r in records if r.get("phase") == "eval"]
  assert [r["update"] for r in evals] == [0, 2]
  assert 0.0 <= evals[0]["eval_win_rate"] <= 1.0
  history = [json.loads(line) for line in open(tmp_path / "b" / "config_history.jsonl")]
  assert history == [{"update": 1, "changes": {"num_updates": {"from": 1, "to": 2}}}]


def test_one_archer_iteration_on_the_truncated_smollm2_with_its_pretrained_critic():
  """SmolLM2 cut to two layers acts; the critic's heads read its own first layer (pretrained
  weights, frozen): one iteration with an actor step moves the adapters and the heads and leaves
  the model's weights, hence the stored features, unchanged."""
  config = small_config(
    num_layers=2,
    lora_rank=4,
    lora_alpha=8.0,
    warmup_iters=0,
    include_table=True,
    max_new_tokens=6,
    lenient_parsing=True,
    valid_move_bonus=0.25,
    critic_trunk="llm",
    critic_llm_layers=1,
    shared_prompt_prefix=True,
  )
  agent = llm_archer.LLMArcher(config)
  assert agent.game.prefix_len > 100  # the rules and item table: sampled and trained once a batch
  assert agent.lm.config.num_layers == 2
  params_before = jax.tree.map(np.array, agent.lm.params)
  state = agent.init(0)
  lora_before = jax.tree.map(np.array, state.lora)
  critic_before = jax.tree.map(np.array, state.critic_params)
  # The critic holds heads only: far fewer weights than one layer of the model.
  layer = sum(x[0].size for x in jax.tree.leaves(agent.lm.params["layers"]))
  assert sum(x.size for x in jax.tree.leaves(critic_before)) < layer / 4
  batch, lines = agent.speak(state.lora, state.env.obs, jax.random.key(0))
  assert batch.prompt_tokens.shape[1] == agent.prompt_width and len(lines) == 4
  new_state, metrics = agent.step(state)
  assert int(new_state.update) == 1
  assert int(new_state.buffer.size) == config.num_envs
  stored = new_state.buffer.storage
  # Stored rewards: the game's (0 or 1) plus the bonus exactly on the understood lines.
  rewards = np.asarray(stored.reward[: config.num_envs])
  assert np.all(np.isin(np.round(rewards, 6), [0.0, 0.25, 1.0, 1.25]))
  assert np.mean(np.round(rewards % 1.0, 6) == 0.25) == metrics["valid_move_fraction"]
  assert np.isfinite(metrics["critic_loss"]) and np.isfinite(metrics["actor_loss"])
  assert metrics["actor_grad_norm"] > 0
  for before, after in ((lora_before, new_state.lora), (critic_before, new_state.critic_params)):
    changed = jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != b)), after, before)
    assert any(jax.tree.leaves(changed))
  # Every adapter matrix b moves (a gets no gradient while b = 0).
  for name in llama.PROJECTIONS:
    assert np.any(
      np.asarray(new_state.lora["layers"][name]["b"]) != lora_before["layers"][name]["b"]
    ), name
  jax.tree.map(np.testing.assert_array_equal, agent.lm.params, params_before)
  # The stored features are the frozen first layer's, of the states the games were in: the same
  # as computed again now; V's slot (the prompt's last token) is the prompt's own state.
  dialogue = np.asarray(state.env.obs)
  again, _ = agent.critic_features(dialogue)
  np.testing.assert_allclose(np.asarray(stored.state[:4]), np.asarray(again), atol=1e-4)
  prompt = agent.lm.tokenizer.encode(
    text_tasks.game_prompt(dialogue[0], agent.env_params, True), add_special_tokens=False
  ).ids
  alone = llama.hidden_states(
    agent.lm.config, agent.lm.params, jnp.asarray([prompt]), jnp.ones((1, len(prompt)), bool), 1
  )
  np.testing.assert_allclose(np.asarray(stored.state[0]), np.asarray(alone[0, -1]), atol=1e-4)
  assert np.abs(np.asarray(stored.state_action[:4]) - np.asarray(stored.state[:4])).max() > 1e-3


def test_critic_text_inputs_align_each_prompt_and_move_at_the_end():
  tokens, mask, state_index = llm_archer.critic_text_inputs(
    [[5, 6, 7], [8]], [[9, 10], []], width=6, pad_id=0
  )
  np.testing.assert_array_equal(tokens, [[0, 5, 6, 7, 9, 10], [0, 0, 0, 0, 0, 8]])
  np.testing.assert_array_equal(mask, tokens != 0)
  np.testing.assert_array_equal(state_index, [3, 5])
  with pytest.raises(ValueError, match="width"):
    llm_archer.critic_text_inputs([[1, 2, 3]], [[4]], width=3, pad_id=0)


def test_prompts_never_exceed_the_fixed_width(tiny_lm):
  """Every dialogue the policy can speak after fits `longest_prompt` (one compiled shape)."""
  config = small_config(include_table=True)
  agent = llm_archer.LLMArcher(config, lm=tiny_lm)
  game = agent.env_params
  vocab = token_game.vocabulary(game)
  moves = [
    [token_game.ASK, vocab.attribute_start + 1, vocab.value_start + 1, token_game.END],
    [token_game.INVALID, token_game.END, 0, 0],
    [token_game.GUESS, vocab.item_start, token_game.END, 0],
  ]
  for first in moves:
    for second in moves[:2]:
      obs = np.full((token_game.max_dialogue_len(game),), token_game.PAD, np.int32)
      tokens = [token_game.BOS]
      for move in (first, second):
        spoken = move[: move.index(token_game.END) + 1]
        tokens += spoken + [token_game.NO]
      obs[: len(tokens)] = tokens
      prompt, _ = llm_common.encode_prompts(tiny_lm, [text_tasks.game_prompt(obs, game)])
      assert prompt.shape[1] <= agent.prompt_width
