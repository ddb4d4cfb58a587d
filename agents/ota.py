"""OTA: HIQL with an option-aware, temporally abstracted high-level value, trained offline.

Ahn, Choi, Han, Moon. "Option-aware Temporally Abstracted Value for Offline Goal-Conditioned
Reinforcement Learning", arXiv:2505.12737 (option-aware TD objective; official code ota-v/ota-v,
read in the vendored copy ktolnos/TTGS `impls/ota-v/{agents/ota.py, utils/datasets.py}` @4408b01).
It is HIQL (`hrljax.agents.hiql`; Park et al., arXiv:2307.11949, as in OGBench's
`impls/agents/hiql.py`) plus a second value V^h in which one option of n = `abstraction_factor`
env steps is one Bellman step:

  option end  o = min(i + n, goal) for a goal drawn from i's trajectory (the option ends early
              at the goal), o = min(i + n, traj_end) for a random goal (time-out); a "current"
              goal (p = value_p_curgoal) is replaced by o itself
              (`hrljax.data.goal_sampler.sample_ota_goals`, `gc.ota_option_indices`);
  target      y_i = r^h + γ_h·m^h·V̄^h_i(s_o, g), r^h = 1[o == g] − 1, m^h = 1 − 1[o == g]:
              reward −1 per OPTION and ONE discount γ_h = γ per option (not γⁿ), so V^h counts
              about −(options to the goal): the horizon contraction;
  loss        the IVL expectile loss (`gc.ota_high_value_loss`, vmapped) with τ = `expectile`.

Networks (parameter groups in `params`): `goal_rep` φ([s; g]) (one parameter set, shared by both
values as in the reference, where one `goal_rep_def` instance sits in every value encoder),
`value` V^l and `high_value` V^h (two-head MLPs of [s; φ([s; g])], 512x3 GELU + LayerNorm),
`low_actor`, `high_actor`. Targets: `target_params` (V^l heads) and `high_target_params` (V^h
heads), both Polyak-averaged (τ = 0.005) from the pre-step online parameters; the targets use the
online φ. Total loss = low value + high value + low actor + high actor, unweighted, one Adam.
The actor losses and the update step are HIQL's own functions (`hiql.hierarchical_actor_losses`
with V^h as the high actor's value, `hiql.update_with_targets` with both target head sets).

  low value   IVL on (s, s', value goal) with γ (as HIQL);
  low actor   AWR with A^l = V^l(s', w) − V^l(s, w), w = s_{min(i+k, traj_end)} (as HIQL);
  high actor  AWR on log π^h(φ([s; s_target]) | s, g) with A^h = V^h(s_target, g) − V^h(s, g):
              the ONLY place V^h is used. Acting is HIQL's (latent subgoal, then low action).

Defaults: the reference `get_config` = HIQL's (expectile 0.7, alphas 3, subgoal_steps 25,
rep_dim 10) plus `abstraction_factor = 5` (README: "keep HIQL's hyperparameters and tune only n";
per-environment n values in the official `hyperparameters.sh` were not readable) and
`high_discount = discount` (None here means "equal to `discount`", so a giant-maze
`discount=0.995` carries over).

Deviations, each deliberate:
  * the high-value goal, option end, reward and mask are drawn on the device from a key, with a
    goal draw independent of the low-value goal draw (as in the reference); the reference splits
    trajectory vs random goals at p_traj / (1 − p_cur + 1e-6), we at p_traj / (1 − p_cur);
  * everything listed in `hrljax.agents.gcivl` (device sampler, evaluation split, `env_steps`).
"""

import functools
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax.agents import gcivl, hiql
from hrljax.agents.gcivl import evaluate_tasks  # noqa: F401  (same OGBench evaluation)
from hrljax.data import goal_sampler
from hrljax.losses import goal_conditioned as gc
from hrljax.training import Learner
from hrljax.types import Array, PyTree

GROUPS = ("goal_rep", "value", "high_value", "low_actor", "high_actor")


def get_config() -> ml_collections.ConfigDict:
  """OTA hyperparameters: HIQL's (OGBench `get_config`) plus `abstraction_factor = 5`."""
  config = hiql.get_config()
  config.agent = "ota"
  config.abstraction_factor = 5
  # None: equal to `discount` (the reference sets high_discount = discount; not discount**n).
  config.high_discount = ml_collections.config_dict.placeholder(float)
  return config


def high_discount(config) -> float:
  """γ_h: `config.high_discount`, or `config.discount` when it is None (the reference's choice)."""
  return float(config.discount if config.high_discount is None else config.high_discount)


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(config, "abstraction_factor")
  if config.high_discount is not None:
    checks.in_unit_interval(config, "high_discount")
  hiql.validate_config(config, num_devices)  # the dataset file is checked last


def sample_ota_batch(key: Array, data: goal_sampler.GoalDataset, batch_size: int,
                     config: goal_sampler.SamplerConfig, abstraction_factor: int) -> dict:
  """One OTA batch: OGBench's `HGCDataset.sample` keys plus the option-aware high-value keys
  `high_value_goals, high_value_option_observations, high_value_rewards, high_value_masks`
  (the reference's names). Pure function of the key; batch-level."""
  idx_key, value_key, high_key, option_key = jax.random.split(key, 4)
  n = data.traj_end.shape[0]
  idx = goal_sampler.uniform_indices(idx_key, batch_size, n)
  end = data.traj_end[idx]
  value = goal_sampler.sample_goal_indices(value_key, idx, end, n, config.value, config.discount,
                                           config.gc_negative)
  high_goal, high_target = goal_sampler.high_actor_indices(
      high_key, idx, end, n, subgoal_steps=config.subgoal_steps, p_rand=config.actor.p_rand,
      geom_sample=config.actor.geom_sample, gamma=config.discount)
  option = goal_sampler.sample_ota_goals(option_key, idx, end, n, config.value, config.discount,
                                         abstraction_factor, config.gc_negative)
  rows = lambda i, field="observations": jnp.take(getattr(data, field), i, axis=0)
  return {
      "observations": rows(idx), "next_observations": rows(idx, "next_observations"),
      "actions": rows(idx, "actions"), "value_goals": rows(value.goal_idx),
      "rewards": value.reward, "masks": value.mask,
      "low_actor_goals": rows(goal_sampler.subgoal_indices(idx, end, config.subgoal_steps)),
      "high_actor_goals": rows(high_goal), "high_actor_targets": rows(high_target),
      "high_value_goals": rows(option.goal_idx),
      "high_value_option_observations": rows(option.option_idx),
      "high_value_rewards": option.reward, "high_value_masks": option.mask,
  }


