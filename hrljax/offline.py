"""The dataset-driven (offline) learner: one update per step on a batch sampled on the device.

An offline agent trains on a fixed dataset instead of interacting: its `Learner.step` draws one
batch from the dataset with a jittable sampler (`hrljax.data.goal_sampler`) and performs one
update, so a whole run is one compiled loop with no host round trip and vmaps over seeds.
`Learner.evaluate` reports the losses on a batch of the validation file; `Learner.host_evaluate`
adds the success rates on OGBench's five tasks of the maze (`hrljax.ogbench_evaluation`), which
need the MuJoCo simulator outside jit.

What an agent hands over (duck-typed, so the spine imports no agent):
  * `create_agent(key, observation_dim, action_dim, config)` returning a train state with
    `.params`, `.update(batch) -> (agent, metrics)`, `.loss(params, batch) -> (loss, metrics)`,
    and for the evaluation `.act(obs, goal, key, temperature)` and `.goal_values(obs, goal)`;
  * `sample_batch(key, dataset, batch_size, sampler_config) -> dict`, a pure function of the key.

`env_steps` in the logs counts dataset samples consumed (`batch_size` per update): an offline
agent takes no environment steps.
"""

import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import ogbench_evaluation, training
from hrljax.data import goal_sampler, pointmaze
from hrljax.training import Learner
from hrljax.types import Array, PyTree


class OfflineState(struct.PyTreeNode):
  """What an offline run carries between updates; checkpointed whole (the dataset is not)."""

  agent: Any
  key: Array
  update: Array  # int32 count of updates done


def default_config(agent: str) -> ml_collections.ConfigDict:
  """The fields this module, the sampler and the evaluation read, with OGBench's defaults
  (`get_config` and the point-maze lines of `hyperparameters.sh`); an agent adds its own."""
  c = training.run_config(log_every=1000, checkpoint_every=100_000, max_checkpoints=2)
  c.agent = agent
  c.env_name = "pointmaze-medium-navigate-v0"
  c.dataset_path = "data/pointmaze-medium-navigate-v0.npz"  # experiments.make_dataset's output
  c.num_updates = 1_000_000  # OGBench's train_steps
  c.batch_size = 1024
  c.learning_rate = 3e-4
  c.optimizer = "adam"  # or "sgd" (multi-device equivalence checks)
  c.gamma = 0.99  # 0.995 for giant mazes (hyperparameters.sh)
  c.value_p_curgoal = 0.2  # value goals: the current state / a future one / a random one
  c.value_p_trajgoal = 0.5
  c.value_p_randomgoal = 0.3
  c.value_geom_sample = True  # future value goals at a Geom(1 − γ) offset
  c.actor_p_curgoal = 0.0  # actor goals: the current state / a future one / a random one
  c.actor_p_trajgoal = 1.0
  c.actor_p_randomgoal = 0.0
  c.actor_geom_sample = False  # future actor goals uniform over the rest of the trajectory
  c.gc_negative = True  # rewards 0 at the goal and −1 elsewhere (False: 1 and 0)
  c.eval_episodes = 50  # per OGBench task at the final evaluation; 0: no OGBench evaluation
  c.periodic_eval_episodes = ml_collections.config_dict.placeholder(int)  # None: eval_episodes
  c.eval_temperature = 0.0  # 0: the policy's mean action
  c.eval_max_episode_steps = ml_collections.config_dict.placeholder(int)  # None: OGBench's 1000
  return c


def validate_config(config, num_devices: int) -> None:
  """Checks every offline goal-conditioned agent shares; raises `ConfigError` naming the field.

  The dataset file is checked last, so that a config error is reported before a missing file.
  """
  checks.positive_int(config, "num_updates", "batch_size")
  checks.non_negative_int(config, "eval_episodes")
  for check, optional_field in (
    (checks.non_negative_int, "periodic_eval_episodes"),
    (checks.positive_int, "eval_max_episode_steps"),
  ):
    if config[optional_field] is not None:  # None: the default protocol
      check(config, optional_field)
  checks.positive(config, "learning_rate", "tau")
  checks.non_negative(config, "eval_temperature")
  checks.in_unit_interval(config, "gamma", "tau")
  if config.gamma >= 1.0:  # geometric goal offsets need 1 − γ > 0
    raise checks.ConfigError(f"config.gamma: expected a number in [0, 1), got {config.gamma!r}")
  checks.one_of(config, "optimizer", ("adam", "sgd"))
  checks.divisible(config, "batch_size", num_devices, "the device count")
  try:
    pointmaze.parse_name(config.env_name)
    goal_sampler.SamplerConfig.from_config(config)
  except ValueError as error:
    raise checks.ConfigError(f"config.{error}") from None
  if not os.path.exists(config.dataset_path):
    raise checks.ConfigError(
      f"config.dataset_path: expected an existing .npz file (python -m experiments.make_dataset "
      f"--env={config.env_name} --out={config.dataset_path}), got {config.dataset_path!r}"
    )


def make_optimizer(config) -> optax.GradientTransformation:
  """One Adam over all parameters, no clipping (OGBench); SGD for equivalence checks."""
  if config.optimizer == "sgd":
    return optax.sgd(config.learning_rate)
  return optax.adam(config.learning_rate)


def polyak(target: PyTree, online_before_step: PyTree, tau: float) -> PyTree:
  """θ̄ ← τ·θ + (1 − τ)·θ̄ with the online parameters from BEFORE the gradient step (OGBench's
  order: the target lags the online network by one step)."""
  return optax.incremental_update(online_before_step, target, tau)


def load_datasets(config) -> tuple[goal_sampler.GoalDataset, goal_sampler.GoalDataset]:
  """The training file and its `-val.npz` companion (the training file again if there is none)."""
  train = goal_sampler.from_arrays(pointmaze.load(config.dataset_path))
  val_path = pointmaze.validation_path(config.dataset_path)
  val = goal_sampler.from_arrays(pointmaze.load(val_path)) if os.path.exists(val_path) else train
  return train, val


def make_learner(
  config, create_agent: Callable[..., Any], sample_batch: Callable[..., dict]
) -> Learner:
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
    agent = create_agent(agent_key, observation_dim, action_dim, config)
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

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=config.num_updates,
    env_steps_per_update=config.batch_size,
    sharded_field=None,
    host_evaluate=ogbench_evaluation.host_evaluator(config),
  )
