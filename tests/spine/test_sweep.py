"""Hyperparameter sweeps: `config.sweep` values trained with every seed in one vmapped program.

The spine writes each member's values into the optimizer states that inject them
(`sweeps.set_hyperparameters`), and every record carries the member's seed and values. A toy
learner with an injected SGD checks the bookkeeping bit for bit (records, restore, resume); the
PPO test is the learning-rate sweep of two seeds against the four separate runs.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from hrljax import logging as hlog
from hrljax import sweep as sweeps
from hrljax import training
from hrljax.agents import option_critic, ppo, ppo_lagrangian, sac
from hrljax.logging import read_jsonl

WALL_CLOCK = ("wall_time", "env_steps_per_second")


def toy_config(**run_fields) -> ml_collections.ConfigDict:
  config = training.run_config(**run_fields)
  config.agent = "toy"
  config.learning_rate = 0.1
  return config


def toy_learner(config, num_updates: int = 4) -> training.Learner:
  """SGD with an injected learning rate on a random quadratic per update."""
  tx = optax.inject_hyperparams(optax.sgd)(learning_rate=config.learning_rate)

  def init(key):
    w = jax.random.normal(key, (3,))
    return {"w": w, "opt_state": tx.init(w), "key": key}

  def step(state):
    key, sub = jax.random.split(state["key"])
    target = jax.random.normal(sub, (3,))
    loss, grad = jax.value_and_grad(lambda w: jnp.sum((w - target) ** 2))(state["w"])
    updates, opt_state = tx.update(grad, state["opt_state"], state["w"])
    return {"w": optax.apply_updates(state["w"], updates), "opt_state": opt_state, "key": key}, {
      "loss": loss
    }

  def evaluate(state, key):
    return {"eval_return": -jnp.sum(state["w"] ** 2) + jax.random.uniform(key)}

  return training.Learner(init, step, evaluate, num_updates, env_steps_per_update=10)


def injected(state) -> list:
  """The `learning_rate` of every injected optimizer state in `state`."""
  is_injected = lambda n: isinstance(n, optax.InjectStatefulHyperparamsState)
  nodes = jax.tree.leaves(state, is_leaf=is_injected)
  return [
    np.asarray(n.hyperparams["learning_rate"])
    for n in nodes
    if is_injected(n) and "learning_rate" in n.hyperparams
  ]


def strip(records: list) -> list:
  return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in records]


def test_set_hyperparameters_sets_every_injected_state_and_names_a_missing_one():
  adam = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
  scale = optax.inject_hyperparams(optax.scale)(step_size=2.0)
  params = jnp.zeros(2)
  state = {"policy": (adam.init(params),), "value": adam.init(params), "other": scale.init(params)}
  out = sweeps.set_hyperparameters(state, {"learning_rate": 3e-4})
  assert [float(v) for v in injected(out)] == [np.float32(3e-4)] * 2
  assert float(out["other"].hyperparams["step_size"]) == 2.0
  assert jax.tree.structure(out) == jax.tree.structure(state)
  with pytest.raises(sweeps.NotInjected, match="no optimizer state injects 'momentum'"):
    sweeps.set_hyperparameters(state, {"momentum": 0.9})


def test_a_sweep_trains_each_value_with_each_seed_and_each_member_equals_its_own_run(tmp_path):
  """Members are value-major (each learning rate with every seed), start from their seed's key,
  carry `seed` and `learning_rate` in every record, and reproduce the runs one by one."""
  config = toy_config(log_every=2, checkpoint_every=4, eval_every=2, seeds=(3, 0))
  config.sweep.learning_rate = (0.1, 0.3)
  together = str(tmp_path / "together")
  state = training.train(toy_learner(config), config, together)
  members = [(0.1, 3), (0.1, 0), (0.3, 3), (0.3, 0)]
  assert [float(v) for v in injected(state)[0]] == [np.float32(lr) for lr, _ in members]
  records = read_jsonl(together)
  assert [(r["learning_rate"], r["seed"]) for r in records if r["update"] == 4] == members * 2
  for index, (lr, seed) in enumerate(members):
    if index in (1, 2):  # two of the four runs alone: both learning rates, both seeds
      continue
    alone = str(tmp_path / f"alone_{lr}_{seed}")
    single = toy_config(log_every=2, checkpoint_every=4, eval_every=2, seeds=(seed,))
    single.learning_rate = lr
    final = training.train(toy_learner(single), single, alone)
    np.testing.assert_array_equal(state["w"][index], final["w"])
    mine = [r for r in records if (r["learning_rate"], r["seed"]) == (lr, seed)]
    assert strip([{k: v for k, v in r.items() if k != "learning_rate"} for r in mine]) == strip(
      read_jsonl(alone)
    )
  restored = training.restore(toy_learner(config), config, together)
  np.testing.assert_array_equal(restored["w"], state["w"])
  ids = [(seed, lr) for lr, seed in members]
  assert [key for key, _ in training.seed_states(config, restored)] == ids
  final_evaluation = training.final_evaluation(toy_learner(config), config, restored)
  assert list(final_evaluation) == ids
  last = [r for r in records if r["phase"] == "eval" and r["update"] == 4][-4:]
  assert [m["eval_return"] for m in final_evaluation.values()] == [r["eval_return"] for r in last]


def test_a_resumed_sweep_equals_the_uninterrupted_one(tmp_path):
  """The members' learning rates travel in the checkpoint with the rest of the state."""
  config = toy_config(log_every=2, checkpoint_every=2, seeds=(0, 1))
  config.sweep.learning_rate = (0.05, 0.2)
  full = str(tmp_path / "full")
  final_full = training.train(toy_learner(config, 4), config, full)
  resumed = str(tmp_path / "resumed")
  training.train(toy_learner(config, 2), config, resumed)
  final_resumed = training.train(toy_learner(config, 4), config, resumed)
  np.testing.assert_array_equal(final_resumed["w"], final_full["w"])
  assert strip(read_jsonl(resumed)) == strip(read_jsonl(full))


