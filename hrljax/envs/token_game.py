"""A multi-turn token guessing game (twenty-questions style) for utterance-level RL.

The game is a small, fully jittable analogue of the Twenty Questions / Guess My City tasks of
ArCHer ("ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL", Zhou, Zanette,
Pan, Levine, Kumar, arXiv 2402.19446; tasks from LMRL-Gym, arXiv 2311.18232), with a table
lookup instead of a language-model oracle.

Game
----
A hidden target item is drawn uniformly per episode from ``num_items`` items. Every item has
``num_attributes`` categorical attributes with ``num_values`` values each, from a table that is a
deterministic function of ``(num_items, num_attributes, num_values, seed)`` (NumPy PCG64); no two
items share all attribute values, so a perfect questioner can always identify the target. Each
turn the agent speaks one utterance and the environment answers with one token:

* ``ASK attr value END``  ->  YES if the target's attribute ``attr`` equals ``value``, else NO;
* ``GUESS item END``      ->  YES if ``item`` is the target (reward ``correct_reward``, the episode
  terminates), else NO (the episode terminates if ``end_on_wrong_guess``, the default);
* anything else           ->  INVALID. An invalid utterance costs a turn like any other.

Every turn that is not a correct guess earns ``turn_reward``. After ``max_turns`` turns without a
correct guess the game is lost: the episode **terminates** (not truncates). The turn count is part
of the observation (it can be read off the dialogue) and running out of turns is a rule of the
game, so the value of the final state is exactly zero and nothing should be bootstrapped from it.
ArCHer's environment does the same (``archer/environment/twenty_questions.py`` at
YifeiZhou02/ArCHer sets ``done`` at ``max_conversation_length``).
``max_steps_in_episode`` is the separate, external time limit of gymnax: when it is smaller than
``max_turns`` it cuts games short and reports ``truncated`` (bootstrap from the final
observation); by default it equals ``max_turns``, and a step that ends the game is never also
reported as truncated.

Actions: one env step = one utterance
-------------------------------------
The action is an integer array ``[utterance_len]`` of token ids (a token-level policy generates it;
the environment sees whole utterances, i.e. the utterance-level MDP of ArCHer's critic). The
utterance ends at its first END or PAD token; tokens after it are ignored, so a policy may fill
the rest with anything (conventionally PAD). An utterance with no END/PAD within
``utterance_len`` tokens is unterminated and therefore INVALID. Ids outside ``[0, vocab_size)``
make the utterance INVALID and are recorded as the INVALID token, so the dialogue only ever holds
valid ids. ``utterance_token_mask`` gives the positions the environment reads (for a token-level
policy-gradient mask).

Observation
-----------
An int32 array ``[max_dialogue_len]`` with ``max_dialogue_len = 1 + max_turns *
(utterance_len + 1)``: BOS, then per turn the recorded utterance followed by exactly one answer
token (YES / NO / INVALID), right-padded with PAD. The recorded utterance is the spoken one up to
its end token, which is always written as END (a PAD ending becomes END), or all
``utterance_len`` tokens if it was unterminated. PAD therefore never occurs inside the dialogue:
the number of used tokens is ``dialogue_length(obs)`` (the count of non-PAD tokens), and turn
boundaries are recovered by reading left to right (an utterance is the next tokens through the
first END, at most ``utterance_len`` of them; the next token is the answer), see
``consistent_items``. There is no separate turn-separator token: the answer closes each turn.

Horizon and per-turn cost
-------------------------
The horizon is ``max_turns``, between 1 and ``MAX_TURNS`` = 20 (Twenty Questions' limit in
ArCHer); through ``hrljax.envs.make`` (hence from a preset and the command line, e.g.
``--config.env_kwargs.max_turns=20``) the time limit ``max_steps_in_episode`` follows it. The
observation grows with it (``max_dialogue_len``) and nothing else changes: every turn is scored
and answered the same way at every horizon, and the game ends at the turn limit. The answers
narrow the candidate set: after a question only the items with (YES) or without (NO) the asked
value remain consistent, after a wrong guess all but the guessed item (``consistent_items``), so
what was asked early decides the final guess. ``TWENTY_QUESTIONS_RULES`` are ArCHer's rewards
and rules: -1 per turn that is not a correct guess, 0 for the correct guess, a wrong guess is a
question like any other (``archer/environment/twenty_questions.py`` at YifeiZhou02/ArCHer).

Step info
---------
``answer`` (int32 answer token), ``valid`` (question or guess), ``guessed``, ``correct`` (bool) and
``turn`` (int32 turns taken); gymnax adds ``terminated``, ``truncated`` and ``final_observation``
(the dialogue before the auto-reset).

Helpers
-------
``scripted_questioner`` (a jittable, tunably imperfect player for warm-start data),
``consistent_items`` (the items a dialogue leaves possible), ``parse_utterance``,
``encode_question`` / ``encode_guess``, ``decode_dialogue`` / ``token_names`` (printing),
``item_attributes`` (the table), ``make_params``.

Vocabulary layout (``vocabulary(params)``)
------------------------------------------
``PAD=0, BOS=1, ASK=2, GUESS=3, END=4, YES=5, NO=6, INVALID=7``, then ``num_attributes``
attribute tokens, ``num_values`` value tokens (shared by all attributes) and ``num_items`` item
tokens.

Defaults and measured difficulty
--------------------------------
64 items, 6 attributes with 3 values, utterances of 4 tokens, 8 turns (vocabulary 81 tokens,
dialogue 41 tokens). Identifying one of 64 items takes at least 6 yes/no answers, so a good
questioner wins in about 7 turns. Measured win rates over 65,536 games (first episodes):
``scripted_questioner`` with ``random_question_prob=0`` (greedy halving) 100% in 7.04 turns on
average, 0.1 (the default) 97.2%, 0.2 91.7%, 1.0 (random valid questions, consistent final
guess) 43.9%; a uniformly random token policy won 1 game in 65,536 (a correct guess needs three
specific tokens out of 81: about 4e-6 per turn).

Deviations from ArCHer's Twenty Questions
-----------------------------------------
* Items and answers come from a fixed attribute table, not from a T5 oracle over free text.
* Default rewards are 1 for a correct guess and 0 otherwise; ArCHer's are -1 per turn and 0 on
  the correct guess (``correct_reward=0.0, turn_reward=-1.0``, in ``TWENTY_QUESTIONS_RULES``).
* A wrong guess ends the game by default; in ArCHer a guess is a question like any other and the
  game continues (``end_on_wrong_guess=False``, in ``TWENTY_QUESTIONS_RULES``).
* 8 turns by default instead of 20 (``max_turns``, at most 20).
"""

