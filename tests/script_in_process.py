"""`python -m MODULE ARGS` run in the calling process: the module executed as `__main__` (runpy),
so its `if __name__ == "__main__":` block defines its absl flags and calls absl's `app.run`, with
stdout, stderr and the exit code captured.

For the tests of a script's command line whose outcome needs no new process: a subprocess pays
several CPU-seconds of imports (jax, flax, matplotlib) before it does anything, and compiles its
programs again. The process-wide state the run touches is put back afterwards: the flags other
modules defined are set aside while it runs, the flags it defined on absl's global `FLAGS` are
deleted (so the next run, or another script with an `--out`, defines them again), the parsed
state and the logging verbosity are restored. `app.run`'s one-time set-up (the process name,
absl's logging handler on the root logger at INFO, the help flags) is skipped, as it is for every
call after the first in a real process: it would change the logging of the other tests in this
process. (tests/train_in_process.py does the same for experiments.train without `app.run`, on
flags defined afresh.)
"""

import contextlib
import io
import runpy
import sys
import warnings

from absl import app, flags

from tests.train_in_process import Result


def set_aside_other_flags(values: flags.FlagValues) -> dict:
  """Removes from `values` the flags that modules other than absl's defined (another script
  imported by a test, such as `experiments.steps_to_threshold`, defines its flags at import) and
  returns them: the script run next defines its own, which may share their names, as it would in
  a process of its own."""
  absl_own = {
    flag.name
    for module, module_flags in values.flags_by_module_dict().items()
    if module.startswith("absl")
    for flag in module_flags
  }
  aside = {name: values[name] for name in list(values) if values[name].name not in absl_own}
  for name in {flag.name for flag in aside.values()}:
    delattr(values, name)
  return aside


def run_module(module: str, *args: str) -> Result:
  """`python -m MODULE ARGS`, in this process."""
  values = flags.FLAGS
  aside = set_aside_other_flags(values)
  defined, parsed = set(values), values.is_parsed()
  verbosity = values["verbosity"].value
  out, err, code = io.StringIO(), io.StringIO(), 0
  saved_argv, saved_init = sys.argv, app._run_init.done
  sys.argv = [module.rsplit(".", 1)[-1], *args]
  app._run_init.done = True
  try:
    with (
      contextlib.redirect_stdout(out),
      contextlib.redirect_stderr(err),
      warnings.catch_warnings(),
    ):
      # runpy's warning that the module was imported before (by the test file) and runs again.
      warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
      runpy.run_module(module, run_name="__main__")
  except SystemExit as stop:
    code = 0 if stop.code is None else stop.code
  finally:
    sys.argv, app._run_init.done = saved_argv, saved_init
    for name in {values[name].name for name in set(values) - defined}:
      delattr(values, name)
    for name, flag in aside.items():
      values[name] = flag
    if not parsed:
      values.unparse_flags()
    values["verbosity"].value = verbosity
  return Result(code, out.getvalue(), err.getvalue())
