"""A state-value network with torso of its own: V(s) from an MLP and a scalar head.

Kept apart from `ActorCritic` so that a second critic (e.g. PPO-Lagrangian's cost critic V_c, in
OmniSafe's layout) shares no features with the policy.
"""

from typing import Sequence

import flax.linen as nn
import jax

from hrljax.networks.heads import ValueHead
from hrljax.networks.torsos import MLP


class StateValue(nn.Module):
  """`V(s)` `[B]` for a batch of flat observations `[B, D]`."""

  hidden_sizes: Sequence[int] = (64, 64)
  activation: str = "tanh"

  @nn.compact
  def __call__(self, obs: jax.Array) -> jax.Array:
    return ValueHead()(MLP(self.hidden_sizes, self.activation)(obs))
