"""A fixed pool of prompts sampled by variance-aware sampling, driven from a host loop.

MMR1's variance-aware sampling (Leng et al., arXiv 2509.21268) as `hrljax.data.prompt_sampler`
defines it (pure, jittable functions; that module states what follows the authors' code and what
is reconstructed). This module is the host side of one learner update: draw the batch's pool
indices, then fold the batch's outcomes (pass rate: the fraction of correct responses of each
prompt; diversity: `prompt_sampler.group_diversity`) into the per-prompt statistics, which the
learner carries in its checkpointed state. The jitted functions are compiled once per process and
shared by every learner (the sizes and options are static). `add_config_fields` and
`validate_config_fields` are the config fields of a learner that offers the scheme, as
`hrljax.training.run_config` is the run-level ones.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hrljax import config_checks as checks
from hrljax.data import prompt_sampler
from hrljax.types import Array

PROMPT_SAMPLING = ("uniform", "variance_aware")

_sample_prompts = jax.jit(
  prompt_sampler.sample_prompts,
  static_argnames=("num", "alpha", "beta", "floor", "mixture", "normalization"),
)
_update_prompt_stats = jax.jit(prompt_sampler.update_prompt_stats, static_argnames=("momentum",))
_group_diversity = jax.jit(prompt_sampler.group_diversity, static_argnums=(2, 3))


def add_config_fields(config) -> None:
  """The sampling scheme's fields: "uniform" (a fresh problem stream) or "variance_aware" (VAS
  over a fixed pool of `prompt_pool` prompts) and VAS's settings."""
  config.prompt_sampling = "uniform"
  config.prompt_pool = 256
  config.vas_alpha = 1.0  # weight of the outcome variance p(1 - p)
  config.vas_beta = 0.0  # weight of the trajectory diversity (the authors' default: 0)
  config.vas_floor = 0.01  # added to every prompt's weight
  config.vas_mixture = 0.5  # λ: fraction of the batch drawn by weight (the rest uniformly)
  config.vas_momentum = 0.0  # running pass rate: p <- m p + (1 - m) p_batch
  config.vas_normalization = "none"  # or "minmax" (the authors' released code)


def validate_config_fields(config, batch_field: str) -> None:
  """Raises `ConfigError` naming the first field of `add_config_fields` that cannot run with
  `config[batch_field]` prompts per batch."""
  checks.in_unit_interval(config, "vas_mixture", "vas_momentum")
  checks.one_of(config, "prompt_sampling", PROMPT_SAMPLING)
  checks.one_of(config, "vas_normalization", prompt_sampler.NORMALIZATIONS)
  checks.positive_int(config, "prompt_pool")
  checks.non_negative(config, "vas_alpha", "vas_beta")
  checks.positive(config, "vas_floor")
  # `sample_prompts` draws the uniform part without replacement.
  uniform_draws = config[batch_field] - int(config[batch_field] * config.vas_mixture)
  if config.prompt_sampling == "variance_aware" and uniform_draws > config.prompt_pool:
    raise checks.ConfigError(
      f"config.prompt_pool: expected at least {uniform_draws} problems (the uniform draws of "
      f"one batch), got {config.prompt_pool}"
    )


class VarianceAwarePool(NamedTuple):
  """The sampling settings of one run (`prompt_sampler`'s arguments)."""

  num: int  # prompts per batch
  alpha: float  # weight of the outcome variance p(1 - p)
  beta: float  # weight of the trajectory diversity
  floor: float  # added to every prompt's weight
  mixture: float  # λ: fraction of the batch drawn by weight (the rest uniformly)
  normalization: str  # `prompt_sampler.NORMALIZATIONS`
  momentum: float  # running statistics: p <- m p + (1 - m) p_batch

  @classmethod
  def from_config(cls, config, batch_field: str) -> "VarianceAwarePool":
    """The settings of the fields `add_config_fields` adds, `config[batch_field]` per batch."""
    return cls(
      config[batch_field],
      config.vas_alpha,
      config.vas_beta,
      config.vas_floor,
      config.vas_mixture,
      config.vas_normalization,
      config.vas_momentum,
    )

  def draw(self, stats: prompt_sampler.PromptStats, key: Array) -> np.ndarray:
    """The `num` pool indices of one batch, drawn by `prompt_sampler.sample_prompts`."""
    return np.asarray(
      _sample_prompts(
        key,
        stats,
        num=self.num,
        alpha=self.alpha,
        beta=self.beta,
        floor=self.floor,
        mixture=self.mixture,
        normalization=self.normalization,
      )
    )

  def observe(
    self,
    stats: prompt_sampler.PromptStats,
    indices: np.ndarray,
    correct: np.ndarray,
    tokens: Array,
    mask: Array,
    samples: int,
  ) -> tuple[prompt_sampler.PromptStats, dict]:
    """The pool statistics after a batch of `samples` responses per drawn prompt (`correct`
    `[num * samples]`, response `tokens` and `mask` `[num * samples, N]`, rows grouped by prompt),
    and the batch's and pool's means as Python floats."""
    g, k = self.num, samples
    pass_rates = jnp.asarray(np.asarray(correct, np.float32).reshape(g, k).mean(axis=1))
    diversity = _group_diversity(jnp.asarray(tokens), jnp.asarray(mask), g, k)
    stats = _update_prompt_stats(
      stats, jnp.asarray(indices), pass_rates, diversity, momentum=self.momentum
    )
    metrics = {
      "prompt_pass_rate": float(jnp.mean(pass_rates)),
      "prompt_diversity": float(jnp.mean(diversity)),
      "prompt_pool_seen": float(jnp.mean(stats.visits > 0)),
      "prompt_pool_score": float(
        jnp.mean(
          prompt_sampler.variance_promotion_score(
            stats.pass_rate, stats.diversity, alpha=self.alpha, beta=self.beta
          )
        )
      ),
    }
    return stats, metrics
