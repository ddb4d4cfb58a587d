"""GRPO (and Dr. GRPO, DAPO's filter and clip-higher, HICRA) on SmolLM2-135M with LoRA adapters.

Shao et al. "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
arXiv 2402.03300, section 4.1 (GRPO, Eq. 3: clipped surrogate with group-normalised outcome
advantages and a k3 KL penalty to a reference policy, Eq. 4). Variants, all config switches:
  * Dr. GRPO (Liu et al., arXiv 2503.20783): `estimator="dr_grpo"` (no std division) and
    `loss_aggregation="seq_mean_constant_norm"` (constant normaliser = `max_new_tokens`);
  * DAPO (Yu et al., arXiv 2503.14476): `clip_epsilon_high=0.28` (clip-higher, Eq. 10),
    `loss_aggregation="token_mean"` (Eq. 12), `dynamic_sampling=True` (Eq. 11's filter);
  * HICRA (Wang et al., arXiv 2509.03646): `hicra_alpha > 0` amplifies the advantages of the tokens
    of `hicra_phrases` ("planning" phrases) via `group_relative.hicra_advantages`;
  * the unlikeliness reward (He et al., arXiv 2506.02355): `estimator="unlikeliness"`, GRPO
    advantages of the rewards scaled by 1 − β·rank/G, the rank of each response's mean
    behaviour token log-prob in its group, least likely first (`unlikeliness_beta` = β);
  * LLDS (Deng et al., arXiv 2512.04220): `llds_coef > 0` adds `group_relative.llds_loss`, a
    penalty on the likelihood drops of the tokens with A >= 0 relative to the behaviour policy
    (`llds_gate`: the authors' "action" gate or the "response" gate). With one epoch on the batch
    the policy is the behaviour policy at the step, so the penalty and its gradient are 0: it
    acts from the second of `update_epochs` on;
  * PACS (Yi et al., arXiv 2509.02522): `objective="pacs"` replaces the clipped surrogate by
    `group_relative.pacs_loss`, the binary cross-entropy of the group-centred implicit reward
    β·Σ_t (log π_θ − log π_old) (`pacs_beta`, `pacs_centring`) against the reward read as a label
    in [0, 1] (the task's weights must keep the reward there, e.g. `task.format_weight=0` for
    the paper's correctness label); no KL term;
  * GTPO (Simoni et al., arXiv 2508.03772): `objective="gtpo"` replaces it by
    `group_relative.gtpo_loss` with the loss's defaults (`gtpo_entropy_threshold`: the paper's
    ln 2; the authors' code 0.7):
    conflict tokens shared by positive and negative completions of a group amplified or skipped,
    completions whose mean token entropy is above the threshold filtered out, the advantage
    lowered by 0.1 x that entropy; the advantages are `estimator`'s (the authors' trainer:
    `dr_grpo`); no KL term, no HICRA;
  * ROVER (He et al., arXiv 2509.24981): `objective="rover"` replaces it by
    `group_relative.rover_loss` with the loss's defaults: Q_t = log π_θ − log π_old of each token
    regressed on the mean-centred reward plus the uniform policy's value of the next state
    (the vocabulary mean of the same log-ratio), both policies' vocabulary means from their
    forward passes; no KL term;
  * CGPO (Xu et al., arXiv 2409.20370): `objective="cgpo"` replaces it by
    `group_relative.crpg_loss` (CRPG) with a format judge: a reply passes when it ends in the
    `Answer: N` line, its reward r is the task's reward (with `task.format_weight=0`, the
    correctness the reward model would score), calibrated as sigmoid(r − r_ref) against the
    task's reward of the problem's reference reply (`text_tasks.reference_reply`), 0 for a
    reply the judge rejects; `cgpo_baseline` is the loss's baseline. No KL factor (the loss's
    optional `kl` needs the reference pass that `kl_coef=0` saves), no Scaf-GRPO (hinted rows
    carry no verdict).
Rollout and sampling schemes, both off by default (the default run is unchanged bit for bit):
  * Scaf-GRPO (Zhang, Wu, et al., arXiv 2510.19807): `hints="scaffold"`. From update
    `hint_warmup_updates` on (6 of the default 40 updates; the released script uses 50 steps),
    the all-fail groups are regenerated with hints (`hrljax.data.hint_scaffold`, which states
    what follows the authors' code and what is not verified);
  * MMR1's variance-aware sampling (Leng et al., arXiv 2509.21268):
    `prompt_sampling="variance_aware"` draws the G problems from a fixed pool
    (`hrljax.data.prompt_pool`) whose running pass rates, in `TrainState.prompt_stats`, are
    checkpointed, so a resumed run repeats the uninterrupted one.
The losses are `hrljax.losses.group_relative` (advantages, filter, HICRA) and
`hrljax.losses.policy_gradient` (clipped surrogate, k3 KL, aggregation); the model
`hrljax.networks.llama` with the base weights frozen and only the LoRA pytree trained (optax on
`lora` alone); the KL reference is the same model with `use_lora=False` (no second weight copy).
The task is `hrljax.envs.text_tasks` (arithmetic word problems); loading, prompting, sampling and
scoring the model are `agents/llm_common.py`.

One update: G = `num_prompts` problems, K = `samples_per_prompt` samples each (one jitted
`llama.generate` call on the G*K left-padded prompts), rewards host-side (decode + parse), then one
jitted step: advantages, `update_epochs` gradient steps on the whole batch. With `shared_prefix`
each problem's prompt is prefilled once for its K samples (`llama.generate`'s `group_size`) and
the update's log-prob passes run it once for them (Prefix Grouper, Liu et al., arXiv
2506.05433: `networks.shared_prefix`; both equal up to float32 rounding). Rewards are
scored on the host between jitted calls, so `make_learner` returns a `training.HostLearner` (one
seed per run; logging, evaluation, checkpoints and resume as for a compiled learner). The checkpoint holds
the adapters, their optimizer state, the update count and the seed: the problems and keys of
update u are functions of (seed, u), so a resumed run repeats the uninterrupted one; the frozen
base weights are reloaded from the GGUF file.

Deviations from the paper, each deliberate:
  * LoRA (rank `lora_rank`) instead of full fine-tuning; the learning rate is therefore a LoRA
    rate (1e-4 here; the paper's 1e-6 is a full fine-tuning rate);
  * group sizes and lengths for a CPU (defaults G=4 x K=4, 48 new tokens; paper: 64 samples per
    question, 1024 tokens); the DAPO filter masks uninformative groups out of the loss instead of
    sampling more (dynamic sampling proper would need a variable number of generate calls);
  * with `update_epochs=1` (the paper's single update per exploration stage) the old policy is the
    current one, so the "old" log-probs are the stop-gradient of the current ones (the ratio is
    exactly 1 and the loss gradient is the policy gradient); with more epochs they are recomputed
    once, teacher-forced, before the first epoch (`llama.generate`'s sampling log-probs come from
    the cached decoder and are only logged);
  * token log-probs divide the logits by the sampling temperature (as TRL does), so the ratio
    compares the distributions that were sampled from (`llm_common.response_logprobs`).
"""

