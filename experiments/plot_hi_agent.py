"""The subgoals Hi-Agent's high level chooses over one episode on four rooms, drawn over the map
with the agent's path.

  python -m experiments.plot_hi_agent WORKDIR [--out=subgoals.png] [--seed=0] [--episode_seed=0]
      [--nogreedy]

Restores the latest checkpoint of a `hi_agent` run (`hrljax.load.load_run`) and plays one
episode of its hierarchy as its evaluation does, without branching (Wu et al., "Hi-Agent:
Hierarchical Vision-Language Agents for Mobile Device Control", arXiv 2510.14388): the high level
picks a subgoal cell at the start and every `segment_steps` steps, the low level acts toward it.
Both levels act greedily (their policies' modes) unless `--nogreedy`, which samples as the run's
evaluation does; the environment keeps its slip. The picture: walls grey, the start (circle) and
the task goal G, the path coloured by decision, and each decision's subgoal as a numbered square
of the same colour, joined to the cell where it was chosen. The command also prints one line per
decision (step, cell, subgoal) and the outcome.
"""

import os
import sys
from typing import Optional

import numpy as np
from absl import app, flags, logging

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("out", None, "PNG path (default: <workdir>/subgoals.png).")
  flags.DEFINE_integer("seed", None, "Which seed of a several-seed run (default: its first).")
  flags.DEFINE_integer("episode_seed", 0, "Key of the episode's start and goal cells and slips.")
  flags.DEFINE_bool("greedy", True, "Both levels take their policies' modes (else they sample).")


def hierarchical_episode(agent, env, env_params, key, greedy: bool = True) -> dict:
  """One episode of the Hi-Agent `agent` (a `hi_agent.HiAgent`) on gymnax four rooms: a subgoal
  every `segment_steps` steps, the low level's action toward it at every step, until the goal
  or the time limit.

  Returns `cells` `[T + 1, 2]` (the agent's cell before each step and after the last), `subgoals`
  `[T, 2]` (the subgoal in force at each step), `decisions` `[T]` (bool: the high level chose at
  this step), `goal` `[2]`, `length` (T) and `reached` (the episode ended at the goal)."""
  import jax
  import jax.numpy as jnp

  params, segment_steps = agent.params, agent.config.segment_steps
  max_steps = int(env_params.max_steps_in_episode)
  reset_key, run_key = jax.random.split(key)
  _, state = env.reset_env(reset_key, env_params)

  def choose(dist, key):
    return dist.mode() if greedy else dist.sample(seed=key)

  def one_step(carry, key):
    state, subgoal, since, alive = carry
    high_key, low_key, env_key = jax.random.split(key, 3)
    obs = env.get_obs(state).astype(jnp.float32)[None]
    decide = since >= segment_steps
    index = choose(agent.high.apply(params["high"], obs), high_key)
    subgoal = jnp.where(decide, agent.subgoal_cells(obs, index)[0], subgoal)
    low_obs = jnp.concatenate([obs[:, :2], subgoal[None].astype(jnp.float32)], axis=-1)
    action = choose(agent.low.apply(params["low"], low_obs), low_key)[0]
    _, moved, _, terminated, _ = env.step_env(env_key, state, action, env_params)
    done = terminated | (moved.time >= max_steps)
    since = jnp.where(decide, 1, since + 1)
    record = (state.pos, subgoal, decide & alive, alive, terminated & alive)
    state = jax.tree.map(lambda new, old: jnp.where(alive, new, old), moved, state)
    return (state, subgoal, since, alive & ~done), record

  start = (state, jnp.zeros((2,), jnp.int32), jnp.asarray(segment_steps), jnp.asarray(True))
  play = jax.jit(lambda start, keys: jax.lax.scan(one_step, start, keys))
  (final, *_), (cells, subgoals, decisions, alive, reached) = play(
    start, jax.random.split(run_key, max_steps)
  )
  length = int(np.asarray(alive).sum())
  cells = np.asarray(cells)[:length]
  end = np.asarray(final.pos)[None]  # the state stops changing once the episode ends
  return {
    "cells": np.concatenate([cells, end], axis=0).astype(np.int32),
    "subgoals": np.asarray(subgoals)[:length].astype(np.int32),
    "decisions": np.asarray(decisions)[:length],
    "goal": np.asarray(state.goal, np.int32),
    "length": length,
    "reached": bool(np.asarray(reached).any()),
  }


