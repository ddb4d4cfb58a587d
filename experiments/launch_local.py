"""Starts a multi-process hrljax run on this machine (for testing multi-host code on CPU).

  python -m experiments.launch_local --num_processes=2 --devices_per_process=4 -- \\
      --config=experiments/configs/ppo_cartpole.py --workdir=runs/ppo_2proc

Every process runs `experiments.train` with the arguments after `--`, joined through a coordinator
on a free loopback port (JAX's multi-controller runtime with gloo CPU collectives): one global
mesh over all processes' devices, process 0 writes the logs. If any process fails, the others
are stopped within `--grace_seconds` and the launcher exits with an error naming the process,
instead of leaving the survivors blocked in a collective.

`--pin_cores` gives each process its own share of this machine's cores (`os.sched_setaffinity`):
XLA sizes its CPU thread pools from the cores a process may use, so unpinned processes each run
threads on every core and preempt one another, also while a collective waits for the slowest.
"""

import os
import signal
import socket
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_integer("num_processes", 2, "Processes to start.")
  flags.DEFINE_integer(
    "devices_per_process",
    None,
    "Fake CPU devices per process (XLA_FLAGS); default: leave XLA_FLAGS as is.",
  )
  flags.DEFINE_float("grace_seconds", 10.0, "Time the others get to exit after one fails.")
  flags.DEFINE_bool(
    "pin_cores", False, "Pin each process to its equal share of the machine's cores."
  )


def free_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def process_env(devices: int | None) -> dict:
  env = dict(os.environ)
  if devices is not None:
    env["XLA_FLAGS"] = (
      env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    ).strip()
  return env


def stop(processes, grace_seconds: float) -> None:
  """SIGTERM every live process, then SIGKILL whatever is left after the grace period."""
  for process in processes:
    if process.poll() is None:
      process.send_signal(signal.SIGTERM)
  deadline = time.time() + grace_seconds
  for process in processes:
    remaining = max(0.0, deadline - time.time())
    try:
      process.wait(timeout=remaining)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()


def core_shares(num_processes: int, cores: list) -> list:
  """`cores` split into `num_processes` equal consecutive shares (the remainder left unused)."""
  per_process = len(cores) // num_processes
  if per_process == 0:
    raise ValueError(
      f"--pin_cores: expected at least one core per process, got {len(cores)} cores for "
      f"{num_processes} processes"
    )
  return [cores[i * per_process : (i + 1) * per_process] for i in range(num_processes)]


def launch(
  num_processes: int,
  train_args: list,
  devices: int | None,
  grace_seconds: float,
  pin_cores: bool = False,
) -> int:
  address = f"127.0.0.1:{free_port()}"
  processes = []
  shares = core_shares(num_processes, sorted(os.sched_getaffinity(0))) if pin_cores else None
  for index in range(num_processes):
    command = [
      sys.executable,
      "-m",
      "experiments.train",
      *train_args,
      f"--coordinator_address={address}",
      f"--num_processes={num_processes}",
      f"--process_id={index}",
    ]
    stdout = None if index == 0 else subprocess.DEVNULL  # process 0 reports progress
    pin = (lambda cores=shares[index]: os.sched_setaffinity(0, cores)) if pin_cores else None
    processes.append(
      subprocess.Popen(command, env=process_env(devices), stdout=stdout, preexec_fn=pin)
    )
    print(f"launch_local: process {index} pid {processes[-1].pid}", flush=True)
  try:
    while True:
      codes = [process.poll() for process in processes]
      failed = [(i, code) for i, code in enumerate(codes) if code not in (None, 0)]
      if failed:
        index, code = failed[0]
        print(
          f"error: process {index} exited with code {code}; stopping the other processes",
          file=sys.stderr,
          flush=True,
        )
        stop(processes, grace_seconds)
        return 1
      if all(code == 0 for code in codes):
        return 0
      time.sleep(0.2)
  except KeyboardInterrupt:
    stop(processes, grace_seconds)
    return 130


def main(argv):
  train_args = argv[1:]
  if FLAGS.num_processes < 1:
    sys.exit(f"error: --num_processes: expected an integer >= 1, got {FLAGS.num_processes}")
  if not any(arg.startswith("--config") for arg in train_args):
    sys.exit("error: expected the train arguments after `--`, e.g. -- --config=... --workdir=...")
  try:
    code = launch(
      FLAGS.num_processes,
      train_args,
      FLAGS.devices_per_process,
      FLAGS.grace_seconds,
      FLAGS.pin_cores,
    )
  except ValueError as error:
    sys.exit(f"error: {error}")
  sys.exit(code)


if __name__ == "__main__":
  define_flags()
  app.run(main)
