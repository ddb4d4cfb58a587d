"""Tests of hrljax.agents.hilp on a tiny synthetic random-walk dataset (no ogbench needed)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hrljax.agents import hilp

from hrljax import agents, config_checks, offline
from hrljax.data import goal_sampler
from tests.fast_compile import fast_jit

SKILL_DIM = 4


def tiny_config(path):
  config = hilp.get_config()
  config.dataset_path = path
  config.batch_size = 32
  config.num_updates = 4
  config.value_hidden_sizes = (8,)  # one small layer: smaller programs compile faster
  config.actor_hidden_sizes = (8,)
  config.skill_dim = SKILL_DIM
  config.log_every = 2
  config.checkpoint_every = 2
  return config


@pytest.fixture(scope="module")
def setup(random_walk_path):
  config = tiny_config(random_walk_path)
  learner = hilp.make_learner(config)
  state = fast_jit(learner.init)(jax.random.key(0))
  # a non-trivial actor log-std, so the Gaussian log-prob check sees a scale != 1
  params = state.agent.params
  actor = jax.tree.map(lambda x: x, params["skill_actor"])
  actor["params"]["log_stds"] = jnp.array([0.3, -0.4])
  state = state.replace(agent=state.agent.replace(params={**params, "skill_actor": actor}))
  data, _ = offline.load_datasets(config)
  sampler = goal_sampler.SamplerConfig.from_config(config)
  sample = fast_jit(hilp.sample_hilp_batch, static_argnums=(2, 3, 4))
  batch = sample(jax.random.key(1), data, 32, sampler, SKILL_DIM)
  other = sample(jax.random.key(2), data, 32, sampler, SKILL_DIM)
  return config, learner, state, batch, other


def f64(x):
  return np.asarray(x, np.float64)


def test_defaults_are_the_hilp_gcrl_settings(random_walk_path):
  config = hilp.get_config()
  assert config.agent == "hilp" and "hilp" in agents.AGENTS and agents.get("hilp") is hilp
  assert (config.expectile, config.gamma, config.tau, config.learning_rate) == (
    0.95,
    0.99,
    0.005,
    3e-4,
  )
  assert (
    config.skill_dim,
    config.skill_expectile,
    config.skill_temperature,
    config.skill_gamma,
  ) == (32, 0.9, 10.0, 0.99)
  assert (config.value_p_curgoal, config.value_p_trajgoal, config.value_p_randomgoal) == (
    0.0,
    0.625,
    0.375,
  )
  assert config.value_geom_sample and not config.const_std and "alpha" not in config
  config = tiny_config(random_walk_path)
  hilp.validate_config(config)
  for field, value in (("skill_dim", 0), ("skill_expectile", 1.5), ("skill_temperature", -1.0)):
    bad = config.copy_and_resolve_references()
    bad[field] = value
    with pytest.raises(config_checks.ConfigError, match=f"config.{field}"):
      hilp.validate_config(bad)


def test_skills_are_fresh_unit_vectors(setup):
  _, _, _, batch, other = setup
  z, z_other = f64(batch["skills"]), f64(other["skills"])
  assert z.shape == (32, SKILL_DIM)
  np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, rtol=1e-5)
  assert not np.allclose(z, z_other)  # a fresh draw per batch (HILP README, 2025-09-29)


@pytest.fixture(scope="module")
def quantities(setup):
  _, _, state, batch, _ = setup
  agent = state.agent

  @fast_jit
  def compute(agent, batch):
    p, t = agent.params, agent.target_params
    obs, nxt, goals = batch["observations"], batch["next_observations"], batch["value_goals"]
    z, a = batch["skills"], batch["actions"]
    dist = agent.skill_actor_net.apply(p["skill_actor"], jnp.concatenate([obs, z], axis=-1))
    return agent.loss_terms(p, batch)[0], dict(
      phi_s=agent.phi(p["phi"], obs),
      phi_n=agent.phi(p["phi"], nxt),
      phi_g=agent.phi(p["phi"], goals),
      tphi_s=agent.phi(t["phi"], obs),
      tphi_n=agent.phi(t["phi"], nxt),
      tphi_g=agent.phi(t["phi"], goals),
      v=agent.skill_value(p, obs, z),
      next_v=agent.skill_value(p, nxt, z),
      q=agent.skill_critic(p["skill_critic"], obs, z, a),
      q_tgt=agent.skill_critic(t["skill_critic"], obs, z, a),
      mean=dist.loc,
      std=dist.scale_diag,
    )

  losses, q = compute(agent, batch)
  return losses, {k: f64(v) for k, v in q.items()}


def test_representation_loss_is_ivl_on_hilbert_distances(setup, quantities):
  _, _, _, batch, _ = setup
  losses, q = quantities
  value = lambda x, y: -np.sqrt(np.maximum(np.sum((x - y) ** 2, -1), 1e-6))  # [E, B]
  v, vt, nvt = (
    value(q["phi_s"], q["phi_g"]),
    value(q["tphi_s"], q["tphi_g"]),
    value(q["tphi_n"], q["tphi_g"]),
  )
  r, m = f64(batch["rewards"]), f64(batch["masks"])
  adv = r + 0.99 * m * nvt.min(0) - vt.mean(0)
  w = np.where(adv >= 0, 0.95, 0.05)
  y = r[None] + 0.99 * m[None] * nvt
  expected = np.sum(np.mean(w[None] * (y - v) ** 2, axis=1))
  np.testing.assert_allclose(float(losses["representation"]), expected, rtol=1e-5)
  assert np.all(v < 0)


def test_skill_losses_match_a_numpy_recomputation(setup, quantities):
  _, _, _, batch, _ = setup
  losses, q = quantities
  z, a = f64(batch["skills"]), f64(batch["actions"])
  reward = np.sum((q["phi_n"][0] - q["phi_s"][0]) * z, axis=1)  # first φ member
  q_min = q["q_tgt"].min(1)
  diff = q_min - q["v"]
  np.testing.assert_allclose(
    float(losses["skill_value"]), np.mean(np.where(diff < 0, 0.1, 0.9) * diff**2), rtol=1e-5
  )
  target = reward + 0.99 * q["next_v"]  # no done mask
  np.testing.assert_allclose(
    float(losses["skill_critic"]), np.mean(np.sum((q["q"] - target[:, None]) ** 2, 1)), rtol=1e-5
  )
  weight = np.minimum(np.exp(10.0 * diff), 100.0)
  std = q["std"]
  np.testing.assert_allclose(std[0], np.exp([0.3, -0.4]), rtol=1e-6)
  log_prob = (
    -0.5 * np.sum(((a - q["mean"]) / std) ** 2, 1) - np.sum(np.log(std), 1) - np.log(2 * np.pi)
  )
  np.testing.assert_allclose(float(losses["skill_actor"]), -np.mean(weight * log_prob), rtol=1e-5)


def test_gradient_routing(setup):
  _, _, state, batch, _ = setup
  agent = state.agent
  jac = fast_jit(jax.jacrev(lambda p: agent.loss_terms(p, batch)[0]))(agent.params)
  groups = {
    term: {
      g
      for g in hilp.GROUPS
      if any(float(jnp.abs(x).max()) > 0 for x in jax.tree.leaves(jac[term][g]))
    }
    for term in jac
  }
  assert groups == {
    "representation": {"phi"},
    "skill_value": {"skill_value"},
    "skill_critic": {"skill_critic"},
    "skill_actor": {"skill_actor"},
  }


def test_goal_prompt_and_act(setup):
  _, _, state, _, _ = setup
  agent = state.agent
  obs = jnp.array([[0.5, 1.0], [2.0, -1.0], [3.0, 3.0]])
  goal = jnp.array([[4.0, 4.0], [0.0, 0.0], [1.0, 2.0]])
  phi = fast_jit(type(agent).phi)
  delta = (
    f64(phi(agent, agent.params["phi"], goal))[0] - f64(phi(agent, agent.params["phi"], obs))[0]
  )
  z = fast_jit(type(agent).goal_skill)(agent, obs, goal)
  np.testing.assert_allclose(
    f64(z), delta / np.linalg.norm(delta, axis=1, keepdims=True), rtol=1e-5, atol=1e-6
  )
  act = fast_jit(type(agent).act)
  greedy = act(agent, obs, goal, jax.random.key(0), 0.0)
  mean = agent.skill_actor_net.apply(
    agent.params["skill_actor"], jnp.concatenate([obs, z], axis=-1)
  ).loc
  np.testing.assert_allclose(f64(greedy), np.clip(f64(mean), -1, 1), rtol=1e-5, atol=1e-6)
  noisy = act(agent, obs, goal, jax.random.key(1), 1.0)
  assert float(jnp.abs(noisy).max()) <= 1.0 and not np.allclose(noisy, greedy)
  single = act(agent, obs[0], goal[0], jax.random.key(0), 0.0)
  np.testing.assert_allclose(single, greedy[0], rtol=1e-5, atol=1e-6)


def test_update_polyaks_phi_and_critic_with_pre_step_parameters(setup):
  """The learner's step (a sampled batch, then `HILPAgent.update`), compiled once and run twice
  from a state whose targets are moved away from the online parameters."""
  _, learner, state, _, _ = setup
  agent = state.agent.replace(
    target_params=jax.tree.map(lambda x: x + 0.5, state.agent.target_params)
  )
  step = fast_jit(learner.step)
  a, metrics_a = step(state.replace(agent=agent))
  _, metrics_b = step(state.replace(agent=agent))
  new, metrics = a.agent, metrics_a
  online = {"phi": agent.params["phi"], "skill_critic": agent.params["skill_critic"]}
  expected = jax.tree.map(lambda p, t: 0.005 * p + 0.995 * t, online, agent.target_params)
  for got, want in zip(jax.tree.leaves(new.target_params), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-7)
  assert all(np.isfinite(float(v)) for v in metrics.values())
  assert {k: float(v) for k, v in metrics_a.items()} == {k: float(v) for k, v in metrics_b.items()}
  assert int(a.update) == 1


def test_experiment_config_file_loads_and_validates(random_walk_path, experiment_config):
  config = experiment_config("hilp_pointmaze")
  assert config.agent == "hilp" and config.env_name == "pointmaze-medium-navigate-v0"
  config.dataset_path = random_walk_path
  hilp.validate_config(config)
