"""Tests for hrljax.agents.llm_token_ppo: config, the value head's token states, the time-major
token-level GAE of a collected batch, and one PPO update on the tiny model. The preset runs
through the driver on SmolLM2 truncated to one layer in `tests/experiments/test_configs_smollm2`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import config_checks
from hrljax.agents import llm_token_ppo
from hrljax.networks import llama
from tests.agents.tiny_llama import TINY_GAME as TINY
from tests.agents.tiny_llama import tiny_game_model


@pytest.fixture(scope="module")
def tiny_lm():
  return tiny_game_model()


def small_config(**overrides):
  config = llm_token_ppo.get_config()
  config.lora_rank = TINY.lora_rank
  config.lora_alpha = TINY.lora_alpha
  config.include_table = False  # short prompts
  config.num_envs = 2
  config.num_steps = 2
  config.max_new_tokens = 4
  config.value_llm_layers = 1
  config.value_head_hidden_sizes = (8,)
  config.eval_episodes = 2
  config.gamma = config.gae_lambda = 1.0  # undiscounted GAE: returns by hand
  config.update(overrides)
  return config


@pytest.mark.parametrize(
  "field, value, match",
  [
    ("num_minibatches", 5, r"config\.num_minibatches: expected a divisor of num_envs \* num_steps"),
    ("micro_batches", 5, r"config\.micro_batches: expected a divisor of the lines of a minibatch"),
    ("value_llm_layers", 0, "config.value_llm_layers"),
    ("value_head_hidden_sizes", (8, 0), "config.value_head_hidden_sizes"),
    ("gae_lambda", 1.5, "config.gae_lambda"),
    ("loss_aggregation", "sum", "config.loss_aggregation"),
    ("env_name", "CartPole-v1", "config.env_name"),
    ("valid_move_bonus", -0.1, "config.valid_move_bonus"),
  ],
)
def test_validate_config_rejects(field, value, match):
  config = llm_token_ppo.get_config()
  config[field] = value
  with pytest.raises(config_checks.ConfigError, match=match):
    llm_token_ppo.validate_config(config)


def test_a_value_trunk_deeper_than_the_truncated_model_is_refused():
  config = llm_token_ppo.get_config()
  config.update(num_layers=2, value_llm_layers=3)
  with pytest.raises(
    config_checks.ConfigError,
    match=r"config\.value_llm_layers: expected at most the model's 2 layers, got 3",
  ):
    llm_token_ppo.validate_config(config)


def _lines(agent, key=0):
  """One line of every game of a fresh run (`num_envs` rows)."""
  state = agent.init(0)
  lines, _ = agent.game.speak(state.lora, state.env.obs, jax.random.key(key))
  return state, lines


def test_token_states_are_the_prompt_and_the_tokens_before_each_token(tiny_lm):
  """The value of response token j reads the trunk's state at the token before it: the prompt's
  last token for j = 0, response token j - 1 after (the base model's hidden states of the
  whole sequence, cut at the value head's layer)."""
  agent = llm_token_ppo.LLMTokenPPO(small_config(), tiny_lm)
  _, lines = _lines(agent)
  features = llm_token_ppo.token_state_features(TINY, tiny_lm.params, 1, lines)
  tokens = jnp.concatenate([lines.prompt_tokens, lines.response], 1)
  mask = jnp.concatenate([lines.prompt_mask, lines.response_mask], 1)
  hidden = llama.hidden_states(TINY, tiny_lm.params, tokens, mask, 1)
  width = lines.prompt_tokens.shape[1]
  assert features.shape == lines.response.shape + (TINY.dim,)
  np.testing.assert_array_equal(features[:, 0], hidden[:, width - 1])
  np.testing.assert_array_equal(features[:, 2], hidden[:, width + 1])


def test_prepared_advantages_are_time_major_token_level_gae(tiny_lm):
  """Two games x two steps, a zero value head, γ = λ = 1: the reward of game 1's first line
  (row 1: rows are step-major) reaches every token of that line and nothing else; the
  behaviour log-probs are the model's and unread tokens are zero."""
  agent = llm_token_ppo.LLMTokenPPO(small_config(), tiny_lm)
  state, first = _lines(agent, 0)
  _, second = _lines(agent, 1)
  lines = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first, second)
  lines = lines._replace(response_mask=lines.response_mask.at[:, 3].set(False))
  reward = jnp.array([0.0, 1.0, 0.0, 0.0])
  no = jnp.zeros(4, bool)
  next_tokens, next_mask = agent.game.encode_successors(np.asarray(lines.dialogue))
  zero_head = jax.tree.map(jnp.zeros_like, state.value_params)
  batch = agent._prepare(
    tiny_lm.params, state.lora, zero_head, lines, reward, no, no, next_tokens, next_mask
  )
  mask = np.asarray(lines.response_mask)
  expected = np.zeros(mask.shape)
  expected[1] = mask[1]
  np.testing.assert_allclose(batch.advantage, expected, atol=1e-6)
  np.testing.assert_allclose(batch.target, expected, atol=1e-6)
  assert np.all(np.asarray(batch.log_prob)[~mask] == 0) and np.all(batch.log_prob[mask] < 0)


def test_one_update_trains_the_adapters_and_the_value_head_only(tiny_lm):
  """A whole step: both trained parts move, the metrics are finite and the frozen base weights
  are untouched. The same step with each minibatch's gradient summed over its lines one at a
  time (`micro_batches` 2, the advantages standardised over the whole minibatch) ends in the
  same state."""
  agent = llm_token_ppo.LLMTokenPPO(small_config(), tiny_lm)
  state = agent.init(0)
  base = jax.tree.map(np.array, tiny_lm.params)
  new_state, metrics = agent.step(state)
  for before, after in ((state.lora, new_state.lora), (state.value_params, new_state.value_params)):
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), before, after)
    assert max(jax.tree.leaves(moved)) > 0
  jax.tree.map(np.testing.assert_array_equal, base, tiny_lm.params)
  assert int(new_state.update) == 1
  for name in ("policy_loss", "value_loss", "approx_kl", "clip_fraction", "advantage_abs"):
    assert np.isfinite(metrics[name]), name
  assert metrics["response_length"] > 0
  # the same step (the same lines: `collect` draws from the state's key) with the sliced update
  agent._update = llm_token_ppo.make_update(
    TINY, llm_token_ppo.Settings.of(small_config(micro_batches=2)), agent.game.prefix_len
  )
  sliced_state, sliced_metrics = agent.step(state)
  for a, b in zip(
    jax.tree.leaves((sliced_state.lora, sliced_state.value_params)),
    jax.tree.leaves((new_state.lora, new_state.value_params)),
  ):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  for name in ("policy_loss", "value_loss", "approx_kl", "clip_fraction", "actor_grad_norm"):
    np.testing.assert_allclose(sliced_metrics[name], metrics[name], rtol=1e-4, atol=1e-7)
