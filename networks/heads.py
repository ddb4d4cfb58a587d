"""Heads: map features to distributions (distrax) or values."""

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp


class CategoricalHead(nn.Module):
  """Logits for `num_actions` discrete actions, as a `distrax.Categorical`.

  The small output initialisation (scale 0.01) starts the policy near uniform, as in PPO
  implementations.
  """

  num_actions: int
  init_scale: float = 0.01

  @nn.compact
  def __call__(self, features: jax.Array) -> distrax.Categorical:
    logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(self.init_scale),
                      bias_init=nn.initializers.zeros)(features)
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
    mean = nn.Dense(self.action_dim, kernel_init=nn.initializers.orthogonal(self.init_scale),
                    bias_init=nn.initializers.zeros)(features)
    if self.state_dependent_std:
      log_std = nn.Dense(self.action_dim, kernel_init=nn.initializers.orthogonal(self.init_scale),
                         bias_init=nn.initializers.constant(self.log_std_init))(features)
    else:
      log_std = self.param("log_std", nn.initializers.constant(self.log_std_init),
                           (self.action_dim,))
      log_std = jnp.broadcast_to(log_std, mean.shape)
    log_std = jnp.clip(log_std, self.log_std_min, self.log_std_max)
    return distrax.MultivariateNormalDiag(loc=mean, scale_diag=jnp.exp(log_std))


class ValueHead(nn.Module):
  """A scalar value per input row (the trailing singleton axis is squeezed)."""

  init_scale: float = 1.0

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(self.init_scale),
                     bias_init=nn.initializers.zeros)(features)
    return jnp.squeeze(value, axis=-1)
