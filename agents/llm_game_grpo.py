"""GRPO over groups of games per hidden item, with a LoRA-adapted SmolLM2-135M policy, on the token
game rendered as text: the critic-free baseline of `llm_archer` and `llm_token_ppo`.

Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
Models", arXiv:2402.03300: outcome supervision (section 4.1.2: every token of a response gets
`(R_i - mean_g R) / std_g R`) and the clipped surrogate (Eq. 3). Here a "response" is a whole
game: every line the model wrote in it, each line's tokens scored against the prompt it was
written for. The games of a group share the hidden item (`rollout.grouped_reset`: one reset key
per group), so the group's mean return is the baseline of that item. The advantages are
`hrljax.losses.group_relative.outcome_advantages` (`grpo`, `dr_grpo`, `rloo`), the surrogate and
the aggregation `hrljax.losses.policy_gradient`. The same game, prompts, parsing and model as
`llm_archer` and `llm_token_ppo` (`agents/text_game_common.py`); `agents/token_grpo.py` is the
same algorithm for the small from-scratch transformer of the token game.

One update (one Learner step): `num_groups` hidden items x `group_size` games, played to their
end (at most `max_turns` lines each: one jitted `generate` call per turn for every game, turns
stop once every game has ended); the return of each game (the game's reward plus
`valid_move_bonus` per understood line); group-relative advantages; the behaviour log-probs of
every line (one pass); then `update_epochs` passes of `num_minibatches` minibatches of lines
(rows), the clipped surrogate aggregated over the tokens of the lines written before each game
ended (`loss_aggregation`, default token mean). No value network, no KL penalty (as Dr. GRPO
and DAPO; the LoRA-free model would be its reference).

Interactions: `env_steps_per_update` counts the whole window (`num_envs * max_turns`, an upper
bound); the metric `lines` counts the lines of the games played.

Deviations: minibatches split lines, not whole games, so with "seq_*" aggregations a "sequence"
is one line (the default token mean does not depend on the split).
"""

import functools
import time
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import rollout, training
from hrljax.agents import common, llm_common, text_game_common
from hrljax.agents import token_common as tc
from hrljax.losses import group_relative as gr
from hrljax.losses import policy_gradient as pg
from hrljax.networks import llama
from hrljax.types import Array, PyTree


def get_config() -> ml_collections.ConfigDict:
  """GRPO hyperparameters (DeepSeekMath / verl defaults where they transfer), small sizes."""
  config = training.run_config(log_every=1, eval_every=20, checkpoint_every=5)
  config.agent = "llm_game_grpo"
  text_game_common.add_config_fields(config)  # the game, prompts, parsing, sampling
  config.num_groups = 2  # hidden items per update
  config.group_size = 4  # games per item
  config.num_envs = config.get_ref("num_groups") * config.get_ref("group_size")
  config.num_updates = 40
  config.estimator = "grpo"  # or "dr_grpo", "rloo"
  config.grpo_scale = "group"  # std of the z-score (common.GRPO_SCALES)
  config.singleton_mode = "zero"
  config.advantage_eps = 1e-6
  config.clip_epsilon = 0.2
  config.clip_epsilon_high = 0.2
  config.update_epochs = 1
  config.num_minibatches = 1
  # Each minibatch's gradient summed over this many slices of its lines, one slice's backward
  # at a time: the same update with a smaller memory peak.
  config.micro_batches = 1
  config.loss_aggregation = "token_mean"
  config.actor_learning_rate = 1e-4  # LoRA rate
  config.optimizer = "adam"
  config.max_grad_norm = 1.0
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  text_game_common.validate_config_fields(config, num_devices)
  checks.positive_int(
    config, "num_groups", "group_size", "num_updates", "update_epochs", "num_minibatches"
  )
  if config.num_envs != config.num_groups * config.group_size:
    raise checks.ConfigError(
      f"config.num_envs: expected num_groups * group_size "
      f"({config.num_groups * config.group_size}), got {config.num_envs}"
    )
  lines = config.num_envs * config.env_kwargs.max_turns
  if lines % config.num_minibatches:
    raise checks.ConfigError(
      f"config.num_minibatches: expected a divisor of num_envs * max_turns ({lines}), got "
      f"{config.num_minibatches}"
    )
  llm_common.validate_micro_batches(config, lines)
  checks.one_of(config, "estimator", gr.OUTCOME_ESTIMATORS)
  checks.one_of(config, "grpo_scale", common.GRPO_SCALES)
  checks.one_of(config, "singleton_mode", common.SINGLETON_MODES)
  checks.positive(config, "actor_learning_rate", "max_grad_norm")
  checks.non_negative(config, "clip_epsilon", "clip_epsilon_high", "advantage_eps")
  checks.one_of(config, "loss_aggregation", pg.AGGREGATION_MODES)
  checks.one_of(config, "optimizer", tc.OPTIMIZERS)


