"""The token game's horizon (`max_turns`): horizon 4 is the token agents' game as recorded before
the horizon became a documented knob, longer horizons keep every turn's semantics, answers narrow
the candidate set, and out-of-range horizons are refused."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.configs import token_game_common
from hrljax import envs
from hrljax.envs import text_tasks
from hrljax.envs import token_game as tg

GAME = dict(token_game_common.GAME)
# The preset's game as it was configured before its rewards were listed in `GAME`.
GAME_BEFORE = dict(num_items=8, num_attributes=3, num_values=2, utterance_len=4, max_turns=4)
TQ = tg.TWENTY_QUESTIONS_RULES

# A fixed utterance sequence over several games (reset key 0, step key 100 + i; first target 5):
# questions, an unterminated invalid utterance, a correct guess, a question with an out-of-range
# token, a run into the turn limit, wrong guesses, a PAD-ended question.
ACTIONS = [
  [2, 8, 12, 4], [2, 9, 11, 4], [7, 7, 7, 7], [3, 18, 4, 0], [2, 10, 12, 4], [2, 8, 11, 4],
  [2, 9, 99, 4], [2, 10, 11, 4], [3, 18, 4, 0], [3, 14, 4, 0], [2, 10, 12, 0], [3, 19, 4, 0],
  [3, 13, 4, 0], [3, 15, 4, 0],
]  # fmt: skip

# Recorded from the game's code before the horizon was validated and documented (the step and
# answer logic are unchanged since): per step, the reward, terminated, the answer token, the turn
# count, the hidden target after the step and the observation's used tokens (PAD after them).
REFERENCE = {
  "game": dict(
    reward=[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    terminated=[0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1],
    answer=[6, 5, 7, 5, 6, 6, 7, 5, 6, 6, 5, 6, 6, 6],
    turn=[1, 2, 3, 4, 1, 2, 3, 4, 1, 1, 1, 2, 1, 1],
    target=[5, 5, 5, 6, 6, 6, 6, 1, 6, 3, 3, 3, 7, 4],
    obs=[
      [1, 2, 8, 12, 4, 6], [1, 2, 8, 12, 4, 6, 2, 9, 11, 4, 5],
      [1, 2, 8, 12, 4, 6, 2, 9, 11, 4, 5, 7, 7, 7, 7, 7], [1], [1, 2, 10, 12, 4, 6],
      [1, 2, 10, 12, 4, 6, 2, 8, 11, 4, 6], [1, 2, 10, 12, 4, 6, 2, 8, 11, 4, 6, 2, 9, 7, 4, 7],
      [1], [1], [1], [1, 2, 10, 12, 4, 5], [1], [1], [1],
    ],
  ),
  "twenty_questions": dict(
    reward=[-1, -1, -1, 0, -1, -1, -1, -1, -1, 0, -1, -1, -1, -1],
    terminated=[0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1],
    answer=[6, 5, 7, 5, 6, 6, 7, 5, 6, 5, 5, 6, 6, 6],
    turn=[1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 1, 2, 3, 4],
    target=[5, 5, 5, 6, 6, 6, 6, 1, 1, 3, 3, 3, 3, 4],
    obs=[
      [1, 2, 8, 12, 4, 6], [1, 2, 8, 12, 4, 6, 2, 9, 11, 4, 5],
      [1, 2, 8, 12, 4, 6, 2, 9, 11, 4, 5, 7, 7, 7, 7, 7], [1], [1, 2, 10, 12, 4, 6],
      [1, 2, 10, 12, 4, 6, 2, 8, 11, 4, 6], [1, 2, 10, 12, 4, 6, 2, 8, 11, 4, 6, 2, 9, 7, 4, 7],
      [1], [1, 3, 18, 4, 6], [1], [1, 2, 10, 12, 4, 5], [1, 2, 10, 12, 4, 5, 3, 19, 4, 6],
      [1, 2, 10, 12, 4, 5, 3, 19, 4, 6, 3, 13, 4, 6], [1],
    ],
  ),
}  # fmt: skip

# The text game's prompt after the first two turns of ACTIONS, recorded with the same code.
PROMPT_AFTER_TWO_TURNS = (
  "Let's play a guessing game. I am thinking of one of 8 items.\n"
  "Properties: color: red, blue; size: small, big; shape: round, square.\n"
  "Items: apple (color blue, size big, shape square); ball (color red, size big, shape round); "
  "cup (color red, size big, shape square); drum (color blue, size small, shape square); "
  "egg (color blue, size big, shape round); fan (color red, size small, shape square); "
  "hat (color blue, size small, shape round); jar (color red, size small, shape round).\n"
  "Each turn, write one line: either 'ask <property> <value>' (for example 'ask color red') and "
  "I answer yes or no, or 'guess <item>' (for example 'guess apple'). A correct guess wins; a "
  "wrong guess ends the game. You have 4 turns.\n"
  "Dialogue so far:\nYou: ask color blue\nMe: no\nYou: ask size small\nMe: yes\n"
  "You have 2 turns left. Your move (one line):"
)


def play(env, params, actions, target=None):
  """Steps gymnax's jitted `step` (auto-reset) through `actions` from reset key 0; per step the
  reward, terminated, truncated, answer, turn, target and observation (NumPy)."""
  obs, state = env.reset(jax.random.key(0), params)
  if target is not None:
    state = state.replace(target=jnp.asarray(target, jnp.int32))
  rows = []
  for i, action in enumerate(actions):
    obs, state, reward, terminated, truncated, info = env.step(
      jax.random.key(100 + i), state, jnp.asarray(action, jnp.int32), params
    )
    rows.append(
      dict(
        reward=float(reward),
        terminated=bool(terminated),
        truncated=bool(truncated),
        answer=int(info["answer"]),
        turn=int(info["turn"]),
        target=int(state.target),
        obs=np.asarray(obs),
      )
    )
  return rows


def make(**overrides):
  """`envs.make` of the preset's game with `overrides`; one environment per setting, so that
  gymnax's `step` (jitted with the environment static) compiles once per setting."""
  return _make(tuple(sorted(overrides.items())))


