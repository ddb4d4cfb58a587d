"""Scaf-GRPO's hint scaffolding, host side: which groups get hints, which hinted response is kept,
and the batch with it in place.

Zhang, Wu, et al. "Scaf-GRPO: Scaffolded Group Relative Policy Optimization", arXiv 2510.19807.
After an unassisted first phase (`warmup_steps` in the authors' code), each group of G·K sampled
responses with no correct response is regenerated once per hint level 1 .. L (with
`hrljax.envs.text_tasks.hint`: knowledge, planning, solution tiers); the correct response of the
lowest level replaces the group's first response; groups with a correct response are left as they
are. What the code follows: the authors' procedure (dvlab-research/Scaf-GRPO @1085db5,
`hint_mix_grpo/trainer/ray_trainer.py`, the block after the first reward computation, and
`build_new_message`: all levels generated at once, one sample each, the minimal correct level
kept, `replace_num=1`). The hinted response is trained under its hinted prompt (`in_context=True`,
their released script's `replace_hint_prompt=False`; `False` is their other setting, the
hint-free prompt): the hint is context, never a loss token. Not verified: the paper's own
equations and schedule (only its abstract and secondary summaries could be read here). Their
tiers come from precomputed hint texts with four cumulative chunks each (the released
`build_new_message` has the planning tier commented out: 8 levels); `text_tasks`' are one
sentence per tier generated from the problem.

Every function takes and returns host arrays (numpy); a batch is any NamedTuple with the fields
`prompt_tokens`, `prompt_mask`, `response`, `response_mask` and `rewards`, rows grouped by prompt
(row i belongs to group i // K). `add_config_fields` and `validate_config_fields` are the config
fields of a learner that offers the scheme.
"""

import numpy as np

from hrljax import config_checks as checks

HINT_MODES = ("off", "scaffold")


def add_config_fields(config) -> None:
  """The scheme's fields: "off" or "scaffold" (all-fail groups regenerated with hints)."""
  config.hints = "off"
  config.hint_warmup_updates = 6  # updates without hints first (the authors' script: 50 steps)
  config.hint_in_context = True  # the hinted response is trained with its hint in the prompt


def validate_config_fields(config) -> None:
  """Raises `ConfigError` naming the first field of `add_config_fields` that cannot run."""
  checks.one_of(config, "hints", HINT_MODES)
  checks.non_negative_int(config, "hint_warmup_updates")


def scaffold(
  batch,
  all_fail: np.ndarray,
  generate,
  *,
  levels: int,
  samples: int,
  pad_id: int,
  in_context: bool = True,
):
  """Scaf-GRPO's hint-guided regeneration of the all-fail groups of `batch`: `(batch, metrics)`.

  Every group without a correct response (`all_fail`, bool `[G]`) is regenerated once per hint
  level 1 .. `levels` in one call, `generate(requests)`, which answers the `hint_requests` (one
  `(group, level)` each) with a batch of hinted responses and their bool `correct`. The correct
  response of the lowest level replaces the group's first response, with its own reward; groups
  with a correct response keep their responses, rewards and prompts (which only gain left padding
  when a hinted prompt is wider). The metrics are the rate of groups given a hinted response
  (`hint_rate`) and the mean level of those hints (`hint_level`).
  """
  num_groups = len(all_fail)
  failing = np.flatnonzero(all_fail)
  hinted, correct = generate(hint_requests(failing, num_groups, levels))
  rows, sources, hint_levels = hinted_rows(correct, failing, levels, samples)
  batch = replace_with_hinted(batch, rows, hinted, sources, pad_id, in_context=in_context)
  metrics = {
    "hint_rate": float(len(rows) / num_groups),
    "hint_level": float(hint_levels.mean()) if len(rows) else 0.0,
  }
  return batch, metrics


def all_fail_groups(correct: np.ndarray, num_groups: int, samples: int) -> np.ndarray:
  """bool `[G]`: the groups (contiguous rows of `samples`) with no correct response."""
  correct = np.asarray(correct, bool)
  if correct.shape != (num_groups * samples,):
    raise ValueError(
      f"correct: expected shape ({num_groups * samples},) ({num_groups} groups x {samples}), "
      f"got {correct.shape}"
    )
  return ~correct.reshape(num_groups, samples).any(axis=1)


