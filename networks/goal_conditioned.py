"""Goal-conditioned networks of OGBench's agents (GCIVL, HIQL, OTA) and of HILP.

Park, Frans, Eysenbach, Levine. "OGBench: Benchmarking Offline Goal-Conditioned RL",
arXiv:2410.20092, `impls/utils/networks.py`: Dense -> GELU -> (LayerNorm) MLPs initialised with
variance_scaling(1, fan_avg, uniform) (`hrljax.networks.MLP` initialises orthogonally, so these
have their own MLP), ensembles of value heads, a Gaussian actor with a constant or learned
state-independent std; HIQL's goal representation φ([s; g]) (Park, Ghosh, Eysenbach, Levine,
arXiv:2307.11949, Sec. 4) and HILP's ensemble of state representations φ_i(s) (Park, Kreiman,
Levine, arXiv:2402.15567, Sec. 4).

`GoalHierarchy` wires the four networks of a HIQL-style hierarchy (φ, value heads on
[s; φ([s; g])], low actor on [s; φ([s; w])], high actor on [s; g] over the latent) into the
evaluations its losses and its policy need, so that HIQL and OTA share them.
"""

from typing import Callable, NamedTuple, Optional, Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.types import Array, PyTree


def default_init(scale: float = 1.0):
  """OGBench's initialiser: variance_scaling(scale, fan_avg, uniform)."""
  return nn.initializers.variance_scaling(scale, "fan_avg", "uniform")


class GoalMLP(nn.Module):
  """Dense → GELU → (LayerNorm) per layer; the last layer is linear unless `activate_final`."""

  hidden_sizes: Sequence[int]
  activate_final: bool = False
  layer_norm: bool = False

  @nn.compact
  def __call__(self, x: Array) -> Array:
    for i, size in enumerate(self.hidden_sizes):
      x = nn.Dense(size, kernel_init=default_init())(x)
      if i + 1 < len(self.hidden_sizes) or self.activate_final:
        x = nn.gelu(x)
        if self.layer_norm:
          x = nn.LayerNorm()(x)
    return x


class EnsembleValue(nn.Module):
  """`num_heads` independent scalar MLPs of the same input: [..., in] -> [..., num_heads]."""

  hidden_sizes: Sequence[int]
  layer_norm: bool = True
  num_heads: int = 2

  @nn.compact
  def __call__(self, x: Array) -> Array:
    heads = nn.vmap(
      GoalMLP,
      variable_axes={"params": 0},
      split_rngs={"params": True},
      in_axes=None,
      out_axes=-1,
      axis_size=self.num_heads,
    )
    out = heads(
      hidden_sizes=(*self.hidden_sizes, 1), activate_final=False, layer_norm=self.layer_norm
    )(x)
    return out[..., 0, :]


class GaussianActor(nn.Module):
  """N(mean(x), diag(exp(log_std)·temperature)²); log_std = 0 if `const_std` (OGBench GCActor)."""

  hidden_sizes: Sequence[int]
  action_dim: int
  const_std: bool = True
  final_init_scale: float = 1e-2

  @nn.compact
  def __call__(self, x: Array, temperature: float = 1.0) -> distrax.MultivariateNormalDiag:
    features = GoalMLP(self.hidden_sizes, activate_final=True)(x)
    mean = nn.Dense(self.action_dim, kernel_init=default_init(self.final_init_scale))(features)
    if self.const_std:
      log_std = jnp.zeros_like(mean)
    else:
      log_std = jnp.broadcast_to(
        self.param("log_stds", nn.initializers.zeros, (self.action_dim,)), mean.shape
      )
    scale = jnp.exp(jnp.clip(log_std, -5.0, 2.0)) * temperature
    return distrax.MultivariateNormalDiag(loc=mean, scale_diag=scale)


def sample_action(dist: distrax.MultivariateNormalDiag, key: Array, temperature: float) -> Array:
  """mean + temperature·std·ε, ε ~ N(0, I) (temperature 0: the mean), unclipped."""
  return dist.loc + temperature * dist.scale_diag * jax.random.normal(key, dist.loc.shape)


