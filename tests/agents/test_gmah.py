"""Tests of hrljax.agents.gmah: config checks, the subgoal reward, the options' ends, the SMDP
target of the mixed high level against a hand computation, the independent ablation, a tiny
jitted run, and on the two-agent four rooms the subgoals, a Learner step and an evaluation (the
mixer and the SMDP target themselves: tests/losses/test_value_based.py; the presets:
tests/experiments)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs
from hrljax.agents import gmah
from hrljax.agents.value_common import mixer_state
from hrljax.config_checks import ConfigError
from hrljax.envs import two_agent_rooms
from hrljax.types import Transition
from hrljax.types import EnvCarry

ENV, ENV_PARAMS = envs.make("MPE_simple_spread_v3")
SPEC = envs.spec(ENV, ENV_PARAMS)
N, D = SPEC.observation_shape
L = gmah.num_subgoals(SPEC.observation_shape)
C = 3  # option length of the hand computations


def tiny_config(**overrides):
  config = gmah.get_config()
  config.update(
    num_envs=2,
    num_steps=3,
    total_timesteps=2 * 3 * 6,  # 6 Learner steps of 6 team steps
    learning_starts=12,
    batch_size=8,
    buffer_size=64,
    option_length=C,
    hidden_sizes=(16,),
    low_hidden_sizes=(16,),
    mixer_embed_dim=8,
    hypernet_hidden=8,
    target_update_interval=2,
    epsilon_decay_steps=12,
    eval_episodes=2,
    log_every=2,
    checkpoint_every=4,
  )
  config.update(overrides)
  return config


@functools.cache  # an agent is immutable: the tests share one per mixer
def make_agent(mixer: str):
  return gmah.GMAHAgent.create(jax.random.key(0), ENV, SPEC, tiny_config(mixer=mixer))


@jax.jit
def perturbed(params, seed: int):
  """`params` with every leaf moved by a random amount: a target network apart from the online."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(
    tree, [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
  )


def option_batch(size: int = 4) -> gmah.HighTransition:
  """Options of C steps, the second one's episode terminating at its second step."""
  keys = jax.random.split(jax.random.key(7), 3)
  terminated = np.zeros((size, C), bool)
  terminated[1, 1] = True
  mask = np.ones((size, C), bool)
  mask[1, 2] = False  # the option ended with its episode
  mask[2, 2] = False  # a time limit cut this one after two steps (bootstrapped)
  return gmah.HighTransition(
    obs=jax.random.normal(keys[0], (size, N, D)),
    goal=jax.random.randint(keys[1], (size, N), 0, L),
    rewards=jnp.asarray(np.arange(size * C, dtype=np.float32).reshape(size, C) / 10 - 1),
    discounts=jnp.asarray(0.95 * (1.0 - terminated), jnp.float32),
    mask=jnp.asarray(mask),
    next_obs=jax.random.normal(keys[2], (size, N, D)),
  )


def hand_smdp_targets(batch, bootstrap):
  """y = Σ_{i<k} γ^i r_i + γ^k·bootstrap, the sum stopped after a terminating step (no bootstrap)."""
  targets = []
  for rewards, discounts, mask, q in zip(
    *map(np.asarray, (batch.rewards, batch.discounts, batch.mask)), bootstrap
  ):
    y, scale = 0.0, 1.0
    for r, d, m in zip(rewards, discounts, mask):
      if not m:
        break
      y, scale = y + scale * r, scale * d
    targets.append(y + scale * q)
  return np.asarray(targets, np.float32)


high_targets = jax.jit(lambda agent, batch: agent.high_targets(batch))
high_values = jax.jit(lambda agent, params, obs: agent.high_values(params, obs))
high_loss = jax.jit(lambda agent, batch: agent.high_loss(agent.params, batch))


# ------------------------------------------------------------------------------------ the config
@pytest.mark.parametrize(
  "field, value, message",
  [
    ("mixer", "qtran", "config.mixer: expected one of"),
    ("option_length", 0, "config.option_length: expected an integer > 0"),
    ("low_gamma", 1.5, "config.low_gamma"),
    ("mixer_embed_dim", 0, "config.mixer_embed_dim: expected an integer > 0"),
    ("env_name", "CartPole-v1", "config.env_name: expected a multi-agent environment"),
  ],
)
def test_validate_config_names_the_bad_field(field, value, message):
  with pytest.raises(ConfigError, match=message):
    gmah.validate_config(tiny_config(**{field: value}))


def test_validate_config_accepts_the_defaults():
  gmah.validate_config(gmah.get_config())
  gmah.validate_config(tiny_config(mixer="none"))


