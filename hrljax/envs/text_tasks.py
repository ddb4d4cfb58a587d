"""Text tasks with verifiable rewards for language-model agents: arithmetic word problems and the
token game rendered as English turns.

Both tasks live at the text level (strings in, strings and numbers out); the agents
(`agents/llm_grpo.py`, `agents/llm_archer.py`) tokenise prompts with the model's chat template and
decode sampled tokens before calling the parsers here. **Rewards are computed host-side, in
Python, between jitted steps**: turning sampled token ids back into text needs the BPE tokenizer,
and parsing free text (regular expressions, integers of any length) is not reasonable inside an
XLA program. Everything here is deterministic: the same seed and index give the same problem, the
same text gives the same parse.

Arithmetic (single turn; GRPO, Dr. GRPO, DAPO, HICRA)
------------------------------------------------------
`arithmetic_problem(seed, index)` draws one short word problem from `numpy.random.default_rng(
[seed, index])`, so problem `index` of a seed does not depend on how many problems were drawn
before it (a resumed run sees the same problems). Operations: addition ("buys 4 more"),
subtraction ("gives 3 to a friend", never negative) and multiplication ("3 boxes with 4 ... in
each box"); operands are integers in `[2, max_operand]`.

The answer format is a final non-empty line `Answer: <integer>` (`ANSWER_FORMAT`), e.g.::

  Tom has 3 + 4 = 7 apples.
  Answer: 7

Hints (Scaf-GRPO's scaffolding, Zhang et al., arXiv 2510.19807): `hint(problem, level)` gives the
hint of one tier, 1 knowledge (which operation the story means), 2 planning (the expression to
compute), 3 solution (the expression and its result); `hinted_prompt` puts it after the question,
as the authors' `build_new_message` puts its hints after the question in the user turn.

`parse_answer` accepts exactly that line (surrounding whitespace, a trailing period and a leading
sign allowed; the word `Answer` case-sensitive, followed by a colon). The reward is
`correct_weight * correct + format_weight * formatted` with `formatted` = the format was followed
and `correct` = the answer equals the problem's. `answer_mode="strict"` (default) reads the answer
only from the formatted line; `"last_number"` falls back to the last integer in the text when the
format is missing (a common lenient grader, e.g. GSM8K evaluation scripts), which gives a small
model a correctness signal before it has learnt the format. The default weights (1 and 0.5) are our
choice; DeepSeek-R1 (arXiv 2501.12948, section 2.2.2) combines an accuracy and a format reward
without stating weights.

Token game as text (multi-turn; ArCHer)
---------------------------------------
`hrljax.envs.token_game` with English names: attributes are properties (`color`, `size`, ...),
values are words per property (`red`, `blue`, ...), items are nouns (`apple`, `ball`, ...). The
agent speaks one line per turn, `ask <property> <value>` (e.g. `ask color red`; `ask red` is
accepted too, since value words are unique) or `guess <item>` (e.g. `guess apple`), and the game
answers `yes` / `no` (or explains the format when the line was not understood). `parse_move`
turns the agent's text into the game's utterance tokens (deterministic: the first `ask`/`guess`
word of the text decides; anything unparsable becomes an INVALID utterance); the game itself
(`TokenGame.step`, jittable) then scores the turn: reward 1 for a correct guess by default, or
the game's `correct_reward` and `turn_reward` (a per-turn cost, as in ArCHer's Twenty Questions,
is stated in the rules). `game_prompt` renders a game observation (the token dialogue) as the
user message: the rules with the game's horizon (`max_turns`), optionally the item table, the
dialogue so far, the turns left, and the request for one move.
"""

import re
from typing import NamedTuple, Optional, Sequence

import numpy as np

from hrljax.envs import token_game

# ------------------------------------------------------------------------------------------------
# Arithmetic word problems.
# ------------------------------------------------------------------------------------------------

OPERATIONS = ("add", "sub", "mul")
ANSWER_MODES = ("strict", "last_number")
ANSWER_FORMAT = "Answer: <number>"
# Measured on SmolLM2-135M-Instruct (8 problems, temperature 0.7, 32 new tokens): this wording gave
# 2/8 formatted replies, "Solve the problem. End your reply with a final line of the form ..." 0/8.
FORMAT_INSTRUCTION = "Give a short answer. The last line of your reply must be 'Answer: <number>'."

