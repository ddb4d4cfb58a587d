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
import jax.numpy as jnp

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


class GoalConditionedQNetwork(nn.Module):
  """`apply(params, obs, goal) -> [..., num_actions]`: Q(s, g, ·) of a goal-conditioned policy.

  The goal's features are appended to the observation's and read by one `DiscreteQNetwork`
  (universal value function approximators: Schaul, Horgan, Gregor, Silver 2015, the form of the
  low level of goal-conditioned hierarchies such as h-DQN, Kulkarni et al. 2016,
  arXiv:1604.06057). `obs [..., d]` and `goal [..., k]` share their leading axes.

  Attributes:
    num_actions: the number of discrete actions A.
    hidden_sizes: torso layers.
    activation: torso activation (a name of `hrljax.networks.torsos.ACTIVATIONS`).
  """

  num_actions: int
  hidden_sizes: Sequence[int] = (64, 64)
  activation: str = "relu"

  @nn.compact
  def __call__(self, obs: jax.Array, goal: jax.Array) -> jax.Array:
    if obs.shape[:-1] != goal.shape[:-1]:
      raise ValueError(
        f"goal: expected the leading axes {obs.shape[:-1]} of obs {obs.shape}, got {goal.shape}"
      )
    inputs = jnp.concatenate([obs, goal.astype(obs.dtype)], axis=-1)
    return DiscreteQNetwork(self.num_actions, self.hidden_sizes, self.activation, name="q")(inputs)
