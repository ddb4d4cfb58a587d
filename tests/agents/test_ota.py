"""Tests of hrljax.agents.ota on tiny synthetic datasets (no ogbench needed)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hrljax.agents import ota

from hrljax import agents, config_checks, offline
from hrljax.data import goal_sampler
from tests.fast_compile import fast_jit

GROUPS = ota.GROUPS
N_OPTION = 5


def tiny_config(path):
  config = ota.get_config()
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
  config = tiny_config(random_walk_path)
  learner = ota.make_learner(config)
  state = fast_jit(learner.init)(jax.random.key(0))
  data, _ = offline.load_datasets(config)
  sampler = goal_sampler.SamplerConfig.from_config(config)
  batch = fast_jit(ota.sample_ota_batch, static_argnums=(2, 3, 4))(
    jax.random.key(1), data, 32, sampler, N_OPTION
  )
  return config, learner, state, batch


def test_defaults_are_hiql_plus_abstraction_factor():
  config = ota.get_config()
  assert config.agent == "ota" and "ota" in agents.AGENTS and agents.get("ota") is ota
  assert (config.expectile, config.low_alpha, config.high_alpha) == (0.7, 3.0, 3.0)
  assert (config.subgoal_steps, config.rep_dim, config.abstraction_factor) == (25, 10, 5)
  assert config.high_gamma is None and ota.high_gamma(config) == 0.99
  config.gamma = 0.995  # giant mazes: the high discount follows, it is not 0.995**5
  assert ota.high_gamma(config) == 0.995
  config.high_gamma = 0.9
  assert ota.high_gamma(config) == 0.9 and config.gamma == 0.995


def test_validate_config_names_the_bad_field(random_walk_path):
  config = tiny_config(random_walk_path)
  ota.validate_config(config)
  for field, value in (("abstraction_factor", 0), ("high_gamma", 1.5), ("subgoal_steps", 0)):
    bad = config.copy_and_resolve_references()
    bad[field] = value
    with pytest.raises(config_checks.ConfigError, match=f"config.{field}"):
      ota.validate_config(bad)


def test_sampled_option_ends_stay_in_the_trajectory(indexed_walk_path):
  """Observations are (raw row, episode): the option end o, the goal g and the reward/mask of
  every sampled row follow OTA's rule o = min(i + n, goal or traj_end), never leave the episode,
  and a "current" goal is the option end."""
  config = tiny_config(indexed_walk_path)
  data, _ = offline.load_datasets(config)
  sampler = goal_sampler.SamplerConfig.from_config(config)
  batch = fast_jit(ota.sample_ota_batch, static_argnums=(2, 3, 4))(
    jax.random.key(7), data, 2048, sampler, N_OPTION
  )
  steps = 39  # transitions per episode (40 raw rows)
  to_idx = lambda x: (np.asarray(x)[:, 0] - np.asarray(x)[:, 1]).astype(int)  # raw row -> index
  i, o = to_idx(batch["observations"]), to_idx(batch["high_value_option_observations"])
  g = to_idx(batch["high_value_goals"])
  episode = np.asarray(batch["observations"])[:, 1].astype(int)
  traj_end = (episode + 1) * steps - 1
  assert np.all(o >= i) and np.all(o <= np.minimum(i + N_OPTION, traj_end))
  assert np.all(np.asarray(batch["high_value_option_observations"])[:, 1] == episode)
  reached = (o == g).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(batch["high_value_rewards"]), reached - 1.0)
  np.testing.assert_array_equal(np.asarray(batch["high_value_masks"]), 1.0 - reached)
  # a trajectory goal ends the option at min(i + n, g), a random one at min(i + n, traj_end)
  assert np.all((o == np.minimum(i + N_OPTION, g)) | (o == np.minimum(i + N_OPTION, traj_end)))
  # the mixture: 0.2 current (o == g by construction) + trajectory goals reached within n
  # (about 0.8·0.625·0.17); random goals (0.8·0.375) mostly lie outside the trajectory
  assert 0.2 < reached.mean() < 0.4
  same_traj = (g >= i) & (g <= traj_end)
  assert 0.2 < np.mean(~same_traj) < 0.35


def test_high_value_loss_matches_a_numpy_recomputation(setup):
  """One discount per option (γ, not γ^n), reward −1 per option, each head on its own target."""
  _, _, state, batch = setup
  agent = state.agent

  @fast_jit
  def quantities(agent, batch):
    p, obs, goals = agent.params, batch["observations"], batch["high_value_goals"]
    losses, _ = agent.loss_terms(p, batch)
    return losses, dict(
      v=agent.value(p, obs, goals, level="high"),
      vt=agent.value(p, obs, goals, heads=agent.high_target_params),
      nvt=agent.value(
        p, batch["high_value_option_observations"], goals, heads=agent.high_target_params
      ),
    )

  losses, q = quantities(agent, batch)
  q = {k: np.asarray(v, np.float64) for k, v in q.items()}
  r = np.asarray(batch["high_value_rewards"], np.float64)
  m = np.asarray(batch["high_value_masks"], np.float64)
  adv = r + 0.99 * m * q["nvt"].min(1) - q["vt"].mean(1)
  w = np.where(adv >= 0, 0.7, 0.3)
  y = r[:, None] + 0.99 * m[:, None] * q["nvt"]
  np.testing.assert_allclose(
    float(losses["high_value"]), np.sum(np.mean(w[:, None] * (y - q["v"]) ** 2, 0)), rtol=1e-5
  )
  y_smdp = r[:, None] + 0.99**N_OPTION * m[:, None] * q["nvt"]
  assert not np.isclose(
    float(losses["high_value"]), np.sum(np.mean(w[:, None] * (y_smdp - q["v"]) ** 2, 0)), rtol=1e-4
  )


def test_gradient_routing(setup):
  _, _, state, batch = setup
  agent = state.agent
  jac = fast_jit(jax.jacrev(lambda p: agent.loss_terms(p, batch)[0]))(agent.params)
  groups = {
    term: {
      g for g in GROUPS if any(float(jnp.abs(x).max()) > 0 for x in jax.tree.leaves(jac[term][g]))
    }
    for term in jac
  }
  assert groups["value"] == {"value", "goal_rep"}
  assert groups["high_value"] == {"high_value", "goal_rep"}  # φ is shared by both values
  assert groups["low_actor"] == {"low_actor"}
  assert groups["high_actor"] == {"high_actor"}


def test_high_actor_advantage_uses_the_option_aware_value(setup):
  _, _, state, batch = setup
  agent = state.agent
  terms = fast_jit(lambda agent: agent.loss_terms(agent.params, batch)[0])
  base = terms(agent)
  shift = lambda tree: jax.tree.map(lambda x: x * 1.5 + 0.1, tree)
  high = terms(
    agent.replace(params={**agent.params, "high_value": shift(agent.params["high_value"])})
  )
  low = terms(agent.replace(params={**agent.params, "value": shift(agent.params["value"])}))
  assert float(high["high_actor"]) != pytest.approx(float(base["high_actor"]), rel=1e-4)
  assert float(high["low_actor"]) == pytest.approx(float(base["low_actor"]), rel=1e-6)
  assert float(low["high_actor"]) == pytest.approx(float(base["high_actor"]), rel=1e-6)
  assert float(low["low_actor"]) != pytest.approx(float(base["low_actor"]), rel=1e-4)


@pytest.fixture(scope="module")
def stepped(setup):
  """The learner's step (a sampled batch, then `OTAAgent.update`), compiled once and run twice
  from the same state, whose target heads are moved away from the online ones (so the order of
  the Polyak average matters)."""
  _, learner, state, _ = setup
  agent = state.agent.replace(
    target_params=jax.tree.map(lambda x: x - 0.5, state.agent.target_params),
    high_target_params=jax.tree.map(lambda x: x + 0.5, state.agent.high_target_params),
  )
  state = state.replace(agent=agent)
  step = fast_jit(learner.step)
  a, metrics_a = step(state)
  _, metrics_b = step(state)
  return agent, a, metrics_a, metrics_b


def test_polyak_averages_both_value_heads_with_pre_step_parameters(stepped):
  agent, a, metrics, _ = stepped
  new = a.agent
  for online, old, got in (
    ("value", agent.target_params, new.target_params),
    ("high_value", agent.high_target_params, new.high_target_params),
  ):
    expected = jax.tree.map(lambda p, t: 0.005 * p + 0.995 * t, agent.params[online], old)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-7)
  assert all(np.isfinite(float(v)) for v in metrics.values())
  assert float(metrics["loss"]) == pytest.approx(
    sum(float(metrics[f"{k}_loss"]) for k in ("value", "high_value", "low_actor", "high_actor")),
    rel=1e-5,
  )


def test_learner_step_is_deterministic_and_acts_like_hiql(stepped):
  _, a, metrics_a, metrics_b = stepped
  assert int(a.update) == 1
  assert {k: float(v) for k, v in metrics_a.items()} == {k: float(v) for k, v in metrics_b.items()}
  obs = jnp.ones((3, 2))
  act = fast_jit(type(a.agent).act)
  greedy = act(a.agent, obs, obs + 2.0, jax.random.key(0), 0.0)
  np.testing.assert_array_equal(greedy, act(a.agent, obs, obs + 2.0, jax.random.key(5), 0.0))
  assert (
    greedy.shape == (3, 2)
    and float(jnp.abs(act(a.agent, obs, obs, jax.random.key(0), 1.0)).max()) <= 1.0
  )


def test_experiment_config_file_loads_and_validates(random_walk_path, experiment_config):
  config = experiment_config("ota_pointmaze")
  assert config.agent == "ota" and config.env_name == "pointmaze-medium-navigate-v0"
  config.dataset_path = random_walk_path
  ota.validate_config(config)
