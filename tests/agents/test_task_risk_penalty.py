"""Tests of the safety critic's Lagrangian on the task actor (`task_risk_penalty`: the LR
baseline of Recovery RL's code and SQRL's constrained update in its paper form) in
`hrljax.agents.recovery_rl` and Bresa:
the penalty ν·(Q_risk(s, c(s, a)) − ε) and its gradient into the actor through the action (and
Bresa's waypoint controller), the multiplier rising while the risk exceeds ε and falling
otherwise, the jitted learner, and the default "off" leaving the agent's update unchanged."""

import functools
import importlib.util
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from hrljax.agents import recovery_rl, sac_common

from hrljax import envs, training
from hrljax.config_checks import ConfigError
from hrljax.rollout import two_rate_streams
from tests.same_numbers import assert_same


def _load_test_module(name):
  """A sibling test file as a module (pytest's importlib import mode puts no test directory on
  sys.path), for its helpers."""
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"_{name}_helpers", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


RECOVERY_TESTS = _load_test_module("test_recovery_rl")

OBS_DIM = 10  # PointHazard's default "relative" observation


# The agent's two configurations: Recovery RL (one rate) and Bresa (`recovery_rl.bresa_config`).
VARIANTS = ("recovery_rl", "bresa")


def tiny_config(variant="recovery_rl", **overrides):
  """`test_recovery_rl.tiny_config`, with Bresa's two-rate fields for `variant="bresa"` and the
  learning start and budget counted in decisions."""
  config = RECOVERY_TESTS.tiny_config()
  if variant == "bresa":
    two_rate = recovery_rl.bresa_config()
    for field in (
      "control_steps",
      "controller",
      "reflex_mode",
      "risk_next_action",
      "risk_gamma",
      "risk_epsilon",
    ):
      config[field] = two_rate[field]
  config.learning_starts = 8 * config.control_steps
  config.total_timesteps = 40 * config.control_steps
  for key, value in overrides.items():
    config[key] = value
  return config


def make_agent(variant="recovery_rl", **overrides):
  config = tiny_config(variant, **overrides)
  env, params = envs.make(config.env_name, **config.env_kwargs)
  return recovery_rl.RecoveryAgent.create(jax.random.key(0), envs.spec(env, params), config)


def observations(num=12):
  """Observations whose first two entries (the position) lie in the arena."""
  return jax.random.uniform(jax.random.key(5), (num, OBS_DIM), minval=-0.9, maxval=0.9)


def sac_batch(num=12):
  keys = jax.random.split(jax.random.key(6), 3)
  obs = observations(num)
  return sac_common.Transition(
    obs=obs,
    action=jax.random.uniform(keys[0], (num, 2), minval=-1.0, maxval=1.0),
    reward=jax.random.normal(keys[1], (num,)),
    terminated=jnp.zeros((num,), bool),
    next_obs=jax.random.uniform(keys[2], (num, OBS_DIM), minval=-0.9, maxval=0.9),
  )


def test_defaults_are_off_and_the_bresa_config_inherits_them():
  for config in (recovery_rl.get_config(), recovery_rl.bresa_config()):
    assert config.task_risk_penalty == "off"
    assert config.task_risk_limit is None and config.task_risk_nu_learning_rate is None
  agent = make_agent()
  assert float(agent.log_nu) == pytest.approx(0.0)  # ν = 1


def test_zero_actor_penalty_leaves_the_sac_update_bit_identical():
  """The hook adds nothing but its term: a penalty that is identically 0 gives exactly the
  update without a penalty (actor, critics, temperature)."""
  agent = make_agent().task
  batch = sac_batch()
  plain, plain_metrics = jax.jit(lambda a: a.update(batch))(agent)
  zero, zero_metrics = jax.jit(
    lambda a: a.update(batch, lambda obs, action: jnp.zeros(action.shape[:1]))
  )(agent)
  jax.tree.map(np.testing.assert_array_equal, plain.actor_params, zero.actor_params)
  jax.tree.map(np.testing.assert_array_equal, plain.critic_params, zero.critic_params)
  np.testing.assert_array_equal(plain.log_alpha, zero.log_alpha)
  assert "actor_penalty" not in plain_metrics and float(zero_metrics["actor_penalty"]) == 0.0


