"""Tests of hrljax.agents.token_common, what the token-level agents share: the common game
protocol of the experiment configs, behaviour cloning on scripted dialogues, the warm-start
dataset as transitions, the optimizer, and the keys of the shared warm start."""

import importlib.util
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from hrljax import envs
from hrljax.agents import token_common as tc
from hrljax.config_checks import ConfigError
from hrljax.envs import token_game
from tests.fast_compile import fast_jit


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_GAME = dict(num_items=4, num_attributes=2, num_values=2, max_turns=3)


def tiny_config(**overrides) -> ml_collections.ConfigDict:
  """A bare token-agent config (the fields `add_config_fields` adds) on a tiny game."""
  config = ml_collections.ConfigDict()
  tc.add_config_fields(config)
  config.update(
    dict(
      env_kwargs=ml_collections.ConfigDict(TINY_GAME),
      d_model=16,
      num_layers=1,
      num_heads=2,
      bc_steps=2,
      bc_batch_size=8,
      bc_dataset_episodes=4,
    )
  )
  config.update(overrides)
  return config


def _load_config_module(name: str):
  path = os.path.join(ROOT, "experiments", "configs", f"{name}.py")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_common_protocol_sets_the_shared_fields_on_any_token_agent_config():
  """`token_game_common.game_config` sets the same game, policy, warm start and evaluation on a
  bare token-agent config as the ArCHer experiment config uses."""
  common = _load_config_module("token_game_common")
  bare = ml_collections.ConfigDict()
  tc.add_config_fields(bare)
  common.game_config(bare)
  tc.validate_config_fields(bare)
  archer_config = _load_config_module("archer_token_game").get_config()
  for field in (
    "env_name",
    "d_model",
    "num_layers",
    "num_heads",
    "temperature",
    "bc_steps",
    "bc_batch_size",
    "bc_learning_rate",
    "bc_dataset_episodes",
    "bc_random_question_prob",
    "eval_episodes",
  ):
    assert bare[field] == archer_config[field], field
  assert bare.env_kwargs.to_dict() == archer_config.env_kwargs.to_dict()
  # A perfect questioner needs log2(items) questions and a guess: exactly the turn limit.
  game = bare.env_kwargs
  assert game.num_values**game.num_attributes == game.num_items
  assert game.max_turns == game.num_attributes + 1


def test_behaviour_cloning_on_scripted_dialogues_lowers_the_nll():
  env, env_params = envs.make("TokenGame-v0", **TINY_GAME)
  config = tiny_config()
  model = tc.make_policy(env_params, config)

  @fast_jit
  def warm_start(key):
    data_key, init_key, bc_key = jax.random.split(key, 3)
    data = tc.scripted_dataset(data_key, env, env_params, 8, 0.0)
    params = tc.init_policy_params(init_key, model, env_params)
    _, losses = tc.behaviour_cloning(bc_key, model, params, data, 30, 16, 1e-2)
    return data, losses

  data, losses = warm_start(jax.random.key(1))
  assert data.dialogue.shape == (8 * 3, token_game.max_dialogue_len(env_params))
  assert data.utterance.shape == (8 * 3, env_params.utterance_len)
  # Every recorded utterance is a valid question or guess of the scripted player.
  kinds = jax.vmap(lambda u: token_game.parse_utterance(u, env_params).kind)(data.utterance)
  assert np.all(np.asarray(kinds) != token_game.KIND_INVALID)
  losses = np.asarray(losses)
  # Four tokens from a 8 + 2 + 2 + 4 = 16-token vocabulary: 4·log(16) ≈ 11 nats at init.
  assert losses[0] > 4 * 2.5
  assert losses[-5:].mean() < 0.5 * losses[0]


def test_warm_start_transitions_are_the_bc_dataset_with_rewards_and_successors():
  """The transitions the critic can pretrain on are the BC dataset's utterances (same games), and
  carry the games' outcomes: rewards only on terminal turns, successors continuing the dialogue."""
  config = tiny_config(bc_dataset_episodes=16)
  env, env_params = envs.make("TokenGame-v0", **TINY_GAME)
  bc_key = jax.random.key(5)
  transitions = fast_jit(lambda k: tc.warm_start_transitions(k, env, env_params, config))(bc_key)
  data_key = jax.random.split(jax.random.fold_in(bc_key, tc.BC_STREAM), 3)[1]
  data = tc.scripted_dataset(data_key, env, env_params, 16, config.bc_random_question_prob)
  np.testing.assert_array_equal(transitions.dialogue, data.dialogue)
  np.testing.assert_array_equal(transitions.utterance, data.utterance)
  assert transitions.reward.shape == (16 * TINY_GAME["max_turns"],)
  reward, terminated = np.asarray(transitions.reward), np.asarray(transitions.terminated)
  assert np.all(reward[~terminated] == 0.0)
  assert 0 < reward.sum() < terminated.sum()  # some guesses right, some wrong
  assert not np.array_equal(transitions.next_dialogue, transitions.dialogue)


def test_weight_decay_makes_the_optimizer_adamw():
  """`weight_decay` > 0 (ArCHer's `critic_weight_decay`): with a zero gradient AdamW still
  shrinks every parameter by lr x decay x parameter (decoupled decay); 0 keeps plain Adam (no
  change on a zero gradient)."""
  params = {"w": jnp.array([2.0, -4.0])}
  zero = {"w": jnp.zeros(2)}
  shrunk = [2.0 - 0.1 * 0.5 * 2.0, -4.0 + 0.1 * 0.5 * 4.0]
  for decay, expected in ((0.5, shrunk), (0.0, [2.0, -4.0])):
    tx = tc.make_optimizer("adam", 0.1, max_grad_norm=1.0, weight_decay=decay)
    updates, _ = tx.update(zero, tx.init(params), params)
    np.testing.assert_allclose(optax.apply_updates(params, updates)["w"], expected, rtol=1e-6)


def test_the_bc_key_is_the_second_half_of_the_agent_key():
  """Every token agent's `create(agent_key)` warm-starts from `bc_key_of(agent_key)`
  (`warm_start_policy_params` equals `init`'s start: test_archer.py)."""
  agent_key = jax.random.split(jax.random.key(3), 3)[0]
  np.testing.assert_array_equal(
    jax.random.key_data(tc.bc_key_of(agent_key)),
    jax.random.key_data(jax.random.split(agent_key)[1]),
  )


def test_validate_config_fields_name_the_field():
  for field, value, match in (
    ("bc_steps", -1, "config.bc_steps: expected an integer >= 0"),
    ("d_model", 15, "config.d_model: expected a multiple"),
    ("env_name", "CartPole-v1", "config.env_name"),
  ):
    with pytest.raises(ConfigError, match=match):
      tc.validate_config_fields(tiny_config(**{field: value}))
