"""Snapshot resets (`hrljax.envs.snapshot_reset`): the schedule, teacher starts, the plain
environment at p = 0, the validation of states and options, and a tiny PPO run from its config."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import snapshot_states
from hrljax import envs, rollout
from hrljax.config_checks import ConfigError
from hrljax.envs import four_rooms
from hrljax.envs import snapshot_reset as sr

ENV = four_rooms.ENV_NAME
TEACHER_GOAL = (1, 1)  # teacher states carry this goal: an observed mark of a snapshot start
MAX_STEPS = 2  # time limit of the rollout tests: many resets in a few steps


def _teacher_states(env, params, count=3, goal=TEACHER_GOAL):
  """`count` states of the environment's own resets, moved to `goal`, mid-episode (time 7)."""
  keys = jax.random.split(jax.random.key(7), count)
  _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
  return states.replace(
    goal=jnp.tile(jnp.asarray(goal, jnp.int32), (count, 1)),
    time=jnp.full((count,), 7, jnp.int32),
  )


def _make(tmp_path, observation="coordinates", **options):
  env, params = envs.make(ENV, observation=observation, max_steps_in_episode=MAX_STEPS)
  path = str(tmp_path / "teacher.npz")
  sr.save_states(path, _teacher_states(env, params), ENV, {"observation": observation})
  options = {"path": path, "start_probability": 1.0, "anneal_steps": 10, **options}
  kwargs = {"observation": observation, "max_steps_in_episode": MAX_STEPS}
  return envs.make(ENV, snapshot_reset=options, **kwargs)


def _uniform_policy(params, obs, key):
  return jax.random.randint(key, obs.shape[:1], 0, 4), None


def _rollout(env, params, num_envs=4, num_steps=12):
  carry = rollout.reset(env, params, jax.random.key(0), num_envs)
  run = jax.jit(
    lambda c: rollout.rollout(env, params, _uniform_policy, None, c, jax.random.key(1), num_steps)
  )
  return run(carry)


def test_probability_schedules():
  t = jnp.asarray([0, 50, 100, 200])
  np.testing.assert_allclose(sr.snapshot_probability(t, 0.8, 100), [0.8, 0.4, 0.0, 0.0])
  np.testing.assert_allclose(sr.snapshot_probability(t, 0.8, 100, "step"), [0.8, 0.8, 0.0, 0.0])
  np.testing.assert_allclose(sr.snapshot_probability(t, 0.8, 100, "constant"), [0.8] * 4)
  np.testing.assert_allclose(sr.snapshot_probability(t, 0.0, 100), [0.0] * 4)


def test_p_zero_is_the_plain_environment(tmp_path):
  wrapped, params = _make(tmp_path, start_probability=0.0)
  plain_env, plain_params = envs.make(
    ENV, observation="coordinates", max_steps_in_episode=MAX_STEPS
  )
  (_, got), (_, want) = _rollout(wrapped, params), _rollout(plain_env, plain_params)
  assert bool(want.done.any())  # episodes ended, so resets were compared
  for name in ("obs", "next_obs", "reward", "terminated", "truncated"):
    np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_p_one_starts_every_episode_after_a_reset_from_a_teacher_state_until_anneal_steps(tmp_path):
  """p(t) = 1 for t < 8, then 0 ("step"): resets after 2, 4, 6 steps start from teacher states,
  later ones from the environment's own reset; the fresh reset is always the environment's."""
  env, params = _make(tmp_path, schedule="step", anneal_steps=8)
  carry, traj = _rollout(env, params)
  done = np.asarray(traj.done[:-1])
  starts = np.asarray(traj.obs[1:])  # [t]: the observation after step t (a new episode's first)
  from_teacher = (starts[..., 2:] == TEACHER_GOAL).all(-1)
  steps_taken = np.broadcast_to(np.arange(1, done.shape[0] + 1)[:, None], done.shape)
  assert done[steps_taken < 8].any() and done[steps_taken >= 8].any()
  np.testing.assert_array_equal(from_teacher[done], steps_taken[done] < 8)
  teacher_cells = {tuple(c) for c in np.asarray(_teacher_states(env.env, params).pos).tolist()}
  cells = starts[..., :2].astype(int)[done & from_teacher]
  assert {tuple(c) for c in cells.tolist()} <= teacher_cells
  own_goal = np.tile(four_rooms.EAST_DOORWAY, (4, 1))
  np.testing.assert_array_equal(np.asarray(traj.obs[0, :, 2:]), own_goal)
  # truncation counts a snapshot episode's own steps (the teacher states are at time 7)
  lengths = np.asarray(traj.episode_length)[np.asarray(traj.truncated)]
  assert len(lengths) > 0 and (lengths == MAX_STEPS).all()
  assert not (np.asarray(traj.terminated) & np.asarray(traj.truncated)).any()
  np.testing.assert_array_equal(np.asarray(carry.env_state.total_steps), [12] * 4)


