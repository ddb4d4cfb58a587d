"""What the distilled skills of a latent-skills run do on four rooms: trajectories decoded from
prior samples, drawn over the map.

  python -m experiments.plot_skills WORKDIR [--out=skills.png] [--seed=0] [--samples=8]
      [--steps=40] [--starts=2:2,2:10,10:2,10:10]

Restores the latest checkpoint of a `latent_skills` run of mode `distill`
(`hrljax.load.load_run`) and, from each start cell, plays `--samples` episodes of the frozen
skill model as PULSE's high level finds it before it acts (Luo et al., "Universal Humanoid
Motion Representations for Physics-Based Control", ICLR 2024, arXiv:2310.04582, Section 3.3,
a_hi = 0): at every step z ~ p(z | s), the learned prior, and the decoder's action at z (a
sample, or its mode where the run's `decoder_action` is "mode"), in the run's own environment
(its slip included). One panel per start cell: walls grey, the goal G (and the moved goal T of a
transfer run), each sample's path in its own colour, slightly offset so that overlapping paths
stay visible; the panel's title says how many samples reached the goal. An episode stops at
the goal or after `--steps` steps.
"""

import os
import sys
from typing import Optional

import numpy as np
from absl import app, flags, logging

FLAGS = flags.FLAGS
DEFAULT_STARTS = ("2:2", "2:10", "10:2", "10:10")  # one cell in each room


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("out", None, "PNG path (default: <workdir>/skills.png).")
  flags.DEFINE_integer("seed", None, "Which seed of a several-seed run (default: its first).")
  flags.DEFINE_integer("samples", 8, "Episodes per start cell (each with its own prior samples).")
  flags.DEFINE_integer("steps", 40, "Steps per episode at most (it stops at the goal).")
  flags.DEFINE_list("starts", list(DEFAULT_STARTS), "Start cells as row:col, comma-separated.")
  flags.DEFINE_integer("episode_seed", 0, "Key of the prior's, the decoder's and the slips' noise.")


def parse_cells(texts) -> np.ndarray:
  """`[S, 2]` int32 cells from `["row:col", ...]`; ValueError naming a bad or walled one."""
  from hrljax.envs import four_rooms

  free = {tuple(c) for c in four_rooms.free_cells().tolist()}
  cells = []
  for text in texts:
    parts = str(text).split(":")
    if len(parts) != 2 or not all(p.strip().lstrip("-").isdigit() for p in parts):
      raise ValueError(f"--starts: expected cells as row:col, got {text!r}")
    cell = tuple(int(p) for p in parts)
    if cell not in free:
      raise ValueError(
        f"--starts: expected free cells of the four-rooms map, got {text!r} (a wall)"
      )
    cells.append(cell)
  if not cells:
    raise ValueError("--starts: expected at least one start cell, got none")
  return np.asarray(cells, np.int32)


def walkable_map() -> np.ndarray:
  """`[13, 13]` bool: the open cells of the four-rooms map."""
  from gymnax.environments.misc import rooms

  return np.asarray(rooms.string_to_bool_map(rooms.four_rooms_map), bool)


def skill_trajectories(
  agent,
  env,
  env_params,
  starts: np.ndarray,
  samples: int,
  steps: int,
  key,
  decoder_mode: bool = False,
) -> dict:
  """Episodes of the skill model `agent` (a `latent_skills.SkillAgent`) from each start cell:
  `samples` per cell, z ~ p(z | s) and a ~ π_dec(a | s, z) at every step (the decoder's mode
  instead of a sample if `decoder_mode`), stopped at the goal or after `steps` steps.

  Returns `cells` `[S, M, steps + 1, 2]` (the cell at each step; after the episode ends, its last
  cell), `length` `[S, M]` (steps taken) and `reached` `[S, M]` (bool: ended at the goal)."""
  import jax
  import jax.numpy as jnp
  from hrljax.envs import four_rooms
  from hrljax.networks.latent_skills import LatentSkillModel

  model, params = agent.model, agent.params
  num = len(starts) * samples
  start_cells = jnp.repeat(jnp.asarray(starts, jnp.int32), samples, axis=0)  # [S * M, 2]
  state = four_rooms.EnvState(
    pos=start_cells,
    goal=jnp.broadcast_to(env_params.goal, (num, 2)).astype(jnp.int32),
    time=jnp.zeros((num,), jnp.int32),
    total_steps=jnp.zeros((num,), jnp.int32),
  )

  def act(obs, key):
    z_key, a_key = jax.random.split(key)
    mean, log_std = model.apply(params, obs, method=LatentSkillModel.prior)
    z = mean + jnp.exp(log_std) * jax.random.normal(z_key, mean.shape)
    dist = model.apply(params, obs, z, method=LatentSkillModel.decode)
    return dist.mode() if decoder_mode else dist.sample(seed=a_key)

  def one_step(carry, key):
    state, alive, length = carry
    act_key, env_key = jax.random.split(key)
    obs = jax.vmap(env.get_obs)(state)
    action = act(obs, act_key)
    env_keys = jax.random.split(env_key, num)
    _, moved, _, terminated, _ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
      env_keys, state, action, env_params
    )
    pos = jnp.where(alive[:, None], moved.pos, state.pos)
    state = moved.replace(pos=pos)
    length = length + alive.astype(jnp.int32)
    alive = alive & ~terminated
    return (state, alive, length), (pos, terminated)

  alive = jnp.ones((num,), bool)
  length = jnp.zeros((num,), jnp.int32)
  play = jax.jit(lambda state, keys: jax.lax.scan(one_step, (state, alive, length), keys))
  (_, alive, length), (pos, _) = play(state, jax.random.split(key, steps))
  cells = np.concatenate([np.asarray(start_cells)[None], np.asarray(pos)], axis=0)  # [T+1, N, 2]
  shape = (len(starts), samples)
  return {
    "cells": cells.transpose(1, 0, 2).reshape(shape + (steps + 1, 2)),
    "length": np.asarray(length).reshape(shape),
    "reached": ~np.asarray(alive).reshape(shape),
  }


