"""Tests of hrljax.agents.token_ppo: token-level GAE per environment (the formula itself is tested
against a float64 reference in tests/losses/test_hierarchical_critics.py), the objective's
gradient routing, config checks, the shared BC start and a short run. No learning test (see
test_token_filtered_bc.py)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import archer, token_ppo
from hrljax.agents import token_common as tc
from hrljax.config_checks import ConfigError
from hrljax.envs import token_game
from hrljax.losses import hierarchical_critics as hc
from tests.fast_compile import fast_jit


TINY_GAME = dict(num_items=4, num_attributes=2, num_values=2, max_turns=3)


def tiny_config(**overrides) -> ml_collections.ConfigDict:
  config = token_ppo.get_config()
  config.env_kwargs = ml_collections.ConfigDict(TINY_GAME)
  config.d_model = 16
  config.num_layers = 1
  config.num_heads = 2
  config.value_d_model = 16
  config.bc_steps = 0
  config.num_envs = 4
  config.num_steps = 3
  config.update_epochs = 1
  config.num_minibatches = 2
  config.total_timesteps = 4 * 3 * 2
  config.eval_episodes = 4
  for name, value in overrides.items():
    config[name] = value
  return config


def test_token_advantages_apply_the_loss_to_every_environment():
  """`token_advantages` is `hc.token_level_advantages` of each environment's time-major slice;
  environment 0 terminates at step 1 (a new game after), environment 1 is truncated at step 2."""
  rng = np.random.default_rng(0)
  lengths = np.array([[4, 3], [2, 3], [3, 4], [1, 2]])
  mask = np.arange(4)[None, None, :] < lengths[:, :, None]  # [T, N, L]
  reward = jnp.asarray(rng.normal(size=(4, 2)), jnp.float32)
  terminated = jnp.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
  done = jnp.array([[0, 0], [1, 0], [0, 1], [0, 0]], bool)
  value = jnp.asarray(rng.normal(size=(4, 2, 4)), jnp.float32)
  next_value = jnp.asarray(rng.normal(size=(4, 2)), jnp.float32)
  config = ml_collections.ConfigDict(dict(gamma=0.9, gae_lambda=0.8, token_gamma=0.9))
  got = tc.token_advantages(reward, terminated, done, value, next_value, jnp.asarray(mask), config)
  for n in range(2):
    want = hc.token_level_advantages(
      reward[:, n],
      terminated[:, n],
      done[:, n],
      value[:, n],
      next_value[:, n],
      jnp.asarray(mask[:, n]),
      0.9,
      0.8,
      0.9,
    )
    np.testing.assert_array_equal(np.asarray(got[:, n]), np.asarray(want))
  assert float(jnp.abs(got).sum()) > 0.0


@pytest.fixture(scope="module")
def setup():
  config = tiny_config()
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  agent = token_ppo.TokenPPOAgent.create(jax.random.key(0), env, env_params, config)
  return config, env, env_params, agent


def _batch(agent, env_params, rows=4, advantage=1.0):
  """Rows whose behaviour log-probs are the current policy's (ratio 1: nothing clipped)."""
  dialogue = jnp.zeros((rows, token_game.max_dialogue_len(env_params)), jnp.int32)
  dialogue = dialogue.at[:, 0].set(token_game.BOS)
  utterance = jnp.stack([token_game.encode_question(i % 2, 1, env_params) for i in range(rows)])
  mask = jax.vmap(token_game.utterance_token_mask)(utterance)
  log_prob, _ = tc.token_log_probs_and_entropy(
    agent.policy, agent.policy_params, dialogue, utterance, 1.0
  )
  zeros = jnp.zeros(utterance.shape, jnp.float32)
  spread = jnp.arange(rows, dtype=jnp.float32) - 1.0  # unequal, so normalisation keeps a signal
  return token_ppo.TokenBatch(
    dialogue=dialogue,
    utterance=utterance,
    log_prob=log_prob,
    value=zeros,
    advantage=zeros + advantage * spread[:, None],
    target=zeros + 1.0,
    mask=mask,
  )


def _norm(tree) -> float:
  """Squared norm in NumPy (op by op in JAX, each leaf shape would compile)."""
  return float(sum(np.sum(np.square(np.asarray(x, np.float64))) for x in jax.tree.leaves(tree)))


def test_loss_gradients_route_to_their_networks(setup):
  _, _, env_params, agent = setup
  batch = _batch(agent, env_params)
  params = (agent.policy_params, agent.value_params)
  floats = (batch.target, batch.log_prob, batch.value, batch.advantage)

  def loss(params, floats):
    target, log_prob, value, advantage = floats
    rows = batch._replace(target=target, log_prob=log_prob, value=value, advantage=advantage)
    return token_ppo.token_ppo_objective(params, agent, rows)[0]

  zero_advantage = jnp.zeros_like(batch.advantage)

  @fast_jit
  def gradients(params, floats):
    grads = jax.grad(loss, argnums=(0, 1))(params, floats)
    # Zero advantages and no entropy bonus: the policy must get no gradient at all.
    zero = jax.grad(loss)(params, floats[:3] + (zero_advantage,))
    return grads, zero

  ((policy_grads, value_grads), float_grads), zero = gradients(params, floats)
  assert _norm(policy_grads) > 0 and _norm(value_grads) > 0
  # Targets, behaviour log-probs, old values and advantages carry no gradient.
  for name, grad in zip(("target", "log_prob", "value", "advantage"), float_grads):
    assert _norm(grad) == 0.0, name
  assert _norm(zero[0]) == 0.0 and _norm(zero[1]) > 0


def test_same_warm_start_as_archer(setup):
  """Same seed and warm-start fields: the same initial policy as ArCHer's."""
  config, env, env_params, agent = setup
  archer_config = archer.get_config()
  for field in ("env_kwargs", "d_model", "num_layers", "num_heads", "bc_steps"):
    archer_config[field] = config[field]
  archer_config.critic_d_model = 16
  reference = archer.ArcherAgent.create(jax.random.key(0), env, env_params, archer_config)
  jax.tree.map(np.testing.assert_array_equal, agent.policy_params, reference.policy_params)


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("token_gamma", 1.5, "config.token_gamma"),
    ("num_minibatches", 5, "config.num_minibatches"),
    ("value_d_model", 15, "config.value_d_model"),
    ("gae_lambda", 1.5, "config.gae_lambda"),
    ("loss_aggregation", "sum", "config.loss_aggregation"),
    ("value_learning_rate", 0.0, "config.value_learning_rate"),
    ("total_timesteps", 5, "config.total_timesteps"),
    ("bc_steps", -1, "config.bc_steps"),
  ],
)
def test_config_errors_name_the_field(field, value, match):
  with pytest.raises(ConfigError, match=match):
    token_ppo.validate_config(tiny_config(**{field: value}))


def test_experiment_config_is_valid(experiment_config):
  config = experiment_config("token_ppo_token_game")
  token_ppo.validate_config(config)
  assert config.agent == "token_ppo"


def test_short_run_changes_params_and_stays_finite():
  learner = token_ppo.make_learner(tiny_config())
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
  assert float(metrics["episodes"]) >= 4  # every game of 3 turns ends within 3 utterances
  assert int(new_state.update) == 1
  for leaf in jax.tree.leaves(new_state.agent.value_params):
    assert bool(jnp.all(jnp.isfinite(leaf)))
