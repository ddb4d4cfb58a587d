"""The token game played by a language model: the shared agent helper of `llm_archer` and
`llm_token_ppo`.

One environment step is one line the model writes: the game's dialogue is rendered as a text
prompt (`text_tasks.game_prompt`: rules, optionally the item table, the dialogue so far), the
model samples a reply (`llm_common.sample_for`, one jitted `generate` call for every game), the
reply is parsed host-side into the game's utterance tokens (`text_tasks.parse_move`) and the
games step (`rollout.step`, auto-reset). Prompts are left-padded to the longest prompt the game
can produce, so every call has one shape. `TextGame.evaluate` plays fresh games greedily to
their end.

Every prompt begins with the same tokens (chat header, system prompt, rules, item table) and
differs in the dialogue after them; with `shared_prompt_prefix`, `TextGame.prefix` holds that
common beginning (checked on every batch of prompts): sampling prefills it once per call
(`llama.generate`'s `prefix_len`) and the agents' teacher-forced log-probs run it once per
batch (`networks.shared_prefix.common_prefix_logprobs`).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from hrljax import config_checks as checks
from hrljax import envs, llm_prompts, rollout, training
from hrljax.agents import llm_common
from hrljax.agents import token_common as tc
from hrljax.envs import text_tasks, token_game
from hrljax.types import Array, PyTree

ENV_NAME = "TokenGame-v0"


def add_config_fields(config: ml_collections.ConfigDict) -> None:
  """The game, prompt, parsing and sampling fields of an agent playing the text game."""
  config.env_name = ENV_NAME
  config.env_kwargs = ml_collections.ConfigDict(
    dict(num_items=4, num_attributes=2, num_values=2, max_turns=3)
  )
  config.include_table = True  # the prompt lists every item's properties
  # A small model rarely writes the 'ask <property> <value>' / 'guess <item>' commands; lenient
  # parsing also reads the first item or value it names ("pick a color: blue").
  config.lenient_parsing = False
  # Shaping added to the game's reward for each understood line (0: the game's reward only);
  # logged returns and the evaluation's win rate stay the game's.
  config.valid_move_bonus = 0.0
  llm_common.add_config_fields(config)
  config.max_new_tokens = 12  # one short line
  config.temperature = 1.0
  config.system_prompt = ""
  config.num_envs = 8  # parallel games; one line each per environment step
  config.eval_episodes = 16  # greedy games at the start, every eval_every and at the end
  # The prompts' common beginning (rules, item table) runs once per batch in the log-prob passes
  # of the updates (equal up to float32 rounding; False: every row runs its whole prompt)
  config.shared_prompt_prefix = True


def validate_config_fields(config: ml_collections.ConfigDict, num_devices: int) -> None:
  """Checks of the fields `add_config_fields` adds (`ConfigError` naming the first bad one)."""
  checks.positive_int(config, "max_new_tokens", "num_envs")
  tc.non_negative_int(config, "eval_episodes")
  checks.non_negative(config, "valid_move_bonus")
  checks.one_of(config, "shared_prompt_prefix", (True, False))
  llm_common.validate_config_fields(config, num_devices)
  if config.env_name != ENV_NAME:
    raise checks.ConfigError(f"config.env_name: expected {ENV_NAME!r}, got {config.env_name!r}")
  try:
    _, params = envs.make(config.env_name, **config.env_kwargs)
    text_tasks.check_text_params(params)
  except ValueError as error:
    raise checks.ConfigError(f"config.env_kwargs: {error}") from None


class Lines(NamedTuple):
  """Game states, the model's lines for them and the parsed utterances (one row per game)."""

  dialogue: Array  # int32 [N, D] game observation
  utterance: Array  # int32 [N, L] the parsed utterance
  prompt_tokens: Array  # int32 [N, P]
  prompt_mask: Array  # bool [N, P]
  response: Array  # int32 [N, T]
  response_mask: Array  # bool [N, T]


@functools.lru_cache(maxsize=8)
def make_env_step(env_params: token_game.EnvParams):
  """`step(carry, utterances [N, L], key) -> (carry, Transition)`, jitted, auto-resetting."""
  env = token_game.TokenGame(env_params)
  return jax.jit(lambda carry, action, key: rollout.step(env, env_params, carry, action, key))


