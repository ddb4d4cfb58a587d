"""Tests of hrljax.agents.group_relative: config checks, the estimator switch, the agent API,
smoke runs of the FourRooms configs, determinism and learning FourRooms (8 devices vs 1:
test_eight_devices.py)."""

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import envs, rollout
from hrljax.agents import group_relative as agent
from hrljax.config_checks import ConfigError
from hrljax.types import Transition

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(relative_path: str):
  spec = importlib.util.spec_from_file_location(
    relative_path.replace("/", "_").removesuffix(".py"), os.path.join(ROOT, relative_path)
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


reference_gigpo = _load("experiments/benchmarks/advantages.py").reference_gigpo


def fourrooms_config(estimator="gigpo", **overrides):
  config = _load(
    f"experiments/configs/{estimator if estimator == 'grpo' else 'gigpo'}_fourrooms.py"
  ).get_config()
  config.estimator = estimator
  config.update(overrides)
  return config


def tiny(config, **overrides):
  config.update(
    num_groups=2,
    group_size=4,
    num_steps=8,
    total_timesteps=2 * 4 * 8 * 2,
    update_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16,),
    rollout_unroll=1,
  )  # smaller programs compile faster
  config.update(overrides)
  return config


# ----------------------------------------------------------------------------------------------
# Config checks.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("estimator", "ppo", "config.estimator: expected one of"),
    ("gigpo_norm", "std", "config.gigpo_norm: expected one of"),
    ("episode_stat_weighting", "x", "config.episode_stat_weighting: expected one of"),
    ("loss_aggregation", "mean", "config.loss_aggregation: expected one of"),
    ("kl_estimator", "k4", "config.kl_estimator: expected one of"),
    ("group_size", 0, "config.group_size: expected an integer > 0"),
    ("gamma", 1.5, "config.gamma: expected a number in"),
    ("kl_coef", -0.1, "config.kl_coef: expected a finite number >= 0"),
    ("num_minibatches", 3, "config.num_minibatches: expected a divisor"),
    ("num_envs", 7, r"config.num_envs: expected num_groups \* group_size \(16\), got 7"),
    ("total_timesteps", 100, "config.total_timesteps: expected at least 1024"),
    ("env_name", "FourRooms-v9", "env_name: unknown environment"),
  ],
)
def test_validate_config_names_the_field(field, value, message):
  config = fourrooms_config(num_groups=4, group_size=4, num_steps=64)
  config[field] = value
  with pytest.raises(ValueError, match=message):
    agent.validate_config(config)


def test_num_envs_follows_groups_and_device_count_is_checked():
  config = fourrooms_config(num_groups=3, group_size=4)
  assert config.num_envs == 12
  agent.validate_config(config, num_devices=4)
  with pytest.raises(ConfigError, match=r"num_envs: expected a multiple of the device count \(8\)"):
    agent.validate_config(config, num_devices=8)


# ----------------------------------------------------------------------------------------------
# The estimator switch, against independent NumPy computations.
# ----------------------------------------------------------------------------------------------

GROUPS = np.array([0, 0, 0, 1, 1, 1], np.int32)
# Time-major [T=4, N=6] episodes: two groups of three; observations are cells (a, b).
CELLS = np.array(
  [
    [[0, 0], [0, 0], [0, 0], [5, 5], [5, 5], [5, 5]],
    [[1, 0], [0, 1], [1, 0], [5, 6], [6, 5], [5, 6]],
    [[2, 0], [1, 1], [1, 1], [5, 7], [6, 6], [5, 5]],
    [[3, 0], [2, 1], [1, 2], [9, 9], [6, 7], [5, 6]],
  ],
  np.int32,
)
REWARD = np.array(
  [
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 0],
    [7, 0, 1, 1, 0, 0],  # env 0 terminated at t=2: its reward 7 at t=3 is after the episode
  ],
  np.float32,
)
TERMINATED = np.zeros((4, 6), bool)
TERMINATED[2, 0] = TERMINATED[3, 2] = TERMINATED[3, 3] = True


def _episodes():
  zeros = jnp.zeros((4, 6), jnp.float32)
  transitions = Transition(
    obs=jnp.asarray(CELLS),
    action=jnp.zeros((4, 6), jnp.int32),
    reward=jnp.asarray(REWARD),
    terminated=jnp.asarray(TERMINATED),
    truncated=jnp.zeros((4, 6), bool),
    next_obs=jnp.asarray(CELLS),
    policy_extras=zeros,
    episode_return=zeros,
    episode_length=jnp.zeros((4, 6), jnp.int32),
  )
  return rollout.GroupedEpisodes(
    transitions, rollout.first_episode_mask(transitions.done), jnp.asarray(GROUPS)
  )


