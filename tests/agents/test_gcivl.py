"""Tests of hrljax.agents.gcivl on a synthetic random-walk dataset (no ogbench needed)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import config_checks, offline
from hrljax.agents import gcivl
from hrljax.data import goal_sampler


def tiny_config(path):
  config = gcivl.get_config()
  config.dataset_path = path
  config.batch_size = 32
  config.num_updates = 4
  config.value_hidden_sizes = (8,)  # one small layer: smaller programs compile faster
  config.actor_hidden_sizes = (8,)
  config.log_every = 2
  config.checkpoint_every = 2
  return config


@pytest.fixture(scope="module")
def setup(random_walk_path):
  path = random_walk_path
  config = tiny_config(path)
  learner = gcivl.make_learner(config)
  state = jax.jit(learner.init)(jax.random.key(0))
  data, _ = offline.load_datasets(config)
  sampler = goal_sampler.SamplerConfig.from_config(config)
  batch = goal_sampler.sample_gc_batch(jax.random.key(1), data, 32, sampler)
  return config, learner, state, batch


def test_defaults_are_ogbench_pointmaze_settings():
  config = gcivl.get_config()
  assert (config.learning_rate, config.batch_size, config.gamma, config.tau) == (
    3e-4,
    1024,
    0.99,
    0.005,
  )
  assert (config.expectile, config.alpha) == (0.9, 10.0)
  assert tuple(config.value_hidden_sizes) == (512, 512, 512) and config.layer_norm
  value_p = (config.value_p_curgoal, config.value_p_trajgoal, config.value_p_randomgoal)
  actor_p = (config.actor_p_curgoal, config.actor_p_trajgoal, config.actor_p_randomgoal)
  assert value_p == (0.2, 0.5, 0.3) and actor_p == (0.0, 1.0, 0.0)
  assert config.value_geom_sample and not config.actor_geom_sample


def test_validate_config_names_the_bad_field(setup):
  config = setup[0]
  bad = config.copy_and_resolve_references()
  bad.dataset_path = "/nonexistent/x.npz"
  with pytest.raises(config_checks.ConfigError, match="config.dataset_path"):
    gcivl.validate_config(bad)
  bad = config.copy_and_resolve_references()
  bad.value_p_randomgoal = 0.5
  with pytest.raises(config_checks.ConfigError, match="p_cur \\+ p_traj \\+ p_rand"):
    gcivl.validate_config(bad)
  bad = config.copy_and_resolve_references()
  bad.gamma = 1.0
  with pytest.raises(config_checks.ConfigError, match="config.gamma"):
    gcivl.validate_config(bad)
  bad = config.copy_and_resolve_references()
  bad.env_name = "antmaze-large-navigate-v0"
  with pytest.raises(config_checks.ConfigError, match="config.env"):
    gcivl.validate_config(bad)
  gcivl.validate_config(config)


def test_losses_match_a_numpy_recomputation(setup):
  config, _, state, batch = setup
  agent = state.agent
  _, metrics = jax.jit(type(agent).loss)(agent, agent.params, batch)
  f64 = lambda x: np.asarray(x, np.float64)
  value = jax.jit(type(agent).value)
  v = f64(value(agent, agent.params["value"], batch["observations"], batch["value_goals"]))
  vt = f64(value(agent, agent.target_params, batch["observations"], batch["value_goals"]))
  nvt = f64(value(agent, agent.target_params, batch["next_observations"], batch["value_goals"]))
  r, m = f64(batch["rewards"]), f64(batch["masks"])
  adv = r + 0.99 * m * nvt.min(1) - vt.mean(1)
  w = np.where(adv >= 0, 0.9, 0.1)
  y = r[:, None] + 0.99 * m[:, None] * nvt
  expected_value = np.sum(np.mean(w[:, None] * (y - v) ** 2, axis=0))
  np.testing.assert_allclose(float(metrics["value_loss"]), expected_value, rtol=1e-5)

  va = f64(value(agent, agent.params["value"], batch["observations"], batch["actor_goals"]))
  nva = f64(value(agent, agent.params["value"], batch["next_observations"], batch["actor_goals"]))
  weight = np.minimum(np.exp(10.0 * (nva.mean(1) - va.mean(1))), 100.0)
  dist = agent.actor_net.apply(
    agent.params["actor"], jnp.concatenate([batch["observations"], batch["actor_goals"]], axis=-1)
  )
  mean = f64(dist.loc)
  a = f64(batch["actions"])
  log_prob = -0.5 * np.sum((a - mean) ** 2, axis=1) - np.log(2 * np.pi)  # unit std, 2-D
  np.testing.assert_allclose(float(metrics["actor_loss"]), -np.mean(weight * log_prob), rtol=1e-5)


@pytest.fixture(scope="module")
def stepped(setup):
  """The learner's step (a sampled batch, then `GCIVLAgent.update`), compiled once and run twice
  from the same state, whose target differs from the online value (so the order matters)."""
  _, learner, state, _ = setup
  agent = state.agent.replace(
    target_params=jax.tree.map(lambda x: x + 1.0, state.agent.target_params)
  )
  state = state.replace(agent=agent)
  step = jax.jit(learner.step)
  a, metrics_a = step(state)
  _, metrics_b = step(state)
  return agent, a, metrics_a, metrics_b


def test_polyak_uses_the_pre_step_online_parameters(stepped):
  agent, a, _, _ = stepped
  new = a.agent
  expected = jax.tree.map(
    lambda p, t: 0.005 * p + 0.995 * t, agent.params["value"], agent.target_params
  )
  for got, want in zip(jax.tree.leaves(new.target_params), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-7)
  changed = [
    not np.allclose(a, b)
    for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(agent.params))
  ]
  assert all(changed)


def test_learner_step_is_deterministic_and_acts_in_bounds(setup, stepped):
  _, learner, _, _ = setup
  _, a, metrics_a, metrics_b = stepped
  for key in metrics_a:
    assert np.isfinite(float(metrics_a[key]))
    assert float(metrics_a[key]) == float(metrics_b[key])
  obs = jnp.zeros((5, 2)) + 1.0
  act = jax.jit(type(a.agent).act)
  action = act(a.agent, obs, obs + 1.0, jax.random.key(0), 1.0)
  assert action.shape == (5, 2) and float(jnp.abs(action).max()) <= 1.0
  greedy = act(a.agent, obs, obs + 1.0, jax.random.key(0), 0.0)
  np.testing.assert_array_equal(greedy, act(a.agent, obs, obs + 1.0, jax.random.key(9), 0.0))
  evaluation = jax.jit(learner.evaluate)(a, jax.random.key(3))
  assert "eval_value_loss" in evaluation and np.isfinite(float(evaluation["eval_loss"]))
