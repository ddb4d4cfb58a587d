"""Point-maze dataset generation speed: `hrljax.data.pointmaze.generate` against the plain loop.

  python -m experiments.benchmarks.pointmaze_generation --env=pointmaze-medium-navigate-v0 \
      [--episodes=3] [--steps=1001] [--reps=3] [--reference=True]

OGBench's navigate protocol (Park, Frans, Eysenbach, Levine, "OGBench: Benchmarking Offline
Goal-Conditioned RL", arXiv:2410.20092; its `data_gen_scripts/generate_locomaze.py`) written out
as the straightforward loop is the reference side here (`reference_generate`): the
gymnasium-wrapped environment stepped through `env.step`, the maze's own
`get_oracle_subgoal` (a breadth-first search over the whole maze at every step) for the oracle
direction, and one Python list per array. `generate` computes the same arrays with the oracle
looked up in a table built once per maze, the unwrapped maze and preallocated arrays.

Both sides use the same seeds, so they must produce identical arrays; the benchmark checks
this in every round (and exits with an error if not) before it reports any speed. The two
sides are timed in interleaved rounds (reference, then `generate`, `--reps` times, each round
with seed = round index), so a change of load on a shared machine hits both alike. Prints one
JSON line: steps per second of each side (median and best round, and per CPU second of this
process), the ratio generate / reference of the medians, the steps per round and the load
average. With `--reference=False` only `generate` is timed.
"""

import json
import os
import statistics
import sys
import time

import numpy as np
from absl import app, flags

