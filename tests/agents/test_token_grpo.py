"""Tests of hrljax.agents.token_grpo: group-relative advantages on every read token of a dialogue's
utterances (hand-computed), the KL to the reference, gradient checks, config checks, the shared BC
start and a short run whose groups share their hidden target."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from hrljax import envs, rollout
from hrljax.agents import common, token_grpo
from hrljax.agents import token_common as tc
from hrljax.config_checks import ConfigError
from hrljax.envs import token_game
from hrljax.types import Transition
from tests.fast_compile import fast_jit


TINY_GAME = dict(num_items=4, num_attributes=2, num_values=2, max_turns=3)


def tiny_config(**overrides) -> ml_collections.ConfigDict:
  config = token_grpo.get_config()
  config.env_kwargs = ml_collections.ConfigDict(TINY_GAME)
  config.d_model = 16
  config.num_layers = 1
  config.num_heads = 2
  config.bc_steps = 0
  config.num_groups = 2
  config.group_size = 2
  config.num_minibatches = 2
  config.learning_rate = 1e-2
  config.total_timesteps = 4 * 3 * 2
  config.eval_episodes = 4
  for name, value in overrides.items():
    config[name] = value
  return config


def _episodes(env_params):
  """T = 2 steps, N = 4 games in groups {0, 1}, {2, 3}; game 0 wins at step 0 (step 1 invalid),
  game 1 loses at step 1, game 2 wins at step 1, game 3 loses at step 1."""
  num_steps, num_envs = 2, 4
  length = env_params.utterance_len
  question = token_game.encode_question(0, 1, env_params)  # 4 read tokens
  guess = token_game.encode_guess(1, env_params)  # 3 read tokens
  action = jnp.stack(
    [jnp.stack([guess, question, question, question]), jnp.stack([question, guess, guess, guess])]
  )
  reward = jnp.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
  done = jnp.array([[True, False, False, False], [False, True, True, True]])
  dialogue = jnp.zeros((num_steps, num_envs, token_game.max_dialogue_len(env_params)), jnp.int32)
  transitions = Transition(
    obs=dialogue.at[..., 0].set(token_game.BOS),
    action=action,
    reward=reward,
    terminated=done,
    truncated=jnp.zeros_like(done),
    next_obs=dialogue,
    policy_extras=jnp.zeros((num_steps, num_envs, length)),
    episode_return=jnp.zeros_like(reward),
    episode_length=jnp.zeros((num_steps, num_envs), jnp.int32),
  )
  return rollout.GroupedEpisodes(
    transitions=transitions,
    valid=rollout.first_episode_mask(done),
    group_ids=jnp.array([0, 0, 1, 1], jnp.int32),
  )


def test_make_batch_broadcasts_group_advantages_to_read_tokens():
  config = tiny_config()
  _, env_params = envs.make(config.env_name, **config.env_kwargs)
  batch, advantage = token_grpo.make_batch(_episodes(env_params), config)
  # Groups (1, 0) and (1, 0): mean 0.5, unbiased std sqrt(0.5).
  a = 0.5 / (np.sqrt(0.5) + 1e-6)
  np.testing.assert_allclose(np.asarray(advantage), [a, -a, a, -a], rtol=1e-6)
  # Rows are time-major: row = t * N + n. Guesses read 3 tokens, questions 4.
  read = np.array(
    [
      [1, 1, 1, 0],
      [1, 1, 1, 1],
      [1, 1, 1, 1],
      [1, 1, 1, 1],
      [0, 0, 0, 0],
      [1, 1, 1, 0],
      [1, 1, 1, 0],
      [1, 1, 1, 0],
    ],
    bool,
  )
  np.testing.assert_array_equal(np.asarray(batch.mask), read)  # game 0's step 1 is not its game
  per_row = np.tile([a, -a, a, -a], 2)[:, None]
  np.testing.assert_allclose(np.asarray(batch.advantage), np.where(read, per_row, 0.0), rtol=1e-6)


@pytest.mark.parametrize(
  "estimator,expected", [("dr_grpo", [0.5, -0.5, 0.5, -0.5]), ("rloo", [1.0, -1.0, 1.0, -1.0])]
)
def test_other_estimators(estimator, expected):
  config = tiny_config(estimator=estimator)
  got = common.outcome_advantages(
    jnp.array([1.0, 0.0, 1.0, 0.0]), jnp.array([0, 0, 1, 1], jnp.int32), config
  )
  np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)


def test_unlikeliness_ranks_won_games_by_the_mean_log_prob_of_every_token_they_spoke():
  """One group of 4 games: mean read-token log-probs -0.5 (won), -3 (lost), -1 (won), -2 (lost);
  unread tokens (a guess's padding, game 0's step after its end) hold -100 and are not read. The
  least likely game has rank 0, so the likelier win keeps less: R' = 1 - 0.25 * 3/4 for game 0,
  1 - 0.25 * 2/4 for game 2 (a port ranking the other way gives 1 and 1 - 0.25 / 4)."""
  config = tiny_config(estimator="unlikeliness", num_groups=1, group_size=4)
  _, env_params = envs.make(config.env_name, **config.env_kwargs)
  episodes = _episodes(env_params)
  read = tc.token_mask(episodes.transitions.action) & episodes.valid[..., None]
  logp = jnp.where(read, jnp.array([-0.5, -3.0, -1.0, -2.0])[None, :, None], -100.0)
  episodes = episodes._replace(
    transitions=episodes.transitions._replace(policy_extras=logp),
    group_ids=jnp.zeros(4, jnp.int32),
  )
  got = token_grpo.episode_advantages(episodes, config)
  shaped = np.array([1 - 0.25 * 3 / 4, 0.0, 1 - 0.25 * 2 / 4, 0.0])
  expected = (shaped - shaped.mean()) / (shaped.std(ddof=1) + 1e-6)
  np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5)
  grpo = token_grpo.episode_advantages(episodes, tiny_config(num_groups=1, group_size=4))
  plain = token_grpo.episode_advantages(
    episodes,
    tiny_config(estimator="unlikeliness", unlikeliness_beta=0.0, num_groups=1, group_size=4),
  )
  np.testing.assert_allclose(np.asarray(plain), np.asarray(grpo), rtol=1e-6)  # beta 0 is GRPO


@pytest.fixture(scope="module")
def setup():
  config = tiny_config()
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  agent = token_grpo.TokenGRPOAgent.create(jax.random.key(0), env, env_params, config)
  return config, env, env_params, agent


def _norm(tree) -> float:
  """Squared norm in NumPy (op by op in JAX, each leaf shape would compile)."""
  return float(sum(np.sum(np.square(np.asarray(x, np.float64))) for x in jax.tree.leaves(tree)))


def test_loss_at_the_reference_has_zero_kl_and_the_surrogate_gradient(setup):
  """At params = reference = behaviour: KL 0, and the gradient equals that of the plain
  REINFORCE surrogate −mean_tokens(A · log π) (ratio 1, nothing clipped; k3 has zero gradient)."""
  config, _, env_params, agent = setup
  batch, _ = token_grpo.make_batch(_episodes(env_params), config)
  logp, _ = tc.token_log_probs_and_entropy(
    agent.policy, agent.policy_params, batch.dialogue, batch.utterance, 1.0
  )
  batch = batch._replace(log_prob=logp)

  def reinforce(params):
    new_logp, _ = tc.token_log_probs_and_entropy(
      agent.policy, params, batch.dialogue, batch.utterance, 1.0
    )
    mask = batch.mask.astype(jnp.float32)
    return -jnp.sum(batch.advantage * new_logp * mask) / jnp.sum(mask)

  (loss, metrics), grads = fast_jit(
    jax.value_and_grad(lambda p: token_grpo.token_grpo_objective(p, agent, batch), has_aux=True)
  )(agent.policy_params)
  want = fast_jit(jax.grad(reinforce))(agent.policy_params)
  assert abs(float(metrics["kl_to_reference"])) < 1e-6
  assert _norm(grads) > 0
  jax.tree.map(
    lambda g, w: np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-7),
    grads,
    want,
  )


def test_same_warm_start_as_archer(setup):
  """ArCHer's `create` splits its key and warm-starts from the second half (test_token_ppo.py
  checks the equality with ArCHer's agent itself)."""
  config, env, env_params, agent = setup[:4]
  policy = tc.make_policy(env_params, config)
  want = tc.pretrained_policy_params(
    jax.random.split(jax.random.key(0))[1], policy, env, env_params, config
  )
  jax.tree.map(np.testing.assert_array_equal, agent.policy_params, want)
  jax.tree.map(np.testing.assert_array_equal, agent.ref_params, want)


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("estimator", "gigpo", "config.estimator"),
    ("num_envs", 5, "config.num_envs"),
    ("num_minibatches", 5, "config.num_minibatches"),
    ("kl_estimator", "k9", "config.kl_estimator"),
    ("grpo_scale", "global", "config.grpo_scale"),
    ("total_timesteps", 11, "config.total_timesteps"),
    ("kl_coef", -1.0, "config.kl_coef"),
    ("unlikeliness_beta", 1.5, "config.unlikeliness_beta"),
  ],
)
def test_config_errors_name_the_field(field, value, match):
  config = tiny_config()
  if field == "num_envs":
    config.num_envs = value  # replaces the num_groups * group_size reference
  else:
    config[field] = value
  with pytest.raises(ConfigError, match=match):
    token_grpo.validate_config(config)


def test_experiment_config_is_valid(experiment_config):
  config = experiment_config("token_grpo_token_game")
  token_grpo.validate_config(config)
  assert config.agent == "token_grpo"


def test_short_run_changes_params_and_stays_finite():
  # The random policy rarely wins, so the advantages may all be zero; the entropy bonus still
  # moves the policy.
  config = tiny_config(entropy_coef=0.01)
  learner = token_grpo.make_learner(config)
  state = fast_jit(learner.init)(jax.random.key(1))
  new_state, metrics = fast_jit(learner.step)(state)
  assert learner.env_steps_per_update == 12
  for name, value in metrics.items():
    assert np.isfinite(float(value)), name
  assert float(metrics["episodes"]) == 4
  assert 4 <= float(metrics["utterances"]) <= 12
  jax.tree.map(np.testing.assert_array_equal, new_state.agent.ref_params, state.agent.ref_params)
  changed = jax.tree.map(
    lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
    state.agent.policy_params,
    new_state.agent.policy_params,
  )
  assert any(jax.tree.leaves(changed))