class TextGame:
  """The game of `config`, its prompts and a model `lm` that plays it."""

  def __init__(self, config: ml_collections.ConfigDict, lm: llm_common.LanguageModel):
    self.config = config
    self.lm = lm
    self.env, self.env_params = envs.make(config.env_name, **config.env_kwargs)
    self.step_env = make_env_step(self.env_params)
    self.prompt_width = llm_prompts.longest_game_prompt(
      lm.tokenizer,
      self.env_params,
      config.include_table,
      config.system_prompt,
      llm_common.PROMPT_BUCKET,
    )
    # The prompts of successor states, the state after a game's last turn included.
    self.successor_width = llm_prompts.longest_game_prompt(
      lm.tokenizer,
      self.env_params,
      config.include_table,
      config.system_prompt,
      llm_common.PROMPT_BUCKET,
      turns=self.env_params.max_turns + 1,
    )
    prefix = self._common_prompt_prefix() if config.shared_prompt_prefix else ()
    self.prefix = prefix if len(prefix) else None  # None: no common beginning to share
    self.prefix_len = len(prefix)

  def _common_prompt_prefix(self) -> np.ndarray:
    """The tokens every prompt of the game begins with: the common beginning of a fresh game's
    prompt and of the prompt after one turn, less two tokens, so that a token that could merge
    with what follows it is left out."""
    carry = self.reset(jax.random.key(0), 1)
    utterance = jnp.full((1, self.env_params.utterance_len), token_game.INVALID, jnp.int32)
    _, traj = self.step_env(carry, utterance, jax.random.key(1))
    dialogues = np.concatenate([np.asarray(carry.obs), np.asarray(traj.next_obs)])
    tokens, mask = llm_common.encode_prompts(
      self.lm, self.prompt_texts(dialogues), self.config.system_prompt
    )
    first, second = tokens[0][mask[0]], tokens[1][mask[1]]
    width = min(len(first), len(second))
    same = np.cumprod(first[:width] == second[:width])
    return first[: max(int(same.sum()) - 2, 0)]

  def reset(self, key: Array, num_envs: int):
    """`num_envs` fresh games (an `EnvCarry`)."""
    return rollout.reset(self.env, self.env_params, key, num_envs)

  def prompt_texts(self, dialogues: np.ndarray) -> list:
    """The user message of each game observation `[N, D]`."""
    return [
      text_tasks.game_prompt(d, self.env_params, self.config.include_table)
      for d in np.asarray(dialogues)
    ]

  def encode_successors(self, dialogues: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prompts of successor observations `[N, D]` (a finished game's last state included)
    as the model reads them: int32 `[N, P']`, bool `[N, P']`, left-padded to
    `successor_width`."""
    return llm_common.encode_prompts(
      self.lm,
      self.prompt_texts(dialogues),
      self.config.system_prompt,
      min_width=self.successor_width,
    )

  def speak(
    self, lora: PyTree, dialogues: np.ndarray, key: Array, greedy: bool = False
  ) -> tuple[Lines, list]:
    """One line per game observation `[N, D]`: the model's tokens, its text and the parse."""
    responses = llm_common.sample_for(
      self.lm,
      self.config,
      lora,
      self.prompt_texts(dialogues),
      key,
      greedy=greedy,
      system=self.config.system_prompt,
      min_width=self.prompt_width,
      prefix=self.prefix,
    )
    lenient = self.config.lenient_parsing
    texts = responses.texts
    utterances = np.stack([text_tasks.parse_move(x, self.env_params, lenient) for x in texts])
    fields = llm_common.response_fields(responses)
    return jax.tree.map(jnp.asarray, Lines(dialogues, utterances, **fields)), texts

  def shaped_reward(self, reward: Array, utterance: Array) -> tuple[Array, np.ndarray]:
    """The game's reward plus `valid_move_bonus` for each understood line, and which were."""
    valid = np.asarray(utterance[:, 0] != token_game.INVALID)
    bonus = self.config.valid_move_bonus * jnp.asarray(valid, reward.dtype)
    return reward + bonus, valid

  def evaluate(self, lora: PyTree, episodes: int, seed: int = 0) -> dict:
    """Greedy play of `episodes` fresh games to their end: the win rate and valid-move rate."""
    carry = self.reset(jax.random.key(seed + 7), episodes)
    finished = np.zeros(episodes, bool)
    wins = np.zeros(episodes)
    valid_moves = []
    for turn in range(self.env_params.max_turns):
      lines, _ = self.speak(lora, carry.obs, jax.random.key(turn), greedy=True)
      carry, traj = self.step_env(carry, lines.utterance, jax.random.key(100 + turn))
      active = ~finished
      wins += np.where(active, np.asarray(traj.reward), 0.0)
      valid_moves.extend(np.asarray(lines.utterance[:, 0] != token_game.INVALID)[active])
      finished |= np.asarray(traj.terminated | traj.truncated)
    return {
      "eval_win_rate": float(wins.mean()),
      "eval_valid_move_fraction": float(np.mean(valid_moves)),
    }


def episode_statistics(traj, valid: np.ndarray, response_mask: Array) -> dict:
  """The logged statistics of one environment step of every game."""
  done = np.asarray(traj.terminated | traj.truncated)
  returns = np.asarray(traj.episode_return)
  return {
    "episodes": float(done.sum()),
    "episode_return_sum": float((returns * done).sum()),
    "valid_move_fraction": float(valid.mean()),
    "response_length": float(np.asarray(response_mask).sum(1).mean()),
  }


def with_episode_return(metrics: dict) -> dict:
  """`metrics` with the mean return of the games that ended (NaN when none did)."""
  episodes = metrics["episodes"]
  metrics["episode_return"] = (
    metrics["episode_return_sum"] / episodes if episodes > 0 else float("nan")
  )
  return metrics


def host_learner(agent, config, env_steps_per_update: int, progress) -> training.HostLearner:
  """The driver's learner of a text-game agent (`init(seed)`, `step(state)`, `evaluate(lora,
  episodes)`): one seed per run, the mean return of the games that ended added to each step's
  metrics, greedy evaluation of `eval_episodes` games (none at 0)."""

  def step(state):
    state, metrics = agent.step(state)
    return state, with_episode_return(metrics)

  return training.HostLearner(
    init=agent.init,
    step=step,
    evaluate=(
      (lambda state: agent.evaluate(state.lora, config.eval_episodes))
      if config.eval_episodes
      else None
    ),
    num_updates=config.num_updates,
    env_steps_per_update=env_steps_per_update,
    progress=progress,
  )
