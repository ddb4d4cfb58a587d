"""OTA: HIQL with an option-aware, temporally abstracted high-level value, trained offline.

Ahn, Choi, Han, Moon. "Option-aware Temporally Abstracted Value for Offline Goal-Conditioned
Reinforcement Learning", arXiv:2505.12737 (option-aware TD objective; official code ota-v/ota-v,
read in the vendored copy ktolnos/TTGS `impls/ota-v/{agents/ota.py, utils/datasets.py}` @4408b01).
It is HIQL (Park, Ghosh, Eysenbach, Levine, arXiv:2307.11949, as in OGBench's
`impls/agents/hiql.py`) plus a second value V^h in which one option of n = `abstraction_factor`
env steps is one Bellman step:

  option end  o = min(i + n, goal) for a goal drawn from i's trajectory (the option ends early
              at the goal), o = min(i + n, traj_end) for a random goal (time-out); a "current"
              goal (p = value_p_curgoal) is replaced by o itself (`gc.ota_option_indices`);
  target      y_i = r^h + γ_h·m^h·V̄^h_i(s_o, g), r^h = 1[o == g] − 1, m^h = 1 − 1[o == g]:
              reward −1 per OPTION and ONE discount γ_h = γ per option (not γⁿ), so V^h counts
              about −(options to the goal): the horizon contraction;
  loss        the IVL expectile loss (`gc.ota_high_value_loss`, vmapped) with τ = `expectile`.

Networks (`hrljax.networks.goal_conditioned.GoalHierarchy`; parameter groups in `params`):
`goal_rep` φ([s; g]) (one parameter set, shared by both values as in the reference, where one
`goal_rep_def` instance sits in every value encoder), `value` V^l and `high_value` V^h (two-head
MLPs of [s; φ([s; g])], 512x3 GELU + LayerNorm), `low_actor`, `high_actor`. Targets:
`target_params` (V^l heads) and `high_target_params` (V^h heads), both Polyak-averaged
(τ = 0.005) from the pre-step online parameters; the targets use the online φ. Total loss = low
value + high value + low actor + high actor, unweighted, one Adam.

  low value   IVL on (s, s', value goal) with γ (as HIQL);
  low actor   AWR with A^l = V^l(s', w) − V^l(s, w), w = s_{min(i+k, traj_end)} (as HIQL);
  high actor  AWR on log π^h(φ([s; s_target]) | s, g) with A^h = V^h(s_target, g) − V^h(s, g):
              the ONLY place V^h is used. Acting is HIQL's (latent subgoal, then low action).

Defaults: the reference `get_config` = HIQL's (expectile 0.7, alphas 3, subgoal_steps 25,
rep_dim 10) plus `abstraction_factor = 5` (README: "keep HIQL's hyperparameters and tune only n";
per-environment n values in the official `hyperparameters.sh` were not readable) and
`high_gamma = gamma` (None here means "equal to `gamma`", so a giant-maze `gamma=0.995` carries
over).

Deviations, each deliberate:
  * the high-value goal, option end, reward and mask are drawn on the device from a key, with a
    goal draw independent of the low-value goal draw (as in the reference); the reference splits
    trajectory vs random goals at p_traj / (1 − p_cur + 1e-6), we at p_traj / (1 − p_cur);
  * the device sampler, the evaluation split and the `env_steps` count of `hrljax.offline`.
"""

import functools

import jax
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

GROUPS = ("goal_rep", "value", "high_value", "low_actor", "high_actor")


