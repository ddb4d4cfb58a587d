"""The accelerator suite (`experiments.benchmarks.device`): its smoke size runs every benchmark on
CPU, and its carried wheels install into an empty venv with no package index."""

import glob
import json
import os
import subprocess
import sys
import venv

import pytest

from experiments.benchmarks import device

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUITE = ("ppo_2048", "option_critic", "hiql", "llm_sampling")  # ppo_256: ppo_2048 at this size
# What each benchmark's first record must hold (a positive rate).
RATES = {
  "ppo_2048": "env_steps_per_second",
  "option_critic": "env_steps_per_second",
  "llm_sampling": "tokens_per_second_median",
}


def test_smoke_suite_runs_every_benchmark_and_writes_the_summary(tmp_path):
  out = tmp_path / "out"
  result = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.benchmarks.device",
      "--smoke",
      f"--out={out}",
      f"--wheels={tmp_path / 'no_wheels'}",  # nothing is missing here: nothing is installed
      f"--purejaxrl_path={tmp_path}",  # no checkouts: our sides only
      f"--ogbench_path={tmp_path}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  printed = [json.loads(line) for line in result.stdout.splitlines()]
  summary = json.loads((out / "summary.json").read_text())
  assert printed == summary
  assert summary[0]["benchmark"] == "platform" and summary[0]["backend"] == "cpu"
  assert summary[0]["installed_from_wheels"] == []
  runs = {r["benchmark"]: r for r in summary[1:]}
  assert tuple(runs) == SUITE
  for name, run in runs.items():
    assert run["status"] == "ok", run
    assert run["command"].startswith("python -m experiments.benchmarks."), run
  for name, key in RATES.items():
    assert runs[name]["records"][0][key] > 0, runs[name]
  hiql = runs["hiql"]["records"][0]
  assert hiql["ours"]["updates_per_second_median"] > 0 and "ogbench" not in hiql
  assert "stderr_tail" not in runs["llm_sampling"]
  assert "4 of 4 benchmarks ran" in result.stderr


def test_unknown_benchmark_name_is_a_one_line_error(tmp_path):
  result = subprocess.run(
    [sys.executable, "-m", "experiments.benchmarks.device", "--only=ppo", f"--out={tmp_path}"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode != 0
  assert "error: --only: expected names among" in result.stderr and "['ppo']" in result.stderr


def test_missing_wheels_are_named(tmp_path):
  with pytest.raises(SystemExit, match=r"--wheels: expected wheels of \[.*'distrax'.*make device"):
    device.install_carried_wheels(str(tmp_path), str(tmp_path / "site"), installed=lambda n: False)


def test_carried_wheels_install_into_an_empty_venv_without_an_index(tmp_path):
  """`make device-wheels` (here for this Python), then the suite's install into an empty venv
  with every index unreachable: each required distribution lands in the target folder."""
  wheels = tmp_path / "wheels"
  version = f"{sys.version_info.major}.{sys.version_info.minor}"
  subprocess.run(
    [
      "make",
      "--no-print-directory",
      "device-wheels",
      f"DEVICE_PYTHON={version}",
      f"WHEELS={wheels}",
    ],
    cwd=ROOT,
    check=True,
    capture_output=True,
    timeout=300,
  )
  empty = tmp_path / "venv"
  venv.create(empty)  # no pip in it: the suite's pip installs for it
  python = str(empty / "bin" / "python")
  offline = {"PIP_INDEX_URL": "http://127.0.0.1:9/", "PIP_CONFIG_FILE": os.devnull}
  site = tmp_path / "site"
  saved = {k: os.environ.get(k) for k in offline}
  os.environ.update(offline)
  try:
    names = device.install_carried_wheels(str(wheels), str(site), python, lambda n: False)
  finally:
    for k, v in saved.items():
      os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
  expected = {n for n, _ in device.required_distributions()} - set(device.BUILD_ONLY)
  assert set(names) == expected
  found = {
    device._wheel_name(path.replace(".dist-info", "-x"))
    for path in map(os.path.basename, glob.glob(str(site / "*.dist-info")))
  }
  assert found == expected
  # Those that need nothing beyond the standard library import from the target folder alone.
  check = (
    "import sys; sys.path.insert(0, sys.argv[1]); import decorator, gast, farama_notifications"
  )
  subprocess.run([python, "-c", check, str(site)], check=True, timeout=60)
