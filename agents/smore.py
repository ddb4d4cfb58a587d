"""SMORe: score models for offline goal-conditioned RL, with an AWR actor.

Sikchi, Chitnis, Touati, Geramifard, Zhang, Niekum. "SMORe: Score Models for Offline
Goal-Conditioned Reinforcement Learning", ICLR 2024, arXiv:2311.02013. The practical algorithm
as the authors' code runs it (hari-sikchi/SMORe @c6661b0: `learner.py` `_update_jit_stable`,
`critic_gcrl.py`, `actor.py` `update_gcrl`, `configs/gcrl_config.py`); the losses are
`hrljax.losses.goal_conditioned.smore_score_loss`, `smore_value_loss` and `smore_actor_loss`,
whose docstrings give the formulas.

  score  S_i(s, a, g) = MLP_i([s; g; a]), two heads (the code's DoubleCritic), trained on two
         halves of each batch: data samples (s, a, s', g) with OGBench's value goals, and
         goal-transition samples (s, a, g = s') whose next state is their goal. The "stable"
         variant (the code's default) regresses the goal transitions on −r/(1 − γ) (r = −2), the
         data on −2 + γ·M(s', g), with a small (1 − γ)·c·S² regulariser; no termination mask,
         and the dataset's rewards are not read;
  value  M(s, g) = MLP([s; g]), one head: the expectile τ = `expectile` (0.8, the README's
         `--beta`) of the target score's minimum over the heads, on the data samples;
  actor  π(a | s, g) = N(MLP([s; g]), 1): AWR on the data samples with the advantage
         min_i S̄_i(s, a, g) − M(s, g) (target score, the value after its step), weight
         min(exp(β·A), 100), β = `temperature` = 3.0;
  order  value step, actor step, score step (its target uses the new M), then the target score
         S̄ ← τ·S + (1 − τ)·S̄ with the post-step score (the code's order), τ = 0.005; one Adam
         (learning rate 3e-4) per network, as the code's three models.

Deviations, each deliberate: OGBench's data and goal sampler (`sample_smore_batch`, value goals
0.2 current / 0.5 future / 0.3 random; the code's own relabelling targets other benchmarks); the
actor's standard deviation is fixed at 1 (OGBench's point-maze actors; the code learns a
state-independent one) and its learning rate constant (the code decays it with a cosine
schedule); `env_steps` counts the data samples consumed (`batch_size` per update; each update
also reads `batch_size` goal transitions).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import offline
from hrljax.data import goal_sampler
from hrljax.losses import goal_conditioned as gc
from hrljax.networks import goal_conditioned as gcn
from hrljax.training import Learner
from hrljax.types import Array, PyTree

VARIANTS = ("stable", "original")
NETWORKS = ("score", "value", "actor")


def get_config() -> ml_collections.ConfigDict:
  """SMORe hyperparameters: the authors' `gcrl_config.py` and README command."""
  config = offline.default_config("smore")
  config.score_hidden_sizes = (256, 256, 256)
  config.value_hidden_sizes = (256, 256, 256)
  config.actor_hidden_sizes = (256, 256, 256)
  config.layer_norm = True  # in the score and value MLPs
  config.tau = 0.005  # Polyak rate of the target score
  config.expectile = 0.8  # τ of M's expectile (the README's --beta)
  config.temperature = 3.0  # β of the AWR weight exp(β·(S̄ − M)), clipped at 100
  config.variant = "stable"  # the code's default loss_type "smore_stable"; or "original"
  config.step_reward = -2.0  # r of the stable variant (the code's neg_r)
  config.regularizer = 1e-4  # c of the score regulariser
  config.const_std = True  # actor std fixed at 1
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.one_of(config, "variant", VARIANTS)
  checks.non_negative(config, "temperature", "regularizer")
  checks.in_unit_interval(config, "tau")
  expectile = config.expectile
  if (
    isinstance(expectile, bool) or not isinstance(expectile, (int, float)) or not 0 < expectile < 1
  ):
    raise checks.ConfigError(f"config.expectile: expected a number in (0, 1), got {expectile!r}")
  offline.validate_config(config, num_devices)