def _np_outcome(estimator, returns):
  out = np.zeros(6)
  for g in (0, 1):
    r = returns[GROUPS == g].astype(np.float64)
    centred = r - r.mean()
    out[GROUPS == g] = {
      "grpo": centred / (r.std(ddof=1) + 1e-6),
      "dr_grpo": centred,
      "rloo": [r[i] - np.delete(r, i).mean() for i in range(len(r))],
    }[estimator]
  return out


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo", "gigpo"])
def test_estimator_switch_gives_that_estimators_advantages(estimator):
  config = agent.get_config()
  config.update(estimator=estimator, num_groups=2, gamma=0.9, omega=0.5)
  advantage, metrics = jax.jit(lambda e: agent.step_advantages(e, config))(_episodes())
  advantage = np.asarray(advantage)
  valid = np.asarray(_episodes().valid)
  np.testing.assert_array_equal(valid[:, 0], [True, True, True, False])
  np.testing.assert_array_equal(advantage[~valid], 0.0)
  if estimator == "gigpo":
    t, n = np.nonzero(valid)
    expected = reference_gigpo(CELLS[t, n], REWARD[t, n], n, t, GROUPS[n], gamma=0.9, omega=0.5)
    np.testing.assert_allclose(advantage[t, n], expected, atol=1e-5)
    # Anchors are real here: the shared start cell of each group and cells (1, 0), (1, 1), (5, 6).
    assert 0.5 < float(metrics["anchor_share"]) < 1.0
    assert float(metrics["step_advantage_abs_mean"]) > 0
  else:
    returns = np.where(valid, REWARD, 0).sum(axis=0)  # [1, 0, 1 | 1, 0, 0]: the 7 is masked
    expected = np.broadcast_to(_np_outcome(estimator, returns), valid.shape)
    np.testing.assert_allclose(advantage[valid], expected[valid], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Agent API, loss, smoke runs, determinism.
# ----------------------------------------------------------------------------------------------


def _agent_and_batch(**overrides):
  config = tiny(fourrooms_config(**overrides))
  env, params = envs.make(config.env_name, **config.env_kwargs)
  spec = envs.spec(env, params)
  grouped = agent.GroupRelativeAgent.create(jax.random.key(0), spec, config)
  obs = jax.random.randint(jax.random.key(1), (8, 8, 4), 1, 12)
  mask = jnp.arange(8)[None, :] < jnp.array([8, 3, 5, 1, 8, 8, 2, 6])[:, None]
  batch = agent.GroupBatch(
    obs=obs,
    action=jnp.zeros((8, 8), jnp.int32),
    log_prob=jnp.full((8, 8), -np.log(4.0), jnp.float32),
    advantage=jnp.where(mask, jnp.linspace(-1, 1, 8)[:, None], 0.0),
    mask=mask,
  )
  return grouped, batch


def test_act_and_the_kl_to_the_frozen_reference():
  grouped, batch = _agent_and_batch(kl_coef=0.1)
  obs = jnp.array([[1, 1, 5, 5], [3, 9, 11, 2]], jnp.int32)
  assert grouped.act(obs, jax.random.key(1)).shape == (2,)
  assert grouped.act(obs, None, deterministic=True).dtype in (jnp.int32, jnp.int64)
  loss_and_grad = jax.jit(jax.value_and_grad(agent.policy_loss, has_aux=True))
  # At the reference parameters the KL is 0 (k3 and its gradient vanish there) ...
  (_, metrics), _ = loss_and_grad(grouped.params, grouped, batch)
  assert float(metrics["kl_to_reference"]) == 0.0
  # ... and away from them it is the k3 estimate, averaged over the valid steps.
  leaves, treedef = jax.tree.flatten(grouped.params)
  noise = [0.3 * jax.random.normal(jax.random.key(i), x.shape) for i, x in enumerate(leaves)]
  moved = jax.tree.unflatten(treedef, [x + n for x, n in zip(leaves, noise)])
  (_, metrics), _ = loss_and_grad(moved, grouped, batch)
  logp = grouped.network.apply(moved, batch.obs).log_prob(batch.action)
  ref = grouped.network.apply(grouped.params, batch.obs).log_prob(batch.action)
  d = np.asarray(ref - logp, np.float64)
  mask = np.asarray(batch.mask)
  expected = (np.exp(d) - d - 1)[mask].mean()
  assert expected > 1e-2
  assert float(metrics["kl_to_reference"]) == pytest.approx(expected, rel=1e-4)


def test_policy_gradient_is_the_token_mean_reinforce_gradient_on_policy():
  """With behaviour log-probs equal to the current ones (ratio 1), no KL and no entropy, the
  gradient is `-sum_valid A grad log pi / (number of valid steps)`."""
  grouped, batch = _agent_and_batch(kl_coef=0.0, entropy_coef=0.0)
  current = grouped.network.apply(grouped.params, batch.obs).log_prob(batch.action)
  batch = batch._replace(log_prob=jax.lax.stop_gradient(current))
  grad = jax.jit(jax.grad(lambda p: agent.policy_loss(p, grouped, batch)[0]))(grouped.params)

  def reinforce(p):
    logp = grouped.network.apply(p, batch.obs).log_prob(batch.action)
    m = batch.mask.astype(jnp.float32)
    return -(batch.advantage * logp * m).sum() / m.sum()

  expected = jax.jit(jax.grad(reinforce))(grouped.params)
  for a, b in zip(jax.tree.leaves(grad), jax.tree.leaves(expected)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def _check_metrics(metrics, num_updates):
  assert metrics["loss"].shape == (num_updates,)
  for key, value in metrics.items():
    assert np.isfinite(np.asarray(value)).all(), key
  np.testing.assert_array_equal(metrics["episodes"], 8.0)
  assert set(metrics) >= {
    "episode_return_sum",
    "episode_length_sum",
    "success_rate",
    "advantage_abs_mean",
    "kl_to_reference",
    "policy_loss",
    "entropy",
  }


def test_gigpo_config_smoke_run_is_deterministic_per_seed():
  """`make_train` of the GiGPO config (tiny sizes): same seed same numbers, another seed not."""
  config = tiny(fourrooms_config("gigpo", kl_coef=0.01))
  agent.validate_config(config)
  train = jax.jit(agent.make_train(config))
  _, first = train(jax.random.key(0))
  _, again = train(jax.random.key(0))
  _, other = train(jax.random.key(1))
  _check_metrics(first, 2)
  assert set(first) >= {"anchor_share", "step_advantage_abs_mean", "episode_advantage_abs_mean"}
  for key in first:
    np.testing.assert_array_equal(first[key], again[key])
  assert not np.array_equal(first["loss"], other["loss"])


def test_grpo_config_smoke_run_through_the_learner():
  config = tiny(fourrooms_config("grpo", kl_coef=0.01), eval_episodes=4)
  agent.validate_config(config)
  learner = agent.make_learner(config)
  assert learner.sharded_field == "group_ids"
  assert learner.env_steps_per_update == 2 * 4 * 8
  assert learner.num_updates == 2
  state = jax.jit(learner.init)(jax.random.key(0))
  initial_params = state.agent.params
  np.testing.assert_array_equal(state.group_ids, [0, 0, 0, 0, 1, 1, 1, 1])
  step = jax.jit(learner.step)
  metrics = []
  for _ in range(2):
    state, m = step(state)
    metrics.append(m)
  assert int(state.update) == 2
  changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), initial_params, state.agent.params)
  assert all(jax.tree.leaves(changed))
  frozen = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), initial_params, state.agent.ref_params)
  assert all(jax.tree.leaves(frozen))
  _check_metrics(jax.tree.map(lambda *x: np.stack(x), *metrics), 2)
  evaluation = jax.jit(learner.evaluate)(state, jax.random.key(1))
  assert 0.0 <= float(evaluation["eval_return"]) <= 1.0