def lowest_solving_level(hinted_correct: np.ndarray) -> np.ndarray:
  """int `[G]`: the lowest hint level (1-based) whose response is correct, 0 where none is.

  `hinted_correct` is bool `[G, L]`, column l the response generated with the hint of level l+1
  (the authors take the correct response of the minimal hint level).
  """
  hinted_correct = np.asarray(hinted_correct, bool)
  if hinted_correct.ndim != 2:
    raise ValueError(f"hinted_correct: expected rank 2 [G, L], got shape {hinted_correct.shape}")
  first = np.argmax(hinted_correct, axis=1) + 1
  return np.where(hinted_correct.any(axis=1), first, 0).astype(np.int32)


def hint_requests(failing: np.ndarray, num_groups: int, levels: int) -> list:
  """`(group, level)` for every failing group and level 1 .. `levels`, repeated cyclically to
  `num_groups * levels` requests, so that the generate call on them has one shape however many
  groups failed."""
  pairs = [(g, level) for g in failing for level in range(1, levels + 1)]
  return [pairs[i % len(pairs)] for i in range(num_groups * levels)]


def hinted_rows(
  correct: np.ndarray, failing: np.ndarray, levels: int, samples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The rows to replace, the hinted rows that replace them, and the hint level of each.

  `correct` is bool over the `hint_requests` (the first `len(failing) * levels` of them are the
  distinct ones, group-major); a solved group's first response (row `g * samples`) is replaced by
  its correct response of the lowest level.
  """
  grid = np.asarray(correct[: len(failing) * levels]).reshape(len(failing), levels)
  chosen = lowest_solving_level(grid)
  solved = chosen > 0
  rows = failing[solved] * samples
  sources = np.flatnonzero(solved) * levels + chosen[solved] - 1
  return rows, sources, chosen[solved]


def _left_pad(tokens: np.ndarray, mask: np.ndarray, width: int, pad_id: int):
  extra = width - tokens.shape[1]
  return (
    np.pad(tokens, ((0, 0), (extra, 0)), constant_values=pad_id),
    np.pad(mask, ((0, 0), (extra, 0)), constant_values=False),
  )


def replace_with_hinted(
  batch, rows: np.ndarray, hinted, sources: np.ndarray, pad_id: int, in_context: bool = True
):
  """The batch with row `rows[j]` replaced by row `sources[j]` of `hinted` (host arrays).

  Response, response mask and reward always come from `hinted`; the prompt too when `in_context`
  (the hint stays in the context the response is trained under, the authors' released setting,
  `replace_hint_prompt=False`), else the row keeps its own hint-free prompt (their
  `replace_hint_prompt=True`). Prompts are left-padded to a common width. The hint never enters
  the loss either way: the loss covers the response tokens only.
  """
  prompt_tokens, prompt_mask = np.array(batch.prompt_tokens), np.array(batch.prompt_mask)
  response, response_mask = np.array(batch.response), np.array(batch.response_mask)
  rewards = np.array(batch.rewards)
  if in_context and len(rows):
    width = max(prompt_tokens.shape[1], hinted.prompt_tokens.shape[1])
    prompt_tokens, prompt_mask = _left_pad(prompt_tokens, prompt_mask, width, pad_id)
    h_tokens, h_mask = _left_pad(
      np.asarray(hinted.prompt_tokens), np.asarray(hinted.prompt_mask), width, pad_id
    )
    prompt_tokens[rows], prompt_mask[rows] = h_tokens[sources], h_mask[sources]
  response[rows] = np.asarray(hinted.response)[sources]
  response_mask[rows] = np.asarray(hinted.response_mask)[sources]
  rewards[rows] = np.asarray(hinted.rewards)[sources]
  return batch._replace(
    prompt_tokens=prompt_tokens,
    prompt_mask=prompt_mask,
    response=response,
    response_mask=response_mask,
    rewards=rewards,
  )
