"""Tests of hrljax.agents.ppo_lagrangian: config checks, the cost wrapper, the multiplier
updates (plain SGD, Adam, PID) wired from the config, the loss, a smoke run and determinism."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from hrljax import envs, rollout
from hrljax.agents import ppo_lagrangian as pl
from hrljax.config_checks import ConfigError
from hrljax.envs.safety_wrapper import (
  SafetyObservation,
  first_episode_cost,
  mean_episode_cost,
  safety_statistics,
)
from hrljax.types import Transition


def tiny_config(**overrides):
  config = pl.get_config()
  config.num_envs = 4
  config.num_steps = 20
  config.total_timesteps = 4 * 20 * 4
  config.update_epochs = 1
  config.num_minibatches = 2
  config.hidden_sizes = (16, 16)
  config.update(overrides)
  return config


def make_agent(**overrides):
  config = tiny_config(**overrides)
  env, env_params = pl.make_env(config)
  return pl.PPOLagrangianAgent.create(jax.random.key(0), envs.spec(env.env, env_params), config)


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("multiplier", "adam", "config.multiplier: expected one of"),
    ("lagrange_optimizer", "rmsprop", "config.lagrange_optimizer: expected one of"),
    ("cost_limit", -1.0, "config.cost_limit: expected a finite number >= 0"),
    ("lagrange_learning_rate", 0.0, "config.lagrange_learning_rate: expected a finite number > 0"),
    ("pid_delay", 0, "config.pid_delay: expected an integer > 0"),
    ("pid_p_ema_alpha", 1.0, r"config.pid_p_ema_alpha: expected a number in \[0, 1\)"),
    ("cost_gamma", 1.5, "config.cost_gamma: expected a number in"),
    ("shield", "qp", "config.shield: expected one of"),
    (
      "env_name",
      "CartPole-v1",
      r"config.env_name: expected an environment reporting info\['cost'\]",
    ),
  ],
)
def test_validate_config_names_the_field(field, value, message):
  config = tiny_config()
  config[field] = value
  with pytest.raises(ConfigError, match=message):
    pl.validate_config(config)


def test_validate_config_rejects_shield_on_other_environments():
  config = tiny_config(shield="cbf", env_name="SafeCartPole-v0")
  with pytest.raises(ConfigError, match="config.shield: the CBF shield needs one of"):
    pl.validate_config(config)


def test_defaults_are_omnisafes():
  """d = 25, lam_init 0.001, Adam 0.035 (OmniSafe PPOLag); PID 0.1/0.01/0.01,
  delay 10, EMAs 0.95, sum normalisation (OmniSafe CPPOPID); gamma_c 0.99, lambda_c 0.95."""
  config = pl.get_config()
  assert (
    config.cost_limit,
    config.lagrange_init,
    config.lagrange_optimizer,
    config.lagrange_learning_rate,
  ) == (25.0, 0.001, "adam", 0.035)
  assert (config.pid_kp, config.pid_ki, config.pid_kd, config.pid_delay) == (0.1, 0.01, 0.01, 10)
  assert (config.pid_p_ema_alpha, config.pid_d_ema_alpha, config.pid_normalisation) == (
    0.95,
    0.95,
    "sum",
  )
  assert (config.cost_gamma, config.cost_gae_lambda) == (0.99, 0.95)
  pl.validate_config(tiny_config())


def test_wrapper_reports_step_cost_and_episode_totals():
  """A robot started inside the central hazard and commanded to stay: cost 1 every step, the
  episode totals count up, and the auto-reset successor still carries the last step's totals."""
  config = tiny_config(env_kwargs={"start": (0.0, 0.0), "max_steps_in_episode": 3})
  env, env_params = pl.make_env(config)
  carry = rollout.reset(env, env_params, jax.random.key(0), 2)
  stay = lambda params, obs, key: (jnp.zeros((2, 2)), None)
  _, traj = rollout.rollout(env, env_params, stay, None, carry, jax.random.key(1), 4)
  np.testing.assert_array_equal(traj.next_obs.cost, np.ones((4, 2)))
  np.testing.assert_array_equal(traj.next_obs.episode_cost[:, 0], [1.0, 2.0, 3.0, 1.0])
  np.testing.assert_array_equal(traj.next_obs.episode_violations[:, 0], [1, 2, 3, 1])
  np.testing.assert_array_equal(traj.truncated[:, 0], [False, False, True, False])
  np.testing.assert_array_equal(traj.obs.episode_cost[3, 0], 0.0)  # after the reset
  assert not bool(traj.next_obs.intervened.any())
  episode_cost, valid = mean_episode_cost(traj)
  assert bool(valid) and float(episode_cost) == 3.0
  stats = safety_statistics(traj)
  assert float(stats["episode_cost_sum"]) == 6.0 and float(stats["violating_episode_sum"]) == 2.0
  assert float(stats["cost_rate"]) == 1.0


