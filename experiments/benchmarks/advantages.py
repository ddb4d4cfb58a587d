"""GiGPO advantages on device against the dictionary-based host implementation.

  python -m experiments.benchmarks.advantages                  # 4096 trajectories x 64 steps

times the jitted (after compile) GiGPO advantages of `hrljax.losses.group_relative` three ways:

* `gigpo_grid_advantages`: the `[T, N]` grid of the rollout in, observations as anchor keys
  (anchors by direct addressing: each task's observations span a small box of grid cells, so
  (task, observation) numbers its slot with no collision; hash tables when the boxes do not fit;
  returns by a scan over time; no sort). The headline number.
* `anchor_state_ids` then `gigpo_advantages` on the flattened rows (what `agents/group_relative`
  calls; the grid layout is detected at run time, so the returns skip the sort there too);
* `gigpo_advantages` alone with the anchor ids precomputed;

against `reference_gigpo`, a straightforward NumPy/Python implementation of the same formulas that
groups trajectories, episode groups and anchor states with dictionaries, as verl-agent's PyTorch
`gigpo/core_gigpo.py` does on the host. Prints the times and their ratios as JSON, and the largest
difference between each result and the reference. The versions run in interleaved rounds (one
run of each per round), so a change of load on a shared machine hits them alike; the `*_seconds`
and `speedup_*` numbers are the fastest run of each (the least disturbed by other processes),
`median_seconds` the medians.

The batch is real: `num_groups` FourRooms tasks (random start and goal) x `group_size` episodes
of a uniformly random policy, `num_steps` steps each (`hrljax.rollout.grouped_episodes`); the
steps after an episode's end are padding rows (`valid` False) for the device version and are left
out of the reference's input (verl-agent stores only real steps).

`reference_gigpo` is the project's one reference of GiGPO: the tests compare `gigpo_advantages`
with it.
"""

