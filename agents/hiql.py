"""HIQL: hierarchical implicit Q-learning with latent subgoals, trained offline.

Park, Ghosh, Eysenbach, Levine. "HIQL: Offline Goal-Conditioned RL with Latent States as
Actions", arXiv:2307.11949, Sec. 4 (value Eq. 4, high/low AWR objectives); implemented as in
OGBench's `impls/agents/hiql.py` (Park, Frans, Eysenbach, Levine, arXiv:2410.20092;
seohongpark/ogbench @1d41409), which the HIQL README recommends. Defaults: OGBench's `get_config`
(HGCDataset sampling, subgoal_steps 25, expectile 0.7, α_low = α_high = 3).

Networks (parameter groups in `params`):
  goal_rep    φ([s; g]) = LengthNormalize(MLP(512x3 + rep_dim 10)), norm √rep_dim;
  value       V_i(s, g) = MLP_i([s; φ([s; g])]), two heads, GELU + LayerNorm;
  low_actor   π^l(a | s, φ([s; w])) = N(MLP([s; φ]), 1);
  high_actor  π^h(z | s, g) = N(MLP([s; g]), 1) over the rep_dim latent;
  target      V̄: the value heads only; the target value uses the ONLINE φ (OGBench shares the
              one φ parameter set, so only the heads are Polyak-averaged).

Loss = value + low actor + high actor, one Adam (lr 3e-4):
  value       IVL expectile loss on (s, s', value goal), `gc.ivl_value_loss_batch`; the only
              loss that trains φ;
  low actor   AWR with A^l = V(s', w) − V(s, w), w = s_{min(i+k, traj_end)}
              (`gc.hiql_low_actor_loss`); φ([s; w]) under stop-gradient unless
              `low_actor_rep_grad`;
  high actor  AWR on log π^h(φ([s; s_target]) | s, g) with A^h = V(s_target, g) − V(s, g),
              s_target = s_{min(i+k, goal)} (`gc.hiql_high_actor_loss`), target latent without
              gradient.
Acting: z = mean (temperature 0) of π^h, renormalised to length √rep_dim, then the low actor's
mean; actions clipped to [-1, 1]; a new subgoal at every step.

Deviations (see also `hrljax.agents.gcivl` for the device-side sampler, the evaluation split and
the `env_steps` count): none in the losses. `train_schedule` (joint vs value-first, ogbench #33)
is not offered: joint training, as in the reference code, is the only schedule.
"""

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax.agents import common, gcivl
from hrljax.agents.gcivl import evaluate_tasks  # noqa: F401  (same OGBench evaluation)
from hrljax import config_checks as checks
from hrljax.data import goal_sampler
from hrljax.losses import goal_conditioned as gc
from hrljax.training import Learner
from hrljax.types import Array, PyTree


def get_config() -> ml_collections.ConfigDict:
  """HIQL hyperparameters: OGBench's `get_config` (its point-maze lines keep every default)."""
  config = gcivl.get_config()
  config.agent = "hiql"
  del config.alpha
  config.expectile = 0.7
  config.low_alpha = 3.0
  config.high_alpha = 3.0
  config.subgoal_steps = 25
  config.rep_dim = 10
  config.low_actor_rep_grad = False
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive(config, "low_alpha", "high_alpha")
  checks.in_unit_interval(config, "expectile")
  checks.positive_int(config, "subgoal_steps", "rep_dim")
  gcivl.validate_common(config, num_devices)  # the dataset file is checked last


class GoalRep(nn.Module):
  """φ([s; g]): an MLP to `rep_dim`, rescaled to length √rep_dim."""

  hidden_dims: tuple
  rep_dim: int
  layer_norm: bool = True

  @nn.compact
  def __call__(self, x: Array) -> Array:
    x = gcivl.GoalMLP((*self.hidden_dims, self.rep_dim), activate_final=False,
                      layer_norm=self.layer_norm)(x)
    return gc.length_normalize(x)