@pytest.mark.parametrize(
  "optimizer, expected",
  [
    ("sgd", 0.001 + 0.035 * (30.0 - 25.0)),  # [lam + lr (J_c - d)]_+
    ("adam", 0.001 + 0.035),  # Adam's first step has size lr (m_hat / sqrt(v_hat) = sign)
  ],
)
def test_lagrange_multiplier_step_from_config(optimizer, expected):
  agent = make_agent(multiplier="lagrange", lagrange_optimizer=optimizer)
  up = agent.update_multiplier(jnp.float32(30.0), jnp.bool_(True))
  np.testing.assert_allclose(float(up.lam), expected, rtol=1e-5)
  unchanged = agent.update_multiplier(jnp.float32(30.0), jnp.bool_(False))
  assert float(unchanged.lam) == float(agent.lam)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_multiplier_rises_above_the_limit_and_falls_to_zero_below(optimizer):
  agent = make_agent(multiplier="lagrange", lagrange_optimizer=optimizer)
  step = jax.jit(lambda agent, jc: agent.update_multiplier(jc, jnp.bool_(True)))
  lams = []
  for _ in range(5):
    agent = step(agent, jnp.float32(40.0))
    lams.append(float(agent.lam))
  assert all(b > a for a, b in zip([0.001] + lams, lams)), lams
  for _ in range(60):
    agent = step(agent, jnp.float32(0.0))
    assert float(agent.lam) >= 0.0
  assert float(agent.lam) == 0.0


def test_pid_multiplier_follows_the_hand_computed_sequence():
  """The PID table of `test_safety.py` (OmniSafe CPPOPID defaults, delay 10): J_c = 50, 40, 30, 20, 10."""
  agent = make_agent(multiplier="pid")
  lams = []
  for jc in (50.0, 40.0, 30.0, 20.0, 10.0):
    agent = agent.update_multiplier(jnp.float32(jc), jnp.bool_(True))
    lams.append(float(agent.lam))
  np.testing.assert_allclose(lams, [0.401, 0.6385, 0.716625, 0.638344, 0.406477], atol=1e-5)


def test_no_multiplier_stays_zero():
  agent = make_agent(multiplier="none")
  assert float(agent.update_multiplier(jnp.float32(100.0), jnp.bool_(True)).lam) == 0.0


def _loss_batch(num=8):
  obs = jax.random.normal(jax.random.key(3), (num, 10))
  reward = pl.Batch(
    obs=obs,
    action=jax.random.normal(jax.random.key(4), (num, 2)),
    log_prob=jnp.full((num,), -2.0),
    value=jnp.zeros(num),
    advantage=jnp.linspace(-1.0, 1.0, num),
    target=jnp.ones(num),
  )
  return pl.CostBatch(
    reward=reward,
    cost_value=jnp.zeros(num),
    cost_advantage=jnp.linspace(1.0, -1.0, num) ** 2,
    cost_target=jnp.ones(num),
  )


def test_loss_uses_the_combined_advantage():
  """The policy term equals PPO's on the hand-combined advantage (A_r standardised, A_c
  centred, (A_r - lam A_c) / (1 + lam)); lam gets no gradient; with lam = 0 it is PPO's."""
  from hrljax.agents import common

  agent = make_agent()
  batch = _loss_batch()
  lam = jnp.float32(0.5)
  adv_r = np.asarray(batch.reward.advantage, np.float64)
  adv_r = (adv_r - adv_r.mean()) / (adv_r.std() + 1e-8)
  adv_c = np.asarray(batch.cost_advantage, np.float64)
  adv_c = adv_c - adv_c.mean()
  combined = (adv_r - 0.5 * adv_c) / 1.5
  # PPO's objective on advantages that arrive already standardised and combined.
  loss_config = ml_collections.FrozenConfigDict(
    {**agent.config.as_configdict().to_dict(), "normalize_advantages": False}
  )
  expected, _ = common.ppo_objective(
    agent.params["actor_critic"],
    agent.network,
    batch.reward._replace(advantage=jnp.asarray(combined, jnp.float32)),
    loss_config,
  )
  total, metrics = pl.ppo_lagrangian_objective(
    agent.params, agent.network, agent.cost_network, batch, lam, agent.config
  )
  np.testing.assert_allclose(
    float(total - 0.5 * metrics["cost_value_loss"]), float(expected), rtol=1e-5
  )
  grad_lam = jax.grad(
    lambda l: pl.ppo_lagrangian_objective(
      agent.params, agent.network, agent.cost_network, batch, l, agent.config
    )[0]
  )(lam)
  assert float(grad_lam) == 0.0
  ppo_total, _ = common.ppo_objective(
    agent.params["actor_critic"], agent.network, batch.reward, agent.config
  )
  zero_total, zero_metrics = pl.ppo_lagrangian_objective(
    agent.params, agent.network, agent.cost_network, batch, jnp.float32(0.0), agent.config
  )
  np.testing.assert_allclose(
    float(zero_total - 0.5 * zero_metrics["cost_value_loss"]), float(ppo_total), rtol=1e-5
  )


