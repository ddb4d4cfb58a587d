"""Tests for hrljax.envs.text_tasks: problem generator, answer parser, rewards, the text game."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.envs import text_tasks as tt
from hrljax.envs import token_game as tg

GAME = tg.make_params(num_items=8, num_attributes=3, num_values=2, max_turns=4)


# ------------------------------------------------------------------------------------------------
# Arithmetic generator


def test_generator_is_deterministic_per_seed_and_index():
  a = tt.arithmetic_problems(3, 20)
  b = tt.arithmetic_problems(3, 20)
  assert a == b
  # Problem i does not depend on how many were drawn before it.
  assert tt.arithmetic_problems(3, 5, start=10) == a[10:15]
  assert tt.arithmetic_problem(3, 7) == a[7]
  assert tt.arithmetic_problems(4, 20) != a


@pytest.mark.parametrize("operations", [("add",), ("sub",), ("mul",), ("add", "sub", "mul")])
def test_generator_answers_match_operands_and_text(operations):
  for p in tt.arithmetic_problems(0, 50, max_operand=12, operations=operations):
    a, b = p.operands
    assert p.operation in operations
    assert 2 <= b <= 12 and 2 <= a <= 12
    expected = {"add": a + b, "sub": a - b, "mul": a * b}[p.operation]
    assert p.answer == expected and p.answer >= 0
    # Both operands appear in the question as words.
    numbers = [
      int(w) for w in p.question.replace("?", " ").replace(".", " ").split() if w.isdigit()
    ]
    assert numbers == [a, b]


def test_generator_covers_every_requested_operation():
  seen = {p.operation for p in tt.arithmetic_problems(1, 60, operations=tt.OPERATIONS)}
  assert seen == set(tt.OPERATIONS)


def test_hand_checked_problem_text():
  p = tt.arithmetic_problem(0, 0)
  assert p.question == (
    "Sam has 7 stickers and gives 6 to a friend. How many stickers does Sam have left?"
  )
  assert p.answer == 1
  assert tt.arithmetic_prompt(p).endswith("'Answer: <number>'.")


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(seed=-1, index=0), "seed"),
    (dict(seed=0, index=-2), "index"),
    (dict(seed=0, index=0, max_operand=1), "max_operand"),
    (dict(seed=0, index=0, operations=("div",)), "operations"),
    (dict(seed=0, index=0, operations=()), "operations"),
  ],
)
def test_generator_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    tt.arithmetic_problem(**kwargs)


# ------------------------------------------------------------------------------------------------
# Parser and rewards


@pytest.mark.parametrize(
  "text, expected",
  [
    ("Answer: 7", 7),
    ("3 + 4 = 7 apples.\nAnswer: 7", 7),
    ("work\n  Answer:12.  \n\n", 12),
    ("Answer: -3", -3),
    ("Answer: +5", 5),
    ("Answer: 7\nThanks!", None),  # not the last line
    ("answer: 7", None),  # case-sensitive keyword
    ("Answer 7", None),  # colon required
    ("Answer: seven", None),
    ("Answer: 7 apples", None),
    ("Answer: 7.5", None),
    ("The answer is 7", None),
    ("", None),
    ("**Answer:** 7", None),
  ],
)
def test_parse_answer(text, expected):
  assert tt.parse_answer(text) == expected


@pytest.mark.parametrize(
  "text, expected",
  [
    ("Tom has 3 and 4 so 7 apples", 7),
    ("no numbers here", None),
    ("it is -2 now", -2),
    ("pi is 3.14 and then 9", 9),
  ],
)
def test_last_integer(text, expected):
  assert tt.last_integer(text) == expected


def test_reward_values():
  good = tt.arithmetic_reward("3 + 4 = 7\nAnswer: 7", 7)
  assert good == tt.ArithmeticReward(1.5, True, True, 7)
  wrong = tt.arithmetic_reward("Answer: 8", 7)
  assert wrong == tt.ArithmeticReward(0.5, False, True, 8)
  unformatted = tt.arithmetic_reward("Tom has 7 apples.", 7)
  assert unformatted == tt.ArithmeticReward(0.0, False, False, None)
  lenient = tt.arithmetic_reward("Tom has 7 apples.", 7, answer_mode="last_number")
  assert lenient == tt.ArithmeticReward(1.0, True, False, 7)
  weighted = tt.arithmetic_reward("Answer: 7", 7, correct_weight=2.0, format_weight=0.25)
  assert weighted.reward == 2.25


def test_batch_rewards():
  rewards, correct, formatted = tt.arithmetic_rewards(
    ["Answer: 7", "Answer: 1", "7", "nothing"], [7, 2, 7, 0]
  )
  np.testing.assert_array_equal(rewards, np.array([1.5, 0.5, 0.0, 0.0], np.float32))
  np.testing.assert_array_equal(correct, [True, False, False, False])
  np.testing.assert_array_equal(formatted, [True, True, False, False])
  assert rewards.dtype == np.float32
  with pytest.raises(ValueError, match="answers"):
    tt.arithmetic_rewards(["a", "b"], [1])


def test_reference_reply_scores_the_best_reward_of_its_task():
  """The reference reply of every problem is correct and formatted: its reward is the task's
  maximum, repeated for each sample row."""
  from hrljax.envs import arithmetic_task

  task = arithmetic_task.ArithmeticTask(operations=("add", "sub", "mul"), format_weight=0.25)
  problems = task.problems(3, 12)
  for p in problems:
    assert tt.arithmetic_reward(tt.reference_reply(p), p.answer) == tt.ArithmeticReward(
      1.5, True, True, p.answer
    )
  rewards = task.reference_rewards(problems[:2], 3)
  np.testing.assert_array_equal(rewards, np.full(6, 1.25, np.float32))


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(answer_mode="fuzzy"), "answer_mode"),
    (dict(correct_weight=-1.0), "correct_weight"),
    (dict(format_weight=float("nan")), "format_weight"),
  ],
)
def test_reward_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    tt.arithmetic_reward("Answer: 1", 1, **kwargs)


# ------------------------------------------------------------------------------------------------
# The text game


def _question(a, v):
  vocab = tg.vocabulary(GAME)
  return [tg.ASK, vocab.attribute_start + a, vocab.value_start + v, tg.END]


def _guess(i):
  return [tg.GUESS, tg.vocabulary(GAME).item_start + i, tg.END, tg.PAD]


@pytest.mark.parametrize(
  "text, expected",
  [
    ("ask color blue", _question(0, 1)),
    ("Sure! I will ASK size small.", _question(1, 0)),
    ("ask is it big?", _question(1, 1)),
    ("ask square", _question(2, 1)),
    ("guess cup", _guess(2)),
    ("I guess the jar", _guess(7)),
    ("guess apple\nask color red", _guess(0)),  # the first keyword decides
    ("ask color square", [tg.INVALID, tg.END, tg.PAD, tg.PAD]),  # value of another property
    ("guess kite", [tg.INVALID, tg.END, tg.PAD, tg.PAD]),  # not one of the 8 items
    ("ask colour red", [tg.INVALID, tg.END, tg.PAD, tg.PAD]),
    ("hello there", [tg.INVALID, tg.END, tg.PAD, tg.PAD]),
    ("", [tg.INVALID, tg.END, tg.PAD, tg.PAD]),
  ],
)
def test_parse_move(text, expected):
  out = tt.parse_move(text, GAME)
  assert out.dtype == np.int32 and out.shape == (4,)
  np.testing.assert_array_equal(out, expected)


def test_parse_move_agrees_with_the_game_parser():
  # The host-side encoding is what the jittable game encoders produce.
  np.testing.assert_array_equal(
    tt.parse_move("ask shape round", GAME), tg.encode_question(2, 0, GAME)
  )
  np.testing.assert_array_equal(tt.parse_move("guess hat", GAME), tg.encode_guess(6, GAME))
  parsed = tg.parse_utterance(jnp.asarray(tt.parse_move("nonsense", GAME)), GAME)
  assert int(parsed.kind) == tg.KIND_INVALID


def test_render_and_parse_round_trip():
  for a in range(3):
    for v in range(2):
      u = np.asarray(tg.encode_question(a, v, GAME))
      np.testing.assert_array_equal(tt.parse_move(tt.render_utterance(u, GAME), GAME), u)
  for i in range(8):
    u = np.asarray(tg.encode_guess(i, GAME))
    np.testing.assert_array_equal(tt.parse_move(tt.render_utterance(u, GAME), GAME), u)
  assert tt.render_utterance([tg.INVALID, tg.END, 0, 0], GAME) == "(not understood)"


def test_table_text_matches_the_game_table():
  table = tg.item_attributes(GAME)
  rules = tt.game_rules(GAME)
  for i in range(8):
    desc = tt.item_description(i, GAME)
    assert desc in rules
    for a in range(3):
      assert f"{tt.ATTRIBUTE_NAMES[a]} {tt.VALUE_NAMES[a][table[i, a]]}" in desc
  assert "Items: apple, ball" in tt.game_rules(GAME, include_table=False)


def test_text_game_played_through_the_environment():
  """Text moves parsed and stepped through TokenGame: answers, the rendered dialogue, reward."""
  env = tg.TokenGame(GAME)
  obs, state = env.reset(jax.random.key(0), GAME)
  target = 5
  state = state.replace(target=jnp.asarray(target, jnp.int32))
  table = tg.item_attributes(GAME)
  colour = tt.VALUE_NAMES[0][table[target, 0]]
  other = tt.VALUE_NAMES[0][1 - table[target, 0]]
  moves = [f"ask color {colour}", f"ask color {other}", "blah", f"guess {tt.ITEM_NAMES[target]}"]
  rewards, dones = [], []
  for k, move in enumerate(moves):
    obs, state, reward, done, _ = env.step_env(
      jax.random.key(k), state, jnp.asarray(tt.parse_move(move, GAME)), GAME
    )
    rewards.append(float(reward))
    dones.append(bool(done))
  assert rewards == [0.0, 0.0, 0.0, 1.0] and dones == [False, False, False, True]
  turns = tt.dialogue_turns(obs, GAME)
  assert turns == [
    (f"ask color {colour}", "yes"),
    (f"ask color {other}", "no"),
    ("(not understood)", tt.ANSWER_TEXT[tg.INVALID]),
    (f"guess {tt.ITEM_NAMES[target]}", "yes"),
  ]
  prompt = tt.game_prompt(obs, GAME)
  assert f"You: ask color {colour}\nMe: yes" in prompt
  assert prompt.endswith("You have 0 turns left. Your move (one line):")


def test_wrong_guess_ends_with_zero_reward():
  env = tg.TokenGame(GAME)
  _, state = env.reset(jax.random.key(0), GAME)
  state = state.replace(target=jnp.asarray(1, jnp.int32))
  _, _, reward, done, _ = env.step_env(
    jax.random.key(0), state, jnp.asarray(tt.parse_move("guess apple", GAME)), GAME
  )
  assert float(reward) == 0.0 and bool(done)


def test_fresh_prompt_and_rules():
  obs, _ = tg.TokenGame(GAME).reset(jax.random.key(0), GAME)
  prompt = tt.game_prompt(obs, GAME)
  assert "Dialogue so far" not in prompt
  assert "You have 4 turns left." in prompt
  assert "one of 8 items" in prompt and "a wrong guess ends the game" in prompt


@pytest.mark.parametrize(
  "override, match",
  [
    (dict(num_items=40, num_attributes=6), "num_items"),
    (dict(num_attributes=7, num_values=2), "num_attributes"),
    (dict(num_values=4), "num_values"),
  ],
)
def test_text_game_size_limits(override, match):
  params = tg.make_params(**{**dict(num_items=8, num_attributes=3, num_values=2), **override})
  with pytest.raises(ValueError, match=match):
    tt.check_text_params(params)
  with pytest.raises(ValueError, match=match):
    tt.parse_move("guess apple", params)


def test_dialogue_turns_rejects_batches():
  with pytest.raises(ValueError, match="obs"):
    tt.dialogue_turns(np.zeros((2, tg.max_dialogue_len(GAME)), np.int32), GAME)


@pytest.mark.parametrize(
  "text, expected",
  [
    ("pick a color: blue", _question(0, 1)),
    ("Is it the cup?", _guess(2)),
    ("It is small and round, so the jar", _question(1, 0)),  # the first name decides
    ("ask colour red, I think it is the hat", _question(0, 0)),  # no command parses: first name
    ("guess apple", _guess(0)),  # commands still parse first
    ("The answer is a kite", [tg.INVALID, tg.END, tg.PAD, tg.PAD]),  # not one of the 8 items
    ("hello there", [tg.INVALID, tg.END, tg.PAD, tg.PAD]),
  ],
)
def test_lenient_parse_reads_free_text(text, expected):
  np.testing.assert_array_equal(tt.parse_move(text, GAME, lenient=True), expected)


def test_lenient_parse_only_when_asked():
  assert tt.parse_move("pick a color: blue", GAME)[0] == tg.INVALID
