"""Tests of hrljax.agents.hiql on a synthetic random-walk dataset (no ogbench needed)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hrljax.agents import hiql
from hrljax.losses import goal_conditioned as gc

from hrljax import config_checks, offline
from hrljax.data import goal_sampler
from tests.fast_compile import fast_jit

GROUPS = ("goal_rep", "value", "low_actor", "high_actor")


def tiny_config(path):
  config = hiql.get_config()
  config.dataset_path = path
  config.batch_size = 32
  config.num_updates = 4
  config.value_hidden_sizes = (8,)  # one small layer: smaller programs compile faster
  config.actor_hidden_sizes = (8,)
  config.subgoal_steps = 5
  config.log_every = 2
  config.checkpoint_every = 2
  return config


@pytest.fixture(scope="module")
def setup(random_walk_path):
  path = random_walk_path
  config = tiny_config(path)
  learner = hiql.make_learner(config)
  state = fast_jit(learner.init)(jax.random.key(0))
  data, _ = offline.load_datasets(config)
  sampler = goal_sampler.SamplerConfig.from_config(config)
  batch = goal_sampler.sample_hgc_batch(jax.random.key(1), data, 32, sampler)
  return config, learner, state, batch


def test_defaults_are_ogbench_settings():
  config = hiql.get_config()
  assert (config.expectile, config.low_alpha, config.high_alpha) == (0.7, 3.0, 3.0)
  assert (config.subgoal_steps, config.rep_dim, config.low_actor_rep_grad) == (25, 10, False)
  assert (config.learning_rate, config.batch_size, config.gamma, config.tau) == (
    3e-4,
    1024,
    0.99,
    0.005,
  )
  assert "alpha" not in config
  bad = config.copy_and_resolve_references()
  bad.subgoal_steps = 0
  with pytest.raises(config_checks.ConfigError, match="config.subgoal_steps"):
    hiql.validate_config(bad)


def test_subgoal_representation_has_length_sqrt_rep_dim(setup):
  _, _, state, batch = setup
  agent = state.agent
  rep = fast_jit(type(agent).goal_rep)(
    agent, agent.params, batch["observations"], batch["value_goals"]
  )
  assert rep.shape == (32, 10)
  np.testing.assert_allclose(np.linalg.norm(np.asarray(rep), axis=1), math.sqrt(10), rtol=1e-5)


def test_target_network_has_no_goal_rep_copy(setup):
  agent = setup[2].agent
  assert jax.tree.structure(agent.target_params) == jax.tree.structure(agent.params["value"])
  assert set(agent.params) == set(GROUPS)


def _gradient_groups(agent, batch):
  """{loss term: the parameter groups its gradient reaches}, from one compiled Jacobian."""
  jac = fast_jit(jax.jacrev(lambda p: agent.loss_terms(p, batch)[0]))(agent.params)
  return {
    term: {
      g for g in GROUPS if any(float(jnp.abs(x).max()) > 0 for x in jax.tree.leaves(jac[term][g]))
    }
    for term in jac
  }


@pytest.mark.parametrize("rep_grad", [False, True])
def test_gradient_routing(setup, rep_grad):
  config, _, state, batch = setup
  agent = state.agent
  if rep_grad:
    frozen = dict(config.copy_and_resolve_references())
    frozen["low_actor_rep_grad"] = True
    agent = agent.replace(config=type(agent.config)(frozen))
  groups = _gradient_groups(agent, batch)
  assert groups["value"] == {"value", "goal_rep"}
  assert groups["low_actor"] == ({"low_actor", "goal_rep"} if rep_grad else {"low_actor"})
  assert groups["high_actor"] == {"high_actor"}


def test_losses_match_a_numpy_recomputation(setup):
  _, _, state, batch = setup
  agent = state.agent

  @fast_jit
  def quantities(agent, batch):
    p, obs = agent.params, batch["observations"]
    losses, _ = agent.loss_terms(p, batch)
    return losses, dict(
      v=agent.value(p, obs, batch["value_goals"]),
      vt=agent.value(p, obs, batch["value_goals"], agent.target_params),
      nvt=agent.value(p, batch["next_observations"], batch["value_goals"], agent.target_params),
      rep=agent.goal_rep(p, obs, batch["high_actor_targets"]),
      high_mean=agent.nets.high_actor.apply(
        p["high_actor"], jnp.concatenate([obs, batch["high_actor_goals"]], axis=-1)
      ).loc,
      vg=agent.value(p, obs, batch["high_actor_goals"]),
      vsub=agent.value(p, batch["high_actor_targets"], batch["high_actor_goals"]),
    )

  losses, q = quantities(agent, batch)
  q = {k: np.asarray(v, np.float64) for k, v in q.items()}
  r, m = np.asarray(batch["rewards"], np.float64), np.asarray(batch["masks"], np.float64)
  adv = r + 0.99 * m * q["nvt"].min(1) - q["vt"].mean(1)
  w = np.where(adv >= 0, 0.7, 0.3)
  y = r[:, None] + 0.99 * m[:, None] * q["nvt"]
  np.testing.assert_allclose(
    float(losses["value"]), np.sum(np.mean(w[:, None] * (y - q["v"]) ** 2, 0)), rtol=1e-5
  )
  # high actor: log-prob of the target latent under a unit-std Gaussian, AWR-weighted
  log_prob = -0.5 * np.sum((q["rep"] - q["high_mean"]) ** 2, 1) - 5 * np.log(2 * np.pi)
  weight = np.minimum(np.exp(3.0 * (q["vsub"].mean(1) - q["vg"].mean(1))), 100.0)
  np.testing.assert_allclose(float(losses["high_actor"]), -np.mean(weight * log_prob), rtol=1e-5)


def test_shared_actor_losses_take_the_high_value_as_an_argument(setup):
  # OTA reuses the actor inputs and losses with its V^h: with a value that is the same
  # everywhere (all-zero heads) the high advantage is 0, every AWR weight exp(0) = 1 and the loss
  # is the plain NLL of the target latent; the low actor does not depend on the high value
  _, _, state, batch = setup
  agent = state.agent
  flat = {**agent.params, "flat": jax.tree.map(jnp.zeros_like, agent.params["value"])}

  @fast_jit
  def run(agent, batch):
    _, shared = gc.hiql_actor_losses(*agent.nets.actor_inputs(flat, "flat", batch), 3.0, 3.0)
    _, own = gc.hiql_actor_losses(*agent.nets.actor_inputs(flat, "value", batch), 3.0, 3.0)
    terms, _ = agent.loss_terms(agent.params, batch)
    obs = batch["observations"]
    rep = agent.goal_rep(agent.params, obs, batch["high_actor_targets"])
    mean = agent.nets.high_actor.apply(
      agent.params["high_actor"], jnp.concatenate([obs, batch["high_actor_goals"]], axis=-1)
    ).loc
    return shared, own, terms, rep, mean

  shared, own, terms, rep, mean = run(agent, batch)
  metrics = shared.summary()
  log_prob = -0.5 * np.sum((np.asarray(rep, np.float64) - np.asarray(mean)) ** 2, 1) - 5 * np.log(
    2 * np.pi
  )
  np.testing.assert_allclose(float(shared.high_actor_loss), -np.mean(log_prob), rtol=1e-5)
  assert float(metrics["high_awr_weight"]) == 1.0 and float(metrics["high_advantage"]) == 0.0
  assert float(shared.low_actor_loss) == float(own.low_actor_loss)
  # the inputs with HIQL's own value heads are the agent's actor losses
  np.testing.assert_allclose(float(own.high_actor_loss), float(terms["high_actor"]), rtol=1e-6)
  np.testing.assert_allclose(float(own.low_actor_loss), float(terms["low_actor"]), rtol=1e-6)


def test_polyak_averages_only_the_value_heads_with_pre_step_parameters(setup):
  _, _, state, batch = setup
  agent = state.agent.replace(
    target_params=jax.tree.map(lambda x: x - 0.5, state.agent.target_params)
  )
  new, metrics = fast_jit(type(agent).update)(agent, batch)
  expected = jax.tree.map(
    lambda p, t: 0.005 * p + 0.995 * t, agent.params["value"], agent.target_params
  )
  for got, want in zip(jax.tree.leaves(new.target_params), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-7)
  assert all(np.isfinite(float(v)) for v in metrics.values())


def test_act_is_bounded_and_greedy_at_temperature_zero(setup):
  agent = setup[2].agent
  act = fast_jit(type(agent).act)
  obs = jnp.ones((3, 2))
  greedy = act(agent, obs, obs + 2.0, jax.random.key(0), 0.0)
  np.testing.assert_array_equal(greedy, act(agent, obs, obs + 2.0, jax.random.key(5), 0.0))
  noisy = act(agent, obs, obs + 2.0, jax.random.key(0), 1.0)
  assert noisy.shape == (3, 2) and float(jnp.abs(noisy).max()) <= 1.0
  single = act(agent, obs[0], obs[0] + 2.0, jax.random.key(0), 0.0)
  np.testing.assert_allclose(single, greedy[0], rtol=1e-5, atol=1e-6)
