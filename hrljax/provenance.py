"""Where a run's numbers come from: the source revision, and the one config a workdir trains with.

A workdir holds one run. Resuming it with a config whose training fields differ from the saved
`config.json` would leave checkpoints trained with one config under a file that names another
(and, for a larger budget, change a learning-rate schedule mid-run), so `check_resumed_config`
refuses it by default, naming every differing field. With `allow_change` the change is accepted
and appended to `config_history.jsonl` with the update from which it holds.

`RUN_CONTROL_FIELDS` (how often to log, evaluate and checkpoint) change nothing that is trained
and may differ freely.
"""

import functools
import json
import os
import subprocess
from typing import Any, Optional

CONFIG_FILE = "config.json"
HISTORY_FILE = "config_history.jsonl"
RUN_CONTROL_FIELDS = ("log_every", "eval_every", "checkpoint_every", "max_checkpoints")


class ConfigChanged(ValueError):
  """A workdir was resumed with a config that differs from the one it was trained with."""


def config_json(config) -> dict:
  """The config as the JSON object `config.json` holds (tuples become lists)."""
  raw = (
    json.loads(config.to_json_best_effort()) if hasattr(config, "to_json_best_effort") else config
  )
  return json.loads(json.dumps(raw, sort_keys=True, default=str))


def _flatten(tree: Any, prefix: str = "") -> dict:
  if not isinstance(tree, dict):
    return {prefix: tree}
  flat = {}
  for key, value in tree.items():
    flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
  return flat


def config_changes(saved: dict, new: dict) -> dict:
  """`{dotted field: (saved value, new value)}` for every field that differs (a field present in
  one config only has `None` on the other side), run-control fields left out."""
  old, now = _flatten(saved), _flatten(new)
  return {
    field: (old.get(field), now.get(field))
    for field in sorted(set(old) | set(now))
    if field.split(".")[0] not in RUN_CONTROL_FIELDS and old.get(field) != now.get(field)
  }


def check_resumed_config(
  workdir: str, config, update: Optional[int], allow_change: bool = False
) -> Optional[dict]:
  """Refuses (`ConfigChanged`) to resume `workdir` at checkpoint `update` with a `config` whose
  training fields differ from its `config.json`. With `allow_change`, returns the change as the
  record `record_config_change` appends once the resume has succeeded. None where nothing
  changed, for a fresh run (`update` None) and for a workdir without a saved config."""
  path = os.path.join(workdir, CONFIG_FILE)
  if update is None or not os.path.exists(path):
    return None
  with open(path) as f:
    saved = json.load(f)
  changes = config_changes(saved, config_json(config))
  if not changes:
    return None
  if not allow_change:
    listed = "; ".join(f"config.{k}: {a!r} in the run, {b!r} now" for k, a, b in _rows(changes))
    raise ConfigChanged(
      f"{workdir} was trained to update {update} with another config ({listed}). Resume with "
      f"the saved config, start a new workdir, or pass --allow_config_change to go on with the "
      f"new values (recorded in {HISTORY_FILE})."
    )
  return {"update": update, "changes": {k: {"from": a, "to": b} for k, a, b in _rows(changes)}}


def record_config_change(workdir: str, record: Optional[dict]) -> None:
  """Appends `record` (from `check_resumed_config`; nothing if None) to `config_history.jsonl`."""
  if record is not None:
    with open(os.path.join(workdir, HISTORY_FILE), "a") as f:
      f.write(json.dumps(record, sort_keys=True) + "\n")


def _rows(changes: dict) -> list:
  return [(field, old, new) for field, (old, new) in changes.items()]


@functools.lru_cache(maxsize=1)
def source_revision() -> dict:
  """`hrljax_version` (the installed distribution's), and `git_commit` and `git_dirty` (whether
  tracked files differ from that commit) when the package is imported from a git checkout
  (both None otherwise: an installed wheel, or no git on the machine)."""
  import importlib.metadata

  try:
    version = importlib.metadata.version("hrljax")
  except importlib.metadata.PackageNotFoundError:
    version = None
  here = os.path.dirname(os.path.abspath(__file__))

  def git(*args) -> Optional[str]:
    try:
      out = subprocess.run(
        ["git", *args], cwd=here, capture_output=True, text=True, timeout=10, check=True
      )
    except (OSError, subprocess.SubprocessError):
      return None
    return out.stdout.strip()

  commit = git("rev-parse", "HEAD")
  status = git("status", "--porcelain", "--untracked-files=no") if commit else None
  return {
    "hrljax_version": version,
    "git_commit": commit,
    "git_dirty": None if status is None else bool(status),
  }
