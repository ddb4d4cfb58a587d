"""Continuous-control networks: a tanh-squashed Gaussian actor, a Q network over (obs, action), and
an ensemble wrapper (`nn.vmap` over parameters) for twin or wider critics.

The squashed Gaussian follows Haarnoja et al., "Soft Actor-Critic Algorithms and Applications",
arXiv:1812.05905, Appendix C ("Enforcing Action Bounds"): u ~ N(μ(s), σ(s)²), a = tanh(u), with
log π(a|s) = log N(u) − Σᵢ log(1 − tanh²(uᵢ)). Here the squashed action is further mapped
affinely onto `[action_low, action_high]` (default `[-1, 1]`), and the log-density includes that
map's log-Jacobian too. `rescale_action` is that affine map alone, for a policy that acts on
[-1, 1]^|A| and an environment with other bounds.
"""

import math
from typing import Any, Optional, Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from hrljax.networks.actor_critic import flatten_observation
from hrljax.networks.torsos import MLP


class SquashedGaussian(distrax.Transformed):
  """A diagonal Gaussian pushed through `tanh` and an affine map onto `[low, high]`.

  A `distrax.Transformed` with two additions: `mode()` is the image of the Gaussian's mean (the
  deterministic action), and `sample_and_log_prob` computes the log-density from the pre-squash
  sample through the bijector's stable log-Jacobian, never inverting `tanh` (`log_prob(a)` does
  invert it and loses precision as `a` approaches a bound). Distrax's own `sample_and_log_prob`
  broadcasts implicitly and fails under `jax_numpy_rank_promotion="raise"`; this one does not.
  `entropy()` has no closed form: estimate it as `-log_prob` of samples. Like every
  `distrax.Transformed`, build it inside the jitted function that uses it: it cannot be returned
  from one.
  """

  def __init__(self, loc: jax.Array, scale: jax.Array, low: jax.Array, high: jax.Array):
    # The affine map's parameters are broadcast to the event shape of every batch element
    # explicitly, so that the bijector never relies on implicit rank promotion.
    shift = jnp.broadcast_to((high + low) / 2.0, loc.shape)
    half_range = jnp.broadcast_to((high - low) / 2.0, loc.shape)
    bijector = distrax.Block(
      distrax.Chain([distrax.ScalarAffine(shift=shift, scale=half_range), distrax.Tanh()]), ndims=1
    )
    super().__init__(distrax.MultivariateNormalDiag(loc=loc, scale_diag=scale), bijector)

  def mode(self) -> jax.Array:
    return self.bijector.forward(self.distribution.mode())

  def _sample_n_and_log_prob(self, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    # One draw per key under vmap keeps the bijector's operands at the batch shape.
    return jax.vmap(self._sample_one_and_log_prob)(jax.random.split(key, n))

  def _sample_one_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    pre_squash = self.distribution.sample(seed=key)
    action, log_det = self.bijector.forward_and_log_det(pre_squash)
    return action, self.distribution.log_prob(pre_squash) - log_det


class TanhGaussianActor(nn.Module):
  """SAC's actor: an MLP torso, then the mean and the log standard deviation of a Gaussian whose
  samples are squashed by `tanh` onto `[action_low, action_high]`. Returns a `SquashedGaussian`.

  The log standard deviation is clipped to `[log_std_min, log_std_max]` = [-20, 2] by default
  (softlearning's bounds; CleanRL squashes it into [-5, 2] instead). `action_low`/`action_high`
  are scalars or `[action_dim]` sequences.
  """

  action_dim: int
  hidden_sizes: Sequence[int] = (256, 256)
  activation: str = "relu"
  observation_ndim: int = 1
  log_std_min: float = -20.0
  log_std_max: float = 2.0
  action_low: float | Sequence[float] = -1.0
  action_high: float | Sequence[float] = 1.0

  @nn.compact
  def __call__(self, obs: jax.Array) -> SquashedGaussian:
    features = MLP(self.hidden_sizes, self.activation)(
      flatten_observation(obs, self.observation_ndim)
    )
    mean = nn.Dense(self.action_dim, name="mean")(features)
    log_std = nn.Dense(self.action_dim, name="log_std")(features)
    log_std = jnp.clip(log_std, self.log_std_min, self.log_std_max)
    low = jnp.asarray(self.action_low, jnp.float32)
    high = jnp.asarray(self.action_high, jnp.float32)
    return SquashedGaussian(mean, jnp.exp(log_std), low, high)


class QNetwork(nn.Module):
  """A scalar Q(s, a) per batch row from the concatenation of the flat observation and action."""

  hidden_sizes: Sequence[int] = (256, 256)
  activation: str = "relu"
  observation_ndim: int = 1
  layer_norm: bool = False

  @nn.compact
  def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
    obs = flatten_observation(obs, self.observation_ndim)
    inputs = jnp.concatenate([obs, jnp.asarray(action, jnp.float32)], axis=-1)
    features = MLP(self.hidden_sizes, self.activation, layer_norm=self.layer_norm)(inputs)
    return jnp.squeeze(nn.Dense(1)(features), axis=-1)


def ensemble(module_class: type[nn.Module], num_members: int) -> type[nn.Module]:
  """`module_class` with `num_members` independent parameter sets, stacked on a leading axis.

  The returned class takes the same constructor fields and call arguments as `module_class`;
  every member sees the same inputs (not split), has its own initialisation, and the outputs are
  stacked on a new leading axis `[num_members, ...]`.
  """
  if isinstance(num_members, bool) or not isinstance(num_members, int) or num_members <= 0:
    raise ValueError(f"num_members: expected an integer > 0, got {num_members!r}")
  return nn.vmap(
    module_class,
    variable_axes={"params": 0},
    split_rngs={"params": True},
    in_axes=None,
    out_axes=0,
    axis_size=num_members,
  )


class QEnsemble(nn.Module):
  """`num_members` independent `QNetwork`s (2 = SAC's twin critics): returns `[num_members, B]`."""

  num_members: int = 2
  hidden_sizes: Sequence[int] = (256, 256)
  activation: str = "relu"
  observation_ndim: int = 1
  layer_norm: bool = False

  @nn.compact
  def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
    members = ensemble(QNetwork, self.num_members)
    return members(
      hidden_sizes=self.hidden_sizes,
      activation=self.activation,
      observation_ndim=self.observation_ndim,
      layer_norm=self.layer_norm,
      name="members",
    )(obs, action)


def action_bound_tuples(
  action_bounds: Optional[tuple[Any, Any]], action_dim: int
) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """`(low, high)` as Python tuples of `action_dim` floats ([-1, 1] if `action_bounds` is None).

  Tuples, not arrays, so that the bounds can be static fields of a train state. Raises
  ValueError unless every bound is finite with low < high.
  """
  low, high = (-1.0, 1.0) if action_bounds is None else action_bounds
  as_tuple = lambda x: tuple(
    float(v) for v in np.broadcast_to(np.asarray(x, np.float64), (action_dim,))
  )
  low, high = as_tuple(low), as_tuple(high)
  if not all(math.isfinite(l) and math.isfinite(h) and l < h for l, h in zip(low, high)):
    raise ValueError(f"action_bounds: expected finite bounds with low < high, got {low}, {high}")
  return low, high


def rescale_action(normalized: jax.Array, low: tuple, high: tuple) -> jax.Array:
  """Maps actions in [-1, 1]^|A| (trailing axis) affinely onto `[low, high]`."""
  shape = (1,) * (normalized.ndim - 1) + (len(low),)
  low = jnp.asarray(low, jnp.float32).reshape(shape)
  high = jnp.asarray(high, jnp.float32).reshape(shape)
  return low + (normalized + 1.0) * 0.5 * (high - low)
