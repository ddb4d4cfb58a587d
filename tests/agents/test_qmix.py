"""Tests of hrljax.agents.qmix (VDN and QMIX): config checks, VDN's sum, QMIX's monotonicity, the
double-Q target on Q_tot against a hand computation, the TD loss, and a tiny jitted run (the mixer
and loss themselves: tests/losses/test_value_based.py; the preset: tests/experiments)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import qmix
from hrljax.config_checks import ConfigError
from hrljax.losses import value_based

ENV_NAME = "MPE_simple_spread_v3"
ENV, ENV_PARAMS = envs.make(ENV_NAME)
SPEC = envs.spec(ENV, ENV_PARAMS)
N, D = SPEC.observation_shape
A = SPEC.action_dim


def tiny_config(**overrides):
  config = qmix.get_config()
  config.num_envs = 2
  config.num_steps = 2
  config.total_timesteps = 2 * 2 * 8  # 8 Learner steps of 4 team transitions
  config.learning_starts = 8
  config.batch_size = 8
  config.buffer_size = 64
  config.hidden_sizes = (16,)
  config.mixer_embed_dim = 8
  config.hypernet_hidden = 8
  config.target_update_interval = 2
  config.epsilon_decay_steps = 16
  config.eval_episodes = 2
  config.log_every = 2
  config.checkpoint_every = 4
  config.update(overrides)
  return config


def make_agent(mixer: str, seed: int = 0, **overrides):
  return qmix.QMixAgent.create(
    jax.random.key(seed), ENV, SPEC, tiny_config(mixer=mixer, **overrides)
  )


def make_batch(size: int = 6, terminated=False) -> qmix.Transition:
  keys = jax.random.split(jax.random.key(11), 3)
  return qmix.Transition(
    obs=jax.random.normal(keys[0], (size, N, D)),
    action=jax.random.randint(keys[1], (size, N), 0, A),
    reward=jnp.linspace(-2.0, 1.0, size),
    terminated=jnp.broadcast_to(jnp.asarray(terminated), (size,)),
    next_obs=jax.random.normal(keys[2], (size, N, D)),
  )


# The agent's methods, jitted once per mixer (the agent is a pytree; its modules are static).
targets = jax.jit(lambda agent, batch: agent.targets(batch))
loss = jax.jit(lambda agent, batch: agent.loss(agent.params, batch))
update = jax.jit(lambda agent, batch: agent.update(batch))


def perturbed(params, seed: int):
  """`params` with every leaf moved by a random amount: a target network apart from the online."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  moved = [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
  return jax.tree.unflatten(tree, moved)


# ------------------------------------------------------------------------------------ the config
@pytest.mark.parametrize(
  "field, value, message",
  [
    ("mixer", "qtran", "config.mixer: expected one of"),
    ("mixer_embed_dim", 0, "config.mixer_embed_dim: expected an integer > 0"),
    ("hypernet_hidden", -1, "config.hypernet_hidden: expected an integer >= 0"),
    ("tau", 0.0, r"config.tau: expected a number in \(0, 1\]"),
    ("env_name", "CartPole-v1", "config.env_name: expected a multi-agent environment"),
  ],
)
def test_validate_config_names_the_bad_field(field, value, message):
  with pytest.raises(ConfigError, match=message):
    qmix.validate_config(tiny_config(**{field: value}))


def test_validate_config_accepts_the_defaults():
  qmix.validate_config(qmix.get_config())
  qmix.validate_config(tiny_config(mixer="vdn"))


# ---------------------------------------------------------------------------- the mixed values
def test_agent_ids_are_appended_one_hot():
  obs = jnp.zeros((2, N, D))
  with_ids = qmix.with_agent_ids(obs)
  assert with_ids.shape == (2, N, D + N)
  np.testing.assert_array_equal(with_ids[1, :, D:], np.eye(N))


def test_vdn_q_tot_is_the_sum_of_the_agents_values():
  agent = make_agent("vdn")
  q = jax.random.normal(jax.random.key(1), (5, N))
  state = jax.random.normal(jax.random.key(2), (5, N * D))
  np.testing.assert_allclose(agent.mix(agent.params, q, state), q.sum(-1), rtol=1e-6)
  assert agent.params["mixer"] == {}


def test_qmix_q_tot_is_monotonic_in_every_agents_value():
  """dQ_tot/dQ_a >= 0 for random hypernetwork parameters, states and agent values; and Q_tot is
  `monotonic_mix` of the hypernetwork's outputs."""
  agent = make_agent("qmix")

  @jax.jit
  def check(params, q, state):
    grads = jax.vmap(jax.grad(lambda q, s: agent.mix(params, q, s)))(q, state)
    outputs = agent.mixer.apply(params["mixer"], state)
    return grads, agent.mix(params, q, state), value_based.monotonic_mix(q, *outputs)

  for seed in range(3):
    params = perturbed(make_agent("qmix", seed=seed).params, seed + 100)  # far from the init too
    keys = jax.random.split(jax.random.key(seed), 2)
    q = 3.0 * jax.random.normal(keys[0], (16, N))
    state = jax.random.normal(keys[1], (16, N * D))
    grads, q_tot, mixed = check(params, q, state)
    assert grads.shape == (16, N)
    assert (grads >= 0).all(), grads.min()
    assert (grads > 0).any()
    np.testing.assert_allclose(q_tot, mixed, rtol=1e-6)


