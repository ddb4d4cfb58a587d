"""Tests of hrljax.training: chunk summaries, divergence stops, resuming, and the logger."""

import importlib.metadata
import json
import math
import os
import subprocess

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import struct

from hrljax import chunk_metrics, provenance, training
from hrljax import warm_start as ws
from hrljax.checkpoint import Checkpointer, CheckpointMismatch
from hrljax.logging import MetricsLogger, read_jsonl


class Counter(struct.PyTreeNode):
  x: jax.Array
  n: jax.Array  # updates done
  key: jax.Array


def counting_learner(num_updates: int, nan_at: int = 0, episode_every: int = 1) -> training.Learner:
  """x grows by a random amount per update; x and the loss become NaN from update `nan_at` on.
  An episode (return x, cost 2x) ends at every `episode_every`-th update."""

  def init(key):
    return Counter(x=jnp.zeros(()), n=jnp.zeros((), jnp.int32), key=key)

  def step(state):
    key, sub = jax.random.split(state.key)
    n = state.n + 1
    poisoned = (nan_at > 0) & (n >= nan_at)
    x = jnp.where(poisoned, jnp.nan, state.x + jax.random.uniform(sub))
    ended = (n % episode_every == 0).astype(jnp.float32)
    return Counter(x=x, n=n, key=key), {
      "loss": x,
      "episode_return_sum": ended * x,
      "episode_cost_sum": ended * 2 * x,
      "episodes": ended,
    }

  def evaluate(state, key):
    del key
    return {"eval_return": state.x}

  return training.Learner(init, step, evaluate, num_updates, env_steps_per_update=10)


def run_config(agent: str = "counter", **run_fields) -> ml_collections.ConfigDict:
  """An experiment config for a toy learner: the spine's run-level fields and an agent name."""
  config = training.run_config(**run_fields)
  config.agent = agent
  return config


def test_summarize_means_and_episode_weighted_returns():
  sums = {
    "loss": np.float32(6.0),
    "episode_return_sum": np.float32(30.0),
    "episodes": np.float32(3.0),
  }
  out = chunk_metrics.summarize(sums, num_updates=4)
  assert out == {"loss": 1.5, "episode_return": 10.0, "episodes": 3.0}
  assert math.isnan(
    chunk_metrics.summarize({"episode_return_sum": 0.0, "episodes": 0.0}, 2)["episode_return"]
  )


def test_run_logs_every_chunk_checkpoints_and_evaluates(tmp_path, capsys):
  workdir = str(tmp_path / "run")
  state = training.train(
    counting_learner(25), run_config(log_every=10, checkpoint_every=20, seeds=(1,)), workdir
  )
  records = read_jsonl(workdir)
  train_records = [r for r in records if r["phase"] == "train"]
  assert [r["update"] for r in train_records] == [10, 20, 25]
  assert [r["env_steps"] for r in train_records] == [100, 200, 250]
  assert records[-1]["phase"] == "eval" and records[-1]["eval_return"] == pytest.approx(
    float(state.x)
  )
  assert Checkpointer(f"{workdir}/checkpoints").all_steps() == [20, 25]
  assert json.load(open(f"{workdir}/config.json"))["agent"] == "counter"
  environment = json.load(open(f"{workdir}/environment.json"))
  assert environment["packages"]["jax"] == jax.__version__
  assert environment["cpu"] and environment["devices"] == ["cpu"]
  assert "update 25/25" in capsys.readouterr().out


def test_resumed_run_equals_uninterrupted_run(tmp_path):
  full = str(tmp_path / "full")
  final_full = training.train(
    counting_learner(30), run_config(log_every=5, checkpoint_every=10), full
  )
  # A run that stopped after its checkpoint at update 10 (with its evaluation record logged),
  # then started again with a longer schedule in the same workdir.
  resumed_dir = str(tmp_path / "resumed")
  training.train(counting_learner(10), run_config(log_every=5, checkpoint_every=10), resumed_dir)
  final_resumed = training.train(
    counting_learner(30), run_config(log_every=5, checkpoint_every=10), resumed_dir
  )
  assert float(final_resumed.x) == float(final_full.x)
  strip = lambda rs: [
    {k: v for k, v in r.items() if k not in ("wall_time", "env_steps_per_second")} for r in rs
  ]
  assert strip(read_jsonl(resumed_dir)) == strip(read_jsonl(full))


