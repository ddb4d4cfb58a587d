"""Tests of hrljax.agents.token_filtered_bc: the dialogue filters on hand cases, sampling only kept
utterances, an update on nothing kept (no change) and on kept data (its likelihood rises), config
checks, the shared BC start and a short run."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import token_filtered_bc
from hrljax.agents import token_common as tc
from hrljax.config_checks import ConfigError
from hrljax.envs import token_game
from hrljax.networks import transformer
from tests.fast_compile import fast_jit


TINY_GAME = dict(num_items=4, num_attributes=2, num_values=2, max_turns=3)


def tiny_config(**overrides) -> ml_collections.ConfigDict:
  config = token_filtered_bc.get_config()
  config.env_kwargs = ml_collections.ConfigDict(TINY_GAME)
  config.d_model = 16
  config.num_layers = 1
  config.num_heads = 2
  config.bc_steps = 0
  config.num_envs = 4
  config.bc_updates = 2
  config.batch_size = 4
  config.learning_rate = 1e-2
  config.total_timesteps = 4 * 3 * 2
  config.eval_episodes = 4
  for name, value in overrides.items():
    config[name] = value
  return config


def test_success_filter_keeps_ended_wins_only():
  returns = jnp.array([1.0, 0.0, 1.0, 1.0])
  ended = jnp.array([True, True, False, True])
  keep = token_filtered_bc.keep_dialogues(returns, ended, tiny_config(filter="success"))
  np.testing.assert_array_equal(np.asarray(keep), [True, False, False, True])


def test_quantile_filter_is_the_reference_rule():
  """Keep returns >= the (1 − 0.5) quantile (np.quantile, linear) of the ended games' returns."""
  returns = np.array([0.0, 3.0, 1.0, 2.0, 10.0])
  ended = np.array([True, True, True, True, False])
  threshold = np.quantile(returns[ended], 0.5)  # 1.5
  keep = token_filtered_bc.keep_dialogues(
    jnp.asarray(returns, jnp.float32),
    jnp.asarray(ended),
    tiny_config(filter="quantile", top_fraction=0.5),
  )
  np.testing.assert_array_equal(np.asarray(keep), ended & (returns >= threshold))
  top = token_filtered_bc.keep_dialogues(
    jnp.asarray(returns, jnp.float32),
    jnp.asarray(ended),
    tiny_config(filter="top_count", top_fraction=0.25),
  )
  np.testing.assert_array_equal(np.asarray(top), [False, True, False, False, False])


def test_sample_kept_draws_only_kept_rows():
  keep = jnp.array([False, True, False, True, False])
  index = token_filtered_bc.sample_kept(jax.random.key(0), keep, 3, 50)
  assert index.shape == (3, 50)
  assert set(np.unique(np.asarray(index))) == {1, 3}
  none = token_filtered_bc.sample_kept(jax.random.key(0), jnp.zeros((5,), bool), 1, 50)
  assert np.all((np.asarray(none) >= 0) & (np.asarray(none) < 5))


@pytest.fixture(scope="module")
def setup():
  config = tiny_config()
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  agent = token_filtered_bc.FilteredBCAgent.create(jax.random.key(0), env, env_params, config)
  dialogue = jnp.zeros((4, token_game.max_dialogue_len(env_params)), jnp.int32)
  dialogue = dialogue.at[:, 0].set(token_game.BOS)
  utterance = jnp.stack([token_game.encode_guess(i, env_params) for i in range(4)])
  data = tc.UtteranceData(dialogue=dialogue, utterance=utterance)
  return config, env, env_params, agent, data, fast_jit(lambda a, d, k: a.update(d, k))


def _log_likelihood(agent, data):
  logp = transformer.utterance_log_probs(
    agent.policy, agent.policy_params, data.dialogue, data.utterance
  )
  return np.asarray(jnp.sum(logp * tc.token_mask(data.utterance), axis=1))


def test_update_without_kept_data_changes_nothing(setup):
  _, _, _, agent, data, update = setup
  new, metrics = update(agent, data, jnp.zeros((4,), bool))
  jax.tree.map(np.testing.assert_array_equal, new.policy_params, agent.policy_params)
  assert float(metrics["bc_loss"]) == 0.0


def test_update_clones_the_kept_utterances(setup):
  """Only row 2 kept: its likelihood rises more than that of the rows not kept."""
  _, _, _, agent, data, update = setup
  keep = jnp.array([False, False, True, False])
  new, metrics = update(agent, data, keep)
  before, after = _log_likelihood(agent, data), _log_likelihood(new, data)
  gain = after - before
  assert gain[2] > 0 and gain[2] > np.max(np.delete(gain, 2))
  assert float(metrics["bc_loss"]) > 0


def test_same_warm_start_as_archer(setup):
  """ArCHer's `create` splits its key and warm-starts from the second half (test_token_ppo.py
  checks the equality with ArCHer's agent itself)."""
  config, env, env_params, agent = setup[:4]
  policy = tc.make_policy(env_params, config)
  want = tc.pretrained_policy_params(
    jax.random.split(jax.random.key(0))[1], policy, env, env_params, config
  )
  jax.tree.map(np.testing.assert_array_equal, agent.policy_params, want)


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("filter", "best", "config.filter"),
    ("top_fraction", 0.0, "config.top_fraction"),
    ("success_return", None, "config.success_return"),
    ("bc_updates", 0, "config.bc_updates"),
    ("total_timesteps", 11, "config.total_timesteps"),
    ("d_model", 15, "config.d_model"),
  ],
)
def test_config_errors_name_the_field(field, value, match):
  with pytest.raises(ConfigError, match=match):
    token_filtered_bc.validate_config(tiny_config(**{field: value}))


def test_experiment_config_is_valid(experiment_config):
  config = experiment_config("token_filtered_bc_token_game")
  token_filtered_bc.validate_config(config)
  assert config.agent == "token_filtered_bc"


def test_short_run_stays_finite_and_counts_utterances():
  config = tiny_config(filter="quantile", top_fraction=1.0)  # keeps every ended game
  learner = token_filtered_bc.make_learner(config)
  state = fast_jit(learner.init)(jax.random.key(1))
  new_state, metrics = fast_jit(learner.step)(state)
  assert learner.env_steps_per_update == 12
  changed = jax.tree.map(
    lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
    state.agent.policy_params,
    new_state.agent.policy_params,
  )
  assert any(jax.tree.leaves(changed))
  for name, value in metrics.items():
    assert np.isfinite(float(value)), name
  assert float(metrics["episodes"]) == 4
  assert 4 <= float(metrics["utterances"]) <= 12
  assert float(metrics["kept_fraction"]) == 1.0
