"""The agents on a mesh of 8 fake CPU devices give what they give on 1: ArCHer, SAC, GiGPO,
option-critic, PPO's per-device shuffle, IPPO, the value-based DQN and GMAH and MacroHFT's
mixture of experts, all in one
subprocess (`eight_device_checks`: one Python and JAX start for all). The tests of each agent on one device are in its own file."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.fast_compile import FAST_COMPILE_FLAGS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.multidevice


@pytest.fixture(scope="module")
def checks(eight_cpu_devices_env, tmp_path_factory):
  """The JSON object `eight_device_checks` prints (its programs compiled with the fast-compile
  options, whatever the run's XLA_FLAGS: every check compares two programs built alike)."""
  env = dict(
    eight_cpu_devices_env, XLA_FLAGS=f"{eight_cpu_devices_env['XLA_FLAGS']} {FAST_COMPILE_FLAGS}"
  )
  workdir = tmp_path_factory.mktemp("eight_devices")
  result = subprocess.run(
    [sys.executable, "-m", "tests.agents.eight_device_checks", str(workdir)],
    env=env,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=900,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  out = json.loads(result.stdout.strip().splitlines()[-1])
  assert out["devices"] == 8
  return out


def check(checks, name) -> dict:
  """The results of one agent's check; its traceback if it raised."""
  result = checks[name]
  assert "error" not in result, result["error"][-3000:]
  return result


def test_archer_eight_devices_match_one_device_with_sgd(checks):
  """Env carry sharded over 8 devices, replay buffer replicated: the same buffer, policy, critic,
  target critic and metrics as on one device after two iterations (the second trains the actor),
  with SGD so that a wrong gradient scale would show."""
  out = check(checks, "archer")
  assert out["specs"] == ["P('data',)", "P()"]  # env carry split, buffer replicated
  assert out["change"] > 1e-3  # the updates did move the parameters
  assert out["diff"] < 1e-4, out


def test_sac_eight_devices_match_one_device_with_sgd(checks):
  """Env carry sharded over 8 devices, replay buffer replicated: the whole run state (buffer,
  params, optimizer state) and metrics as on one device after three Learner steps (SGD, so a
  wrong gradient scale would show)."""
  out = check(checks, "sac")
  assert (out["sharded"], out["replicated"]) == ("P('data',)", ["P()"])
  assert out["change"] > 1e-3  # the updates did move the parameters
  assert out["diff"] < 1e-4, out


def test_gigpo_8_devices_give_the_same_advantages_losses_and_sgd_update_as_1(checks):
  """GiGPO exercises every cross-device reduction of the group-relative estimators: the episode
  statistics (group_normalize, as GRPO / Dr. GRPO / RLOO do), the anchor ids and the step
  statistics."""
  out = check(checks, "gigpo")
  assert out["advantage_abs_max"] > 0.1, out  # some group had differing outcomes
  assert out["param_change"] > 1e-3, out  # the update did something
  assert out["advantage_diff"] < 1e-5, out
  assert out["param_diff"] < 1e-5, out
  assert out["metric_diff"] < 1e-5, out
  assert out["group_ids_spec_8"] == "P('data',)"


def test_option_critic_eight_device_mesh_logs_the_same_losses_as_one_device(checks):
  runs = check(checks, "option_critic")
  one, eight = runs["1"], runs["8"]
  assert len(one) == len(eight) == 3
  for a, b in zip(one, eight):
    for key in (
      "loss",
      "critic_loss",
      "policy_loss",
      "termination_loss",
      "entropy",
      "episode_length",
      "option_termination_rate",
    ):
      if a[key] is None:  # no episode ended in this chunk (NaN is logged as null)
        assert b[key] is None
        continue
      np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-6, err_msg=key)
  assert all(r["critic_loss"] > 1e-3 for r in one), one
  assert len({r["loss"] for r in one}) == 3  # SGD steps change the numbers


def test_ppo_with_a_shard_per_device_moves_no_batch_between_devices_and_matches_one_device(checks):
  """`shuffle_shards=8` on 8 devices: the compiled update's collectives carry the gradients and a
  few scalars, less than the parameters and one batch field together (the whole-batch shuffle
  gathers every batch field on every device); one Learner step gives the parameters of the
  one-device run with the same 8 shards (SGD). The whole-batch shuffle's update has one
  collective: an all-gather of every field and the episodes' terms, packed together
  (`common.flatten_time_major`)."""
  out = check(checks, "ppo_shuffle_shards")
  sharded, whole = out["collective_elements"]["8"], out["collective_elements"]["1"]
  assert whole > out["param_elements"] + 4 * out["batch_elements"], out
  assert out["all_gathers"] == {"1": 1, "8": 0}, out
  assert out["all_reduces"]["1"] == 0 < out["all_reduces"]["8"], out
  assert sharded < out["param_elements"] + out["batch_elements"], out
  assert out["param_change"] > 1e-4
  assert out["param_diff"] < 1e-5, out


@pytest.mark.parametrize("agent", ["dqn", "gmah"])
def test_value_based_agents_on_eight_devices_match_one_device_with_sgd(checks, agent):
  """Per-environment state sharded over 8 devices, replay buffers replicated: the whole run state
  (parameters, targets, optimizer state, buffers) and the metrics equal the one-device run's
  after three Learner steps of two SGD steps each, targets copied every two. GMAH's high level
  trains through QMIX's mixer and loss (`value_based.monotonic_mix`, `qmix_loss`) on the same
  layout (sharded environments, replicated buffers), so QMIX's own learner is not run here."""
  out = check(checks, agent)
  assert out["sharded"] == "P('data',)"  # the per-environment state is split
  assert out["replicated"] == ["P()"]  # every replay buffer on every device
  assert out["change"] > 1e-3  # the updates did move the parameters
  assert out["diff"] < 1e-4, out


def test_ippo_on_eight_devices_matches_one_device_with_sgd(checks):
  """Environments sharded over 8 devices: the whole run state and the metrics equal the
  one-device run's after three updates of 2 epochs x 2 minibatches of SGD (the whole-batch
  shuffle, so every device computes the one-device update)."""
  out = check(checks, "ippo")
  assert out["sharded"] == "P('data',)"
  assert out["change"] > 1e-3
  assert out["diff"] < 1e-4, out


def test_macro_mixture_on_eight_devices_matches_one_device_with_sgd(checks):
  """The hyper-agent over frozen experts: per-environment state sharded, replay buffer and
  episodic memory replicated; the whole run state and the metrics equal the one-device run's
  after three Learner steps of two SGD steps each."""
  out = check(checks, "macro_mixture")
  assert out["sharded"] == "P('data',)"
  assert out["replicated"] and set(out["replicated"]) == {"P()"}, out
  assert out["change"] > 1e-3
  assert out["diff"] < 1e-4, out
