"""GCIVL: goal-conditioned implicit V-learning with an AWR actor, trained offline.

Park, Frans, Eysenbach, Levine. "OGBench: Benchmarking Offline Goal-Conditioned RL",
arXiv:2410.20092, Sec. 6 ("GCIVL": the action-free IQL value of HIQL, arXiv:2307.11949 Sec. 4,
without the hierarchy) and the reference `impls/agents/gcivl.py` (seohongpark/ogbench @1d41409).
The defaults are OGBench's `get_config` plus its `hyperparameters.sh` line for the point mazes
(`alpha=10`; giant mazes add `discount=0.995`).

  value  V_i(s, g) = MLP_i([s; g]), two heads, 512x3 GELU + LayerNorm; trained with the IVL
         expectile loss (`hrljax.losses.goal_conditioned.ivl_value_loss_batch`, τ = 0.9) on value
         goals drawn 0.2 current / 0.5 future (geometric) / 0.3 random;
  actor  π(a | s, g) = N(MLP([s; g]), 1), 512x3 GELU; AWR on actor goals (future, uniform) with
         A = mean_i V_i(s', g) − mean_i V_i(s, g) (online values, no gradient), weight
         min(exp(α·A), 100);
  target V̄ ← τ·θ + (1 − τ)·V̄ with the online parameters from BEFORE the gradient step
         (OGBench's order), τ = 0.005; one Adam (lr 3e-4) over value and actor.

Deviations, each deliberate:
  * batches are drawn on the device by `hrljax.data.goal_sampler` from a key (OGBench draws them
    on the host with the global NumPy generator): same distributions, different random streams;
  * `Learner.evaluate` (jitted, called by the CLI at the end) reports the losses on a batch of the
    validation file; OGBench's success rates on its five tasks need the MuJoCo simulator outside
    jit and come from `evaluate_tasks(agent, config)`;
  * the CLI's `env_steps` counts dataset samples consumed (`batch_size` per update): an offline
    agent takes no environment steps.
"""

import json
import os
import time
from typing import Any, Optional, Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax.data import goal_sampler, pointmaze
from hrljax.losses import goal_conditioned as gc
from hrljax import training
from hrljax.training import Learner
from hrljax.types import Array, PyTree


def get_config() -> ml_collections.ConfigDict:
  """GCIVL hyperparameters: OGBench's `get_config` with its point-maze `alpha = 10`."""
  config = ml_collections.ConfigDict()
  config.agent = "gcivl"
  config.env_name = "pointmaze-medium-navigate-v0"
  config.dataset_path = "data/pointmaze-medium-navigate-v0.npz"  # make_dataset's output
  config.seed = 0
  config.num_updates = 1_000_000  # OGBench train_steps
  config.batch_size = 1024
  config.lr = 3e-4
  config.optimizer = "adam"  # or "sgd" (multi-device equivalence checks)
  config.actor_hidden_dims = (512, 512, 512)
  config.value_hidden_dims = (512, 512, 512)
  config.layer_norm = True
  config.discount = 0.99  # 0.995 for giant mazes (hyperparameters.sh)
  config.tau = 0.005
  config.expectile = 0.9
  config.alpha = 10.0  # AWR inverse temperature (pointmaze line of hyperparameters.sh)
  config.const_std = True
  config.value_p_curgoal = 0.2
  config.value_p_trajgoal = 0.5
  config.value_p_randomgoal = 0.3
  config.value_geom_sample = True
  config.actor_p_curgoal = 0.0
  config.actor_p_trajgoal = 1.0
  config.actor_p_randomgoal = 0.0
  config.actor_geom_sample = False
  config.gc_negative = True
  # Run-level settings read by the experiment loop.
  config.log_every = 1000
  config.checkpoint_every = 100_000
  config.max_checkpoints = 2
  config.eval_episodes = 50  # per OGBench task (evaluate_tasks)
  config.eval_temperature = 0.0
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive(config, "alpha")
  checks.in_unit_interval(config, "expectile")
  validate_common(config, num_devices)  # the dataset file is checked last


