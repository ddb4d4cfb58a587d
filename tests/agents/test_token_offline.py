"""Tests of hrljax.agents.token_offline: the logged data (returns-to-go, outcomes, the logging
policy's state values), the rows each objective samples, config errors and a short run of each
objective through the learner."""

import collections

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import token_offline
from hrljax.config_checks import ConfigError
from tests.fast_compile import fast_jit

TINY_GAME = {"num_items": 4, "num_attributes": 2, "num_values": 2, "max_turns": 3}


def tiny_config(**overrides) -> ml_collections.ConfigDict:
  config = token_offline.get_config()
  config.env_kwargs = ml_collections.ConfigDict(TINY_GAME)
  config.update(
    d_model=16,
    num_layers=1,
    num_heads=2,
    bc_steps=0,
    dataset_episodes=32,
    num_updates=3,
    batch_size=8,
    learning_rate=1e-2,
    eval_episodes=4,
  )
  config.update(overrides)
  return config


@pytest.fixture(scope="module")
def data():
  config = tiny_config(dataset_random_question_prob=0.5)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  logged = fast_jit(lambda k: token_offline.logged_utterances(k, env, env_params, config))(
    jax.random.key(0)
  )
  return jax.tree.map(np.asarray, logged)


def test_logged_rows_carry_their_games_return_to_go_outcome_and_state_value(data):
  games = 32
  rows = data.valid.reshape(3, games)  # time-major: row = t * games + n
  assert rows[0].all()  # every game has a first turn
  assert not np.any(rows[1:] & ~rows[:-1])  # a game's rows are a prefix of its column
  returns = data.returns.reshape(3, games)
  won = data.won.reshape(3, games)
  for n in range(games):
    played = rows[:, n]
    outcome = returns[0, n]
    assert outcome in (0.0, 1.0)
    # The reward (a win) comes at the game's last row: the return-to-go is the outcome throughout.
    np.testing.assert_array_equal(returns[played, n], outcome)
    np.testing.assert_array_equal(won[played, n], outcome >= 1.0)
    assert not won[~played, n].any() and (returns[~played, n] == 0).all()
  assert 0 < data.won[data.valid].mean() < 1  # both outcomes are in the data
  # V: the mean return of the valid rows spoken after the same dialogue.
  by_dialogue = collections.defaultdict(list)
  for dialogue, ret, valid in zip(data.dialogue, data.returns, data.valid):
    if valid:
      by_dialogue[dialogue.tobytes()].append(ret)
  assert len(by_dialogue) < data.valid.sum()  # some dialogues repeat (every first turn)
  for dialogue, value, valid in zip(data.dialogue, data.value, data.valid):
    expected = np.mean(by_dialogue[dialogue.tobytes()]) if valid else 0.0
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_each_objective_samples_its_rows(data):
  logged = jax.tree.map(jnp.asarray, data)
  logits = {
    name: np.asarray(token_offline.sampling_logits(logged, tiny_config(objective=name)))
    for name in ("bc", "filtered_bc", "alol")
  }
  np.testing.assert_array_equal(np.isfinite(logits["bc"]), data.valid)
  np.testing.assert_array_equal(np.isfinite(logits["filtered_bc"]), data.won)
  advantage = np.maximum(data.returns - data.value, 0.0)
  positive = data.valid & (advantage > 0)
  np.testing.assert_array_equal(np.isfinite(logits["alol"]), positive)
  np.testing.assert_allclose(logits["alol"][positive], np.log(advantage[positive]), rtol=1e-5)
  uniform = np.asarray(
    token_offline.sampling_logits(logged, tiny_config(objective="alol", priority_sampling=False))
  )
  np.testing.assert_array_equal(uniform, logits["bc"])
  # No won game: filtered BC falls back to every logged row (and keeps none in its loss).
  lost = logged._replace(won=jnp.zeros_like(logged.won))
  fallback = token_offline.sampling_logits(lost, tiny_config(objective="filtered_bc"))
  np.testing.assert_array_equal(np.asarray(fallback), logits["bc"])


@pytest.mark.parametrize(
  "field, value",
  [
    ("objective", "ppo"),
    ("alol_variant", "kl"),
    ("alol_epsilon", 0.0),
    ("dataset_episodes", 0),
    ("dataset_random_question_prob", 1.5),
    ("batch_size", 0),
  ],
)
def test_config_errors_name_the_field(field, value):
  config = tiny_config()
  config[field] = value
  with pytest.raises(ConfigError, match=f"config.{field}"):
    token_offline.validate_config(config)


def test_preset_is_valid(experiment_config):
  config = experiment_config("token_offline_token_game")
  token_offline.validate_config(config)
  assert config.agent == "token_offline"


def test_short_run_moves_the_policy_and_keeps_the_reference():
  """A-LoL (the reference's forward pass and the priority sampling on top of BC's path)."""
  config = tiny_config(objective="alol")
  state, metrics = fast_jit(token_offline.make_train(config))(jax.random.key(0))
  assert all(np.isfinite(np.asarray(v)).all() for v in metrics.values()), metrics
  agent = state.agent
  moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), agent.policy_params, agent.ref_params)
  assert any(jax.tree.leaves(moved))
  assert int(state.update) == 3
  assert np.all(np.asarray(metrics["advantage"]) > 0)  # drawn in proportion to A+
  assert np.all(np.asarray(metrics["kept_fraction"]) == 1.0)