@functools.lru_cache(maxsize=None)
def _make(overrides: tuple):
  return envs.make("TokenGame-v0", **{**GAME, **dict(overrides)})


@pytest.mark.parametrize("rules", ["game", "twenty_questions"])
def test_horizon_four_is_the_recorded_game(rules):
  overrides = TQ if rules == "twenty_questions" else {}
  env, params = make(**overrides)
  assert params == tg.make_params(**GAME_BEFORE, **overrides)
  assert params.max_turns == 4 and params.max_steps_in_episode == 4
  assert tg.max_dialogue_len(params) == 21
  rows = play(env, params, ACTIONS)
  expected = REFERENCE[rules]
  for field in ("reward", "terminated", "answer", "turn", "target"):
    assert [row[field] for row in rows] == expected[field], field
  assert not any(row["truncated"] for row in rows)
  for row, used in zip(rows, expected["obs"]):
    np.testing.assert_array_equal(row["obs"], used + [tg.PAD] * (21 - len(used)))


def test_text_prompt_at_horizon_four_is_the_recorded_prompt():
  env, params = make()
  obs = play(env, params, ACTIONS[:2])[-1]["obs"]
  assert text_tasks.game_prompt(obs, params) == PROMPT_AFTER_TWO_TURNS
  # The per-turn cost of the Twenty Questions rules is stated; nothing else changes.
  tq_params = make(**TQ)[1]
  rules = text_tasks.game_rules(tq_params, include_table=False)
  assert rules.endswith(
    "A correct guess wins. You have 4 turns. Every turn without a correct guess scores -1; "
    "the correct guess scores 0."
  )
  assert "scores" not in text_tasks.game_rules(params)


# Questions only (target 0 = attributes (1, 1, 1)): YES, NO, YES, then repeats; never a guess.
QUESTIONS = [[2, 8, 12, 4], [2, 9, 11, 4], [2, 10, 12, 4]]


