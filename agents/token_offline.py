"""Offline training of the token-game policy on logged dialogues: BC, filtered BC, A-LoL and
offline ArCHer.

The logged data: `dataset_episodes` games of the scripted questioner (`token_common.scripted_rollout`
with questions drawn at random with probability `dataset_random_question_prob`), drawn once from the
run's key. Each utterance is an example with the dialogue before it (the prompt x), the utterance
(the response y), its return-to-go R (the game's outcome from that turn on, γ = 1) and whether its
game was won.

Every objective starts from the online token agents' behaviour-cloned warm start
(`token_common.pretrained_policy_params`, the same for a seed whatever the objective), which is
also A-LoL's frozen reference policy π_ref. One Learner step is one Adam step of the policy on
`batch_size` logged utterances:

  * "bc": the token-summed NLL of utterances drawn uniformly from the data
    (`hierarchical_critics.filtered_bc_loss` with every utterance kept);
  * "filtered_bc": the same on the utterances of the won games only (filtered BC, ArCHer's
    baseline, with the "success" filter of `token_filtered_bc`);
  * "alol": A-LoL (Baheti, Lu, Brahman, Le Bras, Sap, Riedl, arXiv 2305.14718;
    `group_relative.alol_loss`): the whole utterance is one action, A = R − V(x), clamped at 0,
    weighted by the detached sequence ratio π_θ(y|x) / π_ref(y|x) clipped to [1 − ε, 1 + ε]
    (`alol_variant` gives A-LoL seq, ref-free or KL, the last with `alol_kl_coef`). With
    `priority_sampling` rows are drawn with probability ∝ A+ (the authors' `good_priority`
    sampling), so no step is spent on rows whose advantage is clamped away;
  * "archer": offline ArCHer (Zhou, Zanette, Pan, Levine, Kumar, arXiv 2402.19446, its offline
    experiments): the twin utterance critic of the online agent (`token_common.make_critic`)
    trained by IQL (`hierarchical_critics.offline_archer_critic_loss`: Q regresses on
    r + γ(1 − terminated)·V̄(s'), V on the expectile `expectile` of the target critic's Q at the
    logged utterance) and the policy by advantage-weighted regression on the logged utterance
    (`offline_archer_actor_loss`, weight exp(β·A) with β = `awr_inv_temp`, A = min Q − min V of
    the online critic before its step, unclipped unless `awr_max_weight` > 0). One Learner step
    is one critic step (then the Polyak step of the target critic, rate `tau`) and one actor step
    on the same uniform batch. The critic is learned, unlike A-LoL's V: R and V are the
    critic's, not the logged returns'.

V(x) is the empirical mean return of the logged utterances spoken after the same dialogue (rows
with equal dialogues share an id, `group_relative.anchor_state_ids`): the logging policy's
Monte Carlo value, exact for this discrete game's logged states. Deviation from the authors:
their V is a value head trained on the reference policy's own rewards on a validation set; here
the reference policy is the BC start and the value is the logging policy's, as an offline
setting without environment access has it.

Environment interactions: none during training (`env_steps_per_update` counts logged utterances
read, `batch_size` per step); evaluation plays `eval_episodes` greedy games.
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, rollout, training
from hrljax.agents import token_common as tc
from hrljax.losses import group_relative as gr
from hrljax.losses import hierarchical_critics as hc
from hrljax.losses import policy_gradient as pg
from hrljax.networks import transformer
from hrljax.training import Learner
from hrljax.types import Array, PyTree

OBJECTIVES = ("bc", "filtered_bc", "alol", "archer")
ALOL_VARIANTS = ("alol", "alol_seq", "ref_free", "kl")


def get_config() -> ml_collections.ConfigDict:
  """Offline hyperparameters; A-LoL's defaults are the authors' (ε 0.9, priority sampling)."""
  config = training.run_config(log_every=100, checkpoint_every=1_000)
  config.agent = "token_offline"
  tc.add_config_fields(config)
  config.objective = "alol"  # "bc", "filtered_bc", "alol" or "archer"
  config.dataset_episodes = 1_024  # logged games
  config.dataset_random_question_prob = 1.0  # the logging questioner's random questions
  config.success_return = 1.0  # a game with this return or more is won ("filtered_bc")
  config.num_updates = 2_000  # policy steps
  config.batch_size = 64  # utterances per step
  config.learning_rate = 1e-4
  config.optimizer = "adam"  # or "sgd"
  config.max_grad_norm = 1.0
  config.alol_variant = "alol"  # or "alol_seq", "ref_free", "kl"
  config.alol_epsilon = 0.9  # the ratio's clip (authors' ppo_clip)
  config.alol_kl_coef = 0.1  # alol_variant "kl": coefficient of log π_θ(y|x) − log π_ref(y|x)
  config.priority_sampling = True  # A-LoL: rows drawn with probability ∝ A+
  # Offline ArCHer (objective "archer"); the reference's values where they transfer.
  tc.add_critic_fields(config, d_model=64, num_layers=2)
  config.q_target_heads = "per_head"  # reference
  config.v_target_heads = "per_head"
  config.gamma = 0.99  # reference (Twenty Questions)
  config.tau = 0.05  # reference Polyak rate
  config.expectile = 0.9  # reference
  config.awr_inv_temp = 1.0  # β of exp(β·A) (reference inv_temp)
  config.awr_max_weight = 0.0  # > 0: clip of exp(β·A); 0: no clip (reference)
  config.critic_learning_rate = 1e-4  # reference 1e-5 fine-tunes RoBERTa; from scratch here
  config.eval_episodes = 128  # greedy games per evaluation
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.positive_int(config, "dataset_episodes", "num_updates", "batch_size", "eval_episodes")
  checks.positive(config, "learning_rate", "max_grad_norm")
  checks.in_unit_interval(config, "dataset_random_question_prob")
  checks.one_of(config, "objective", OBJECTIVES)
  checks.one_of(config, "alol_variant", ALOL_VARIANTS)
  checks.one_of(config, "priority_sampling", (True, False))
  checks.positive(config, "alol_kl_coef", "critic_learning_rate")
  checks.non_negative(config, "awr_inv_temp", "awr_max_weight")
  checks.in_unit_interval(config, "gamma", "tau")
  checks.one_of(config, "q_target_heads", hc.HEAD_MODES)
  checks.one_of(config, "v_target_heads", hc.HEAD_MODES)
  expectile = config.expectile
  if (
    isinstance(expectile, bool) or not isinstance(expectile, (int, float)) or not 0 < expectile < 1
  ):
    raise checks.ConfigError(f"config.expectile: expected a number in (0, 1), got {expectile!r}")
  tc.validate_critic_fields(config)
  checks.one_of(config, "optimizer", tc.OPTIMIZERS)
  epsilon = config.alol_epsilon
  if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon <= 1:
    raise checks.ConfigError(f"config.alol_epsilon: expected a number in (0, 1], got {epsilon!r}")
  if isinstance(config.success_return, bool) or not isinstance(config.success_return, (int, float)):
    raise checks.ConfigError(
      f"config.success_return: expected a number, got {config.success_return!r}"
    )
  tc.validate_config_fields(config)
  if num_devices != 1:
    raise checks.ConfigError(
      f"num_devices: expected 1 (the logged data is one replicated table), got {num_devices}"
    )
  envs.make(config.env_name, **config.env_kwargs)  # unknown fields fail here


class LoggedUtterances(NamedTuple):
  """The logged data, one row per utterance of the first game of each logging column."""

  dialogue: Array  # int32 [R, D] x: the dialogue before the utterance
  utterance: Array  # int32 [R, L] y
  reward: Array  # [R] the game's reward for the utterance (0 on rows after the game)
  next_dialogue: Array  # int32 [R, D] the dialogue after the utterance and its answer
  terminated: Array  # bool [R] the utterance ended its game (a guess; not a cut at max_turns)
  returns: Array  # [R] return-to-go of the utterance in its game (γ = 1)
  won: Array  # bool [R] the utterance's game was won
  value: Array  # [R] mean return of the rows with the same dialogue (the logging policy's V)
  valid: Array  # bool [R] the row belongs to a logged game


def logged_utterances(key: Array, env, env_params, config) -> LoggedUtterances:
  """`dataset_episodes` scripted games (`max_turns` rows each; rows after a game's end are
  invalid), with their returns-to-go, outcomes and the logging policy's state values."""
  traj = tc.scripted_rollout(
    key, env, env_params, config.dataset_episodes, config.dataset_random_question_prob
  )
  valid = rollout.first_episode_mask(traj.terminated | traj.truncated)  # [T, N] the first game
  reward = jnp.where(valid, traj.reward, 0.0)
  returns = jnp.flip(jnp.cumsum(jnp.flip(reward, 0), 0), 0)  # later rows of the game only
  won = jnp.broadcast_to(reward.sum(0) >= config.success_return, valid.shape) & valid
  dialogue = tc.flatten_steps(traj.obs)
  valid, returns = tc.flatten_steps(valid), tc.flatten_steps(returns)
  num_rows = valid.shape[0]
  ids = gr.anchor_state_ids(dialogue, jnp.zeros(num_rows, jnp.int32), valid=valid).ids
  total = jax.ops.segment_sum(jnp.where(valid, returns, 0.0), ids, num_rows)
  count = jax.ops.segment_sum(valid.astype(jnp.float32), ids, num_rows)
  value = jnp.where(valid, total[ids] / jnp.maximum(count[ids], 1.0), 0.0)
  return LoggedUtterances(
    dialogue=dialogue,
    utterance=tc.flatten_steps(traj.action),
    reward=tc.flatten_steps(reward),
    next_dialogue=tc.flatten_steps(traj.next_obs),
    terminated=tc.flatten_steps(traj.terminated),
    returns=returns,
    won=tc.flatten_steps(won),
    value=value,
    valid=valid,
  )


