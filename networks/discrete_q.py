"""Action values over a discrete action set: Q(s, ·) from an MLP torso and a linear head.

The network of DQN (Mnih et al. 2015) and its variants on vector observations: one output per
action, so that the greedy action and max_a Q(s, a) need one forward pass. CleanRL's and
PureJaxRL's CartPole DQN use two ReLU layers of 120 and 84 units; the torso here is
`hrljax.networks.MLP` (orthogonal initialisation, scale √2) and the head a Dense layer with
orthogonal initialisation of scale `head_init_scale` and zero bias.
"""

from typing import Sequence

import flax.linen as nn
import jax

from hrljax.networks import initializers
from hrljax.networks.actor_critic import flatten_observation
from hrljax.networks.torsos import MLP


class DiscreteQNetwork(nn.Module):
  """`apply(params, obs) -> [..., num_actions]` action values for a batch of observations.

  Attributes:
    num_actions: the number of discrete actions A.
    hidden_sizes: torso layers; `()` makes the head linear in the observation.
    activation: torso activation (a name of `hrljax.networks.torsos.ACTIVATIONS`).
    observation_ndim: rank of one observation; its axes are flattened, leading ones kept.
    head_init_scale: orthogonal-init scale of the output layer.
  """

  num_actions: int
  hidden_sizes: Sequence[int] = (120, 84)
  activation: str = "relu"
  observation_ndim: int = 1
  head_init_scale: float = 1.0

  @nn.compact
  def __call__(self, obs: jax.Array) -> jax.Array:
    if self.num_actions < 1:
      raise ValueError(f"num_actions: expected an integer >= 1, got {self.num_actions!r}")
    x = flatten_observation(obs, self.observation_ndim)
    if self.hidden_sizes:
      x = MLP(tuple(self.hidden_sizes), self.activation)(x)
    return nn.Dense(
      self.num_actions,
      kernel_init=initializers.orthogonal(self.head_init_scale),
      bias_init=nn.initializers.zeros,
      name="head",
    )(x)