@pytest.mark.parametrize("rules", ["game", "twenty_questions"])
def test_longer_horizons_keep_the_per_turn_semantics(rules):
  overrides = TQ if rules == "twenty_questions" else {}
  turn_reward = float(overrides.get("turn_reward", 0.0))
  by_horizon = {}
  for horizon in (4, 10, 20):
    env, params = make(max_turns=horizon, **overrides)
    assert params.max_steps_in_episode == horizon  # the time limit follows the horizon
    assert tg.max_dialogue_len(params) == 1 + horizon * 5
    actions = [QUESTIONS[t % 3] for t in range(horizon)]
    rows = play(env, params, actions, target=0)
    by_horizon[horizon] = rows
    # Every turn scores the same; the game ends (terminates, never truncates) at the turn limit.
    assert [row["reward"] for row in rows] == [turn_reward] * horizon
    assert [row["terminated"] for row in rows] == [False] * (horizon - 1) + [True]
    assert not any(row["truncated"] for row in rows)
    assert [row["turn"] for row in rows] == list(range(1, horizon + 1))
    assert [row["answer"] for row in rows] == [
      [tg.YES, tg.NO, tg.YES][t % 3] for t in range(horizon)
    ]
    # The last dialogue before the auto-reset fills the observation exactly.
    final = rows[-2]["obs"]
    assert tg.dialogue_length(final) == 1 + (horizon - 1) * 5
    assert len(text_tasks.dialogue_turns(final, params)) == horizon - 1
  # The first turns' observations are the same dialogue at every horizon, only padded further.
  for t in range(3):
    short = by_horizon[4][t]["obs"]
    for horizon in (10, 20):
      long = by_horizon[horizon][t]["obs"]
      np.testing.assert_array_equal(long[: short.shape[0]], short)
      assert (long[short.shape[0] :] == tg.PAD).all()


def test_correct_and_wrong_guesses_mean_the_same_at_horizon_twenty():
  env, params = make(max_turns=20, **TQ)
  wrong, right = [3, 14, 4, 0], [3, 13, 4, 0]  # guesses of item 1 and item 0; the target is 0
  rows = play(env, params, [QUESTIONS[0]] * 12 + [wrong, right], target=0)
  assert [row["reward"] for row in rows] == [-1.0] * 13 + [0.0]
  assert [row["terminated"] for row in rows] == [False] * 13 + [True]
  assert rows[12]["answer"] == tg.NO and rows[13]["answer"] == tg.YES
  env, params = make(max_turns=20)  # the preset's rules: a wrong guess ends the game
  rows = play(env, params, [QUESTIONS[0]] * 12 + [wrong], target=0)
  assert [row["terminated"] for row in rows] == [False] * 12 + [True]
  assert [row["reward"] for row in rows] == [0.0] * 13


def test_answers_narrow_the_candidates_and_early_answers_decide_the_guess():
  env, params = make(max_turns=20)
  consistent = jax.jit(tg.consistent_items, static_argnums=1)
  ask = jax.jit(tg.scripted_questioner, static_argnums=2)
  counts, wins = [], 0
  for target in range(params.num_items):
    obs, state = env.reset(jax.random.key(0), params)
    state = state.replace(target=jnp.asarray(target, jnp.int32))
    game_counts = [params.num_items]
    for t in range(params.max_turns):
      utterance = ask(jax.random.key(t), obs, params, 0.0)
      obs, state, _, terminated, _, info = env.step(jax.random.key(t), state, utterance, params)
      if terminated:
        wins += bool(info["correct"])
        break
      candidates, turns = consistent(obs, params)
      assert bool(candidates[target]) and int(turns) == t + 1
      game_counts.append(int(candidates.sum()))
    counts.append(game_counts)
  # Each halving answer keeps half of the consistent items: 8, 4, 2, 1; the guess after three
  # answers wins at turn 4 although 16 more turns are left.
  assert counts == [[8, 4, 2, 1]] * params.num_items
  assert wins == params.num_items