import collections
import json
import statistics
import sys
import time

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags; defined only when run as a program, so importing the module (the tests
  load `reference_gigpo` from it) never registers them twice."""
  flags.DEFINE_integer("num_groups", 512, "Episode groups (tasks).")
  flags.DEFINE_integer("group_size", 8, "Episodes per group.")
  flags.DEFINE_integer("num_steps", 64, "Steps per episode window.")
  flags.DEFINE_integer("reps", 20, "Timed runs of each device version.")
  flags.DEFINE_integer("reference_reps", 3, "Timed runs of the reference.")
  flags.DEFINE_integer("seed", 0, "PRNG seed of the rollout.")


def reference_gigpo(
  obs, r, traj, step, group, *, gamma=0.95, omega=1.0, norm="mean", eps=1e-6, weighting="trajectory"
):
  """GiGPO advantages (arXiv:2505.10978 Eqs. 3, 5-8) with Python dictionaries, in float64.

  One row per environment step, rows in any order; only real steps (no padding).

  Args:
    obs: `[N, ...]` observation of each step (the anchor key: rows of one group with the same
      bytes share an anchor; integer observations, or floats without -0.0 / NaN).
    r: `[N]` reward of each step.
    traj: `[N]` trajectory id; step: `[N]` step index within it; group: `[N]` episode group.
    gamma: discount of the step returns (Eq. 5); omega: weight of the step advantage (Eq. 8).
    norm: "mean" (verl-agent `mean_norm`) or "mean_std" (`mean_std_norm`: unbiased std + eps).
    weighting: episode baseline over trajectories ("trajectory", Eq. 3) or over step rows
      ("step": verl-agent with `compute_mean_std_cross_all_data`).

  Returns:
    `[N]` float64 advantages. A group with one trajectory (one row with "step") and an anchor
    with one step get 0 from their level.
  """
  obs = np.asarray(obs)
  r = np.asarray(r, np.float64)
  num_rows = len(r)
  rows_of_traj = collections.defaultdict(list)
  for i in range(num_rows):
    rows_of_traj[int(traj[i])].append(i)

  # Eq. 5: discounted return of every step, backwards through each trajectory.
  step_return = np.zeros(num_rows)
  episode_return = {}
  for t, rows in rows_of_traj.items():
    running = 0.0
    for i in sorted(rows, key=lambda i: step[i], reverse=True):
      running = r[i] + gamma * running
      step_return[i] = running
    episode_return[t] = float(sum(r[i] for i in rows))

  def relative(values):
    values = np.asarray(values, np.float64)
    if len(values) < 2:
      return np.zeros_like(values)
    centred = values - values.mean()
    return centred if norm == "mean" else centred / (values.std(ddof=1) + eps)

  # Eq. 3: episode advantage against the other trajectories (or steps) of the group.
  episode_adv = np.zeros(num_rows)
  members = collections.defaultdict(list)
  for t, rows in rows_of_traj.items():
    members[int(group[rows[0]])].extend([t] if weighting == "trajectory" else rows)
  for items in members.values():
    if weighting == "trajectory":
      for t, a in zip(items, relative([episode_return[t] for t in items])):
        episode_adv[rows_of_traj[t]] = a
    else:
      episode_adv[items] = relative([episode_return[int(traj[i])] for i in items])

  # Eqs. 6-7: anchor groups keyed by (group, observation), step advantage within each.
  anchor_rows = collections.defaultdict(list)
  for i in range(num_rows):
    anchor_rows[(int(group[i]), obs[i].tobytes())].append(i)
  step_adv = np.zeros(num_rows)
  for rows in anchor_rows.values():
    step_adv[rows] = relative(step_return[rows])
  return episode_adv + omega * step_adv  # Eq. 8


def random_episodes(num_groups: int, group_size: int, num_steps: int, seed: int):
  """Flat time-major step rows of FourRooms episodes of a uniformly random policy.

  Returns NumPy `(obs [R, 4], reward, traj, step, group, valid)` with `R = T * N` rows.
  """
  import jax
  import jax.numpy as jnp
  from hrljax import envs, rollout

  env, env_params = envs.make(
    "FourRooms-misc", resample_init_pos=True, resample_goal_pos=True, max_steps_in_episode=num_steps
  )

  def uniform(params, obs, key):
    del params
    return jax.random.randint(key, (obs.shape[0],), 0, env.num_actions), None

  @jax.jit
  def collect(key):
    group_ids = rollout.grouped_ids(num_groups, group_size)
    episodes = rollout.grouped_episodes(env, env_params, uniform, None, key, group_ids, num_steps)
    shape = episodes.valid.shape
    traj = jnp.broadcast_to(jnp.arange(shape[1], dtype=jnp.int32)[None, :], shape)
    step = jnp.broadcast_to(jnp.arange(shape[0], dtype=jnp.int32)[:, None], shape)
    group = jnp.broadcast_to(group_ids[None, :], shape)
    transitions = episodes.transitions
    rows = shape[0] * shape[1]
    return (
      transitions.obs.reshape(rows, -1),
      transitions.reward.reshape(rows),
      traj.reshape(rows),
      step.reshape(rows),
      group.reshape(rows),
      episodes.valid.reshape(rows),
    )

  return tuple(np.asarray(x) for x in collect(jax.random.key(seed)))


def _interleaved_seconds(fns: dict, reps: dict) -> dict:
  """Wall times of each callable, in rounds (one run of each per round, in turn), so that a
  change of machine load hits every version alike. Returns {name: [seconds, ...]}."""
  times = {name: [] for name in fns}
  for round_index in range(max(reps.values())):
    for name, fn in fns.items():
      if round_index < reps[name]:
        start = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - start)
  return times


def benchmark(
  num_groups: int = 512,
  group_size: int = 8,
  num_steps: int = 64,
  reps: int = 5,
  reference_reps: int = 3,
  seed: int = 0,
  gamma: float = 0.95,
  omega: float = 1.0,
  norm: str = "mean",
) -> dict:
  """Times both implementations on one batch; returns the timings, ratios and largest difference."""
  import functools

  import jax
  from hrljax.losses import group_relative as gr

  obs, reward, traj, step, group, valid = random_episodes(num_groups, group_size, num_steps, seed)
  num_rows = reward.shape[0]
  num_traj = num_groups * group_size
  advantages = jax.jit(
    functools.partial(
      gr.gigpo_advantages,
      num_groups=num_groups,
      num_traj=num_traj,
      num_anchors=num_rows,
      gamma=gamma,
      omega=omega,
      norm=norm,
    )
  )

  @jax.jit
  def with_anchors(obs, reward, traj, step, group, valid):
    anchors = gr.anchor_state_ids(obs, group, valid=valid)
    return advantages(reward, traj, step, group, anchors.ids, valid=valid).advantages

  shape = (num_steps, num_traj)

  @jax.jit
  def grid(obs, reward, group, valid):
    # Rows are time-major: row t * num_traj + n is step t of trajectory n.
    return gr.gigpo_grid_advantages(
      reward.reshape(shape),
      group.reshape(shape)[0],
      obs.reshape(shape + obs.shape[1:]),
      num_groups=num_groups,
      valid=valid.reshape(shape),
      gamma=gamma,
      omega=omega,
      norm=norm,
    ).advantages.reshape(-1)

  device_args = jax.device_put((obs, reward, traj, step, group, valid))
  grid_args = tuple(device_args[i] for i in (0, 1, 4, 5))
  start = time.perf_counter()
  compiled_grid = grid.lower(*grid_args).compile()
  compile_seconds = time.perf_counter() - start
  compiled = with_anchors.lower(*device_args).compile()
  anchor_ids = jax.block_until_ready(
    jax.jit(gr.anchor_state_ids)(device_args[0], device_args[4], valid=device_args[5]).ids
  )
  only = advantages.lower(*device_args[1:5], anchor_ids, valid=device_args[5]).compile()
  run_grid = lambda: jax.block_until_ready(compiled_grid(*grid_args))
  run_full = lambda: jax.block_until_ready(compiled(*device_args))
  run_only = lambda: jax.block_until_ready(
    only(*device_args[1:5], anchor_ids, valid=device_args[5])
  )
  run_grid(), run_full(), run_only()  # warm-up

  rows = valid.astype(bool)
  reference_args = (obs[rows], reward[rows], traj[rows], step[rows], group[rows])
  expected = None

  def run_reference():
    nonlocal expected
    expected = reference_gigpo(*reference_args, gamma=gamma, omega=omega, norm=norm)

  times = _interleaved_seconds(
    {"grid": run_grid, "full": run_full, "only": run_only, "reference": run_reference},
    {"grid": reps, "full": reps, "only": reps, "reference": reference_reps},
  )
  best = {name: min(t) for name, t in times.items()}
  median = {name: statistics.median(t) for name, t in times.items()}
  got = np.asarray(run_full())
  got_grid = np.asarray(run_grid())
  return {
    "trajectories": num_traj,
    "steps": num_steps,
    "rows": num_rows,
    "real_steps": int(rows.sum()),
    "device": jax.devices()[0].device_kind,
    "platform": jax.devices()[0].platform,
    "jax_grid_with_anchors_seconds": best["grid"],
    "jax_anchor_ids_and_advantages_seconds": best["full"],
    "jax_advantages_only_seconds": best["only"],
    "jax_grid_compile_seconds": compile_seconds,
    "reference_dictionary_seconds": best["reference"],
    "speedup_grid_with_anchors": best["reference"] / best["grid"],
    "speedup_with_anchor_ids": best["reference"] / best["full"],
    "speedup_advantages_only": best["reference"] / best["only"],
    "median_seconds": median,
    "median_speedup_grid_with_anchors": median["reference"] / median["grid"],
    "max_abs_difference": float(np.max(np.abs(got[rows] - expected))),
    "max_abs_difference_grid": float(np.max(np.abs(got_grid[rows] - expected))),
    "padding_rows_zero": bool(np.all(got[~rows] == 0) and np.all(got_grid[~rows] == 0)),
  }


def main(argv):
  del argv
  for name in ("num_groups", "group_size", "num_steps", "reps", "reference_reps"):
    if getattr(FLAGS, name) < 1:
      sys.exit(f"error: --{name}: expected an integer >= 1, got {getattr(FLAGS, name)}")
  result = benchmark(
    FLAGS.num_groups,
    FLAGS.group_size,
    FLAGS.num_steps,
    FLAGS.reps,
    FLAGS.reference_reps,
    FLAGS.seed,
  )
  print(
    f"gigpo_advantages, {result['trajectories']} trajectories x {result['steps']} steps "
    f"({result['real_steps']} real steps), fastest of the interleaved runs:",
    file=sys.stderr,
  )
  print(
    f"  reference (NumPy + dictionaries): {result['reference_dictionary_seconds']:.4f} s",
    file=sys.stderr,
  )
  print(
    f"  jax grid, anchors included: {result['jax_grid_with_anchors_seconds']:.4f} s"
    f"  ({result['speedup_grid_with_anchors']:.1f}x)",
    file=sys.stderr,
  )
  full = result["jax_anchor_ids_and_advantages_seconds"]
  print(
    f"  jax anchor ids + advantages:      {full:.4f} s  ({result['speedup_with_anchor_ids']:.1f}x)",
    file=sys.stderr,
  )
  print(
    f"  jax advantages (ids given):       {result['jax_advantages_only_seconds']:.4f} s"
    f"  ({result['speedup_advantages_only']:.1f}x)",
    file=sys.stderr,
  )
  print(f"  grid, medians: {result['median_speedup_grid_with_anchors']:.1f}x", file=sys.stderr)
  print(json.dumps(result))


if __name__ == "__main__":
  define_flags()
  app.run(main)
