"""Latent-skill losses: distilling an expert into a latent space with a learned prior (PULSE).

Luo, Cao, Merel, Winkler, Huang, Kitani, Xu, "Universal Humanoid Motion Representations for
Physics-Based Control" (PULSE), ICLR 2024, arXiv:2310.04582, Section 3.2 (distilling an
imitator into an encoder / prior / decoder with a variational information bottleneck) and
Section 3.3 (hierarchical RL in the latent space around the prior).

The model. An encoder q(z_t | s_t, g_t) = N(μ_q, σ_q) sees the state and privileged
information g_t (in PULSE the next frames of the reference motion; here whatever tells the
expert's action), a prior p(z_t | s_t) = N(μ_p(s_t), σ_p(s_t)) sees the state alone, and a
decoder π_dec(a_t | s_t, z_t) acts. The encoder is a residual to the prior,
μ_q = μ_p(s_t) + μ_e(s_t, g_t), so that the information bottleneck pulls μ_e to 0 and the
prior's mean is the skill the decoder performs by default. The distillation objective is

  L = −log π_dec(a*_t | s_t, z_t)  +  λ_KL·KL(q(z_t | s_t, g_t) ‖ p(z_t | s_t))
      +  λ_AR·‖μ_q,t − μ_q,t−1‖²,     z_t ~ q (reparameterised),

a*_t the expert's action at the state the student visited (DAgger: the student acts, the expert
relabels). PULSE regresses the decoder's mean action onto the imitator's (an L2 loss, actions
are continuous joint targets); for discrete actions the decoder is a categorical and the
reconstruction term its negative log-likelihood. The third term is the smoothness term of the
latent codes of one episode (the authors call it an AR(1) prior).

What was found and what is reconstructed. Of the paper, the abstract and the overview were
reachable here (arXiv 2310.04582v2, HTML); the equations of Sections 3.2 and 3.3 were not, so
the forms above are reconstructed from the text and from the authors' release
(ZhengyiLuo/PULSE, `phc/learning/amp_network_z_builder.py`): the encoder and the prior each
output a mean and a log-variance, the prior sees only the proprioceptive part of the
observation, a latent is drawn by reparameterisation, and both log-variances are clamped (to
[−5, 2] in the code's configuration; the networks of `hrljax.networks.latent_skills` clamp the
log standard deviation to the same range, [−2.5, 1]). The distillation loss itself was not
among the files found. A configuration of code built on the release gives an 8-dimensional
latent, λ_KL annealed from 0.01 to 0.001 and λ_AR = 0.005 (its "AR(1) prior" coefficient); these
are the defaults here (the annealing is the caller's: `kl_coef` may be a traced schedule value).
The exact weighting of the KL (summed over latent dimensions here, averaged over steps), whether
the AR term acts on the posterior mean or on the sampled code (the mean here), and the
residual forms of the encoder's mean and of the high level's latent (the paper's summary names a
"residual action formulation" with the learnable prior; neither was seen in code) are
reconstructions.

Conventions (those of `hrljax.losses`). `gaussian_kl` and `residual_skill` are element-wise
over leading axes. `ar_smoothness` and `distillation_loss` are per trajectory: one environment's
`[T]` steps, the caller vmaps over environments. `done_t` marks the last step of an episode
(terminated or truncated: either way the next code belongs to a new episode, and no pair is
formed across it); `valid_t` marks the steps that count, and an invalid step is never read
(it may hold NaN).
"""

from typing import NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp

from hrljax.losses import _checks
from hrljax.losses._masking import zero_masked

Array = chex.Array


def _expect_shape(name: str, x: Array, shape: tuple, what: str) -> None:
  """A ValueError naming `name` unless `x` has exactly `shape`."""
  if tuple(jnp.shape(x)) != tuple(shape):
    _checks.fail(name, f"shape {tuple(shape)} ({what})", tuple(jnp.shape(x)))