def get_config() -> ml_collections.ConfigDict:
  """OTA hyperparameters: HIQL's (OGBench `get_config`) plus `abstraction_factor = 5`."""
  config = offline.default_config("ota")
  config.actor_hidden_sizes = (512, 512, 512)
  config.value_hidden_sizes = (512, 512, 512)  # also φ's MLP
  config.layer_norm = True  # in the value and φ MLPs
  config.tau = 0.005  # Polyak rate of both target value heads
  config.expectile = 0.7  # of both values
  config.low_alpha = 3.0  # AWR inverse temperature of the low actor
  config.high_alpha = 3.0  # AWR inverse temperature of the high actor
  config.subgoal_steps = 25  # k: subgoals k states ahead
  config.rep_dim = 10  # dimension of the latent subgoal φ
  config.low_actor_rep_grad = False  # whether the low actor's loss trains φ
  config.const_std = True  # actor stds fixed at 1
  config.abstraction_factor = 5  # n: env steps per option of the high value
  config.high_gamma = ml_collections.config_dict.placeholder(float)  # None: equal to `gamma`
  return config


def high_gamma(config) -> float:
  """γ_h: `config.high_gamma`, or `config.gamma` when it is None (the reference's choice:
  one discount per option, not γⁿ)."""
  return float(config.gamma if config.high_gamma is None else config.high_gamma)


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(config, "abstraction_factor")
  if config.high_gamma is not None:
    checks.in_unit_interval(config, "high_gamma")
  checks.positive(config, "low_alpha", "high_alpha")
  checks.in_unit_interval(config, "expectile")
  checks.positive_int(config, "subgoal_steps", "rep_dim")
  offline.validate_config(config, num_devices)


def sample_ota_batch(
  key: Array,
  data: goal_sampler.GoalDataset,
  batch_size: int,
  config: goal_sampler.SamplerConfig,
  abstraction_factor: int,
) -> dict:
  """One OTA batch: OGBench's `HGCDataset.sample` keys plus the option-aware high-value keys
  `high_value_goals, high_value_option_observations, high_value_rewards, high_value_masks`
  (the reference's names). Pure function of the key; batch-level."""
  idx_key, value_key, high_key, option_key = jax.random.split(key, 4)
  batch, idx, end = goal_sampler.sample_hgc_rows(
    idx_key, value_key, high_key, data, batch_size, config
  )
  draw = goal_sampler.sample_goal_indices(
    option_key, idx, end, data.traj_end.shape[0], config.value, config.gamma, config.gc_negative
  )
  option = gc.ota_option_indices(
    idx,
    end,
    draw.drawn_idx,
    draw.is_traj,
    draw.is_cur,
    abstraction_factor,
    gc_negative=config.gc_negative,
  )
  return {
    **batch,
    "high_value_goals": goal_sampler.rows(data, option.goal_idx),
    "high_value_option_observations": goal_sampler.rows(data, option.option_idx),
    "high_value_rewards": option.reward,
    "high_value_masks": option.mask,
  }