def validate_common(config, num_devices: int) -> None:
  """Checks shared by the offline goal-conditioned agents (GCIVL, HIQL)."""
  checks.positive_int(config, "num_updates", "batch_size", "log_every", "checkpoint_every",
                      "max_checkpoints", "eval_episodes")
  checks.positive(config, "lr", "tau")
  checks.non_negative(config, "eval_temperature")
  checks.in_unit_interval(config, "discount", "tau")
  if config.discount >= 1.0:  # geometric goal offsets need 1 − γ > 0
    raise checks.ConfigError(
        f"config.discount: expected a number in [0, 1), got {config.discount!r}")
  checks.one_of(config, "optimizer", ("adam", "sgd"))
  checks.divisible(config, "batch_size", num_devices, "the device count")
  checks.divisible(config, "checkpoint_every", config.log_every, "config.log_every")
  try:
    pointmaze.parse_name(config.env_name)
    goal_sampler.SamplerConfig.from_config(config)
  except ValueError as error:
    raise checks.ConfigError(f"config.{error}") from None
  if not os.path.exists(config.dataset_path):
    raise checks.ConfigError(
        f"config.dataset_path: expected an existing .npz file (python -m experiments.make_dataset "
        f"--env={config.env_name} --out={config.dataset_path}), got {config.dataset_path!r}")


# ----------------------------------------------------------------------------------------------
# Networks (OGBench's: GELU, LayerNorm after the activation, variance_scaling(1, fan_avg, uniform)
# initialisation; hrljax.networks.MLP uses orthogonal initialisation, so they are defined here).
# ----------------------------------------------------------------------------------------------


def default_init(scale: float = 1.0):
  return nn.initializers.variance_scaling(scale, "fan_avg", "uniform")


class GoalMLP(nn.Module):
  """Dense → GELU → (LayerNorm) per layer; the last layer is linear unless `activate_final`."""

  hidden_dims: Sequence[int]
  activate_final: bool = False
  layer_norm: bool = False

  @nn.compact
  def __call__(self, x: Array) -> Array:
    for i, size in enumerate(self.hidden_dims):
      x = nn.Dense(size, kernel_init=default_init())(x)
      if i + 1 < len(self.hidden_dims) or self.activate_final:
        x = nn.gelu(x)
        if self.layer_norm:
          x = nn.LayerNorm()(x)
    return x


class EnsembleValue(nn.Module):
  """`num_heads` independent scalar MLPs of the same input: [..., in] -> [..., num_heads]."""

  hidden_dims: Sequence[int]
  layer_norm: bool = True
  num_heads: int = 2

  @nn.compact
  def __call__(self, x: Array) -> Array:
    heads = nn.vmap(GoalMLP, variable_axes={"params": 0}, split_rngs={"params": True},
                    in_axes=None, out_axes=-1, axis_size=self.num_heads)
    out = heads(hidden_dims=(*self.hidden_dims, 1), activate_final=False,
                layer_norm=self.layer_norm)(x)
    return out[..., 0, :]


class GaussianActor(nn.Module):
  """N(mean(x), diag(exp(log_std)·temperature)²); log_std = 0 if `const_std` (OGBench GCActor)."""

  hidden_dims: Sequence[int]
  action_dim: int
  const_std: bool = True
  final_init_scale: float = 1e-2

  @nn.compact
  def __call__(self, x: Array, temperature: float = 1.0) -> distrax.MultivariateNormalDiag:
    features = GoalMLP(self.hidden_dims, activate_final=True)(x)
    mean = nn.Dense(self.action_dim, kernel_init=default_init(self.final_init_scale))(features)
    if self.const_std:
      log_std = jnp.zeros_like(mean)
    else:
      log_std = jnp.broadcast_to(
          self.param("log_stds", nn.initializers.zeros, (self.action_dim,)), mean.shape)
    scale = jnp.exp(jnp.clip(log_std, -5.0, 2.0)) * temperature
    return distrax.MultivariateNormalDiag(loc=mean, scale_diag=scale)


def make_optimizer(config) -> optax.GradientTransformation:
  """One Adam over all parameters, no clipping (OGBench); SGD for equivalence checks."""
  if config.optimizer == "sgd":
    return optax.sgd(config.lr)
  return optax.adam(config.lr)


def polyak(target: PyTree, online_before_step: PyTree, tau: float) -> PyTree:
  """θ̄ ← τ·θ + (1 − τ)·θ̄ with the pre-step online parameters (OGBench's one-step lag)."""
  return optax.incremental_update(online_before_step, target, tau)


# ----------------------------------------------------------------------------------------------
# The agent.
# ----------------------------------------------------------------------------------------------


