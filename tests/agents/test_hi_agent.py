"""Tests of hrljax.agents.hi_agent and its rollout (hrljax.rollout.two_level): config checks, the
shortest-path table, branching from saved states, the two levels' batches, one update,
determinism, and what each level learns in 40 small updates (the evaluation runs in the
preset's smoke run, tests/experiments/preset_smoke.py). One tiny learner (the smoke sizes of the
preset), compiled once for the module."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.configs import hi_agent_fourrooms
from hrljax import envs
from hrljax.agents import hi_agent
from hrljax.rollout import two_level
from tests.experiments.preset_smoke import HI_AGENT
from tests.fast_compile import fast_jit


def tiny_config(**overrides):
  config = hi_agent_fourrooms.get_config()
  config.update({k: v for k, v in HI_AGENT.items()}, **overrides)
  return config


@pytest.fixture(scope="module")
def run():
  """The learner, its initial state, one compiled update and the update's rollout."""
  config = tiny_config()
  hi_agent.validate_config(config)
  learner = hi_agent.make_learner(config)
  state = learner.init(jax.random.key(0))
  step = jax.jit(learner.step)
  next_state, metrics = step(state)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  agent = state.agent
  env_map = np.asarray(env.env_map, bool)
  distance = jnp.asarray(hi_agent.shortest_path_steps(env_map))

  def rollout_and_batches(carry, key):
    _, rollout_ = two_level.two_level_rollout(
      env, env_params, agent.high_fn, agent.low_fn, agent.params, carry, key, 2, 2, 2, 2
    )
    return rollout_, hi_agent.make_batches(agent, rollout_, distance)

  rollout_, batches = jax.jit(rollout_and_batches)(state.carry, jax.random.key(3))
  return dict(
    config=config,
    learner=learner,
    state=state,
    step=step,
    next_state=next_state,
    metrics=metrics,
    rollout=rollout_,
    batches=batches,
    env_map=env_map,
  )


@pytest.mark.parametrize(
  "field, value",
  [
    ("execution_success", "nope"),
    ("env_name", "CartPole-v1"),
    ("num_minibatches", 3),
    ("lam", -1.0),
    ("num_subgoals", 0),
  ],
)
def test_a_bad_config_field_is_a_value_error_naming_it(field, value):
  with pytest.raises(ValueError, match=field):
    hi_agent.validate_config(tiny_config(**{field: value}))


def test_shortest_path_steps_on_a_small_map_and_on_four_rooms(run):
  walkable = np.array([[1, 1, 1], [0, 0, 1], [1, 1, 1]], bool)
  dist = hi_agent.shortest_path_steps(walkable)
  assert dist[0, 0, 2, 0] == 6 and dist[0, 0, 0, 2] == 2 and dist[2, 0, 2, 0] == 0
  assert dist[0, 0, 1, 0] == 9  # a wall: R * C
  rooms = hi_agent.shortest_path_steps(run["env_map"])
  open_cells = np.argwhere(run["env_map"])
  a, b = open_cells[0], open_cells[-1]  # top-left and bottom-right rooms: through two doors
  assert rooms[a[0], a[1], b[0], b[1]] == rooms[b[0], b[1], a[0], a[1]] == 20
  assert rooms[1, 5, 1, 7] == 6  # across the wall of column 6: down to its door and back up
  assert rooms[1, 1, 1, 2] == 1


def test_one_update_keeps_the_state_and_gives_finite_metrics(run):
  learner, state, next_state = run["learner"], run["state"], run["next_state"]
  assert learner.env_steps_per_update == 2 * 2 * 2 * 2 * 2  # every branch's steps count
  assert learner.num_updates == 4
  assert jax.tree.structure(next_state) == jax.tree.structure(state)
  assert int(next_state.update) == 1
  metrics = {k: float(v) for k, v in run["metrics"].items()}
  assert all(np.isfinite(v) for v in metrics.values()), metrics
  assert 0.0 <= metrics["execution_rate"] <= 1.0 and 0.0 <= metrics["subgoal_format_rate"] <= 1.0
  changed = jax.tree.map(
    lambda a, b: bool(jnp.any(a != b)), state.agent.params, next_state.agent.params
  )
  assert all(jax.tree.leaves(changed))  # both levels' parameters moved


def test_the_greedy_evaluation_gives_finite_scalars(run):
  """The learner's evaluation (the preset's smoke run traces it; this runs it)."""
  evaluation = jax.jit(run["learner"].evaluate)(run["next_state"], jax.random.key(1))
  assert evaluation and all(np.shape(v) == () for v in evaluation.values())
  assert all(np.isfinite(float(v)) for v in evaluation.values()), evaluation


