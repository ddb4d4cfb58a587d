"""Hi-Agent's two-level group statistics (`group_relative.two_level_advantages`): ragged groups
against a NumPy reference, row-order invariance, the foresight reward's linearity in lam, and
invalid subgoals."""

import jax
import numpy as np
import pytest

from hrljax.losses import group_relative as gr

jax.config.update("jax_numpy_rank_promotion", "raise")

# Ragged groups: state 0 has 3 subgoals, state 1 one (a singleton), state 2 two; subgoal 2 has no
# action, subgoal 4 one, the others two or three. Rows are in no particular order.
FORMAT = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], np.float32)
STATES = np.array([0, 2, 0, 1, 0, 2], np.int32)
SUBGOAL_OF = np.array([0, 3, 1, 0, 5, 4, 1, 0, 5, 3, 1], np.int32)
SUCCESS = np.array([1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1], np.float32)
LOW = np.array([0.5, 2.0, -1.0, 1.5, 3.0, 0.0, 2.0, -0.5, 1.0, 0.0, 4.0], np.float32)
EPS = 1e-6


def zscore(values, ids, eps=EPS):
  """GRPO's group z-score (unbiased std + eps; a one-row group gets 0), by hand."""
  out = np.zeros_like(values, np.float64)
  for group in np.unique(ids):
    rows = ids == group
    if rows.sum() < 2:
      continue
    x = values[rows].astype(np.float64)
    out[rows] = (x - x.mean()) / (x.std(ddof=1) + eps)
  return out


def reference(lam):
  execution = np.array(
    [SUCCESS[SUBGOAL_OF == j].mean() if (SUBGOAL_OF == j).any() else 0.0 for j in range(6)]
  )
  rewards = FORMAT + lam * execution
  return rewards, execution, zscore(rewards, STATES), zscore(LOW, SUBGOAL_OF)


def call(lam=1.0, **kwargs):
  return gr.two_level_advantages(FORMAT, STATES, SUCCESS, LOW, SUBGOAL_OF, 3, lam=lam, **kwargs)


@pytest.mark.parametrize("lam", [0.0, 0.5, 2.0])
def test_ragged_groups_match_the_reference(lam):
  out = call(lam)
  rewards, execution, high, low = reference(lam)
  np.testing.assert_allclose(out.execution_rate, execution, rtol=1e-6)
  np.testing.assert_allclose(out.subgoal_rewards, rewards, rtol=1e-6)
  np.testing.assert_allclose(out.subgoal_advantages, high, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out.action_advantages, low, rtol=1e-5, atol=1e-6)
  assert out.subgoal_advantages[3] == 0.0  # the singleton state
  assert out.action_advantages[5] == 0.0  # the only action of subgoal 4


def test_row_order_does_not_matter():
  rng = np.random.default_rng(0)
  sub_perm, act_perm = rng.permutation(6), rng.permutation(11)
  new_index = np.argsort(sub_perm)  # old subgoal row -> new row
  out = gr.two_level_advantages(
    FORMAT[sub_perm],
    STATES[sub_perm],
    SUCCESS[act_perm],
    LOW[act_perm],
    new_index[SUBGOAL_OF[act_perm]].astype(np.int32),
    3,
  )
  expected = call()
  np.testing.assert_allclose(out.subgoal_advantages, expected.subgoal_advantages[sub_perm], 1e-6)
  np.testing.assert_allclose(out.action_advantages, expected.action_advantages[act_perm], 1e-6)


def test_foresight_reward_is_linear_in_lam_and_lam_zero_is_grpo_on_format():
  base = np.asarray(call(0.0).subgoal_rewards)
  unit = np.asarray(call(1.0).subgoal_rewards) - base
  for lam in (0.25, 3.0):
    np.testing.assert_allclose(call(lam).subgoal_rewards, base + lam * unit, rtol=1e-6)
  np.testing.assert_allclose(
    call(0.0).subgoal_advantages, gr.grpo_advantages(FORMAT, STATES, 3), rtol=1e-6
  )
  # the execution feedback changes the high level's ranking: at state 0, subgoal 0 (format 1,
  # execution 2/3) beats subgoal 2 (format 1, no action: execution 0) only when lam > 0
  assert call(0.0).subgoal_advantages[0] == call(0.0).subgoal_advantages[2]
  assert call(1.0).subgoal_advantages[0] > call(1.0).subgoal_advantages[2]


def test_an_invalid_subgoal_and_its_actions_leave_the_statistics():
  valid = np.ones(6, bool)
  valid[0] = False
  out = call(subgoal_valid=valid)
  assert out.subgoal_advantages[0] == 0.0 and out.subgoal_rewards[0] == 0.0
  np.testing.assert_array_equal(np.asarray(out.action_advantages)[SUBGOAL_OF == 0], 0.0)
  # the same as dropping those rows
  keep_sub = np.arange(1, 6)
  keep_act = SUBGOAL_OF != 0
  dropped = gr.two_level_advantages(
    FORMAT[keep_sub],
    STATES[keep_sub],
    SUCCESS[keep_act],
    LOW[keep_act],
    (SUBGOAL_OF[keep_act] - 1).astype(np.int32),
    3,
  )
  np.testing.assert_allclose(out.subgoal_advantages[1:], dropped.subgoal_advantages, 1e-6)
  np.testing.assert_allclose(out.action_advantages[keep_act], dropped.action_advantages, 1e-6)


def test_an_invalid_action_leaves_its_subgoals_execution_rate():
  valid = np.ones(11, bool)
  valid[3] = False  # subgoal 0: successes 1, 0, 1 -> 1, 1
  out = call(action_valid=valid)
  assert out.execution_rate[0] == 1.0 and out.action_advantages[3] == 0.0


def test_bad_arguments_raise_naming_them():
  with pytest.raises(ValueError, match="lam"):
    call(-0.5)
  with pytest.raises(ValueError, match="subgoal_ids"):
    gr.two_level_advantages(FORMAT, STATES, SUCCESS, LOW, SUBGOAL_OF + 1, 3)
  with pytest.raises(ValueError, match="state_ids"):
    gr.two_level_advantages(FORMAT, STATES, SUCCESS, LOW, SUBGOAL_OF, 2)


def test_an_out_of_range_subgoal_id_is_an_invalid_action_under_jit():
  ids = SUBGOAL_OF.copy()
  ids[2] = 6
  out = jax.jit(lambda i: gr.two_level_advantages(FORMAT, STATES, SUCCESS, LOW, i, 3))(ids)
  valid = np.ones(11, bool)
  valid[2] = False
  expected = call(action_valid=valid)
  np.testing.assert_allclose(out.action_advantages, expected.action_advantages, 1e-6)
  np.testing.assert_allclose(out.subgoal_advantages, expected.subgoal_advantages, 1e-6)