import functools
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

PAD = 0
BOS = 1
ASK = 2
GUESS = 3
END = 4
YES = 5
NO = 6
INVALID = 7
NUM_SPECIAL_TOKENS = 8
_SPECIAL_NAMES = ("<pad>", "<bos>", "ask", "guess", "<end>", "yes", "no", "invalid")

# Utterance kinds returned by `parse_utterance`.
KIND_INVALID = 0
KIND_QUESTION = 1
KIND_GUESS = 2

# A question is ASK attr value END: four tokens.
_QUESTION_LEN = 4
# The longest horizon: the turn limit of Twenty Questions in ArCHer (arXiv 2402.19446; its
# environment's max_conversation_length).
MAX_TURNS = 20
# ArCHer's Twenty Questions rewards and rules: -1 per turn that is not the correct guess, 0 for the
# correct guess, and a wrong guess does not end the game.
TWENTY_QUESTIONS_RULES = dict(correct_reward=0.0, turn_reward=-1.0, end_on_wrong_guess=False)
_MAX_TABLE_CODES = 2**62


@struct.dataclass
class EnvState(environment.EnvState):
  """Game state.

  Attributes:
    dialogue: int32 ``[max_dialogue_len]``, the observation.
    length: int32 scalar, number of used (non-PAD) dialogue tokens.
    target: int32 scalar, index of the hidden item.
    game_over: bool scalar, True once the game has ended (guess or turn limit).
    time: int32 scalar, turns taken.
  """

  dialogue: jax.Array
  length: jax.Array
  target: jax.Array
  game_over: jax.Array
  time: int


