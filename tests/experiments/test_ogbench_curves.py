"""Tests of experiments.ogbench_curves on synthetic run directories: which evaluations become
points, how a continued run's directories merge, the markdown rows, the PNG from the command
line, and the one-line errors."""

import json
import os

import pytest

from experiments import ogbench_curves
from tests.script_in_process import run_module

PNG = b"\x89PNG\r\n\x1a\n"
MEDIUM = "pointmaze-medium-navigate-v0"
GIANT = "pointmaze-giant-navigate-v0"


def seed(success, vh=None):
  """One seed's evaluation numbers (task 1 carries the success; a V^h start for OTA)."""
  out = {"success": success, "task1_success": success}
  if vh is not None:
    out["task1_vh_start"] = vh
  return out


def records(evaluations):
  """Evaluation records of `experiments.train`: `evaluations` is [(update, episodes, [seed
  dicts])], one record per seed; a validation-loss-only record and a train record are mixed in
  and must be ignored."""
  out = [{"phase": "train", "seed": 0, "update": 1, "loss": 1.0}]
  for update, episodes, seeds in evaluations:
    for s, numbers in enumerate(seeds):
      out.append(
        {
          "phase": "eval",
          "seed": s,
          "update": update,
          "eval_loss": 0.5,
          "eval_episodes_per_task": episodes,
          "eval_seconds": 1.0,
          **numbers,
        }
      )
  return out


def write_run(path, agent, env, evaluations):
  """A run directory: `config.json` and `metrics.jsonl`."""
  os.makedirs(path)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump({"agent": agent, "env_name": env, "seeds": [0]}, f)
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in records(evaluations))
  return str(path)


def test_every_evaluation_is_a_point_in_update_order(tmp_path):
  done = write_run(
    tmp_path / "done",
    "ota",
    MEDIUM,
    [(5000, 20, [seed(0.6), seed(0.8)]), (2500, 5, [seed(0.2), seed(0.4)])],
  )
  label, evaluations = ogbench_curves.read_run(done)
  assert label == "ota medium"
  assert ogbench_curves.evaluation_points(evaluations, "success") == [
    ogbench_curves.Point(2500, 5, (0.2, 0.4)),
    ogbench_curves.Point(5000, 20, (0.6, 0.8)),
  ]
  running = write_run(tmp_path / "running", "ota", MEDIUM, [(2500, 5, [seed(0.2)])])
  points = ogbench_curves.evaluation_points(ogbench_curves.read_run(running)[1], "success")
  assert [p.update for p in points] == [2500]


def test_continued_run_merges_and_keeps_the_evaluation_with_more_episodes():
  # the run stopped at 20,500 (final, 20 episodes); its continuation re-records the evaluations
  # up to 20,000 and adds 25,000 (8 episodes)
  first = (
    "ota giant",
    records([(10000, 4, [seed(0.1)]), (20000, 4, [seed(0.0)]), (20500, 20, [seed(0.0)])]),
  )
  second = (
    "ota giant",
    records([(10000, 4, [seed(0.1)]), (20000, 4, [seed(0.0)]), (25000, 8, [seed(0.3)])]),
  )
  hiql = ("hiql giant", records([(20000, 20, [seed(0.0)])]))
  grouped = ogbench_curves.curves([first, second, hiql], "success")
  assert list(grouped) == ["ota giant", "hiql giant"]
  assert [(p.update, p.episodes) for p in grouped["ota giant"]] == [
    (10000, 4),
    (20000, 4),
    (20500, 20),
    (25000, 8),
  ]
  merged = ogbench_curves.merge_points(
    [ogbench_curves.Point(5000, 5, (0.0,)), ogbench_curves.Point(5000, 20, (1.0,))]
  )
  assert merged == [ogbench_curves.Point(5000, 20, (1.0,))]


def test_markdown_rows_show_success_in_percent_and_other_numbers_as_recorded():
  runs = [("gcivl medium", records([(5000, 20, [seed(0.05, -12.34), seed(0.25, -20.0)])]))]
  table = ogbench_curves.markdown_table(ogbench_curves.curves(runs, "success"), "success")
  assert table.splitlines()[-1] == "| gcivl medium | 5,000 | 20 | 5 / 25 | 15 |"
  table = ogbench_curves.markdown_table(
    ogbench_curves.curves(runs, "task1_vh_start"), "task1_vh_start"
  )
  assert table.splitlines()[-1] == "| gcivl medium | 5,000 | 20 | -12.3 / -20 | -16.2 |"


def test_unrecorded_metric_names_the_flag_and_the_known_ones():
  runs = [("hiql medium", records([(5000, 20, [seed(0.5)])]))]
  with pytest.raises(
    ValueError,
    match=r"y: 'task1_vh_start' is not recorded .* update 5000; "
    r"expected one of \['eval_loss', 'success', "
    r"'task1_success'\]",
  ):
    ogbench_curves.curves(runs, "task1_vh_start")


def run_cli(*args):
  return run_module("experiments.ogbench_curves", *args)


def test_command_line_writes_the_png_and_the_table_and_names_an_unreadable_run(tmp_path, capsys):
  """The command line (absl's entry point, the module run as `__main__` in this process); an
  unreadable run stops `main` before any flag is read, so that refusal is checked on `main`."""
  workdirs = [
    write_run(tmp_path / agent, agent, MEDIUM, [(2500, 5, [seed(0.0)]), (5000, 20, [seed(s)])])
    for agent, s in (("ota", 0.4), ("hiql", 0.2))
  ]
  out = tmp_path / "curves.png"
  result = run_cli(*workdirs, f"--out={out}", "--table")
  assert result.code == 0, result.err[-2000:]
  lines = result.out.strip().splitlines()
  assert "| ota medium | 5,000 | 20 | 40 | 40 |" in lines
  assert "| hiql medium | 2,500 | 5 | 0 | 0 |" in lines
  assert lines[-1] == str(out)
  assert out.read_bytes()[:8] == PNG
  missing = tmp_path / "none"
  capsys.readouterr()
  with pytest.raises(SystemExit) as stopped:
    ogbench_curves.main(["ogbench_curves", str(missing)])
  assert stopped.value.code == 2
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(f"error: cannot read the run directory '{missing}'")
