"""Host-side prompt and token machinery of the language-model agents (`llm_grpo`, `llm_archer`).

Built on SmolLM2's tokenizer and chat template (`hrljax.llm_weights`) and the text tasks
(`hrljax.envs.text_tasks`): the token patterns of phrases (what HICRA's planning-token matcher,
`hrljax.losses.group_relative.planning_token_mask`, looks for; Wang et al., arXiv 2509.03646),
the bucketed widths that keep every jitted call at a few compiled shapes, and the widest prompt a
token game can produce. The tokenizer is any object with `encode(text,
add_special_tokens=False).ids` (the `tokenizers` library's interface).
"""

from collections.abc import Sequence
from typing import Optional

import numpy as np

from hrljax import llm_weights
from hrljax.envs import text_tasks, token_game


def round_up(width: int, bucket: int) -> int:
  """`width` rounded up to a multiple of `bucket`: prompts padded to it repeat their shapes, so
  the jitted calls on them compile once per bucket."""
  return -(-width // bucket) * bucket


def phrase_patterns(tokenizer, phrases: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
  """Token patterns of `phrases` with and without a leading space: int32 `[S, W]`, `[S]`.

  A phrase inside a response is usually preceded by a space, which byte-level BPE folds into its
  first token, so both spellings are matched. No phrase gives one empty pattern of length 0,
  which matches nothing.
  """
  encoded = []
  for phrase in phrases:
    for variant in (phrase, " " + phrase):
      ids = tokenizer.encode(variant, add_special_tokens=False).ids
      if ids and ids not in encoded:
        encoded.append(ids)
  if not encoded:
    return np.zeros((1, 1), np.int32), np.zeros((1,), np.int32)
  width = max(len(x) for x in encoded)
  patterns = np.zeros((len(encoded), width), np.int32)
  for row, ids in enumerate(encoded):
    patterns[row, : len(ids)] = ids
  return patterns, np.array([len(x) for x in encoded], np.int32)


def longest_dialogue_texts(
  env_params: token_game.EnvParams, include_table: bool, turns: int
) -> list[str]:
  """The `text_tasks.game_prompt` of the longest dialogue of 0, 1, ..., `turns - 1` turns: each
  turn a move that was not understood, answered with the longest answer text."""
  texts = []
  for done in range(turns):
    obs = np.full((token_game.max_dialogue_len(env_params),), token_game.PAD, np.int32)
    obs[0] = token_game.BOS
    obs[1 : 1 + 3 * done] = [token_game.INVALID, token_game.END, token_game.INVALID] * done
    texts.append(text_tasks.game_prompt(obs, env_params, include_table))
  return texts


def longest_game_prompt(
  tokenizer,
  env_params: token_game.EnvParams,
  include_table: bool,
  system: str,
  bucket: int,
  turns: Optional[int] = None,
) -> int:
  """The token count of the longest `text_tasks.game_prompt`, rounded up to `bucket`.

  The prompt grows with the dialogue; padding every prompt to this width keeps `generate` and the
  actor update at one compiled shape. The longest dialogue a policy can still speak after is
  `max_turns - 1` turns that were not understood (the longest answer text): `turns` =
  `max_turns` dialogues of 0 .. turns - 1 turns, the default; `max_turns + 1` also covers the
  state after the last turn (a successor state a value function reads).
  """
  turns = env_params.max_turns if turns is None else turns
  widths = [
    len(llm_weights.chat_prompt(tokenizer, text, system=system or None))
    for text in longest_dialogue_texts(env_params, include_table, turns)
  ]
  return round_up(max(widths), bucket)