@struct.dataclass
class EnvParams(environment.EnvParams):
  """Game configuration. Size fields are static (they set shapes and the item table).

  Attributes:
    num_items: number of items (>= 2).
    num_attributes: attributes per item (>= 1).
    num_values: values per attribute (>= 2); ``num_values ** num_attributes >= num_items``.
    utterance_len: tokens per utterance, L (>= 4, the length of a question).
    max_turns: turn limit, the horizon (1..MAX_TURNS); the game is lost (terminated) when it is
    reached.
    max_steps_in_episode: gymnax time limit (truncation); only cuts games if < max_turns.
    Its default equals the default ``max_turns``: change both together (``make_params``
    does), or a larger ``max_turns`` is silently cut by truncation.
    seed: seed of the item table (not of the episodes).
    end_on_wrong_guess: whether a wrong guess ends the game.
    correct_reward: reward of a correct guess.
    turn_reward: reward of every other turn.
  """

  num_items: int = struct.field(pytree_node=False, default=64)
  num_attributes: int = struct.field(pytree_node=False, default=6)
  num_values: int = struct.field(pytree_node=False, default=3)
  utterance_len: int = struct.field(pytree_node=False, default=4)
  max_turns: int = struct.field(pytree_node=False, default=8)
  max_steps_in_episode: int = struct.field(pytree_node=False, default=8)
  seed: int = struct.field(pytree_node=False, default=0)
  end_on_wrong_guess: bool = struct.field(pytree_node=False, default=True)
  correct_reward: float = 1.0
  turn_reward: float = 0.0


default_params = EnvParams()


def make_params(**overrides) -> EnvParams:
  """Checked ``EnvParams(**overrides)``; ``max_steps_in_episode`` follows ``max_turns``."""
  if "max_turns" in overrides and "max_steps_in_episode" not in overrides:
    overrides["max_steps_in_episode"] = overrides["max_turns"]
  params = EnvParams(**overrides)
  check_params(params)
  return params


class Vocabulary(NamedTuple):
  """Token-id layout: specials, then attributes, values and items (``[start, start + count)``)."""

  attribute_start: int
  value_start: int
  item_start: int
  size: int


class ParsedUtterance(NamedTuple):
  """How the environment reads one utterance (int32 scalars, except ``recorded``).

  Attributes:
    kind: KIND_INVALID, KIND_QUESTION or KIND_GUESS.
    attribute: attribute index of a question (0 otherwise).
    value: value index of a question (0 otherwise).
    item: item index of a guess (0 otherwise).
    recorded: int32 ``[L]``, the tokens written to the dialogue, PAD after ``recorded_len``.
    recorded_len: number of tokens written to the dialogue (1..L).
  """

  kind: jax.Array
  attribute: jax.Array
  value: jax.Array
  item: jax.Array
  recorded: jax.Array
  recorded_len: jax.Array


def _require_int(name: str, value, minimum: int, maximum: int | None = None) -> None:
  is_int = not isinstance(value, bool) and isinstance(value, (int, np.integer))
  if maximum is None and not (is_int and value >= minimum):
    raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
  if maximum is not None and not (is_int and minimum <= value <= maximum):
    raise ValueError(f"{name}: expected an int in [{minimum}, {maximum}], got {value!r}")


