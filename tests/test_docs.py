"""The documentation site (`make docs`) builds in strict mode, offline, with its API pages."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _build(site):
  env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
  # No --quiet: mkdocs counts the warnings that --strict turns into a failure only when it logs them.
  command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", site]
  return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_site_builds_strict_offline_with_api_pages(tmp_path):
  site = tmp_path / "site"
  result = _build(str(site))
  assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]

  def page(path):
    return (site / path).read_text(encoding="utf-8")

  # A family page: the notes (formulas, papers), then the family's API from its docstrings.
  group_relative = page("families/group_relative.html")
  assert "Dr. GRPO" in group_relative
  assert 'id="hrljax.losses.group_relative.grpo_advantages"' in group_relative
  assert 'id="hrljax.losses.options.option_critic_loss"' in page("families/options.html")
  assert 'id="hrljax.losses.policy_gradient.clipped_surrogate_loss"' in page(
    "api/losses/policy_gradient.html"
  )
  assert 'id="hrljax.networks.llama.Llama.__call__"' in page("api/networks.html")
  assert 'id="hrljax.training.run_config"' in page("api/spine/training.html")
  assert 'id="hrljax.load.load_run"' in page("api/spine/load.html")
  assert 'id="hrljax.agents.ppo.get_config"' in page("api/agents.html")
  # The glossary, and the pages kept outside docs/: the agents' index and the results.
  assert "checkpoint_every" in page("config.html")
  assert "option_critic_fourrooms" in page("agents/index.html")
  assert "OPTIONS" in page("results/index.html") and (site / "results/reproduce.sh").is_file()
  assert (site / "benchmarks/index.html").is_file()

  # Nothing is loaded from the network when a page is opened: no remote font, script or style.
  remote = re.compile(r"<(?:link|script|img)\b[^>]*\b(?:href|src)=\"(?:https?:)?//", re.I)
  for html in site.rglob("*.html"):
    assert not remote.search(html.read_text(encoding="utf-8")), html


def test_getting_started_follows_the_readme():
  """Every command block of the site's first page is the README's, word for word."""
  readme = (ROOT / "README.md").read_text(encoding="utf-8")
  index = (ROOT / "docs/index.md").read_text(encoding="utf-8")
  blocks = re.findall(r"```[a-z]*\n.*?```", index, flags=re.S)
  assert len(blocks) >= 3
  for block in blocks:
    assert block in readme, block