class HIQLAgent(struct.PyTreeNode):
  """HIQL's train state: params {goal_rep, value, low_actor, high_actor}, target value heads."""

  params: PyTree
  target_params: PyTree  # the value heads only (φ is shared with the online network)
  opt_state: PyTree
  goal_rep_net: nn.Module = struct.field(pytree_node=False)
  value_net: nn.Module = struct.field(pytree_node=False)
  low_actor_net: nn.Module = struct.field(pytree_node=False)
  high_actor_net: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, observation_dim: int, action_dim: int, config) -> "HIQLAgent":
    config = ml_collections.FrozenConfigDict(config)
    goal_rep_net = GoalRep(tuple(config.value_hidden_dims), config.rep_dim, config.layer_norm)
    value_net = gcivl.EnsembleValue(tuple(config.value_hidden_dims), config.layer_norm)
    low_actor_net = gcivl.GaussianActor(tuple(config.actor_hidden_dims), action_dim,
                                        config.const_std)
    high_actor_net = gcivl.GaussianActor(tuple(config.actor_hidden_dims), config.rep_dim,
                                         config.const_std)
    keys = jax.random.split(key, 4)
    pair = jnp.zeros((1, 2 * observation_dim), jnp.float32)
    with_rep = jnp.zeros((1, observation_dim + config.rep_dim), jnp.float32)
    params = {"goal_rep": goal_rep_net.init(keys[0], pair),
              "value": value_net.init(keys[1], with_rep),
              "low_actor": low_actor_net.init(keys[2], with_rep),
              "high_actor": high_actor_net.init(keys[3], pair)}
    tx = gcivl.make_optimizer(config)
    return cls(params=params, target_params=params["value"], opt_state=tx.init(params),
               goal_rep_net=goal_rep_net, value_net=value_net, low_actor_net=low_actor_net,
               high_actor_net=high_actor_net, tx=tx, config=config)

  def goal_rep(self, params: PyTree, obs: Array, goal: Array) -> Array:
    """[B, rep_dim] φ([s; g])."""
    return self.goal_rep_net.apply(params["goal_rep"], jnp.concatenate([obs, goal], axis=-1))

  def value(self, params: PyTree, obs: Array, goal: Array, heads: PyTree = None) -> Array:
    """[B, E] V_i(s, φ([s; g])); `heads` replaces the value heads (the target network)."""
    heads = params["value"] if heads is None else heads
    rep = self.goal_rep(params, obs, goal)
    return self.value_net.apply(heads, jnp.concatenate([obs, rep], axis=-1))

  def loss_terms(self, params: PyTree, batch: dict) -> tuple[dict, dict]:
    """The three batch-mean losses {value, low_actor, high_actor} and the metrics."""
    config = self.config
    obs, next_obs = batch["observations"], batch["next_observations"]
    # value: online heads and φ; the targets (target heads on the online φ) carry no gradient
    v = self.value(params, obs, batch["value_goals"])
    v_tgt = self.value(params, obs, batch["value_goals"], heads=self.target_params)
    next_v_tgt = self.value(params, next_obs, batch["value_goals"], heads=self.target_params)
    value_loss, value_extras = gc.ivl_value_loss_batch(
        v, v_tgt, next_v_tgt, batch["rewards"], config.discount * batch["masks"], config.expectile)

    actor_losses, actor_metrics = hierarchical_actor_losses(self, params, batch, self.value)
    losses = {"value": value_loss, **actor_losses}
    metrics = {"value_loss": value_loss, "v_mean": v.mean(),
               "value_advantage": value_extras.advantage.mean(), **actor_metrics}
    return losses, metrics

  def loss(self, params: PyTree, batch: dict) -> tuple[Array, dict]:
    """value + low actor + high actor, unweighted (OGBench)."""
    losses, metrics = self.loss_terms(params, batch)
    total = losses["value"] + losses["low_actor"] + losses["high_actor"]
    return total, {"loss": total, **metrics}

  def update(self, batch: dict) -> tuple["HIQLAgent", dict]:
    """One Adam step on the joint loss, then Polyak of the value heads (pre-step parameters)."""
    return update_with_targets(self, batch, {"target_params": "value"})

  def act(self, obs: Array, goal: Array, key: Array, temperature: float = 0.0) -> Array:
    """Actions in [-1, 1] for observations and goals [..., D]: latent subgoal, then low action."""
    high_key, low_key = jax.random.split(key)
    high = self.high_actor_net.apply(self.params["high_actor"],
                                     jnp.concatenate([obs, goal], axis=-1))
    z = high.loc + temperature * high.scale_diag * jax.random.normal(high_key, high.loc.shape)
    z = gc.length_normalize(z)
    low = self.low_actor_net.apply(self.params["low_actor"], jnp.concatenate([obs, z], axis=-1))
    action = low.loc + temperature * low.scale_diag * jax.random.normal(low_key, low.loc.shape)
    return jnp.clip(action, -1.0, 1.0)


