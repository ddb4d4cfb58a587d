"""What a trained GMAH team does on MPE simple_spread: the subgoal each agent pursues along one
greedy episode.

  python -m experiments.plot_subgoals WORKDIR [--out=subgoals.png] [--seed=0] [--episode_seed=0]

Restores the latest checkpoint of a `gmah` run (`hrljax.load.load_run`), plays one episode with
both levels greedy, as the run's evaluation does, and draws the landmarks (squares, one colour
each) and every agent's path, each step coloured by the landmark its high level has chosen for
it (the agent's start is a circle). It also prints the subgoals of every step, one column per
agent, and the team return. Positions come from the observations (each agent's own position and
its offsets to the landmarks), so the picture is what the agents see.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("out", None, "PNG path (default: <workdir>/subgoals.png).")
  flags.DEFINE_integer("seed", None, "Which seed of a several-seed run (default: its first).")
  flags.DEFINE_integer("episode_seed", 0, "Key of the episode's start (landmarks and agents).")


def greedy_episode(config, agent, episode_seed: int = 0) -> dict:
  """One greedy episode of a GMAH team (`agent` of `config`): per step `[T, N]` subgoals,
  `[T, N, 2]` agent positions, the `[L, 2]` landmark positions and the team return."""
  from hrljax import rollout
  from hrljax.agents import gmah, value_common

  env, env_params, _ = value_common.multi_agent_spec(config)
  collect = gmah.make_collector(env, env_params, config)
  reset_key, run_key = jax.random.split(jax.random.key(episode_seed))
  options = gmah.init_options(rollout.reset(env, env_params, reset_key, 1), config.option_length)
  steps = env_params.max_steps_in_episode
  play = jax.jit(lambda agent, options, key: collect(agent, options, key, jnp.zeros(()), steps))
  _, (low, *_, traj, _) = play(agent, options, run_key)
  obs = np.asarray(low.obs[:, 0])  # [T, N, d]
  positions = obs[..., 2:4]
  landmarks = positions[0, 0] + np.asarray(gmah.landmark_offsets(jnp.asarray(obs[0])))[0]
  return {
    "goals": np.asarray(low.goal[:, 0]),
    "positions": positions,
    "landmarks": landmarks,
    "team_return": float(traj.reward[:, 0].sum()),
  }


def draw(episode: dict, out: str, title: str = "") -> str:
  """The landmarks and each agent's path coloured by its subgoal; returns `out`."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  goals, positions, landmarks = episode["goals"], episode["positions"], episode["landmarks"]
  colors = plt.get_cmap("tab10").colors
  fig, ax = plt.subplots(figsize=(5, 5))
  for index, (x, y) in enumerate(landmarks):
    ax.scatter(x, y, s=220, marker="s", color=colors[index], edgecolor="black", zorder=3)
    ax.annotate(f"L{index}", (x, y), ha="center", va="center", fontsize=8, zorder=4)
  for agent in range(positions.shape[1]):
    path = positions[:, agent]
    for t in range(len(path) - 1):
      ax.plot(*path[t : t + 2].T, color=colors[goals[t, agent]], linewidth=2)
    ax.scatter(*path[0], s=60, color="white", edgecolor="black", zorder=3)
    ax.annotate(f"a{agent}", path[0], textcoords="offset points", xytext=(4, 4), fontsize=8)
  ax.set_aspect("equal")
  ax.set_title(title or f"team return {episode['team_return']:.1f}", fontsize=9)
  fig.savefig(out, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return out


def subgoal_table(episode: dict) -> str:
  """One line per step: the step and each agent's subgoal (`L<index>`)."""
  goals = episode["goals"]
  header = "step  " + "  ".join(f"a{n}" for n in range(goals.shape[1]))
  rows = [f"{t:4d}  " + "  ".join(f"L{g}" for g in step) for t, step in enumerate(goals)]
  return "\n".join([header, *rows, f"team return {episode['team_return']:.2f}"])


def plot_workdir(workdir: str, out=None, seed=None, episode_seed: int = 0) -> tuple[str, str]:
  """`(png path, subgoal table)` of one greedy episode of the run in `workdir`."""
  from hrljax import load

  agent_name = load.load_config(workdir).agent
  if agent_name != "gmah":
    raise ValueError(f"workdir: expected a run of the agent 'gmah', got {agent_name!r}")
  run = load.load_run(workdir)
  episode = greedy_episode(run.config, run.seed_state(seed).agent, episode_seed)
  out = out or os.path.join(workdir, "subgoals.png")
  title = f"{workdir} (update {run.update}): team return {episode['team_return']:.1f}"
  return draw(episode, out, title), subgoal_table(episode)


def main(argv):
  logging.set_verbosity(logging.WARNING)  # the checkpoint library's progress lines
  if len(argv) != 2:
    print(
      "error: expected one workdir: python -m experiments.plot_subgoals WORKDIR", file=sys.stderr
    )
    sys.exit(2)
  try:
    path, table = plot_workdir(argv[1], FLAGS.out, FLAGS.seed, FLAGS.episode_seed)
  except (FileNotFoundError, ValueError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  print(table)
  print(path)


if __name__ == "__main__":
  define_flags()
  app.run(main)