_NAMES = ("Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Max", "Zoe")
_THINGS = ("apples", "pencils", "stickers", "cookies", "marbles", "books", "cards", "shells")
_TEMPLATES = {
  "add": "{name} has {a} {things} and buys {b} more. How many {things} does {name} have now?",
  "sub": "{name} has {a} {things} and gives {b} to a friend. "
  "How many {things} does {name} have left?",
  "mul": "{name} has {a} boxes with {b} {things} in each box. "
  "How many {things} does {name} have in total?",
}
# Hints for Scaf-GRPO's scaffolding (`hint`): knowledge, planning and solution tiers.
HINT_TIERS = ("knowledge", "planning", "solution")
HINT_LEVELS = len(HINT_TIERS)
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*"}
_KNOWLEDGE = {
  "add": "Buying more adds to what you have: add the two numbers.",
  "sub": "Giving some away takes them from what you have: subtract the second number from the "
  "first.",
  "mul": "Equal boxes: multiply the number of boxes by the number in each box.",
}
_ANSWER_LINE = re.compile(r"^Answer:\s*([+-]?\d+)\s*\.?$")
_INTEGER = re.compile(r"(?<![\d.])[+-]?\d+(?![\d])")


class ArithmeticProblem(NamedTuple):
  """One word problem: its question text, exact integer answer, operation and operands."""

  question: str
  answer: int
  operation: str
  operands: tuple


class ArithmeticReward(NamedTuple):
  """The reward of one reply and its parts."""

  reward: float
  correct: bool
  formatted: bool
  parsed: Optional[int]  # the answer read from the reply (None if there is none)


def _check_int(name: str, value, minimum: int) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")


def _check_operations(operations: Sequence[str]) -> tuple:
  operations = tuple(operations)
  if not operations or any(op not in OPERATIONS for op in operations):
    raise ValueError(f"operations: expected a non-empty subset of {OPERATIONS}, got {operations!r}")
  return operations


def arithmetic_problem(
  seed: int, index: int, *, max_operand: int = 9, operations: Sequence[str] = ("add", "sub")
) -> ArithmeticProblem:
  """Problem `index` of the stream `seed` (a pure function of its arguments).

  Args:
    seed: int >= 0, the stream.
    index: int >= 0, the position in the stream.
    max_operand: int >= 2; operands are drawn uniformly from `[2, max_operand]`.
    operations: subset of `OPERATIONS`, drawn uniformly.
  """
  _check_int("seed", seed, 0)
  _check_int("index", index, 0)
  _check_int("max_operand", max_operand, 2)
  operations = _check_operations(operations)
  rng = np.random.default_rng([seed, index])
  operation = operations[int(rng.integers(len(operations)))]
  a, b = (int(x) for x in rng.integers(2, max_operand + 1, size=2))
  if operation == "sub" and b > a:
    a, b = b, a  # never a negative count
  name = _NAMES[int(rng.integers(len(_NAMES)))]
  things = _THINGS[int(rng.integers(len(_THINGS)))]
  question = _TEMPLATES[operation].format(name=name, a=a, b=b, things=things)
  answer = {"add": a + b, "sub": a - b, "mul": a * b}[operation]
  return ArithmeticProblem(question, answer, operation, (a, b))


def arithmetic_problems(
  seed: int, count: int, *, start: int = 0, **kwargs
) -> list[ArithmeticProblem]:
  """Problems `start .. start + count - 1` of stream `seed` (kwargs of `arithmetic_problem`)."""
  _check_int("count", count, 0)
  _check_int("start", start, 0)
  return [arithmetic_problem(seed, start + i, **kwargs) for i in range(count)]


def arithmetic_prompt(problem: ArithmeticProblem) -> str:
  """The user message for a problem: the question and the format instruction."""
  return f"{problem.question}\n{FORMAT_INSTRUCTION}"


def hint(problem: ArithmeticProblem, level: int) -> str:
  """The hint of tier `level` for a problem (Scaf-GRPO's tiers; "" at level 0).

  Level 1 (knowledge): what the operation is; level 2 (planning): the expression to compute;
  level 3 (solution): the computation with its result. Each level says more than the one below.

  Args:
    problem: the problem.
    level: int in `[0, HINT_LEVELS]`.
  """
  _check_int("level", level, 0)
  if level > HINT_LEVELS:
    raise ValueError(f"level: expected an int in [0, {HINT_LEVELS}], got {level!r}")
  if level == 0:
    return ""
  a, b = problem.operands
  expression = f"{a} {_SYMBOLS[problem.operation]} {b}"
  return (
    _KNOWLEDGE[problem.operation],
    f"Compute {expression}.",
    f"{expression} = {problem.answer}.",
  )[level - 1]


def hinted_prompt(problem: ArithmeticProblem, level: int) -> str:
  """The user message with the hint of `level` after the question (`arithmetic_prompt` at 0)."""
  text = hint(problem, level)
  if not text:
    return arithmetic_prompt(problem)
  return f"{problem.question}\nHint: {text}\n{FORMAT_INSTRUCTION}"