import functools
import math
import time
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import llm_prompts, training
from hrljax.agents import llm_common
from hrljax.agents import token_common as tc
from hrljax.data import hint_scaffold, prompt_pool, prompt_sampler
from hrljax.envs import arithmetic_task, text_tasks
from hrljax.losses import group_relative as gr
from hrljax.losses import policy_gradient as pg
from hrljax.networks import llama
from hrljax.types import Array, PyTree

HINT_LEVELS = text_tasks.HINT_LEVELS
ESTIMATORS = gr.OUTCOME_ESTIMATORS + ("unlikeliness",)
LLDS_GATES = ("action", "response")
OBJECTIVES = ("grpo", "pacs", "gtpo", "rover", "cgpo")
CGPO_BASELINES = ("batch", "group", "none")


def get_config() -> ml_collections.ConfigDict:
  """GRPO hyperparameters: the paper's where they transfer to LoRA on a CPU, small sizes else."""
  config = training.run_config(log_every=1, eval_every=10, checkpoint_every=5)
  config.agent = "llm_grpo"
  config.env_name = "arithmetic"
  llm_common.add_config_fields(config)
  config.num_prompts = 4  # G problems per update (paper: 1024 / 64 = 16 questions per batch)
  config.samples_per_prompt = 4  # K samples per problem (paper: 64)
  config.max_new_tokens = 48  # paper: 1024
  config.temperature = 1.0
  config.prompt_bucket = llm_common.PROMPT_BUCKET  # left-pad prompts to a multiple (1: longest)
  config.num_updates = 40
  config.learning_rate = 1e-4  # LoRA rate (paper: 1e-6, full fine-tuning)
  config.optimizer = "adam"  # or "sgd"
  config.max_grad_norm = 1.0
  config.update_epochs = 1  # paper: one gradient step per exploration stage
  config.clip_epsilon = 0.2  # paper
  config.clip_epsilon_high = 0.2  # DAPO clip-higher: 0.28
  config.kl_coef = 0.04  # paper β; Dr. GRPO and DAPO use 0
  config.kl_estimator = "k3"  # paper Eq. 4
  config.estimator = "grpo"  # or "dr_grpo", "rloo", "unlikeliness"
  config.unlikeliness_beta = 0.25  # estimator="unlikeliness": the rank penalty (authors' script)
  config.llds_coef = 0.0  # LLDS's λ (authors' script: 0.2); 0 = off
  config.llds_gate = "action"  # or "response"
  config.objective = "grpo"  # the clipped surrogate (+ β·KL); or "pacs", "gtpo", "rover", "cgpo"
  config.pacs_beta = 1.0  # PACS: scale of the implicit reward (the authors' scripts: 1 and 2)
  config.pacs_centring = "leave_one_out"  # PACS: the scripts' rloo; or "zscore", "mean", "raw"
  # GTPO: completions whose mean token entropy is above it are filtered (the code's: 0.7)
  config.gtpo_entropy_threshold = math.log(2.0)
  config.cgpo_baseline = "batch"  # CGPO's CRPG baseline (TRL's); or "group", "none"
  # Prefix Grouper's forward: each problem's prompt runs once for its K samples, in sampling and
  # in the update's log-prob passes (equal up to float32 rounding; networks.shared_prefix)
  config.shared_prefix = False
  config.advantage_eps = 1e-6
  config.loss_aggregation = "seq_mean_token_mean"  # paper Eq. 3 (1/G Σ_i 1/|o_i| Σ_t)
  config.dynamic_sampling = False  # DAPO filter: drop groups whose rewards are all equal
  config.hicra_alpha = 0.0  # HICRA amplification (0 = off; the ports use 0.2)
  config.hicra_phrases = ("First,", "Next,", "Then,", "So,", "Therefore,")
  hint_scaffold.add_config_fields(config)  # Scaf-GRPO: hints, hint_warmup_updates, ...
  prompt_pool.add_config_fields(config)  # MMR1's VAS: prompt_sampling, prompt_pool, vas_*
  config.task = ml_collections.ConfigDict()
  config.task.max_operand = 9
  config.task.operations = ("add", "sub")
  config.task.correct_weight = 1.0
  config.task.format_weight = 0.5
  config.task.answer_mode = "strict"
  config.task.system_prompt = ""  # "" = the chat template's default
  config.eval_problems = 32  # greedy evaluation on a fixed held-out stream; 0 = none
  config.eval_samples = 0  # k > 0: also k samples per held-out problem (pass@k, sampled pass@1)
  config.eval_seed = 1_000_003  # the held-out stream: arithmetic_problems(eval_seed, ...)
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run (one device: a host loop)."""
  checks.positive_int(
    config,
    "num_prompts",
    "samples_per_prompt",
    "max_new_tokens",
    "prompt_bucket",
    "num_updates",
    "update_epochs",
  )
  tc.non_negative_int(config, "eval_problems", "eval_seed", "eval_samples")
  checks.positive(config, "learning_rate", "max_grad_norm")
  checks.non_negative(config, "clip_epsilon", "clip_epsilon_high", "kl_coef", "advantage_eps")
  checks.in_unit_interval(config, "hicra_alpha", "unlikeliness_beta")
  checks.non_negative(config, "llds_coef")
  checks.one_of(config, "llds_gate", LLDS_GATES)
  checks.one_of(config, "objective", OBJECTIVES)
  checks.positive(config, "pacs_beta", "gtpo_entropy_threshold")
  checks.one_of(config, "pacs_centring", gr.PACS_CENTRINGS)
  checks.one_of(config, "cgpo_baseline", CGPO_BASELINES)
  checks.one_of(config, "shared_prefix", (True, False))
  if config.shared_prefix and config.hints != "off":
    raise checks.ConfigError(
      f"config.hints: expected 'off' with config.shared_prefix=True (a hinted row's prompt "
      f"differs from its group's), got {config.hints!r}"
    )
  if config.objective == "cgpo" and config.hints != "off":
    raise checks.ConfigError(
      f"config.hints: expected 'off' with config.objective='cgpo' (hinted replies carry no "
      f"judge verdict), got {config.hints!r}"
    )
  if config.objective == "pacs":
    best = config.task.correct_weight + config.task.format_weight
    if best > 1.0:
      raise checks.ConfigError(
        f"config.task.format_weight: expected config.task.correct_weight + format_weight <= 1 "
        f"with config.objective='pacs' (its reward is a label in [0, 1]), got {best}"
      )
  if config.objective != "grpo" and config.kl_coef:
    raise checks.ConfigError(
      f"config.kl_coef: expected 0 with config.objective={config.objective!r} (no KL term), got "
      f"{config.kl_coef}"
    )
  if config.objective == "gtpo" and config.hicra_alpha:
    raise checks.ConfigError(
      f"config.hicra_alpha: expected 0 with config.objective='gtpo' (one advantage per "
      f"completion), got {config.hicra_alpha}"
    )
  hint_scaffold.validate_config_fields(config)
  prompt_pool.validate_config_fields(config, "num_prompts")
  checks.one_of(config, "kl_estimator", pg.KL_ESTIMATORS)
  checks.one_of(config, "estimator", ESTIMATORS)
  checks.one_of(config, "loss_aggregation", pg.AGGREGATION_MODES)
  if config.samples_per_prompt < 2:
    raise checks.ConfigError(
      f"config.samples_per_prompt: expected at least 2 (a group needs "
      f"two samples to compare), got {config.samples_per_prompt}"
    )
  llm_common.validate_config_fields(config, num_devices)
  try:
    task_of(config).check()
  except ValueError as error:
    raise checks.ConfigError(f"config.task.{error}") from None


def task_of(config) -> arithmetic_task.ArithmeticTask:
  """The arithmetic task of `config.task` (its `system_prompt` is a sampling option)."""
  fields = arithmetic_task.ArithmeticTask._fields
  return arithmetic_task.ArithmeticTask(**{name: config.task[name] for name in fields})


class TrainState(struct.PyTreeNode):
  """What a run checkpoints: the adapters, their optimizer state, the update count, the seed."""

  lora: PyTree
  opt_state: PyTree
  update: Array  # int32 updates done
  seed: Array  # int32: the problems and sampling keys of update u are functions of (seed, u)
  # Variance-aware sampling's per-prompt statistics (`prompt_sampler.PromptStats`); None (no
  # leaves) with uniform sampling.
  prompt_stats: Optional[PyTree] = None


# ------------------------------------------------------------------------------------------------
# The GRPO step.
# ------------------------------------------------------------------------------------------------


class RolloutBatch(NamedTuple):
  """G*K sampled responses (rows grouped by prompt: row i belongs to group i // K)."""

  prompt_tokens: Array  # int32 [B, P]
  prompt_mask: Array  # bool [B, P]
  response: Array  # int32 [B, N]
  response_mask: Array  # bool [B, N]
  rewards: Array  # float32 [B]
  # CGPO only (None otherwise): the format judge's verdict and the reference reply's reward.
  passed: Optional[Array] = None  # bool [B]
  baseline_rewards: Optional[Array] = None  # float32 [B]


def rollout_batch(responses: llm_common.Responses, rewards: np.ndarray) -> RolloutBatch:
  """The sampled responses and their rewards as a device batch."""
  return jax.tree.map(
    jnp.asarray, RolloutBatch(**llm_common.response_fields(responses), rewards=rewards)
  )


def prompt_group_size(config) -> int:
  """K with `shared_prefix` (each problem's prompt runs once for its K samples), else 1."""
  return config.samples_per_prompt if config.shared_prefix else 1


def group_ids(config) -> Array:
  """The group (problem) of each row `[G * K]`: rows are grouped by problem, K consecutive."""
  return gr.contiguous_group_ids(config.num_prompts, config.samples_per_prompt)


def grpo_token_advantages(
  config,
  rewards: Array,
  response: Array,
  response_mask: Array,
  patterns: Array,
  pattern_lengths: Array,
  behaviour_logp: Optional[Array] = None,
) -> tuple[Array, Array]:
  """Token advantages `[B, N]` and the row mask `[B]` kept by the DAPO filter (batch-level).
  `behaviour_logp` `[B, N]`, the sampled tokens' log-probs, is read by the unlikeliness
  estimator only."""
  num_groups = config.num_prompts
  ids = group_ids(config)
  if config.estimator == "unlikeliness":
    advantages = gr.unlikeliness_advantages(
      rewards,
      behaviour_logp,
      response_mask,
      ids,
      num_groups,
      beta=config.unlikeliness_beta,
      eps=config.advantage_eps,
    ).advantages
  else:
    advantages = gr.outcome_advantages(
      rewards, ids, num_groups, config.estimator, eps=config.advantage_eps
    )
  if config.dynamic_sampling:
    keep = gr.informative_group_mask(rewards, ids, num_groups)[ids]
  else:
    keep = jnp.ones(rewards.shape, bool)
  token_advantages = gr.broadcast_to_tokens(advantages, response_mask)
  if config.hicra_alpha > 0:
    planning = gr.planning_token_mask(response, patterns, pattern_lengths, response_mask)
    token_advantages = gr.hicra_advantages(token_advantages, planning, alpha=config.hicra_alpha)
  return token_advantages, keep


def llm_grpo_objective(
  lora: PyTree,
  params: PyTree,
  model_config: llama.LlamaConfig,
  config,
  batch: RolloutBatch,
  token_advantages: Array,
  loss_mask: Array,
  old_logp: Optional[Array],
  ref_logp: Optional[Array],
  old_stats: Optional[llm_common.TokenStats] = None,
) -> tuple[Array, dict]:
  """GRPO's objective (paper Eq. 3) on the batch: clipped surrogate + β·KL, aggregated; plus
  LLDS's penalty (`llds_coef > 0`) against `old_logp`."""
  if config.objective == "gtpo":
    return gtpo_objective(
      model_config, params, lora, config, batch, token_advantages, loss_mask, old_logp
    )
  if config.objective == "rover":
    return rover_objective(
      model_config, params, lora, config, batch, loss_mask, old_logp, old_stats
    )
  logp = llm_common.batch_logprobs(
    model_config,
    params,
    lora,
    batch,
    temperature=config.temperature,
    group_size=prompt_group_size(config),
  )
  old = jax.lax.stop_gradient(logp) if old_logp is None else old_logp
  if config.objective == "pacs":
    return pacs_objective(config, batch, logp, old, loss_mask)
  if config.objective == "cgpo":
    return cgpo_objective(config, batch, logp, loss_mask)
  per_token, extras = pg.clipped_surrogate_loss(
    logp,
    old,
    token_advantages,
    epsilon=config.clip_epsilon,
    epsilon_high=config.clip_epsilon_high,
    mask=loss_mask,
  )
  kl = jnp.zeros_like(logp)
  if ref_logp is not None:
    kl = pg.kl_divergence(logp, ref_logp, config.kl_estimator, mask=loss_mask)
    per_token = per_token + config.kl_coef * kl
  loss, agg = pg.aggregate(
    per_token, loss_mask, config.loss_aggregation, constant=float(config.max_new_tokens)
  )
  llds = jnp.zeros(())
  if config.llds_coef > 0:
    llds, _ = gr.llds_loss(
      logp, old, token_advantages, loss_mask, coef=config.llds_coef, gate=config.llds_gate
    )
    loss = loss + llds
  metrics = {
    "llds": llds,
    "kl": pg.masked_mean(kl, loss_mask),
    "clip_fraction": pg.masked_mean(extras.clipped, loss_mask),
    "ratio": pg.masked_mean(extras.ratio, loss_mask),
    "logp": pg.masked_mean(logp, loss_mask),
    "loss_denominator": agg.denominator,
  }
  return loss, metrics


def pacs_objective(
  config, batch: RolloutBatch, logp: Array, old_logp: Array, loss_mask: Array
) -> tuple[Array, dict]:
  """PACS's loss (`group_relative.pacs_loss`) with the rows the DAPO filter kept; the rewards
  are the labels."""
  ids = group_ids(config)
  loss, extras = gr.pacs_loss(
    logp,
    old_logp,
    loss_mask,
    batch.rewards,
    ids,
    config.num_prompts,
    valid=jnp.any(loss_mask, axis=1),
    beta=config.pacs_beta,
    centring=config.pacs_centring,
    eps=config.advantage_eps,
  )
  return loss, {
    "kl": jnp.zeros(()),
    "logp": pg.masked_mean(logp, loss_mask),
    "pacs_logit_abs": jnp.mean(jnp.abs(extras.logits)),
    "loss_denominator": extras.denominator,
  }


def cgpo_objective(
  config, batch: RolloutBatch, logp: Array, loss_mask: Array
) -> tuple[Array, dict]:
  """CGPO's CRPG loss (`group_relative.crpg_loss`) with the rows the DAPO filter kept: the
  judge's verdict gates the reward calibrated against the reference reply's."""
  loss, extras = gr.crpg_loss(
    logp,
    loss_mask,
    batch.rewards,
    batch.baseline_rewards,
    batch.passed,
    group_ids(config),
    config.num_prompts,
    valid=jnp.any(loss_mask, axis=1),
    baseline=config.cgpo_baseline,
  )
  return loss, {
    "kl": jnp.zeros(()),
    "logp": pg.masked_mean(logp, loss_mask),
    "cgpo_calibrated": jnp.mean(extras.calibrated),
    "loss_denominator": extras.denominator,
  }


def gtpo_objective(
  model_config: llama.LlamaConfig,
  params: PyTree,
  lora: PyTree,
  config,
  batch: RolloutBatch,
  token_advantages: Array,
  loss_mask: Array,
  old_logp: Optional[Array],
) -> tuple[Array, dict]:
  """GTPO's loss (`group_relative.gtpo_loss`): the completion advantages (constant over each
  completion's tokens without HICRA) and the policy's token entropies (no gradient) of the same
  forward pass as the log-probs."""
  logp, stats = llm_common.batch_logprobs(
    model_config, params, lora, batch, temperature=config.temperature, with_stats=True
  )
  entropy = stats.entropy
  count = jnp.sum(loss_mask, axis=1)
  advantages = jnp.sum(jnp.where(loss_mask, token_advantages, 0.0), axis=1) / jnp.maximum(count, 1)
  loss, extras = gr.gtpo_loss(
    logp,
    loss_mask,
    batch.response,
    advantages,
    jax.lax.stop_gradient(entropy),
    group_ids(config),
    config.num_prompts,
    old_logp=old_logp,
    valid=count > 0,
    entropy_threshold=config.gtpo_entropy_threshold,
  )
  return loss, {
    "kl": jnp.zeros(()),
    "logp": pg.masked_mean(logp, loss_mask),
    "entropy": pg.masked_mean(entropy, loss_mask),
    "gtpo_kept_fraction": jnp.mean(extras.kept.astype(jnp.float32)),
    "gtpo_conflict_fraction": pg.masked_mean(extras.conflict.astype(jnp.float32), loss_mask),
    "loss_denominator": extras.denominator,
  }


def rover_objective(
  model_config: llama.LlamaConfig,
  params: PyTree,
  lora: PyTree,
  config,
  batch: RolloutBatch,
  loss_mask: Array,
  old_logp: Array,
  old_stats: llm_common.TokenStats,
) -> tuple[Array, dict]:
  """ROVER's loss (`group_relative.rover_loss`) on the rewards, with the vocabulary means of
  the policy being trained (no gradient through them) and of the behaviour policy."""
  logp, stats = llm_common.batch_logprobs(
    model_config, params, lora, batch, temperature=config.temperature, with_stats=True
  )
  loss, extras = gr.rover_loss(
    logp,
    old_logp,
    stats.vocab_mean_logp,
    old_stats.vocab_mean_logp,
    loss_mask,
    batch.rewards,
    group_ids(config),
    config.num_prompts,
    valid=jnp.any(loss_mask, axis=1),
  )
  return loss, {
    "kl": jnp.zeros(()),
    "logp": pg.masked_mean(logp, loss_mask),
    "loss_denominator": extras.denominator,
  }


UpdateSettings = llm_common.config_settings(
  "UpdateSettings",
  "num_prompts samples_per_prompt max_new_tokens temperature learning_rate optimizer "
  "max_grad_norm update_epochs clip_epsilon clip_epsilon_high kl_coef kl_estimator estimator "
  "advantage_eps loss_aggregation dynamic_sampling hicra_alpha unlikeliness_beta llds_coef "
  "llds_gate objective pacs_beta pacs_centring gtpo_entropy_threshold cgpo_baseline shared_prefix",
)


def update_settings(config) -> UpdateSettings:
  """The config fields the jitted update reads (hashable: its cache key)."""
  return UpdateSettings.of(config)


def make_update_fn(model_config: llama.LlamaConfig, config):
  """`update(state, params, batch, patterns, pattern_lengths) -> (state, metrics)`, jitted.

  Cached per (model config, update settings): runs that differ only in run-level fields (seeds,
  number of updates, logging) share one compiled program.
  """
  return _make_update_fn(model_config, update_settings(config))


@functools.lru_cache(maxsize=8)
def _make_update_fn(model_config: llama.LlamaConfig, config: UpdateSettings):
  tx = tc.make_optimizer(config.optimizer, config.learning_rate, config.max_grad_norm)

  @jax.jit
  def update(
    state: TrainState, params: PyTree, batch: RolloutBatch, patterns: Array, pattern_lengths: Array
  ) -> tuple[TrainState, dict]:
    logprobs = functools.partial(
      llm_common.batch_logprobs,
      model_config,
      params,
      batch=batch,
      temperature=config.temperature,
      group_size=prompt_group_size(config),
    )
    ref_logp = None
    if config.kl_coef > 0:
      ref_logp = jax.lax.stop_gradient(logprobs(None, use_lora=False))
    old_logp = old_stats = None
    if config.objective == "rover":
      # ROVER's behaviour values: the vocabulary means of the adapters that sampled the batch.
      old_logp, old_stats = jax.lax.stop_gradient(logprobs(state.lora, with_stats=True))
    elif config.update_epochs > 1 or config.estimator == "unlikeliness" or config.llds_coef > 0:
      # The adapters the batch was sampled with: the behaviour policy's log-probs.
      old_logp = jax.lax.stop_gradient(logprobs(state.lora))
    token_advantages, keep = grpo_token_advantages(
      config,
      batch.rewards,
      batch.response,
      batch.response_mask,
      patterns,
      pattern_lengths,
      old_logp,
    )
    loss_mask = batch.response_mask & keep[:, None]

    def epoch(state, _):
      (loss, metrics), lora, opt_state, grads = llm_common.gradient_step(
        tx,
        llm_grpo_objective,
        state.lora,
        state.opt_state,
        params,
        model_config,
        config,
        batch,
        token_advantages,
        loss_mask,
        old_logp,
        ref_logp,
        old_stats,
      )
      metrics = dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads))
      return state.replace(lora=lora, opt_state=opt_state), metrics

    state, metrics = jax.lax.scan(epoch, state, None, length=config.update_epochs)
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics["advantage_abs"] = pg.masked_mean(jnp.abs(token_advantages), batch.response_mask)
    metrics["kept_fraction"] = jnp.mean(keep.astype(jnp.float32))
    return state.replace(update=state.update + 1), metrics

  return update


