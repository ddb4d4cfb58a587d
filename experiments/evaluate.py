"""A trained run evaluated again: at a checkpoint of one's choice, with evaluation settings of
one's own (more episodes or problems than the run used while training).

  python -m experiments.evaluate runs/ppo --set=eval_episodes=1024
  python -m experiments.evaluate runs/smollm2_cmp/grpo_s0 runs/smollm2_cmp/grpo_s1 --step=20 \\
      --set=eval_problems=128 --set=eval_samples=0
  python -m experiments.evaluate runs/smollm2_cmp/grpo_s0 --step=0 --set=eval_samples=4

Each workdir's config and checkpoint are read back (`hrljax.load_run`; at `--step=0` the state
the run started from, rebuilt from its seeds), the `--set` fields
replace the config's (only fields that leave the run state's shapes alone: evaluation sizes and
seeds), and the agent's evaluation runs once. Prints one JSON line per workdir and seed:
`{"workdir", "update", "seed", <metrics>}`; `--out` also writes them to a file.
"""

import ast
import json
import sys

from absl import app, flags, logging

import hrljax

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags; defined only when run as a program."""
  flags.DEFINE_integer(
    "step", None, "The checkpoint's update (default: the latest; 0: the policy before training)."
  )
  flags.DEFINE_multi_string(
    "set", [], "field=value: a config field for the evaluation (a Python literal or text)."
  )
  flags.DEFINE_string("out", None, "Also write the JSON lines to this file.")


def parse_setting(text: str) -> tuple[str, object]:
  """`"field=value"` as `(field, value)`: the value a Python literal (`128`, `0.5`, `True`), else
  the text itself."""
  field, sep, value = text.partition("=")
  if not sep or not field:
    raise ValueError(f"--set: expected field=value, got {text!r}")
  try:
    return field, ast.literal_eval(value)
  except (ValueError, SyntaxError):
    return field, value


def evaluate(workdir: str, step=None, overrides=None) -> list[dict]:
  """The evaluation of the run in `workdir` at update `step` (latest by default) with the
  config fields `overrides`: one record per seed."""
  run = hrljax.load_run(workdir, step=step, overrides=overrides)
  return [
    {"workdir": workdir, "update": run.update, "seed": seed, **metrics}
    for seed, metrics in run.evaluate().items()
  ]


def main(argv) -> None:
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("expected one or more run directories")
  logging.set_verbosity(logging.WARNING)  # the checkpoint library's progress lines
  lines = []
  try:
    overrides = dict(parse_setting(text) for text in FLAGS.set)
    for workdir in workdirs:  # each run's lines as soon as it is evaluated
      for record in evaluate(workdir, FLAGS.step, overrides):
        lines.append(json.dumps(record, default=float))
        print(lines[-1], flush=True)
  except (ValueError, FileNotFoundError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  if FLAGS.out:
    with open(FLAGS.out, "w") as f:
      f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
  define_flags()
  app.run(main)
