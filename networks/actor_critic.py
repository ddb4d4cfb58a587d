"""An actor-critic: separate MLP torsos for the policy and the value (PPO's usual layout)."""

from typing import Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.networks.heads import CategoricalHead, GaussianHead, ValueHead
from hrljax.networks.torsos import MLP


class ActorCritic(nn.Module):
  """Returns `(policy distribution, value)` for a batch of flat observations.

  `action_dim` is the number of actions for a discrete policy (`discrete=True`) or the action
  dimension of a Gaussian policy.
  """

  action_dim: int
  discrete: bool = True
  observation_ndim: int = 1  # rank of one observation; its axes are flattened, leading ones kept
  hidden_sizes: Sequence[int] = (64, 64)
  activation: str = "tanh"

  def setup(self):
    self.actor_torso = MLP(self.hidden_sizes, self.activation)
    self.critic_torso = MLP(self.hidden_sizes, self.activation)
    self.policy_head = (
      CategoricalHead(self.action_dim) if self.discrete else GaussianHead(self.action_dim)
    )
    self.value_head = ValueHead()

  def __call__(self, obs: jax.Array) -> tuple[distrax.Distribution, jax.Array]:
    obs = flatten_observation(obs, self.observation_ndim)
    return self.policy_head(self.actor_torso(obs)), self.value_head(self.critic_torso(obs))

  def policy(self, obs: jax.Array) -> distrax.Distribution:
    """The policy alone (what an actor needs while acting; the critic is not evaluated)."""
    return self.policy_head(self.actor_torso(flatten_observation(obs, self.observation_ndim)))

  def value(self, obs: jax.Array) -> jax.Array:
    return self.value_head(self.critic_torso(flatten_observation(obs, self.observation_ndim)))


def flatten_observation(obs: jax.Array, observation_ndim: int) -> jax.Array:
  """Flattens the trailing `observation_ndim` axes (one observation) to one feature axis, keeping
  any leading batch/time axes, and casts to float32 (grid observations are often ints)."""
  obs = jnp.asarray(obs, jnp.float32)
  if observation_ndim == 1:
    return obs
  return obs.reshape(obs.shape[: obs.ndim - observation_ndim] + (-1,))