# ------------------------------------------------------------------------------------------------
# State, batch and the jitted calls.
# ------------------------------------------------------------------------------------------------


class TrainState(struct.PyTreeNode):
  """Everything a run carries between updates (checkpointed whole)."""

  lora: PyTree
  opt_state: PyTree
  key: Array
  update: Array  # int32 updates done


class LineBatch(NamedTuple):
  """The lines of one update, a row per (turn, game), time-major (row t * num_envs + n)."""

  prompt_tokens: Array  # int32 [B, P]
  prompt_mask: Array  # bool [B, P]
  response: Array  # int32 [B, T]
  response_mask: Array  # bool [B, T]: the line's tokens, if it was written before its game ended
  log_prob: Array  # float32 [B, T] behaviour log-probs (0 off the mask)
  advantage: Array  # float32 [B, T] the game's advantage on every token of its lines


class Games(NamedTuple):
  """The games of one update: every turn's lines (time-major rows), whether each line was
  written before its game ended, each game's return and its group."""

  lines: text_game_common.Lines  # rows [max_turns * N]
  played: np.ndarray  # bool [max_turns * N]
  returns: np.ndarray  # float32 [N]
  group_ids: Array  # int32 [N]


Settings = llm_common.config_settings(
  "Settings",
  "num_groups num_envs estimator grpo_scale singleton_mode advantage_eps clip_epsilon "
  "clip_epsilon_high update_epochs num_minibatches micro_batches loss_aggregation "
  "actor_learning_rate optimizer max_grad_norm temperature",
)


