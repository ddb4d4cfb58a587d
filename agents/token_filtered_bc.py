"""Online filtered behaviour cloning on the token game (a baseline of the ArCHer paper).

Zhou, Zanette, Pan, Levine, Kumar. "ArCHer: Training Language Model Agents via Hierarchical
Multi-Turn RL", arXiv 2402.19446, section 6 (filtered BC baseline); reference YifeiZhou02/ArCHer
@7c771a7 (`offpolicy_train_loop`: keep the trajectories whose return is at or above the
(1 − 0.1) quantile, then BC on them; `plain_bc_loss`). The filter and the loss are
`hrljax.losses.hierarchical_critics.filtered_bc_mask` / `filtered_bc_loss`; the policy and its
behaviour-cloned warm start are ArCHer's (`agents/token_common.py`), so with the same seed every
token-game agent starts from the same policy.

One iteration (one Learner step):
  1. `num_envs` fresh games are played to the end with the current policy at `temperature`
     (`hrljax.rollout.grouped_episodes` with groups of one, a window of `max_turns` utterances);
  2. the filter keeps whole dialogues: "quantile" (reference online ArCHer: return at or above the
     (1 − `top_fraction`) quantile, ties kept), "top_count" (Offline ArCHer: exactly
     floor(top_fraction·N) best) or "success" (return >= `success_return`, e.g. the games won);
  3. `bc_updates` Adam steps of BC (mean over utterances of the token-summed NLL of the tokens the
     game reads) on batches of `batch_size` utterances drawn uniformly from the kept dialogues'
     utterances. An iteration that keeps nothing leaves the policy unchanged.

Environment interactions: `env_steps_per_update` counts the whole window (`num_envs ·
max_turns` utterances, an upper bound); the metric `utterances` counts the utterances of the
games actually played (steps after a game ended are discarded and not counted there).

Deviations from the reference, each deliberate:
  * the filter ranges over the current iteration's dialogues (the reference filters its whole
    replay buffer of past trajectories); the data is thus on-policy, and no buffer is kept;
  * batches are drawn from the kept utterances only (the reference rebuilds a buffer of them);
  * no pretrained GPT-2 (a small transformer from the BC start); Adam at `learning_rate`.
"""

from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, rollout, training
from hrljax.agents import token_common as tc
from hrljax.envs import token_game
from hrljax.losses import hierarchical_critics as hc
from hrljax.networks import transformer
from hrljax.training import Learner
from hrljax.types import Array, PyTree

FILTERS = ("quantile", "top_count", "success")


def get_config() -> ml_collections.ConfigDict:
  """Filtered-BC hyperparameters; the reference's filter (top 10% by quantile) by default."""
  config = training.run_config(log_every=5, checkpoint_every=25)
  config.agent = "token_filtered_bc"
  tc.add_config_fields(config)
  config.total_timesteps = 1_024_000  # utterances (environment steps) over the run
  config.num_envs = 64  # dialogues per iteration
  config.filter = "quantile"
  config.top_fraction = 0.1  # reference: 0.1
  config.success_return = 1.0  # the "success" filter's threshold
  config.bc_updates = 8  # BC steps per iteration
  config.batch_size = 64  # utterances per BC step
  config.learning_rate = 1e-4
  config.optimizer = "adam"  # or "sgd"
  config.max_grad_norm = 1.0
  config.rollout_unroll = 1
  config.eval_episodes = 128  # greedy games per evaluation
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(
    config,
    "total_timesteps",
    "num_envs",
    "bc_updates",
    "batch_size",
    "eval_episodes",
    "rollout_unroll",
  )
  checks.positive(config, "learning_rate", "max_grad_norm")
  checks.one_of(config, "filter", FILTERS)
  if not (isinstance(config.top_fraction, (int, float)) and 0.0 < config.top_fraction <= 1.0):
    raise checks.ConfigError(
      f"config.top_fraction: expected a number in (0, 1], got {config.top_fraction!r}"
    )
  if isinstance(config.success_return, bool) or not isinstance(config.success_return, (int, float)):
    raise checks.ConfigError(
      f"config.success_return: expected a number, got {config.success_return!r}"
    )
  checks.one_of(config, "optimizer", tc.OPTIMIZERS)
  tc.validate_config_fields(config)
  checks.divisible(config, "num_envs", num_devices, "the device count")
  _, env_params = envs.make(config.env_name, **config.env_kwargs)  # unknown fields fail here
  training.num_updates(config.total_timesteps, config.num_envs * env_params.max_turns)


def keep_dialogues(returns: Array, ended: Array, config) -> Array:
  """Which of the iteration's dialogues `[N]` to clone (only games that ended count)."""
  if config.filter == "success":
    return ended & (returns >= config.success_return)
  return hc.filtered_bc_mask(returns, config.top_fraction, method=config.filter, valid=ended)


def sample_kept(key: Array, keep: Array, num_batches: int, batch_size: int) -> Array:
  """Row indices `[num_batches, batch_size]` drawn uniformly among the kept rows of `keep` `[R]`
  (uniformly among all rows when none is kept; `filtered_bc_loss` then masks them out)."""
  logits = jnp.where(keep | ~jnp.any(keep), 0.0, -jnp.inf)
  return jax.random.categorical(key, logits, shape=(num_batches, batch_size))


