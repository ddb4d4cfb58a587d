"""Frozen experts: K trained Q-networks of one architecture evaluated together.

MacroHFT's sub-agents (Zong et al., "MacroHFT: Memory Augmented Context-aware Reinforcement
Learning On High Frequency Trading", KDD 2024, arXiv:2406.14537, Section 4.2): each is trained on
one sub-task and then frozen, and the hyper-agent mixes their action values. The K parameter trees
are stacked on a leading axis, so all K experts run as one vmapped network.
"""

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from hrljax.networks.discrete_q import DiscreteQNetwork
from hrljax.types import Array, PyTree


class Experts(NamedTuple):
  """K frozen Q-networks of one architecture: the network and its parameters stacked on a
  leading K axis."""

  network: DiscreteQNetwork
  params: PyTree

  @property
  def num_experts(self) -> int:
    return jax.tree.leaves(self.params)[0].shape[0]

  def q_values(self, params: PyTree, obs: Array) -> Array:
    """`[B, K, A]` action values of every expert for a batch of observations `[B, ...]`."""
    q = jax.vmap(lambda p: self.network.apply(p, obs))(params)  # [K, B, A]
    return jnp.moveaxis(q, 0, -2)


def stack_experts(network: DiscreteQNetwork, params: Sequence[PyTree]) -> Experts:
  """`Experts` from a list of parameter trees of `network` (all of one structure)."""
  return Experts(network, jax.tree.map(lambda *x: jnp.stack(x), *params))
