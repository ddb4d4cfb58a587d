"""Tests for hrljax.agents.llm_game_grpo: config, the groups of games (a shared hidden item, lines
after a game's end not trained on), the group-relative advantages on the lines' tokens, one
update on the tiny model and the resumable driver. The preset runs through the driver on
SmolLM2 truncated to one layer in `tests/experiments/test_configs_smollm2`."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import config_checks, training
from hrljax.agents import llm_common, llm_game_grpo
from hrljax.envs import token_game
from tests.agents.tiny_llama import TINY_GAME as TINY
from tests.agents.tiny_llama import tiny_game_model


@pytest.fixture(scope="module")
def tiny_lm():
  return tiny_game_model()


def small_config(**overrides):
  config = llm_game_grpo.get_config()
  config.lora_rank = TINY.lora_rank
  config.lora_alpha = TINY.lora_alpha
  config.include_table = False  # short prompts
  config.num_groups = 2
  config.group_size = 2
  config.env_kwargs.max_turns = 2
  config.max_new_tokens = 4
  config.eval_episodes = 0  # `TextGame.evaluate` is tested with llm_archer and llm_token_ppo
  config.checkpoint_every = 2  # and at the end of every run
  config.num_updates = 2
  config.update(overrides)
  return config


@pytest.mark.parametrize(
  "field, value, match",
  [
    ("num_envs", 6, r"config\.num_envs: expected num_groups \* group_size \(8\), got 6"),
    ("num_minibatches", 5, r"config\.num_minibatches: expected a divisor of num_envs \* max_turns"),
    ("micro_batches", 5, r"config\.micro_batches: expected a divisor of the lines of a minibatch"),
    ("estimator", "gigpo", "config.estimator"),
    ("grpo_scale", "global", "config.grpo_scale"),
    ("clip_epsilon", -0.1, "config.clip_epsilon"),
    ("loss_aggregation", "sum", "config.loss_aggregation"),
    ("env_name", "CartPole-v1", "config.env_name"),
  ],
)
def test_validate_config_rejects(field, value, match):
  config = llm_game_grpo.get_config()
  config[field] = value
  with pytest.raises(config_checks.ConfigError, match=match):
    llm_game_grpo.validate_config(config)


def guessing_first(agent):
  """The agent with game 0's first line replaced by a guess of item 0 (a guess ends the game)."""
  speak = agent.game.speak
  turns = []

  def speak_and_guess(lora, dialogues, key, greedy=False):
    lines, texts = speak(lora, dialogues, key, greedy)
    if not turns:
      guess = token_game.encode_guess(0, agent.game.env_params)
      lines = lines._replace(utterance=lines.utterance.at[0].set(guess))
    turns.append(lines)
    return lines, texts

  agent.game.speak = speak_and_guess
  return turns


def test_games_of_a_group_share_their_item_and_stop_training_after_their_end(tiny_lm):
  """`play`: the games of a group start with one hidden item; a game that ended on its first
  line (a guess) has its later rows marked not played, the others play every turn; its return
  is the guess's reward."""
  agent = llm_game_grpo.LLMGameGRPO(small_config(), tiny_lm)
  state = agent.init(0)
  targets = []
  original_step = agent.game.step_env

  def recording_step(carry, utterance, key):
    targets.append(np.asarray(carry.env_state.target))
    return original_step(carry, utterance, key)

  agent.game.step_env = recording_step
  guessing_first(agent)
  games, metrics, _ = agent.play(state.lora, jax.random.key(3))
  first = targets[0]
  assert first[0] == first[1] and first[2] == first[3]  # groups of 2 share the item
  turns = agent.game.env_params.max_turns
  played = games.played.reshape(turns, 4)
  assert played[:, 0].tolist() == [True] + [False] * (turns - 1)
  assert played[:, 1:].all()  # the tiny model's lines never end a game early
  assert games.returns[0] == float(first[0] == 0)
  assert metrics["lines"] == 1 + 3 * turns
  assert games.lines.response.shape[0] == turns * 4