@functools.lru_cache(maxsize=8)
def make_prepare(model_config: llama.LlamaConfig, config: Settings, prefix_len: int = 0):
  """`prepare(base, lora, lines, played, returns, group_ids) -> (LineBatch, advantages [N])`,
  jitted (cached): the game advantages on their lines' tokens, the behaviour log-probs."""

  @jax.jit
  def prepare(base, lora, lines, played, returns, group_ids):
    advantage = common.outcome_advantages(returns, group_ids, config)
    mask = lines.response_mask & played[:, None]
    rows = played.shape[0]
    row_advantage = jnp.broadcast_to(advantage, (rows // config.num_envs, config.num_envs))
    lines = lines._replace(response_mask=mask)
    log_prob = llm_common.batch_logprobs(
      model_config, base, lora, lines, temperature=config.temperature, prefix_len=prefix_len
    )
    batch = LineBatch(
      prompt_tokens=lines.prompt_tokens,
      prompt_mask=lines.prompt_mask,
      response=lines.response,
      response_mask=mask,
      log_prob=jnp.where(mask, log_prob, 0.0),
      advantage=gr.broadcast_to_tokens(row_advantage.reshape(rows), mask),
    )
    return batch, advantage

  return prepare


def grpo_objective(
  lora: PyTree,
  base: PyTree,
  model_config: llama.LlamaConfig,
  config: Settings,
  batch: LineBatch,
  prefix_len: int = 0,
  normalizer: Optional[Array] = None,
  tokens: Optional[Array] = None,
) -> tuple[Array, dict]:
  """The clipped surrogate of the adapters, aggregated over the lines' tokens. `prefix_len`: the
  prompts' common beginning (`TextGame.prefix_len`; 0: none). For a slice of a minibatch,
  `normalizer` is the minibatch's aggregation denominator and `tokens` its token count: the
  slices' losses and metrics then add up to the minibatch's."""
  logp = llm_common.batch_logprobs(
    model_config, base, lora, batch, temperature=config.temperature, prefix_len=prefix_len
  )
  mask = batch.response_mask
  surrogate, extras = pg.clipped_surrogate_loss(
    logp,
    batch.log_prob,
    batch.advantage,
    epsilon=config.clip_epsilon,
    epsilon_high=config.clip_epsilon_high,
    mask=mask,
  )
  loss = pg.aggregate(surrogate, mask, config.loss_aggregation, normalizer=normalizer)[0]
  share = llm_common.token_share(mask, tokens)
  return loss, {
    "approx_kl": share * pg.masked_mean(extras.approx_kl, mask),
    "clip_fraction": share * pg.masked_mean(extras.clipped, mask),
  }


@functools.lru_cache(maxsize=8)
def make_update(model_config: llama.LlamaConfig, config: Settings, prefix_len: int = 0):
  """`update(state, base, batch) -> (state, metrics)`: `update_epochs` passes of
  `num_minibatches` minibatches, each gradient summed over `micro_batches` slices, jitted
  (cached)."""
  tx = tc.make_optimizer(config.optimizer, config.actor_learning_rate, config.max_grad_norm)

  @jax.jit
  def update(state: TrainState, base: PyTree, batch: LineBatch) -> tuple[TrainState, dict]:
    def minibatch_step(state, minibatch):
      (loss, metrics), grads = llm_common.line_gradients(
        lambda lora, lines, normalizer, tokens: grpo_objective(
          lora, base, model_config, config, lines, prefix_len, normalizer, tokens
        ),
        state.lora,
        minibatch,
        config.loss_aggregation,
        config.micro_batches,
      )
      updates, opt_state = tx.update(grads, state.opt_state, state.lora)
      state = state.replace(lora=optax.apply_updates(state.lora, updates), opt_state=opt_state)
      return state, dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads))

    return common.minibatch_epochs(
      state, batch, minibatch_step, config.num_minibatches, config.update_epochs
    )

  return update


# ------------------------------------------------------------------------------------------------
# The agent.
# ------------------------------------------------------------------------------------------------


