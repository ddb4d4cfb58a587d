"""MkDocs hook: the pages kept outside docs/, and the package layout the API pages are read from.

* `agents/README.md` (the agents' index), `experiments/results/` (the measured results, their
  study pages and `reproduce.sh`) and the benchmark pages of `experiments/benchmarks/` are added
  to the site as `agents/`, `results/` and `benchmarks/`, so their relative links
  (`../benchmarks/README.md` from the results page) hold on the site as in the repository.
* `hrljax.losses`, `hrljax.networks` and `hrljax.agents` live in `losses/`, `networks/` and
  `agents/` (`package-dir` in pyproject.toml). An editable install maps them with an import hook
  that griffe (mkdocstrings' reader) does not follow, so each build copies the sources into a
  temporary directory laid out as installed (`hrljax/losses/`, ...) and reads them from there.
"""

import glob
import os
import shutil
import tempfile

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (pattern relative to the repository root, directory on the site)
_PAGES = (
  ("agents/README.md", "agents"),
  ("experiments/results/*.md", "results"),
  ("experiments/results/reproduce.sh", "results"),
  ("experiments/benchmarks/*.md", "benchmarks"),
)

# Where each importable package's sources are (pyproject.toml's package-dir).
_PACKAGES = (
  ("hrljax", "hrljax"),
  ("losses", "hrljax/losses"),
  ("networks", "hrljax/networks"),
  ("agents", "hrljax/agents"),
)

_api_dirs = []


def _repository_files():
  for pattern, site_dir in _PAGES:
    for path in sorted(glob.glob(os.path.join(_ROOT, pattern))):
      yield path, f"{site_dir}/{os.path.basename(path)}"


@event_priority(100)  # before mkdocstrings, which makes its handlers in its own on_config
def on_config(config):
  """Points mkdocstrings' Python handler at a copy of the sources laid out as installed."""
  api_dir = tempfile.mkdtemp(prefix="hrljax-docs-")
  _api_dirs.append(api_dir)
  for source, target in _PACKAGES:
    shutil.copytree(
      os.path.join(_ROOT, source),
      os.path.join(api_dir, target),
      ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.md", "py.typed"),
      dirs_exist_ok=True,
    )
  python = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
  python["paths"] = [api_dir]
  return config


def on_files(files, config):
  for path, uri in _repository_files():
    files.append(File.generated(config, uri, abs_src_path=path))
  return files


def on_serve(server, config, builder):
  for path, _ in _repository_files():
    server.watch(path)
  for source, _ in _PACKAGES:
    server.watch(os.path.join(_ROOT, source))
  return server


def on_shutdown():
  while _api_dirs:
    shutil.rmtree(_api_dirs.pop(), ignore_errors=True)
