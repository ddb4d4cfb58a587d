"""The MiniGrid adapter (`hrljax.envs.minigrid`, xminigrid behind gymnax's API).

One compiled program serves most tests: two DoorKey-5x5 environments reset and stepped under
`jit` and `vmap` through gymnax's auto-resetting `step`, one following a scripted solution of
the layout of seed 1, the other turning in place until the time limit.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs
from hrljax.envs import minigrid

NAME = "MiniGrid-DoorKey-5x5"
FORWARD, RIGHT, LEFT, PICK_UP, PUT_DOWN, TOGGLE = range(6)
# The layout of seed 1 (row, column; wall in column 2): agent at (2, 1) facing right, key at
# (1, 1), locked door at (1, 2), goal at (3, 3).
SEED_1_LAYOUT = {"agent": (2, 1), "direction": 1, "key": (1, 1), "door": (1, 2), "goal": (3, 3)}
# Face up, pick the key, step up, face the door, open it, walk through, turn down, reach the goal.
SOLUTION = (LEFT, PICK_UP, FORWARD, RIGHT, TOGGLE, FORWARD, FORWARD, RIGHT, FORWARD, FORWARD)
TIME_LIMIT = 12  # the scripted episode ends (terminated) before it, the turning one at it
KEY_TILE, LOCKED_DOOR_TILE, GOAL_TILE = 7, 8, 6  # xminigrid.core.constants.Tiles


@pytest.fixture(scope="module")
def episodes():
  """Both environments' reset and `TIME_LIMIT` steps: `(initial obs, initial states, outputs)`."""
  pytest.importorskip("xminigrid")
  env, params = envs.make(NAME, max_steps_in_episode=TIME_LIMIT)
  script = jnp.asarray(SOLUTION + (RIGHT,) * (TIME_LIMIT - len(SOLUTION)), jnp.int32)
  actions = jnp.stack([script, jnp.full((TIME_LIMIT,), RIGHT, jnp.int32)], axis=1)  # [T, 2]

  @jax.jit
  def run(seeds):
    keys = jax.vmap(jax.random.key)(seeds)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)

    def one_step(state, inputs):
      action, t = inputs
      step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, t)
      obs, state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        step_keys, state, action, params
      )
      return state, (obs, reward, terminated, truncated, info["final_observation"], state.time)

    _, outputs = jax.lax.scan(one_step, state, (actions, jnp.arange(TIME_LIMIT)))
    return obs, state, outputs

  return (env, params) + run(jnp.asarray([1, 0]))


def test_registered_names_and_spec():
  assert set(minigrid.TASKS) <= set(envs.available())
  pytest.importorskip("xminigrid")
  for name in minigrid.TASKS:
    spec = envs.spec(*envs.make(name))
    assert spec.discrete and spec.action_dim == 6 and spec.observation_shape == (7 * 7 * 25 + 29,)
  env, params = envs.make(NAME, observation="symbolic", view_size=5)
  assert envs.spec(env, params).observation_shape == (5 * 5 * 2 + 4 + 2,)
  assert envs.make("MiniGrid-DoorKey-8x8")[1].max_steps_in_episode == 640  # 10 * 8 * 8


def test_observation_shape_dtype_and_layout(episodes):
  env, params, obs, state, (step_obs, *_rest) = episodes
  size = env.observation_space(params).shape[0]
  assert obs.shape == (2, size) and step_obs.shape == (TIME_LIMIT, 2, size)
  assert obs.dtype == step_obs.dtype == jnp.float32
  cells = np.asarray(obs[:, : 7 * 7 * 25]).reshape(2, 7, 7, 25)
  np.testing.assert_array_equal(cells.sum(-1), 2.0)  # one tile and one colour per cell
  direction = np.asarray(obs[:, 7 * 7 * 25 : 7 * 7 * 25 + 4])
  np.testing.assert_array_equal(direction.argmax(-1), np.asarray(state.inner.agent.direction))
  grid = np.asarray(state.inner.grid[0, ..., 0])  # seed 1, the scripted layout
  assert tuple(np.asarray(state.inner.agent.position[0])) == SEED_1_LAYOUT["agent"]
  assert int(state.inner.agent.direction[0]) == SEED_1_LAYOUT["direction"]
  assert grid[SEED_1_LAYOUT["key"]] == KEY_TILE
  assert grid[SEED_1_LAYOUT["door"]] == LOCKED_DOOR_TILE
  assert grid[SEED_1_LAYOUT["goal"]] == GOAL_TILE