class GCIVLAgent(struct.PyTreeNode):
  """GCIVL's train state: parameters {value, actor}, target value parameters, Adam state."""

  params: PyTree
  target_params: PyTree  # the value heads only
  opt_state: PyTree
  value_net: nn.Module = struct.field(pytree_node=False)
  actor_net: nn.Module = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(cls, key: Array, observation_dim: int, action_dim: int, config) -> "GCIVLAgent":
    config = ml_collections.FrozenConfigDict(config)
    value_net = EnsembleValue(tuple(config.value_hidden_dims), config.layer_norm)
    actor_net = GaussianActor(tuple(config.actor_hidden_dims), action_dim, config.const_std)
    value_key, actor_key = jax.random.split(key)
    pair = jnp.zeros((1, 2 * observation_dim), jnp.float32)
    params = {"value": value_net.init(value_key, pair), "actor": actor_net.init(actor_key, pair)}
    tx = make_optimizer(config)
    return cls(params=params, target_params=params["value"], opt_state=tx.init(params),
               value_net=value_net, actor_net=actor_net, tx=tx, config=config)

  def value(self, value_params: PyTree, obs: Array, goal: Array) -> Array:
    """[B, E] values V_i(s, g)."""
    return self.value_net.apply(value_params, jnp.concatenate([obs, goal], axis=-1))

  def loss(self, params: PyTree, batch: dict) -> tuple[Array, dict]:
    """value loss + actor loss on one batch (batch-level means)."""
    config = self.config
    v = self.value(params["value"], batch["observations"], batch["value_goals"])
    v_tgt = self.value(self.target_params, batch["observations"], batch["value_goals"])
    next_v_tgt = self.value(self.target_params, batch["next_observations"], batch["value_goals"])
    value_loss, value_extras = gc.ivl_value_loss_batch(
        v, v_tgt, next_v_tgt, batch["rewards"], config.discount * batch["masks"], config.expectile)

    stored = jax.lax.stop_gradient(params["value"])  # OGBench evaluates A with stored params
    advantage = gc.hiql_low_advantage(
        self.value(stored, batch["next_observations"], batch["actor_goals"]),
        self.value(stored, batch["observations"], batch["actor_goals"]))
    dist = self.actor_net.apply(
        params["actor"], jnp.concatenate([batch["observations"], batch["actor_goals"]], axis=-1))
    log_prob = dist.log_prob(batch["actions"])
    actor_loss, actor_extras = gc.awr_loss(log_prob, advantage, config.alpha)
    total = value_loss + actor_loss
    return total, {
        "loss": total, "value_loss": value_loss, "actor_loss": actor_loss,
        "v_mean": v.mean(), "value_advantage": value_extras.advantage.mean(),
        "actor_advantage": advantage.mean(), "awr_weight": actor_extras.weights.mean(),
        "bc_log_prob": log_prob.mean(),
        "action_mse": jnp.mean(jnp.square(dist.mean() - batch["actions"])),
    }

  def update(self, batch: dict) -> tuple["GCIVLAgent", dict]:
    """One Adam step on value + actor, then Polyak with the pre-step online value parameters."""
    grads, metrics = jax.grad(self.loss, has_aux=True)(self.params, batch)
    updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
    params = optax.apply_updates(self.params, updates)
    target = polyak(self.target_params, self.params["value"], self.config.tau)
    return self.replace(params=params, target_params=target, opt_state=opt_state), metrics

  def act(self, obs: Array, goal: Array, key: Array, temperature: float = 0.0) -> Array:
    """Actions in [-1, 1] for observations and goals [..., D] (temperature 0: the mean)."""
    dist = self.actor_net.apply(self.params["actor"], jnp.concatenate([obs, goal], axis=-1))
    noise = jax.random.normal(key, dist.loc.shape)
    return jnp.clip(dist.loc + temperature * dist.scale_diag * noise, -1.0, 1.0)


# ----------------------------------------------------------------------------------------------
# The offline run: one update on a device-sampled batch per Learner step.
# ----------------------------------------------------------------------------------------------


class OfflineState(struct.PyTreeNode):
  """What an offline run carries between updates; checkpointed whole (the dataset is not)."""

  agent: Any
  key: Array
  update: Array  # int32 count of updates done


def load_datasets(config) -> tuple[goal_sampler.GoalDataset, goal_sampler.GoalDataset]:
  """The training file and its `-val.npz` companion (the training file again if there is none)."""
  train = goal_sampler.from_arrays(pointmaze.load(config.dataset_path))
  val_path = pointmaze.validation_path(config.dataset_path)
  val = goal_sampler.from_arrays(pointmaze.load(val_path)) if os.path.exists(val_path) else train
  return train, val


