"""Scaling efficiency: env steps/s of N local processes x 1 device vs 1 process x 1 device.

  python -m experiments.benchmarks.scaling --config=experiments/configs/ppo_cartpole.py \\
      --reps=3 --out=experiments/benchmarks/scaling.png

Both runs train the same config on the same total batch (`config.num_envs` environments in all:
split over the processes' devices in the multi-process run) through the real entry points,
`python -m experiments.train` and `python -m experiments.launch_local --num_processes=N
--devices_per_process=1 --pin_cores` (each process on its own share of the cores;
`--pin_cores=false` leaves them unpinned). The speed of a run is read from its `metrics.jsonl`: the
env steps of every logged chunk after the first divided by the chunk's wall time (`hrljax.logging`
fields `env_steps` and `wall_time`; compile time is not in them). The first chunk is dropped as
warm-up. Repetitions alternate between the two settings so that both see the same machine load (a
run that crashes is reported with its stderr saved beside `--out` and its rep left out); prints one
JSON line per run and a summary line with the median, min and max efficiency (multi-process
steps/s over single-process steps/s), and draws both as a PNG at `--out`.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("config", "experiments/configs/ppo_cartpole.py", "Experiment config file.")
  flags.DEFINE_integer("num_processes", 2, "Processes of the multi-process run (1 device each).")
  flags.DEFINE_integer("reps", 3, "Repetitions of each setting (alternating).")
  flags.DEFINE_integer("total_timesteps", 131_072, "Env steps of every run.")
  flags.DEFINE_integer("log_every", 16, "Updates per logged chunk.")
  flags.DEFINE_string("out", "experiments/benchmarks/scaling.png", "Where to write the PNG.")
  flags.DEFINE_string("json_out", None, "Optional path for the per-run JSON lines.")
  flags.DEFINE_list("overrides", [], "Extra --config.<field>=value overrides for every run.")
  flags.DEFINE_bool("pin_cores", True, "Pin each process of the multi-process run to its cores.")


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_args(workdir: str) -> list:
  return [
    f"--config={FLAGS.config}",
    f"--workdir={workdir}",
    f"--config.total_timesteps={FLAGS.total_timesteps}",
    f"--config.log_every={FLAGS.log_every}",
    f"--config.checkpoint_every={FLAGS.log_every * 10_000}",
    "--config.eval_episodes=1",
    *[f"--config.{o}" for o in FLAGS.overrides],
  ]


def steps_per_second(workdir: str) -> dict:
  """Env steps/s of a finished run from its JSONL, without the first (warm-up) chunk."""
  from hrljax.logging import read_jsonl

  records = [r for r in read_jsonl(workdir) if r["phase"] == "train"]
  if len(records) < 3:
    raise ValueError(f"{workdir}: expected at least 3 logged chunks, got {len(records)}")
  steps = records[-1]["env_steps"] - records[0]["env_steps"]
  seconds = records[-1]["wall_time"] - records[0]["wall_time"]
  per_chunk = [r["env_steps_per_second"] for r in records[1:]]
  return {
    "env_steps_per_second": steps / seconds,
    "chunk_median": statistics.median(per_chunk),
    "chunks": len(per_chunk),
    "env_steps": records[-1]["env_steps"],
  }


def run_setting(processes: int, workdir: str) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one real CPU device
  if processes == 1:
    command = [sys.executable, "-m", "experiments.train", *run_args(workdir)]
  else:
    command = [
      sys.executable,
      "-m",
      "experiments.launch_local",
      f"--num_processes={processes}",
      "--devices_per_process=1",
      f"--pin_cores={FLAGS.pin_cores}",
      "--",
      *run_args(workdir),
    ]
  result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
  if result.returncode != 0:  # reported and left out of the ratios (e.g. a crash under load)
    log = os.path.abspath(f"{FLAGS.out}.failed_{os.path.basename(workdir)}.log")
    with open(log, "w") as f:
      f.write(" ".join(command) + "\n" + result.stderr)
    return {"processes": processes, "failed": result.returncode, "stderr_log": log}
  return {"processes": processes, **steps_per_second(workdir)}


def load_average() -> float:
  return os.getloadavg()[0]


def plot(runs: list, out: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 4.0))
  settings = sorted({r["processes"] for r in runs})
  for p in settings:
    speeds = [r["env_steps_per_second"] for r in runs if r["processes"] == p and "failed" not in r]
    left.scatter([p] * len(speeds), speeds, label=f"{p} process(es)")
    left.hlines(statistics.median(speeds), p - 0.2, p + 0.2, colors="k")
  left.set_xticks(settings)
  left.set_xlabel("processes x 1 CPU device (same total batch)")
  left.set_ylabel("env steps / s")
  left.set_title("PPO CartPole throughput (each rep; line = median)")
  left.grid(alpha=0.3)
  ratios = efficiencies(runs)
  right.bar(range(1, len(ratios) + 1), ratios)
  right.axhline(1.0, color="k", lw=0.8)
  right.set_xlabel("repetition")
  right.set_ylabel(f"efficiency ({settings[-1]} processes / 1 process)")
  right.set_title(f"median {statistics.median(ratios):.2f}")
  right.grid(alpha=0.3)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=110)
  plt.close(fig)


def efficiencies(runs: list) -> list:
  """Per repetition: multi-process steps/s over the single-process steps/s of the same rep."""
  by = {(r["rep"], r["processes"]): r["env_steps_per_second"] for r in runs if "failed" not in r}
  reps = sorted({rep for rep, _ in by if (rep, 1) in by and (rep, FLAGS.num_processes) in by})
  return [by[(rep, FLAGS.num_processes)] / by[(rep, 1)] for rep in reps]


def main(argv):
  del argv
  for path in (FLAGS.out, FLAGS.json_out):  # before the runs, not after them
    if path:
      os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  root = tempfile.mkdtemp(prefix="hrljax_scaling_")
  runs = []
  try:
    for rep in range(FLAGS.reps):
      order = (1, FLAGS.num_processes) if rep % 2 == 0 else (FLAGS.num_processes, 1)
      for processes in order:
        load = load_average()
        run = run_setting(processes, os.path.join(root, f"rep{rep}_p{processes}"))
        run.update(rep=rep, load_before=load, load_after=load_average())
        runs.append(run)
        print(json.dumps(run), flush=True)
  finally:
    shutil.rmtree(root, ignore_errors=True)
  ratios = efficiencies(runs)
  summary = {
    "efficiency_median": statistics.median(ratios),
    "efficiency_min": min(ratios),
    "efficiency_max": max(ratios),
    "efficiencies": ratios,
    "failed_runs": sum("failed" in r for r in runs),
    **{
      f"steps_per_second_{p}p_median": statistics.median(
        [r["env_steps_per_second"] for r in runs if r["processes"] == p and "failed" not in r]
      )
      for p in (1, FLAGS.num_processes)
    },
  }
  print(json.dumps(summary), flush=True)
  if FLAGS.json_out:
    with open(FLAGS.json_out, "w") as f:
      for run in runs:
        f.write(json.dumps(run) + "\n")
      f.write(json.dumps(summary) + "\n")
  plot(runs, FLAGS.out)


if __name__ == "__main__":
  define_flags()
  app.run(main)
