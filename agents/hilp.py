"""HILP: Hilbert representations and a latent-conditioned policy, prompted with goals.

Park, Kreiman, Levine. "Foundation Policies with Hilbert Representations", arXiv:2402.15567
(Sec. 4: Hilbert representation φ with V(s, g) = −‖φ(s) − φ(g)‖ learned by action-free IQL;
Sec. 5: latent-conditioned policy π(a | s, z) with reward (φ(s') − φ(s))ᵀz; zero-shot goal
reaching with z* = (φ(g) − φ(s)) / ‖φ(g) − φ(s)‖). The goal-conditioned reference is
seohongpark/HILP `hilp_gcrl/src/agents/hilp.py` (@be2431b/b352195), whose defaults are used.
OGBench itself ships no goal-conditioned HILP agent (the HILP agent in OGBench-style code bases
is the zero-shot-RL variant with a TD3+BC skill policy; not this one).

Networks (parameter groups in `params`, 512x3 GELU + LayerNorm, OGBench-style initialisation):
  phi           φ_1, φ_2: two independent MLPs s -> R^skill_dim (skill_dim 32);
  skill_value   V(s, z): one MLP of [s; z];
  skill_critic  Q_1, Q_2(s, z, a): two MLPs of [s; z; a];
  skill_actor   π(a | s, z) = N(MLP([s; z]), exp(log_std)), a learned state-independent log_std
                clipped to [−5, 2] (jaxrl_m `Policy`), mean layer initialised with scale 1.
Targets φ̄ and Q̄ are Polyak-averaged (τ = 0.005) from the pre-step online parameters.

Loss (one Adam, lr 3e-4, unweighted sum), on a batch with value goals drawn 0 current /
0.625 future (geometric) / 0.375 random and skills z ~ Unif(S^{d−1}) drawn fresh every batch:
  representation  IVL (`gc.hilp_representation_loss`, vmapped; τ = 0.95, γ = 0.99) on
                  V_i = −‖φ_i(s) − φ_i(g)‖ with reward 0/−1 and mask 0 at the goal;
  skill value     mean expectile(min_i Q̄_i(s, z, a) − V(s, z), τ_skill = 0.9) (IQL per residual,
                  `gc.hilp_skill_value_loss`);
  skill critic    mean Σ_i (Q_i(s, z, a) − r − γ_skill·V(s', z))², r = (φ_1(s') − φ_1(s))ᵀz with
                  the stored φ (no gradient; `gc.hilp_skill_critic_loss`); no done mask: the
                  offline trajectories end by a time limit, so every transition bootstraps
                  (terminated is not truncated);
  skill actor     AWR, weight min(exp(10·(min_i Q̄_i − V)), 100), values without gradient.
Acting (goal prompting, recomputed every step): z = (φ_1(g) − φ_1(s)) / ‖φ_1(g) − φ_1(s)‖, then
the actor's mean (temperature 0) clipped to [−1, 1].

Deviations, each deliberate:
  * skills are drawn from the batch key on the device (the reference draws them with the global
    NumPy generator on the host; its jitted variant once froze them, README 2025-09-29);
  * HILP-Plan (test-time midpoint planning, `gc.hilp_plan_midpoint`) is not used in `act`; the
    paper's goal-conditioned numbers use it for some tasks;
  * the device sampler, the evaluation split and the `env_steps` count of `hrljax.offline`.
"""

import functools

import flax.linen as nn
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

GROUPS = ("phi", "skill_value", "skill_critic", "skill_actor")


def get_config() -> ml_collections.ConfigDict:
  """HILP hyperparameters: `hilp_gcrl`'s `create_learner` defaults and goal mixture."""
  config = offline.default_config("hilp")
  config.actor_hidden_sizes = (512, 512, 512)
  config.value_hidden_sizes = (512, 512, 512)  # φ, skill value and skill critic MLPs
  config.layer_norm = True  # in the φ, value and critic MLPs
  config.tau = 0.005  # Polyak rate of the targets φ̄ and Q̄
  config.expectile = 0.95  # representation (IVL) expectile
  config.skill_dim = 32  # dimension of φ and of the skills z
  config.skill_expectile = 0.9
  config.skill_temperature = 10.0  # AWR inverse temperature of the skill actor
  config.skill_gamma = 0.99  # discount of the skill value and critic
  config.actor_final_init_scale = 1.0  # jaxrl_m Policy (OGBench's GCActor uses 1e-2)
  config.const_std = False  # a learned state-independent log_std (jaxrl_m Policy)
  config.value_p_curgoal = 0.0  # hilp_gcrl's goal mixture for the representation
  config.value_p_trajgoal = 0.625
  config.value_p_randomgoal = 0.375
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(config, "skill_dim")
  checks.positive(config, "skill_temperature", "actor_final_init_scale")
  checks.in_unit_interval(config, "expectile", "skill_expectile", "skill_gamma")
  offline.validate_config(config, num_devices)