def sampling_logits(data: LoggedUtterances, config) -> Array:
  """Log-weights `[R]` of the rows an objective draws its batches from: the won games' rows
  ("filtered_bc"), rows ∝ A+ ("alol" with `priority_sampling`), or every logged row; every
  logged row when the selection is empty (its loss is then 0)."""
  uniform = jnp.where(data.valid, 0.0, -jnp.inf)
  if config.objective == "filtered_bc":
    logits = jnp.where(data.won, 0.0, -jnp.inf)
  elif config.objective == "alol" and config.priority_sampling:
    advantage = jnp.maximum(data.returns - data.value, 0.0)
    logits = jnp.where(
      data.valid & (advantage > 0), jnp.log(jnp.maximum(advantage, 1e-30)), -jnp.inf
    )
  else:
    return uniform
  return jnp.where(jnp.any(jnp.isfinite(logits)), logits, uniform)


class OfflineAgent(tc.SpeaksUtterances, struct.PyTreeNode):
  """The policy, the frozen reference (the BC start), the optimizer state and a key; with the
  "archer" objective also the critic, its target and its optimizer state (None otherwise)."""

  policy_params: PyTree
  ref_params: PyTree
  opt_state: PyTree
  key: Array
  policy: transformer.CausalTransformer = struct.field(pytree_node=False)
  tx: optax.GradientTransformation = struct.field(pytree_node=False)
  utterance_len: int = struct.field(pytree_node=False)
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)
  critic_params: PyTree = None
  target_critic_params: PyTree = None
  critic_opt_state: PyTree = None
  critic: transformer.UtteranceCritic | None = struct.field(pytree_node=False, default=None)
  critic_tx: optax.GradientTransformation | None = struct.field(pytree_node=False, default=None)
  # The game's reward of a turn not won, for the critic's diagnostics (set with the critic).
  turn_reward: float = struct.field(pytree_node=False, default=0.0)

  def update(self, data: LoggedUtterances, logits: Array) -> tuple["OfflineAgent", dict]:
    """One step of the objective on `batch_size` rows drawn with log-weights `logits`."""
    config = self.config
    key, sample_key = jax.random.split(self.key)
    index = jax.random.categorical(sample_key, logits, shape=(config.batch_size,))
    batch = jax.tree.map(lambda x: x[index], data)
    if config.objective == "archer":
      return self.replace(key=key).archer_update(batch)
    mask = tc.token_mask(batch.utterance)

    def loss_fn(params):
      logp = transformer.utterance_log_probs(self.policy, params, batch.dialogue, batch.utterance)
      if config.objective != "alol":
        keep = batch.won if config.objective == "filtered_bc" else batch.valid
        loss, extras = hc.filtered_bc_loss(logp, mask, keep)
        return loss, {"sequence_log_prob": jnp.mean(extras.sequence_log_prob)}
      ref_logp = transformer.utterance_log_probs(
        self.policy, self.ref_params, batch.dialogue, batch.utterance
      )
      loss, extras = gr.alol_loss(
        logp,
        mask,
        batch.returns,
        batch.value,
        None if config.alol_variant == "ref_free" else ref_logp,
        valid=batch.valid,
        variant=config.alol_variant,
        epsilon=config.alol_epsilon,
        kl_coef=config.alol_kl_coef if config.alol_variant == "kl" else None,
      )
      return loss, {
        "advantage": jnp.mean(extras.advantages),
        "kept_fraction": jnp.mean(extras.kept),
        "ratio": jnp.mean(extras.ratio),
        "kl_to_reference": extras.kl,
      }

    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(self.policy_params)
    return self.policy_step(grads).replace(key=key), {"loss": loss, **metrics}

  def policy_step(self, grads: PyTree) -> "OfflineAgent":
    """The agent after one optimizer step of the policy on `grads`."""
    updates, opt_state = self.tx.update(grads, self.opt_state, self.policy_params)
    return self.replace(
      policy_params=optax.apply_updates(self.policy_params, updates), opt_state=opt_state
    )

  def archer_update(self, batch: LoggedUtterances) -> tuple["OfflineAgent", dict]:
    """Offline ArCHer on one batch: the critic's IQL step (and the target's Polyak step), then
    the policy's AWR step weighted by the pre-step online critic's advantages."""
    config = self.config
    mask = tc.token_mask(batch.utterance)
    target_q = self.critic.apply(
      self.target_critic_params,
      batch.dialogue,
      batch.utterance,
      mask,
      method=transformer.UtteranceCritic.q_values,
    )
    target_v_next = self.critic.apply(
      self.target_critic_params, batch.next_dialogue, method=transformer.UtteranceCritic.values
    )

    def critic_loss(params):
      out = self.critic.apply(params, batch.dialogue, batch.utterance, mask)
      loss, extras = hc.offline_archer_critic_loss(
        out.q,
        out.v,
        target_v_next,
        target_q,
        batch.reward.astype(jnp.float32),
        batch.terminated,
        config.gamma,
        config.expectile,
        q_target_heads=config.q_target_heads,
        v_target_heads=config.v_target_heads,
        valid=batch.valid,
      )
      return loss, (extras, out)

    (loss, (extras, out)), grads = jax.value_and_grad(critic_loss, has_aux=True)(self.critic_params)
    critic_params, target_params, critic_opt_state = tc.critic_step(
      self.critic_tx,
      self.critic_params,
      self.target_critic_params,
      self.critic_opt_state,
      grads,
      config.tau,
    )
    q, v = jax.lax.stop_gradient((out.q, out.v))

    def actor_loss(params):
      logp = transformer.utterance_log_probs(self.policy, params, batch.dialogue, batch.utterance)
      return hc.offline_archer_actor_loss(
        logp,
        mask,
        q,
        v,
        config.awr_inv_temp,
        config.awr_max_weight or None,
        valid=batch.valid,
      )

    (actor_loss_value, actor_extras), grads = jax.value_and_grad(actor_loss, has_aux=True)(
      self.policy_params
    )
    agent = self.policy_step(grads).replace(
      critic_params=critic_params,
      target_critic_params=target_params,
      critic_opt_state=critic_opt_state,
    )
    return agent, {
      **tc.critic_metrics(loss, extras, batch, self.turn_reward),
      "loss": actor_loss_value,
      "advantage": pg.masked_mean(actor_extras.advantage, batch.valid),
      "awr_weight": pg.masked_mean(actor_extras.weight, batch.valid),
      "sequence_log_prob": pg.masked_mean(actor_extras.sequence_log_prob, batch.valid),
    }


