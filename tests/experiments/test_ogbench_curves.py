"""Tests of experiments.ogbench_curves on synthetic `ogbench_runs` records: which evaluations
become points, how a continued run's files merge, the markdown rows, the PNG from the command
line, and the one-line errors."""

import json
import os
import subprocess
import sys

import pytest

from experiments import ogbench_curves

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG = b"\x89PNG\r\n\x1a\n"


def seed(success, vh=None):
  """One seed's evaluation numbers (task 1 carries the success; a V^h start for OTA)."""
  out = {"success": success, "task1_success": success}
  if vh is not None:
    out["task1_vh_start"] = vh
  return out


def record(agent, env, updates, finished, mid, final_seeds, final_episodes=20):
  """An ogbench_runs JSON record: `mid` is [(update, episodes, [seed dicts])]."""
  return {"agent": agent, "env": env, "updates": updates, "finished": finished,
          "eval_episodes_per_task": final_episodes, "seeds": final_seeds if finished else [],
          "evaluations": [{"update": u, "eval_episodes_per_task": e, "seeds": s}
                          for u, e, s in mid]}


MEDIUM = "pointmaze-medium-navigate-v0"
GIANT = "pointmaze-giant-navigate-v0"


def test_mid_run_evaluations_then_the_final_one_if_finished():
  done = record("ota", MEDIUM, 5000, True, [(2500, 5, [seed(0.2), seed(0.4)])],
                [seed(0.6), seed(0.8)])
  points = ogbench_curves.evaluation_points(done, "success")
  assert points == [ogbench_curves.Point(2500, 5, (0.2, 0.4)),
                    ogbench_curves.Point(5000, 20, (0.6, 0.8))]
  running = record("ota", MEDIUM, 2500, False, [(2500, 5, [seed(0.2)])], [])
  assert [p.update for p in ogbench_curves.evaluation_points(running, "success")] == [2500]


def test_continued_run_merges_and_keeps_the_evaluation_with_more_episodes():
  # the run stopped at 20,500 (final, 20 episodes); its continuation re-records the mid-run
  # evaluations up to 20,000 from the checkpoint and adds 25,000 (8 episodes)
  first = record("ota", GIANT, 20500, True, [(10000, 4, [seed(0.1)]), (20000, 4, [seed(0.0)])],
                 [seed(0.0)])
  second = record("ota", GIANT, 25000, False,
                  [(10000, 4, [seed(0.1)]), (20000, 4, [seed(0.0)]), (25000, 8, [seed(0.3)])], [])
  hiql = record("hiql", GIANT, 20000, True, [], [seed(0.0)])
  grouped = ogbench_curves.curves([first, second, hiql], "success")
  assert list(grouped) == ["ota giant", "hiql giant"]
  assert [(p.update, p.episodes) for p in grouped["ota giant"]] == [
      (10000, 4), (20000, 4), (20500, 20), (25000, 8)]
  merged = ogbench_curves.merge_points([ogbench_curves.Point(5000, 5, (0.0,)),
                                        ogbench_curves.Point(5000, 20, (1.0,))])
  assert merged == [ogbench_curves.Point(5000, 20, (1.0,))]


def test_markdown_rows_show_success_in_percent_and_other_numbers_as_recorded():
  runs = [record("gcivl", MEDIUM, 5000, True, [], [seed(0.05, -12.34), seed(0.25, -20.0)])]
  table = ogbench_curves.markdown_table(ogbench_curves.curves(runs, "success"), "success")
  assert table.splitlines()[-1] == "| gcivl medium | 5,000 | 20 | 5 / 25 | 15 |"
  table = ogbench_curves.markdown_table(ogbench_curves.curves(runs, "task1_vh_start"),
                                        "task1_vh_start")
  assert table.splitlines()[-1] == "| gcivl medium | 5,000 | 20 | -12.3 / -20 | -16.2 |"


def test_unrecorded_metric_names_the_flag_and_the_known_ones():
  runs = [record("hiql", MEDIUM, 5000, True, [], [seed(0.5)])]
  with pytest.raises(ValueError, match=r"y: 'task1_vh_start' is not recorded .* update 5000; "
                                       r"expected one of \['success', 'task1_success'\]"):
    ogbench_curves.curves(runs, "task1_vh_start")


def run_cli(*args):
  return subprocess.run([sys.executable, "-m", "experiments.ogbench_curves", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


def test_command_line_writes_the_png_and_the_table(tmp_path):
  paths = []
  for agent, s in (("ota", 0.4), ("hiql", 0.2)):
    path = tmp_path / f"{agent}.json"
    path.write_text(json.dumps(record(agent, MEDIUM, 5000, True, [(2500, 5, [seed(0.0)])],
                                      [seed(s)])))
    paths.append(str(path))
  out = tmp_path / "curves.png"
  result = run_cli(f"--runs={','.join(paths)}", f"--out={out}", "--table")
  assert result.returncode == 0, result.stderr[-2000:]
  lines = result.stdout.strip().splitlines()
  assert "| ota medium | 5,000 | 20 | 40 | 40 |" in lines
  assert "| hiql medium | 2,500 | 5 | 0 | 0 |" in lines
  assert lines[-1] == str(out)
  assert out.read_bytes()[:8] == PNG


def test_command_line_unreadable_file_is_one_line(tmp_path):
  missing = tmp_path / "none.json"
  result = run_cli(f"--runs={missing}", f"--out={tmp_path / 'c.png'}")
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert line.startswith(f"error: --runs: cannot read '{missing}'")