def _success(horizon: int, random_question_prob: float, games: int = 256) -> float:
  """Success rate of the scripted questioner over `games` first games (the same targets at every
  horizon)."""
  env, params = make(max_turns=horizon)
  ask = jax.vmap(tg.scripted_questioner, in_axes=(0, 0, None, None))

  @jax.jit
  def run(key):
    reset_keys, turn_keys = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_keys, games), params)

    def turn(carry, key):
      obs, state, won, over = carry
      ask_keys, step_keys = jnp.split(jax.random.split(key, 2 * games), 2)
      utterance = ask(ask_keys, obs, params, random_question_prob)
      obs, state, _, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        step_keys, state, utterance, params
      )
      won = won | (info["correct"] & ~over)
      return (obs, state, won, over | terminated | truncated), None

    init = (obs, state, jnp.zeros(games, bool), jnp.zeros(games, bool))
    (_, _, won, _), _ = jax.lax.scan(turn, init, jax.random.split(turn_keys, horizon))
    return won.mean()

  return float(run(jax.random.key(0)))


# Success of the scripted questioner with random_question_prob 0.5 (the token agents' BC teacher),
# measured over 1,000 games: 0.781 at horizon 4, 1.000 at 10 and 20 (experiments/results/ARCHER.md);
# its random questions cost turns that only a longer horizon can spare. The bands do not overlap,
# so passing both means it succeeds at least as often at horizon 20 as at 4.
SUCCESS_BANDS = {4: (0.65, 0.92), 20: (0.98, 1.0)}


@pytest.mark.parametrize("horizon", sorted(SUCCESS_BANDS))
def test_scripted_questioner_succeeds_at_least_as_often_at_longer_horizons(horizon):
  low, high = SUCCESS_BANDS[horizon]
  assert low <= _success(horizon, 0.5) <= high


@pytest.mark.parametrize("horizon", [0, -3, tg.MAX_TURNS + 1, 100, 4.0, True, "10"])
def test_out_of_range_horizons_are_refused_in_one_line(horizon):
  with pytest.raises(ValueError, match=r"^max_turns: expected an int in \[1, 20\], got ") as err:
    envs.make("TokenGame-v0", **{**GAME, "max_turns": horizon})
  assert "\n" not in str(err.value) and repr(horizon) in str(err.value)
  with pytest.raises(ValueError, match="^max_turns"):
    tg.check_params(tg.EnvParams(max_turns=horizon))


def test_twenty_turn_text_game_renders_every_turn():
  env, params = make(max_turns=20, **TQ)
  rows = play(env, params, [QUESTIONS[t % 3] for t in range(19)], target=0)
  obs = rows[-1]["obs"]
  turns = text_tasks.dialogue_turns(obs, params)
  assert len(turns) == 19 and turns[0] == ("ask color blue", "yes")
  prompt = text_tasks.game_prompt(obs, params)
  assert "You have 20 turns." in prompt and prompt.endswith(
    "You have 1 turn left. Your move (one line):"
  )


@pytest.mark.parametrize("rules", ["game", "twenty_questions"])
def test_success_rate_of_mean_return_and_length_counts_the_games_won(rules):
  """`success_rate` of the recorded games' mean return and mean length is the fraction of them
  that ended with a correct guess (a guess answered YES), under both rules; NaN when the two
  rewards are equal."""
  ref = REFERENCE[rules]
  params = tg.make_params(**{**GAME, **(TQ if rules == "twenty_questions" else {})})
  returns, lengths, wins, total = [], [], [], 0.0
  for i, (reward, done) in enumerate(zip(ref["reward"], ref["terminated"])):
    total += reward
    if done:
      won = ACTIONS[i][0] == tg.GUESS and ref["answer"][i] == tg.YES
      returns.append(total)
      lengths.append(ref["turn"][i])
      wins.append(float(won))
      total = 0.0
  assert 0 < np.mean(wins) < 1  # won and lost games
  success = tg.success_rate(np.mean(returns), np.mean(lengths), params)
  np.testing.assert_allclose(success, np.mean(wins), rtol=1e-6)
  flat = tg.make_params(**{**GAME, "correct_reward": 0.0, "turn_reward": 0.0})
  assert np.isnan(tg.success_rate(0.0, 4.0, flat))
