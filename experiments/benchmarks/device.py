"""The accelerator suite: hrljax's benchmarks against their peers on one GPU (or TPU), in one command.

  make device-wheels [PUREJAXRL=<checkout> OGBENCH=<checkout>]   # here, where a registry is
  python3 -m experiments.benchmarks.device [--out=runs/bench_device]   # on the accelerator
  python -m experiments.benchmarks.device --smoke   # tiny sizes on any backend (the tests run it)

The accelerator machines hold JAX with CUDA, flax, optax, chex, orbax, torch and transformers but
reach no package registry: the other dependencies (`device_requirements.txt`) are installed from
the wheels carried in `--wheels` (`.device/wheels`, made by `make device-wheels`) into a folder
beside them, only where the machine lacks them. The peers' code is read from checkouts carried
in `.device/` too (nothing of them is in this repository).

Each benchmark runs in a process of its own, under a time limit, so that a crash or an
out-of-memory error stops only that one and each starts with the whole device. `--smoke` runs
them one after another in the suite's own process instead: at its tiny sizes a fresh
interpreter's imports would be most of the time. Every benchmark is
one of the side-by-side scripts of this folder:

- `ppo_2048`, `ppo_256`: `throughput.py`, PPO on CartPole-v1 (PureJaxRL's settings) at 2,048 and
  256 environments, against PureJaxRL's `ppo.py` interleaved rep by rep;
- `option_critic`: `throughput.py` on the option-critic four-rooms run (hrljax only);
- `hiql`: `hiql_throughput.py`, one HIQL update at OGBench's sizes against OGBench's own HIQL;
- `llm_sampling`: `llm_sampling.py`, SmolLM2-135M sampling against transformers' `generate` (on
  the same device where torch sees it). The 98 MB GGUF does not travel to the accelerator
  machines, so both sides draw random weights of SmolLM2-135M's shape (`--weights=random`):
  speed does not depend on the weights' values, and no stop token ends a row early.

Prints one JSON line per benchmark ({"benchmark", "status", "seconds", "records": the script's
JSON lines}) after a line describing the platform, and writes them all to `<out>/summary.json`.
"""

import contextlib
import glob
import importlib.metadata
import importlib.util
import json
import os
import io
import platform
import re
import runpy
import subprocess
import sys
import time
import traceback
from typing import Callable, NamedTuple, Optional

from absl import app, flags

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIREMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "device_requirements.txt")


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_bool("smoke", False, "Tiny sizes, one rep: checks that the suite runs (CPU).")
  flags.DEFINE_string("out", "runs/bench_device", "Folder of summary.json.")
  flags.DEFINE_string("wheels", ".device/wheels", "Carried wheels of the missing dependencies.")
  flags.DEFINE_string("purejaxrl_path", ".device/purejaxrl", "A purejaxrl checkout (optional).")
  flags.DEFINE_string("ogbench_path", ".device/ogbench/impls", "OGBench's impls/ (optional).")
  flags.DEFINE_list("only", [], "Benchmarks to run (default: all); see the module docstring.")
  flags.DEFINE_integer("timeout", 240, "Seconds each benchmark may run.")


# ------------------------------------------------------------------------------------------------
# Dependencies from carried wheels.
# ------------------------------------------------------------------------------------------------


def required_distributions(path: str = REQUIREMENTS) -> list:
  """The `name==version` lines of the requirements file, as (name, version) pairs."""
  pairs = []
  with open(path) as f:
    for line in f:
      line = line.split("#")[0].strip()
      if line:
        name, _, version = line.partition("==")
        pairs.append((name.strip(), version.strip()))
  return pairs


def _installed(name: str) -> bool:
  try:
    importlib.metadata.version(name)
    return True
  except importlib.metadata.PackageNotFoundError:
    return False


def _wheel_name(path: str) -> str:
  """The normalised distribution name of a wheel file (`dm_tree-0.1.10-...` -> `dm-tree`)."""
  return re.sub(r"[-_.]+", "-", os.path.basename(path).split("-")[0]).lower()


BUILD_ONLY = ("setuptools",)  # needed to build hrljax's editable install, not to run it