def test_nan_stops_with_message_and_keeps_last_good_checkpoint(tmp_path):
  workdir = str(tmp_path / "nan")
  with pytest.raises(
    training.TrainingDiverged, match="update 12.*last good checkpoint is update 8"
  ):
    training.train(
      counting_learner(20, nan_at=11),
      run_config(log_every=4, checkpoint_every=4, max_checkpoints=3),
      workdir,
    )
  assert Checkpointer(f"{workdir}/checkpoints").latest_step() == 8
  assert max(r["update"] for r in read_jsonl(workdir)) == 8


def test_first_non_finite_names_metric_then_state_leaf():
  assert chunk_metrics.first_non_finite({"loss": 1.0}, {"w": jnp.ones(2)}) is None
  assert "loss" in chunk_metrics.first_non_finite({"loss": math.inf}, {"w": jnp.ones(2)})
  assert "['w']" in chunk_metrics.first_non_finite({"loss": 1.0}, {"w": jnp.array([1.0, jnp.nan])})
  # episode statistics are NaN when no episode ended: not a divergence
  assert chunk_metrics.first_non_finite({"episode_return": math.nan}, {}) is None


def test_undefined_episode_means_only_when_no_episode_ended():
  none_ended = {"loss": 1.0, "episode_cost_sum": 0.0, "episode_return_sum": 0.0, "episodes": 0.0}
  assert set(chunk_metrics.undefined_episode_means(none_ended)) == {
    "episode_cost",
    "episode_return",
  }
  assert chunk_metrics.undefined_episode_means({**none_ended, "episodes": 2.0}) == ()
  assert chunk_metrics.undefined_episode_means({"loss": 1.0}) == ()


def test_chunk_without_an_ended_episode_is_logged_not_stopped(tmp_path):
  # Episodes end every 8th update, so the chunk of updates 5-7 has none: its episode means
  # (cost included, not only return and length) are NaN, which is not a divergence.
  workdir = str(tmp_path / "sparse")
  training.train(
    counting_learner(12, episode_every=8), run_config(log_every=4, checkpoint_every=4), workdir
  )
  train_records = [r for r in read_jsonl(workdir) if r["phase"] == "train"]
  assert [r["episodes"] for r in train_records] == [0.0, 1.0, 0.0]
  assert train_records[0]["episode_cost"] is None  # the logger writes NaN as JSON null
  assert train_records[1]["episode_cost"] == pytest.approx(2 * train_records[1]["episode_return"])


def test_nan_episode_cost_of_an_ended_episode_still_stops(tmp_path):
  with pytest.raises(training.TrainingDiverged, match="episode_cost"):
    training.train(
      counting_learner(8, nan_at=3, episode_every=4),
      run_config(log_every=4, checkpoint_every=4),
      str(tmp_path / "r"),
    )


def test_a_resumed_run_neither_runs_init_nor_computes_the_warm_start(tmp_path):
  """The checkpoint replaces the initial state, so a resumed run builds only its shapes: `init`
  and the learner's warm start (a BC start can take minutes) run once, in the first run."""
  calls = {"init": 0, "warm_start": 0}

  def count(name):
    return lambda *_: calls.__setitem__(name, calls[name] + 1)

  def learner(num_updates):
    base = counting_learner(num_updates)

    def compute(key):
      jax.debug.callback(count("warm_start"))
      return jax.random.uniform(key)

    def init(key, start=None):
      jax.debug.callback(count("init"))
      state = base.init(key)
      return state.replace(x=compute(key) if start is None else start)

    return base._replace(init=init, warm_start=ws.WarmStart(compute, {"f": 1}))

  config = run_config(log_every=5, checkpoint_every=5, seeds=(0, 1))
  whole = training.train(learner(10), config, str(tmp_path / "whole"))
  cache = str(tmp_path / "cache")
  run = str(tmp_path / "run")
  training.train(learner(5), config, run, warm_start_cache=cache)
  before = dict(calls)
  assert before["init"] > 0 and before["warm_start"] > 0
  resumed = training.train(learner(10), config, run, warm_start_cache=cache)
  assert calls == before
  np.testing.assert_array_equal(resumed.x, whole.x)