class LLMGameGRPO:
  """GRPO on the text game: the frozen model, the game and the jitted calls."""

  def __init__(
    self, config: ml_collections.ConfigDict, lm: Optional[llm_common.LanguageModel] = None
  ):
    validate_config(config)
    self.config = ml_collections.FrozenConfigDict(config)
    self.lm = llm_common.language_model(config, lm)
    self.game = text_game_common.TextGame(self.config, self.lm)
    settings = Settings.of(self.config)
    self.tx = tc.make_optimizer(config.optimizer, config.actor_learning_rate, config.max_grad_norm)
    self._prepare = make_prepare(self.lm.config, settings, self.game.prefix_len)
    self._update = make_update(self.lm.config, settings, self.game.prefix_len)

  def init(self, seed: int) -> TrainState:
    lora_key, key = jax.random.split(jax.random.key(seed))
    lora = llama.init_lora(self.lm.config, lora_key)
    return TrainState(
      lora=lora, opt_state=self.tx.init(lora), key=key, update=jnp.zeros((), jnp.int32)
    )

  def play(self, lora: PyTree, key: Array) -> tuple[Games, dict, str]:
    """`num_groups` x `group_size` fresh games played to their end: the games, the logged
    statistics and one line's text. Turns stop once every game has ended; the rows of the
    turns not played repeat the last turn's lines, marked not played, so that every update has
    one shape."""
    c, game = self.config, self.game
    reset_key, key = jax.random.split(key)
    carry, group_ids = rollout.grouped_reset(
      game.env, game.env_params, reset_key, c.num_groups, c.group_size
    )
    active = np.ones(c.num_envs, bool)
    returns = np.zeros(c.num_envs, np.float32)
    wins = np.zeros(c.num_envs, np.float32)
    turns, valid_lines = [], []
    for turn in range(game.env_params.max_turns):
      if not active.any():
        turns.append((turns[-1][0], np.zeros(c.num_envs, bool)))
        continue
      speak_key, env_key = jax.random.split(jax.random.fold_in(key, turn))
      lines, texts = game.speak(lora, carry.obs, speak_key)
      carry, traj = game.step_env(carry, lines.utterance, env_key)
      reward, valid = game.shaped_reward(traj.reward, lines.utterance)
      returns += np.where(active, np.asarray(reward), 0.0)
      wins += np.where(active, np.asarray(traj.reward), 0.0)
      valid_lines.extend(valid[active])
      turns.append((lines, active.copy()))
      active &= ~np.asarray(traj.terminated | traj.truncated)
    rows = jax.tree.map(lambda *x: jnp.concatenate(x), *[lines for lines, _ in turns])
    played = np.concatenate([p for _, p in turns])
    metrics = {
      "episodes": float(c.num_envs),
      "episode_return_sum": float(wins.sum()),
      "shaped_return": float(returns.mean()),
      "lines": float(played.sum()),
      "valid_move_fraction": float(np.mean(valid_lines)),
      "response_length": float(np.asarray(rows.response_mask).sum(1)[played].mean()),
    }
    return Games(rows, played, returns, group_ids), metrics, texts[0]

  def step(self, state: TrainState) -> tuple[TrainState, dict]:
    """One update: play the groups' games, their advantages and behaviour log-probs, the
    clipped-surrogate epochs."""
    key, play_key = jax.random.split(state.key)
    start = time.perf_counter()
    games, metrics, line = self.play(state.lora, play_key)
    metrics["collect_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    batch, advantage = self._prepare(
      self.lm.params,
      state.lora,
      games.lines,
      jnp.asarray(games.played),
      jnp.asarray(games.returns),
      games.group_ids,
    )
    state, update_metrics = self._update(state, self.lm.params, batch)
    metrics.update(llm_common.scalar_metrics(update_metrics))
    metrics["advantage_abs"] = float(jnp.abs(advantage).mean())
    metrics["update_seconds"] = time.perf_counter() - start
    metrics["example_line"] = line
    return state.replace(key=key, update=state.update + 1), metrics

  def evaluate(self, lora: PyTree, episodes: int, seed: int = 0) -> dict:
    """Greedy play of `episodes` fresh games to their end: the win rate and valid-move rate."""
    return self.game.evaluate(lora, episodes, seed)


def make_learner(
  config: ml_collections.ConfigDict, lm: Optional[llm_common.LanguageModel] = None
) -> training.HostLearner:
  """A host-driven learner whose `step` is one GRPO update (lines are parsed on the host). `lm`
  may pass an already loaded model (tests pass a tiny one)."""
  return text_game_common.host_learner(
    LLMGameGRPO(config, lm),
    config,
    config.num_envs * config.env_kwargs.max_turns,
    lambda record, texts: _progress_line(record, texts, config.num_updates),
  )


def _progress_line(record: dict, texts: dict, num_updates: int) -> str:
  return (
    f"update {record['update']}/{num_updates} | win rate {record['episode_return']:.2f}"
    f" | lines {record['lines']:.0f} | valid {record['valid_move_fraction']:.2f}"
    f" | loss {record['loss']:.4f} | {texts['example_line'][:50]!r}"
  )
