"""Tests of hrljax.agents.token_ppo: token-level GAE against a NumPy float64 reference written over
the compacted stream of read tokens, the loss's gradient routing, config checks, the shared BC
start and a short run. No learning test (see test_token_filtered_bc.py)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import archer, token_ppo
from hrljax.config_checks import ConfigError
from hrljax.envs import token_game

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


def reference_token_gae(reward, terminated, done, value, next_value, mask, gamma, lam, mode):
  """GAE over the read tokens only, in float64: returns `[T, L]` advantages (0 on unread)."""
  steps = []
  for t in range(mask.shape[0]):
    n = int(mask[t].sum())
    for j in range(n):
      last = j == n - 1
      steps.append(dict(
          index=(t, j),
          r=reward[t] if last else 0.0,
          discount=gamma * (1.0 - terminated[t]) if last else (1.0 if mode == "utterance"
                                                                  else gamma),
          v=value[t, j],
          v_next=next_value[t] if last else value[t, j + 1],
          done=bool(done[t]) if last else False))
  out = np.zeros(mask.shape)
  advantage = 0.0
  for s in reversed(steps):
    delta = s["r"] + s["discount"] * s["v_next"] - s["v"]
    advantage = delta + s["discount"] * lam * (1.0 - s["done"]) * advantage
    out[s["index"]] = advantage
  return out


def _prefix_mask(lengths, num_tokens):
  return np.arange(num_tokens)[None, :] < np.asarray(lengths)[:, None]


@pytest.mark.parametrize("mode", ["utterance", "token"])
def test_token_advantages_match_compacted_reference(mode):
  rng = np.random.default_rng(0)
  num_steps, num_envs, num_tokens = 4, 2, 4
  mask = np.stack([_prefix_mask([4, 2, 3, 1], num_tokens),
                   _prefix_mask([3, 3, 4, 2], num_tokens)], axis=1)  # [T, N, L]
  reward = rng.normal(size=(num_steps, num_envs))
  # Env 0: terminates at step 1 (new game after); env 1: truncated at step 2.
  terminated = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
  done = np.array([[0, 0], [1, 0], [0, 1], [0, 0]], bool)
  value = rng.normal(size=(num_steps, num_envs, num_tokens))
  next_value = rng.normal(size=(num_steps, num_envs))
  config = ml_collections.ConfigDict(dict(gamma=0.9, gae_lambda=0.8, token_discount=mode))
  got = token_ppo.token_advantages(
      jnp.asarray(reward, jnp.float32), jnp.asarray(terminated), jnp.asarray(done),
      jnp.asarray(value, jnp.float32), jnp.asarray(next_value, jnp.float32), jnp.asarray(mask),
      config)
  for n in range(num_envs):
    want = reference_token_gae(reward[:, n], terminated[:, n], done[:, n], value[:, n],
                               next_value[:, n], mask[:, n], 0.9, 0.8, mode)
    np.testing.assert_allclose(np.asarray(got[:, n]), want, rtol=1e-5, atol=1e-5)


def test_terminal_utterance_hand_computed():
  """One utterance of 3 read tokens, reward 1, terminated, λ = 1: A_j = 1 − V_j; unread 0."""
  value = jnp.array([[[0.1, 0.2, 0.3, 0.4]]])
  got = token_ppo.token_advantages(
      jnp.ones((1, 1)), jnp.ones((1, 1), bool), jnp.ones((1, 1), bool), value,
      jnp.full((1, 1), 5.0), jnp.array([[[True, True, True, False]]]),
      ml_collections.ConfigDict(dict(gamma=0.9, gae_lambda=1.0, token_discount="utterance")))
  np.testing.assert_allclose(np.asarray(got[0, 0]), [0.9, 0.8, 0.7, 0.0], atol=1e-6)


def test_truncation_bootstraps_from_next_dialogue():
  """Truncated (done, not terminated): the last token bootstraps γ·V(next); nothing beyond."""
  value = jnp.zeros((2, 1, 4))
  mask = jnp.asarray(_prefix_mask([1, 1], 4))[:, None, :]
  got = token_ppo.token_advantages(
      jnp.array([[0.0], [7.0]]), jnp.zeros((2, 1), bool), jnp.array([[True], [False]]), value,
      jnp.array([[2.0], [0.0]]), mask,
      ml_collections.ConfigDict(dict(gamma=0.5, gae_lambda=1.0, token_discount="utterance")))
  np.testing.assert_allclose(np.asarray(got[:, 0, 0]), [1.0, 7.0], atol=1e-6)


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
  log_prob, _ = token_ppo.token_log_probs_and_entropy(agent.policy, agent.policy_params, dialogue,
                                                      utterance, 1.0)
  zeros = jnp.zeros(utterance.shape, jnp.float32)
  spread = jnp.arange(rows, dtype=jnp.float32) - 1.0  # unequal, so normalisation keeps a signal
  return token_ppo.TokenBatch(dialogue=dialogue, utterance=utterance, log_prob=log_prob,
                              value=zeros, advantage=zeros + advantage * spread[:, None],
                              target=zeros + 1.0,
                              mask=mask)


def _norm(tree) -> float:
  return float(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


def test_loss_gradients_route_to_their_networks(setup):
  _, _, env_params, agent = setup
  batch = _batch(agent, env_params)
  params = (agent.policy_params, agent.value_params)
  floats = (batch.target, batch.log_prob, batch.value, batch.advantage)

  def loss(params, floats):
    target, log_prob, value, advantage = floats
    rows = batch._replace(target=target, log_prob=log_prob, value=value, advantage=advantage)
    return token_ppo.ppo_loss(params, agent, rows)[0]

  zero_advantage = jnp.zeros_like(batch.advantage)

  @jax.jit
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


def test_normalize_advantages_masked():
  adv = jnp.array([[1.0, 3.0, 100.0]])
  mask = jnp.array([[True, True, False]])
  np.testing.assert_allclose(np.asarray(token_ppo.normalize_advantages(adv, mask)),
                             [[-1.0, 1.0, 0.0]], atol=1e-6)


def test_same_warm_start_as_archer(setup):
  """Same seed and warm-start fields: the same initial policy as ArCHer's."""
  config, env, env_params, agent = setup
  archer_config = archer.get_config()
  for field in ("env_kwargs", "d_model", "num_layers", "num_heads", "bc_steps"):
    archer_config[field] = config[field]
  archer_config.critic_d_model = 16
  reference = archer.ArcherAgent.create(jax.random.key(0), env, env_params, archer_config)
  jax.tree.map(np.testing.assert_array_equal, agent.policy_params, reference.policy_params)