def install_hrljax(wheels: str, python: str = sys.executable) -> bool:
  """An editable install of this checkout (`hrljax.agents` etc. map to its top-level folders),
  built with the carried setuptools; False if one was there already."""
  if importlib.util.find_spec("hrljax.agents") is not None:
    return False
  command = [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
  subprocess.run(command + ["--find-links", wheels, "--editable", ROOT], check=True)
  importlib.invalidate_caches()
  return True


def install_carried_wheels(
  wheels: str, target: str, python: str = sys.executable, installed: Callable = _installed
) -> list:
  """Installs, into `target`, the carried wheels of the distributions `python` lacks
  (`installed(name)` is False; no index, no dependency resolution: the folder holds the whole
  closure); returns their names."""
  missing = {re.sub(r"[-_.]+", "-", n).lower() for n, _ in required_distributions()}
  missing = {n for n in missing if n not in BUILD_ONLY and not installed(n)}
  if not missing:
    return []
  files = [f for f in sorted(glob.glob(os.path.join(wheels, "*.whl"))) if _wheel_name(f) in missing]
  absent = missing - {_wheel_name(f) for f in files}
  if absent:
    raise SystemExit(
      f"error: --wheels: expected wheels of {sorted(absent)} in {wheels!r} (this Python lacks "
      f"them): run `make device-wheels` where a package registry is reachable, and carry .device"
    )
  # This pip, run for `python` (`--python`: that interpreter needs no pip of its own).
  command = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-index"]
  subprocess.run(command + ["--no-deps", "--target", target, *files], check=True)
  return sorted(missing)


# ------------------------------------------------------------------------------------------------
# The benchmarks.
# ------------------------------------------------------------------------------------------------


class Benchmark(NamedTuple):
  name: str
  args: list  # `python -m experiments.benchmarks.<args[0]> <args[1:]>`


def _ppo(num_envs: int, updates: int, smoke: bool) -> list:
  num_steps = 8 if smoke else 128
  return [
    "throughput",
    "--config=experiments/configs/ppo_cartpole.py",
    f"--config.num_envs={num_envs}",
    f"--config.num_steps={num_steps}",
    f"--config.total_timesteps={num_envs * num_steps * updates}",
    f"--reps={1 if smoke else 5}",
  ]


NAMES = ("ppo_2048", "ppo_256", "option_critic", "hiql", "llm_sampling")


def benchmarks(smoke: bool, purejaxrl: Optional[str], ogbench: Optional[str], torch: bool) -> list:
  """The suite at its accelerator sizes, or at `smoke` sizes (tiny, one rep; `ppo_256` left out:
  at that size it is `ppo_2048`'s program)."""
  reference = ["--reference=purejaxrl", f"--reference_path={purejaxrl}"] if purejaxrl else []
  suite = [Benchmark("ppo_2048", _ppo(4 if smoke else 2048, 2 if smoke else 20, smoke) + reference)]
  if not smoke:
    suite.append(Benchmark("ppo_256", _ppo(256, 40, smoke) + reference))
  option_critic = ["throughput", "--config=experiments/configs/option_critic_fourrooms.py"]
  if smoke:
    # Unroll 1: the unrolled rollout (the config's 4) compiles a third slower, for nothing here.
    option_critic += [
      "--config.num_envs=4",
      "--config.total_timesteps=256",
      "--config.rollout_unroll=1",
      "--reps=1",
    ]
  else:
    option_critic += ["--reps=3"]
  suite.append(Benchmark("option_critic", option_critic))
  hiql = ["hiql_throughput"] + ([f"--reference_path={ogbench}"] if ogbench else [])
  if smoke:
    hiql += ["--batch_size=8", "--updates=1", "--rounds=1"]
  suite.append(Benchmark("hiql", hiql))
  sampling = ["llm_sampling", "--weights=random"]
  if smoke:
    sampling += ["--num_layers=1", "--batch=2", "--prompt_len=4", "--new_tokens=4", "--reps=1"]
  else:
    sampling += ["--dtype=bfloat16"]
  if torch and not smoke:
    sampling += [f"--reference_python={sys.executable}"]
  suite.append(Benchmark("llm_sampling", sampling))
  return suite


def json_lines(text: str) -> list:
  """The JSON objects printed one per line in `text` (other lines skipped)."""
  records = []
  for line in text.splitlines():
    line = line.strip()
    if line.startswith("{"):
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        pass
  return records


def benchmark_result(
  benchmark: Benchmark, status: str, seconds: float, stdout: str, stderr: str
) -> dict:
  """A benchmark's summary line: its JSON lines, and the end of its stderr if it failed."""
  module, *args = benchmark.args
  result = {
    "benchmark": benchmark.name,
    "status": status,
    "seconds": round(seconds, 1),
    "command": " ".join(["python", "-m", f"experiments.benchmarks.{module}", *args]),
    "records": json_lines(stdout),
  }
  if status != "ok":
    result["stderr_tail"] = stderr[-2000:]
  return result


def run_benchmark(benchmark: Benchmark, env: dict, timeout: int) -> dict:
  """One benchmark in its own process: its JSON lines, or the end of its stderr if it failed."""
  module, *args = benchmark.args
  command = [sys.executable, "-m", f"experiments.benchmarks.{module}", *args]
  start = time.perf_counter()
  try:
    done = subprocess.run(
      command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    stdout, stderr = done.stdout, done.stderr
  except subprocess.TimeoutExpired as expired:
    status = f"timeout after {timeout} s"
    stdout = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
    stderr = expired.stderr.decode() if isinstance(expired.stderr, bytes) else expired.stderr or ""
  return benchmark_result(benchmark, status, time.perf_counter() - start, stdout, stderr)


def run_in_this_process(benchmark: Benchmark) -> dict:
  """One benchmark run in this process (`--smoke`: tiny sizes, where a fresh interpreter's
  imports would take most of the time), its output captured; the flags it defines are removed
  after it, for the next one to define its own."""
  module, *args = benchmark.args
  before = set(FLAGS)
  stdout, stderr = io.StringIO(), io.StringIO()
  start = time.perf_counter()
  status = "ok"
  argv, cwd = sys.argv, os.getcwd()
  try:
    os.chdir(ROOT)
    sys.argv = [module, *args]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
      runpy.run_module(f"experiments.benchmarks.{module}", run_name="__main__", alter_sys=True)
  except SystemExit as done:
    if done.code not in (None, 0):
      status = f"exit {done.code if isinstance(done.code, int) else 1}"
      stderr.write(f"{done.code}\n")
  except Exception:  # reported in the benchmark's stderr_tail
    status = "exit 1"
    stderr.write(traceback.format_exc())
  finally:
    sys.argv = argv
    os.chdir(cwd)
    for name in set(FLAGS) - before:
      delattr(FLAGS, name)
  return benchmark_result(
    benchmark, status, time.perf_counter() - start, stdout.getvalue(), stderr.getvalue()
  )


def platform_record() -> dict:
  """What the numbers were measured on."""
  import jax

  device = jax.devices()[0]
  record = {
    "benchmark": "platform",
    "backend": jax.default_backend(),
    "device_kind": device.device_kind,
    "device_count": jax.device_count(),
    "python": platform.python_version(),
    "cpu_count": os.cpu_count(),
  }
  for name in ("jax", "jaxlib", "flax", "optax", "torch", "transformers"):
    record[name] = (
      importlib.metadata.version(name) if importlib.util.find_spec(name) is not None else None
    )
  return record


def write_summary(records: list, out: str) -> None:
  path = os.path.join(out, "summary.json")
  with open(path + ".partial", "w") as f:
    json.dump(records, f, indent=1)
  os.replace(path + ".partial", path)


def existing(path: str, marker: str) -> Optional[str]:
  """`path` made absolute if it holds `marker`, else None (that reference is left out)."""
  return os.path.abspath(path) if os.path.exists(os.path.join(path, marker)) else None


def main(argv) -> None:
  del argv
  unknown = sorted(set(FLAGS.only) - set(NAMES))
  if unknown:
    raise SystemExit(f"error: --only: expected names among {list(NAMES)}, got {unknown}")
  os.makedirs(FLAGS.out, exist_ok=True)
  env = dict(os.environ)
  site = os.path.abspath(os.path.join(os.path.dirname(FLAGS.wheels), "site"))
  installed = install_carried_wheels(FLAGS.wheels, site)
  # Not the checkout itself: the children run from it, and OGBench's worker, run from its own
  # folder, would find this repository's `agents` before its own.
  paths = [site] if installed or os.path.isdir(site) else []
  sys.path[1:1] = paths
  env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
  os.environ["PYTHONPATH"] = env["PYTHONPATH"]  # pip's build of hrljax needs the wheels too
  editable = install_hrljax(FLAGS.wheels)
  records = [dict(platform_record(), installed_from_wheels=installed, installed_hrljax=editable)]
  print(json.dumps(records[0]), flush=True)
  suite = benchmarks(
    FLAGS.smoke,
    existing(FLAGS.purejaxrl_path, os.path.join("purejaxrl", "ppo.py")),
    existing(FLAGS.ogbench_path, os.path.join("agents", "hiql.py")),
    importlib.util.find_spec("torch") is not None
    and importlib.util.find_spec("transformers") is not None,
  )
  for benchmark in suite:
    if FLAGS.only and benchmark.name not in FLAGS.only:
      continue
    print(f"{benchmark.name}: running", file=sys.stderr, flush=True)
    if FLAGS.smoke:
      result = run_in_this_process(benchmark)
    else:
      result = run_benchmark(benchmark, env, FLAGS.timeout)
    records.append(result)
    print(json.dumps(result), flush=True)
    write_summary(records, FLAGS.out)  # after each one: a suite stopped midway keeps what ran
  failed = [r["benchmark"] for r in records[1:] if r["status"] != "ok"]
  print(
    f"{len(records) - 1 - len(failed)} of {len(records) - 1} benchmarks ran"
    + (f"; failed: {failed}" if failed else "")
    + f"; summary in {os.path.join(FLAGS.out, 'summary.json')}",
    file=sys.stderr,
  )


if __name__ == "__main__":
  define_flags()
  app.run(main)
