"""Griffe extension of the docs build: two habits of hrljax's docstrings, read as meant.

* An `Args:` entry may name several arguments that share one description
  (`logp, old_logp: log-probabilities of ...`). It becomes one entry per argument with that
  description, so each argument is listed and still checked against the signature (a name that
  is not a parameter fails the strict build).
* Sphinx roles (:func:`name`, :class:`name`, ...) become code spans.

Only the text griffe parses changes; the sources are read as they are.
"""

import re

import griffe

_ARGS_SECTION = re.compile(r"^(\s*)(?:Args|Arguments|Parameters|Params|Other Parameters):\s*$")
_GROUPED_ENTRY = re.compile(r"^(\s+)(\w+(?:\s*,\s*\w+)+)(\s*\([^)]*\))?:(.*)$")
_SPHINX_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc):`~?([^`]+)`")


def _indent(line):
  return len(line) - len(line.lstrip())


def _split_grouped_entries(lines):
  out, i, section_indent, entry_indent = [], 0, None, None
  while i < len(lines):
    line = lines[i]
    header = _ARGS_SECTION.match(line)
    if header:
      section_indent, entry_indent = len(header.group(1)), None
      out.append(line)
      i += 1
      continue
    if section_indent is not None and line.strip():
      if _indent(line) <= section_indent:
        section_indent = None
      elif entry_indent is None:
        entry_indent = _indent(line)
    grouped = _GROUPED_ENTRY.match(line) if section_indent is not None else None
    if grouped and len(grouped.group(1)) == entry_indent:
      body = i + 1
      while body < len(lines) and lines[body].strip() and _indent(lines[body]) > entry_indent:
        body += 1
      indent, names, annotation, rest = grouped.groups()
      for name in names.split(","):
        out.append(f"{indent}{name.strip()}{annotation or ''}:{rest}")
        out.extend(lines[i + 1 : body])
      i = body
      continue
    out.append(line)
    i += 1
  return out


class HrljaxDocstrings(griffe.Extension):
  """Rewrites each docstring's text before griffe parses it."""

  def on_instance(self, *, obj, **kwargs):
    if obj.docstring is None:
      return
    text = _SPHINX_ROLE.sub(r"`\1`", obj.docstring.value)
    obj.docstring.value = "\n".join(_split_grouped_entries(text.split("\n")))