def test_logger_truncates_records_a_resumed_run_rewrites(tmp_path):
  logger = MetricsLogger(str(tmp_path))
  for update in (5, 10, 15):
    logger.write({"phase": "train", "update": update, "loss": np.float32(update)})
  logger.write({"phase": "eval", "update": 15, "eval_return": 1.0})
  logger.truncate_after(10)
  assert [r["update"] for r in read_jsonl(str(tmp_path))] == [5, 10]
  logger.write({"phase": "train", "update": 15, "loss": float("nan")})
  assert read_jsonl(str(tmp_path))[-1]["loss"] is None


# ------------------------------------------------------------------------------------------------
# train_on_host: the loop of agents whose update runs host code (the language-model agents)


@struct.dataclass
class HostState:
  weight: jax.Array
  update: jax.Array


def host_learner(nan_at: int = -1, num_updates: int = 5) -> training.HostLearner:
  """Each update adds 1 to `weight`; its metric is the new weight (NaN at update `nan_at`)."""

  def step(state):
    state = HostState(state.weight + 1.0, state.update + 1)
    value = math.nan if int(state.update) == nan_at else float(state.weight)
    return state, {"weight": value, "example": f"w={float(state.weight)}"}

  return training.HostLearner(
    init=lambda seed: HostState(jnp.zeros(()), jnp.zeros((), jnp.int32)),
    step=step,
    evaluate=lambda state: {"eval_weight": float(state.weight)},
    num_updates=num_updates,
    env_steps_per_update=3,
    progress=lambda record, texts: f"update {record['update']} {texts['example']}",
  )


def test_train_on_host_logs_evaluates_checkpoints_and_resumes(tmp_path, capsys):
  config = run_config("toy", log_every=1, checkpoint_every=2, eval_every=2)
  training.train_on_host(host_learner(num_updates=3), config, str(tmp_path))
  state = training.train_on_host(host_learner(num_updates=5), config, str(tmp_path))
  assert int(state.update) == 5 and float(state.weight) == 5.0
  records = read_jsonl(str(tmp_path / "metrics.jsonl"))
  train = [r for r in records if r["phase"] == "train"]
  assert [r["update"] for r in train] == [1, 2, 3, 4, 5]
  assert [r["weight"] for r in train] == [1.0, 2.0, 3.0, 4.0, 5.0]
  assert train[-1]["env_steps"] == 15 and "example" not in train[-1]
  evals = [(r["update"], r["eval_weight"]) for r in records if r["phase"] == "eval"]
  # the first run's final evaluation (update 3) is dropped on resume, like `train`'s
  assert evals == [(0, 0.0), (2, 2.0), (4, 4.0), (5, 5.0)]
  assert "update 5 w=5.0" in capsys.readouterr().out
  assert json.load(open(tmp_path / "config.json"))["agent"] == "toy"


def test_train_on_host_stops_on_nan_and_keeps_last_good_checkpoint(tmp_path):
  config = run_config("toy", log_every=1, checkpoint_every=1)
  with pytest.raises(training.TrainingDiverged, match=r"'weight' = nan at update 3.*update 2"):
    training.train_on_host(host_learner(nan_at=3), config, str(tmp_path))
  assert Checkpointer(str(tmp_path / "checkpoints")).latest_step() == 2


def test_resuming_with_a_state_that_does_not_fit_keeps_the_run_and_its_config(tmp_path):
  workdir = str(tmp_path / "run")
  training.train(counting_learner(10), run_config(log_every=5, checkpoint_every=10), workdir)
  records = read_jsonl(workdir)

  def init_wider(key):  # the state of a changed config: x now has 3 entries
    return Counter(x=jnp.zeros(3), n=jnp.zeros((), jnp.int32), key=key)

  wider = counting_learner(20)._replace(init=init_wider)
  other = run_config("other", log_every=5, checkpoint_every=10)
  with pytest.raises(CheckpointMismatch, match="checkpoint 10 in .* does not fit"):
    training.train(wider, other, workdir, allow_config_change=True)
  assert json.load(open(f"{workdir}/config.json"))["agent"] == "counter"
  assert not os.path.exists(f"{workdir}/{provenance.HISTORY_FILE}")  # the change never held
  assert read_jsonl(workdir) == records
  assert Checkpointer(f"{workdir}/checkpoints").all_steps() == [10]


