"""OGBench point-maze "navigate" datasets generated locally; a loader for OGBench's `.npz` files.

Park, Frans, Eysenbach, Levine. "OGBench: Benchmarking Offline Goal-Conditioned RL",
arXiv:2410.20092, Sec. 7 (locomotion datasets) and Appendix (dataset collection). The protocol
is the one of OGBench's `data_gen_scripts/generate_locomaze.py` and `commands.sh`
(seohongpark/ogbench @1d41409), restated here:

  * each episode starts in a uniformly random free cell; the goal is a uniformly random free
    cell that is not a straight hallway cell (free on both sides along one axis and walled on
    the other);
  * the action is the unit direction from the agent to the maze oracle's subgoal
    (`env.unwrapped.get_oracle_subgoal`) plus N(0, noise²) noise (noise 0.5 for point mazes),
    clipped to [-1, 1];
  * whenever `info["success"]` the goal is redrawn (`env.unwrapped.set_goal`), so one episode
    visits many goals;
  * medium and large: 1000 episodes of 1001 steps, giant: 500 episodes of 2001 steps; a further
    10% of episodes (`num_episodes // 10`) form the validation file `<name>-val.npz`;
  * the file holds `observations, actions, terminals, qpos, qvel` with one row per step, where
    `terminals` marks the last step of each episode (OGBench's raw layout; `load` turns it into
    transitions).

Deviations from the reference script, each deliberate:
  * randomness comes from one seeded `numpy.random.Generator` (the reference uses the global
    `np.random` and never seeds the environment); the environment is reset with `seed=seed`
    once, and, because OGBench's maze draws its start/goal position noise from the GLOBAL
    `np.random`, `generate` also calls `np.random.seed(seed)`; a dataset is therefore a
    deterministic function of (name, episodes, steps, noise, seed);
  * a progress line replaces tqdm.

Speed: the reference's per-step cost was mostly the oracle's breadth-first search over the whole
maze; `generate` looks the oracle's next cell up in a table built once per maze
(`oracle_next_cells`) and steps the unwrapped maze, producing the same arrays bit for bit
(1.8x the steps/s; what remains is MuJoCo's `mj_step`, ~80 µs per step of 5 substeps).

`ogbench` (and with it mujoco, gymnasium, dm_control) is imported lazily: `load` and the maze
helpers work without it.
"""

import contextlib
import dataclasses
import sys
import tempfile
import time
from typing import Callable, Optional

import numpy as np

# ogbench names "pointmaze-<maze>-navigate-v0"; the simulator is "pointmaze-<maze>-v0".
NAVIGATE_PROTOCOL = {
  "medium": dict(num_episodes=1000, max_episode_steps=1001),
  "large": dict(num_episodes=1000, max_episode_steps=1001),
  "giant": dict(num_episodes=500, max_episode_steps=2001),
}
ORACLE_NOISE = 0.5
RAW_KEYS = ("observations", "actions", "terminals", "qpos", "qvel")


@dataclasses.dataclass(frozen=True)
class DatasetName:
  """A parsed OGBench dataset name such as `pointmaze-medium-navigate-v0`."""

  maze: str  # medium, large or giant

  @property
  def dataset(self) -> str:
    return f"pointmaze-{self.maze}-navigate-v0"

  @property
  def env(self) -> str:
    return f"pointmaze-{self.maze}-v0"


def parse_name(name: str) -> DatasetName:
  """`pointmaze-<maze>-navigate-v0` -> DatasetName; ValueError naming the choices otherwise."""
  parts = name.split("-")
  if (
    len(parts) != 4
    or parts[0] != "pointmaze"
    or parts[1] not in NAVIGATE_PROTOCOL
    or parts[2] != "navigate"
    or parts[3] != "v0"
  ):
    choices = [DatasetName(m).dataset for m in NAVIGATE_PROTOCOL]
    raise ValueError(f"env: expected one of {choices}, got {name!r}")
  return DatasetName(parts[1])


def free_cells(maze_map: np.ndarray) -> list[tuple[int, int]]:
  """Every free cell (map value 0) in row-major order: the start cells of an episode."""
  rows, cols = np.nonzero(np.asarray(maze_map) == 0)
  return [(int(i), int(j)) for i, j in zip(rows, cols)]


def goal_cells(maze_map: np.ndarray) -> list[tuple[int, int]]:
  """Free cells that are not straight hallways (OGBench's "vertex cells"): the goal cells.

  A hallway cell is open on both sides along one axis and walled on both sides along the other.
  The maze border is walled, so neighbours of free cells always exist.
  """
  m = np.asarray(maze_map)
  cells = []
  for i, j in free_cells(m):
    vertical = m[i - 1, j] == 0 and m[i + 1, j] == 0 and m[i, j - 1] == 1 and m[i, j + 1] == 1
    horizontal = m[i, j - 1] == 0 and m[i, j + 1] == 0 and m[i - 1, j] == 1 and m[i + 1, j] == 1
    if not (vertical or horizontal):
      cells.append((i, j))
  return cells