def check_params(params: EnvParams) -> None:
  """Raises ValueError naming the first invalid field of ``params`` (Python-time check)."""
  _require_int("num_items", params.num_items, 2)
  _require_int("num_attributes", params.num_attributes, 1)
  _require_int("num_values", params.num_values, 2)
  _require_int("utterance_len", params.utterance_len, _QUESTION_LEN)
  _require_int("max_turns", params.max_turns, 1, MAX_TURNS)
  _require_int("max_steps_in_episode", params.max_steps_in_episode, 1)
  _require_int("seed", params.seed, 0)
  codes = params.num_values**params.num_attributes
  if codes < params.num_items:
    raise ValueError(
      f"num_items: expected at most num_values**num_attributes = {codes} items so that "
      f"every item has a distinct attribute tuple, got {params.num_items}"
    )
  if codes > _MAX_TABLE_CODES:
    raise ValueError(
      f"num_values**num_attributes: expected at most 2**62, got {codes} "
      f"(num_values={params.num_values}, num_attributes={params.num_attributes})"
    )
  if not isinstance(params.end_on_wrong_guess, (bool, np.bool_)):
    raise ValueError(f"end_on_wrong_guess: expected a bool, got {params.end_on_wrong_guess!r}")


def vocabulary(params: EnvParams) -> Vocabulary:
  """The token-id layout for ``params``."""
  attribute_start = NUM_SPECIAL_TOKENS
  value_start = attribute_start + params.num_attributes
  item_start = value_start + params.num_values
  return Vocabulary(attribute_start, value_start, item_start, item_start + params.num_items)


def max_dialogue_len(params: EnvParams) -> int:
  """Observation length: BOS plus ``max_turns`` turns of at most L + 1 tokens."""
  return 1 + params.max_turns * (params.utterance_len + 1)