@pytest.mark.parametrize(
  "values, sweepable, message",
  [
    (("abc",), None, r"config.sweep.learning_rate: expected distinct finite numbers > 0"),
    ((1e-4, 1e-4), None, r"config.sweep.learning_rate: expected distinct finite numbers > 0"),
    ((0.0,), None, r"config.sweep.learning_rate: expected distinct finite numbers > 0"),
    ((True,), None, r"config.sweep.learning_rate: expected distinct finite numbers > 0"),
    (
      (1e-4, 3e-4),
      (),
      r"^config.sweep.learning_rate: agent 'toy' cannot sweep it; sweepable: nothing$",
    ),
  ],
)
def test_validate_run_config_names_a_sweep_that_cannot_run(values, sweepable, message):
  config = toy_config()
  config.sweep.learning_rate = values
  with pytest.raises(ValueError, match=message):
    training.validate_run_config(config, sweepable)
  config.sweep.learning_rate = None  # not swept: nothing to check
  training.validate_run_config(config, ())


def test_a_sweep_of_an_unknown_or_not_injected_hyperparameter_stops_before_any_work(tmp_path):
  config = toy_config()
  with config.sweep.unlocked():
    config.sweep.gamma = (0.9, 0.99)
  with pytest.raises(ValueError, match=r"^config.sweep.gamma: not a sweepable hyperparameter"):
    training.validate_run_config(config)
  plain = toy_learner(toy_config())._replace(init=lambda key: {"w": jnp.zeros(3), "key": key})
  config = toy_config(seeds=(0, 1))
  config.sweep.learning_rate = (0.1, 0.2)
  with pytest.raises(ValueError, match=r"^config.sweep.learning_rate: agent 'toy' cannot sweep it"):
    training.train(plain, config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


def test_host_learners_cannot_sweep(tmp_path):
  config = toy_config()
  config.sweep.learning_rate = (0.1, 0.2)
  learner = training.HostLearner(None, None, None, 1, 1, None)
  with pytest.raises(ValueError, match="config.sweep.learning_rate: a host-driven agent"):
    training.run(learner, config, str(tmp_path))


def test_the_ppo_family_sweeps_its_learning_rate_and_the_record_readers_know_the_field():
  assert ppo.SWEEPABLE == ppo_lagrangian.SWEEPABLE == ("learning_rate",)
  assert not hasattr(sac, "SWEEPABLE") and not hasattr(option_critic, "SWEEPABLE")
  assert hlog.SWEPT_FIELDS == sweeps.SWEEPABLE


def test_seed_curves_tell_the_members_of_a_sweep_apart():
  records = [
    {"seed": seed, "learning_rate": lr, "env_steps": step, "loss": lr * step + seed}
    for step in (1, 2)
    for lr in (0.1, 0.3)
    for seed in (0, 1)
  ]
  curves = hlog.seed_curves(records, "env_steps", "loss")
  assert list(curves) == [(0, 0.1), (1, 0.1), (0, 0.3), (1, 0.3)]
  assert curves[(1, 0.3)] == ([1, 2], [1.3, 1.6])
  groups = hlog.sweep_groups(curves)  # what a plot draws as one line per swept value
  assert {values: sorted(group) for values, group in groups.items()} == {
    (0.1,): [0, 1],
    (0.3,): [0, 1],
  }
  assert hlog.swept_fields(records) == ("learning_rate",)
  assert hlog.sweep_groups(hlog.seed_curves([{"x": 1, "y": 2}], "x", "y")) == {(): {0: ([1], [2])}}


def tiny_ppo(**fields) -> ml_collections.ConfigDict:
  """Three PPO CartPole updates of 4 environments x 32 steps, a record after each."""
  config = ppo.get_config()
  config.total_timesteps, config.num_steps = 3 * 4 * 32, 32
  config.update_epochs = config.num_minibatches = 2
  config.log_every, config.checkpoint_every = 1, 3
  for name, value in fields.items():
    config[name] = value
  return config


def test_a_ppo_learning_rate_sweep_of_two_seeds_gives_the_numbers_of_the_separate_runs(
  tmp_path,
):
  """One program trains learning rates 1e-3 and 3e-3 with seeds 0 and 1. A member's metrics after
  every update are those of its own run (`--config.learning_rate=... --config.seeds=s`): checked
  for two of the four members, (1e-3, 0) and (3e-3, 1), which cover both rates and both seeds
  (the members are slices of one vmapped program; the toy sweep test does the same).

  Not bit for bit: a vmapped update rounds a few float32 ulps apart from the unbatched one, as
  several seeds without a sweep do (measured: up to 2e-7 relative, and 1e-7 absolute on
  `policy_loss` and `approx_kl`, near-zero means of terms of order 1), hence rtol and atol 1e-6.
  Evaluation is left out to keep the test short (the toy sweep test checks it)."""

  def learner(config):
    return ppo.make_learner(config)._replace(evaluate=None)

  config = tiny_ppo(seeds=(0, 1))
  config.sweep.learning_rate = (1e-3, 3e-3)
  training.train(learner(config), config, str(tmp_path / "sweep"))
  together = [r for r in read_jsonl(str(tmp_path / "sweep")) if r["phase"] == "train"]
  curves = {}
  for lr in (1e-3, 3e-3):
    for seed in (0, 1):
      mine = [r for r in together if (r["learning_rate"], r["seed"]) == (lr, seed)]
      assert [r["update"] for r in mine] == [1, 2, 3]
      curves[lr, seed] = [r["loss"] for r in mine]
      if (lr, seed) not in ((1e-3, 0), (3e-3, 1)):  # two runs alone: both rates, both seeds
        continue
      single = tiny_ppo(seeds=(seed,), learning_rate=lr)
      training.train(learner(single), single, str(tmp_path / f"{lr}_{seed}"))
      alone = [r for r in read_jsonl(str(tmp_path / f"{lr}_{seed}")) if r["phase"] == "train"]
      assert [r["update"] for r in alone] == [1, 2, 3]
      metrics = sorted(k for k in alone[0] if k not in ("phase", "seed", "update", *WALL_CLOCK))
      assert "loss" in metrics and "episode_return" in metrics
      for name in metrics:
        np.testing.assert_allclose(
          [r[name] for r in mine], [r[name] for r in alone], rtol=1e-6, atol=1e-6, err_msg=name
        )
  assert curves[1e-3, 0] != curves[3e-3, 0] and curves[1e-3, 1] != curves[3e-3, 1]
