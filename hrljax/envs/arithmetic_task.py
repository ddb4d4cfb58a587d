"""One run's arithmetic word-problem task: its problem streams, prompts and rewards.

The problems, prompts and rewards are `hrljax.envs.text_tasks`' (GRPO's verifiable-reward task,
Shao et al., arXiv 2402.03300); `ArithmeticTask` holds the settings a run fixes once (operand
range, operations, reward weights, answer mode) so that a learner asks for "problems 8 .. 11 of
seed 0" or "the rewards of these replies" without repeating them. Host-side, deterministic.
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hrljax.envs import text_tasks


class ArithmeticTask(NamedTuple):
  """The settings of `text_tasks.arithmetic_problem` and `text_tasks.arithmetic_reward`."""

  max_operand: int = 9
  operations: tuple = ("add", "sub")
  correct_weight: float = 1.0
  format_weight: float = 0.5
  answer_mode: str = "strict"

  def check(self) -> None:
    """Raises `ValueError` naming the first setting `text_tasks` rejects."""
    text_tasks.arithmetic_problem(0, 0, **self._problem_kwargs())
    text_tasks.arithmetic_reward("", 0, **self._reward_kwargs())

  def problems(self, seed: int, count: int, start: int = 0) -> list:
    """Problems `start .. start + count - 1` of the stream `seed`."""
    return text_tasks.arithmetic_problems(seed, count, start=start, **self._problem_kwargs())

  def pool_problems(self, seed: int, indices: Sequence[int]) -> list:
    """Problems `indices` of the stream `seed` (a fixed pool: problems 0 .. N - 1)."""
    return [text_tasks.arithmetic_problem(seed, int(i), **self._problem_kwargs()) for i in indices]

  def rewards(
    self, texts: Sequence[str], problems: Sequence, samples: int
  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rewards float32 `[B]`, correct `[B]` and formatted `[B]` of `samples` replies per problem
    (rows grouped by problem)."""
    answers = [p.answer for p in problems for _ in range(samples)]
    return text_tasks.arithmetic_rewards(texts, answers, **self._reward_kwargs())

  def reference_rewards(self, problems: Sequence, samples: int) -> np.ndarray:
    """Float32 `[B]`: the reward of each problem's reference reply (`text_tasks.reference_reply`),
    repeated for its `samples` rows."""
    texts = [text_tasks.reference_reply(p) for p in problems]
    rewards, _, _ = text_tasks.arithmetic_rewards(
      texts, [p.answer for p in problems], **self._reward_kwargs()
    )
    return np.repeat(rewards, samples)

  def _problem_kwargs(self) -> dict:
    return {"max_operand": self.max_operand, "operations": tuple(self.operations)}

  def _reward_kwargs(self) -> dict:
    return {
      "correct_weight": self.correct_weight,
      "format_weight": self.format_weight,
      "answer_mode": self.answer_mode,
    }
