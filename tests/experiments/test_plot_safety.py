"""Tests of experiments.plot_safety on tiny synthetic run directories: the per-run numbers (final
return and cost over the last 10% of updates, cumulative training cost), the agent labels, the
table, the scatter PNG from the command line, and the episode path of a restored Bresa agent
(one seed of a run of several)."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments import plot_safety
from hrljax import envs
from hrljax.agents import recovery_rl
from hrljax.checkpoint import Checkpointer
from tests.script_in_process import run_module

PNG = b"\x89PNG\r\n\x1a\n"


def write_run(directory, config, records):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(config, f)
  with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")
  return str(directory)


def synthetic_records(returns, costs, episodes, cost_rate, steps_per_update=10, seed=0):
  """One train record per update 1..U, then an eval record, all of seed `seed`."""
  records = []
  for i, (r, c, e) in enumerate(zip(returns, costs, episodes)):
    update = i + 1
    records.append(
      {
        "phase": "train",
        "seed": seed,
        "update": update,
        "env_steps": update * steps_per_update,
        "episode_return": r,
        "episode_cost": c,
        "episodes": e,
        "cost_per_step": cost_rate,
      }
    )
  records.append(
    {"phase": "eval", "seed": seed, "update": len(returns), "eval_return": 2.5, "eval_cost": 0.5}
  )
  return records


def test_summary_weights_final_episodes_and_integrates_the_cost_rate(tmp_path):
  # 20 updates: the last 10% are updates 19 and 20 (2 and 6 episodes), the rest is noise.
  returns = [0.0] * 18 + [1.0, 3.0]
  costs = [50.0] * 18 + [4.0, 0.0]
  episodes = [1.0] * 18 + [2.0, 6.0]
  run = write_run(
    tmp_path / "a",
    {"agent": "recovery_rl", "reflex": True, "control_steps": 10, "seeds": [2]},
    synthetic_records(returns, costs, episodes, cost_rate=0.25, seed=2),
  )
  [s] = plot_safety.summarize_run(run)
  assert s.label == "bresa" and s.seed == 2
  assert s.episode_return == pytest.approx((2 * 1.0 + 6 * 3.0) / 8)  # 2.5
  assert s.episode_cost == pytest.approx(2 * 4.0 / 8)  # 1.0
  assert s.training_cost == pytest.approx(0.25 * 200)  # rate x 20 updates x 10 steps
  assert (s.eval_return, s.eval_cost) == (2.5, 0.5)


def test_chunks_without_episodes_do_not_count_and_missing_metrics_are_nan(tmp_path):
  records = [
    {
      "phase": "train",
      "update": u,
      "env_steps": 100 * u,
      "episodes": 0.0,
      "episode_return": float("nan"),
    }
    for u in range(1, 11)
  ]
  records[-1].update(episodes=4.0, episode_return=2.0)
  [s] = plot_safety.summarize_run(write_run(tmp_path / "b", {"agent": "sac"}, records))
  assert s.episode_return == 2.0
  assert np.isnan(s.episode_cost) and np.isnan(s.training_cost) and np.isnan(s.eval_return)


@pytest.mark.parametrize(
  "config, label",
  [
    ({"agent": "recovery_rl", "reflex": False, "control_steps": 1}, "sac"),
    ({"agent": "recovery_rl", "reflex": False, "control_steps": 10}, "two-rate sac"),
    ({"agent": "recovery_rl", "reflex": True}, "recovery_rl"),
    ({"agent": "recovery_rl", "reflex": True, "control_steps": 10}, "bresa"),
    ({"agent": "ppo_lagrangian", "multiplier": "none"}, "ppo"),
    ({"agent": "ppo_lagrangian", "multiplier": "pid"}, "ppo_pid_lagrangian"),
    ({"agent": "ppo_lagrangian", "multiplier": "none", "shield": "cbf"}, "shielded_ppo"),
    (
      {"agent": "ppo_lagrangian", "multiplier": "pid", "shield": "cbf"},
      "shielded_ppo_pid_lagrangian",
    ),
  ],
)
def test_agent_labels(config, label):
  assert plot_safety.agent_label(config) == label


def test_command_line_prints_the_table_and_writes_the_scatter(tmp_path):
  """Two SAC seeds in one run directory (`--config.seeds=0,1`), Recovery RL in another."""
  sac = [
    record
    for seed, cost in ((0, 9.0), (1, 7.0))
    for record in synthetic_records([2.9] * 10, [cost] * 10, [1.0] * 10, 0.1, seed=seed)
  ]
  runs = [
    write_run(tmp_path / "sac", {"agent": "recovery_rl", "reflex": False, "seeds": [0, 1]}, sac),
    write_run(
      tmp_path / "rr0",
      {"agent": "recovery_rl", "reflex": True, "seeds": [0]},
      synthetic_records([2.9] * 10, [0.0] * 10, [1.0] * 10, 0.1),
    ),
  ]
  out = tmp_path / "scatter.png"
  result = run_module(
    "experiments.plot_safety", "--runs=" + ",".join(runs), f"--out={out}", "--cost_limit=5"
  )
  assert result.code == 0, result.err
  rows = {
    line.split("|")[1].strip(): line for line in result.out.splitlines() if line.startswith("| ")
  }
  assert "| 2 | 2.9 ± 0 | 8 ± 1 |" in rows["sac"]  # cost mean 8, population std 1
  assert "| 1 | 2.9 ± 0 | 0 ± 0 |" in rows["recovery_rl"]
  assert out.read_bytes()[:8] == PNG


def test_missing_files_and_wrong_agents_are_explained(tmp_path):
  with pytest.raises(FileNotFoundError, match="no config.json"):
    plot_safety.summarize_run(str(tmp_path))
  run = write_run(tmp_path / "c", {"agent": "ppo_lagrangian"}, [{"phase": "eval"}])
  with pytest.raises(ValueError, match="expected training records"):
    plot_safety.summarize_run(run)
  with pytest.raises(
    ValueError, match="config.agent: expected 'recovery_rl', got 'ppo_lagrangian'"
  ):
    plot_safety.restore_agent(run)


def test_path_of_a_restored_bresa_agent(tmp_path):
  """A checkpointed two-seed Bresa run state restores to the agent of the seed asked for, and
  its greedy episode is drawn: 40 control steps (the time limit), positions chained step to step,
  decisions every K = 10."""
  config = recovery_rl.bresa_config()
  config.update(
    dict(
      env_name="PointHazard-v0",
      hidden_sizes=(8,),
      risk_hidden_sizes=(8,),
      num_envs=1,
      buffer_size=16,
      risk_buffer_size=16,
      risk_epsilon=0.0,
      seeds=(3, 4),
    )
  )
  config.env_kwargs = ml_collections.ConfigDict({"max_steps_in_episode": 40})
  workdir = write_run(tmp_path / "bresa", json.loads(config.to_json()), [])
  keys = jax.vmap(lambda s: jax.random.split(jax.random.key(s))[0])(jnp.asarray([3, 4]))
  state = jax.jit(jax.vmap(recovery_rl.make_learner(config).init))(keys)
  checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"))
  checkpointer.save(1, state)
  checkpointer.close()
  agent = plot_safety.restore_agent(workdir, seed=4)
  for a, b in zip(jax.tree.leaves(agent.risk_params), jax.tree.leaves(state.agent.risk_params)):
    np.testing.assert_array_equal(a, b[1])
  with pytest.raises(ValueError, match="path_run_seed"):
    plot_safety.restore_agent(workdir, seed=5)
  path = plot_safety.episode_path(agent, jax.random.key(1))
  assert path.positions.shape == (41, 2) and path.intervened.shape == (40,)
  np.testing.assert_array_equal(np.flatnonzero(path.decision_start), np.arange(0, 40, 10))
  env, params = envs.make("PointHazard-v0")
  np.testing.assert_allclose(path.positions[0], params.start, atol=1e-6)
  np.testing.assert_allclose(path.goal, params.goal, atol=1e-6)
  np.testing.assert_allclose(path.hazard_centers, params.hazard_centers, atol=1e-6)
  # ε = 0 and an untrained sigmoid critic (risk about 0.5): the reflex fires at every step.
  assert path.intervened.all()
  out = plot_safety.draw_path(path, str(tmp_path / "path.png"), title="test")
  with open(out, "rb") as f:
    assert f.read(8) == PNG


def test_a_run_restarted_from_scratch_counts_its_repeated_updates_once(tmp_path):
  first = synthetic_records([1.0] * 10, [2.0] * 10, [1.0] * 10, cost_rate=0.5)
  killed = [r for r in first if r["phase"] == "train"][:3]  # logged, then the run restarted
  [s] = plot_safety.summarize_run(
    write_run(tmp_path / "d", {"agent": "recovery_rl"}, killed + first)
  )
  assert s.training_cost == pytest.approx(0.5 * 100)