def sample_hilp_batch(
  key: Array,
  data: goal_sampler.GoalDataset,
  batch_size: int,
  config: goal_sampler.SamplerConfig,
  skill_dim: int,
) -> dict:
  """A GCIVL batch (`goal_sampler.sample_gc_batch`) plus fresh unit skills `skills` [B, d]."""
  batch_key, skill_key = jax.random.split(key)
  batch = goal_sampler.sample_gc_batch(batch_key, data, batch_size, config)
  batch["skills"] = gc.hilp_sample_skills(skill_key, batch_size, skill_dim)
  return batch


class HILPAgent(struct.PyTreeNode):
  """HILP's train state: params {phi, skill_value, skill_critic, skill_actor}, targets {phi,
  skill_critic}, Adam state."""

  params: PyTree
  target_params: PyTree
  opt_state: PyTree
  phi_net: nn.Module = struct.field(pytree_node=False)
  skill_value_net: nn.Module = struct.field(pytree_node=False)
  skill_critic_net: nn.Module = struct.field(pytree_node=False)
  skill_actor_net: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, observation_dim: int, action_dim: int, config) -> "HILPAgent":
    config = ml_collections.FrozenConfigDict(config)
    hidden = tuple(config.value_hidden_sizes)
    phi_net = gcn.PhiEnsemble(hidden, config.skill_dim, config.layer_norm)
    skill_value_net = gcn.EnsembleValue(hidden, config.layer_norm, num_heads=1)
    skill_critic_net = gcn.EnsembleValue(hidden, config.layer_norm, num_heads=2)
    skill_actor_net = gcn.GaussianActor(
      tuple(config.actor_hidden_sizes), action_dim, config.const_std, config.actor_final_init_scale
    )
    keys = jax.random.split(key, 4)
    obs = jnp.zeros((1, observation_dim), jnp.float32)
    with_z = jnp.zeros((1, observation_dim + config.skill_dim), jnp.float32)
    with_za = jnp.zeros((1, observation_dim + config.skill_dim + action_dim), jnp.float32)
    params = {
      "phi": phi_net.init(keys[0], obs),
      "skill_value": skill_value_net.init(keys[1], with_z),
      "skill_critic": skill_critic_net.init(keys[2], with_za),
      "skill_actor": skill_actor_net.init(keys[3], with_z),
    }
    tx = offline.make_optimizer(config)
    target = {"phi": params["phi"], "skill_critic": params["skill_critic"]}
    return cls(
      params=params,
      target_params=target,
      opt_state=tx.init(params),
      phi_net=phi_net,
      skill_value_net=skill_value_net,
      skill_critic_net=skill_critic_net,
      skill_actor_net=skill_actor_net,
      tx=tx,
      config=config,
    )

  def phi(self, phi_params: PyTree, obs: Array) -> Array:
    """[E, ..., skill_dim] φ_i(s)."""
    return self.phi_net.apply(phi_params, obs)

  def skill_value(self, params: PyTree, obs: Array, z: Array) -> Array:
    """[B] V(s, z)."""
    return self.skill_value_net.apply(params["skill_value"], jnp.concatenate([obs, z], axis=-1))[
      ..., 0
    ]

  def skill_critic(self, critic_params: PyTree, obs: Array, z: Array, action: Array) -> Array:
    """[B, 2] Q_i(s, z, a)."""
    return self.skill_critic_net.apply(critic_params, jnp.concatenate([obs, z, action], axis=-1))

  def loss_terms(self, params: PyTree, batch: dict) -> tuple[dict, dict]:
    """The four batch-mean losses {representation, skill_value, skill_critic, skill_actor}."""
    config = self.config
    obs, next_obs, goals = batch["observations"], batch["next_observations"], batch["value_goals"]
    actions, z = batch["actions"], batch["skills"]
    target = self.target_params

    # [E, B, d] -> per-example [E, d]: vmap over the batch axis 1.
    repr_losses, repr_extras = jax.vmap(
      functools.partial(gc.hilp_representation_loss, expectile=config.expectile),
      in_axes=(1, 1, 1, 1, 1, 0, 0),
    )(
      self.phi(params["phi"], obs),
      self.phi(params["phi"], goals),
      self.phi(target["phi"], obs),
      self.phi(target["phi"], next_obs),
      self.phi(target["phi"], goals),
      batch["rewards"],
      config.gamma * batch["masks"],
    )
    repr_loss = jnp.mean(repr_losses)

    stored = jax.lax.stop_gradient(params)  # the reference's rewards and advantages
    reward = gc.hilp_intrinsic_reward(
      self.phi(stored["phi"], obs)[0], self.phi(stored["phi"], next_obs)[0], z
    )
    v = self.skill_value(params, obs, z)
    skill_value_loss, value_extras = gc.hilp_skill_value_loss(
      self.skill_critic(target["skill_critic"], obs, z, actions), v, config.skill_expectile
    )
    q = self.skill_critic(params["skill_critic"], obs, z, actions)
    skill_critic_loss, _ = gc.hilp_skill_critic_loss(
      q, reward, config.skill_gamma, self.skill_value(stored, next_obs, z)
    )

    advantage = value_extras.q_target - self.skill_value(stored, obs, z)
    dist = self.skill_actor_net.apply(params["skill_actor"], gcn.pair(obs, z))
    actor_loss, actor_extras = gc.awr_loss(
      dist.log_prob(actions), advantage, config.skill_temperature
    )
    losses = {
      "representation": repr_loss,
      "skill_value": skill_value_loss,
      "skill_critic": skill_critic_loss,
      "skill_actor": actor_loss,
    }
    metrics = {
      "representation_loss": repr_loss,
      "skill_value_loss": skill_value_loss,
      "skill_critic_loss": skill_critic_loss,
      "skill_actor_loss": actor_loss,
      "hilbert_v_mean": jnp.mean(repr_extras.targets),
      "representation_advantage": repr_extras.advantage.mean(),
      "intrinsic_reward": reward.mean(),
      "skill_v_mean": v.mean(),
      "skill_q_mean": q.mean(),
      "skill_advantage": advantage.mean(),
      "awr_weight": actor_extras.weights.mean(),
      "bc_log_prob": actor_extras.log_prob.mean(),
    }
    return losses, metrics

  def loss(self, params: PyTree, batch: dict) -> tuple[Array, dict]:
    """representation + skill value + skill critic + skill actor, unweighted (the reference)."""
    losses, metrics = self.loss_terms(params, batch)
    total = sum(losses.values())
    return total, {"loss": total, **metrics}

  def update(self, batch: dict) -> tuple["HILPAgent", dict]:
    """One Adam step, then Polyak of φ̄ and Q̄ with the pre-step online parameters."""
    stepped, metrics = common.gradient_step(self, self.loss, batch)
    online = {"phi": self.params["phi"], "skill_critic": self.params["skill_critic"]}
    target = offline.polyak(self.target_params, online, self.config.tau)
    return stepped.replace(target_params=target), metrics

  def goal_skill(self, obs: Array, goal: Array) -> Array:
    """The zero-shot goal prompt z = (φ_1(g) − φ_1(s)) / ‖φ_1(g) − φ_1(s)‖ ([..., skill_dim])."""
    return gc.hilp_goal_prompt(
      self.phi(self.params["phi"], obs)[0], self.phi(self.params["phi"], goal)[0]
    )

  def act(self, obs: Array, goal: Array, key: Array, temperature: float = 0.0) -> Array:
    """Actions in [-1, 1] for observations and goals [..., D], prompted by `goal_skill`."""
    z = self.goal_skill(obs, goal)
    dist = self.skill_actor_net.apply(self.params["skill_actor"], gcn.pair(obs, z))
    return jnp.clip(gcn.sample_action(dist, key, temperature), -1.0, 1.0)

  def goal_values(self, obs: Array, goal: Array) -> dict:
    """{"v": [B] mean over the φ ensemble of −‖φ_i(s) − φ_i(g)‖} (`path_values`)."""
    phi = self.params["phi"]
    return {"v": jnp.mean(gc.hilp_value(self.phi(phi, obs), self.phi(phi, goal)), axis=0)}


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """HILP's offline `Learner` (one update per step on a `sample_hilp_batch` batch)."""
  sample = functools.partial(sample_hilp_batch, skill_dim=int(config.skill_dim))
  return offline.make_learner(config, HILPAgent.create, sample)