def test_prepare_puts_each_games_group_advantage_on_its_played_tokens(tiny_lm):
  """The GRPO z-score of the returns within each group on every token of a game's played lines,
  zero on the lines after its end; the behaviour log-probs of the played tokens; an update on
  that batch moves the adapters and leaves the base weights, and the same update with its
  gradient summed over 4 slices of lines (`micro_batches`) takes the same step. With `shared_prompt_prefix` (the
  default) every prompt begins with the game's common tokens (a row that does not is refused),
  and the behaviour log-probs, computed with that beginning run once, equal those of the whole
  prompts to float32 rounding."""
  agent = llm_game_grpo.LLMGameGRPO(small_config(), tiny_lm)
  assert agent.game.prefix_len > 20
  state = agent.init(0)
  games, _, _ = agent.play(state.lora, jax.random.key(1))
  tokens, prompt_mask = np.asarray(games.lines.prompt_tokens), np.asarray(games.lines.prompt_mask)
  broken = tokens.copy()
  broken[1, np.argmax(prompt_mask[1])] += 1  # row 1's first real token
  llm_common.check_common_prefix(tokens, prompt_mask, agent.game.prefix)
  with pytest.raises(ValueError, match="prompt_tokens: row 1 does not begin with the"):
    llm_common.check_common_prefix(broken, prompt_mask, agent.game.prefix)
  returns = np.array([1.0, 0.0, 0.5, 0.5], np.float32)  # group 0 differs, group 1 ties
  played = games.played.copy()
  played[4:] &= np.array([True, False, True, True] * (played[4:].size // 4))  # game 1 ends first
  batch, advantage = agent._prepare(
    tiny_lm.params,
    state.lora,
    games.lines,
    jnp.asarray(played),
    jnp.asarray(returns),
    games.group_ids,
  )
  z = 0.5 / np.std([1.0, 0.0], ddof=1)  # GRPO's z-score with the unbiased std (verl's)
  np.testing.assert_allclose(np.asarray(advantage), [z, -z, 0, 0], rtol=1e-5)
  rows_advantage = np.tile(np.asarray(advantage), played.size // 4)
  mask = np.asarray(batch.response_mask)
  np.testing.assert_array_equal(mask, np.asarray(games.lines.response_mask) & played[:, None])
  expected = np.where(mask, rows_advantage[:, None], 0.0)
  np.testing.assert_allclose(np.asarray(batch.advantage), expected, rtol=1e-5)
  assert not mask[5].any() and mask[1].any()  # game 1's second line is not trained on
  # the whole prompts' forward (prefix_len 0)
  logp = llm_common.batch_logprobs(TINY, tiny_lm.params, state.lora, batch, temperature=1.0)
  np.testing.assert_allclose(
    np.asarray(batch.log_prob), np.where(mask, np.asarray(logp), 0.0), rtol=1e-5, atol=1e-5
  )
  base_before = jax.tree.map(np.array, tiny_lm.params)
  new_state, metrics = agent._update(state, tiny_lm.params, batch)
  moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), new_state.lora, state.lora)
  assert max(jax.tree.leaves(moved)) > 1e-6 and np.isfinite(float(metrics["loss"].mean()))
  jax.tree.map(np.testing.assert_array_equal, base_before, tiny_lm.params)
  # The slices hold unequal numbers of tokens (game 1's second line is not trained on).
  sliced = llm_game_grpo.make_update(
    TINY, llm_game_grpo.Settings.of(small_config(micro_batches=4)), agent.game.prefix_len
  )
  sliced_state, sliced_metrics = sliced(state, tiny_lm.params, batch)
  for a, b in zip(jax.tree.leaves(sliced_state.lora), jax.tree.leaves(new_state.lora)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  for name in ("loss", "grad_norm", "approx_kl", "clip_fraction"):
    np.testing.assert_allclose(sliced_metrics[name], metrics[name], rtol=1e-4, atol=1e-7)


def _run(config, workdir, lm):
  """`python -m experiments.train` in process: the learner of `config` run in `workdir` (a
  resume may raise `num_updates`, a change `config_history.jsonl` records)."""
  learner = llm_game_grpo.make_learner(config, lm)
  return training.run(learner, config, str(workdir), allow_config_change=True)


def test_run_logs_and_resumes_exactly(tiny_lm, tmp_path):
  """A run stopped after one update and resumed reaches the adapters and optimizer state of two
  uninterrupted updates, and logs every update."""
  config = small_config(lenient_parsing=True, valid_move_bonus=0.5)
  agent = llm_game_grpo.LLMGameGRPO(config, tiny_lm)
  straight = agent.step(agent.step(agent.init(0))[0])[0]
  config_one = small_config(lenient_parsing=True, valid_move_bonus=0.5, num_updates=1)
  _run(config_one, tmp_path / "b", tiny_lm)
  resumed = _run(config, tmp_path / "b", tiny_lm)
  assert int(resumed.update) == 2
  for a, b in zip(
    jax.tree.leaves((straight.lora, straight.opt_state)),
    jax.tree.leaves((resumed.lora, resumed.opt_state)),
  ):
    np.testing.assert_array_equal(a, b)
  records = [json.loads(line) for line in open(tmp_path / "b" / "metrics.jsonl")]
  train = [r for r in records if r.get("phase") != "eval"]
  assert [r["update"] for r in train] == [1, 2]
  assert all(np.isfinite(r["loss"]) and 0 <= r["episode_return"] <= 1 for r in train)
  assert all(4 <= r["lines"] <= 4 * config.env_kwargs.max_turns for r in train)
