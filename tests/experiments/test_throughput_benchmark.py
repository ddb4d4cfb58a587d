"""experiments/benchmarks/throughput.py's command line at a tiny PPO config: the JSON line of a
run and the rollout's share from `--rollout_share`."""

import json

from tests.script_in_process import run_module

TINY = (
  "--config=experiments/configs/ppo_cartpole.py",
  "--config.num_steps=16",
  "--config.total_timesteps=256",  # 4 updates of 4 envs x 16 steps
  "--config.update_epochs=2",
  "--reps=1",
)


def test_rollout_share_is_the_no_update_run_over_the_whole_run():
  result = run_module("experiments.benchmarks.throughput", *TINY, "--rollout_share")
  assert result.code == 0, result.err[-2000:]
  (line,) = [json.loads(text) for text in result.out.strip().splitlines()]
  assert line["implementation"] == "hrljax"
  assert line["env_steps"] == 256
  assert 0 < line["rollout_share"] < 1.5  # timing noise aside, no update costs nothing
  assert line["rollout_share"] != 1.0  # the run without updates is another program


def test_a_bad_reps_value_is_a_one_line_error():
  result = run_module("experiments.benchmarks.throughput", *TINY[:-1], "--reps=0")
  assert result.code != 0  # sys.exit's message is the exit code: the shell prints it on stderr
  assert "--reps: expected an integer >= 1, got 0" in f"{result.code} {result.err}"
