"""Flax Linen modules: torsos, heads, ensembles. No network knows which loss will use it."""

from hrljax.networks.actor_critic import ActorCritic, flatten_observation
from hrljax.networks.heads import (
  CategoricalHead,
  GaussianHead,
  ValueHead,
  policy_noise,
  sample_with_noise,
)
from hrljax.networks.policy import MLPPolicy
from hrljax.networks.torsos import MLP, activation_by_name

__all__ = [
  "ActorCritic",
  "flatten_observation",
  "CategoricalHead",
  "GaussianHead",
  "MLP",
  "MLPPolicy",
  "ValueHead",
  "activation_by_name",
  "policy_noise",
  "sample_with_noise",
]
