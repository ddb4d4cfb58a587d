"""Utterance-level critics and token-level actors: ArCHer, Offline ArCHer, filtered BC, CHAI,
and the token-level credit assignment of ArCHer's flat baseline (token-level PPO).

See "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL" by Zhou, Zanette, Pan,
Levine, Kumar (arXiv 2402.19446, ICML 2024). The high level is an off-policy TD critic over
utterance-level transitions (s = dialogue history, a = whole utterance); the low level is a
token-level policy gradient that gives every token of an utterance the utterance-level advantage.
The formulas follow the authors' reference code (YifeiZhou02/ArCHer @7c771a7,
`archer/algorithms/archer/trainer.py`; andreazanette/OfflineArcher @56d3b72, `Algorithms.py`),
since the paper states them only up to these implementation choices. Only the paper's abstract
could be checked when this module was written, so docstrings name the paper's parts (utterance-
level critic, token-level policy gradient, token-level baseline) rather than equation numbers.

Batching convention. Every public function takes a batch of B utterance-level transitions and is
batch-level only in its final mean: the math is per example, nothing couples examples (no batch
normalisation, no batch statistics), so a caller may equally vmap over an extra leading axis;
the exceptions say so (`mean_over_samples` and `archer_sample_mean_baseline` couple the K samples
of a dialogue, `archer_standardized_advantage` the batch).
Critic outputs are laid out ensemble-first, `[E, B]` (E = 2 twin heads in ArCHer, the layout
`nn.vmap` ensembles produce); scalars per transition are `[B]`; token arrays are `[B, L]` with a
token mask. Losses are means over the valid examples (optional `valid: bool[B]`, default all),
and their extras expose `loss_sum` and `denominator` so that a sharded caller can normalise over
the global batch. The reference sums the losses of its gradient-accumulation micro-batches (its
README: effective lr = lr × grad_accum_steps); here every loss is a mean, so an accumulating
caller should average micro-batch gradients (or scale the lr) to match.

Generation is outside this module: the caller samples the fresh utterance a_π ~ π(·|s), evaluates
the target critic on it (`q_pi_tgt`), the online critic on it (`q_pi`, `v`) and the policy's token
log-probs (`token_logp`), and passes the arrays in.

The Polyak target update (ArCHer: after every critic optimizer step, τ = 0.1, post-step online
parameters) is `optax.incremental_update(online, target, tau)` in the agent, not a loss.
"""

from hrljax.losses.hierarchical_critics._common import (
  AWRActorExtras,
  ActorExtras,
  BASELINE_DENOMINATORS,
  BCExtras,
  BaselineActorExtras,
  CriticExtras,
  FILTER_METHODS,
  HEAD_MODES,
)
from hrljax.losses.hierarchical_critics.online import (
  archer_actor_loss,
  archer_advantage,
  archer_baseline_actor_loss,
  archer_critic_loss,
  archer_q_targets,
  archer_sample_mean_baseline,
  archer_standardized_advantage,
  archer_v_targets,
  mean_over_samples,
)
from hrljax.losses.hierarchical_critics.offline import (
  chai_select,
  filtered_bc_loss,
  filtered_bc_mask,
  offline_archer_actor_loss,
  offline_archer_critic_loss,
)
from hrljax.losses.hierarchical_critics.token_level import (
  TokenStream,
  normalize_token_advantages,
  token_level_advantages,
  token_stream,
)

__all__ = (
  "AWRActorExtras",
  "ActorExtras",
  "BASELINE_DENOMINATORS",
  "BCExtras",
  "BaselineActorExtras",
  "CriticExtras",
  "FILTER_METHODS",
  "HEAD_MODES",
  "archer_actor_loss",
  "archer_advantage",
  "archer_baseline_actor_loss",
  "archer_critic_loss",
  "archer_q_targets",
  "archer_sample_mean_baseline",
  "archer_standardized_advantage",
  "archer_v_targets",
  "chai_select",
  "filtered_bc_loss",
  "filtered_bc_mask",
  "mean_over_samples",
  "offline_archer_actor_loss",
  "offline_archer_critic_loss",
  "TokenStream",
  "normalize_token_advantages",
  "token_level_advantages",
  "token_stream",
)