@pytest.mark.parametrize("form", ["linear", "hinge"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_penalty_is_nu_times_the_risk_at_the_nominal_control_action_minus_eps(variant, form):
  """Hand-computed: ν·(max_k σ(Q_k(s, c(s, a))) − ε) with c the config's controller (Recovery RL:
  the rescaled action; Bresa: the waypoint tracker from the position s[:2]); "hinge": ν·max(·, 0).
  ε is the median risk, so that the hinge clips half the rows."""
  probe = make_agent(variant)
  obs = observations()
  command = jax.random.uniform(jax.random.key(7), (12, 2), minval=-1.0, maxval=1.0)
  limit = float(np.median(np.asarray(jax.nn.sigmoid(probe.task_risk_score(obs, command)))))
  agent = make_agent(
    variant, task_risk_penalty="fixed", task_risk_nu=3.0, task_risk_limit=limit, task_risk_form=form
  )
  if variant == "bresa":
    gain = agent.config.waypoint_gain
    raw = gain * (np.asarray(command) - np.asarray(obs)[:, :2])
    control = raw / np.maximum(1.0, np.linalg.norm(raw, axis=1, keepdims=True))
  else:
    control = np.asarray(command)  # PointHazard's action box is [-1, 1]^2
  heads = jax.nn.sigmoid(agent.risk_critic.apply(agent.risk_params, obs, jnp.asarray(control)))
  expected = 3.0 * (np.max(np.asarray(heads), axis=0) - limit)
  if form == "hinge":
    assert np.sum(expected < 0) == 6
    expected = np.maximum(expected, 0.0)
  penalty = recovery_rl.task_risk_penalty_fn(agent, jnp.asarray(True))(obs, command)
  np.testing.assert_allclose(penalty, expected, rtol=1e-5, atol=1e-6)
  off = recovery_rl.task_risk_penalty_fn(agent, jnp.asarray(False))(obs, command)
  np.testing.assert_array_equal(off, np.zeros(12))


@pytest.mark.parametrize("variant", VARIANTS)
def test_penalty_gradient_reaches_the_actor_through_the_action(variant):
  """The penalty's gradient with respect to the task actor's parameters, through the
  reparameterised action (and Bresa's controller), is non-zero and linear in ν; the risk critic's
  parameters are constants of it."""
  agent = make_agent(variant, task_risk_penalty="fixed", task_risk_nu=1.0)
  obs = observations()

  def penalty(actor_params, agent):
    action = agent.task.actor.apply(actor_params, obs).sample(seed=jax.random.key(8))
    return jnp.mean(recovery_rl.task_risk_penalty_fn(agent, jnp.asarray(True))(obs, action))

  grad = jax.jit(jax.grad(penalty))  # ν is data: one program for both values
  grad_one = grad(agent.task.actor_params, agent)
  norms = [float(jnp.linalg.norm(g)) for g in jax.tree.leaves(grad_one)]
  assert max(norms) > 1e-4, norms
  agent_five = agent.replace(log_nu=jnp.log(jnp.asarray(5.0, jnp.float32)))
  grad_five = grad(agent.task.actor_params, agent_five)
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(b, 5.0 * a, rtol=1e-4, atol=1e-7), grad_one, grad_five
  )
  # Through the command: the controller passes the gradient on (Bresa: the saturated tracker).
  command = jax.random.uniform(jax.random.key(9), (12, 2), minval=-1.0, maxval=1.0)
  grad_command = jax.grad(lambda c: jnp.sum(agent.task_risk_score(obs, c)))(command)
  assert float(jnp.min(jnp.linalg.norm(grad_command, axis=1))) > 0.0


def risk_trained_on_the_first_action_coordinate(agent):
  """`agent` with Q_risk trained (Recovery-RL TD loss, terminal transitions: target = cost) on
  random control actions with cost 1 where the action's first coordinate is positive."""
  obs = observations(64)
  action = jax.random.uniform(jax.random.key(10), (64, 2), minval=-1.0, maxval=1.0)
  cost = (action[:, 0] > 0.0).astype(jnp.float32)
  batch = two_rate_streams.ControlTransition(
    obs=obs,
    action=action,
    cost=cost,
    terminated=jnp.ones((64,), bool),
    next_obs=obs,
    next_action=action,
  )
  fast = agent.replace(risk_tx=optax.adam(1e-2))
  fast = fast.replace(risk_opt_state=fast.risk_tx.init(fast.risk_params))

  @jax.jit
  def train(agent):
    return jax.lax.scan(
      lambda a, key: a.update_safety(batch, key), agent, jax.random.split(jax.random.key(11), 200)
    )[0]

  return agent.replace(risk_params=train(fast).risk_params)


@pytest.mark.parametrize("variant", VARIANTS)
def test_actor_updates_with_the_penalty_lower_the_risk_of_the_task_action(variant):
  """With Q_risk high where the control action's first coordinate is positive, sixty SAC updates
  with a fixed ν = 10 (the critic held fixed) lower Q_risk at the task policy's mode by more than
  0.1, and leave it more than 0.1 below the same updates without the penalty."""
  agent = risk_trained_on_the_first_action_coordinate(
    make_agent(variant, task_risk_penalty="fixed", task_risk_nu=10.0, actor_learning_rate=3e-3)
  )
  batch = sac_batch(32)
  penalty_fn = lambda task: recovery_rl.task_risk_penalty_fn(
    agent.replace(task=task), jnp.asarray(True)
  )

  @functools.partial(jax.jit, static_argnums=1)
  def train(task, penalise):
    def one(task, _):
      return (task.update(batch, penalty_fn(task)) if penalise else task.update(batch))[0], None

    return jax.lax.scan(one, task, None, length=60)[0]

  def mode_risk(task):
    mode = task.actor.apply(task.actor_params, batch.obs).mode()
    return float(jnp.mean(jax.nn.sigmoid(agent.task_risk_score(batch.obs, mode))))

  before = mode_risk(agent.task)
  with_penalty = mode_risk(train(agent.task, True))
  without = mode_risk(train(agent.task, False))
  assert with_penalty < before - 0.1 and with_penalty < without - 0.1, (
    before,
    with_penalty,
    without,
  )


@pytest.mark.parametrize("limit, rises", [(0.01, True), (0.99, False)])
def test_learned_multiplier_rises_while_the_risk_exceeds_eps_and_falls_otherwise(limit, rises):
  """An untrained sigmoid critic reads about 0.5: above ε = 0.01 log ν rises at every step (by
  Adam's learning rate), below ε = 0.99 it falls; disabled, or with a fixed ν, it stays."""
  agent = make_agent(
    task_risk_penalty="learned", task_risk_limit=limit, task_risk_nu_learning_rate=0.1
  )
  obs = observations()
  step = jax.jit(lambda a, key, on: a.update_task_risk_multiplier(obs, key, on))
  log_nu = [float(agent.log_nu)]
  for i in range(5):
    agent, metrics = step(agent, jax.random.key(i), jnp.asarray(True))
    log_nu.append(float(agent.log_nu))
  assert 0.2 < float(metrics["task_risk"]) < 0.8
  steps = np.diff(log_nu)
  np.testing.assert_allclose(np.abs(steps), 0.1, rtol=1e-2)  # Adam's first steps: about ±lr
  assert np.all(steps > 0) if rises else np.all(steps < 0)
  held, _ = step(agent, jax.random.key(9), jnp.asarray(False))
  assert float(held.log_nu) == log_nu[-1]
  fixed = agent.replace(
    config=ml_collections.FrozenConfigDict(
      {**agent.config.as_configdict().to_dict(), "task_risk_penalty": "fixed"}
    )
  )
  assert float(step(fixed, jax.random.key(9), jnp.asarray(True))[0].log_nu) == log_nu[-1]


_STEPPED_RUNS = {}


def stepped_run(variant, penalty):
  """`(state after the first learning step, final state, per-step metrics)` of the tiny run of
  `variant` with the penalty `"off"` or `"learned"` (ν from 10, ε = 0.05), from `key(3)`: the
  learner's jitted `step` (the body `make_train` scans) called once per learner step, so that
  one compiled step gives both the whole run and the state where learning starts. Computed once
  per variant and penalty (shared by the tests below)."""
  name = (variant, penalty)
  if name not in _STEPPED_RUNS:
    overrides = (
      {}
      if penalty == "off"
      else dict(
        task_risk_penalty="learned",
        task_risk_nu=10.0,
        task_risk_limit=0.05,
        task_risk_nu_learning_rate=0.05,
      )
    )
    config = tiny_config(variant, **overrides)
    recovery_rl.validate_config(config)
    learner = recovery_rl.make_learner(config)
    # Up to and including the first learning step (a run of `learning_starts` control steps).
    first_learning = training.num_updates(config.learning_starts, learner.env_steps_per_update)
    step = jax.jit(learner.step)
    state, history, at_start = jax.jit(learner.init)(jax.random.key(3)), [], None
    for i in range(learner.num_updates):
      state, metrics = step(state)
      history.append(metrics)
      if i + 1 == first_learning:
        at_start = state
    _STEPPED_RUNS[name] = (
      at_start,
      state,
      jax.tree.map(lambda *x: np.stack([np.asarray(v) for v in x]), *history),
    )
  return _STEPPED_RUNS[name]


@pytest.mark.parametrize("variant", VARIANTS)
def test_jitted_learner_trains_the_multiplier_only_after_pre_training(variant):
  """The whole run under jit (the learner's jitted step, traced gates): no penalty before the
  critic's pre-training (the first learning step), then a penalty every step, and ν rising while
  the risk exceeds ε."""
  _, _, metrics = stepped_run(variant, "learned")
  penalty = np.asarray(metrics["actor_penalty"])
  nu = np.asarray(metrics["task_risk_nu"])
  learning = np.flatnonzero(nu > 0)  # the steps with updates (metrics are 0 before)
  first = learning[0]
  assert penalty[first] == 0.0 and nu[first] == pytest.approx(10.0)
  assert np.all(penalty[first + 1 :] > 0.0) and np.all(np.isfinite(penalty))
  assert np.all(np.diff(nu[first + 1 :]) > 0.0) and nu[-1] > 10.5


@pytest.mark.parametrize("variant", VARIANTS)
def test_off_trains_as_before_and_logs_no_penalty(variant):
  """With the default "off" the learner's metrics hold no penalty or multiplier, ν is never
  touched, and the first learning step (where the penalty is gated to 0) gives the task agent
  the same parameters as the penalised learner."""
  a, state_off, metrics_off = stepped_run(variant, "off")
  assert "actor_penalty" not in metrics_off and "task_risk_nu" not in metrics_off
  assert float(state_off.agent.log_nu) == 0.0
  # Up to and including the first learning step: the penalised learner's penalty is gated to 0.
  b, _, metrics_on = stepped_run(variant, "learned")
  assert np.any(metrics_on["actor_penalty"] > 0)  # the penalty is on after that step
  # differently built programs: equal to float32 rounding (`tests/same_numbers.py`)
  jax.tree.map(assert_same, a.agent.task.actor_params, b.agent.task.actor_params)
  jax.tree.map(assert_same, a.agent.task.critic_params, b.agent.task.critic_params)


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("task_risk_penalty", "always", "config.task_risk_penalty"),
    ("task_risk_form", "quadratic", "config.task_risk_form"),
    ("task_risk_nu", 0.0, "config.task_risk_nu: expected a finite number > 0"),
    ("task_risk_nu", float("inf"), "config.task_risk_nu"),
    ("task_risk_limit", 1.0, r"config.task_risk_limit: expected None \(risk_epsilon\) or a float"),
    ("task_risk_nu_learning_rate", -1e-3, "config.task_risk_nu_learning_rate"),
  ],
)
def test_validate_config_names_the_task_risk_field(field, value, message):
  config = tiny_config()
  config[field] = value
  with pytest.raises(ConfigError, match=message):
    recovery_rl.validate_config(config)


