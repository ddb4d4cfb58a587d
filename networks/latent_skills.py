"""PULSE's latent-skill model: an encoder residual to a learned prior, and a decoder.

Luo et al., "Universal Humanoid Motion Representations for Physics-Based Control" (PULSE),
arXiv:2310.04582, Section 3.2. Three MLPs:

  prior    p(z | s)    = N(μ_p(s), σ_p(s))             (sees the state only)
  encoder  q(z | s, g) = N(μ_p(s) + μ_e(s, g), σ_e(s, g))  (a residual to the prior's mean)
  decoder  π_dec(a | s, z)                              (a categorical over discrete actions)

`g` is the privileged input the encoder gets during distillation (PULSE: the reference motion;
the agent of `hrljax.agents.latent_skills`: the expert's action). The log standard deviations
are clamped to [`log_std_min`, `log_std_max`], [−2.5, 1] by default: the log-variance range
[−5, 2] of the authors' configuration. The decoder's last layer starts small (scale 0.01), so the
untrained decoder is near uniform, as PPO's policy heads. Only discrete actions are built here
(PULSE's humanoid decoder is a Gaussian over joint targets).
"""

from typing import Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.networks import initializers
from hrljax.networks.actor_critic import flatten_observation
from hrljax.networks.heads import CategoricalHead, GaussianHead, ValueHead
from hrljax.networks.torsos import MLP


class _GaussianParameters(nn.Module):
  """A torso and a dense layer to `(mean [.., D], clamped log_std [.., D])`."""

  latent_dim: int
  hidden_sizes: Sequence[int]
  activation: str
  log_std_min: float
  log_std_max: float

  @nn.compact
  def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    features = MLP(self.hidden_sizes, self.activation)(x)
    out = nn.Dense(
      2 * self.latent_dim,
      kernel_init=initializers.orthogonal(0.01),
      bias_init=nn.initializers.zeros,
    )(features)
    mean, log_std = jnp.split(out, 2, axis=-1)
    return mean, jnp.clip(log_std, self.log_std_min, self.log_std_max)


class LatentSkillModel(nn.Module):
  """Encoder, learned prior and decoder of PULSE's latent skills (see the module docstring).

  Observations `[..., *obs_shape]` (their last `observation_ndim` axes are one observation);
  `condition` `[..., C]` floats; latents `[..., latent_dim]`.
  """

  num_actions: int
  latent_dim: int = 8
  hidden_sizes: Sequence[int] = (64, 64)
  activation: str = "tanh"
  observation_ndim: int = 1
  log_std_min: float = -2.5
  log_std_max: float = 1.0

  def setup(self):
    gaussian = lambda: _GaussianParameters(
      self.latent_dim, self.hidden_sizes, self.activation, self.log_std_min, self.log_std_max
    )
    self.prior_net = gaussian()
    self.encoder_net = gaussian()
    self.decoder_torso = MLP(self.hidden_sizes, self.activation)
    self.decoder_head = CategoricalHead(self.num_actions)

  def prior(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(μ_p, log σ_p)` of p(z | s)."""
    return self.prior_net(flatten_observation(obs, self.observation_ndim))

  def posterior(
    self, obs: jax.Array, condition: jax.Array
  ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """`(μ_q, log σ_q, μ_p, log σ_p)`: the encoder's q(z | s, g), whose mean is the prior's plus
    the encoder's residual, and the prior it is a residual to."""
    flat = flatten_observation(obs, self.observation_ndim)
    prior_mean, prior_log_std = self.prior_net(flat)
    features = jnp.concatenate([flat, jnp.asarray(condition, jnp.float32)], axis=-1)
    residual, log_std = self.encoder_net(features)
    return prior_mean + residual, log_std, prior_mean, prior_log_std

  def decode(self, obs: jax.Array, z: jax.Array) -> distrax.Categorical:
    """π_dec(a | s, z)."""
    flat = flatten_observation(obs, self.observation_ndim)
    return self.decoder_head(self.decoder_torso(jnp.concatenate([flat, z], axis=-1)))

  def __call__(self, obs: jax.Array, condition: jax.Array):
    """Every part once (for `init`): the posterior's four outputs and the decoder at its mean."""
    q_mean, q_log_std, p_mean, p_log_std = self.posterior(obs, condition)
    return (q_mean, q_log_std, p_mean, p_log_std), self.decode(obs, q_mean)


class LatentActorCritic(nn.Module):
  """The high level of PULSE's downstream tasks (Section 3.3): a Gaussian over a_hi `[..., D]`
  (state-independent log standard deviation, starting at `log_std_init`) and a value, from
  separate MLP torsos, as `hrljax.networks.ActorCritic` but with the starting spread of a_hi
  settable, so that it can match the scale of the prior's latent codes."""

  latent_dim: int
  hidden_sizes: Sequence[int] = (64, 64)
  activation: str = "tanh"
  observation_ndim: int = 1
  log_std_init: float = 0.0

  def setup(self):
    self.actor_torso = MLP(self.hidden_sizes, self.activation)
    self.critic_torso = MLP(self.hidden_sizes, self.activation)
    self.policy_head = GaussianHead(self.latent_dim, log_std_init=self.log_std_init)
    self.value_head = ValueHead()

  def __call__(self, obs: jax.Array) -> tuple[distrax.MultivariateNormalDiag, jax.Array]:
    obs = flatten_observation(obs, self.observation_ndim)
    return self.policy_head(self.actor_torso(obs)), self.value_head(self.critic_torso(obs))

  def value(self, obs: jax.Array) -> jax.Array:
    return self.value_head(self.critic_torso(flatten_observation(obs, self.observation_ndim)))