def test_cost_gae_bootstraps_on_truncation_not_on_termination():
  """Two environments, one step each with cost 1: the cost target adds gamma_c V_c(s') only for
  the truncated one."""
  agent = make_agent()
  obs = jax.random.normal(jax.random.key(5), (1, 2, 10))
  next_obs = jax.random.normal(jax.random.key(6), (1, 2, 10))
  wrap = lambda o, cost: SafetyObservation(
    obs=o,
    cost=cost,
    episode_cost=cost,
    episode_violations=jnp.ones((1, 2), jnp.int32),
    intervened=jnp.zeros((1, 2), bool),
  )
  traj = Transition(
    obs=wrap(obs, jnp.zeros((1, 2))),
    action=jnp.zeros((1, 2, 2)),
    reward=jnp.zeros((1, 2)),
    terminated=jnp.array([[True, False]]),
    truncated=jnp.array([[False, True]]),
    next_obs=wrap(next_obs, jnp.ones((1, 2))),
    policy_extras=(jnp.zeros((1, 2)), jnp.zeros((1, 2))),
    episode_return=jnp.zeros((1, 2)),
    episode_length=jnp.ones((1, 2), jnp.int32),
  )
  batch = pl.make_batch(agent, traj, agent.config)
  v = lambda o: np.asarray(agent.cost_network.apply(agent.params["cost_critic"], o[0]))
  np.testing.assert_allclose(batch.cost_target, [1.0, 1.0 + 0.99 * v(next_obs)[1]], rtol=1e-5)
  np.testing.assert_allclose(batch.cost_value, v(obs), rtol=1e-6)


def test_smoke_run_multiplier_rises_and_is_deterministic():
  """A robot started inside a hazard pays cost every step; with d = 1 the multiplier must rise
  at every update that saw an episode end. Same seed, same numbers."""
  config = tiny_config(
    multiplier="lagrange",
    lagrange_optimizer="sgd",
    cost_limit=1.0,
    env_kwargs={"start": (0.0, 0.0), "max_steps_in_episode": 10},
  )
  pl.validate_config(config)
  train = jax.jit(pl.make_train(config))
  state, metrics = train(jax.random.key(0))
  _, again = train(jax.random.key(0))
  for key in metrics:
    np.testing.assert_array_equal(metrics[key], again[key])
  assert set(metrics) >= {
    "loss",
    "cost_value_loss",
    "lagrange_multiplier",
    "episode_cost_sum",
    "episode_return_sum",
    "episodes",
    "cost_rate",
    "violating_steps",
    "violating_episode_sum",
    "intervention_rate",
  }
  lam = np.asarray(metrics["lagrange_multiplier"])
  episode_cost = metrics["episode_cost_sum"] / metrics["episodes"]
  assert np.all(metrics["episodes"] > 0) and np.all(episode_cost > 1.0), episode_cost
  assert np.all(np.diff(np.concatenate([[0.001], lam])) > 0), lam
  np.testing.assert_allclose(lam[0], 0.001 + 0.035 * (episode_cost[0] - 1.0), rtol=1e-5)
  assert float(state.agent.lam) == lam[-1]
  assert np.all(metrics["intervention_rate"] == 0.0)