# ---------------------------------------------------------------------------- subgoals, options
def test_the_subgoal_reward_is_minus_the_distance_to_the_chosen_landmark():
  obs, state = ENV.reset_env(jax.random.key(3), ENV_PARAMS)
  positions = np.asarray(state.inner.p_pos)  # agents, then landmarks
  offsets = positions[None, N:] - positions[:N, None]  # [N, L, 2]
  np.testing.assert_allclose(gmah.landmark_offsets(obs), offsets, rtol=1e-5, atol=1e-6)
  goal = jnp.array([2, 0, 2])
  expected = -np.linalg.norm(offsets[np.arange(N), np.asarray(goal)], axis=-1)
  np.testing.assert_allclose(gmah.subgoal_reward(obs, goal), expected, rtol=1e-5)
  features = gmah.goal_features(obs, goal)
  np.testing.assert_array_equal(features[:, :L], np.eye(L)[np.asarray(goal)])


def test_options_end_after_c_steps_or_at_the_episode_end():
  """Two environments, c = 3: the first runs full options; the second's episode ends (a time
  limit) at its second step, which ends its option there and starts a new one at the next step;
  its episode terminates at step 4, whose discount is then 0."""
  carry = gmah.init_options(env_carry(num_envs=2), C)
  ended_at, lengths = [], []
  for t in range(6):
    chosen = jnp.full((2, N), t, jnp.int32)
    carry = gmah.start_options(carry, chosen)
    step = fake_step(float(t + 1), truncated=[False, t == 1], terminated=[False, t == 4])
    carry, option, ended = gmah.advance_options(carry, carry.env, step, 0.9)
    ended_at.append(np.asarray(ended))
    lengths.append(np.asarray(option.mask).sum(-1))
    if t == 1:
      np.testing.assert_array_equal(option.rewards[1, :2], [1.0, 2.0])
      np.testing.assert_allclose(option.discounts[1, :2], [0.9, 0.9])
    if t == 4:
      np.testing.assert_allclose(option.discounts[1], [0.9, 0.9, 0.0])
    if t == 2:
      np.testing.assert_array_equal(option.goal[0], 0)  # chosen at step 0, kept for c steps
      np.testing.assert_array_equal(option.goal[1], 2)  # a new option from step 2
  np.testing.assert_array_equal(np.stack(ended_at)[:, 0], [0, 0, 1, 0, 0, 1])
  np.testing.assert_array_equal(np.stack(ended_at)[:, 1], [0, 1, 0, 0, 1, 0])
  np.testing.assert_array_equal(np.stack(lengths)[:, 0], [1, 2, 3, 1, 2, 3])
  np.testing.assert_array_equal(np.stack(lengths)[:, 1], [1, 2, 1, 2, 3, 1])


def env_carry(num_envs: int) -> EnvCarry:
  """The carry of `num_envs` environments; only its observations are read."""
  zeros = jnp.zeros((num_envs,))
  return EnvCarry(None, jnp.zeros((num_envs, N, D)), zeros, zeros.astype(jnp.int32))


def fake_step(reward: float, truncated: list, terminated: list) -> Transition:
  """An environment step of every environment with the given ends; only what options read."""
  num_envs = len(truncated)
  return Transition(
    obs=None,
    action=None,
    reward=jnp.full((num_envs,), reward),
    terminated=jnp.asarray(terminated),
    truncated=jnp.asarray(truncated),
    next_obs=jnp.zeros((num_envs, N, D)),
    policy_extras=None,
    episode_return=None,
    episode_length=None,
  )


# -------------------------------------------------------------------------------- the high level
@pytest.mark.parametrize("mixer", ["qmix", "none"])
def test_the_high_level_target_is_the_smdp_target_with_a_termination_inside_the_option(mixer):
  """y = Σ_{i<k} γ^i r_i + γ^k·Q̄, Q̄ the target mixer's Q_tot (or each agent's own value) at the
  subgoals the online network picks; the terminated option does not bootstrap."""
  agent = make_agent(mixer)
  agent = agent.replace(target_params=perturbed(agent.params, 5))
  batch = option_batch()
  online = high_values(agent, agent.params, batch.next_obs)
  target = np.asarray(high_values(agent, agent.target_params, batch.next_obs))
  greedy = np.argmax(online, -1)
  q_next = np.take_along_axis(target, greedy[..., None], -1)[..., 0]  # [B, N]
  if mixer == "none":
    expected = np.stack([hand_smdp_targets(batch, q_next[:, i]) for i in range(N)], -1)
  else:
    mixer_params = agent.target_params["high"]["mixer"]
    w1, b1, w2, b2 = jax.jit(agent.mixer.apply)(mixer_params, mixer_state(batch.next_obs))
    hidden = jax.nn.elu(np.einsum("bn,bnm->bm", q_next, np.abs(w1)) + b1)
    expected = hand_smdp_targets(batch, (hidden * np.abs(w2)).sum(-1) + b2)
  y = np.asarray(high_targets(agent, batch))
  np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
  r = np.asarray(batch.rewards)
  np.testing.assert_allclose(y[1], r[1, 0] + 0.95 * r[1, 1], rtol=1e-6)  # terminated: no Q̄