def gaussian_kl(q_mean: Array, q_log_std: Array, p_mean: Array, p_log_std: Array) -> Array:
  """KL(q ‖ p) of two diagonal Gaussians, summed over the last (latent) axis.

  PULSE's information-bottleneck term (arXiv:2310.04582, Section 3.2): the encoder's posterior
  q = N(q_mean, exp(q_log_std)²) against the learned prior p = N(p_mean, exp(p_log_std)²),

    KL = Σ_d [ log σ_p − log σ_q + (σ_q² + (μ_q − μ_p)²) / (2σ_p²) − ½ ].

  Gradients reach both distributions (PULSE trains the prior with this term).

  Args:
    q_mean, q_log_std: `[..., D]` float posterior mean and log standard deviation.
    p_mean, p_log_std: `[..., D]` float prior mean and log standard deviation.

  Returns:
    `[...]` KL per leading index.
  """
  chex.assert_rank(q_mean, {1, 2, 3, 4})
  chex.assert_type([q_mean, q_log_std, p_mean, p_log_std], float)
  for name, x in (("q_log_std", q_log_std), ("p_mean", p_mean), ("p_log_std", p_log_std)):
    _expect_shape(name, x, q_mean.shape, "like q_mean")
  # (σ_q² + Δ²) / (2σ_p²) written with exponentials of differences: no overflow of σ².
  variance_ratio = jnp.exp(2.0 * (q_log_std - p_log_std))
  scaled_gap = jnp.square((q_mean - p_mean) * jnp.exp(-p_log_std))
  per_dim = p_log_std - q_log_std + 0.5 * (variance_ratio + scaled_gap) - 0.5
  return jnp.sum(per_dim, axis=-1)


class SmoothnessExtras(NamedTuple):
  penalty: Array  # [T-1] ‖μ_{t+1} − μ_t‖² of each counted pair, 0 elsewhere
  pair_mask: Array  # [T-1] bool: the pair (t, t+1) lies in one episode and both steps are valid
  total: Array  # scalar Σ of the counted penalties (for a mean over a global batch)
  count: Array  # scalar number of counted pairs (float32)


def ar_smoothness(
  mean_t: Array, done_t: Array, valid_t: Optional[Array] = None
) -> tuple[Array, SmoothnessExtras]:
  """PULSE's latent smoothness term: the mean of ‖μ_{t+1} − μ_t‖² over consecutive steps of one
  episode (arXiv:2310.04582, Section 3.2, the "AR(1) prior" on the latent codes; reconstructed:
  the squared distance of consecutive posterior means, without the AR coefficient).

  Per trajectory. A pair (t, t+1) counts when step t did not end its episode (`done_t[t]` False)
  and both steps are valid; nothing is smoothed across an episode boundary. With no counted
  pair the loss is 0.

  Args:
    mean_t: `[T, D]` float latent means of one trajectory.
    done_t: `[T]` bool, True where step t is the last of its episode.
    valid_t: `[T]` bool steps that count (None: all); an invalid step's mean is never read.

  Returns:
    `(loss, SmoothnessExtras)`: the mean penalty over counted pairs, and the per-pair terms.
  """
  chex.assert_rank([mean_t, done_t], [2, 1])
  chex.assert_type(mean_t, float)
  num_steps = mean_t.shape[0]
  _expect_shape("done_t", done_t, (num_steps,), "[T] for mean_t [T, D]")
  if valid_t is None:
    valid_t = jnp.ones((num_steps,), bool)
  chex.assert_rank(valid_t, 1)
  _expect_shape("valid_t", valid_t, (num_steps,), "[T] for mean_t [T, D]")
  valid = jnp.asarray(valid_t) != 0
  (mean,) = zero_masked(valid[:, None], mean_t)
  pair = valid[:-1] & valid[1:] & ~(jnp.asarray(done_t) != 0)[:-1]
  diff = mean[1:] - mean[:-1]
  (diff,) = zero_masked(pair[:, None], diff)
  penalty = jnp.sum(jnp.square(diff), axis=-1)
  total = jnp.sum(penalty)
  count = jnp.sum(pair.astype(jnp.float32))
  loss = total / jnp.maximum(count, 1.0)
  return loss, SmoothnessExtras(penalty, pair, total, count)


def residual_skill(prior_mean: Array, a_hi: Array) -> Array:
  """The latent a high-level policy commands in PULSE's downstream tasks: z = μ_p(s) + a_hi
  (arXiv:2310.04582, Section 3.3). The high level's action is a residual to the prior's mean,
  so a_hi = 0 decodes the prior's default skill.

  Args:
    prior_mean: `[..., D]` float prior means μ_p(s).
    a_hi: `[..., D]` float high-level actions.

  Returns:
    `[..., D]` latent codes.
  """
  chex.assert_rank(prior_mean, {1, 2, 3, 4})
  chex.assert_type([prior_mean, a_hi], float)
  _expect_shape("a_hi", a_hi, prior_mean.shape, "like prior_mean")
  return prior_mean + a_hi


class DistillationExtras(NamedTuple):
  nll: Array  # [T] −log π_dec(a*_t | s_t, z_t), 0 at invalid steps
  kl: Array  # [T] KL(q ‖ p) per step, 0 at invalid steps
  smoothness: Array  # scalar: the AR term (mean over counted pairs)
  count: Array  # scalar: valid steps (float32)
  accuracy: Array  # scalar: fraction of valid steps where the decoder's mode is a*