def test_states_validation_names_the_leaf_and_what_was_expected():
  env, params = envs.make(ENV)
  states = _teacher_states(env, params)
  assert sr.validate_states(states, env, params) == 3
  cases = {
    "leaf 'pos' expected shape (K, 2)": states.replace(pos=states.pos[:, :1]),
    "leaf 'goal' expected dtype int32, got float32": states.replace(goal=states.goal * 1.0),
    "leaf 'time' expected 3 snapshots": states.replace(time=states.time[:2]),
    "expected at least one snapshot": jax.tree.map(lambda x: x[:0], states),
    "missing ['total_steps']": {"pos": states.pos, "goal": states.goal, "time": states.time},
  }
  for message, bad in cases.items():
    with pytest.raises(
      ConfigError,
      match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
      sr.validate_states(bad, env, params)


def test_load_and_option_errors_name_the_entry(tmp_path):
  env, params = envs.make(ENV)
  path = str(tmp_path / "teacher.npz")
  sr.save_states(path, _teacher_states(env, params), "FourRooms-misc")
  with pytest.raises(
    ConfigError,
    match="snapshot_reset.path: expected states of 'FourRoomsTransfer-v0', got states of 'FourRooms-misc'",
  ):
    sr.load_states(path, env, params, ENV)
  with pytest.raises(
    ConfigError, match=r"snapshot_reset.path: .*got 'missing.npz' \(no such file\)"
  ):
    envs.make(
      ENV, snapshot_reset={"path": "missing.npz", "start_probability": 0.5, "anneal_steps": 1}
    )
  good = {"path": path, "start_probability": 0.5, "anneal_steps": 10}
  cases = {
    "start_probability: expected a number in \\[0, 1\\], got 1.5": {"start_probability": 1.5},
    "start_probability: expected a number in \\[0, 1\\], got True": {"start_probability": True},
    "anneal_steps: expected an integer > 0": {"anneal_steps": 0},
    "schedule: expected one of \\('linear', 'step', 'constant'\\), got 'cosine'": {
      "schedule": "cosine"
    },
    "probability: expected no such entry": {"probability": 0.5},
    "path: expected the .npz of teacher states": {"path": ""},
  }
  for message, change in cases.items():
    with pytest.raises(ConfigError, match="env_kwargs.snapshot_reset." + message):
      sr.parse_options({**good, **change})
  with pytest.raises(ConfigError, match="anneal_steps: expected an entry"):
    sr.parse_options({"path": path, "start_probability": 0.5})
  with pytest.raises(ConfigError, match="snapshot_reset: expected a mapping"):
    sr.parse_options(0.5)


def test_collector_arguments_are_checked(tmp_path):
  with pytest.raises(ValueError, match="--run: expected a run directory, got 'nowhere'"):
    snapshot_states.check_arguments("nowhere", "out.npz", 1, 1)
  with pytest.raises(ValueError, match="--out: expected a path ending in .npz"):
    snapshot_states.check_arguments(str(tmp_path), str(tmp_path / "out.txt"), 1, 1)
  with pytest.raises(ValueError, match="--num_steps: expected an integer >= 1, got 0"):
    snapshot_states.check_arguments(str(tmp_path), str(tmp_path / "out.npz"), 1, 0)


def test_tiny_ppo_run_with_snapshot_resets_from_its_config(tmp_path, monkeypatch):
  """PPO on four rooms with teacher resets from `config.env_kwargs.snapshot_reset` (the driver's
  validation, then its learner for two updates); its agent then serves as the teacher of
  `experiments.snapshot_states`, whose states load back into the environment."""
  from hrljax.agents import ppo

  from experiments import train as train_cli
  from hrljax import load

  env, params = envs.make(ENV)
  teacher = str(tmp_path / "teacher.npz")
  sr.save_states(teacher, _teacher_states(env, params, goal=four_rooms.EAST_DOORWAY), ENV)
  config = ppo.get_config()
  config.env_name = ENV
  config.env_kwargs.observation = "one_hot"
  config.env_kwargs.max_steps_in_episode = 8
  config.env_kwargs.snapshot_reset = {"path": teacher, "start_probability": 1.0, "anneal_steps": 32}
  config.update(
    num_envs=2,
    num_steps=16,
    total_timesteps=64,
    update_epochs=1,
    num_minibatches=1,
    hidden_sizes=(8,),
    eval_episodes=2,
  )
  train_cli.prepare(config)
  learner = ppo.make_learner(config)
  state = jax.jit(learner.init)(jax.random.key(0))
  assert isinstance(state.env.env_state, sr.SnapshotState)
  step = jax.jit(learner.step)
  for _ in range(2):
    state, metrics = step(state)
    assert np.isfinite(float(metrics["loss"])), metrics
  np.testing.assert_array_equal(np.asarray(state.env.env_state.total_steps), [32, 32])

  # what `load.load_run` gives: the run's config and its state
  teacher_run = types.SimpleNamespace(config=config, seed_state=lambda seed=None: state)
  monkeypatch.setattr(load, "load_run", lambda workdir, step=None: teacher_run)
  out = str(tmp_path / "collected.npz")
  assert snapshot_states.collect(str(tmp_path), out, num_envs=2, num_steps=4, seed=0) == 8
  assert sr.validate_states(sr.load_states(out, env, params, ENV), env, params) == 8


@pytest.mark.parametrize(
  ("preset", "anneal"), [("ppo_fourrooms", 100_000), ("sac_pendulum", 10_000)]
)
def test_a_presets_argument_turns_snapshot_resets_on(preset, anneal):
  """`--config=experiments/configs/<preset>.py:TEACHER.npz`: `snapshot_reset.configure` with p0
  0.5, linear, `anneal_steps` the environment-step anneal over the environments (and following
  `num_envs` and `snapshot_anneal` when they change, as on the command line)."""
  import importlib

  module = importlib.import_module(f"experiments.configs.{preset}")
  assert sr.OPTION not in module.get_config().env_kwargs
  config = module.get_config("teacher.npz")
  options = sr.parse_options(config.env_kwargs.snapshot_reset)
  assert options == {
    "path": "teacher.npz",
    "start_probability": 0.5,
    "schedule": "linear",
    "anneal_steps": anneal // config.num_envs,
  }
  config.num_envs, config.snapshot_anneal = 4, 1_000
  assert config.env_kwargs.snapshot_reset.anneal_steps == 250
