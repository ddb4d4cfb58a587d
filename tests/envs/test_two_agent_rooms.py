"""The two-agent four rooms (`hrljax.envs.two_agent_rooms`): the layout derived from the map, the
moves, the team reward and the episode ends on hand-built states, the subgoal offsets against a
hand computation, a jitted and vmapped rollout, the factory's errors, the split task (both
start in one room, the team rewarded once they stand in two different rooms of the goal set), the
random split task (the start room and the goal set drawn per episode) and the observation without
the other agent's position."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs, rollout
from hrljax.envs import two_agent_rooms as rooms

NAME = "TwoAgentFourRooms-v0"
UP, RIGHT, DOWN, LEFT, STAY = range(5)
ENV, PARAMS = envs.make(NAME)
step_env = jax.jit(ENV.step_env)
step = jax.jit(ENV.step)


def state(pos, target=(3, 2), time=0) -> rooms.EnvState:
  return rooms.EnvState(
    pos=jnp.asarray(pos, jnp.int32),
    target=jnp.asarray(target, jnp.int32),
    time=jnp.asarray(time, jnp.int32),
  )


def test_registered_spec_and_agent_axis():
  assert NAME in envs.available()
  spec = envs.spec(ENV, PARAMS)
  assert (spec.observation_shape, spec.discrete, spec.action_dim) == ((2, 12), True, 5)
  assert ENV.num_agents == 2 and ENV.num_actions == 5 and ENV.name == NAME
  assert PARAMS.max_steps_in_episode == 100 and PARAMS.step_cost == 0.0
  np.testing.assert_array_equal(PARAMS.start_rooms, [0, 1])
  np.testing.assert_array_equal(PARAMS.target_rooms, [3, 2])  # diagonally opposite
  _, params = envs.make(NAME, max_steps_in_episode=7, start_rooms=(2, 3), step_cost=0.5)
  assert params.max_steps_in_episode == 7 and params.step_cost == 0.5
  np.testing.assert_array_equal(params.target_rooms, [1, 0])


def test_rooms_and_hallways_of_the_four_rooms_map():
  np.testing.assert_array_equal(rooms.ROOM_SIZES, [25, 30, 25, 20])
  np.testing.assert_array_equal(rooms.HALLWAYS, [[3, 6], [6, 2], [7, 9], [10, 6]])
  np.testing.assert_array_equal(rooms.ROOM_CENTRES, [[3, 3], [3, 9], [9, 3], [9, 9]])
  cells = jnp.asarray([[1, 1], [5, 5], [1, 7], [6, 11], [7, 1], [11, 5], [8, 7], [11, 11]])
  np.testing.assert_array_equal(rooms.room_of(cells), [0, 0, 1, 1, 2, 2, 3, 3])
  np.testing.assert_array_equal(rooms.room_of(jnp.asarray(rooms.HALLWAYS)), -1)
  assert int(rooms.room_of(jnp.asarray([0, 0]))) == -1  # a wall


def test_reset_shapes_dtypes_start_rooms_and_determinism():
  reset = jax.jit(jax.vmap(ENV.reset, in_axes=(0, None)))
  keys = jax.random.split(jax.random.key(0), 64)
  obs, states = reset(keys, PARAMS)
  assert obs.shape == (64, 2, 12) and obs.dtype == jnp.float32
  assert states.pos.dtype == jnp.int32 and states.time.dtype == jnp.int32
  np.testing.assert_array_equal(rooms.room_of(states.pos[:, 0]), 0)
  np.testing.assert_array_equal(rooms.room_of(states.pos[:, 1]), 1)
  assert len({tuple(p) for p in np.asarray(states.pos[:, 0])}) > 10  # random cells of the room
  again, _ = reset(keys, PARAMS)
  np.testing.assert_array_equal(obs, again)  # the same keys, the same episodes
  # agent 0's row: its position / 12, the other's, its target's one-hot, the other's
  pos = np.asarray(states.pos[0], np.float32) / 12
  expected = np.concatenate([pos[0], pos[1], np.eye(4)[3], np.eye(4)[2]])
  np.testing.assert_allclose(obs[0, 0], expected, rtol=1e-6)
  np.testing.assert_allclose(obs[0, 1, :4], np.concatenate([pos[1], pos[0]]), rtol=1e-6)


def test_walls_block_moves_hallways_let_through_and_agents_may_share_a_cell():
  key = jax.random.key(0)
  cases = [  # (start of agent 0, action, end)
    ((1, 1), UP, (1, 1)),  # the outer wall
    ((1, 1), LEFT, (1, 1)),
    ((1, 5), RIGHT, (1, 5)),  # the wall between the north rooms
    ((3, 5), RIGHT, (3, 6)),  # into the hallway
    ((3, 6), UP, (3, 6)),  # a hallway's side walls
    ((3, 6), RIGHT, (3, 7)),
    ((5, 2), DOWN, (6, 2)),
    ((5, 1), DOWN, (5, 1)),
    ((4, 4), STAY, (4, 4)),
    ((4, 4), 9, (4, 4)),  # out of range: clipped to stay
  ]
  for start, action, end in cases:
    _, new, *_ = step_env(key, state([start, (2, 2)]), jnp.asarray([action, DOWN]), PARAMS)
    np.testing.assert_array_equal(new.pos[0], end, err_msg=f"{start} {action}")
    np.testing.assert_array_equal(new.pos[1], (3, 2))
  _, new, *_ = step_env(key, state([(2, 2), (3, 2)]), jnp.asarray([DOWN, STAY]), PARAMS)
  np.testing.assert_array_equal(new.pos, [[3, 2], [3, 2]])  # no collisions


def test_team_reward_and_termination_exactly_when_both_are_in_their_rooms():
  key = jax.random.key(0)
  # agent 0 steps from the hallway (7, 9) into the south-east room; agent 1 waits in the south-west
  both = state([(7, 9), (9, 3)])
  _, new, reward, terminated, _ = step_env(key, both, jnp.asarray([DOWN, STAY]), PARAMS)
  assert float(reward) == 1.0 and bool(terminated) and reward.dtype == jnp.float32
  np.testing.assert_array_equal(new.pos[0], (8, 9))
  # one agent in its room is not enough; a hallway belongs to no room
  for pos, action in (([(7, 9), (9, 3)], UP), ([(8, 9), (9, 3)], UP), ([(9, 9), (9, 3)], RIGHT)):
    _, _, reward, terminated, _ = step_env(key, state(pos), jnp.asarray([action, UP]), PARAMS)
    expected = 1.0 if pos[0] == (9, 9) else 0.0
    assert (float(reward), bool(terminated)) == (expected, expected == 1.0), pos
  _, _, reward, terminated, _ = step_env(
    key, state([(9, 9), (9, 3)]), jnp.asarray([STAY, RIGHT]), PARAMS
  )
  assert float(reward) == 1.0 and bool(terminated)
  # swapped targets: the same cells are no success
  _, _, reward, terminated, _ = step_env(
    key, state([(9, 9), (9, 3)], target=(2, 3)), jnp.asarray([STAY, STAY]), PARAMS
  )
  assert float(reward) == 0.0 and not bool(terminated)
  costly = PARAMS.replace(step_cost=0.1)
  _, _, reward, _, _ = step_env(key, both, jnp.asarray([DOWN, STAY]), costly)
  np.testing.assert_allclose(reward, 0.9, rtol=1e-6)
  _, _, reward, _, _ = step_env(key, both, jnp.asarray([UP, STAY]), costly)
  np.testing.assert_allclose(reward, -0.1, rtol=1e-6)
  # through gymnax's step: the episode ends (terminated, not truncated) and restarts
  _, new, reward, terminated, truncated, info = step(key, both, jnp.asarray([DOWN, STAY]), PARAMS)
  assert bool(terminated) and not bool(truncated) and int(new.time) == 0
  np.testing.assert_allclose(info["final_observation"][0, :2], np.asarray([8, 9]) / 12, rtol=1e-6)
  np.testing.assert_array_equal(rooms.room_of(new.pos), [0, 1])


def test_truncation_at_the_time_limit():
  _, params = envs.make(NAME, max_steps_in_episode=3)
  current = state([(2, 2), (2, 8)])
  ends = []
  for t in range(3):
    _, current, reward, terminated, truncated, _ = step(
      jax.random.key(t), current, jnp.asarray([STAY, STAY]), params
    )
    ends.append((bool(terminated), bool(truncated), float(reward)))
  assert ends == [(False, False, 0.0), (False, False, 0.0), (False, True, 0.0)]
  assert int(current.time) == 0  # reset after the truncation


def test_subgoal_offsets_against_a_hand_computation():
  cells = [(3, 3), (3, 9), (9, 3), (9, 9), (3, 6), (6, 2), (7, 9), (10, 6)]
  np.testing.assert_array_equal(rooms.SUBGOAL_CELLS, cells)
  obs = ENV.get_obs(state([(1, 1), (10, 11)]))
  offsets = rooms.subgoal_offsets(obs)
  assert offsets.shape == (2, 8, 2) and offsets.dtype == jnp.float32
  np.testing.assert_allclose(offsets[0, 0], [2 / 12, 2 / 12], rtol=1e-6)  # (3, 3) − (1, 1)
  np.testing.assert_allclose(offsets[1, 7], [0.0, -5 / 12], atol=1e-7)  # (10, 6) − (10, 11)
  hand = (np.asarray(cells)[None] - np.asarray([[1, 1], [10, 11]])[:, None]) / 12
  np.testing.assert_allclose(offsets, hand, rtol=1e-6, atol=1e-7)
  batched = rooms.subgoal_offsets(jnp.stack([obs, obs, obs])[None])  # [1, 3, N, d]
  assert batched.shape == (1, 3, 2, 8, 2)
  np.testing.assert_allclose(batched[0, 2], hand, rtol=1e-6, atol=1e-7)


def test_a_jitted_vmapped_rollout_stays_on_free_cells():
  def random_policy(params, obs, key):
    return jax.random.randint(key, obs.shape[:-1], 0, 5), None

  @jax.jit
  def program(key):
    reset_key, run_key = jax.random.split(key)
    carry = rollout.reset(ENV, PARAMS, reset_key, 4)
    return rollout.rollout(ENV, PARAMS, random_policy, None, carry, run_key, 120)

  carry, traj = program(jax.random.key(1))
  assert traj.obs.shape == (120, 4, 2, 12) and traj.action.shape == (120, 4, 2)
  assert traj.reward.shape == (120, 4) and traj.reward.dtype == jnp.float32
  assert traj.terminated.dtype == jnp.bool_ and traj.truncated.dtype == jnp.bool_
  cells = np.rint(np.asarray(traj.next_obs[..., :2]) * 12).astype(int)
  assert rooms.FREE[cells[..., 0], cells[..., 1]].all()
  np.testing.assert_array_equal(traj.truncated, np.asarray(traj.episode_length) == 100)
  np.testing.assert_array_equal(np.asarray(traj.reward) > 0, traj.terminated)
  again, _ = program(jax.random.key(1))
  np.testing.assert_array_equal(carry.obs, again.obs)


@pytest.mark.parametrize(
  "kwargs, message",
  [
    ({"max_steps": 5}, r"env_kwargs: TwoAgentFourRooms-v0 has no parameter 'max_steps'"),
    ({"max_steps_in_episode": 0}, r"max_steps_in_episode: expected an integer > 0, got 0"),
    ({"max_steps_in_episode": 2.5}, r"max_steps_in_episode: expected an integer > 0, got 2.5"),
    ({"max_steps_in_episode": True}, r"max_steps_in_episode: expected an integer > 0"),
    ({"step_cost": -0.1}, r"step_cost: expected a number in \[0, 1\), got -0.1"),
    ({"step_cost": 1.0}, r"step_cost: expected a number in \[0, 1\), got 1.0"),
    ({"step_cost": float("nan")}, r"step_cost: expected a number in \[0, 1\), got nan"),
    ({"step_cost": "a"}, r"step_cost: expected a number in \[0, 1\), got 'a'"),
    ({"start_rooms": (0,)}, r"start_rooms: expected 2 room indices in \[0, 4\)"),
    ({"start_rooms": (0, 4)}, r"start_rooms: expected 2 room indices .*, got \(0, 4\)"),
    ({"start_rooms": "01"}, r"start_rooms: expected 2 room indices"),
    ({"start_rooms": (0, True)}, r"start_rooms: expected 2 room indices"),
    ({"target_rooms": (-1, 2)}, r"target_rooms: expected 2 room indices"),
    (
      {"task": "coordinate"},
      r"task: expected one of \['own_rooms', 'split', 'random_split'\], got 'coordinate'",
    ),
    ({"task": None}, r"task: expected one of .*, got None"),
    ({"observe_others": 0}, r"observe_others: expected a bool, got 0"),
    ({"observe_others": "no"}, r"observe_others: expected a bool, got 'no'"),
    ({"task": "split", "shared_room_ends": 1}, r"shared_room_ends: expected a bool, got 1"),
    (
      {"shared_room_ends": True},
      r"shared_room_ends: expected False for task 'own_rooms' \(only the split tasks",
    ),
    (
      {"task": "split", "target_rooms": (2, 2)},
      r"target_rooms: the split task's goal set must be two different rooms, got \(2, 2\)",
    ),
  ],
)
def test_bad_arguments_raise_one_line_naming_them(kwargs, message):
  with pytest.raises(ValueError, match=message):
    envs.make(NAME, **kwargs)


SPLIT_ENV, SPLIT = envs.make(NAME, task="split")


def test_split_task_defaults_reset_in_one_room_and_observes_the_goal_set():
  assert PARAMS.task == "own_rooms" and SPLIT.task == "split"
  np.testing.assert_array_equal(SPLIT.start_rooms, [0, 0])
  np.testing.assert_array_equal(SPLIT.target_rooms, [2, 3])
  _, params = envs.make(NAME, task="split", start_rooms=(1, 1), target_rooms=(3, 0))
  np.testing.assert_array_equal(params.start_rooms, [1, 1])
  np.testing.assert_array_equal(params.target_rooms, [3, 0])
  reset = jax.jit(jax.vmap(SPLIT_ENV.reset, in_axes=(0, None)))
  obs, states = reset(jax.random.split(jax.random.key(0), 32), SPLIT)
  np.testing.assert_array_equal(rooms.room_of(states.pos), 0)  # both in the north-west
  assert len({tuple(p) for p in np.asarray(states.pos[:, 1])}) > 10
  # each row: its position, the other's, then the goal set's two-hot twice (no room assigned)
  pos = np.asarray(states.pos[0], np.float32) / 12
  two_hot = np.asarray([0, 0, 1, 1], np.float32)
  np.testing.assert_allclose(obs[0, 0], np.concatenate([pos[0], pos[1], two_hot, two_hot]))
  np.testing.assert_allclose(obs[0, 1], np.concatenate([pos[1], pos[0], two_hot, two_hot]))


def test_split_reward_and_termination_exactly_when_the_agents_take_two_different_goal_rooms():
  key = jax.random.key(0)
  goal = (2, 3)
  cases = [  # (positions before, actions, rewarded)
    ([(7, 9), (9, 3)], [DOWN, STAY], True),  # into the south-east while the other is south-west
    ([(9, 3), (7, 9)], [STAY, DOWN], True),  # the other way round
    ([(9, 9), (9, 3)], [STAY, STAY], True),
    ([(9, 3), (10, 2)], [STAY, STAY], False),  # both in the south-west
    ([(9, 9), (10, 10)], [STAY, RIGHT], False),  # both in the south-east
    ([(8, 9), (9, 3)], [UP, STAY], False),  # back into the hallway (7, 9): in no room
    ([(3, 3), (9, 3)], [STAY, STAY], False),  # the north-west is not in the goal set
    ([(3, 9), (9, 9)], [STAY, STAY], False),  # nor the north-east
  ]
  for pos, action, rewarded in cases:
    _, _, reward, terminated, _ = step_env(key, state(pos, target=goal), jnp.asarray(action), SPLIT)
    assert (float(reward), bool(terminated)) == (float(rewarded), rewarded), (pos, action)
    assert reward.dtype == jnp.float32
  # through gymnax's step: the episode ends and restarts in the start room
  _, new, reward, terminated, truncated, info = step(
    key, state([(7, 9), (9, 3)], target=goal), jnp.asarray([DOWN, STAY]), SPLIT
  )
  assert float(reward) == 1.0 and bool(terminated) and not bool(truncated) and int(new.time) == 0
  np.testing.assert_array_equal(rooms.room_of(new.pos), [0, 0])
  np.testing.assert_allclose(info["final_observation"][0, 4:], [0, 0, 1, 1, 0, 0, 1, 1])


@pytest.mark.parametrize("task", ["split", "random_split"])
def test_shared_room_ends_a_split_episode_when_both_stand_in_one_goal_room(task):
  """`shared_room_ends=True`: both agents in one room of the goal set terminate the episode with
  −step_cost (no success); two different goal rooms still succeed; both in one room outside
  the goal set, or one in a hallway, go on. Off (the default) only the success terminates."""
  key = jax.random.key(0)
  _, params = envs.make(NAME, task=task, shared_room_ends=True, step_cost=0.01)
  _, off = envs.make(NAME, task=task, step_cost=0.01)
  cases = [  # (positions before, actions, terminated with the option, rewarded)
    ([(7, 9), (9, 3)], [DOWN, STAY], True, True),  # south-east and south-west: success
    ([(9, 3), (10, 2)], [STAY, STAY], True, False),  # both in the south-west
    ([(7, 9), (10, 10)], [DOWN, STAY], True, False),  # both in the south-east once a0 steps in
    ([(8, 9), (9, 9)], [UP, STAY], False, False),  # a0 back into the hallway (7, 9)
    ([(3, 3), (2, 2)], [STAY, STAY], False, False),  # both in the north-west, not a goal room
  ]
  for pos, action, ends, rewarded in cases:
    start = state(pos, target=(2, 3))
    _, _, reward, terminated, _ = step_env(key, start, jnp.asarray(action), params)
    assert bool(terminated) == ends, (pos, action)
    np.testing.assert_allclose(float(reward), float(rewarded) - 0.01, rtol=1e-6)
    _, _, reward_off, terminated_off, _ = step_env(key, start, jnp.asarray(action), off)
    assert bool(terminated_off) == rewarded and float(reward_off) == float(reward), (pos, action)


RANDOM_ENV, RANDOM = envs.make(NAME, task="random_split")


def test_the_fixed_tasks_reset_from_the_key_as_before():
  # the draws of "own_rooms" and "split" read the reset key as they did before "random_split"
  for params in (PARAMS, SPLIT):
    key = jax.random.key(7)
    _, new = ENV.reset_env(key, params)
    index = jax.random.randint(key, (2,), 0, rooms.ROOM_SIZES[np.asarray(params.start_rooms)])
    np.testing.assert_array_equal(new.pos, rooms.ROOM_CELLS[np.asarray(params.start_rooms), index])
    np.testing.assert_array_equal(new.target, params.target_rooms)


def test_random_split_draws_one_start_room_and_a_goal_set_among_the_other_rooms():
  assert RANDOM.task == "random_split" and RANDOM.observe_others
  reset = jax.jit(jax.vmap(RANDOM_ENV.reset, in_axes=(0, None)))
  keys = jax.random.split(jax.random.key(0), 1200)
  obs, states = reset(keys, RANDOM)
  assert obs.shape == (1200, 2, 12) and obs.dtype == jnp.float32
  start = np.asarray(rooms.room_of(states.pos))
  goal = np.asarray(states.target)
  np.testing.assert_array_equal(start[:, 0], start[:, 1])  # one room for both agents
  assert (goal[:, 0] < goal[:, 1]).all()  # two different rooms, in increasing order
  assert (goal != start[:, :1]).all()  # neither is the start room
  pairs = collections.Counter(zip(start[:, 0], map(tuple, goal)))
  assert len(pairs) == 12  # every start room with every goal set of the other three
  assert min(pairs.values()) > 1200 / 12 / 2 and max(pairs.values()) < 1200 / 12 * 2
  assert len({tuple(p) for p in np.asarray(states.pos[:, 0])}) > 60  # cells of every room
  assert (states.pos[:, 0] != states.pos[:, 1]).any(axis=-1).mean() > 0.9  # independent cells
  # each row: its position, the other's, then the goal set's two-hot twice
  pos = np.asarray(states.pos, np.float32) / 12
  two_hot = np.zeros((1200, 4), np.float32)
  two_hot[np.arange(1200)[:, None], goal] = 1.0
  expected_0 = np.concatenate([pos[:, 0], pos[:, 1], two_hot, two_hot], axis=-1)
  expected_1 = np.concatenate([pos[:, 1], pos[:, 0], two_hot, two_hot], axis=-1)
  np.testing.assert_allclose(obs[:, 0], expected_0, rtol=1e-6)
  np.testing.assert_allclose(obs[:, 1], expected_1, rtol=1e-6)
  again, _ = reset(keys, RANDOM)
  np.testing.assert_array_equal(obs, again)
  # the start and goal fields are not read: other values draw the same episodes
  _, fixed = envs.make(NAME, task="random_split", start_rooms=(3, 3), target_rooms=(0, 1))
  np.testing.assert_array_equal(reset(keys, fixed)[0], obs)


def test_random_split_rewards_two_different_rooms_of_the_episode_goal_set():
  key = jax.random.key(0)
  goal = (0, 1)  # north-west and north-east, e.g. from a start in the south-west
  cases = [  # (positions before, actions, rewarded)
    ([(3, 3), (3, 9)], [STAY, STAY], True),
    ([(3, 9), (3, 3)], [STAY, STAY], True),  # either way round
    ([(3, 5), (3, 9)], [RIGHT, STAY], False),  # into the hallway (3, 6): in no room
    ([(3, 6), (3, 9)], [LEFT, STAY], True),  # out of it into the north-west
    ([(3, 3), (2, 2)], [STAY, STAY], False),  # both in the north-west
    ([(9, 3), (3, 9)], [STAY, STAY], False),  # the south-west is not in this goal set
    ([(9, 9), (3, 3)], [STAY, STAY], False),  # nor the south-east
  ]
  for pos, action, rewarded in cases:
    _, _, reward, terminated, _ = step_env(
      key, state(pos, target=goal), jnp.asarray(action), RANDOM
    )
    assert (float(reward), bool(terminated)) == (float(rewarded), rewarded), (pos, action)
  # the south rooms, rewarded under "split"'s fixed goal set, are no success under this one
  _, _, reward, _, _ = step_env(
    key, state([(9, 3), (9, 9)], target=goal), jnp.asarray([4, 4]), RANDOM
  )
  assert float(reward) == 0.0
  # through gymnax's step: the episode ends and the next one draws its own rooms
  restarts = []
  for seed in range(40):
    _, new, reward, terminated, truncated, _ = step(
      jax.random.key(seed), state([(3, 3), (3, 9)], target=goal), jnp.asarray([4, 4]), RANDOM
    )
    assert float(reward) == 1.0 and bool(terminated) and not bool(truncated)
    assert int(new.time) == 0
    start = np.asarray(rooms.room_of(new.pos))
    assert start[0] == start[1] and start[0] not in np.asarray(new.target)
    restarts.append((int(start[0]), tuple(np.asarray(new.target))))
  assert len(set(restarts)) > 4  # new rooms, not the finished episode's goal set


@pytest.mark.parametrize("task", ["own_rooms", "split", "random_split"])
def test_observe_others_false_hides_only_the_other_agent_position(task):
  env, seen = envs.make(NAME, task=task)
  _, hidden = envs.make(NAME, task=task, observe_others=False)
  assert seen.observe_others and not hidden.observe_others
  keys = jax.random.split(jax.random.key(3), 16)
  reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
  obs, states = reset(keys, seen)
  blind, blind_states = reset(keys, hidden)
  np.testing.assert_array_equal(states.pos, blind_states.pos)  # the same episodes
  assert (np.asarray(obs[..., 2:4]) > 0).all()  # every free cell is off the border
  np.testing.assert_array_equal(blind[..., 2:4], 0.0)  # the other's position is gone
  np.testing.assert_array_equal(blind[..., :2], obs[..., :2])  # the rest is unchanged
  np.testing.assert_array_equal(blind[..., 4:], obs[..., 4:])
  assert env.observation_space(hidden).shape == (2, 12)
  actions = jnp.asarray([DOWN, RIGHT])
  step_all = jax.jit(jax.vmap(env.step_env, in_axes=(0, 0, None, None)))
  new_obs, _, reward, _, _ = step_all(keys, blind_states, actions, hidden)
  np.testing.assert_array_equal(new_obs[..., 2:4], 0.0)
  _, _, seen_reward, _, _ = step_all(keys, states, actions, seen)
  np.testing.assert_array_equal(reward, seen_reward)  # hiding changes what is seen, not the task