def distillation_loss(
  decoder_logits_t: Array,
  expert_action_t: Array,
  q_mean_t: Array,
  q_log_std_t: Array,
  p_mean_t: Array,
  p_log_std_t: Array,
  done_t: Array,
  valid_t: Optional[Array] = None,
  *,
  kl_coef=0.01,
  ar_coef: float = 0.005,
) -> tuple[Array, DistillationExtras]:
  """PULSE's distillation objective for discrete actions, over one trajectory:

    mean_t[−log π_dec(a*_t | s_t, z_t)] + kl_coef·mean_t[KL(q_t ‖ p_t)] + ar_coef·AR(μ_q),

  (arXiv:2310.04582, Section 3.2; the reconstruction term is the categorical negative
  log-likelihood instead of PULSE's L2 on continuous actions; see the module docstring). The
  logits are the decoder's at the sampled latent z_t ~ q_t; `AR` is `ar_smoothness` of the
  posterior means. The means run over the valid steps (AR over the counted pairs).

  Out-of-range expert actions raise eagerly; under jit their step is invalid.

  Args:
    decoder_logits_t: `[T, A]` float decoder logits at (s_t, z_t).
    expert_action_t: `[T]` int expert actions a*_t.
    q_mean_t, q_log_std_t: `[T, D]` float posterior (encoder) mean and log standard deviation.
    p_mean_t, p_log_std_t: `[T, D]` float prior mean and log standard deviation.
    done_t: `[T]` bool, True where step t is the last of its episode.
    valid_t: `[T]` bool steps that count (None: all); invalid steps are never read.
    kl_coef: λ_KL >= 0 (a float or a traced scalar, e.g. an annealed value).
    ar_coef: λ_AR >= 0.

  Returns:
    `(loss, DistillationExtras)`.
  """
  _checks.nonnegative("kl_coef", kl_coef, arrays=True)
  _checks.nonnegative("ar_coef", ar_coef, arrays=True)
  chex.assert_rank(
    [decoder_logits_t, expert_action_t, q_mean_t, q_log_std_t, p_mean_t, p_log_std_t, done_t],
    [2, 1, 2, 2, 2, 2, 1],
  )
  chex.assert_type([decoder_logits_t, q_mean_t, q_log_std_t, p_mean_t, p_log_std_t], float)
  chex.assert_type(expert_action_t, int)
  num_steps, num_actions = decoder_logits_t.shape
  _expect_shape("expert_action_t", expert_action_t, (num_steps,), "[T] for logits [T, A]")
  latent = (num_steps, q_mean_t.shape[1])
  _expect_shape("q_mean_t", q_mean_t, latent, "[T, D] for logits [T, A]")
  for name, x in (
    ("q_log_std_t", q_log_std_t),
    ("p_mean_t", p_mean_t),
    ("p_log_std_t", p_log_std_t),
  ):
    _expect_shape(name, x, latent, "[T, D] like q_mean_t")
  _expect_shape("done_t", done_t, (num_steps,), "[T] for logits [T, A]")
  if valid_t is None:
    valid_t = jnp.ones((num_steps,), bool)
  chex.assert_rank(valid_t, 1)
  _expect_shape("valid_t", valid_t, (num_steps,), "[T] for logits [T, A]")
  in_range = _checks.ids_in_range("expert_action_t", expert_action_t, num_actions)
  valid = (jnp.asarray(valid_t) != 0) & in_range
  logits, q_mean, q_log_std, p_mean, p_log_std = zero_masked(
    valid[:, None], decoder_logits_t, q_mean_t, q_log_std_t, p_mean_t, p_log_std_t
  )
  action = jnp.where(valid, expert_action_t, 0)
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
  kl = gaussian_kl(q_mean, q_log_std, p_mean, p_log_std)
  (nll, kl) = zero_masked(valid, nll, kl)
  count = jnp.sum(valid.astype(jnp.float32))
  denominator = jnp.maximum(count, 1.0)
  smoothness, _ = ar_smoothness(q_mean, done_t, valid)
  loss = jnp.sum(nll) / denominator + kl_coef * jnp.sum(kl) / denominator + ar_coef * smoothness
  correct = (jnp.argmax(logits, axis=-1) == action) & valid
  accuracy = jnp.sum(correct.astype(jnp.float32)) / denominator
  return loss, DistillationExtras(nll, kl, smoothness, count, accuracy)