# ------------------------------------------------------------------------------------------------
# The run-level config fields and the seed axis.


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("checkpoint_every", 15, "config.checkpoint_every: expected a multiple of config.log_every"),
    ("eval_every", 15, "config.eval_every: expected a multiple of config.log_every"),
    ("eval_every", -10, "config.eval_every: expected an integer >= 0"),
    ("log_every", 0, "config.log_every: expected an integer > 0"),
    ("max_checkpoints", 0, "config.max_checkpoints: expected an integer > 0"),
    ("seeds", (), "config.seeds: expected distinct integers >= 0"),
    ("seeds", (1, 1), "config.seeds: expected distinct integers >= 0"),
    ("seeds", (-1,), "config.seeds: expected distinct integers >= 0"),
    ("seeds", (True,), "config.seeds: expected distinct integers >= 0"),
  ],
)
def test_validate_run_config_names_the_field(field, value, message):
  config = run_config(log_every=10)
  config[field] = value
  with pytest.raises(ValueError, match=message):
    training.validate_run_config(config)


def test_num_updates_is_the_budget_over_the_update_size_and_names_the_field():
  assert training.num_updates(1000, 128) == 7
  with pytest.raises(ValueError, match=r"config.budget: expected at least 128 \(one update\)"):
    training.num_updates(100, 128, field="budget")


def test_several_seeds_train_in_one_program_and_each_equals_its_own_run(tmp_path):
  """Seeds are a vmap axis: records carry their seed, and each seed's numbers are those of the
  run of that seed alone (same keys; a scalar learner, so no rounding differs)."""
  together = str(tmp_path / "together")
  state = training.train(
    counting_learner(12, episode_every=4),
    run_config(log_every=4, checkpoint_every=8, eval_every=8, seeds=(3, 0)),
    together,
  )
  assert state.x.shape == (2,)
  records = read_jsonl(together)
  for index, seed in enumerate((3, 0)):
    alone = str(tmp_path / f"alone{seed}")
    single = training.train(
      counting_learner(12, episode_every=4),
      run_config(log_every=4, checkpoint_every=8, eval_every=8, seeds=(seed,)),
      alone,
    )
    assert float(state.x[index]) == float(single.x)
    strip = lambda rs: [
      {k: v for k, v in r.items() if k not in ("wall_time", "env_steps_per_second")} for r in rs
    ]
    mine = strip([r for r in records if r["seed"] == seed])
    assert mine == strip(read_jsonl(alone))
    # evaluations at update 0 (the start of the curve), 8 (eval_every) and at the end, 12
    assert [r["update"] for r in mine if r["phase"] == "eval"] == [0, 8, 12]
  restored = training.restore(counting_learner(12), run_config(seeds=(3, 0)), together)
  assert [s for s, _ in training.seed_states(run_config(seeds=(3, 0)), restored)] == [3, 0]
  np.testing.assert_array_equal(np.asarray(restored.x), np.asarray(state.x))


def test_host_evaluate_runs_on_each_seed_slice(tmp_path):
  calls = []

  def host_evaluate(state, seed):
    calls.append((seed, np.shape(state.x)))
    return {"eval_host": float(state.x) + seed}

  learner = counting_learner(4)._replace(host_evaluate=host_evaluate)
  training.train(learner, run_config(log_every=2, checkpoint_every=2, seeds=(0, 5)), str(tmp_path))
  assert calls == [(0, ()), (5, ())]
  evals = [r for r in read_jsonl(str(tmp_path)) if r["phase"] == "eval"]
  assert [r["seed"] for r in evals] == [0, 5]
  assert evals[1]["eval_host"] == pytest.approx(evals[1]["eval_return"] + 5)


