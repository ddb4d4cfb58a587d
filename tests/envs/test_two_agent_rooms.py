"""The two-agent four rooms (`hrljax.envs.two_agent_rooms`): the layout derived from the map, the
moves, the team reward and the episode ends on hand-built states, the subgoal offsets against a
hand computation, a jitted and vmapped rollout, the factory's errors, and the split task (both
start in one room, the team rewarded once they stand in two different rooms of the goal set)."""

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
    obs, new, reward, terminated, info = step_env(
      key, state([start, (2, 2)]), jnp.asarray([action, DOWN]), PARAMS
    )
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
  obs, new, reward, terminated, truncated, info = step(key, both, jnp.asarray([DOWN, STAY]), PARAMS)
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
    ({"step_cost": -0.1}, r"step_cost: expected a finite number >= 0, got -0.1"),
    ({"step_cost": float("nan")}, r"step_cost: expected a finite number >= 0, got nan"),
    ({"step_cost": "a"}, r"step_cost: expected a finite number >= 0, got 'a'"),
    ({"start_rooms": (0,)}, r"start_rooms: expected 2 room indices in \[0, 4\)"),
    ({"start_rooms": (0, 4)}, r"start_rooms: expected 2 room indices .*, got \(0, 4\)"),
    ({"start_rooms": "01"}, r"start_rooms: expected 2 room indices"),
    ({"start_rooms": (0, True)}, r"start_rooms: expected 2 room indices"),
    ({"target_rooms": (-1, 2)}, r"target_rooms: expected 2 room indices"),
    ({"task": "coordinate"}, r"task: expected one of \['own_rooms', 'split'\], got 'coordinate'"),
    ({"task": None}, r"task: expected one of .*, got None"),
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
