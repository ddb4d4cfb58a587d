"""HIQL: hierarchical implicit Q-learning with latent subgoals, trained offline.

Park, Ghosh, Eysenbach, Levine. "HIQL: Offline Goal-Conditioned RL with Latent States as
Actions", arXiv:2307.11949, Sec. 4 (value Eq. 4, high/low AWR objectives); implemented as in
OGBench's `impls/agents/hiql.py` (Park, Frans, Eysenbach, Levine, arXiv:2410.20092;
seohongpark/ogbench @1d41409), which the HIQL README recommends. Defaults: OGBench's `get_config`
(HGCDataset sampling, subgoal_steps 25, expectile 0.7, α_low = α_high = 3).

Networks (`hrljax.networks.goal_conditioned.GoalHierarchy`; parameter groups in `params`):
  goal_rep    φ([s; g]) = LengthNormalize(MLP(512x3 + rep_dim 10)), norm √rep_dim;
  value       V_i(s, g) = MLP_i([s; φ([s; g])]), two heads, GELU + LayerNorm;
  low_actor   π^l(a | s, φ([s; w])) = N(MLP([s; φ]), 1);
  high_actor  π^h(z | s, g) = N(MLP([s; g]), 1) over the rep_dim latent;
  target      V̄: the value heads only; the target value uses the ONLINE φ (OGBench shares the
              one φ parameter set, so only the heads are Polyak-averaged).

Loss = value + low actor + high actor, one Adam (learning rate 3e-4):
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

Deviations: none in the losses; the device-side sampler, the evaluation split and the
`env_steps` count are those of `hrljax.offline`. `train_schedule` (joint vs value-first,
ogbench #33) is not offered: joint training, as in the reference code, is the only schedule.
"""

import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import offline
from hrljax.agents import common
from hrljax.data import goal_sampler
from hrljax.losses import goal_conditioned as gc
from hrljax.networks import goal_conditioned as gcn
from hrljax.training import Learner
from hrljax.types import Array, PyTree


def get_config() -> ml_collections.ConfigDict:
  """HIQL hyperparameters: OGBench's `get_config` (its point-maze lines keep every default)."""
  config = offline.default_config("hiql")
  config.actor_hidden_sizes = (512, 512, 512)
  config.value_hidden_sizes = (512, 512, 512)  # also φ's MLP
  config.layer_norm = True  # in the value and φ MLPs
  config.tau = 0.005  # Polyak rate of the target value heads
  config.expectile = 0.7
  config.low_alpha = 3.0  # AWR inverse temperature of the low actor
  config.high_alpha = 3.0  # AWR inverse temperature of the high actor
  config.subgoal_steps = 25  # k: subgoals k states ahead
  config.rep_dim = 10  # dimension of the latent subgoal φ
  config.low_actor_rep_grad = False  # whether the low actor's loss trains φ
  config.const_std = True  # actor stds fixed at 1
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive(config, "low_alpha", "high_alpha")
  checks.in_unit_interval(config, "expectile")
  checks.positive_int(config, "subgoal_steps", "rep_dim")
  offline.validate_config(config, num_devices)


def make_networks(config, action_dim: int) -> gcn.GoalHierarchy:
  """φ, the value heads and both actors, with HIQL's length-normalised φ."""
  return gcn.GoalHierarchy.make(
    config.value_hidden_sizes,
    config.actor_hidden_sizes,
    action_dim,
    config.rep_dim,
    config.layer_norm,
    config.const_std,
    normalize=gc.length_normalize,
  )


class HIQLAgent(struct.PyTreeNode):
  """HIQL's train state: params {goal_rep, value, low_actor, high_actor}, target value heads."""

  params: PyTree
  target_params: PyTree  # the value heads only (φ is shared with the online network)
  opt_state: PyTree
  nets: gcn.GoalHierarchy = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, observation_dim: int, action_dim: int, config) -> "HIQLAgent":
    config = ml_collections.FrozenConfigDict(config)
    nets = make_networks(config, action_dim)
    params = nets.init(key, observation_dim)
    tx = offline.make_optimizer(config)
    return cls(
      params=params,
      target_params=params["value"],
      opt_state=tx.init(params),
      nets=nets,
      tx=tx,
      config=config,
    )

  def goal_rep(self, params: PyTree, obs: Array, goal: Array) -> Array:
    """[B, rep_dim] φ([s; g])."""
    return self.nets.rep(params, obs, goal)

  def value(self, params: PyTree, obs: Array, goal: Array, heads: PyTree = None) -> Array:
    """[B, E] V_i(s, φ([s; g])); `heads` replaces the value heads (the target network)."""
    return self.nets.values(params, params["value"] if heads is None else heads, obs, goal)

  def loss_terms(self, params: PyTree, batch: dict) -> tuple[dict, dict]:
    """The three batch-mean losses {value, low_actor, high_actor} and the metrics."""
    config = self.config
    obs, next_obs = batch["observations"], batch["next_observations"]
    # value: online heads and φ; the targets (target heads on the online φ) carry no gradient
    v, v_tgt, next_v_tgt = self.nets.value_targets(
      params, params["value"], self.target_params, obs, next_obs, batch["value_goals"]
    )
    value_loss, value_extras = gc.ivl_value_loss_batch(
      v, v_tgt, next_v_tgt, batch["rewards"], config.gamma * batch["masks"], config.expectile
    )
    _, actor = gc.hiql_actor_losses(
      *self.nets.actor_inputs(params, "value", batch),
      config.low_alpha,
      config.high_alpha,
      rep_grad=config.low_actor_rep_grad,
    )
    losses = {
      "value": value_loss,
      "low_actor": actor.low_actor_loss,
      "high_actor": actor.high_actor_loss,
    }
    metrics = {
      "value_loss": value_loss,
      "v_mean": v.mean(),
      "value_advantage": value_extras.advantage.mean(),
      **actor.summary(),
    }
    return losses, metrics

  def loss(self, params: PyTree, batch: dict) -> tuple[Array, dict]:
    """value + low actor + high actor, unweighted (OGBench)."""
    losses, metrics = self.loss_terms(params, batch)
    total = losses["value"] + losses["low_actor"] + losses["high_actor"]
    return total, {"loss": total, **metrics}

  def update(self, batch: dict) -> tuple["HIQLAgent", dict]:
    """One Adam step on the joint loss, then Polyak of the value heads (pre-step parameters)."""
    stepped, metrics = common.gradient_step(self, self.loss, batch)
    target = offline.polyak(self.target_params, self.params["value"], self.config.tau)
    return stepped.replace(target_params=target), metrics

  def act(self, obs: Array, goal: Array, key: Array, temperature: float = 0.0) -> Array:
    """Actions in [-1, 1] for observations and goals [..., D]: latent subgoal, then low action."""
    return self.nets.act(self.params, obs, goal, key, temperature)

  def goal_values(self, obs: Array, goal: Array) -> dict:
    """{"v": [B] mean over the heads of V(s, g)} (`hrljax.ogbench_evaluation.path_values`)."""
    return {"v": jnp.mean(self.value(self.params, obs, goal), axis=-1)}


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """HIQL's offline `Learner` (one update per step on a `sample_hgc_batch` batch)."""
  return offline.make_learner(config, HIQLAgent.create, goal_sampler.sample_hgc_batch)
