"""An MLP policy alone (no value head): observation -> distrax distribution."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.networks.actor_critic import flatten_observation
from hrljax.networks.heads import CategoricalHead, GaussianHead
from hrljax.networks.torsos import MLP


class MLPPolicy(nn.Module):
  """A categorical (`discrete`) or diagonal Gaussian policy on an MLP torso.

  With `one_hot > 0` every entry of an integer observation (grid coordinates, say) is one-hot
  encoded with `one_hot` classes before the MLP, otherwise the observation is flattened as is.
  """

  action_dim: int
  discrete: bool = True
  observation_ndim: int = 1  # rank of one observation; leading batch/time axes are kept
  hidden_sizes: tuple = (64, 64)
  activation: str = "tanh"
  one_hot: int = 0

  @nn.compact
  def __call__(self, obs: jax.Array):
    if self.one_hot:
      encoded = jax.nn.one_hot(jnp.asarray(obs).astype(jnp.int32), self.one_hot)
      x = flatten_observation(encoded, self.observation_ndim + 1)
    else:
      x = flatten_observation(obs, self.observation_ndim)
    features = MLP(tuple(self.hidden_sizes), self.activation)(x)
    head = CategoricalHead(self.action_dim) if self.discrete else GaussianHead(self.action_dim)
    return head(features)