def test_validate_config_rejects_risk_epsilon_at_the_ends_as_the_penalty_limit():
  config = tiny_config(task_risk_penalty="fixed", risk_epsilon=0.0)
  with pytest.raises(ConfigError, match="config.task_risk_limit: None takes risk_epsilon"):
    recovery_rl.validate_config(config)
  config.task_risk_limit = 0.1
  recovery_rl.validate_config(config)


def test_lagrangian_config_is_bresas_with_only_the_reflex_level_and_the_penalty_changed():
  from experiments.configs import bresa_lagrangian_pointhazard, bresa_pointhazard

  base = bresa_pointhazard.get_config().to_dict()
  variant = bresa_lagrangian_pointhazard.get_config().to_dict()
  changed = {k for k in base if base[k] != variant[k]}
  assert changed == {"risk_epsilon", "task_risk_penalty", "task_risk_nu"}
  assert (variant["risk_epsilon"], variant["task_risk_penalty"], variant["task_risk_nu"]) == (
    0.9,
    "fixed",
    5.0,
  )
  assert set(variant) == set(base)


def test_recovery_rl_lagrangian_config_changes_only_the_switch_level_and_the_hinge_penalty():
  from experiments.configs import recovery_rl_lagrangian_pointhazard, recovery_rl_pointhazard

  base = recovery_rl_pointhazard.get_config().to_dict()
  variant = recovery_rl_lagrangian_pointhazard.get_config().to_dict()
  changed = {k for k in base if base[k] != variant[k]}
  # ν stays the agent's default 1, pinned by value below.
  assert changed == {"risk_epsilon", "task_risk_penalty", "task_risk_form", "task_risk_limit"}
  pinned = (
    "risk_epsilon",
    "task_risk_penalty",
    "task_risk_nu",
    "task_risk_form",
    "task_risk_limit",
  )
  assert tuple(variant[k] for k in pinned) == (0.9, "fixed", 1.0, "hinge", 0.6)
  assert set(variant) == set(base)
  recovery_rl.validate_config(recovery_rl_lagrangian_pointhazard.get_config())