def test_without_a_mixer_every_agent_has_its_own_td_loss():
  """mixer="none": the loss is the mean over options and agents of ½(y_i − Q_i(o_i, g_i))², each
  y_i bootstrapping from agent i's own value only."""
  agent = make_agent("none")
  batch = option_batch()
  y = np.asarray(high_targets(agent, batch))  # [B, N]
  q = np.asarray(high_values(agent, agent.params, batch.obs))
  chosen = np.take_along_axis(q, np.asarray(batch.goal)[..., None], -1)[..., 0]
  value, _ = high_loss(agent, batch)
  np.testing.assert_allclose(value, np.mean(0.5 * (y - chosen) ** 2), rtol=1e-5)
  assert agent.params["high"]["mixer"] == {}


# --------------------------------------------------------------------------------- a tiny run
def test_a_tiny_run_is_one_program_with_finite_metrics():
  """6 Learner steps of 2 environments x 3 steps, c = 3: two options end per environment per
  step; learning starts at the second step, on both levels."""
  config = tiny_config(mixer="vdn")  # QMIX's mixer runs in the preset's smoke run
  state, metrics = jax.jit(gmah.make_train(config))(jax.random.key(0))
  for name in ("low_loss", "high_loss", "subgoal_reward", "subgoal_coverage"):
    assert metrics[name].shape == (6,) and np.isfinite(np.asarray(metrics[name])).all(), name
  assert float(metrics["low_loss"][0]) == 0.0 and (np.asarray(metrics["high_loss"])[1:] > 0).all()
  np.testing.assert_array_equal(metrics["options"], 2)
  assert int(state.agent.num_updates) == 5
  assert int(state.low_buffer.size) == 36 and int(state.high_buffer.size) == 12


# ------------------------------------------------------------------------- the two-agent rooms
ROOMS = "TwoAgentFourRooms-v0"


def test_in_four_rooms_the_subgoals_are_room_centres_and_hallways():
  """L = 8 subgoal cells; the low level's reward is minus the distance, in observation units
  (cells / 12), from the agent to its chosen cell."""
  env, params = envs.make(ROOMS)
  offsets = gmah.SUBGOAL_OFFSETS[ROOMS]
  assert gmah.num_subgoals(envs.spec(env, params).observation_shape, offsets) == 8
  state = two_agent_rooms.EnvState(
    pos=jnp.asarray([[1, 1], [7, 9]]), target=jnp.asarray([3, 2]), time=jnp.zeros((), jnp.int32)
  )
  obs = env.get_obs(state)
  goal = jnp.asarray([3, 6])  # the south-east centre (9, 9); the hallway (7, 9) itself
  np.testing.assert_allclose(
    gmah.subgoal_reward(obs, goal, offsets), [-np.hypot(8, 8) / 12, 0.0], rtol=1e-6, atol=1e-6
  )
  features = gmah.goal_features(obs, goal, offsets)
  np.testing.assert_allclose(features[0], np.r_[np.eye(8)[3], 8 / 12, 8 / 12], rtol=1e-6)


def test_a_learner_step_and_an_evaluation_in_four_rooms():
  """A Learner step of 2 environments x 3 steps (c = 3: both options end, and the first gradient
  step follows), then a greedy evaluation of 6-step episodes, in one program; without a mixer,
  the ablation (the preset's QMIX path is traced by its smoke test)."""
  config = tiny_config(env_name=ROOMS, mixer="none", learning_starts=6, eval_episodes=2)
  config.env_kwargs.max_steps_in_episode = 6
  gmah.validate_config(config)
  learner = gmah.make_learner(config)

  @jax.jit
  def program(key):
    state, metrics = learner.step(learner.init(key))
    return state, metrics, learner.evaluate(state, key)

  state, metrics, evaluation = program(jax.random.key(0))
  assert state.agent.high_network.num_actions == 8 and int(state.agent.num_updates) == 1
  assert int(state.low_buffer.size) == 6 and int(state.high_buffer.size) == 2
  for name in ("low_loss", "high_loss", "subgoal_reward"):
    assert np.isfinite(float(metrics[name])), name
  assert float(metrics["low_loss"]) > 0 and -1.5 < float(metrics["subgoal_reward"]) < 0
  assert set(evaluation) >= {"eval_return", "eval_success", "eval_length"}
  assert 0 <= float(evaluation["eval_success"]) <= 1 and 1 <= float(evaluation["eval_length"]) <= 6
  # without a step cost, an episode's return is 1 exactly when it succeeded
  assert float(evaluation["eval_return"]) == float(evaluation["eval_success"])
