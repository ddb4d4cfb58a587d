"""Torsos: feature extractors shared by heads."""

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.networks import initializers

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
  "tanh": jnp.tanh,
  "relu": nn.relu,
  "gelu": nn.gelu,
  "silu": nn.silu,
}


def activation_by_name(name: str) -> Callable[[jax.Array], jax.Array]:
  """The activation function called `name`; ValueError naming the choices otherwise."""
  if name not in ACTIVATIONS:
    raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {name!r}")
  return ACTIVATIONS[name]


class MLP(nn.Module):
  """Dense layers with orthogonal initialisation (scale √2, zero bias), as in PPO implementations.

  `activate_final` applies the activation after the last layer too; `layer_norm` normalises every
  hidden layer before its activation.
  """

  hidden_sizes: Sequence[int]
  activation: str = "tanh"
  activate_final: bool = True
  layer_norm: bool = False

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    act = activation_by_name(self.activation)
    for i, size in enumerate(self.hidden_sizes):
      x = nn.Dense(
        size, kernel_init=initializers.orthogonal(jnp.sqrt(2.0)), bias_init=nn.initializers.zeros
      )(x)
      is_last = i == len(self.hidden_sizes) - 1
      if self.layer_norm and not is_last:
        x = nn.LayerNorm()(x)
      if not is_last or self.activate_final:
        x = act(x)
    return x
