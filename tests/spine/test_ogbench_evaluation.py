"""Tests of hrljax.ogbench_evaluation on OGBench's medium maze (needs the `ogbench` extra): the
five-task success rates and the value diagnostic along each task's shortest path."""

import math

import jax
import numpy as np

from hrljax import ogbench_evaluation
from hrljax.data import pointmaze
from hrljax.agents import gcivl, ota


def tiny_agent(module, agent_cls):
  config = module.get_config()
  config.value_hidden_sizes = config.actor_hidden_sizes = (8,)
  # created in one compiled call rather than op by op
  return config, jax.jit(lambda key: agent_cls.create(key, 2, 2, config))(jax.random.key(0))


def test_evaluate_tasks_runs_ogbench_tasks():
  config, agent = tiny_agent(gcivl, gcivl.GCIVLAgent)
  results = ogbench_evaluation.evaluate_tasks(
    agent, config, num_episodes=2, task_ids=(2,), max_episode_steps=30
  )
  assert set(results) == {"task2_success", "success"}
  assert results["success"] == 0.0  # task 2 is far more than 30 steps away


def test_path_values_report_every_value_of_the_agent_on_every_task():
  # the value diagnostic along each task's shortest path: cells >= 2 (start and goal), each of
  # the agent's values (OTA: V^l "v" and V^h "vh") at the start and its rise, the action cosine
  _, agent = tiny_agent(ota, ota.OTAAgent)
  out = ogbench_evaluation.path_values(agent, "pointmaze-medium-navigate-v0")
  for k in range(1, 6):
    assert out[f"task{k}_path_cells"] >= 2
    for name in ("v", "vh"):
      assert 0.0 <= out[f"task{k}_{name}_rise"] <= 1.0
      assert math.isfinite(out[f"task{k}_{name}_start"])
    assert -1.0 <= out[f"task{k}_action_cos"] <= 1.0
  # every task's cells go through one batch: task 3's start value is the agent's value there
  maze = pointmaze.make_env("pointmaze-medium-navigate-v0").unwrapped
  task = maze.task_infos[2]
  start, goal = (np.asarray([maze.ij_to_xy(task[c])], np.float32) for c in ("init_ij", "goal_ij"))
  direct = jax.jit(type(agent).goal_values)(agent, start, goal)
  np.testing.assert_allclose(out["task3_vh_start"], float(direct["vh"][0]), rtol=1e-5, atol=1e-6)


def test_final_evaluation_takes_eval_episodes_and_periodic_ones_their_own_count():
  config, _ = tiny_agent(gcivl, gcivl.GCIVLAgent)
  config.num_updates, config.eval_episodes = 100, 20
  assert ogbench_evaluation.episodes_at(config, 50) == 20  # periodic_eval_episodes None
  config.periodic_eval_episodes = 5
  assert [ogbench_evaluation.episodes_at(config, u) for u in (50, 100)] == [5, 20]
  assert ogbench_evaluation.host_evaluator(config) is not None
  config.eval_episodes = 0
  assert ogbench_evaluation.host_evaluator(config) is None