from hrljax.data import pointmaze

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags (defined only when run as a program, so importing never redefines)."""
  flags.DEFINE_string("env", "pointmaze-medium-navigate-v0", "OGBench point-maze dataset name.")
  flags.DEFINE_integer("episodes", 3, "Episodes generated per round and side.")
  flags.DEFINE_integer("steps", 1001, "Steps per episode.")
  flags.DEFINE_integer("reps", 3, "Interleaved timed rounds of each side.")
  flags.DEFINE_bool("reference", True, "Also time the plain protocol loop and check equality.")


def reference_generate(
  name: str,
  num_episodes: int,
  max_episode_steps: int,
  seed: int,
  noise: float = pointmaze.ORACLE_NOISE,
) -> dict:
  """OGBench's navigate protocol as the plain loop: the training rows of `pointmaze.generate`
  (no validation episodes) with the same random draws in the same order.

  Per episode: a start cell and a goal cell drawn with `numpy.random.default_rng(seed)` (the
  global generator seeded too: the maze draws its position noise from it), `env.reset` with
  that task (`seed` at the first episode only), then `max_episode_steps` steps of
  `env.step(oracle direction + noise)`, the goal redrawn whenever the step reports success.
  """
  env = pointmaze.make_env(name, max_episode_steps=max_episode_steps)
  maze = env.unwrapped
  starts, goals = pointmaze.free_cells(maze.maze_map), pointmaze.goal_cells(maze.maze_map)
  rng = np.random.default_rng(seed)
  np.random.seed(seed)
  rows = {key: [] for key in pointmaze.RAW_KEYS}
  for episode in range(num_episodes):
    task_info = dict(
      init_ij=starts[rng.integers(len(starts))], goal_ij=goals[rng.integers(len(goals))]
    )
    ob, _ = env.reset(seed=seed if episode == 0 else None, options=dict(task_info=task_info))
    for step in range(max_episode_steps):
      xy = maze.get_xy()
      subgoal_xy, _ = maze.get_oracle_subgoal(xy, maze.cur_goal_xy)
      # Written out rather than `pointmaze.oracle_action`, so that the comparison also checks it.
      direction = subgoal_xy - xy
      action = np.clip(
        direction / (np.linalg.norm(direction) + 1e-6) + rng.normal(0.0, noise, size=2), -1.0, 1.0
      )
      next_ob, _, _, _, info = env.step(action)
      if info["success"]:
        maze.set_goal(goals[rng.integers(len(goals))])
      rows["observations"].append(ob)
      rows["actions"].append(action)
      rows["terminals"].append(step == max_episode_steps - 1)
      rows["qpos"].append(info["prev_qpos"])
      rows["qvel"].append(info["prev_qvel"])
      ob = next_ob
  env.close()
  return {
    key: np.asarray(value, dtype=bool if key == "terminals" else np.float32)
    for key, value in rows.items()
  }


def fast_generate(name: str, num_episodes: int, max_episode_steps: int, seed: int) -> dict:
  """The training rows of `pointmaze.generate` (the side being measured)."""
  train, _ = pointmaze.generate(
    name,
    num_episodes=num_episodes,
    max_episode_steps=max_episode_steps,
    seed=seed,
    num_val_episodes=0,
  )
  return train


def timed(fn, *args) -> tuple[dict, float, float]:
  """`(fn(*args), wall seconds, process CPU seconds)`."""
  wall, cpu = time.perf_counter(), time.process_time()
  out = fn(*args)
  return out, time.perf_counter() - wall, time.process_time() - cpu


def first_difference(reference: dict, ours: dict):
  """The first array that differs between the two sides (None if all are identical)."""
  for key in pointmaze.RAW_KEYS:
    if reference[key].shape != ours[key].shape or not np.array_equal(reference[key], ours[key]):
      return key
  return None


def summary(walls: list, cpus: list, steps: int) -> dict:
  return {
    "steps_per_second_median": steps / statistics.median(walls),
    "steps_per_second_best": steps / min(walls),
    "steps_per_cpu_second_median": steps / statistics.median(cpus),
  }


def run(name: str, episodes: int, steps: int, reps: int, reference: bool) -> dict:
  """Interleaved rounds of both sides; equality checked every round. Returns the JSON record."""
  pointmaze.parse_name(name)  # ValueError naming the choices before any simulator starts
  for flag, value in (("episodes", episodes), ("reps", reps)):
    if value < 1:
      raise ValueError(f"{flag}: expected an integer >= 1, got {value}")
  if steps < 2:
    raise ValueError(f"steps: expected an integer >= 2, got {steps}")
  sides = ["reference", "generate"] if reference else ["generate"]
  fns = {"reference": reference_generate, "generate": fast_generate}
  walls = {side: [] for side in sides}
  cpus = {side: [] for side in sides}
  for seed in range(reps):
    outputs = {}
    for side in sides:
      outputs[side], wall, cpu = timed(fns[side], name, episodes, steps, seed)
      walls[side].append(wall)
      cpus[side].append(cpu)
    if reference:
      differing = first_difference(outputs["reference"], outputs["generate"])
      if differing is not None:
        raise RuntimeError(
          f"round {seed}: '{differing}' differs between the reference loop and "
          f"generate; the speed comparison is void"
        )
  total = episodes * steps
  record = {
    "env": name,
    "steps_per_round": total,
    "reps": reps,
    "load_average": [round(x, 2) for x in os.getloadavg()],
  }
  for side in sides:
    record[side] = summary(walls[side], cpus[side], total)
  if reference:
    record["identical_arrays"] = True
    record["ratio_median"] = (
      record["generate"]["steps_per_second_median"] / record["reference"]["steps_per_second_median"]
    )
    record["ratio_cpu_median"] = (
      record["generate"]["steps_per_cpu_second_median"]
      / record["reference"]["steps_per_cpu_second_median"]
    )
  return record


def main(argv):
  if len(argv) > 1:
    print(f"error: unexpected arguments {argv[1:]} (every setting is a --flag)", file=sys.stderr)
    sys.exit(2)
  try:
    record = run(FLAGS.env, FLAGS.episodes, FLAGS.steps, FLAGS.reps, FLAGS.reference)
  except (ValueError, RuntimeError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  print(json.dumps(record), flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