@pytest.mark.parametrize("field,value,match", [
    ("token_discount", "word", "config.token_discount"),
    ("num_minibatches", 5, "config.num_minibatches"),
    ("value_d_model", 15, "config.value_d_model"),
    ("gae_lambda", 1.5, "config.gae_lambda"),
    ("loss_aggregation", "sum", "config.loss_aggregation"),
    ("value_learning_rate", 0.0, "config.value_learning_rate"),
    ("total_timesteps", 5, "config.total_timesteps"),
    ("bc_steps", -1, "config.bc_steps"),
])
def test_config_errors_name_the_field(field, value, match):
  with pytest.raises(ConfigError, match=match):
    token_ppo.validate_config(tiny_config(**{field: value}))


def test_experiment_config_is_valid(experiment_config):
  config = experiment_config("token_ppo_token_game")
  token_ppo.validate_config(config)
  assert config.agent == "token_ppo"


def test_short_run_changes_params_and_stays_finite():
  learner = token_ppo.make_learner(tiny_config())
  state = learner.init(jax.random.key(1))
  new_state, metrics = jax.jit(learner.step)(state)
  assert learner.env_steps_per_update == 12
  changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), state.agent.policy_params,
                         new_state.agent.policy_params)
  assert any(jax.tree.leaves(changed))
  for name, value in metrics.items():
    assert np.isfinite(float(value)), name
  assert float(metrics["episodes"]) >= 4  # every game of 3 turns ends within 3 utterances
  assert int(new_state.update) == 1
  for leaf in jax.tree.leaves(new_state.agent.value_params):
    assert bool(jnp.all(jnp.isfinite(leaf)))
