"""Heads: map features to distributions (distrax) or values."""

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.networks import initializers


class CategoricalHead(nn.Module):
  """Logits for `num_actions` discrete actions, as a `distrax.Categorical`.

  The small output initialisation (scale 0.01) starts the policy near uniform, as in PPO
  implementations.
  """

  num_actions: int
  init_scale: float = 0.01

  @nn.compact
  def __call__(self, features: jax.Array) -> distrax.Categorical:
    logits = nn.Dense(
      self.num_actions,
      kernel_init=initializers.orthogonal(self.init_scale),
      bias_init=nn.initializers.zeros,
    )(features)
    return distrax.Categorical(logits=logits)


class GaussianHead(nn.Module):
  """A diagonal Gaussian over `action_dim` continuous actions (`distrax.MultivariateNormalDiag`).

  The log standard deviation is a state-independent parameter (PPO's usual choice) unless
  `state_dependent_std`, and is clipped to `[log_std_min, log_std_max]`.
  """

  action_dim: int
  init_scale: float = 0.01
  state_dependent_std: bool = False
  log_std_init: float = 0.0
  log_std_min: float = -5.0
  log_std_max: float = 2.0

  @nn.compact
  def __call__(self, features: jax.Array) -> distrax.MultivariateNormalDiag:
    mean = nn.Dense(
      self.action_dim,
      kernel_init=initializers.orthogonal(self.init_scale),
      bias_init=nn.initializers.zeros,
    )(features)
    if self.state_dependent_std:
      log_std = nn.Dense(
        self.action_dim,
        kernel_init=initializers.orthogonal(self.init_scale),
        bias_init=nn.initializers.constant(self.log_std_init),
      )(features)
    else:
      log_std = self.param(
        "log_std", nn.initializers.constant(self.log_std_init), (self.action_dim,)
      )
      log_std = jnp.broadcast_to(log_std, mean.shape)
    log_std = jnp.clip(log_std, self.log_std_min, self.log_std_max)
    return distrax.MultivariateNormalDiag(loc=mean, scale_diag=jnp.exp(log_std))


class ValueHead(nn.Module):
  """A scalar value per input row (the trailing singleton axis is squeezed)."""

  init_scale: float = 1.0

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    value = nn.Dense(
      1, kernel_init=initializers.orthogonal(self.init_scale), bias_init=nn.initializers.zeros
    )(features)
    return jnp.squeeze(value, axis=-1)


def policy_noise(key: jax.Array, shape: tuple, discrete: bool) -> jax.Array:
  """Noise for `sample_with_noise`: standard Gumbel for a categorical policy (`shape` ends with
  the number of actions), standard normal for a Gaussian one (`shape` ends with the action
  dimension). Drawing it for many steps at once is cheaper than one draw per step."""
  return jax.random.gumbel(key, shape) if discrete else jax.random.normal(key, shape)


def sample_with_noise(dist: distrax.Distribution, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
  """`(action, log_prob)` of `dist` driven by pre-drawn `policy_noise`.

  Categorical: the Gumbel-max trick, `argmax(logits + g)`, is an exact sample. Diagonal Gaussian:
  `loc + scale * eps`. Both give the distribution's own samples; only the source of randomness
  moves out of the caller's loop.
  """
  if isinstance(dist, distrax.Categorical):
    action = jnp.argmax(dist.logits + noise, axis=-1)
    log_probs = jax.nn.log_softmax(dist.logits, axis=-1)
    return action, jnp.take_along_axis(log_probs, action[..., None], axis=-1)[..., 0]
  if isinstance(dist, distrax.MultivariateNormalDiag):
    action = dist.loc + dist.scale_diag * noise
    return action, dist.log_prob(action)
  raise ValueError(
    f"dist: expected a distrax Categorical or MultivariateNormalDiag, got {type(dist).__name__}"
  )