def test_the_same_state_gives_the_same_update(run):
  again_state, again = run["step"](run["state"])
  for name, value in run["metrics"].items():
    np.testing.assert_array_equal(again[name], value, err_msg=name)
  jax.tree.map(
    np.testing.assert_array_equal, again_state.agent.params, run["next_state"].agent.params
  )


def test_branches_start_from_their_decision_state_and_the_main_trajectory_continues_one(run):
  rollout_ = run["rollout"]
  g = k = 2
  b = run["config"].num_groups
  start = np.asarray(rollout_.segments.obs[:, 0])  # [D, B * G * K, 4]
  decision = np.asarray(rollout_.decision_obs)  # [D, B * G, 4]
  for env_index in range(b):
    rows = slice(env_index * g * k, (env_index + 1) * g * k)
    assert (start[:, rows] == start[:, rows][:, :1]).all()  # every branch of env b: one state
    np.testing.assert_array_equal(decision[:, env_index * g], start[:, env_index * g * k])
  # subgoal cells lie in the radius-2 window of the decision state (clipped to the grid)
  offset = np.abs(np.asarray(rollout_.subgoals) - decision[..., :2])
  assert (offset <= 2).all()
  # the next decision state is the end of the branch the main trajectory continued from
  ends = np.asarray(jax.vmap(two_level.segment_ends)(rollout_.segments, rollout_.valid))
  done = np.asarray(rollout_.segments.done.any(axis=1))  # [D, B * G * K]
  continued = np.asarray(rollout_.continued)
  checked = 0
  for env_index in range(b):
    row = env_index * g * k + continued[0, env_index]
    if not done[0, row]:
      np.testing.assert_array_equal(decision[1, env_index * g], ends[0, row])
      checked += 1
  assert checked > 0


def test_the_batches_of_both_levels(run):
  rollout_ = run["rollout"]
  high, low, metrics = run["batches"]
  d, h, width = rollout_.valid.shape
  assert high.obs.shape == (d * width // 2, 4) and low.obs.shape == (d * h * width, 4)
  np.testing.assert_array_equal(low.mask, np.asarray(rollout_.valid).reshape(-1))
  # a segment's advantage on each of its steps
  advantage = np.asarray(low.advantage).reshape(d, h, width)
  assert (advantage == advantage[:, :1]).all()
  # the low level sees (agent cell, subgoal cell); the subgoal is the one of its branch
  subgoal = np.asarray(rollout_.segment_subgoals)
  np.testing.assert_array_equal(
    np.asarray(low.obs).reshape(d, h, width, 4)[..., 2:],
    np.broadcast_to(subgoal[:, None], (d, h, width, 2)),
  )
  # format reward: the subgoal cell is open
  cells = np.asarray(rollout_.subgoals).reshape(-1, 2)
  expected = run["env_map"][cells[:, 0], cells[:, 1]].mean()
  np.testing.assert_allclose(metrics["subgoal_format_rate"], expected, rtol=1e-6)
  # group z-scores: each decision state's subgoal advantages sum to zero
  sums = np.asarray(high.advantage).reshape(-1, 2).sum(-1)
  np.testing.assert_allclose(sums, 0.0, atol=1e-5)


@pytest.mark.learning
def test_both_levels_learn_what_they_are_rewarded_for():
  """40 updates of 8 tasks x 4 decisions x 4 subgoals x 2 segments of 4 steps (41k environment
  steps, the preset otherwise): the high level learns the format part of the foresight reward
  (open cells) and the low level learns to reach its subgoals. Measured on seeds 0-5, first 8
  updates / last 8: open subgoals 0.70-0.76 / 0.94-0.98, segments ending on their subgoal
  0.044-0.053 / 0.12-0.23; with a learning rate of 1e-9, 0.64 / 0.66 and 0.037 / 0.040. The
  task itself (the execution rate, the evaluation's success) does not move at this size: the
  study's curve needs about 0.5M environment steps to go from 0.18 to 0.35 success."""
  config = hi_agent_fourrooms.get_config()
  config.update(num_groups=8, num_decisions=4, num_segments=2, total_timesteps=40 * 1024)
  _, metrics = fast_jit(hi_agent.make_train(config))(jax.random.key(0))
  open_rate = np.asarray(metrics["subgoal_format_rate"])
  reached = np.asarray(metrics["subgoal_reached_rate"])
  assert open_rate.shape == reached.shape == (40,)
  assert open_rate[:8].mean() < 0.8 and open_rate[-8:].mean() > 0.9, open_rate
  assert reached[-8:].mean() > max(0.1, 2 * reached[:8].mean()), reached