# ------------------------------------------------------------------------------------------------
# The agent: sampling, rewards, updates.
# ------------------------------------------------------------------------------------------------


class LLMGRPO:
  """GRPO on the arithmetic task: owns the frozen model, the optimizer and the jitted calls."""

  def __init__(
    self, config: ml_collections.ConfigDict, lm: Optional[llm_common.LanguageModel] = None
  ):
    validate_config(config)
    self.config = c = ml_collections.FrozenConfigDict(config)
    self.lm = llm_common.language_model(config, lm)
    self.tx = tc.make_optimizer(config.optimizer, config.learning_rate, config.max_grad_norm)
    patterns, lengths = llm_prompts.phrase_patterns(self.lm.tokenizer, tuple(c.hicra_phrases))
    self.patterns, self.pattern_lengths = jnp.asarray(patterns), jnp.asarray(lengths)
    self._update = make_update_fn(self.lm.config, self.config)
    self.pool = prompt_pool.VarianceAwarePool.from_config(c, "num_prompts")
    self.task = task_of(c)

  def init(self, seed: int) -> TrainState:
    """Fresh adapters (zero `b`: the starting policy is the instruct model) and optimizer state;
    with variance-aware sampling, the statistics of an unseen prompt pool."""
    key = jax.random.fold_in(jax.random.key(seed), 0)
    lora = llama.init_lora(self.lm.config, key)
    stats = None
    if self.config.prompt_sampling == "variance_aware":
      stats = prompt_sampler.init_prompt_stats(self.config.prompt_pool)
    return TrainState(
      lora=lora,
      opt_state=self.tx.init(lora),
      update=jnp.zeros((), jnp.int32),
      seed=jnp.asarray(seed, jnp.int32),
      prompt_stats=stats,
    )

  def problems(self, seed: int, update: int) -> list:
    """The G problems of update `update` of seed `seed` (uniform sampling: a fresh stream)."""
    g = self.config.num_prompts
    return self.task.problems(seed, g, start=update * g)

  def sample(
    self, lora: PyTree, problems: Sequence, key: Array, samples: int, greedy: bool = False
  ) -> llm_common.Responses:
    """`samples` responses per problem (rows grouped by problem) and their decoded text. With
    `shared_prefix`, each problem's prompt is prefilled once for its samples."""
    texts = [text_tasks.arithmetic_prompt(p) for p in problems]
    if self.config.shared_prefix:
      return self.sample_texts(lora, texts, key, greedy=greedy, group_size=samples)
    repeated = [text for text in texts for _ in range(samples)]
    return self.sample_texts(lora, repeated, key, greedy=greedy)

  def sample_texts(
    self,
    lora: PyTree,
    texts: Sequence[str],
    key: Array,
    greedy: bool = False,
    group_size: int = 1,
  ) -> llm_common.Responses:
    """`group_size` responses per user message in `texts`."""
    c = self.config
    return llm_common.sample_for(
      self.lm,
      c,
      lora,
      texts,
      key,
      greedy=greedy,
      system=c.task.system_prompt,
      bucket=c.prompt_bucket,
      group_size=group_size,
    )

  def rewards(self, responses: Sequence[str], problems: Sequence, samples: int):
    """Host-side rewards `[B]` (float32), correct `[B]`, formatted `[B]`."""
    return self.task.rewards(responses, problems, samples)

  def step(self, state: TrainState) -> tuple[TrainState, dict]:
    """One GRPO update: pick G problems, sample G x K responses, score them (Scaf-GRPO: hinted
    responses replace one response of each all-fail group), update the adapters. The logged
    reward, correct and format rates are those of the hint-free samples."""
    update, seed = int(state.update), int(state.seed)
    key = jax.random.fold_in(jax.random.key(seed), update + 1)
    variance_aware = self.config.prompt_sampling == "variance_aware"
    if variance_aware:
      indices = self.pool.draw(state.prompt_stats, jax.random.fold_in(key, 1))
      problems = self.task.pool_problems(seed, indices)
    else:
      problems = self.problems(seed, update)
    k = self.config.samples_per_prompt
    start = time.perf_counter()
    responses = self.sample(state.lora, problems, key, k)
    sample_seconds = time.perf_counter() - start
    rewards, correct, formatted = self.rewards(responses.texts, problems, k)
    generation = responses.generation
    batch = rollout_batch(responses, rewards)
    if self.config.objective == "cgpo":
      baseline = self.task.reference_rewards(problems, k)
      batch = batch._replace(passed=jnp.asarray(formatted), baseline_rewards=jnp.asarray(baseline))
    all_fail = hint_scaffold.all_fail_groups(correct, self.config.num_prompts, k)
    extra = {"all_fail_fraction": float(all_fail.mean())}
    if self.config.hints == "scaffold":
      start = time.perf_counter()
      batch, hint_metrics = self.scaffold(
        state, problems, batch, all_fail, update, jax.random.fold_in(key, 2)
      )
      extra.update(hint_metrics, hint_seconds=time.perf_counter() - start)
    start = time.perf_counter()
    new_state, metrics = self.update(state, batch)
    if variance_aware:
      stats, vas_metrics = self.pool.observe(
        state.prompt_stats, indices, correct, generation.tokens, generation.mask, k
      )
      new_state = new_state.replace(prompt_stats=stats)
      extra.update(vas_metrics)
    metrics.update(
      reward=float(rewards.mean()),
      correct=float(correct.mean()),
      formatted=float(formatted.mean()),
      response_length=float(generation.mask.sum(axis=1).mean()),
      sample_seconds=sample_seconds,
      update_seconds=time.perf_counter() - start,
      **extra,
    )
    metrics["example_response"] = responses.texts[0]
    return new_state, metrics

  def scaffold(
    self,
    state: TrainState,
    problems: Sequence,
    batch: RolloutBatch,
    all_fail: np.ndarray,
    update: int,
    key: Array,
  ) -> tuple[RolloutBatch, dict]:
    """Scaf-GRPO's hint-guided exploration (`hint_scaffold.scaffold`) of the all-fail groups of
    one batch, after the `hint_warmup_updates` unassisted updates."""
    if update < self.config.hint_warmup_updates or not all_fail.any():
      return batch, {"hint_rate": 0.0, "hint_level": 0.0}

    def generate(requests):
      texts = [text_tasks.hinted_prompt(problems[g], level) for g, level in requests]
      responses = self.sample_texts(state.lora, texts, key)
      rewards, correct, _ = self.rewards(responses.texts, [problems[g] for g, _ in requests], 1)
      return RolloutBatch(**llm_common.response_fields(responses), rewards=rewards), correct

    batch, metrics = hint_scaffold.scaffold(
      batch,
      all_fail,
      generate,
      levels=HINT_LEVELS,
      samples=self.config.samples_per_prompt,
      pad_id=self.lm.pad_id,
      in_context=self.config.hint_in_context,
    )
    return jax.tree.map(jnp.asarray, batch), metrics

  def update(self, state: TrainState, batch: RolloutBatch) -> tuple[TrainState, dict]:
    """The jitted GRPO update on a scored batch; metrics as Python floats."""
    state, metrics = self._update(state, self.lm.params, batch, self.patterns, self.pattern_lengths)
    return state, llm_common.scalar_metrics(metrics)

  def evaluate(self, lora: PyTree) -> dict:
    """Greedy replies to `eval_problems` held-out problems: mean reward, correct and format rate;
    with `eval_samples` = k > 0 also k replies per problem at the training temperature: the
    fraction of problems with a correct one among them (`eval_pass_at_k`, the k-sample estimate
    of pass@k of Chen et al., arXiv 2107.03374, with n = k) and the mean correct rate of the
    samples (`eval_sampled_correct`, pass@1 of the sampling policy)."""
    problems = self.task.problems(self.config.eval_seed, self.config.eval_problems)
    responses = self.sample(lora, problems, jax.random.key(0), 1, greedy=True).texts
    rewards, correct, formatted = self.rewards(responses, problems, 1)
    metrics = {
      "eval_reward": float(rewards.mean()),
      "eval_correct": float(correct.mean()),
      "eval_formatted": float(formatted.mean()),
    }
    k = self.config.eval_samples
    if k:
      sampled = self.sample(lora, problems, jax.random.key(1), k).texts
      _, sampled_correct, _ = self.rewards(sampled, problems, k)
      per_problem = np.asarray(sampled_correct, bool).reshape(len(problems), k)
      metrics["eval_pass_at_k"] = float(per_problem.any(axis=1).mean())
      metrics["eval_sampled_correct"] = float(per_problem.mean())
    return metrics


def make_learner(
  config: ml_collections.ConfigDict, lm: Optional[llm_common.LanguageModel] = None
) -> training.HostLearner:
  """A host-driven learner whose `step` is one GRPO update (rewards are scored on the host).
  `lm` may pass an already loaded model (tests pass a tiny one)."""
  agent = LLMGRPO(config, lm)
  return training.HostLearner(
    init=agent.init,
    step=agent.step,
    evaluate=(lambda state: agent.evaluate(state.lora)) if config.eval_problems else None,
    num_updates=config.num_updates,
    env_steps_per_update=config.num_prompts * config.samples_per_prompt,
    progress=lambda record, texts: _progress_line(record, texts, config.num_updates),
  )


def _progress_line(record: dict, texts: dict, num_updates: int) -> str:
  return (
    f"update {record['update']}/{num_updates} | reward {record['reward']:.3f} | correct "
    f"{record['correct']:.2f} | formatted {record['formatted']:.2f} | loss "
    f"{record['loss']:.4f} | kl {record['kl']:.4f} | {record['sample_seconds']:.1f}+"
    f"{record['update_seconds']:.1f} s | {texts['example_response'][:60]!r}"
  )