@functools.lru_cache(maxsize=32)
def _item_table(num_items: int, num_attributes: int, num_values: int, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  # Distinct codes in base num_values give items with distinct attribute tuples.
  codes = rng.choice(num_values**num_attributes, size=num_items, replace=False)
  powers = num_values ** np.arange(num_attributes, dtype=np.int64)
  table = ((codes[:, None] // powers[None, :]) % num_values).astype(np.int32)
  table.setflags(write=False)
  return table


def item_attributes(params: EnvParams) -> np.ndarray:
  """The seeded item table: int32 ``[num_items, num_attributes]`` of value indices (read-only)."""
  check_params(params)
  return _item_table(params.num_items, params.num_attributes, params.num_values, params.seed)


def success_rate(mean_return, mean_length, params: EnvParams):
  """The fraction of games won, from the mean return and mean length (turns) of finished games.

  A game of T turns that was won (w = 1) or not (w = 0) returns
  ``correct_reward * w + turn_reward * (T - w)``, so ``w = (return - turn_reward * T) /
  (correct_reward - turn_reward)``, and the relation holds for means: the win rate under any
  rules (the default's return, ArCHer's Twenty Questions rules' return plus length). NaN when
  the two rewards are equal (the return says nothing about winning).
  """
  gap = params.correct_reward - params.turn_reward
  if gap == 0:
    return jnp.full(jnp.shape(mean_return), jnp.nan, jnp.float32)
  return (mean_return - params.turn_reward * mean_length) / gap


def encode_question(attribute: chex.Numeric, value: chex.Numeric, params: EnvParams) -> jax.Array:
  """The utterance ``ASK attr value END PAD...``: int32 ``[L]`` (jittable; scalar inputs)."""
  vocab = vocabulary(params)
  head = jnp.stack(
    [
      jnp.asarray(ASK, jnp.int32),
      vocab.attribute_start + jnp.asarray(attribute, jnp.int32),
      vocab.value_start + jnp.asarray(value, jnp.int32),
      jnp.asarray(END, jnp.int32),
    ]
  )
  padding = jnp.full((params.utterance_len - _QUESTION_LEN,), PAD, jnp.int32)
  return jnp.concatenate([head, padding])


def encode_guess(item: chex.Numeric, params: EnvParams) -> jax.Array:
  """The utterance ``GUESS item END PAD...``: int32 ``[L]`` (jittable; scalar input)."""
  vocab = vocabulary(params)
  head = jnp.stack(
    [
      jnp.asarray(GUESS, jnp.int32),
      vocab.item_start + jnp.asarray(item, jnp.int32),
      jnp.asarray(END, jnp.int32),
    ]
  )
  return jnp.concatenate([head, jnp.full((params.utterance_len - 3,), PAD, jnp.int32)])


def utterance_token_mask(utterance: jax.Array) -> jax.Array:
  """Positions the environment reads: bool ``[L]``, True up to and including the first END/PAD.

  All L positions are True for an unterminated utterance. Per-utterance; vmap for batches.
  """
  chex.assert_rank(utterance, 1)
  is_end = (utterance == END) | (utterance == PAD)
  # Positions strictly after the first END/PAD are ignored by the parser.
  ends_before = jnp.cumsum(is_end.astype(jnp.int32)) - is_end.astype(jnp.int32)
  return ends_before == 0


def parse_utterance(utterance: jax.Array, params: EnvParams) -> ParsedUtterance:
  """Parses one utterance the way the environment does (jittable, per-utterance).

  Args:
    utterance: integer ``[L]`` token ids.
    params: game configuration.

  Returns:
    A ``ParsedUtterance``.
  """
  length = params.utterance_len
  chex.assert_shape(utterance, (length,))
  chex.assert_type(utterance, int)
  vocab = vocabulary(params)
  tokens = utterance.astype(jnp.int32)
  in_range = (tokens >= 0) & (tokens < vocab.size)
  tokens = jnp.where(in_range, tokens, INVALID)

  is_end = (tokens == END) | (tokens == PAD)
  terminated = jnp.any(is_end)
  content_len = jnp.where(terminated, jnp.argmax(is_end), length)
  positions = jnp.arange(length)
  recorded = jnp.where(
    positions < content_len, tokens, jnp.where(positions == content_len, END, PAD)
  )
  recorded_len = jnp.minimum(content_len + 1, length)

  def in_block(token, start, count):
    return (token >= start) & (token < start + count)

  well_formed = terminated & jnp.all(in_range)
  is_question = (
    well_formed
    & (content_len == _QUESTION_LEN - 1)
    & (tokens[0] == ASK)
    & in_block(tokens[1], vocab.attribute_start, params.num_attributes)
    & in_block(tokens[2], vocab.value_start, params.num_values)
  )
  is_guess = (
    well_formed
    & (content_len == 2)
    & (tokens[0] == GUESS)
    & in_block(tokens[1], vocab.item_start, params.num_items)
  )
  kind = jnp.where(is_question, KIND_QUESTION, jnp.where(is_guess, KIND_GUESS, KIND_INVALID))
  zero = jnp.zeros((), jnp.int32)
  return ParsedUtterance(
    kind=kind.astype(jnp.int32),
    attribute=jnp.where(is_question, tokens[1] - vocab.attribute_start, zero),
    value=jnp.where(is_question, tokens[2] - vocab.value_start, zero),
    item=jnp.where(is_guess, tokens[1] - vocab.item_start, zero),
    recorded=recorded,
    recorded_len=recorded_len.astype(jnp.int32),
  )


def dialogue_length(obs: jax.Array) -> jax.Array:
  """Number of used tokens of an observation ``[..., max_dialogue_len]`` (PAD is only padding)."""
  return jnp.sum(obs != PAD, axis=-1).astype(jnp.int32)


class TokenGame(environment.Environment[EnvState, EnvParams]):
  """The token guessing game with the gymnax functional API (see the module docstring).

  ``TokenGame(params)`` makes ``params`` the default used when ``step``/``reset`` get none;
  ``num_actions`` is the vocabulary size of those default parameters (the number of choices
  per token; the action itself is ``utterance_len`` tokens).
  """

  def __init__(self, params: EnvParams | None = None):
    super().__init__()
    params = EnvParams() if params is None else params
    check_params(params)
    self._default_params = params

  @property
  def default_params(self) -> EnvParams:
    return self._default_params

  def step_env(
    self,
    key: jax.Array,
    state: EnvState,
    action: jax.Array,
    params: EnvParams,
  ) -> tuple[jax.Array, EnvState, jax.Array, jax.Array, dict[str, jax.Array]]:
    """One turn: parse the utterance, answer it, record both, score the turn."""
    del key
    check_params(params)
    action = jnp.asarray(action)
    parsed = parse_utterance(action, params)
    table = jnp.asarray(item_attributes(params))

    is_question = parsed.kind == KIND_QUESTION
    is_guess = parsed.kind == KIND_GUESS
    target_has_value = table[state.target, parsed.attribute] == parsed.value
    correct = is_guess & (parsed.item == state.target)
    positive = jnp.where(is_question, target_has_value, correct)
    answer = jnp.where(is_question | is_guess, jnp.where(positive, YES, NO), INVALID)

    dialogue = _append_turn(state.dialogue, state.length, parsed, answer)
    time = state.time + 1
    ends_game = correct | (is_guess & params.end_on_wrong_guess) | (time >= params.max_turns)
    game_over = state.game_over | ends_game
    reward = jnp.where(correct, params.correct_reward, params.turn_reward)

    new_state = EnvState(
      dialogue=dialogue,
      length=state.length + parsed.recorded_len + 1,
      target=state.target,
      game_over=game_over,
      time=time,
    )
    info = {
      "answer": answer.astype(jnp.int32),
      "valid": is_question | is_guess,
      "guessed": is_guess,
      "correct": correct,
      "turn": jnp.asarray(time, jnp.int32),
    }
    obs = self.get_obs(new_state, params)
    return (
      jax.lax.stop_gradient(obs),
      jax.lax.stop_gradient(new_state),
      jnp.asarray(reward, jnp.float32),
      game_over,
      info,
    )

  def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
    """Draws the hidden target uniformly; the dialogue is just BOS."""
    check_params(params)
    target = jax.random.randint(key, (), 0, params.num_items, dtype=jnp.int32)
    dialogue = jnp.full((max_dialogue_len(params),), PAD, jnp.int32).at[0].set(BOS)
    state = EnvState(
      dialogue=dialogue,
      length=jnp.ones((), jnp.int32),
      target=target,
      game_over=jnp.zeros((), bool),
      time=jnp.zeros((), jnp.int32),
    )
    return self.get_obs(state, params), state

  def get_obs(self, state: EnvState, params=None, key=None) -> jax.Array:
    """The dialogue so far, int32 ``[max_dialogue_len]``."""
    del params, key
    return state.dialogue

  def is_terminated(self, state: EnvState, params: EnvParams) -> jax.Array:
    """The game is over: a guess ended it or the turn limit was reached."""
    return state.game_over

  def is_truncated(self, state: EnvState, params: EnvParams) -> jax.Array:
    """The external time limit cut a game that is not over (never when it just ended)."""
    return (state.time >= params.max_steps_in_episode) & ~state.game_over

  @property
  def name(self) -> str:
    return "TokenGame"

  @property
  def num_actions(self) -> int:
    return vocabulary(self._default_params).size

  def action_space(self, params: EnvParams | None = None) -> "TokenSpace":
    params = self._default_params if params is None else params
    return TokenSpace(vocabulary(params).size, params.utterance_len)

  def observation_space(self, params: EnvParams) -> spaces.Box:
    return spaces.Box(0, vocabulary(params).size - 1, (max_dialogue_len(params),), dtype=jnp.int32)


class TokenSpace(spaces.Space):
  """``length`` token ids, each in ``[0, n)``; ``sample`` is a uniformly random token policy."""

  def __init__(self, n: int, length: int):
    self.n = n
    self.shape = (length,)
    self.dtype = jnp.int32

  def __repr__(self) -> str:
    return f"TokenSpace(n={self.n}, length={self.shape[0]})"

  def sample(self, key: jax.Array) -> jax.Array:
    return jax.random.randint(key, self.shape, 0, self.n, dtype=self.dtype)

  def contains(self, x: jax.Array) -> jax.Array:
    x = jnp.asarray(x)
    return (x.shape == self.shape) & jnp.all((x >= 0) & (x < self.n))


def _append_turn(
  dialogue: jax.Array, length: jax.Array, parsed: ParsedUtterance, answer: jax.Array
) -> jax.Array:
  size = dialogue.shape[0]
  offsets = jnp.arange(parsed.recorded.shape[0])
  # Out-of-range indices are dropped, so a step on a finished game cannot overwrite the dialogue.
  index = jnp.where(offsets < parsed.recorded_len, length + offsets, size)
  dialogue = dialogue.at[index].set(parsed.recorded, mode="drop")
  return dialogue.at[length + parsed.recorded_len].set(answer.astype(jnp.int32), mode="drop")


def consistent_items(obs: jax.Array, params: EnvParams) -> tuple[jax.Array, jax.Array]:
  """Reads a dialogue and returns the items consistent with its answers (jittable).

  Per-observation; vmap for batches. Questions answered YES/NO keep the items with / without
  the asked value; a guess answered NO removes that item, one answered YES keeps only it;
  INVALID turns carry no information.

  Args:
    obs: int32 ``[max_dialogue_len]`` dialogue.
    params: game configuration.

  Returns:
    ``(candidates, turns)``: bool ``[num_items]`` and the int32 number of turns in the dialogue.
  """
  check_params(params)
  length = params.utterance_len
  chex.assert_shape(obs, (max_dialogue_len(params),))
  chex.assert_type(obs, int)
  table = jnp.asarray(item_attributes(params))
  padded = jnp.concatenate([obs.astype(jnp.int32), jnp.full((length + 1,), PAD, jnp.int32)])
  items = jnp.arange(params.num_items)

  def read_turn(carry, _):
    position, candidates, turns = carry
    window = jax.lax.dynamic_slice(padded, (position,), (length + 1,))
    is_end = window[:length] == END
    spoken_len = jnp.where(jnp.any(is_end), jnp.argmax(is_end) + 1, length)
    answer = window[spoken_len]
    exists = answer != PAD
    parsed = parse_utterance(window[:length], params)
    yes = answer == YES
    has_value = table[:, parsed.attribute] == parsed.value
    is_item = items == parsed.item
    keep = jnp.where(
      parsed.kind == KIND_QUESTION,
      has_value == yes,
      jnp.where(parsed.kind == KIND_GUESS, is_item == yes, True),
    )
    candidates = jnp.where(exists, candidates & keep, candidates)
    position = jnp.where(exists, position + spoken_len + 1, position)
    return (position, candidates, turns + exists.astype(jnp.int32)), None

  init = (jnp.ones((), jnp.int32), jnp.ones((params.num_items,), bool), jnp.zeros((), jnp.int32))
  (_, candidates, turns), _ = jax.lax.scan(read_turn, init, None, length=params.max_turns)
  return candidates, turns


def scripted_questioner(
  key: jax.Array,
  obs: jax.Array,
  params: EnvParams,
  random_question_prob: chex.Numeric = 0.1,
) -> jax.Array:
  """A deliberately imperfect scripted player: the next utterance for a dialogue (jittable).

  Per-observation; vmap for batches. It tracks the items consistent with the dialogue
  (``consistent_items``). It guesses uniformly among them when one is left or on the last turn;
  otherwise it asks the question whose YES set is closest to half of them (ties broken at
  random), except that with probability ``random_question_prob`` it asks a uniformly random
  question (possibly redundant). ``random_question_prob`` is the quality knob: 0 is the greedy
  halving player, 1 asks only random questions (but still guesses consistently).

  Args:
    key: PRNG key.
    obs: int32 ``[max_dialogue_len]`` dialogue.
    params: game configuration.
    random_question_prob: probability in [0, 1] of a random question (may be a traced scalar;
    a Python number is validated).

  Returns:
    int32 ``[utterance_len]`` utterance, PAD after END.
  """
  if isinstance(random_question_prob, (int, float)) and not (0.0 <= random_question_prob <= 1.0):
    raise ValueError(
      f"random_question_prob: expected a float in [0, 1], got {random_question_prob!r}"
    )
  candidates, turns = consistent_items(obs, params)
  # An inconsistent dialogue (not produced by this game) falls back to all items.
  candidates = jnp.where(jnp.any(candidates), candidates, True)
  num_candidates = jnp.sum(candidates.astype(jnp.int32))
  turns_left = params.max_turns - turns

  num_questions = params.num_attributes * params.num_values
  # One draw serves every random choice (a single PRNG call keeps the compiled program small).
  noise = jax.random.uniform(key, (params.num_items + num_questions + 2,))
  guess_noise, tie_noise = noise[: params.num_items], noise[params.num_items : -2]
  coin, random_pick = noise[-2], noise[-1]
  # argmax of i.i.d. uniforms over the candidates is a uniform draw among them.
  guess = jnp.argmax(jnp.where(candidates, guess_noise, -1.0))

  table = jnp.asarray(item_attributes(params))
  one_hot = jax.nn.one_hot(table, params.num_values, dtype=jnp.int32)  # [N, A, K]
  yes_counts = jnp.sum(one_hot * candidates.astype(jnp.int32)[:, None, None], axis=0)
  balance = jnp.minimum(yes_counts, num_candidates - yes_counts).reshape(-1)
  # Noise below 1 only breaks ties among equally balanced questions, uniformly.
  best_question = jnp.argmax(balance + 0.5 * tie_noise)
  random_question = jnp.minimum(
    jnp.floor(random_pick * num_questions).astype(jnp.int32), num_questions - 1
  )
  question = jnp.where(coin < random_question_prob, random_question, best_question)
  attribute, value = jnp.divmod(question, params.num_values)

  do_guess = (num_candidates <= 1) | (turns_left <= 1)
  return jnp.where(do_guess, encode_guess(guess, params), encode_question(attribute, value, params))


def token_names(params: EnvParams) -> list[str]:
  """Human-readable name of every token id (``attr3``, ``val1``, ``item07`` ...)."""
  item_width = len(str(params.num_items - 1))
  return (
    list(_SPECIAL_NAMES)
    + [f"attr{a}" for a in range(params.num_attributes)]
    + [f"val{v}" for v in range(params.num_values)]
    + [f"item{i:0{item_width}d}" for i in range(params.num_items)]
  )


def decode_dialogue(obs, params: EnvParams) -> str:
  """A dialogue ``[max_dialogue_len]`` as text, one turn per line (host-side, NumPy).

  Example line: ``turn 1: ask attr2 val0 <end> -> no``.
  """
  check_params(params)
  tokens = np.asarray(obs)
  if tokens.ndim != 1:
    raise ValueError(f"obs: expected a rank-1 dialogue, got shape {tokens.shape}")
  names = token_names(params)

  def name(token: int) -> str:
    return names[token] if 0 <= token < len(names) else f"<{token}?>"

  tokens = tokens[tokens != PAD].tolist()
  lines = [" ".join(name(t) for t in tokens[:1])]
  position, turn = 1, 0
  while position < len(tokens):
    window = tokens[position : position + params.utterance_len]
    spoken_len = window.index(END) + 1 if END in window else len(window)
    utterance = tokens[position : position + spoken_len]
    answer = tokens[position + spoken_len : position + spoken_len + 1]
    turn += 1
    reply = f" -> {name(answer[0])}" if answer else ""
    lines.append(f"turn {turn}: " + " ".join(name(t) for t in utterance) + reply)
    position += spoken_len + 1
  return "\n".join(lines)