def oracle_action(direction: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
  """The noisy oracle: unit direction to the subgoal + N(0, noise²), clipped to [-1, 1]."""
  unit = direction / (np.linalg.norm(direction) + 1e-6)
  return np.clip(unit + rng.normal(0.0, noise, size=unit.shape), -1.0, 1.0)


def make_env(name: str, max_episode_steps: Optional[int] = None, terminate_at_goal: bool = False):
  """The OGBench point-maze simulator (imports ogbench lazily; needs the `ogbench` extra)."""
  import gymnasium
  import ogbench  # noqa: F401  (registers the mazes with gymnasium)

  parsed = parse_name(name)
  kwargs = dict(terminate_at_goal=terminate_at_goal)
  if max_episode_steps is not None:
    kwargs["max_episode_steps"] = max_episode_steps
  # OGBench writes each maze's MuJoCo model to a temporary file it never deletes (one per env
  # made); MuJoCo has read the model once the env exists, so the file's directory goes with it.
  with tempfile.TemporaryDirectory(prefix="hrljax-maze-") as directory:
    with _temporary_files_in(directory):
      return gymnasium.make(parsed.env, **kwargs)


@contextlib.contextmanager
def _temporary_files_in(directory: str):
  """`tempfile`'s default directory is `directory` inside the block."""
  previous, tempfile.tempdir = tempfile.tempdir, directory
  try:
    yield
  finally:
    tempfile.tempdir = previous


def oracle_next_cells(maze_map: np.ndarray) -> np.ndarray:
  """`table[gi, gj, i, j]` = the cell `get_oracle_subgoal` heads for from (i, j) to goal (gi, gj).

  OGBench's oracle runs a breadth-first search over the whole maze at every step (most of the
  generation time); its answer depends only on the two cells, so it is computed once here for
  every (goal cell, agent cell) pair, walls included, with the same rules: the BFS distance
  from the goal through free cells (-1 where unreachable), and the first neighbour in the order
  up, left, down, right whose distance is strictly below the current cell's (the cell itself
  if none is).
  """
  m = np.asarray(maze_map)
  height, width = m.shape
  steps = ((-1, 0), (0, -1), (1, 0), (0, 1))
  table = np.zeros((height, width, height, width, 2), np.int64)
  for gi in range(height):
    for gj in range(width):
      dist = np.full((height, width), -1, np.int64)
      dist[gi, gj] = 0
      queue, head = [(gi, gj)], 0
      while head < len(queue):
        i, j = queue[head]
        head += 1
        for di, dj in steps:
          ni, nj = i + di, j + dj
          if 0 <= ni < height and 0 <= nj < width and m[ni, nj] == 0 and dist[ni, nj] == -1:
            dist[ni, nj] = dist[i, j] + 1
            queue.append((ni, nj))
      for i in range(height):
        for j in range(width):
          best = (i, j)
          for di, dj in steps:
            ni, nj = i + di, j + dj
            if (
              0 <= ni < height and 0 <= nj < width and m[ni, nj] == 0 and dist[ni, nj] < dist[best]
            ):
              best = (ni, nj)
          table[gi, gj, i, j] = best
  return table


class _Oracle:
  """`get_oracle_subgoal(xy, goal_xy)[0]` of one maze by table look-up (see `oracle_next_cells`)."""

  def __init__(self, maze):
    self.table = oracle_next_cells(maze.maze_map)
    self.maze = maze

  def subgoal(self, xy: np.ndarray, goal_xy) -> np.ndarray:
    maze = self.maze
    gi, gj = maze.xy_to_ij(goal_xy)
    i, j = maze.xy_to_ij(xy)
    si, sj = self.table[gi, gj, i, j]
    return np.array(maze.ij_to_xy((si, sj)))


def generate(
  name: str,
  num_episodes: Optional[int] = None,
  max_episode_steps: Optional[int] = None,
  noise: float = ORACLE_NOISE,
  seed: int = 0,
  num_val_episodes: Optional[int] = None,
  progress: Optional[Callable[[str], None]] = None,
) -> tuple[dict, dict]:
  """Runs OGBench's navigate protocol; returns `(train, val)` raw datasets (see the module doc).

  Speed (the data are those of the plain loop through `env.step` and `get_oracle_subgoal`;
  `tests/data/test_pointmaze_generation.py` checks it bit for bit): the oracle is a table
  look-up (`oracle_next_cells`), the unwrapped maze is stepped directly (the gymnasium wrappers
  only count steps and check types; the episode length is counted here) and the rows are
  written into preallocated arrays.

  Args:
    name: `pointmaze-{medium,large,giant}-navigate-v0`.
    num_episodes: training episodes (default: the protocol's 1000 or 500).
    max_episode_steps: steps per episode (default: the protocol's 1001 or 2001).
    noise: standard deviation of the oracle's action noise (0.5).
    seed: seeds the action noise, the cell draws and the simulator's reset noise.
    num_val_episodes: validation episodes (default `num_episodes // 10`, as OGBench).
    progress: called with a one-line status about once a second.
  """
  parsed = parse_name(name)
  defaults = NAVIGATE_PROTOCOL[parsed.maze]
  num_episodes = defaults["num_episodes"] if num_episodes is None else num_episodes
  if max_episode_steps is None:
    max_episode_steps = defaults["max_episode_steps"]
  if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
    raise ValueError(f"num_episodes: expected an integer >= 1, got {num_episodes!r}")
  if (
    isinstance(max_episode_steps, bool)
    or not isinstance(max_episode_steps, int)
    or max_episode_steps < 2
  ):
    raise ValueError(f"max_episode_steps: expected an integer >= 2, got {max_episode_steps!r}")
  if not (np.isfinite(noise) and noise >= 0):
    raise ValueError(f"noise: expected a finite float >= 0, got {noise!r}")
  num_val_episodes = num_episodes // 10 if num_val_episodes is None else num_val_episodes

  env = make_env(name, max_episode_steps=max_episode_steps)
  maze = env.unwrapped
  oracle = _Oracle(maze)
  starts, goals = free_cells(maze.maze_map), goal_cells(maze.maze_map)
  rng = np.random.default_rng(seed)
  np.random.seed(seed)  # the maze's position noise uses the global generator
  total = num_episodes + num_val_episodes
  widths = dict(
    observations=maze.observation_space.shape[0],
    actions=maze.action_space.shape[0],
    qpos=maze.model.nq,
    qvel=maze.model.nv,
  )
  arrays = {k: np.zeros((total * max_episode_steps, w), np.float32) for k, w in widths.items()}
  arrays["terminals"] = np.zeros(total * max_episode_steps, bool)
  arrays["terminals"][max_episode_steps - 1 :: max_episode_steps] = True
  start_time, last_report = time.perf_counter(), 0.0
  row = 0
  for episode in range(total):
    init_ij = starts[rng.integers(len(starts))]
    goal_ij = goals[rng.integers(len(goals))]
    reset_seed = seed if episode == 0 else None
    task_info = dict(init_ij=init_ij, goal_ij=goal_ij)
    ob, _ = maze.reset(seed=reset_seed, options=dict(task_info=task_info))
    for _ in range(max_episode_steps):
      xy = maze.get_xy()
      action = oracle_action(oracle.subgoal(xy, maze.cur_goal_xy) - xy, noise, rng)
      next_ob, _, _, _, info = maze.step(action)
      if info["success"]:
        maze.set_goal(goals[rng.integers(len(goals))])
      arrays["observations"][row] = ob
      arrays["actions"][row] = action
      arrays["qpos"][row] = info["prev_qpos"]
      arrays["qvel"][row] = info["prev_qvel"]
      ob = next_ob
      row += 1
    now = time.perf_counter()
    if progress is not None and (now - last_report > 1.0 or episode == total - 1):
      last_report = now
      progress(
        f"{name}: episode {episode + 1}/{total}, {row} steps, "
        f"{row / max(now - start_time, 1e-9):.0f} steps/s"
      )
  env.close()
  num_train_steps = num_episodes * max_episode_steps
  train = {k: v[:num_train_steps] for k, v in arrays.items()}
  val = {k: v[num_train_steps:] for k, v in arrays.items()}
  return train, val


def validation_path(path: str) -> str:
  """OGBench's validation file name: `x.npz` -> `x-val.npz`."""
  if not path.endswith(".npz"):
    raise ValueError(f"path: expected a file name ending in .npz, got {path!r}")
  return path[: -len(".npz")] + "-val.npz"


def save(path: str, train: dict, val: Optional[dict] = None) -> None:
  """Writes OGBench's compressed `.npz` layout (and `<path>-val.npz` when `val` is given)."""
  import os

  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  np.savez_compressed(path, **train)
  if val is not None and len(val["terminals"]):
    np.savez_compressed(validation_path(path), **val)


def load(path: str) -> dict:
  """Reads a raw navigate file (ours or OGBench's) as transitions, like OGBench's `load_dataset`.

  The raw file has one row per visited state; the last row of an episode has no action with a
  successor. Returns float32 `observations, actions, next_observations` and float32 `terminals`
  [N] (1 at the last transition of each episode), with N = rows − episodes, in OGBench's
  "regular" (non-compact) layout.
  """
  with np.load(path) as file:
    missing = [k for k in ("observations", "actions", "terminals") if k not in file]
    if missing:
      raise ValueError(f"path: {path!r} lacks the arrays {missing}")
    observations = file["observations"].astype(np.float32)
    actions = file["actions"].astype(np.float32)
    terminals = file["terminals"].astype(bool)
  if not terminals[-1]:
    raise ValueError(f"path: {path!r} does not end with a terminal step")
  keep = ~terminals  # rows with a successor in the same episode
  keep_next = np.concatenate([[False], keep[:-1]])
  last_transition = np.concatenate([terminals[1:], [True]])
  return {
    "observations": observations[keep],
    "actions": actions[keep],
    "next_observations": observations[keep_next],
    "terminals": last_transition[keep].astype(np.float32),
  }


def print_progress(line: str) -> None:
  print("\r" + line, end="", file=sys.stderr, flush=True)