def with_critic(agent: OfflineAgent, key: Array, env_params) -> OfflineAgent:
  """`agent` with offline ArCHer's twin critic (`config.critic_init`: random, or its encoder
  from the BC start's trunk), the target critic a copy of it, and the critic's optimizer."""
  config = agent.config
  critic = tc.make_critic(env_params, config)
  params = tc.init_critic_params(key, critic, env_params, agent.policy_params, config.critic_init)
  critic_tx = tc.make_optimizer(config.optimizer, config.critic_learning_rate, config.max_grad_norm)
  return agent.replace(
    critic_params=params,
    target_critic_params=params,
    critic_opt_state=critic_tx.init(params),
    critic=critic,
    critic_tx=critic_tx,
    turn_reward=float(env_params.turn_reward),
  )


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one step to the next; checkpointed whole."""

  agent: OfflineAgent
  data: LoggedUtterances
  key: Array
  eval_key: Array  # the run's evaluation games (`tc.evaluation_key`)
  update: Array  # int32 count of steps done


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one gradient step of `config.objective` on the logged data."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params, policy, _, evaluate = tc.learner_parts(config)

  def init(key: Array, policy_params: Optional[PyTree] = None) -> RunnerState:
    eval_key = tc.evaluation_key(key)
    agent_key, data_key, key = jax.random.split(key, 3)
    bc_key = tc.bc_key_of(agent_key)
    policy_params = tc.policy_start(bc_key, policy, env, env_params, config, policy_params)
    tx = tc.make_optimizer(config.optimizer, config.learning_rate, config.max_grad_norm)
    agent = OfflineAgent(
      policy_params=policy_params,
      ref_params=policy_params,
      opt_state=tx.init(policy_params),
      key=jax.random.fold_in(bc_key, 0),
      policy=policy,
      tx=tx,
      utterance_len=env_params.utterance_len,
      config=config,
    )
    if config.objective == "archer":
      agent = with_critic(agent, jax.random.fold_in(agent_key, 1), env_params)
    data = logged_utterances(data_key, env, env_params, config)
    return RunnerState(agent, data, key, eval_key, jnp.zeros((), jnp.int32))

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    agent, metrics = state.agent.update(state.data, sampling_logits(state.data, config))
    return state.replace(agent=agent, update=state.update + 1), metrics

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=config.num_updates,
    env_steps_per_update=config.batch_size,
    warm_start=tc.warm_start(config),
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-step metrics)`: a whole run as one program."""
  return training.whole_run(make_learner(config))