# ----------------------------------------------------------------------------------------------
# Learning (8 devices vs 1: test_eight_devices.py).
# ----------------------------------------------------------------------------------------------


@pytest.mark.learning
@pytest.mark.optimised
def test_gigpo_learns_fourrooms():
  """GiGPO with `experiments/configs/gigpo_fourrooms.py` cut to 128 updates (1.05M env steps).

  Measured with the full 256-update config, seeds 0-2 (vmapped): the success rate over updates
  1-8 is 0.16-0.21 (a near-uniform policy), over updates 113-128 it is 0.607 / 0.533 / 0.608
  (GRPO with the same budget: 0.580 / 0.449 / 0.530); this test's own run (seed 0, not vmapped)
  passes, and with the rollout not unrolled (`rollout_unroll=1`, the same computation in a
  smaller program: a quarter less compile and run time here). Asserted: below 0.3 at the start,
  above 0.45 over updates 113-128.
  """
  config = fourrooms_config("gigpo", total_timesteps=128 * 16 * 8 * 64, rollout_unroll=1)
  _, metrics = jax.jit(agent.make_train(config))(jax.random.key(0))
  success = np.asarray(metrics["success_rate"])
  assert success.shape == (128,)
  assert success[:8].mean() < 0.3, success[:8]
  assert success[-16:].mean() > 0.45, success[-16:]