def sample_smore_batch(
  key: Array, data: goal_sampler.GoalDataset, batch_size: int, config: goal_sampler.SamplerConfig
) -> dict:
  """`batch_size` data samples (`goal_sampler.sample_gc_batch`: transitions with value goals)
  and `batch_size` goal transitions under the keys `goal_*`: uniform transitions whose goal is
  their own next state. The code's "HER_goal_entry_distribution" takes the transition into a
  future state of a random trajectory (probability 0.8) or into a state that reached a dataset
  goal; OGBench's data carries no goals, and the transition into a future state of a uniform
  (trajectory, time) is close to a uniform transition."""
  data_key, goal_key = jax.random.split(key)
  batch = goal_sampler.sample_gc_batch(data_key, data, batch_size, config)
  idx = goal_sampler.uniform_indices(goal_key, batch_size, data.traj_end.shape[0])
  goal = goal_sampler.transitions(data, idx)
  return {
    **batch,
    "goal_observations": goal["observations"],
    "goal_actions": goal["actions"],
    "goal_goals": goal["next_observations"],
  }


class SMOReAgent(struct.PyTreeNode):
  """SMORe's train state: parameters {score, value, actor}, the target score, one Adam state per
  network."""

  params: PyTree
  target_params: PyTree  # the score heads only
  opt_state: PyTree  # {name: optimizer state} for each of NETWORKS
  score_net: nn.Module = struct.field(pytree_node=False)
  value_net: nn.Module = struct.field(pytree_node=False)
  actor_net: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, observation_dim: int, action_dim: int, config) -> "SMOReAgent":
    config = ml_collections.FrozenConfigDict(config)
    score_net = gcn.EnsembleValue(tuple(config.score_hidden_sizes), config.layer_norm)
    value_net = gcn.EnsembleValue(tuple(config.value_hidden_sizes), config.layer_norm, num_heads=1)
    actor_net = gcn.GaussianActor(tuple(config.actor_hidden_sizes), action_dim, config.const_std)
    score_key, value_key, actor_key = jax.random.split(key, 3)
    pair = jnp.zeros((1, 2 * observation_dim), jnp.float32)
    triple = jnp.zeros((1, 2 * observation_dim + action_dim), jnp.float32)
    params = {
      "score": score_net.init(score_key, triple),
      "value": value_net.init(value_key, pair),
      "actor": actor_net.init(actor_key, pair),
    }
    tx = offline.make_optimizer(config)
    return cls(
      params=params,
      target_params=params["score"],
      opt_state={name: tx.init(params[name]) for name in NETWORKS},
      score_net=score_net,
      value_net=value_net,
      actor_net=actor_net,
      tx=tx,
      config=config,
    )

  def score(self, score_params: PyTree, obs: Array, goal: Array, action: Array) -> Array:
    """[B, E] scores S_i(s, a, g)."""
    return self.score_net.apply(score_params, gcn.pair(gcn.pair(obs, goal), action))

  def value(self, value_params: PyTree, obs: Array, goal: Array) -> Array:
    """[B] M(s, g)."""
    return self.value_net.apply(value_params, gcn.pair(obs, goal))[..., 0]

  def value_loss(self, value_params: PyTree, batch: dict, s_tgt: Array) -> tuple[Array, dict]:
    m = self.value(value_params, batch["observations"], batch["value_goals"])
    loss = gc.smore_value_loss(s_tgt, m, self.config.expectile)
    return loss, {"value_loss": loss, "m_mean": m.mean()}

  def actor_loss(
    self, actor_params: PyTree, batch: dict, s_tgt: Array, m: Array
  ) -> tuple[Array, dict]:
    obs, goals = batch["observations"], batch["value_goals"]
    dist = self.actor_net.apply(actor_params, gcn.pair(obs, goals))
    log_prob = dist.log_prob(batch["actions"])
    loss, extras = gc.smore_actor_loss(log_prob, s_tgt, m, self.config.temperature)
    return loss, {
      "actor_loss": loss,
      "advantage": extras.advantage.mean(),
      "awr_weight": extras.weights.mean(),
      "bc_log_prob": log_prob.mean(),
      "action_mse": jnp.mean(jnp.square(dist.mean() - batch["actions"])),
    }

  def score_loss(self, score_params: PyTree, batch: dict, m_next: Array) -> tuple[Array, dict]:
    config = self.config
    s_data = self.score(score_params, batch["observations"], batch["value_goals"], batch["actions"])
    s_goal = self.score(
      score_params, batch["goal_observations"], batch["goal_goals"], batch["goal_actions"]
    )
    loss, extras = gc.smore_score_loss(
      s_data,
      s_goal,
      m_next,
      config.gamma,
      config.variant,
      config.step_reward,
      config.regularizer,
    )
    return loss, {
      "score_loss": loss,
      "score_goal_term": extras.goal_term,
      "score_bellman_term": extras.bellman_term,
      "score_data_mean": s_data.mean(),
      "score_goal_mean": s_goal.mean(),
    }

  def target_scores(self, batch: dict) -> Array:
    """[B, E] S̄_i(s, a, g) of the data samples (target score, no gradient)."""
    return self.score(
      self.target_params, batch["observations"], batch["value_goals"], batch["actions"]
    )

  def loss(self, params: PyTree, batch: dict) -> tuple[Array, dict]:
    """The three losses at `params` (the validation report; `update` takes them in turn)."""
    s_tgt = self.target_scores(batch)
    value_loss, value_metrics = self.value_loss(params["value"], batch, s_tgt)
    m = self.value(params["value"], batch["observations"], batch["value_goals"])
    actor_loss, actor_metrics = self.actor_loss(params["actor"], batch, s_tgt, m)
    m_next = self.value(params["value"], batch["next_observations"], batch["value_goals"])
    score_loss, score_metrics = self.score_loss(params["score"], batch, m_next)
    total = value_loss + actor_loss + score_loss
    return total, {"loss": total, **value_metrics, **actor_metrics, **score_metrics}

  def step_network(self, name: str, grads: PyTree) -> "SMOReAgent":
    """One optimizer step of network `name`."""
    updates, opt_state = self.tx.update(grads, self.opt_state[name], self.params[name])
    return self.replace(
      params={**self.params, name: optax.apply_updates(self.params[name], updates)},
      opt_state={**self.opt_state, name: opt_state},
    )

  def update(self, batch: dict) -> tuple["SMOReAgent", dict]:
    """The code's order: value, actor (new M), score (its target uses the new M), target score
    (Polyak towards the post-step score)."""
    s_tgt = self.target_scores(batch)
    grads, value_metrics = jax.grad(self.value_loss, has_aux=True)(
      self.params["value"], batch, s_tgt
    )
    agent = self.step_network("value", grads)
    m = agent.value(agent.params["value"], batch["observations"], batch["value_goals"])
    grads, actor_metrics = jax.grad(agent.actor_loss, has_aux=True)(
      agent.params["actor"], batch, s_tgt, m
    )
    agent = agent.step_network("actor", grads)
    m_next = agent.value(agent.params["value"], batch["next_observations"], batch["value_goals"])
    grads, score_metrics = jax.grad(agent.score_loss, has_aux=True)(
      agent.params["score"], batch, m_next
    )
    agent = agent.step_network("score", grads)
    target = optax.incremental_update(agent.params["score"], agent.target_params, self.config.tau)
    metrics = {**value_metrics, **actor_metrics, **score_metrics}
    metrics["loss"] = metrics["value_loss"] + metrics["actor_loss"] + metrics["score_loss"]
    return agent.replace(target_params=target), metrics

  def act(self, obs: Array, goal: Array, key: Array, temperature: float = 0.0) -> Array:
    """Actions in [-1, 1] for observations and goals [..., D] (temperature 0: the mean)."""
    dist = self.actor_net.apply(self.params["actor"], gcn.pair(obs, goal))
    return jnp.clip(gcn.sample_action(dist, key, temperature), -1.0, 1.0)

  def goal_values(self, obs: Array, goal: Array) -> dict:
    """{"m": [B] M(s, g)} (`hrljax.ogbench_evaluation.path_values`)."""
    return {"m": self.value(self.params["value"], obs, goal)}


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """SMORe's offline `Learner` (one update per step on a `sample_smore_batch` batch)."""
  return offline.make_learner(config, SMOReAgent.create, sample_smore_batch)