def draw_map(ax, walkable: np.ndarray, goals: dict) -> None:
  """Four rooms on `ax`: walls grey, floor white, each goal's label (`{label: (row, col)}`) in red."""
  ax.imshow(np.where(walkable, 1.0, 0.35), cmap="gray", vmin=0.0, vmax=1.0)
  for label, (row, col) in goals.items():
    ax.text(col, row, label, ha="center", va="center", color="red", fontweight="bold", zorder=5)
  ax.set_xticks([])
  ax.set_yticks([])


def draw(trajectories: dict, walkable: np.ndarray, goals: dict, out: str, title: str = "") -> str:
  """One panel per start cell with its samples' paths over the map; returns `out`."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  cells, length, reached = trajectories["cells"], trajectories["length"], trajectories["reached"]
  num_starts, samples = cells.shape[:2]
  fig, axes = plt.subplots(1, num_starts, figsize=(3.4 * num_starts, 3.8), squeeze=False)
  colors = plt.get_cmap("tab10").colors
  offsets = np.linspace(-0.25, 0.25, samples) if samples > 1 else np.zeros(1)
  for s, ax in enumerate(axes[0]):
    draw_map(ax, walkable, goals)
    for m in range(samples):
      path = cells[s, m, : length[s, m] + 1].astype(float) + offsets[m]
      ax.plot(path[:, 1], path[:, 0], color=colors[m % len(colors)], linewidth=1.4, alpha=0.85)
    row, col = cells[s, 0, 0]
    ax.scatter(col, row, s=70, color="white", edgecolor="black", zorder=4)
    ax.set_title(f"start ({row}, {col}): {int(reached[s].sum())}/{samples} at G", fontsize=9)
  if title:
    fig.suptitle(title, fontsize=9)
  fig.savefig(out, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return out


def check_run(workdir: str, config) -> None:
  """ValueError unless `config` is that of a four-rooms `latent_skills` distillation run."""
  from hrljax.envs import four_rooms

  agent = config.get("agent")
  if agent != "latent_skills" or config.get("mode") != "distill":
    got = f"a {agent!r} run" if agent != "latent_skills" else f"mode {config.get('mode')!r}"
    raise ValueError(f"{workdir}: expected a latent_skills distill run directory, got {got}")
  if (
    config.env_name != four_rooms.ENV_NAME or config.env_kwargs.get("observation") == "coordinates"
  ):
    raise ValueError(
      f"{workdir}: expected a run on {four_rooms.ENV_NAME} with one-hot observations, got "
      f"{config.env_name!r} {dict(config.env_kwargs)}"
    )


def load_config(workdir: str):
  """The run's config; FileNotFoundError naming `workdir` when it is no run directory."""
  from hrljax import load, provenance

  if not os.path.exists(os.path.join(workdir, provenance.CONFIG_FILE)):
    raise FileNotFoundError(
      f"{workdir}: expected a latent_skills distill run directory, got one without "
      f"{provenance.CONFIG_FILE}"
    )
  return load.load_config(workdir)


def plot_workdir(
  workdir: str,
  out: Optional[str] = None,
  seed: Optional[int] = None,
  samples: int = 8,
  steps: int = 40,
  starts=DEFAULT_STARTS,
  episode_seed: int = 0,
) -> tuple[str, dict]:
  """`(png path, trajectories)` of the skill model of the run in `workdir` (one seed of it)."""
  import jax
  from hrljax import envs, load
  from hrljax.envs import four_rooms

  for name, value in (("samples", samples), ("steps", steps)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"--{name}: expected an integer >= 1, got {value!r}")
  start_cells = parse_cells(starts)
  check_run(workdir, load_config(workdir))
  run = load.load_run(workdir)
  agent = run.seed_state(seed).agent
  env, env_params = envs.make(run.config.env_name, **run.config.env_kwargs)
  key = jax.random.key(episode_seed)
  decoder_mode = run.config.decoder_action == "mode"
  trajectories = skill_trajectories(
    agent, env, env_params, start_cells, samples, steps, key, decoder_mode
  )
  goals = {"G": tuple(int(x) for x in env_params.goal)}
  if env_params.transfer_after_steps != four_rooms.NEVER:
    goals["T"] = tuple(int(x) for x in env_params.transfer_goal)
  out = out or os.path.join(workdir, "skills.png")
  title = f"{workdir} (update {run.update}): z ~ p(z | s), the decoder frozen"
  return draw(trajectories, walkable_map(), goals, out, title), trajectories


def main(argv):
  logging.set_verbosity(logging.WARNING)  # the checkpoint library's progress lines
  if len(argv) != 2:
    print("error: expected one workdir: python -m experiments.plot_skills WORKDIR", file=sys.stderr)
    sys.exit(2)
  try:
    path, trajectories = plot_workdir(
      argv[1], FLAGS.out, FLAGS.seed, FLAGS.samples, FLAGS.steps, FLAGS.starts, FLAGS.episode_seed
    )
  except (FileNotFoundError, ValueError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  reached = trajectories["reached"]
  print(f"{int(reached.sum())} of {reached.size} episodes reached the goal")
  print(path)


if __name__ == "__main__":
  define_flags()
  app.run(main)