def reference_reply(problem: ArithmeticProblem) -> str:
  """A correct, formatted reply to a problem: the computation, then the `Answer: N` line (the
  reference answer a reward is calibrated against, e.g. CGPO's baseline response)."""
  return f"{hint(problem, HINT_LEVELS)}\nAnswer: {problem.answer}"


def parse_answer(text: str) -> Optional[int]:
  """The integer of a final `Answer: <integer>` line, or None when the format is not followed.

  The last non-empty line (after stripping whitespace) must match `Answer: N` with an optional
  sign on N and an optional trailing period; nothing else may be on that line.
  """
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  if not lines:
    return None
  match = _ANSWER_LINE.match(lines[-1])
  return int(match.group(1)) if match else None


def last_integer(text: str) -> Optional[int]:
  """The last integer written in the text (not part of a decimal number), or None."""
  found = _INTEGER.findall(text)
  return int(found[-1]) if found else None


def _check_weight(name: str, value) -> None:
  if (
    isinstance(value, bool)
    or not isinstance(value, (int, float))
    or not (np.isfinite(value) and value >= 0)
  ):
    raise ValueError(f"{name}: expected a finite float >= 0, got {value!r}")


def arithmetic_reward(
  text: str,
  answer: int,
  *,
  correct_weight: float = 1.0,
  format_weight: float = 0.5,
  answer_mode: str = "strict",
) -> ArithmeticReward:
  """Exact-answer plus format reward of one reply (host-side).

  `reward = correct_weight * correct + format_weight * formatted`.

  Args:
    text: the decoded reply (without the prompt and special tokens).
    answer: the problem's answer.
    correct_weight, format_weight: finite floats >= 0.
    answer_mode: "strict" (the answer only counts when formatted) or "last_number" (without the
    format, the last integer of the text is the answer).
  """
  _check_weight("correct_weight", correct_weight)
  _check_weight("format_weight", format_weight)
  if answer_mode not in ANSWER_MODES:
    raise ValueError(f"answer_mode: expected one of {ANSWER_MODES}, got {answer_mode!r}")
  parsed = parse_answer(text)
  formatted = parsed is not None
  if not formatted and answer_mode == "last_number":
    parsed = last_integer(text)
  correct = parsed is not None and parsed == int(answer)
  reward = correct_weight * float(correct) + format_weight * float(formatted)
  return ArithmeticReward(reward, correct, formatted, parsed)


