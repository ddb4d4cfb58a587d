"""Tests of hrljax.agents.smore on a synthetic random-walk dataset (no ogbench needed): the
authors' defaults, config errors, the two halves of a batch, the order of the three steps of an
update (value, actor on the new M, score on the new M(s'), Polyak on the post-step score) and a
run of the learner."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import config_checks, offline
from hrljax.agents import smore
from hrljax.data import goal_sampler
from hrljax.losses import goal_conditioned as gc
from tests.fast_compile import fast_jit


def tiny_config(path, **overrides):
  config = smore.get_config()
  config.dataset_path = path
  config.batch_size = 16
  config.num_updates = 2
  config.score_hidden_sizes = (8,)  # one small layer: smaller programs compile faster
  config.value_hidden_sizes = (8,)
  config.actor_hidden_sizes = (8,)
  config.log_every = 1
  config.checkpoint_every = 2
  config.update(overrides)
  return config


@pytest.fixture(scope="module")
def setup(random_walk_path):
  config = tiny_config(random_walk_path)
  learner = smore.make_learner(config)
  state = fast_jit(learner.init)(jax.random.key(0))
  data, _ = offline.load_datasets(config)
  sampler = goal_sampler.SamplerConfig.from_config(config)
  batch = smore.sample_smore_batch(jax.random.key(1), data, 16, sampler)
  return config, learner, state, data, batch


def test_defaults_are_the_authors():
  config = smore.get_config()
  assert (config.expectile, config.temperature, config.tau, config.gamma) == (0.8, 3.0, 0.005, 0.99)
  assert (config.variant, config.step_reward, config.regularizer) == ("stable", -2.0, 1e-4)
  assert tuple(config.score_hidden_sizes) == (256, 256, 256) and config.layer_norm
  assert config.learning_rate == 3e-4


@pytest.mark.parametrize(
  "field, value",
  [("variant", "dual"), ("expectile", 1.0), ("temperature", -1.0), ("tau", 1.5)],
)
def test_config_errors_name_the_field(setup, field, value):
  bad = setup[0].copy_and_resolve_references()
  bad[field] = value
  with pytest.raises(config_checks.ConfigError, match=f"config.{field}"):
    smore.validate_config(bad)


def test_goal_transitions_are_dataset_transitions_whose_goal_is_their_next_state(setup):
  _, _, _, data, batch = setup
  observations, next_observations = (
    np.asarray(data.observations),
    np.asarray(data.next_observations),
  )
  for obs, goal in zip(np.asarray(batch["goal_observations"]), np.asarray(batch["goal_goals"])):
    rows = np.flatnonzero((observations == obs).all(1) & (next_observations == goal).all(1))
    assert rows.size > 0
  assert batch["goal_actions"].shape == batch["actions"].shape
  # The data half is OGBench's GCIVL batch of the same key.
  gcivl_batch = goal_sampler.sample_gc_batch(
    jax.random.split(jax.random.key(1))[0],
    data,
    16,
    goal_sampler.SamplerConfig.from_config(setup[0]),
  )
  np.testing.assert_array_equal(batch["value_goals"], gcivl_batch["value_goals"])


def test_update_takes_value_then_actor_then_score_steps_and_polyaks_the_new_score(setup):
  """The update against the same steps taken by hand in the documented order; the score step
  with the pre-step M(s') differs (so the order is what is tested)."""
  config, _, _, data, batch = setup
  # SGD: Adam's first step is ±lr whatever the gradient's size, which would hide the order.
  config = config.copy_and_resolve_references()
  config.update(optimizer="sgd", learning_rate=0.1)
  dims = (data.observations.shape[-1], data.actions.shape[-1])
  agent = smore.SMOReAgent.create(jax.random.key(0), *dims, config)
  agent = agent.replace(target_params=jax.tree.map(lambda x: x + 0.5, agent.target_params))

  def sgd_step(params, grads):
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

  @fast_jit
  def by_hand(agent, batch):
    obs, goals, actions = batch["observations"], batch["value_goals"], batch["actions"]
    s_tgt = agent.score(agent.target_params, obs, goals, actions)
    value = sgd_step(
      agent.params["value"],
      jax.grad(lambda p: gc.smore_value_loss(s_tgt, agent.value(p, obs, goals), 0.8))(
        agent.params["value"]
      ),
    )
    m = agent.value(value, obs, goals)

    def actor_loss(p):
      log_prob = agent.actor_net.apply(p, jnp.concatenate([obs, goals], -1)).log_prob(actions)
      return gc.smore_actor_loss(log_prob, s_tgt, m, 3.0)[0]

    actor = sgd_step(agent.params["actor"], jax.grad(actor_loss)(agent.params["actor"]))

    def score_step(m_next):
      def loss(p):
        s_goal = agent.score(
          p, batch["goal_observations"], batch["goal_goals"], batch["goal_actions"]
        )
        return gc.smore_score_loss(agent.score(p, obs, goals, actions), s_goal, m_next, 0.99)[0]

      return sgd_step(agent.params["score"], jax.grad(loss)(agent.params["score"]))

    score = score_step(agent.value(value, batch["next_observations"], goals))
    stale = score_step(agent.value(agent.params["value"], batch["next_observations"], goals))
    return value, actor, score, stale

  value, actor, score, stale = by_hand(agent, batch)
  new, metrics = fast_jit(type(agent).update)(agent, batch)
  assert all(np.isfinite(float(x)) for x in metrics.values())
  for got, want in ((new.params["value"], value), (new.params["actor"], actor)):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree.leaves(new.params["score"]), jax.tree.leaves(score), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert any(not np.allclose(a, b) for a, b in zip(jax.tree.leaves(score), jax.tree.leaves(stale)))
  expected_target = jax.tree.map(
    lambda p, t: 0.005 * p + 0.995 * t, new.params["score"], agent.target_params
  )
  for a, b in zip(jax.tree.leaves(new.target_params), jax.tree.leaves(expected_target)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_learner_steps_are_deterministic_act_in_bounds_and_evaluate(setup):
  _, learner, state, _, _ = setup
  step = fast_jit(learner.step)
  a, metrics_a = step(state)
  _, metrics_b = step(state)
  for key in metrics_a:
    assert np.isfinite(float(metrics_a[key])) and float(metrics_a[key]) == float(metrics_b[key])
  obs = jnp.zeros((5, 2)) + 1.0
  action = fast_jit(type(a.agent).act)(a.agent, obs, obs + 1.0, jax.random.key(0), 1.0)
  assert action.shape == (5, 2) and float(jnp.abs(action).max()) <= 1.0
  evaluation = fast_jit(learner.evaluate)(a, jax.random.key(3))
  assert np.isfinite(float(evaluation["eval_score_loss"]))
  assert set(a.agent.opt_state) == set(smore.NETWORKS)
