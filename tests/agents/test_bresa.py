"""Tests of Bresa (`hrljax.agents.recovery_rl.bresa_config`): with the reflex off (K = 1, direct
controller) it is the SAC agent (to float32 rounding: `assert_same`); the reflex runs at every control step inside the two-rate rollout (strict threshold,
latching); a two-rate smoke run routes decisions and control steps to their buffers, is
deterministic per seed, and evaluates."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from hrljax.agents import recovery_rl, sac, two_rate_common
from hrljax.networks.continuous import rescale_action

from hrljax import envs, rollout
from tests.same_numbers import as_numpy, assert_same


def tiny(config, **overrides):
  config.env_name = "PointHazard-v0"
  config.env_kwargs = ml_collections.ConfigDict({"max_steps_in_episode": 20})
  config.hidden_sizes = (16,)
  config.batch_size = 8
  config.num_envs = 2
  config.buffer_size = 128
  config.learning_starts = 6
  for key, value in overrides.items():
    config[key] = value
  return config


def tiny_bresa(**overrides):
  config = tiny(
    recovery_rl.bresa_config(),
    risk_hidden_sizes=(16,),
    risk_batch_size=8,
    risk_buffer_size=256,
    risk_pretrain_updates=2,
    risk_updates_per_step=2,
  )
  for key, value in overrides.items():
    config[key] = value
  return config


def run(learner, seed, repeats=1):
  """`(final state, stacked metrics)` of the learner's run from `key(seed)`; with `repeats` > 1,
  a list of that many runs from the same key, through one jitted `step` (a fresh `jax.jit`
  would trace and lower it again). `init` runs op by op: jitted, its program costs more to
  compile than its operations do."""
  step = jax.jit(learner.step)
  runs = []
  for _ in range(repeats):
    state, history = learner.init(jax.random.key(seed)), []
    for _ in range(learner.num_updates):
      state, metrics = step(state)
      history.append(metrics)
    runs.append((state, jax.tree.map(lambda *x: np.stack(x), *history)))
  return runs if repeats > 1 else runs[0]


def test_reflex_off_with_one_control_step_is_sac():
  """Same seed: the same actions, rewards, buffers and learned parameters as `agents.sac`."""
  overrides = dict(total_timesteps=16, autotune_alpha=True, init_alpha=1.0)
  sac_state, sac_metrics = run(sac.make_learner(tiny(sac.get_config(), **overrides)), 3)
  config = tiny_bresa(reflex=False, control_steps=1, controller="direct", **overrides)
  recovery_rl.validate_config(config)
  state, metrics = run(recovery_rl.make_learner(config), 3)
  stored = state.task_buffer.storage
  for field in ("obs", "action", "reward", "terminated", "next_obs"):
    assert_same(getattr(sac_state.buffer.storage, field), getattr(stored, field), field)
  np.testing.assert_array_equal(stored.num_substeps[:16], np.ones(16))
  # The executed (risk buffer) actions are SAC's environment actions.
  assert_same(
    rescale_action(stored.action[:16], (-1.0, -1.0), (1.0, 1.0)),
    state.risk_buffer.storage.action[:16],
  )
  for a, b in zip(jax.tree.leaves(state.agent.task), jax.tree.leaves(sac_state.agent), strict=True):
    assert_same(b, a)
  for name in ("critic_loss", "actor_loss", "episode_return_sum", "episodes"):
    assert_same(sac_metrics[name], metrics[name], name)
  assert metrics["critic_loss"][-1] != 0.0  # learning happened in the compared window
  assert not np.any(metrics["intervention_rate"])


def test_reflex_fires_at_control_steps_inside_decisions_and_latches():
  config = tiny_bresa(risk_epsilon=0.0)
  env, params = envs.make(config.env_name, **config.env_kwargs)
  agent = recovery_rl.RecoveryAgent.create(jax.random.key(0), envs.spec(env, params), config)
  controller = two_rate_common.make_controller(config, (-1.0, -1.0), (1.0, 1.0))
  carry = rollout.reset(env, params, jax.random.key(1), 4)

  def waypoints(p, obs, key):
    command = jax.random.uniform(key, (obs.shape[0], 2), minval=-1.0, maxval=1.0)
    return command, command

  @jax.jit
  def go(agent, eps):
    eps_config = ml_collections.FrozenConfigDict({**config.to_dict(), "risk_epsilon": eps})
    agent = agent.replace(config=eps_config)
    layer = two_rate_common.make_reflex(agent, deterministic=True)
    return rollout.two_rate_rollout(
      env,
      params,
      waypoints,
      None,
      controller,
      layer,
      (agent, jnp.asarray(True)),
      carry,
      jax.random.key(2),
      6,
      config.control_steps,
      info_keys=("cost",),
    )[1]

  # Pick ε inside the range of risks the nominal actions see, so that the reflex fires at some
  # control steps and not at others.
  probe = go(agent, 2.0).control
  flat = lambda x: x.reshape((-1,) + x.shape[3:])
  risks = np.asarray(agent.risk(flat(probe.obs), flat(probe.proposed_action)))
  eps = float(np.quantile(risks, 0.5))
  control = go(agent, eps).control
  intervened = np.asarray(control.intervened)  # [T, K, N]
  assert intervened.any() and not intervened.all()
  # Latch: within a decision, once fired it stays on until the decision ends.
  assert np.all(np.diff(intervened.astype(int), axis=1) >= 0)
  first = np.argmax(intervened, axis=1)[intervened.any(axis=1)]
  assert np.any(first > 0), "the reflex must be able to fire after the first control step"
  # Where it first fires, the nominal action's risk exceeds ε strictly; before, it does not.
  obs, proposed = flat(control.obs), flat(control.proposed_action)
  risk = np.asarray(agent.risk(obs, proposed)).reshape(intervened.shape)
  onset = intervened & ~np.concatenate([np.zeros_like(intervened[:, :1]), intervened[:, :-1]], 1)
  assert np.all(risk[onset] > eps)
  assert np.all(risk[~intervened] <= eps)
  # The executed action is the recovery policy's (mode) where the reflex is on, else nominal.
  recovery = np.asarray(agent.recovery_action(obs, None, deterministic=True)).reshape(
    intervened.shape + (2,)
  )
  np.testing.assert_allclose(
    control.action, np.where(intervened[..., None], recovery, control.proposed_action), atol=1e-6
  )


@pytest.fixture(scope="module")
def two_rate_runs():
  """K = 10, 4 learner steps, the reflex on with ε = 1 (a sigmoid risk never exceeds it), twice;
  and the same run with the reflex off."""
  config = tiny_bresa(total_timesteps=80, learning_starts=40, risk_epsilon=1.0)
  learner = recovery_rl.make_learner(config)
  off_learner = recovery_rl.make_learner(
    tiny_bresa(total_timesteps=80, learning_starts=40, reflex=False)
  )
  return config, learner, *run(learner, 0, repeats=2), run(off_learner, 0)


def test_two_rate_run_routes_decisions_and_control_steps(two_rate_runs):
  config, learner, (state, metrics), _, _ = two_rate_runs
  assert config.control_steps == 10 and learner.env_steps_per_update == 20
  assert int(state.task_buffer.size) == 2 * 4  # one item per decision
  assert int(state.risk_buffer.size) == 2 * 10 * 4  # one item per control step
  np.testing.assert_array_equal(state.task_buffer.storage.num_substeps[:8], np.full(8, 10))
  # Episodes of 20 control steps = 2 decisions: 4 episodes end every second learner step.
  np.testing.assert_array_equal(metrics["episodes"], [0, 2, 0, 2])
  np.testing.assert_array_equal(metrics["episode_length_sum"], [0, 40, 0, 40])
  assert np.all(metrics["intervention_rate"][:2] == 0)  # the reflex waits for learning to start
  for name, values in metrics.items():
    assert np.all(np.isfinite(values)), name


def test_two_rate_run_is_deterministic_and_evaluates(two_rate_runs):
  _, learner, (state_a, metrics_a), (state_b, metrics_b), _ = two_rate_runs
  for a, b in zip(
    jax.tree.leaves((state_a.risk_buffer, metrics_a)),
    jax.tree.leaves((state_b.risk_buffer, metrics_b)),
  ):
    np.testing.assert_array_equal(a, b)
  result = jax.jit(learner.evaluate)(state_a, jax.random.key(7))
  assert float(result["eval_length"]) == 20.0
  assert 0.0 <= float(result["eval_violation_rate"]) <= 1.0
  assert all(np.isfinite(float(v)) for v in result.values())


def test_a_reflex_that_never_fires_leaves_the_two_rate_task_agent_unchanged(two_rate_runs):
  """K = 10 (Bresa's structure): with the reflex on but never firing, the task agent's data and
  parameters are those of the run with the reflex off: the safety layer is a pure gate
  and task learning is decoupled from safety learning."""
  _, _, (on_state, on_metrics), _, (off_state, off_metrics) = two_rate_runs
  for a, b in zip(
    jax.tree.leaves((off_state.task_buffer, off_state.agent.task)),
    jax.tree.leaves((on_state.task_buffer, on_state.agent.task)),
    strict=True,
  ):
    assert_same(a, b)
  for name in ("critic_loss", "actor_loss", "episode_return_sum", "cost_per_step"):
    assert_same(off_metrics[name], on_metrics[name], name)
  assert off_metrics["critic_loss"][-1] != 0.0 and on_metrics["risk_loss"][-1] > 0.0
  assert not np.any(on_metrics["intervention_rate"])


def safety_during_training(config, seed=0):
  """`(cost of the control steps after learning starts, their mean intervention rate)` of one
  whole run (`make_train`, one program)."""
  learner = recovery_rl.make_learner(config)
  init_key, _ = jax.random.split(jax.random.key(seed))  # as `training.train` with this seed
  _, metrics = jax.jit(recovery_rl.make_train(config))(init_key)
  learned = np.arange(learner.num_updates) * learner.env_steps_per_update >= config.learning_starts
  cost = np.asarray(metrics["cost_per_step"])[learned].sum() * learner.env_steps_per_update
  return cost, float(np.asarray(metrics["intervention_rate"])[learned].mean())


@pytest.mark.learning
def test_reflex_cuts_violations_during_training_on_pointhazard():
  """`experiments/configs/bresa_pointhazard.py` for its first 2,000 control steps (1,000 of them
  random waypoints with the reflex off, then 100 decisions with the reflex on).

  Measured with the experiment CLI (this run starts from the CLI's initial key for seed 0):
  after the random phase, over control steps 1,001-2,000, unconstrained SAC (`sac_pointhazard.py`,
  seeds 0-2) incurs a cost of 222 / 224 / 240; Bresa with ε = 0.3 (the config's earlier
  threshold) 0 / 0 / 7, its reflex intervening at 51-72% of the control steps there, and with the
  config's ε = 0.5 0 / 0 / 7 at 54% / 48% / 34% (`safety_during_training`, seeds 0-2, 15:41
  UTC). Threshold: a tenth of SAC's lowest cost. The return is not asserted at this budget: even
  the 30k-step runs reach the goal in only 13 of seeds 0-17 (`experiments/results/SAFETY.md`).

  This test compiles with the fast options of `tests/fast_compile.py` (a shorter compile
  outweighs the slower run here); they change the last bits of transcendental functions, so
  the run is not bit for bit the measured one, and it passes there too.
  """
  from experiments.configs import bresa_pointhazard

  config = bresa_pointhazard.get_config()
  config.total_timesteps = 2_000
  cost, intervention_rate = safety_during_training(config)
  assert cost <= 22.2, cost
  assert intervention_rate > 0.1, intervention_rate


def test_end_decision_with_a_reflex_that_never_fires_is_the_latching_agent(two_rate_runs):
  """Option (b) (`reflex_mode="end_decision"`) with ε = 1: no decision ends early (episodes of
  20 control steps end at decision boundaries), so the task data and the learned task agent are
  those of option (a) (rewards summed step by step instead of at once: equal to rounding)."""
  config, _, (latch_state, latch_metrics), _, _ = two_rate_runs
  config = ml_collections.ConfigDict(config)
  config.reflex_mode = "end_decision"
  recovery_rl.validate_config(config)
  state, metrics = run(recovery_rl.make_learner(config), 0)
  np.testing.assert_array_equal(metrics["task_decisions"], [2, 2, 2, 2])
  assert int(state.task_buffer.size) == int(latch_state.task_buffer.size) == 8
  stored, expected = state.task_buffer.storage, latch_state.task_buffer.storage
  for field in ("obs", "action", "terminated", "next_obs", "num_substeps"):
    assert_same(getattr(expected, field), getattr(stored, field), field)
  np.testing.assert_allclose(stored.reward, expected.reward, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(state.agent.task), jax.tree.leaves(latch_state.agent.task)):
    np.testing.assert_allclose(as_numpy(a), as_numpy(b), rtol=1e-5, atol=1e-6)
  for name in ("episodes", "episode_length_sum", "cost_per_step", "intervention_rate"):
    assert_same(latch_metrics[name], metrics[name], name)


@pytest.mark.parametrize(
  "credit, decisions, lengths",
  [
    ("reflex_state", [2, 2, 0, 0], [10] * 4),
    ("recovery_step", [2, 2, 20, 20], [10] * 4 + [1] * 40),
  ],
)
def test_end_decision_reflex_on_every_step_ends_every_decision(credit, decisions, lengths):
  """ε = 0: from learning start (learner step 2) the reflex fires at every control step, so every
  command is rejected at its first control step. With "reflex_state" such a command executed
  nothing and is not stored; with "recovery_step" each is a decision of one control step (π_rec's),
  bootstrapped with γ^1. Before, the reflex is off: decisions of K = 10 control steps."""
  config = tiny_bresa(
    total_timesteps=80,
    learning_starts=40,
    risk_epsilon=0.0,
    reflex_mode="end_decision",
    recovery_credit=credit,
  )
  state, metrics = run(recovery_rl.make_learner(config), 0)
  np.testing.assert_array_equal(metrics["task_decisions"], decisions)
  np.testing.assert_array_equal(metrics["intervention_rate"], [0, 0, 1, 1])
  size = int(state.task_buffer.size)
  assert size == sum(decisions) and int(state.risk_buffer.size) == 80
  stored = jax.tree.map(lambda x: np.asarray(x[:size]), state.task_buffer.storage)
  np.testing.assert_array_equal(stored.num_substeps, lengths)
  # The SMDP discount of each stored decision is γ^n (n = its control steps).
  batch = two_rate_common.smdp_sac_batch(stored, config.gamma)
  np.testing.assert_allclose(
    1.0 - np.asarray(batch.terminated), config.gamma ** (np.asarray(lengths) - 1.0), rtol=1e-6
  )
  if credit == "recovery_step":  # each one-step decision starts where the previous one ended
    np.testing.assert_array_equal(stored.obs[6::2][1:], stored.next_obs[6::2][:-1])
  result = jax.jit(recovery_rl.make_learner(config).evaluate)(state, jax.random.key(7))
  assert float(result["eval_length"]) == 20.0 and float(result["eval_interventions"]) == 20.0
