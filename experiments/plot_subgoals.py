"""What a trained GMAH team does: the subgoal each agent pursues along one greedy episode, on MPE
simple_spread or the two-agent four rooms.

  python -m experiments.plot_subgoals WORKDIR [--out=subgoals.png] [--seed=0] [--episode_seed=0]

Restores the latest checkpoint of a `gmah` run (`hrljax.load.load_run`), plays one episode with
both levels greedy, as the run's evaluation does, up to its end, and draws the subgoals (squares,
one colour each) and every agent's path, each step coloured by the subgoal its high level has
chosen for it (the agent's start is a circle). In the four rooms the walls are drawn and the
goal rooms shaded; the subgoals are the room centres and the hallways. It also prints the
subgoals of every step, one column per agent, and the team return. Positions come from the
observations (each agent's own position and its offsets to the subgoals), so the picture is what
the agents see.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging

from hrljax.envs import two_agent_rooms as rooms

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("out", None, "PNG path (default: <workdir>/subgoals.png).")
  flags.DEFINE_integer("seed", None, "Which seed of a several-seed run (default: its first).")
  flags.DEFINE_integer("episode_seed", 0, "Key of the episode's start (landmarks and agents).")


# environment name -> each agent's own position in its observation `[..., N, d]` (the subgoals'
# positions are this plus `gmah.SUBGOAL_OFFSETS`)
OWN_POSITION = {
  "MPE_simple_spread_v3": lambda obs: obs[..., 2:4],  # after the velocity
  rooms.ENV_NAME: lambda obs: obs[..., :2],  # (row, col) / 12
}


def subgoal_names(env_name: str, num_subgoals: int) -> list:
  """The subgoals' labels: `L<index>` for the landmarks of simple_spread; the rooms' compass
  names, then `H<index>` for the hallways, in the four rooms."""
  if env_name == rooms.ENV_NAME:
    compass = ["NW", "NE", "SW", "SE"][: rooms.NUM_ROOMS]
    return compass + [f"H{i}" for i in range(num_subgoals - rooms.NUM_ROOMS)]
  return [f"L{i}" for i in range(num_subgoals)]


def greedy_episode(config, agent, episode_seed: int = 0) -> dict:
  """One greedy episode of a GMAH team (`agent` of `config`), up to its end (the step that
  terminates or truncates it): per step `[T, N]` subgoals and `[T + 1, N, 2]` agent positions
  (the last row where the episode ended), the `[L, 2]` subgoal positions and their labels, the
  team return and the environment's name; in the four rooms also the goal rooms the team was
  given."""
  from hrljax.agents import gmah, value_common

  from hrljax import rollout

  if config.env_name not in OWN_POSITION:
    raise ValueError(
      f"config.env_name: expected one of {sorted(OWN_POSITION)}, got {config.env_name!r}"
    )
  env, env_params, _ = value_common.multi_agent_spec(config)
  collect = gmah.make_collector(env, env_params, config)
  reset_key, run_key = jax.random.split(jax.random.key(episode_seed))
  options = gmah.init_options(rollout.reset(env, env_params, reset_key, 1), config.option_length)
  steps = env_params.max_steps_in_episode
  play = jax.jit(lambda agent, options, key: collect(agent, options, key, jnp.zeros(()), steps))
  _, (low, *_, traj, _) = play(agent, options, run_key)
  length = int(np.argmax(np.asarray(traj.done[:, 0]))) + 1  # the first end (the last step at worst)
  obs = np.asarray(low.obs[:length, 0])  # [T, N, d]
  position = OWN_POSITION[config.env_name]
  last = np.asarray(traj.next_obs[length - 1, 0])  # where the episode ended, before any reset
  positions = np.concatenate([position(obs), position(last)[None]])
  offsets = np.asarray(gmah.SUBGOAL_OFFSETS[config.env_name](jnp.asarray(obs[0])))[0]
  episode = {
    "goals": np.asarray(low.goal[:length, 0]),
    "positions": positions,
    "subgoals": positions[0, 0] + offsets,
    "names": subgoal_names(config.env_name, len(offsets)),
    "team_return": float(np.asarray(traj.reward[:length, 0]).sum()),
    "env_name": config.env_name,
  }
  if config.env_name == rooms.ENV_NAME:
    # the goal set of the split tasks (the same two-hot in every row), else each agent's room
    first = obs[0, :, 4:8]
    split = env_params.task != "own_rooms"
    episode["goal_rooms"] = np.flatnonzero(first[0]) if split else np.argmax(first, axis=-1)
  return episode


def draw(episode: dict, out: str, title: str = "") -> str:
  """The subgoals and each agent's path coloured by its subgoal (in the four rooms over the
  walls, the goal rooms shaded, north up); returns `out`."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  goals, positions, subgoals = episode["goals"], episode["positions"], episode["subgoals"]
  on_rooms = episode["env_name"] == rooms.ENV_NAME
  # (row, col) observations of the four rooms are drawn as (x = col, y = row), north up
  xy = (lambda p: p[..., ::-1]) if on_rooms else (lambda p: p)
  colors = plt.get_cmap("tab10").colors
  fig, ax = plt.subplots(figsize=(5, 5))
  if on_rooms:
    _draw_rooms(ax, episode["goal_rooms"])
  for index, (x, y) in enumerate(xy(subgoals)):
    ax.scatter(x, y, s=220, marker="s", color=colors[index], edgecolor="black", zorder=3)
    ax.annotate(episode["names"][index], (x, y), ha="center", va="center", fontsize=7, zorder=4)
  for agent in range(positions.shape[1]):
    path = xy(positions[:, agent])
    for t in range(len(goals)):
      ax.plot(*path[t : t + 2].T, color=colors[goals[t, agent]], linewidth=2, zorder=2)
    ax.scatter(*path[0], s=60, color="white", edgecolor="black", zorder=3)
    ax.annotate(f"a{agent}", path[0], textcoords="offset points", xytext=(4, 4), fontsize=8)
  ax.set_aspect("equal")
  if on_rooms:  # observation units mean nothing on the map; `imshow` has put row 0 (north) on top
    ax.set_xticks([])
    ax.set_yticks([])
  ax.set_title(title or f"team return {episode['team_return']:.1f}", fontsize=9)
  fig.savefig(out, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return out


def _draw_rooms(ax, goal_rooms) -> None:
  """The walls of the four-rooms map (black) and the goal rooms (shaded), in observation units."""
  shade = np.where(rooms.FREE, 1.0, 0.0)
  shade[np.isin(rooms.ROOM_MAP, goal_rooms)] = 0.85
  half = 0.5 / rooms.SCALE  # a cell's half width: cell centres sit at index / SCALE
  extent = (-half, 1 + half, 1 + half, -half)  # (left, right, bottom, top), row 0 on top
  ax.imshow(shade, cmap="gray", vmin=0.0, vmax=1.0, extent=extent, zorder=0)


def subgoal_table(episode: dict) -> str:
  """One line per step: the step and each agent's subgoal (its label in `episode["names"]`)."""
  goals, names = episode["goals"], episode["names"]
  header = "step  " + "  ".join(f"a{n}" for n in range(goals.shape[1]))
  rows = [f"{t:4d}  " + "  ".join(names[g] for g in step) for t, step in enumerate(goals)]
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