class OTAAgent(struct.PyTreeNode):
  """OTA's train state: params {goal_rep, value, high_value, low_actor, high_actor} and the
  target heads of both values (φ is shared with the online networks)."""

  params: PyTree
  target_params: PyTree  # V^l heads
  high_target_params: PyTree  # V^h heads
  opt_state: PyTree
  nets: gcn.GoalHierarchy = struct.field(pytree_node=False)  # V^h has V^l's architecture
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, observation_dim: int, action_dim: int, config) -> "OTAAgent":
    config = ml_collections.FrozenConfigDict(config)
    nets = gcn.GoalHierarchy.make(
      config.value_hidden_sizes,
      config.actor_hidden_sizes,
      action_dim,
      config.rep_dim,
      config.layer_norm,
      config.const_std,
      normalize=gc.length_normalize,
    )
    params = nets.init(key, observation_dim)
    params["high_value"] = nets.value.init(
      jax.random.fold_in(key, 1), nets.state_rep(observation_dim)
    )
    tx = offline.make_optimizer(config)
    return cls(
      params=params,
      target_params=params["value"],
      high_target_params=params["high_value"],
      opt_state=tx.init(params),
      nets=nets,
      tx=tx,
      config=config,
    )

  def value(
    self, params: PyTree, obs: Array, goal: Array, heads: PyTree = None, level: str = "low"
  ) -> Array:
    """[B, E] V^l (level "low") or V^h ("high") of (s, φ([s; g])); `heads` replaces the heads."""
    if heads is None:
      heads = params["value" if level == "low" else "high_value"]
    return self.nets.values(params, heads, obs, goal)

  def loss_terms(self, params: PyTree, batch: dict) -> tuple[dict, dict]:
    """The four batch-mean losses {value, high_value, low_actor, high_actor} and the metrics."""
    config = self.config
    obs, next_obs = batch["observations"], batch["next_observations"]
    v, v_tgt, next_v_tgt = self.nets.value_targets(
      params, params["value"], self.target_params, obs, next_obs, batch["value_goals"]
    )
    value_loss, value_extras = gc.ivl_value_loss_batch(
      v, v_tgt, next_v_tgt, batch["rewards"], config.gamma * batch["masks"], config.expectile
    )

    vh, vh_tgt, option_vh_tgt = self.nets.value_targets(
      params,
      params["high_value"],
      self.high_target_params,
      obs,
      batch["high_value_option_observations"],
      batch["high_value_goals"],
    )
    high_value_losses, high_value_extras = jax.vmap(
      functools.partial(
        gc.ota_high_value_loss, high_discount=high_gamma(config), expectile=config.expectile
      )
    )(vh, vh_tgt, option_vh_tgt, batch["high_value_rewards"], batch["high_value_masks"])
    high_value_loss = jnp.mean(high_value_losses)

    _, actor = gc.hiql_actor_losses(
      *self.nets.actor_inputs(params, "high_value", batch),
      config.low_alpha,
      config.high_alpha,
      rep_grad=config.low_actor_rep_grad,
    )
    losses = {
      "value": value_loss,
      "high_value": high_value_loss,
      "low_actor": actor.low_actor_loss,
      "high_actor": actor.high_actor_loss,
    }
    metrics = {
      "value_loss": value_loss,
      "high_value_loss": high_value_loss,
      "v_mean": v.mean(),
      "high_v_mean": vh.mean(),
      "value_advantage": value_extras.advantage.mean(),
      "high_value_advantage": high_value_extras.advantage.mean(),
      **actor.summary(),
    }
    return losses, metrics

  def loss(self, params: PyTree, batch: dict) -> tuple[Array, dict]:
    """low value + high value + low actor + high actor, unweighted (the reference)."""
    losses, metrics = self.loss_terms(params, batch)
    total = sum(losses.values())
    return total, {"loss": total, **metrics}

  def update(self, batch: dict) -> tuple["OTAAgent", dict]:
    """One Adam step on the joint loss, then Polyak of both value heads (pre-step parameters)."""
    stepped, metrics = common.gradient_step(self, self.loss, batch)
    tau = self.config.tau
    return stepped.replace(
      target_params=offline.polyak(self.target_params, self.params["value"], tau),
      high_target_params=offline.polyak(self.high_target_params, self.params["high_value"], tau),
    ), metrics

  def act(self, obs: Array, goal: Array, key: Array, temperature: float = 0.0) -> Array:
    """HIQL's hierarchy at inference (latent subgoal, then low action): V^h plays no part."""
    return self.nets.act(self.params, obs, goal, key, temperature)

  def goal_values(self, obs: Array, goal: Array) -> dict:
    """{"v": V^l, "vh": V^h}, each [B] and averaged over its heads (`path_values`)."""
    return {
      "v": jnp.mean(self.value(self.params, obs, goal), axis=-1),
      "vh": jnp.mean(self.value(self.params, obs, goal, level="high"), axis=-1),
    }


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """OTA's offline `Learner` (one update per step on a `sample_ota_batch` batch)."""
  sample = functools.partial(sample_ota_batch, abstraction_factor=int(config.abstraction_factor))
  return offline.make_learner(config, OTAAgent.create, sample)