class GoalRep(nn.Module):
  """φ([s; g]): an MLP to `rep_dim`, then `normalize` (HIQL: rescaled to length √rep_dim).

  The caller passes the normalisation (`hrljax.losses.goal_conditioned.length_normalize` for
  HIQL), so that one function defines it for the network and for the policy's latent actions.
  """

  hidden_sizes: Sequence[int]
  rep_dim: int
  layer_norm: bool = True
  normalize: Callable[[Array], Array] = lambda x: x

  @nn.compact
  def __call__(self, x: Array) -> Array:
    x = GoalMLP(
      (*self.hidden_sizes, self.rep_dim), activate_final=False, layer_norm=self.layer_norm
    )(x)
    return self.normalize(x)


class PhiEnsemble(nn.Module):
  """`num` independent MLPs s -> R^out_dim: [..., D] -> [num, ..., out_dim]."""

  hidden_sizes: Sequence[int]
  out_dim: int
  layer_norm: bool = True
  num: int = 2

  @nn.compact
  def __call__(self, x: Array) -> Array:
    members = nn.vmap(
      GoalMLP,
      variable_axes={"params": 0},
      split_rngs={"params": True},
      in_axes=None,
      out_axes=0,
      axis_size=self.num,
    )
    return members(
      (*self.hidden_sizes, self.out_dim), activate_final=False, layer_norm=self.layer_norm
    )(x)


def pair(x: Array, y: Array) -> Array:
  """[x; y] on the last axis (a state with its goal, latent or action)."""
  return jnp.concatenate([x, y], axis=-1)


class ActorInputs(NamedTuple):
  """Network outputs behind HIQL's two AWR actor losses (values are mean-of-heads inputs)."""

  low_log_prob: Callable[[Array], Array]  # φ([s; w]) [B, R] -> log π^l(a | s, φ) [B]
  subgoal_rep: Array  # [B, R] φ([s; w]) (online, with gradient)
  v_next_w: Array  # [B, E] V(s', w), stored parameters
  v_w: Array  # [B, E] V(s, w), stored parameters
  high_log_prob: Callable[[Array], Array]  # latent [B, R] -> log π^h(z | s, g) [B]
  target_rep: Array  # [B, R] φ([s; s_target]), stored parameters
  v_target_g: Array  # [B, E] V_high(s_target, g), stored parameters
  v_g: Array  # [B, E] V_high(s, g), stored parameters