def hierarchical_actor_losses(agent, params: PyTree, batch: dict,
                              high_value: Callable[..., Array]) -> tuple[dict, dict]:
  """HIQL's two AWR actor losses {low_actor, high_actor} and their metrics, shared with OTA.

  `agent` has HIQL's networks (`goal_rep`, `value`, `low_actor_net`, `high_actor_net`);
  `high_value(params, obs, goal) -> [B, E]` is the value in the high actor's advantage: HIQL's
  value (`agent.value`), or OTA's option-aware V^h. Both advantages use the stored parameters
  (no gradient), as OGBench does.
  """
  config = agent.config
  obs, next_obs = batch["observations"], batch["next_observations"]
  stored = jax.lax.stop_gradient(params)
  low_goals = batch["low_actor_goals"]

  def low_log_prob(rep):
    dist = agent.low_actor_net.apply(params["low_actor"], jnp.concatenate([obs, rep], axis=-1))
    return dist.log_prob(batch["actions"])

  low_loss, low_extras = gc.hiql_low_actor_loss(
      low_log_prob, agent.goal_rep(params, obs, low_goals),
      agent.value(stored, next_obs, low_goals), agent.value(stored, obs, low_goals),
      config.low_alpha, rep_grad=config.low_actor_rep_grad)

  high_goals, targets = batch["high_actor_goals"], batch["high_actor_targets"]
  high_dist = agent.high_actor_net.apply(params["high_actor"],
                                         jnp.concatenate([obs, high_goals], axis=-1))
  high_loss, high_extras = gc.hiql_high_actor_loss(
      high_dist.log_prob, agent.goal_rep(stored, obs, targets),
      high_value(stored, targets, high_goals), high_value(stored, obs, high_goals),
      config.high_alpha)
  losses = {"low_actor": low_loss, "high_actor": high_loss}
  metrics = {
      "low_actor_loss": low_loss, "high_actor_loss": high_loss,
      "low_advantage": low_extras.advantage.mean(),
      "high_advantage": high_extras.advantage.mean(),
      "low_awr_weight": low_extras.weights.mean(), "high_awr_weight": high_extras.weights.mean(),
      "low_bc_log_prob": low_extras.log_prob.mean(),
      "high_bc_log_prob": high_extras.log_prob.mean(),
  }
  return losses, metrics


def update_with_targets(agent, batch: dict, targets: dict[str, str]):
  """One optimizer step on `agent.loss`, then each target field ← Polyak(field, pre-step
  `params[group]`) for `targets = {field: group}` (OGBench's order: the targets follow the
  parameters from BEFORE the step). HIQL: {"target_params": "value"}; OTA adds its V^h heads."""
  stepped, metrics = common.gradient_step(agent, agent.loss, batch)
  tau = agent.config.tau
  new_targets = {field: gcivl.polyak(getattr(agent, field), agent.params[group], tau)
                 for field, group in targets.items()}
  return stepped.replace(**new_targets), metrics


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """HIQL's offline `Learner` (one update per step on a `sample_hgc_batch` batch)."""
  return gcivl.make_offline_learner(config, HIQLAgent, goal_sampler.sample_hgc_batch)