def test_scripted_solution_terminates(episodes):
  _, _, _, _, (_, reward, terminated, truncated, _, time) = episodes
  last = len(SOLUTION) - 1
  np.testing.assert_array_equal(terminated[:, 0], np.arange(TIME_LIMIT) == last)
  assert not truncated[:, 0].any()  # the goal came before the limit; then turns only
  expected = np.zeros(TIME_LIMIT, np.float32)
  expected[last] = 1.0 - 0.9 * len(SOLUTION) / TIME_LIMIT  # MiniGrid's reward
  np.testing.assert_allclose(reward[:, 0], expected, rtol=1e-6)
  assert int(time[last, 0]) == 0  # auto-reset: a new episode starts at time 0


def test_time_limit_truncates_not_terminates(episodes):
  _, _, obs, _, (_, reward, terminated, truncated, final_obs, time) = episodes
  np.testing.assert_array_equal(truncated[:, 1], np.arange(TIME_LIMIT) == TIME_LIMIT - 1)
  assert not terminated[:, 1].any() and not reward[:, 1].any()
  np.testing.assert_array_equal(time[:-1, 1], np.arange(1, TIME_LIMIT))
  assert int(time[-1, 1]) == 0
  # Twelve turns in place come back to the first view: the final observation of the truncated
  # step (the one a truncation bootstraps from) is the ended episode's, not the reset's.
  np.testing.assert_array_equal(final_obs[TIME_LIMIT - 1, 1], obs[1])


def test_missing_package_is_one_line(monkeypatch):
  monkeypatch.setitem(sys.modules, "xminigrid", None)  # import xminigrid raises ImportError
  with pytest.raises(minigrid.MissingPackage) as error:
    envs.make(NAME)
  message = str(error.value)
  assert (
    message == f"{NAME} needs xminigrid, which is not installed: pip install 'hrljax[gridworld]'"
  )
  assert isinstance(error.value, ValueError)  # experiments.train reports it as one line


def test_bad_arguments():
  pytest.importorskip("xminigrid")
  with pytest.raises(ValueError, match="observation: expected one of"):
    envs.make(NAME, observation="pixels")
  with pytest.raises(ValueError, match="has no parameter 'max_steps'"):
    envs.make(NAME, max_steps=10)
  with pytest.raises(ValueError, match="view_size must be odd"):
    envs.make(NAME, view_size=4)


def test_step_matches_xminigrid():
  """The specialised step against xminigrid's own `Environment.step` (one environment, no vmap:
  vmapped, xminigrid's switches over rule and goal types compile to selects of every branch),
  from the layout of seed 1: the scripted solution, then random actions, without resets."""
  pytest.importorskip("xminigrid")
  from xminigrid.types import StepType, TimeStep

  env, params = envs.make(NAME)
  inner_params = env.inner_params(params)
  random_actions = np.random.default_rng(0).integers(0, 6, 14)
  actions = jnp.asarray(np.concatenate([SOLUTION, random_actions]), jnp.int32)

  @jax.jit
  def both(key):
    _, state = env.reset_env(key, params)

    def one_step(state, action):
      timestep = TimeStep(
        state=state.inner,
        step_type=StepType.MID,
        reward=jnp.zeros(()),
        discount=jnp.ones(()),
        observation=None,
      )
      theirs = env.inner_env.step(inner_params, timestep, action)
      _, state, reward, terminated, _ = env.step_env(key, state, action, params)
      return state, (state.inner, reward, terminated, theirs)

    return jax.lax.scan(one_step, state, actions)[1]

  ours, reward, terminated, theirs = both(jax.random.key(1))
  for field in ("grid", "agent", "step_num"):
    jax.tree.map(np.testing.assert_array_equal, getattr(ours, field), getattr(theirs.state, field))
  np.testing.assert_allclose(reward, theirs.reward, rtol=1e-6)
  np.testing.assert_array_equal(terminated, theirs.discount == 0.0)
  assert terminated[len(SOLUTION) - 1]  # the comparison includes the goal