class GoalHierarchy(NamedTuple):
  """The networks of a HIQL-style hierarchy and their evaluations.

  Parameters are a dict with the groups `goal_rep`, `value`, `low_actor`, `high_actor` (further
  value groups, e.g. OTA's `high_value`, are value heads of the same architecture).
  """

  goal_rep: GoalRep
  value: EnsembleValue
  low_actor: GaussianActor
  high_actor: GaussianActor

  @classmethod
  def make(
    cls,
    value_hidden_sizes: Sequence[int],
    actor_hidden_sizes: Sequence[int],
    action_dim: int,
    rep_dim: int,
    layer_norm: bool,
    const_std: bool,
    normalize: Callable[[Array], Array],
  ) -> "GoalHierarchy":
    value_hidden_sizes, actor_hidden_sizes = tuple(value_hidden_sizes), tuple(actor_hidden_sizes)
    return cls(
      goal_rep=GoalRep(value_hidden_sizes, rep_dim, layer_norm, normalize),
      value=EnsembleValue(value_hidden_sizes, layer_norm),
      low_actor=GaussianActor(actor_hidden_sizes, action_dim, const_std),
      high_actor=GaussianActor(actor_hidden_sizes, rep_dim, const_std),
    )

  @property
  def rep_dim(self) -> int:
    return self.goal_rep.rep_dim

  def init(self, key: Array, observation_dim: int) -> dict:
    """Parameters {goal_rep, value, low_actor, high_actor} from four keys split off `key`."""
    keys = jax.random.split(key, 4)
    return {
      "goal_rep": self.goal_rep.init(keys[0], self.state_goal(observation_dim)),
      "value": self.value.init(keys[1], self.state_rep(observation_dim)),
      "low_actor": self.low_actor.init(keys[2], self.state_rep(observation_dim)),
      "high_actor": self.high_actor.init(keys[3], self.state_goal(observation_dim)),
    }

  def state_goal(self, observation_dim: int) -> Array:
    """A dummy [s; g] input, for `init`."""
    return jnp.zeros((1, 2 * observation_dim), jnp.float32)

  def state_rep(self, observation_dim: int) -> Array:
    """A dummy [s; φ] input, for `init` (of the value heads and the low actor)."""
    return jnp.zeros((1, observation_dim + self.rep_dim), jnp.float32)

  def rep(self, params: PyTree, obs: Array, goal: Array) -> Array:
    """[B, rep_dim] φ([s; g])."""
    return self.goal_rep.apply(params["goal_rep"], pair(obs, goal))

  def values(self, params: PyTree, heads: PyTree, obs: Array, goal: Array) -> Array:
    """[B, E] the value heads `heads` on [s; φ([s; g])], φ from `params`."""
    return self.value.apply(heads, pair(obs, self.rep(params, obs, goal)))

  def value_targets(
    self,
    params: PyTree,
    heads: PyTree,
    target_heads: PyTree,
    obs: Array,
    next_obs: Array,
    goal: Array,
  ) -> tuple[Array, Array, Array]:
    """The IVL loss's inputs V(s, g), V̄(s, g), V̄(s', g) (target heads on the online φ)."""
    return (
      self.values(params, heads, obs, goal),
      self.values(params, target_heads, obs, goal),
      self.values(params, target_heads, next_obs, goal),
    )

  def actor_inputs(self, params: PyTree, high_heads: str, batch: dict) -> ActorInputs:
    """What HIQL's low and high AWR actor losses take, on a batch of OGBench's `HGCDataset`
    layout (`hrljax.data.goal_sampler.sample_hgc_batch`), with the high actor's advantage on the
    value group `high_heads` (HIQL "value", OTA "high_value"). Advantages and the target latent
    use the stored (stop-gradient) parameters, as OGBench does."""
    obs, next_obs, actions = batch["observations"], batch["next_observations"], batch["actions"]
    low_goals, high_goals = batch["low_actor_goals"], batch["high_actor_goals"]
    high_targets = batch["high_actor_targets"]
    stored = jax.lax.stop_gradient(params)

    def low_log_prob(rep):
      return self.low_actor.apply(params["low_actor"], pair(obs, rep)).log_prob(actions)

    high_dist = self.high_actor.apply(params["high_actor"], pair(obs, high_goals))
    high_value = lambda x, g: self.values(stored, stored[high_heads], x, g)
    return ActorInputs(
      low_log_prob=low_log_prob,
      subgoal_rep=self.rep(params, obs, low_goals),
      v_next_w=self.values(stored, stored["value"], next_obs, low_goals),
      v_w=self.values(stored, stored["value"], obs, low_goals),
      high_log_prob=high_dist.log_prob,
      target_rep=self.rep(stored, obs, high_targets),
      v_target_g=high_value(high_targets, high_goals),
      v_g=high_value(obs, high_goals),
    )

  def act(
    self,
    params: PyTree,
    obs: Array,
    goal: Array,
    key: Array,
    temperature: float = 0.0,
    normalize: Optional[Callable[[Array], Array]] = None,
  ) -> Array:
    """Actions in [-1, 1]: a latent subgoal z ~ π^h(· | s, g), normalised like φ, then
    a ~ π^l(· | s, z); temperature 0 takes both means."""
    normalize = self.goal_rep.normalize if normalize is None else normalize
    high_key, low_key = jax.random.split(key)
    high = self.high_actor.apply(params["high_actor"], pair(obs, goal))
    z = normalize(sample_action(high, high_key, temperature))
    low = self.low_actor.apply(params["low_actor"], pair(obs, z))
    return jnp.clip(sample_action(low, low_key, temperature), -1.0, 1.0)
