"""Tests of hrljax.agents.token_offline: the logged data (returns-to-go, outcomes, the logging
policy's state values, the transitions), the rows each objective samples, config errors, a short
A-LoL run, and offline ArCHer (its actor with β = 0 is BC; the critic's Polyak target)."""

import collections

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from hrljax import envs
from hrljax.agents import token_common as tc
from hrljax.agents import token_offline
from hrljax.config_checks import ConfigError
from hrljax.losses import hierarchical_critics as hc
from hrljax.networks import transformer
from tests.fast_compile import fast_jit

TINY_GAME = {"num_items": 4, "num_attributes": 2, "num_values": 2, "max_turns": 3}


def tiny_config(**overrides) -> ml_collections.ConfigDict:
  config = token_offline.get_config()
  config.env_kwargs = ml_collections.ConfigDict(TINY_GAME)
  config.update(
    d_model=16,
    num_layers=1,
    num_heads=2,
    critic_d_model=16,
    critic_num_layers=1,
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
  # The transitions: the reward sums to the return-to-go, a row's successor is the next row's
  # dialogue, and only a game's last row can end it (a guess; a game cut at max_turns does not).
  reward = data.reward.reshape(3, games)
  np.testing.assert_array_equal(reward.sum(0), returns[0])
  terminated = data.terminated.reshape(3, games) & rows
  assert not np.any(terminated[:-1] & rows[1:])
  ended = terminated.any(0)
  assert ended[rows.sum(0) < 3].all() and ended[returns[0] >= 1.0].all()  # early ends and wins
  assert 0 < ended.mean() <= 1
  following = rows[1:].reshape(-1)
  np.testing.assert_array_equal(
    data.next_dialogue[: 2 * games][following], data.dialogue[games:][following]
  )
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
    ("alol_variant", "kto"),
    ("alol_kl_coef", 0.0),
    ("expectile", 1.0),
    ("awr_inv_temp", -1.0),
    ("tau", 1.5),
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


def test_offline_archer_with_beta_0_clones_like_bc_and_polyaks_its_target_critic():
  """β = 0 gives every logged utterance weight 1: the policy takes BC's step on the batch the
  step drew, whatever the critic says. The critic takes its IQL step and the target critic moves
  by τ towards it."""
  # SGD: Adam's first step is ±lr wherever a gradient is not 0, rounding-level ones included.
  config = tiny_config(objective="archer", awr_inv_temp=0.0, optimizer="sgd")
  learner = token_offline.make_learner(config)
  start = fast_jit(learner.init)(jax.random.key(0))
  state, metrics = fast_jit(learner.step)(start)
  assert np.isfinite(float(metrics["critic_loss"])) and float(metrics["awr_weight"]) == 1.0
  # BC's step on the same rows (drawn uniformly from the logged rows with the step's key).
  agent = start.agent
  _, sample_key = jax.random.split(agent.key)
  logits = token_offline.sampling_logits(start.data, config)
  index = jax.random.categorical(sample_key, logits, shape=(config.batch_size,))
  batch = jax.tree.map(lambda x: x[index], start.data)

  @fast_jit
  def bc_step(params):
    def loss(p):
      logp = transformer.utterance_log_probs(agent.policy, p, batch.dialogue, batch.utterance)
      return hc.filtered_bc_loss(logp, tc.token_mask(batch.utterance), batch.valid)[0]

    updates, _ = agent.tx.update(jax.grad(loss)(params), agent.opt_state, params)
    return optax.apply_updates(params, updates)

  for got, want in zip(
    jax.tree.leaves(state.agent.policy_params), jax.tree.leaves(bc_step(agent.policy_params))
  ):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  for init, critic, target in zip(
    jax.tree.leaves(agent.critic_params),
    jax.tree.leaves(state.agent.critic_params),
    jax.tree.leaves(state.agent.target_critic_params),
    strict=True,
  ):
    np.testing.assert_allclose(target, config.tau * critic + (1 - config.tau) * init, atol=1e-7)
  assert (
    max(
      float(np.abs(np.asarray(a) - np.asarray(b)).max())
      for a, b in zip(
        jax.tree.leaves(agent.critic_params), jax.tree.leaves(state.agent.critic_params)
      )
    )
    > 0
  )
