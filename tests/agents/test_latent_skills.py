"""Tests of hrljax.agents.latent_skills (PULSE-style distillation and the high level over the
frozen skills) with a tiny expert built here: a peaked actor-critic whose mode is a fixed
function of the cell. One distillation run is compiled once for the module and shared; the high
level is stepped once on its skills (the losses: tests/losses/test_latent_skills.py; the presets
through the driver: tests/experiments/preset_smoke.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import latent_skills
from hrljax.config_checks import ConfigError
from hrljax.envs import four_rooms
from hrljax.networks import ActorCritic
from hrljax.networks.latent_skills import LatentSkillModel
from tests.fast_compile import fast_jit

NUM_UPDATES = 40


def tiny_config(**overrides):
  config = latent_skills.get_config()
  config.env_name = four_rooms.ENV_NAME
  config.env_kwargs.max_steps_in_episode = 30
  config.expert_run = "unused"  # the expert is passed to make_learner directly
  config.skill_run = "unused"
  config.expert_action = "greedy"
  config.num_envs = 8
  config.num_steps = 16
  config.total_timesteps = 8 * 16 * NUM_UPDATES
  config.latent_dim = 2
  config.skill_hidden_sizes = (32,)
  config.skill_learning_rate = 3e-3
  config.distill_epochs = 2
  config.hidden_sizes = (16,)
  config.update_epochs = 1
  config.num_minibatches = 2
  config.eval_episodes = 2
  config.update(overrides)
  return config


def cells_one_hot():
  cells = four_rooms.free_cells()
  return jax.nn.one_hot(cells[:, 0] * four_rooms.GRID_SIZE + cells[:, 1], four_rooms.GRID_SIZE**2)


def peaked_expert(spec):
  """An actor-critic whose policy head is scaled up: a near-deterministic action per cell."""
  network = ActorCritic(action_dim=spec.action_dim, hidden_sizes=(16,))
  params = network.init(jax.random.key(7), jnp.zeros((1,) + tuple(spec.observation_shape)))
  head = params["params"]["policy_head"]["Dense_0"]
  head["kernel"] = head["kernel"] * 2000.0
  return latent_skills.FrozenPolicy(network, params)


@pytest.fixture(scope="module")
def distilled():
  """`(config, expert, final state, per-update metrics)` of one tiny distillation run."""
  config = tiny_config()
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  expert = peaked_expert(envs.spec(env, env_params))
  state, metrics = fast_jit(latent_skills.make_train(config, expert=expert))(jax.random.key(0))
  return config, expert, state, metrics


@pytest.mark.learning
def test_distilled_prior_reproduces_the_experts_actions(distilled):
  _, expert, state, metrics = distilled
  obs = cells_one_hot()
  expert_mode = np.asarray(expert.network.apply(expert.params, obs)[0].mode())
  assert len(np.unique(expert_mode)) >= 3  # the expert is not one constant action
  student_mode = np.asarray(state.agent.act(obs, jax.random.key(0), deterministic=True))
  agreement = np.mean(student_mode == expert_mode)
  # Cells the student never visits are not learned: measured 0.99-1.0 with these sizes; a
  # constant action matches at most the largest class of the expert's actions.
  assert agreement >= 0.8, agreement
  accuracy = np.asarray(metrics["prior_accuracy"])
  assert accuracy[-5:].mean() > accuracy[:5].mean() + 0.2, accuracy


def test_kl_coefficient_is_annealed_from_start_to_end(distilled):
  config, _, _, metrics = distilled
  kl_coef = np.asarray(metrics["kl_coef"])
  np.testing.assert_allclose(
    kl_coef[[0, -1]], [config.kl_coef_start, config.kl_coef_end], rtol=1e-6
  )
  assert np.all(np.diff(kl_coef) < 0)


def test_zero_high_level_action_decodes_the_prior_mean_skill(distilled):
  _, _, state, _ = distilled
  skills = latent_skills.Skills(state.agent.model, state.agent.params)
  obs = cells_one_hot()
  prior_mean, _ = skills.model.apply(skills.params, obs, method=LatentSkillModel.prior)
  at_prior = skills.model.apply(skills.params, obs, prior_mean, method=LatentSkillModel.decode)
  zero = jnp.zeros_like(prior_mean)
  np.testing.assert_array_equal(
    latent_skills.decode_action(skills, obs, zero, None), at_prior.mode()
  )
  moved = latent_skills.decode_action(skills, obs, zero + 1.0, None)
  assert moved.shape == at_prior.mode().shape


def test_one_high_level_update_moves_its_policy_and_not_the_skills(distilled):
  _, _, state, _ = distilled
  skills = latent_skills.Skills(state.agent.model, state.agent.params)
  frozen = jax.tree.map(np.array, skills.params)
  config = tiny_config(
    mode="high_level",
    num_envs=4,
    num_steps=8,
    total_timesteps=64,
    num_minibatches=1,
    a_hi_log_std_init=-1.0,
  )
  learner = latent_skills.make_learner(config, skills=skills)

  def init_and_step(key):
    start = learner.init(key)
    return start, *learner.step(start)

  start, after, metrics = fast_jit(init_and_step)(jax.random.key(1))
  dist, _ = start.agent.network.apply(start.agent.params, cells_one_hot()[:2])
  np.testing.assert_allclose(dist.scale_diag, np.exp(-1.0), rtol=1e-6)  # a_hi's starting spread
  assert all(np.isfinite(float(v)) for v in metrics.values()), metrics
  assert float(metrics["a_hi_norm"]) > 0.1  # a_hi is sampled around the prior
  moved = jax.tree.leaves(
    jax.tree.map(lambda a, b: np.any(a != b), start.agent.params, after.agent.params)
  )
  assert any(moved)
  for a, b in zip(jax.tree.leaves(frozen), jax.tree.leaves(skills.params)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("mode", "finetune", "config.mode"),
    ("expert_run", "", "config.expert_run"),
    ("student_latent", "posterior", "config.student_latent"),
    ("skill_hidden_sizes", (), "config.skill_hidden_sizes"),
    ("kl_coef_end", -1.0, "config.kl_coef_end"),
    ("a_hi_log_std_init", 3.0, "config.a_hi_log_std_init"),
  ],
)
def test_bad_config_is_a_config_error_naming_the_field(field, value, message):
  config = tiny_config(**{field: value})
  with pytest.raises(ConfigError, match=message):
    latent_skills.validate_config(config)


def test_high_level_needs_a_skill_run():
  with pytest.raises(ConfigError, match="config.skill_run"):
    latent_skills.validate_config(tiny_config(mode="high_level", skill_run=""))
