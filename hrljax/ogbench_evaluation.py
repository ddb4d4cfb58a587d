"""OGBench's evaluation of a goal-conditioned policy on its five tasks, and a value diagnostic.

Park, Frans, Eysenbach, Levine. "OGBench: Benchmarking Offline Goal-Conditioned RL",
arXiv:2410.20092, Sec. 7 (evaluation): each maze defines five (start, goal) tasks; an episode
starts with `env.reset(options=dict(task_id=k))` and lasts the registered 1000 steps or until the
goal is reached; the success rate of a task is the fraction of its episodes that end at the goal.

The simulator (MuJoCo through `ogbench`, imported lazily by `hrljax.data.pointmaze.make_env`)
steps on the host, so this runs outside jit: the policy is one jitted call per step. An agent is
duck-typed: `agent.act(obs, goal, key, temperature) -> actions` and, for `path_values`,
`agent.goal_values(obs, goal) -> {name: [B] values}`.
"""

import functools
import time
from typing import Callable, Optional, Sequence

import jax
import numpy as np

from hrljax.data import pointmaze

TASK_IDS = (1, 2, 3, 4, 5)


@functools.partial(jax.jit, static_argnums=4)
def _policy(agent, obs, goal, key, temperature: float):
  # One compiled policy per agent structure and temperature, shared by every evaluation of a
  # run (every seed, every periodic evaluation).
  return agent.act(obs, goal, key, temperature)


def evaluate_tasks(
  agent,
  config,
  num_episodes: Optional[int] = None,
  task_ids: Sequence[int] = TASK_IDS,
  seed: int = 0,
  max_episode_steps: Optional[int] = None,
) -> dict:
  """Success rate on each task with a jitted policy and the simulator driven from Python.

  Seeds the global `np.random` (OGBench's maze draws its start/goal noise from it) and the
  episode resets with `seed`, so the episodes are reproducible. `config` gives `env_name`,
  `eval_episodes` (per task, unless `num_episodes`) and `eval_temperature` (0: the greedy
  policy). `max_episode_steps` shortens the episodes (tests only; OGBench's is the registered
  1000). Returns {"task<k>_success": rate, ..., "success": mean over the tasks}.
  """
  num_episodes = config.eval_episodes if num_episodes is None else num_episodes
  temperature = float(config.eval_temperature)
  env = pointmaze.make_env(
    config.env_name, max_episode_steps=max_episode_steps, terminate_at_goal=True
  )
  key = jax.random.key(seed)
  np.random.seed(seed)
  results = {}
  for task_id in task_ids:
    successes = []
    for episode in range(num_episodes):
      obs, info = env.reset(
        seed=seed * 1000 + task_id * 100 + episode, options=dict(task_id=task_id)
      )
      goal = np.asarray(info["goal"], np.float32)
      done, success = False, False
      while not done:
        key, act_key = jax.random.split(key)
        action = np.asarray(_policy(agent, np.asarray(obs, np.float32), goal, act_key, temperature))
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        success = bool(info["success"])
      successes.append(success)
    results[f"task{task_id}_success"] = float(np.mean(successes))
  env.close()
  results["success"] = float(np.mean([results[f"task{k}_success"] for k in task_ids]))
  return results


def shortest_cell_path(table: np.ndarray, start: tuple, goal: tuple) -> list:
  """The maze oracle's cell path from `start` to `goal`, both included (`oracle_next_cells`)."""
  cells = [tuple(start)]
  while cells[-1] != tuple(goal) and len(cells) <= table.shape[0] * table.shape[1]:
    cells.append(tuple(int(x) for x in table[tuple(goal)][cells[-1]]))
  return cells


def path_values(agent, env_name: str) -> dict:
  """Value quality along the shortest path of each evaluation task (no simulator stepping).

  Per task k: `task<k>_path_cells` (cells on the maze oracle's path, start and goal included);
  for each value the agent reports (`agent.goal_values`, e.g. `v`; OTA also `vh`),
  `task<k>_<v>_start` (the value at the start cell's centre) and `task<k>_<v>_rise` (the
  fraction of path steps on which the value increases towards the goal: 1 for a value that
  orders the path correctly, about 0.5 for noise); and `task<k>_action_cos`, the mean cosine
  between the greedy action at a cell and the direction to the next path cell.
  """
  env = pointmaze.make_env(env_name)
  maze = env.unwrapped
  table = pointmaze.oracle_next_cells(maze.maze_map)
  paths = [
    np.array([maze.ij_to_xy(ij) for ij in shortest_cell_path(table, t["init_ij"], t["goal_ij"])])
    for t in maze.task_infos
  ]
  env.close()
  # Every task's cells in one batch: one compiled call for the values and one for the actions.
  xy = np.concatenate(paths).astype(np.float32)
  goal = np.concatenate([np.broadcast_to(p[-1], p.shape) for p in paths]).astype(np.float32)
  values = {name: np.asarray(v) for name, v in _goal_values(agent, xy, goal).items()}
  actions = np.asarray(_policy(agent, xy, goal, jax.random.key(0), 0.0))
  out = {}
  for k, (start, end) in enumerate(_spans([len(p) for p in paths]), start=1):
    out[f"task{k}_path_cells"] = end - start
    for name, v in values.items():
      out[f"task{k}_{name}_start"] = float(v[start])
      out[f"task{k}_{name}_rise"] = float(np.mean(np.diff(v[start:end]) > 0))
    step = xy[start + 1 : end] - xy[start : end - 1]
    action = actions[start : end - 1]  # the greedy action at every cell but the goal
    cos = np.sum(action * step, -1) / (
      np.linalg.norm(action, axis=-1) * np.linalg.norm(step, axis=-1) + 1e-9
    )
    out[f"task{k}_action_cos"] = float(np.mean(cos))
  return out


@jax.jit
def _goal_values(agent, obs, goal):
  return agent.goal_values(obs, goal)


def _spans(lengths: Sequence[int]) -> list:
  """[(start, end)] of consecutive blocks of `lengths` in their concatenation."""
  ends = np.cumsum(lengths)
  return [(int(e - n), int(e)) for e, n in zip(ends, lengths)]


def episodes_at(config, update: int) -> int:
  """Episodes per task of the evaluation at `update`: `eval_episodes` at the end of the run
  (`num_updates`), `periodic_eval_episodes` (when set) at the evaluations before it."""
  final = update >= config.num_updates or config.periodic_eval_episodes is None
  return int(config.eval_episodes if final else config.periodic_eval_episodes)


def host_evaluator(config) -> Optional[Callable[[object, int], dict]]:
  """`evaluate(state, seed) -> metrics` for one seed's offline run state (`state.agent`,
  `state.update`), or None when `config.eval_episodes` is 0 (no OGBench evaluation).

  Runs `evaluate_tasks` with seed `seed` (`episodes_at` episodes per task, episodes of
  `config.eval_max_episode_steps` steps when set) and `path_values`, and records the episodes per
  task (`eval_episodes_per_task`) and the wall time (`eval_seconds`).
  """
  if not config.eval_episodes:
    return None

  def evaluate(state, seed: int) -> dict:
    episodes = episodes_at(config, int(state.update))
    if not episodes:  # periodic_eval_episodes = 0: the final evaluation only
      return {}
    start = time.perf_counter()
    results = evaluate_tasks(
      state.agent,
      config,
      num_episodes=episodes,
      seed=seed,
      max_episode_steps=config.eval_max_episode_steps,
    )
    results["eval_episodes_per_task"] = episodes
    results["eval_seconds"] = time.perf_counter() - start
    results.update(path_values(state.agent, config.env_name))
    return results

  return evaluate