# -------------------------------------------------------------------------- targets and the loss
@pytest.mark.parametrize("mixer", ["vdn", "qmix"])
@pytest.mark.parametrize("double_q", [True, False])
def test_the_target_is_the_team_reward_plus_the_target_q_tot_at_the_greedy_joint_action(
  mixer, double_q
):
  """y = r + γ·Q̄_tot(s', ā'), ā'_i the argmax of the online agent network (double Q) or of the
  target one, evaluated by the target agent network and mixed by the target mixer."""
  agent = make_agent(mixer, double_q=double_q)
  agent = agent.replace(target_params=perturbed(agent.params, 5))
  batch = make_batch()
  online = agent.network.apply(agent.params["agent"], qmix.with_agent_ids(batch.next_obs))
  target = agent.network.apply(agent.target_params["agent"], qmix.with_agent_ids(batch.next_obs))
  assert not np.array_equal(np.argmax(online, -1), np.argmax(target, -1))  # the choice matters
  greedy = np.argmax(online if double_q else target, -1)  # [B, N]
  q_next = np.take_along_axis(np.asarray(target), greedy[..., None], -1)[..., 0]
  next_state = np.asarray(batch.next_obs).reshape(len(q_next), -1)
  if mixer == "vdn":
    q_tot_next = q_next.sum(-1)
  else:
    w1, b1, w2, b2 = agent.mixer.apply(agent.target_params["mixer"], next_state)
    hidden = jax.nn.elu(np.einsum("bn,bnm->bm", q_next, np.abs(w1)) + b1)
    q_tot_next = (hidden * np.abs(w2)).sum(-1) + b2
  expected = np.asarray(batch.reward) + agent.config.gamma * q_tot_next
  np.testing.assert_allclose(targets(agent, batch), expected, rtol=1e-5, atol=1e-5)
  # a terminated transition does not bootstrap
  ended = batch._replace(terminated=jnp.ones_like(batch.terminated))
  np.testing.assert_allclose(targets(agent, ended), batch.reward, rtol=1e-6)


@pytest.mark.parametrize("mixer", ["vdn", "qmix"])
def test_the_loss_is_half_the_mean_squared_td_error_on_q_tot(mixer):
  agent = make_agent(mixer)
  batch = make_batch()
  q = agent.agent_values(agent.params, batch.obs)
  chosen = jnp.take_along_axis(q, batch.action[..., None], -1)[..., 0]
  q_tot = agent.mix(agent.params, chosen, qmix.mixer_state(batch.obs))
  td = targets(agent, batch) - q_tot
  value, metrics = loss(agent, batch)
  np.testing.assert_allclose(value, 0.5 * jnp.mean(td**2), rtol=1e-5)
  np.testing.assert_allclose(metrics["q_tot"], q_tot.mean(), rtol=1e-5)


def test_an_update_moves_the_agent_and_mixer_and_copies_the_target_on_schedule():
  agent = make_agent("qmix")  # target_update_interval = 2
  batch = make_batch()
  once, metrics = update(agent, batch)
  assert float(metrics["target_updates"]) == 0.0
  for part in ("agent", "mixer"):
    before, after = jax.tree.leaves(agent.params[part]), jax.tree.leaves(once.params[part])
    assert any(not np.array_equal(b, a) for b, a in zip(before, after)), part
  assert jax.tree.all(jax.tree.map(np.array_equal, once.target_params, agent.params))
  twice, metrics = update(once, batch)
  assert float(metrics["target_updates"]) == 1.0
  assert jax.tree.all(jax.tree.map(np.array_equal, twice.target_params, twice.params))


# --------------------------------------------------------------------------------- a tiny run
def test_a_tiny_vdn_run_is_one_program_with_finite_metrics():
  config = tiny_config(mixer="vdn")
  state, metrics = jax.jit(qmix.make_train(config))(jax.random.key(0))
  assert metrics["loss"].shape == (8,)
  assert np.isfinite(np.asarray(metrics["loss"])).all()
  np.testing.assert_array_equal(np.asarray(metrics["loss"])[:1], 0.0)  # before learning_starts
  assert (np.asarray(metrics["loss"])[1:] > 0).all()
  assert int(state.agent.num_updates) == 7 and int(state.buffer.size) == 32
  assert np.asarray(metrics["epsilon"])[0] == 1.0 and np.asarray(metrics["epsilon"])[-1] < 1.0


def test_a_tiny_qmix_run_on_the_two_agent_four_rooms_has_finite_metrics_and_its_shapes():
  # the four-rooms task (hrljax.envs.two_agent_rooms) is multi-agent through the same spec as MPE:
  # observations [2, 12], 5 moves per agent, the global state the flattened observations
  config = tiny_config(
    mixer="qmix", env_name="TwoAgentFourRooms-v0", env_kwargs={"task": "random_split"}
  )
  learner = qmix.make_learner(config)
  state, metrics = jax.jit(qmix.make_train(config))(jax.random.key(0))
  loss = np.asarray(metrics["loss"])
  assert loss.shape == (8,) and np.isfinite(loss).all()
  np.testing.assert_array_equal(loss[:1], 0.0)  # before learning_starts
  assert (loss[1:] > 0).all()
  assert state.buffer.storage.obs.shape == (64, 2, 12) and state.buffer.storage.action.shape == (
    64,
    2,
  )
  assert state.env.obs.shape == (2, 2, 12) and int(state.buffer.size) == 32
  mixer = state.agent.params["mixer"]
  assert jax.tree.leaves(mixer) and all(np.isfinite(x).all() for x in jax.tree.leaves(mixer))
  evaluation = jax.jit(learner.evaluate)(state, jax.random.key(1))
  assert all(np.isfinite(np.asarray(v)).all() and np.ndim(v) == 0 for v in evaluation.values())