@pytest.mark.parametrize(
  "name, agent, multiplier, shield",
  [
    ("ppo_pointhazard", "ppo_lagrangian", "none", "none"),
    ("ppo_lagrangian_pointhazard", "ppo_lagrangian", "lagrange", "none"),
    ("ppo_pid_lagrangian_pointhazard", "ppo_lagrangian", "pid", "none"),
    ("shielded_ppo_pointhazard", "ppo_lagrangian", "none", "cbf"),
  ],
)
def test_pointhazard_configs_validate_and_resolve(
  name, agent, multiplier, shield, experiment_config
):
  from hrljax import agents

  config = experiment_config(name)
  assert (config.agent, config.multiplier, config.shield) == (agent, multiplier, shield)
  assert (config.env_name, config.cost_limit) == ("PointHazard-v0", 1.0)
  agents.get(config.agent).validate_config(config)


# Unconstrained PPO (`ppo_pointhazard.py`, `experiments/safety_table.py`, seeds 0-2): 73,642 /
# 73,775 / 73,423 violating steps in training, greedy evaluation return 2.909 and cost 9.
BASELINE_VIOLATIONS = 73_613  # mean over seeds 0-2
BASELINE_RETURN = 2.909
BASELINE_EVAL_COST = 9.0


@pytest.mark.learning
@pytest.mark.optimised
@pytest.mark.parametrize("name", ["ppo_lagrangian_pointhazard", "ppo_pid_lagrangian_pointhazard"])
def test_lagrangian_configs_cut_violations_and_keep_the_return(name, experiment_config):
  """The full `<name>.py` config (d = 1, 240k steps), seed 0 from the CLI's keys, against the
  issue's thresholds as set in `experiments/results/SAFETY.md`: a large factor is 10x fewer
  violating steps in training and a tenth of the baseline's evaluation cost, most of the return
  is 80% of the baseline's greedy return.

  Measured with exactly this run (one seed jitted alone): PPO-Lag seeds 0 / 1 / 2: 5,186 / 5,584
  / 6,048 violating steps, greedy return 2.891 / 2.927 / 2.892, cost 0; PID-Lag 4,950 / 4,434 /
  4,599, return 2.924 / 2.913 / 2.882, cost 0 (the detour around the central hazard). With d = 5
  (the previous configs) both stayed on the straight path: 25,000-47,000 violating steps, cost 8-9.

  This test compiles with `LEARNING_COMPILE` (`optimised`: LLVM at -O1, which here costs less in
  compile time than it saves in the run); it changes the last bits of transcendental functions,
  so the run is not bit for bit the measured one, and it passes there too.
  """
  config = experiment_config(name)
  learner = pl.make_learner(config)
  init_key, eval_key = jax.random.split(jax.random.key(0))
  state, metrics = jax.jit(pl.make_train(config))(init_key)
  evaluation = jax.jit(learner.evaluate)(state, eval_key)
  violations = float(metrics["violating_steps"].sum())
  assert violations <= BASELINE_VIOLATIONS / 10, violations
  assert float(evaluation["eval_cost"]) <= BASELINE_EVAL_COST / 10, evaluation
  assert float(evaluation["eval_return"]) >= 0.8 * BASELINE_RETURN, evaluation
  assert float(metrics["lagrange_multiplier"][-1]) > 1.0


def test_first_episode_cost_counts_each_environments_first_episode_only():
  # Env 0 ends at step 1 (cost 1 + 0.5, one more costly step after the reset is ignored), env 1
  # never ends (all its cost counts), env 2 ends at step 0 with no cost.
  cost = jnp.asarray([[1.0, 0.0, 0.0], [0.5, 2.0, 0.0], [3.0, 0.0, 1.0]])
  done = jnp.asarray([[False, False, True], [True, False, False], [False, False, True]])
  next_obs = SafetyObservation(
    obs=jnp.zeros((3, 3, 1)),
    cost=cost,
    episode_cost=jnp.zeros((3, 3)),
    episode_violations=jnp.zeros((3, 3), jnp.int32),
    intervened=jnp.zeros((3, 3), bool),
  )
  zeros = jnp.zeros((3, 3))
  traj = Transition(
    obs=next_obs,
    action=zeros,
    reward=zeros,
    terminated=done,
    truncated=jnp.zeros((3, 3), bool),
    next_obs=next_obs,
    policy_extras=None,
    episode_return=zeros,
    episode_length=zeros,
  )
  stats = first_episode_cost(traj)
  np.testing.assert_allclose(stats["eval_cost"], (1.5 + 2.0 + 0.0) / 3, rtol=1e-6)
  np.testing.assert_allclose(stats["eval_violations"], (2 + 1 + 0) / 3, rtol=1e-6)
  np.testing.assert_allclose(stats["eval_violation_rate"], 2 / 3, rtol=1e-6)
