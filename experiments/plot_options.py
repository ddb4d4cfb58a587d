"""Pictures of learned options on four rooms: where each option terminates, which option runs where.

  python -m experiments.plot_options WORKDIR [--out=options.png]

Restores the final checkpoint of an `option_critic` run on the four-rooms task (its
`config.json` says how to rebuild the run state) and draws, for every free cell of the grid,

  * one heat map per option of its termination probability beta_w(s);
  * the option the greedy policy over options picks there, argmax_w Q(s, w).

Walls are grey, the goal of the run's first episodes is marked G and the moved goal (if the run
had a transfer) T.
"""

import json
import os
import sys
from typing import Optional

import numpy as np
from absl import app, flags, logging

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("out", None, "PNG path (default: <workdir>/options.png).")
  flags.DEFINE_integer("seed", None, "Which seed of a several-seed run (default: its first).")


def load_config(workdir: str):
  import ml_collections

  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"no config.json in {workdir}")
  with open(path) as f:
    config = ml_collections.ConfigDict(json.load(f))
  if config.get("agent") != "option_critic":
    raise ValueError(f"config.agent: expected 'option_critic', got {config.get('agent')!r}")
  config.hidden_sizes = tuple(config.hidden_sizes)
  config.seeds = tuple(config.seeds)
  return config


def restore_state(workdir: str, config, seed: Optional[int] = None):
  """The final run state of one seed (the first by default) of the run in `workdir`."""
  from hrljax import training
  from hrljax.agents import option_critic

  states = dict(
    training.seed_states(
      config, training.restore(option_critic.make_learner(config), config, workdir)
    )
  )
  seed = config.seeds[0] if seed is None else seed
  if seed not in states:
    raise ValueError(f"--seed: expected one of the run's seeds {list(states)}, got {seed}")
  return states[seed]


def option_maps(agent, env, env_params) -> dict[str, np.ndarray]:
  """Termination probabilities `[O, 13, 13]` and greedy options `[13, 13]` (NaN / -1 on walls).

  Observations are built by the environment itself for the agent standing in each free cell with
  the first goal, so one-hot and coordinate observations both work.
  """
  import jax
  import jax.numpy as jnp
  from hrljax.envs import four_rooms

  cells = four_rooms.free_cells()
  size = four_rooms.GRID_SIZE

  def observe(cell):
    state = four_rooms.EnvState(
      pos=cell,
      goal=env_params.goal,
      time=jnp.zeros((), jnp.int32),
      total_steps=jnp.zeros((), jnp.int32),
    )
    return env.get_obs(state)

  obs = jax.vmap(observe)(jnp.asarray(cells))
  out = agent.network.apply(agent.params, obs)
  beta = np.full((agent.config.num_options, size, size), np.nan)
  beta[:, cells[:, 0], cells[:, 1]] = np.asarray(out.beta).T
  greedy = np.full((size, size), -1)
  greedy[cells[:, 0], cells[:, 1]] = np.asarray(jnp.argmax(out.q, axis=-1))
  return {"termination": beta, "greedy_option": greedy}


def draw(maps: dict, goals: dict, out: str, title: str = "") -> str:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib.colors import ListedColormap

  beta, greedy = maps["termination"], maps["greedy_option"]
  num_options = beta.shape[0]
  fig, axes = plt.subplots(1, num_options + 1, figsize=(3.2 * (num_options + 1), 3.6))
  walls = np.isnan(beta[0])
  cmap = plt.get_cmap("viridis").with_extremes(bad="0.35")
  for w in range(num_options):
    image = axes[w].imshow(np.ma.masked_invalid(beta[w]), cmap=cmap, vmin=0.0, vmax=1.0)
    axes[w].set_title(f"option {w}: termination")
  fig.colorbar(image, ax=axes[:num_options].tolist(), fraction=0.02, pad=0.01)
  colors = plt.get_cmap("tab10").colors[:num_options]
  options_cmap = ListedColormap(colors).with_extremes(bad="0.35")
  axes[-1].imshow(
    np.ma.masked_array(greedy, walls), cmap=options_cmap, vmin=-0.5, vmax=num_options - 0.5
  )
  axes[-1].set_title("greedy option argmax Q")
  handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors]
  axes[-1].legend(
    handles,
    [f"option {w}" for w in range(num_options)],
    loc="upper left",
    bbox_to_anchor=(1.0, 1.0),
    fontsize=8,
  )
  for ax in axes:
    for label, (row, col) in goals.items():
      ax.text(col, row, label, ha="center", va="center", color="red", fontweight="bold")
    ax.set_xticks([])
    ax.set_yticks([])
  if title:
    fig.suptitle(title)
  fig.savefig(out, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return out


def plot_workdir(workdir: str, out: str = None, seed: Optional[int] = None) -> str:
  """Restores the run in `workdir` (one seed of it) and writes the PNG; returns its path."""
  from hrljax import envs
  from hrljax.envs import four_rooms

  config = load_config(workdir)
  if config.env_name != four_rooms.ENV_NAME:
    raise ValueError(f"config.env_name: expected {four_rooms.ENV_NAME!r}, got {config.env_name!r}")
  state = restore_state(workdir, config, seed)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  maps = option_maps(state.agent, env, env_params)
  goals = {"G": tuple(int(x) for x in env_params.goal)}
  if env_params.transfer_after_steps != four_rooms.NEVER:
    goals["T"] = tuple(int(x) for x in env_params.transfer_goal)
  out = out or os.path.join(workdir, "options.png")
  return draw(maps, goals, out, title=f"{workdir} (update {int(state.update)})")


def main(argv):
  logging.set_verbosity(logging.WARNING)  # orbax logs every restore step at INFO
  if len(argv) != 2:
    print(
      "error: expected one workdir: python -m experiments.plot_options WORKDIR", file=sys.stderr
    )
    sys.exit(2)
  try:
    print(plot_workdir(argv[1], FLAGS.out, FLAGS.seed))
  except (FileNotFoundError, ValueError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  define_flags()
  app.run(main)