def make_offline_learner(config, agent_cls, sample_batch) -> Learner:
  """A `Learner` whose `step` samples one batch on the device and performs one update.

  `sharded_field=None`: the whole state is replicated; a multi-device mesh shards nothing
  (each device samples the same batch), so data parallelism gives no speed-up here.
  """
  config = ml_collections.FrozenConfigDict(config)
  train_data, val_data = load_datasets(config)
  sampler = goal_sampler.SamplerConfig.from_config(config)
  observation_dim = train_data.observations.shape[-1]
  action_dim = train_data.actions.shape[-1]

  def init(key: Array) -> OfflineState:
    agent_key, key = jax.random.split(key)
    agent = agent_cls.create(agent_key, observation_dim, action_dim, config)
    return OfflineState(agent=agent, key=key, update=jnp.zeros((), jnp.int32))

  def step(state: OfflineState) -> tuple[OfflineState, dict]:
    key, batch_key = jax.random.split(state.key)
    batch = sample_batch(batch_key, train_data, config.batch_size, sampler)
    agent, metrics = state.agent.update(batch)
    return OfflineState(agent=agent, key=key, update=state.update + 1), metrics

  def evaluate(state: OfflineState, key: Array) -> dict:
    batch = sample_batch(key, val_data, config.batch_size, sampler)
    _, metrics = state.agent.loss(state.agent.params, batch)
    return {f"eval_{name}": value for name, value in metrics.items()}

  return Learner(init=init, step=step, evaluate=evaluate, num_updates=config.num_updates,
                 env_steps_per_update=config.batch_size, sharded_field=None)


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """GCIVL's offline `Learner` (one update per step on a `sample_gc_batch` batch)."""
  return make_offline_learner(config, GCIVLAgent, goal_sampler.sample_gc_batch)


def evaluate_tasks(agent, config, num_episodes: Optional[int] = None,
                   task_ids: Sequence[int] = (1, 2, 3, 4, 5), seed: int = 0,
                   max_episode_steps: Optional[int] = None) -> dict:
  """OGBench's evaluation: success rate on each of its five tasks (`env.reset(options=
  dict(task_id=k))`, the registered 1000-step episodes that end at the goal), with a jitted
  policy and the simulator driven from Python. Needs the `ogbench` extra. Seeds the global
  `np.random` (OGBench's maze draws its start/goal noise from it) for reproducible episodes.

  `max_episode_steps` shortens the episodes (tests only; OGBench's is the registered 1000).
  Returns {"task<k>_success": rate, ..., "success": mean over the tasks}.
  """
  num_episodes = config.eval_episodes if num_episodes is None else num_episodes
  temperature = float(config.eval_temperature)
  env = pointmaze.make_env(config.env_name, max_episode_steps=max_episode_steps,
                           terminate_at_goal=True)
  policy = jax.jit(lambda agent, obs, goal, key: agent.act(obs, goal, key, temperature))
  key = jax.random.key(seed)
  np.random.seed(seed)
  results = {}
  for task_id in task_ids:
    successes = []
    for episode in range(num_episodes):
      obs, info = env.reset(seed=seed * 1000 + task_id * 100 + episode,
                            options=dict(task_id=task_id))
      goal = np.asarray(info["goal"], np.float32)
      done, success = False, False
      while not done:
        key, act_key = jax.random.split(key)
        action = np.asarray(policy(agent, np.asarray(obs, np.float32), goal, act_key))
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        success = bool(info["success"])
      successes.append(success)
    results[f"task{task_id}_success"] = float(np.mean(successes))
  env.close()
  results["success"] = float(np.mean([results[f"task{k}_success"] for k in task_ids]))
  return results


def train_and_evaluate(agent_module, config, workdir: str,
                       num_episodes: Optional[int] = None) -> dict:
  """Trains with the experiment loop (`hrljax.training.train`, resumable) and then runs
  `evaluate_tasks`; writes the success rates to `<workdir>/ogbench_eval.json` and returns them.

  `agent_module` is `hrljax.agents.gcivl` or `hrljax.agents.hiql`.
  """
  agent_module.validate_config(config)
  learner = agent_module.make_learner(config)
  state = training.train(learner, config, workdir, log_every=config.log_every,
                         checkpoint_every=config.checkpoint_every,
                         max_checkpoints=config.max_checkpoints, seed=config.seed)
  start = time.perf_counter()
  results = evaluate_tasks(state.agent, config, num_episodes=num_episodes, seed=config.seed)
  results["eval_seconds"] = time.perf_counter() - start
  with open(os.path.join(workdir, "ogbench_eval.json"), "w") as f:
    json.dump(results, f, indent=2)
  return results