def test_host_learners_train_one_seed(tmp_path):
  with pytest.raises(ValueError, match="config.seeds: a host-driven agent trains one seed"):
    training.run(host_learner(), run_config("toy", seeds=(0, 1)), str(tmp_path))


def test_a_run_resumed_at_an_evaluation_update_keeps_that_evaluation(tmp_path):
  """The evaluation at a checkpoint's update is written before the checkpoint and dropped on
  resume (with the records after it); the resumed run writes it again, with the same numbers."""
  config = run_config(log_every=2, checkpoint_every=4, eval_every=4)
  resumed = str(tmp_path / "resumed")
  training.train(counting_learner(4), config, resumed)  # stops at the checkpoint at update 4
  training.train(counting_learner(8), config, resumed)
  whole = str(tmp_path / "whole")
  training.train(counting_learner(8), config, whole)
  strip = lambda rs: [
    {k: v for k, v in r.items() if k not in ("wall_time", "env_steps_per_second")} for r in rs
  ]
  assert strip(read_jsonl(resumed)) == strip(read_jsonl(whole))
  assert [r["update"] for r in read_jsonl(whole) if r["phase"] == "eval"] == [0, 4, 8]


def test_a_host_run_resumed_at_its_end_writes_its_final_evaluation_again(tmp_path):
  config = run_config("toy", log_every=1, checkpoint_every=1)
  training.train_on_host(host_learner(num_updates=2), config, str(tmp_path))
  before = read_jsonl(str(tmp_path / "metrics.jsonl"))
  training.train_on_host(host_learner(num_updates=2), config, str(tmp_path))
  after = read_jsonl(str(tmp_path / "metrics.jsonl"))
  assert [(r["phase"], r["update"]) for r in after] == [(r["phase"], r["update"]) for r in before]
  assert after[-1] == {**before[-1], "wall_time": after[-1]["wall_time"]}


def test_resuming_with_a_changed_config_is_refused_before_any_work_unless_allowed(tmp_path):
  workdir = str(tmp_path / "run")
  training.train(counting_learner(10), run_config(log_every=5, checkpoint_every=10), workdir)
  records = read_jsonl(workdir)
  changed = run_config(log_every=5, checkpoint_every=10, seeds=(7,))
  changed.step_size = 2.0
  refused = counting_learner(20)._replace(init=None)  # building the run state would fail
  with pytest.raises(provenance.ConfigChanged) as error:
    training.train(refused, changed, workdir)
  message = str(error.value)
  assert "config.seeds: [0] in the run, [7] now" in message
  assert "config.step_size: None in the run, 2.0 now" in message
  assert "--allow_config_change" in message
  assert read_jsonl(workdir) == records
  assert json.load(open(f"{workdir}/config.json"))["seeds"] == [0]
  # run-control fields may change freely
  training.train(counting_learner(20), run_config(log_every=10, checkpoint_every=10), workdir)
  assert not os.path.exists(os.path.join(workdir, provenance.HISTORY_FILE))
  # allowed: recorded with the update from which the new values hold
  bigger = run_config(log_every=10, checkpoint_every=10)
  bigger.step_size = 2.0
  training.train(counting_learner(30), bigger, workdir, allow_config_change=True)
  history = read_jsonl(os.path.join(workdir, provenance.HISTORY_FILE))
  assert history == [{"update": 20, "changes": {"step_size": {"from": None, "to": 2.0}}}]
  assert json.load(open(f"{workdir}/config.json"))["step_size"] == 2.0


def test_environment_records_the_code_revision(tmp_path):
  training.train(counting_learner(5), run_config(log_every=5, checkpoint_every=5), str(tmp_path))
  environment = json.load(open(tmp_path / "environment.json"))
  assert environment["hrljax_version"] == importlib.metadata.version("hrljax")
  head = subprocess.run(
    ["git", "rev-parse", "HEAD"],
    cwd=os.path.dirname(provenance.__file__),
    capture_output=True,
    text=True,
  )
  if head.returncode == 0:  # a git checkout: the commit and whether tracked files differ from it
    assert environment["git_commit"] == head.stdout.strip()
    assert isinstance(environment["git_dirty"], bool)
  else:  # an installed wheel
    assert environment["git_commit"] is None and environment["git_dirty"] is None