class OTAAgent(struct.PyTreeNode):
  """OTA's train state: params {goal_rep, value, high_value, low_actor, high_actor} and the
  target heads of both values (φ is shared with the online networks)."""

  params: PyTree
  target_params: PyTree  # V^l heads
  high_target_params: PyTree  # V^h heads
  opt_state: PyTree
  goal_rep_net: nn.Module = struct.field(pytree_node=False)
  value_net: nn.Module = struct.field(pytree_node=False)  # V^l and V^h share the architecture
  low_actor_net: nn.Module = struct.field(pytree_node=False)
  high_actor_net: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, observation_dim: int, action_dim: int, config) -> "OTAAgent":
    config = ml_collections.FrozenConfigDict(config)
    hiql_agent = hiql.HIQLAgent.create(key, observation_dim, action_dim, config)
    with_rep = jnp.zeros((1, observation_dim + config.rep_dim), jnp.float32)
    high_key = jax.random.fold_in(key, 1)
    params = dict(hiql_agent.params)
    params["high_value"] = hiql_agent.value_net.init(high_key, with_rep)
    tx = gcivl.make_optimizer(config)
    return cls(params=params, target_params=params["value"],
               high_target_params=params["high_value"], opt_state=tx.init(params),
               goal_rep_net=hiql_agent.goal_rep_net, value_net=hiql_agent.value_net,
               low_actor_net=hiql_agent.low_actor_net, high_actor_net=hiql_agent.high_actor_net,
               tx=tx, config=config)

  goal_rep = hiql.HIQLAgent.goal_rep  # [B, rep_dim] φ([s; g]), one φ for both values

  def value(self, params: PyTree, obs: Array, goal: Array, heads: Optional[PyTree] = None,
            level: str = "low") -> Array:
    """[B, E] V^l (level "low") or V^h ("high") of (s, φ([s; g])); `heads` replaces the heads."""
    if heads is None:
      heads = params["value" if level == "low" else "high_value"]
    rep = self.goal_rep(params, obs, goal)
    return self.value_net.apply(heads, jnp.concatenate([obs, rep], axis=-1))

  def loss_terms(self, params: PyTree, batch: dict) -> tuple[dict, dict]:
    """The four batch-mean losses {value, high_value, low_actor, high_actor} and the metrics."""
    config = self.config
    obs, next_obs = batch["observations"], batch["next_observations"]
    goals = batch["value_goals"]
    v = self.value(params, obs, goals)
    value_loss, value_extras = gc.ivl_value_loss_batch(
        v, self.value(params, obs, goals, heads=self.target_params),
        self.value(params, next_obs, goals, heads=self.target_params), batch["rewards"],
        config.discount * batch["masks"], config.expectile)

    high_goals, option_obs = batch["high_value_goals"], batch["high_value_option_observations"]
    vh = self.value(params, obs, high_goals, level="high")
    high_value_losses, high_value_extras = jax.vmap(functools.partial(
        gc.ota_high_value_loss, high_discount=high_discount(config),
        expectile=config.expectile))(
            vh, self.value(params, obs, high_goals, heads=self.high_target_params),
            self.value(params, option_obs, high_goals, heads=self.high_target_params),
            batch["high_value_rewards"], batch["high_value_masks"])
    high_value_loss = jnp.mean(high_value_losses)

    actor_losses, actor_metrics = hiql.hierarchical_actor_losses(
        self, params, batch, functools.partial(self.value, level="high"))
    losses = {"value": value_loss, "high_value": high_value_loss, **actor_losses}
    metrics = {
        "value_loss": value_loss, "high_value_loss": high_value_loss,
        "v_mean": v.mean(), "high_v_mean": vh.mean(),
        "value_advantage": value_extras.advantage.mean(),
        "high_value_advantage": high_value_extras.advantage.mean(), **actor_metrics,
    }
    return losses, metrics

  def loss(self, params: PyTree, batch: dict) -> tuple[Array, dict]:
    """low value + high value + low actor + high actor, unweighted (the reference)."""
    losses, metrics = self.loss_terms(params, batch)
    total = sum(losses.values())
    return total, {"loss": total, **metrics}

  def update(self, batch: dict) -> tuple["OTAAgent", dict]:
    """One Adam step on the joint loss, then Polyak of both value heads (pre-step parameters)."""
    return hiql.update_with_targets(
        self, batch, {"target_params": "value", "high_target_params": "high_value"})

  act = hiql.HIQLAgent.act  # the same hierarchy at inference: V^h plays no part


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """OTA's offline `Learner` (one update per step on a `sample_ota_batch` batch)."""
  sample = functools.partial(sample_ota_batch, abstraction_factor=int(config.abstraction_factor))
  return gcivl.make_offline_learner(config, OTAAgent, sample)