def decision_table(episode: dict) -> str:
  """One line per decision: the step, the agent's cell and the chosen subgoal; then the outcome."""
  lines = ["step  cell      subgoal"]
  for t in np.nonzero(episode["decisions"])[0]:
    (r, c), (gr, gc) = episode["cells"][t], episode["subgoals"][t]
    lines.append(f"{t:4d}  ({r:2d}, {c:2d})  ({gr:2d}, {gc:2d})")
  outcome = "reached the goal" if episode["reached"] else "did not reach the goal"
  lines.append(f"{outcome} in {episode['length']} steps")
  return "\n".join(lines)


def subgoal_labels(chosen: np.ndarray) -> dict:
  """`{(row, col): "0,3,5"}`: the numbers of the decisions that chose each subgoal cell."""
  labels = {}
  for number, cell in enumerate(chosen.tolist()):
    key = tuple(cell)
    labels[key] = f"{labels[key]},{number}" if key in labels else str(number)
  return labels


def draw(episode: dict, walkable: np.ndarray, out: str, title: str = "") -> str:
  """The map, the path coloured by decision and the numbered subgoals; returns `out`."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  from experiments.plot_skills import draw_map

  cells, subgoals, decisions = episode["cells"], episode["subgoals"], episode["decisions"]
  fig, ax = plt.subplots(figsize=(5.2, 5.2))
  draw_map(ax, walkable, {"G": tuple(int(x) for x in episode["goal"])})
  colors = plt.get_cmap("viridis")
  starts = np.nonzero(decisions)[0]
  for number, t in enumerate(starts):
    color = colors(number / max(len(starts) - 1, 1))
    stop = starts[number + 1] if number + 1 < len(starts) else len(subgoals)
    path = cells[t : stop + 1]
    ax.plot(path[:, 1], path[:, 0], color=color, linewidth=2.2, alpha=0.9, zorder=2)
    (r, c), (gr, gc) = cells[t], subgoals[t]
    ax.plot([c, gc], [r, gr], color=color, linestyle=":", linewidth=1.0, zorder=2)
    ax.scatter(gc, gr, s=150, marker="s", color=color, edgecolor="black", alpha=0.8, zorder=3)
  for (gr, gc), numbers in subgoal_labels(subgoals[starts]).items():
    ax.annotate(numbers, (gc, gr), ha="center", va="center", fontsize=6, zorder=4)
  row, col = cells[0]
  ax.scatter(col, row, s=80, color="white", edgecolor="black", zorder=4)
  outcome = "at G" if episode["reached"] else "time limit"
  ax.set_title(title or f"{len(starts)} subgoals, {episode['length']} steps, {outcome}", fontsize=9)
  fig.savefig(out, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return out


def check_run(workdir: str) -> None:
  """FileNotFoundError / ValueError unless `workdir` holds a `hi_agent` run."""
  from hrljax import load, provenance

  if not os.path.exists(os.path.join(workdir, provenance.CONFIG_FILE)):
    raise FileNotFoundError(
      f"{workdir}: expected a hi_agent run directory, got one without {provenance.CONFIG_FILE}"
    )
  agent = load.load_config(workdir).agent
  if agent != "hi_agent":
    raise ValueError(f"{workdir}: expected a hi_agent run directory, got a {agent!r} run")


def plot_workdir(
  workdir: str,
  out: Optional[str] = None,
  seed: Optional[int] = None,
  episode_seed: int = 0,
  greedy: bool = True,
) -> tuple[str, dict]:
  """`(png path, episode)` of one episode of the run in `workdir` (one seed of it)."""
  import jax

  from experiments.plot_skills import walkable_map
  from hrljax import envs, load

  check_run(workdir)
  run = load.load_run(workdir)
  env, env_params = envs.make(run.config.env_name, **run.config.env_kwargs)
  agent = run.seed_state(seed).agent
  episode = hierarchical_episode(agent, env, env_params, jax.random.key(episode_seed), greedy)
  out = out or os.path.join(workdir, "subgoals.png")
  outcome = "at G" if episode["reached"] else "time limit"
  title = (
    f"{workdir} (update {run.update}): {int(episode['decisions'].sum())} subgoals, "
    f"{episode['length']} steps, {outcome}"
  )
  return draw(episode, walkable_map(), out, title), episode


def main(argv):
  logging.set_verbosity(logging.WARNING)  # the checkpoint library's progress lines
  if len(argv) != 2:
    print(
      "error: expected one workdir: python -m experiments.plot_hi_agent WORKDIR", file=sys.stderr
    )
    sys.exit(2)
  try:
    path, episode = plot_workdir(argv[1], FLAGS.out, FLAGS.seed, FLAGS.episode_seed, FLAGS.greedy)
  except (FileNotFoundError, ValueError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  print(decision_table(episode))
  print(path)


if __name__ == "__main__":
  define_flags()
  app.run(main)