class FilteredBCAgent(tc.SpeaksUtterances, struct.PyTreeNode):
  """Filtered BC's train state: policy parameters, optimizer state and a key."""

  policy_params: PyTree
  opt_state: PyTree
  key: Array
  policy: transformer.CausalTransformer = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  utterance_len: int = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(
    cls,
    key: Array,
    env,
    env_params: token_game.EnvParams,
    config,
    policy_params: Optional[PyTree] = None,
  ) -> "FilteredBCAgent":
    """The behaviour-cloned policy (the BC key of every token agent; `policy_params` when given,
    `tc.warm_start_policy_params` of the same key) and its optimizer."""
    config = ml_collections.FrozenConfigDict(config)
    policy = tc.make_policy(env_params, config)
    key = tc.bc_key_of(key)
    policy_params = tc.policy_start(key, policy, env, env_params, config, policy_params)
    tx = tc.make_optimizer(config.optimizer, config.learning_rate, config.max_grad_norm)
    return cls(
      policy_params=policy_params,
      opt_state=tx.init(policy_params),
      key=jax.random.fold_in(key, 0),
      policy=policy,
      tx=tx,
      utterance_len=env_params.utterance_len,
      config=config,
    )

  def update(
    self, data: tc.UtteranceData, keep: Array
  ) -> tuple["FilteredBCAgent", dict[str, Array]]:
    """`bc_updates` BC steps on utterances `data` (`[R]` rows) restricted to `keep` `[R]`."""
    config = self.config
    key, sample_key = jax.random.split(self.key)
    indices = sample_kept(sample_key, keep, config.bc_updates, config.batch_size)

    def bc_step(agent, index):
      dialogue, utterance = data.dialogue[index], data.utterance[index]

      def loss_fn(params):
        logp = transformer.utterance_log_probs(agent.policy, params, dialogue, utterance)
        return hc.filtered_bc_loss(logp, tc.token_mask(utterance), keep[index])

      (loss, extras), grads = jax.value_and_grad(loss_fn, has_aux=True)(agent.policy_params)
      updates, opt_state = agent.tx.update(grads, agent.opt_state, agent.policy_params)
      agent = agent.replace(
        policy_params=optax.apply_updates(agent.policy_params, updates), opt_state=opt_state
      )
      return agent, {"bc_loss": loss, "kept_log_prob": jnp.mean(extras.sequence_log_prob)}

    agent, metrics = jax.lax.scan(bc_step, self.replace(key=key), indices)
    return agent, jax.tree.map(jnp.mean, metrics)


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one iteration to the next; checkpointed whole."""

  agent: FilteredBCAgent
  env_ids: Array  # [N] one group per game slot: sharded along the data axis
  key: Array
  eval_key: Array  # the run's evaluation games (`tc.evaluation_key`)
  update: Array  # int32 count of iterations done


def episode_metrics(episodes: rollout.GroupedEpisodes, keep: Array) -> dict[str, Array]:
  """Sums over the iteration's games (the loop turns `*_sum` into means)."""
  return {
    **rollout.episode_sums(episodes),
    "kept_fraction": keep.astype(jnp.float32).mean(),
    "utterances": episodes.valid.astype(jnp.float32).sum(),
  }


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one iteration: play, filter, clone."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params, _, sample, evaluate = tc.learner_parts(config)
  num_steps = env_params.max_turns
  steps_per_update = config.num_envs * num_steps

  def init(key: Array, policy_params: Optional[PyTree] = None) -> RunnerState:
    eval_key = tc.evaluation_key(key)
    agent_key, _, key = jax.random.split(key, 3)
    agent = FilteredBCAgent.create(agent_key, env, env_params, config, policy_params)
    return RunnerState(
      agent=agent,
      env_ids=jnp.arange(config.num_envs, dtype=jnp.int32),
      key=key,
      eval_key=eval_key,
      update=jnp.zeros((), jnp.int32),
    )

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key = jax.random.split(state.key)
    episodes = rollout.grouped_episodes(
      env,
      env_params,
      sample,
      state.agent.policy_params,
      rollout_key,
      state.env_ids,
      num_steps,
      unroll=config.rollout_unroll,
    )
    summary = rollout.summarize_episodes(episodes)
    keep = keep_dialogues(summary.episode_return, summary.ended, config)
    transitions = episodes.transitions
    data = tc.UtteranceData(
      dialogue=tc.flatten_steps(transitions.obs), utterance=tc.flatten_steps(transitions.action)
    )
    keep_rows = tc.flatten_steps(episodes.valid & keep[None, :])
    agent, metrics = state.agent.update(data, keep_rows)
    metrics.update(episode_metrics(episodes, keep))
    return state.replace(agent=agent, key=key, update=state.update + 1), metrics

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=training.num_updates(config.total_timesteps, steps_per_update),
    env_steps_per_update=steps_per_update,
    sharded_field="env_ids",
    warm_start=tc.warm_start(config),
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-iteration metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