def arithmetic_rewards(
  texts: Sequence[str], answers: Sequence[int], **kwargs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`arithmetic_reward` over a batch: float32 rewards, bool correct, bool formatted ([B] each)."""
  if len(texts) != len(answers):
    raise ValueError(f"answers: expected {len(texts)} answers (one per text), got {len(answers)}")
  out = [arithmetic_reward(t, a, **kwargs) for t, a in zip(texts, answers)]
  return (
    np.array([o.reward for o in out], np.float32),
    np.array([o.correct for o in out], bool),
    np.array([o.formatted for o in out], bool),
  )


# ------------------------------------------------------------------------------------------------
# The token game as text.
# ------------------------------------------------------------------------------------------------

ATTRIBUTE_NAMES = ("color", "size", "shape", "texture", "pattern", "weight")
VALUE_NAMES = (
  ("red", "blue", "green"),
  ("small", "big", "medium"),
  ("round", "square", "flat"),
  ("soft", "hard", "rough"),
  ("plain", "striped", "dotted"),
  ("light", "heavy", "average"),
)
ITEM_NAMES = (
  "apple",
  "ball",
  "cup",
  "drum",
  "egg",
  "fan",
  "hat",
  "jar",
  "key",
  "lamp",
  "mug",
  "nut",
  "pen",
  "ring",
  "sock",
  "top",
  "bell",
  "coin",
  "doll",
  "flag",
  "glove",
  "horn",
  "kite",
  "leaf",
  "map",
  "net",
  "pot",
  "rope",
  "shoe",
  "vase",
  "whip",
  "yarn",
)
ANSWER_TEXT = {
  token_game.YES: "yes",
  token_game.NO: "no",
  token_game.INVALID: ("I did not understand. Say 'ask <property> <value>' or 'guess <item>'."),
}
_WORD = re.compile(r"[a-z0-9]+")


def check_text_params(params: token_game.EnvParams) -> None:
  """Raises ValueError when a game is too large to name in English (or is invalid)."""
  token_game.check_params(params)
  if params.num_attributes > len(ATTRIBUTE_NAMES):
    raise ValueError(
      f"num_attributes: expected at most {len(ATTRIBUTE_NAMES)} for the text "
      f"game, got {params.num_attributes}"
    )
  if params.num_values > len(VALUE_NAMES[0]):
    raise ValueError(
      f"num_values: expected at most {len(VALUE_NAMES[0])} for the text game, "
      f"got {params.num_values}"
    )
  if params.num_items > len(ITEM_NAMES):
    raise ValueError(
      f"num_items: expected at most {len(ITEM_NAMES)} for the text game, got {params.num_items}"
    )


def _value_names(params: token_game.EnvParams) -> list[tuple[str, ...]]:
  return [VALUE_NAMES[a][: params.num_values] for a in range(params.num_attributes)]


def item_description(item: int, params: token_game.EnvParams) -> str:
  """`apple (color red, size small)`: an item and its property values."""
  table = token_game.item_attributes(params)
  values = _value_names(params)
  parts = ", ".join(
    f"{ATTRIBUTE_NAMES[a]} {values[a][table[item, a]]}" for a in range(params.num_attributes)
  )
  return f"{ITEM_NAMES[item]} ({parts})"


def render_utterance(utterance, params: token_game.EnvParams) -> str:
  """The text of a game utterance `[L]`: `ask color red`, `guess apple` or `(not understood)`."""
  check_text_params(params)
  tokens = np.asarray(utterance).astype(np.int64)
  vocab = token_game.vocabulary(params)
  if tokens.shape[0] >= 4 and tokens[0] == token_game.ASK and tokens[3] == token_game.END:
    a, v = tokens[1] - vocab.attribute_start, tokens[2] - vocab.value_start
    if 0 <= a < params.num_attributes and 0 <= v < params.num_values:
      return f"ask {ATTRIBUTE_NAMES[a]} {VALUE_NAMES[a][v]}"
  if tokens.shape[0] >= 3 and tokens[0] == token_game.GUESS and tokens[2] == token_game.END:
    i = tokens[1] - vocab.item_start
    if 0 <= i < params.num_items:
      return f"guess {ITEM_NAMES[i]}"
  return "(not understood)"


def dialogue_turns(obs, params: token_game.EnvParams) -> list[tuple[str, str]]:
  """A game observation `[max_dialogue_len]` as `(move text, answer text)` turns (host-side)."""
  check_text_params(params)
  tokens = np.asarray(obs)
  if tokens.ndim != 1:
    raise ValueError(f"obs: expected a rank-1 dialogue, got shape {tokens.shape}")
  tokens = tokens[tokens != token_game.PAD].tolist()
  length = params.utterance_len
  turns, position = [], 1  # position 0 holds BOS
  while position < len(tokens):
    window = tokens[position : position + length]
    spoken = window.index(token_game.END) + 1 if token_game.END in window else len(window)
    utterance = tokens[position : position + spoken]
    utterance = utterance + [token_game.PAD] * (length - len(utterance))
    answer = tokens[position + spoken] if position + spoken < len(tokens) else None
    turns.append(
      (
        render_utterance(utterance, params),
        ANSWER_TEXT.get(answer, "") if answer is not None else "",
      )
    )
    position += spoken + 1
  return turns


def game_rules(params: token_game.EnvParams, include_table: bool = True) -> str:
  """The rules of the text game (and the item table when `include_table`)."""
  check_text_params(params)
  values = _value_names(params)
  properties = "; ".join(
    f"{ATTRIBUTE_NAMES[a]}: {', '.join(values[a])}" for a in range(params.num_attributes)
  )
  lines = [
    f"Let's play a guessing game. I am thinking of one of {params.num_items} items.",
    f"Properties: {properties}.",
  ]
  if include_table:
    lines.append(
      "Items: " + "; ".join(item_description(i, params) for i in range(params.num_items)) + "."
    )
  else:
    lines.append("Items: " + ", ".join(ITEM_NAMES[: params.num_items]) + ".")
  first_value = VALUE_NAMES[0][0]
  lines.append(
    f"Each turn, write one line: either 'ask <property> <value>' (for example 'ask "
    f"{ATTRIBUTE_NAMES[0]} {first_value}') and I answer yes or no, or 'guess <item>' (for "
    f"example 'guess {ITEM_NAMES[0]}'). A correct guess wins"
    + ("; a wrong guess ends the game" if params.end_on_wrong_guess else "")
    + f". You have {params.max_turns} turns."
    + _scoring_sentence(params)
  )
  return "\n".join(lines)


def _scoring_sentence(params: token_game.EnvParams) -> str:
  """The scores, stated only when a turn has a cost or reward (the default game has none)."""
  if float(params.turn_reward) == 0.0:
    return ""
  return (
    f" Every turn without a correct guess scores {float(params.turn_reward):g}; "
    f"the correct guess scores {float(params.correct_reward):g}."
  )


def game_prompt(obs, params: token_game.EnvParams, include_table: bool = True) -> str:
  """The user message for a game observation: rules, the dialogue so far, the request."""
  turns = dialogue_turns(obs, params)
  lines = [game_rules(params, include_table)]
  if turns:
    lines.append("Dialogue so far:")
    for move, answer in turns:
      lines.append(f"You: {move}")
      lines.append(f"Me: {answer}")
  turns_left = params.max_turns - len(turns)
  lines.append(
    f"You have {turns_left} turn{'s' if turns_left != 1 else ''} left. Your move (one line):"
  )
  return "\n".join(lines)


def parse_move(text: str, params: token_game.EnvParams, lenient: bool = False) -> np.ndarray:
  """The game utterance (int32 `[utterance_len]`) that an agent's text says (host-side).

  The first word `ask` or `guess` (case-insensitive) decides. `ask <property> <value>` (or
  `ask <value>`, values being unique words; an optional `the`/`is`/`it` after `ask` is
  skipped) becomes `ASK attr value END`; `guess <item>` (optional `the`) becomes
  `GUESS item END`. Anything else, including unknown names, is the INVALID utterance
  `INVALID END PAD...`, which the game answers INVALID and which costs a turn.

  `lenient=True` reads free text as a small pretrained model writes it: when no `ask`/`guess`
  command parses, the first item name in the text is a guess and the first property value a
  question ("pick a color: blue" asks about blue; "is it the cup?" guesses the cup).
  """
  strict = _parse_command(text, params)
  if strict is not None or not lenient:
    return (
      strict if strict is not None else _utterance([token_game.INVALID, token_game.END], params)
    )
  return _parse_free_text(text, params)


def _name_tables(params: token_game.EnvParams) -> tuple[dict, dict]:
  """`({value name: (attribute, value)}, {item name: item})` of the game's words."""
  values = _value_names(params)
  value_owner = {
    name: (a, v) for a in range(params.num_attributes) for v, name in enumerate(values[a])
  }
  return value_owner, {ITEM_NAMES[i]: i for i in range(params.num_items)}


def _parse_command(text: str, params: token_game.EnvParams) -> Optional[np.ndarray]:
  """The `ask ...` / `guess ...` command of `text`, or None."""
  check_text_params(params)
  words = _WORD.findall(text.lower())
  values = _value_names(params)
  attributes = {ATTRIBUTE_NAMES[a]: a for a in range(params.num_attributes)}
  value_owner, items = _name_tables(params)
  for i, word in enumerate(words):
    if word not in ("ask", "guess"):
      continue
    rest = [w for w in words[i + 1 : i + 5] if w not in ("the", "is", "it", "a", "an")]
    if word == "ask" and rest:
      if rest[0] in attributes and len(rest) > 1 and rest[1] in values[attributes[rest[0]]]:
        a = attributes[rest[0]]
        return _question(a, values[a].index(rest[1]), params)
      if rest[0] in value_owner:
        return _question(*value_owner[rest[0]], params)
    if word == "guess" and rest and rest[0] in items:
      vocab = token_game.vocabulary(params)
      return _utterance(
        [token_game.GUESS, vocab.item_start + items[rest[0]], token_game.END], params
      )
    break
  return None


def _parse_free_text(text: str, params: token_game.EnvParams) -> np.ndarray:
  """The first item name (a guess) or property value (a question) of `text`, else INVALID."""
  value_owner, items = _name_tables(params)
  vocab = token_game.vocabulary(params)
  for word in _WORD.findall(text.lower()):
    if word in items:
      return _utterance([token_game.GUESS, vocab.item_start + items[word], token_game.END], params)
    if word in value_owner:
      return _question(*value_owner[word], params)
  return _utterance([token_game.INVALID, token_game.END], params)


def _utterance(tokens: list, params: token_game.EnvParams) -> np.ndarray:
  # NumPy twin of token_game.encode_*: the host-side parser should not dispatch JAX ops.
  out = np.full((params.utterance_len,), token_game.PAD, np.int32)
  out[: len(tokens)] = tokens
  return out


def _question(attribute: int, value: int, params: token_game.EnvParams) -> np.ndarray:
  vocab = token_game.vocabulary(params)
  return _utterance(
    [token_game.ASK, vocab.attribute_start + attribute, vocab.value_start + value, token_game.END],
    params,
  )
