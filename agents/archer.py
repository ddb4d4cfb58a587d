"""ArCHer: an utterance-level off-policy critic and a token-level policy gradient, on the token game.

Zhou, Zanette, Pan, Levine, Kumar. "ArCHer: Training Language Model Agents via Hierarchical
Multi-Turn RL", arXiv 2402.19446 (ICML 2024); reference code YifeiZhou02/ArCHer @7c771a7
(`archer/algorithms/archer/trainer.py`, `archer/algorithms/offpolicy_train_loop.py`,
`scripts/config/default.yaml`). The losses are `hrljax.losses.hierarchical_critics`
(`archer_critic_loss`, `archer_actor_loss`), the networks `hrljax.networks.transformer`
(`CausalTransformer` policy, `UtteranceCritic` with twin Q and V heads), the environment
`TokenGame-v0` (one env step = one utterance), the buffer `hrljax.replay`; the policy, its
behaviour-cloned warm start (run inside `init`, as every ArCHer run starts from an SFT
checkpoint) and the critic's construction are shared with the other token agents
(`agents/token_common.py`).

One iteration (one Learner step), as in the reference's `offpolicy_train_loop`:
  1. every environment speaks `num_steps` utterances sampled at `temperature` (reference: 1.0);
     the utterance-level transitions go to the replay buffer;
  2. `critic_updates` critic steps (reference `epochs` = 50) on uniformly sampled batches: Q_e
     regresses on r + γ(1 − terminated)·V̄_e(s'), V_e on Q̄_e(s, a_π) at a fresh policy
     utterance a_π (target critic); after every critic step the target critic moves by
     Polyak averaging with τ (`optax.incremental_update`, post-step online parameters);
  3. after `warmup_iters` critic-only iterations (and once the optional q_gap gates have
     passed, see `get_config`), `actor_updates` actor steps: REINFORCE on fresh utterances a_π
     with every token weighted by the online critic's A = min_e Q_e(s, a_π) − min_e V_e(s).
Logged per iteration besides the losses (`tc.critic_metrics`, `tc.actor_metrics`): critic
diagnostics (`q_success`, `q_failure`, `q_gap`: min-Q of correct guesses vs failed final
utterances in the critic batches, and `q_gap_fresh` on the iteration's new games before the
critic trains on them), the actor's advantage statistics, and, with `train_eval_episodes > 0`,
`eval_return`: the greedy success of the iteration's starting policy on fresh games.

Deviations from the reference, each deliberate (the measurements behind the options are in
`docs/hierarchical_critics.md`):
  * no pretrained models: GPT-2 / RoBERTa are small transformers trained from scratch, so the
    reference's fine-tuning learning rates do not transfer; `critic_init = "policy"` starts the
    critic's encoder from the behaviour-cloned policy (the only pretrained model here), as the
    reference's critic starts from a pretrained RoBERTa;
  * one batch of `batch_size` = 256 = 8 × 32 is averaged, where the reference sums the losses of
    32 gradient-accumulation micro-batches of 8 (its effective lr is lr × 32);
  * gradient clipping (global norm `max_grad_norm` = 1.0, as the reference) is applied to the
    critic's and the policy's gradients separately; the reference clips over all agent
    parameters with one call;
  * terminated is not truncated: a game cut by the external time limit bootstraps from its true
    final dialogue (the token game itself terminates at the turn limit, as ArCHer's 20Q does);
  * an iteration collects `num_steps` utterances in each of `num_envs` parallel games (games
    continue across iterations), not 128 complete trajectories;
  * the critic reads the utterance tokens the game reads (`utterance_token_mask`), and the
    actor's log-probability sums over the same tokens;
  * options not in the reference, all off by default: batch-standardised advantages, a
    sample-mean baseline and a K-sample V target, the q_gap gates of the actor, critic
    pretraining on the warm-start data, AdamW for the critic, an SGD actor.
"""

from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from hrljax import config_checks as checks
from hrljax import envs, replay, rollout, training
from hrljax.agents import token_common as tc
from hrljax.envs import token_game
from hrljax.losses import hierarchical_critics as hc
from hrljax.networks import transformer
from hrljax.rollout import rollout_statistics
from hrljax.training import Learner
from hrljax.types import Array, EnvCarry, PyTree

ADVANTAGE_NORMALIZATIONS = ("none", "batch")
# Weight of the previous running mean in `RunnerState.fresh_q_gap`: one iteration's new games
# (64 on the token game) give a noisy gap; 0.5 averages over about the last 3 iterations.
FRESH_GAP_DECAY = 0.5


def get_config() -> ml_collections.ConfigDict:
  """ArCHer hyperparameters; the reference's defaults where they transfer."""
  config = training.run_config(log_every=5, checkpoint_every=25)
  config.agent = "archer"
  tc.add_config_fields(config)
  config.total_timesteps = 1_024_000  # utterances (environment steps) over the run
  config.num_envs = 128  # reference: 128 rollout trajectories per iteration
  config.num_steps = 8  # utterances per environment per iteration
  config.buffer_size = 100_000  # reference replay capacity
  config.batch_size = 256  # reference: 8 per micro-batch × 32 accumulation steps
  config.critic_updates = 50  # critic steps per iteration (reference `epochs`)
  config.actor_updates = 3  # actor steps per iteration (reference)
  config.warmup_iters = 20  # critic-only iterations at the start (reference)
  config.warmup_q_gap = 0.0  # > 0: the actor also waits for this replayed-batch q_gap (0: off)
  config.warmup_fresh_q_gap = 0.0  # > 0: ... and for this running q_gap on new games (0: off)
  config.critic_pretrain_steps = 0  # critic steps on the BC dataset's transitions before play
  config.gamma = 0.95
  config.tau = 0.1  # Polyak rate, applied after every critic step
  config.critic_learning_rate = 1e-4  # reference 2e-5 fine-tunes RoBERTa; from scratch here
  config.actor_learning_rate = 1e-5  # reference 1e-6..1e-5 fine-tunes GPT-2
  config.optimizer = "adam"  # or "sgd" (multi-device equivalence checks)
  config.actor_optimizer = ""  # the actor's own optimizer ("adam", "sgd"); "": `optimizer`
  config.max_grad_norm = 1.0
  tc.add_critic_fields(config, d_model=64, num_layers=2)
  config.q_target_heads = "per_head"  # reference; "min" is the clipped-double-Q alternative
  config.v_target_heads = "per_head"
  config.rollout_unroll = 1
  config.advantage_normalization = "none"  # reference; "batch": standardised per actor batch
  config.actor_baseline_samples = 1  # K > 1: mean min-Q of K samples replaces V (reference 1)
  config.critic_v_samples = 1  # K > 1: V regresses on the mean target Q of K samples
  config.critic_weight_decay = 0.0  # > 0: AdamW for the critic (0: Adam)
  config.train_eval_episodes = 0  # greedy games inside every iteration (`eval_return`); 0: none
  config.eval_episodes = 128  # greedy games per evaluation
  return config


def validate_config(config: ml_collections.ConfigDict, num_devices: int = 1) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  checks.one_of(config, "advantage_normalization", ADVANTAGE_NORMALIZATIONS)
  tc.non_negative_int(config, "train_eval_episodes", "warmup_iters", "critic_pretrain_steps")
  checks.positive_int(config, "total_timesteps", "num_envs", "num_steps", "buffer_size")
  checks.positive_int(config, "batch_size", "critic_updates", "actor_updates", "eval_episodes")
  checks.positive_int(config, "rollout_unroll", "actor_baseline_samples", "critic_v_samples")
  checks.divisible(
    config,
    "batch_size",
    config.actor_baseline_samples,
    "config.actor_baseline_samples (dialogues x samples per actor batch)",
  )
  checks.positive(config, "critic_learning_rate", "actor_learning_rate", "max_grad_norm")
  checks.non_negative(config, "critic_weight_decay")
  for field in ("warmup_q_gap", "warmup_fresh_q_gap"):
    check_gap_threshold(config, field)
  checks.in_unit_interval(config, "gamma", "tau")
  checks.one_of(config, "optimizer", tc.OPTIMIZERS)
  checks.one_of(config, "actor_optimizer", ("",) + tc.OPTIMIZERS)
  checks.one_of(config, "q_target_heads", hc.HEAD_MODES)
  checks.one_of(config, "v_target_heads", hc.HEAD_MODES)
  tc.validate_critic_fields(config)
  tc.validate_config_fields(config)
  checks.divisible(config, "num_envs", num_devices, "the device count")
  training.num_updates(config.total_timesteps, config.num_envs * config.num_steps)
  envs.make(config.env_name, **config.env_kwargs)  # unknown fields fail here


def check_gap_threshold(config, field: str) -> None:
  """`config.<field>` is a q_gap gate: a number in [0, 1) (0: off)."""
  value = config[field]
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
    raise checks.ConfigError(
      f"config.{field}: expected a number in [0, 1) (0: off; the gap is "
      f"at most 1, for a game where every guess is sure), got {value!r}"
    )


# ----------------------------------------------------------------------------------------------
# The two objectives, as functions of the parameters they train (the rest enters as constants).
# ----------------------------------------------------------------------------------------------


def critic_objective(
  critic_params: PyTree,
  target_critic_params: PyTree,
  policy_params: PyTree,
  critic: transformer.UtteranceCritic,
  policy: transformer.CausalTransformer,
  batch: tc.UtteranceTransition,
  key: Array,
  config,
) -> tuple[Array, hc.CriticExtras]:
  """ArCHer's critic loss on a `[B]` batch (reference `ArcherTrainer.critic_loss`).

  Samples a_π ~ π(·|s) at `config.temperature`; the targets V̄_e(s') and Q̄_e(s, a_π) come from
  the target critic and carry no gradient (neither do the policy's samples). With
  `config.critic_v_samples` = K > 1, V_e(s) regresses on the mean of Q̄_e(s, a_k) over K fresh
  samples (a lower-variance estimate of the same E_{a~π} Q̄_e(s, a); the reference uses K = 1).
  """
  length = batch.utterance.shape[1]
  samples = config.critic_v_samples
  # Sample-major rows (tile): row k * B + b is sample k at dialogue b (`hc.mean_over_samples`).
  dialogue = jnp.tile(batch.dialogue, (samples, 1))
  a_pi, _ = transformer.generate(
    policy, policy_params, dialogue, key, num_tokens=length, temperature=config.temperature
  )
  a_pi = jax.lax.stop_gradient(a_pi)
  mask = tc.token_mask(a_pi)
  q_pi_tgt = critic.apply(
    target_critic_params, dialogue, a_pi, mask, method=transformer.UtteranceCritic.q_values
  )
  q_pi_tgt = hc.mean_over_samples(q_pi_tgt, samples)
  v_next_tgt = critic.apply(
    target_critic_params, batch.next_dialogue, method=transformer.UtteranceCritic.values
  )
  out = critic.apply(critic_params, batch.dialogue, batch.utterance, tc.token_mask(batch.utterance))
  return hc.archer_critic_loss(
    out.q,
    out.v,
    v_next_tgt,
    q_pi_tgt,
    batch.reward.astype(jnp.float32),
    batch.terminated,
    config.gamma,
    q_target_heads=config.q_target_heads,
    v_target_heads=config.v_target_heads,
  )


def actor_objective(
  policy_params: PyTree,
  critic_params: PyTree,
  critic: transformer.UtteranceCritic,
  policy: transformer.CausalTransformer,
  dialogue: Array,
  key: Array,
  config,
  utterance_len: int,
) -> tuple[Array, hc.ActorExtras]:
  """ArCHer's token-level REINFORCE loss on dialogues `[B, D]` (reference `actor_loss`).

  Samples a_π ~ π(·|s); the online critic gives A = min_e Q_e(s, a_π) − min_e V_e(s) (no
  gradient); the gradient flows only through the teacher-forced log-probs of a_π. With
  `config.actor_baseline_samples` = K > 1, K utterances at each of the first B / K dialogues and
  A = min_e Q_e(s, a_k) − mean_k min_e Q_e(s, a_k) (a sample-mean baseline instead of V).
  """
  samples = config.actor_baseline_samples
  if samples > 1:
    dialogue = jnp.tile(dialogue[: dialogue.shape[0] // samples], (samples, 1))
  sampling_params = jax.lax.stop_gradient(policy_params)
  a_pi, _ = transformer.generate(
    policy, sampling_params, dialogue, key, num_tokens=utterance_len, temperature=config.temperature
  )
  mask = tc.token_mask(a_pi)
  out = critic.apply(critic_params, dialogue, a_pi, mask)
  token_logp = transformer.utterance_log_probs(
    policy, policy_params, dialogue, a_pi, config.temperature
  )
  q_pi, v = out.q, out.v
  if samples > 1:
    q_pi, v = hc.archer_sample_mean_baseline(q_pi, samples)
  if config.advantage_normalization == "batch":
    q_pi, v = hc.archer_standardized_advantage(q_pi, v)
  return hc.archer_actor_loss(token_logp, mask, q_pi, v)


# ----------------------------------------------------------------------------------------------
# The agent.
# ----------------------------------------------------------------------------------------------


class ArcherAgent(tc.SpeaksUtterances, struct.PyTreeNode):
  """ArCHer's train state: policy, critic, target critic, their optimizer states and a key."""

  policy_params: PyTree
  critic_params: PyTree
  target_critic_params: PyTree
  policy_opt_state: PyTree
  critic_opt_state: PyTree
  key: Array
  policy: transformer.CausalTransformer = struct.field(pytree_node=False)
  critic: transformer.UtteranceCritic = struct.field(pytree_node=False)
  policy_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  critic_tx: optax.GradientTransformation = struct.field(pytree_node=False)
  utterance_len: int = struct.field(pytree_node=False)
  turn_reward: float = struct.field(pytree_node=False)  # the game's reward of a turn not won
  config: ml_collections.FrozenConfigDict = struct.field(pytree_node=False)

  @classmethod
  def create(
    cls,
    key: Array,
    env,
    env_params: token_game.EnvParams,
    config,
    policy_params: Optional[PyTree] = None,
  ) -> "ArcherAgent":
    """Networks, optimizers and the behaviour-cloned policy (`config.bc_steps` BC steps).

    `policy_params`, if given, replaces the warm start computed here; pass
    `tc.warm_start_policy_params` of the same key to get the same agent from a separately compiled
    BC program. The target critic starts as a copy of the critic (reference `soft_update(1)`).
    """
    config = ml_collections.FrozenConfigDict(config)
    policy = tc.make_policy(env_params, config)
    critic = tc.make_critic(env_params, config)
    critic_key, key = jax.random.split(key)
    policy_params = tc.policy_start(key, policy, env, env_params, config, policy_params)
    key = jax.random.fold_in(key, 0)
    critic_params = tc.init_critic_params(
      critic_key, critic, env_params, policy_params, config.critic_init
    )
    policy_tx = tc.make_optimizer(
      config.actor_optimizer or config.optimizer, config.actor_learning_rate, config.max_grad_norm
    )
    critic_tx = tc.make_optimizer(
      config.optimizer,
      config.critic_learning_rate,
      config.max_grad_norm,
      weight_decay=config.critic_weight_decay,
    )
    return cls(
      policy_params=policy_params,
      critic_params=critic_params,
      target_critic_params=critic_params,
      policy_opt_state=policy_tx.init(policy_params),
      critic_opt_state=critic_tx.init(critic_params),
      key=key,
      policy=policy,
      critic=critic,
      policy_tx=policy_tx,
      critic_tx=critic_tx,
      utterance_len=env_params.utterance_len,
      turn_reward=float(env_params.turn_reward),
      config=config,
    )

  def critic_step(self, batch: tc.UtteranceTransition) -> tuple["ArcherAgent", dict[str, Array]]:
    """One critic optimizer step, then the Polyak step of the target critic (post-step params)."""
    key, sample_key = jax.random.split(self.key)
    (loss, extras), grads = jax.value_and_grad(critic_objective, has_aux=True)(
      self.critic_params,
      self.target_critic_params,
      self.policy_params,
      self.critic,
      self.policy,
      batch,
      sample_key,
      self.config,
    )
    critic_params, target, opt_state = tc.critic_step(
      self.critic_tx,
      self.critic_params,
      self.target_critic_params,
      self.critic_opt_state,
      grads,
      self.config.tau,
    )
    agent = self.replace(
      critic_params=critic_params, target_critic_params=target, critic_opt_state=opt_state, key=key
    )
    return agent, tc.critic_metrics(loss, extras, batch, self.turn_reward)

  def actor_step(self, dialogue: Array) -> tuple["ArcherAgent", dict[str, Array]]:
    """One policy optimizer step on dialogues `[B, D]` with the online critic's advantages."""
    key, sample_key = jax.random.split(self.key)
    (loss, extras), grads = jax.value_and_grad(actor_objective, has_aux=True)(
      self.policy_params,
      self.critic_params,
      self.critic,
      self.policy,
      dialogue,
      sample_key,
      self.config,
      self.utterance_len,
    )
    updates, opt_state = self.policy_tx.update(grads, self.policy_opt_state, self.policy_params)
    params = optax.apply_updates(self.policy_params, updates)
    agent = self.replace(policy_params=params, policy_opt_state=opt_state, key=key)
    return agent, tc.actor_metrics(loss, extras)

  def update(
    self, critic_batches: tc.UtteranceTransition, actor_dialogues: Array, train_actor: Array
  ) -> tuple["ArcherAgent", dict[str, Array]]:
    """One iteration's updates: critic steps on `critic_batches` (leaves `[C, B, ...]`), then,
    if `train_actor` (bool scalar; False during warm-up), actor steps on `actor_dialogues`
    (`[A, B, D]`). Metrics are means over the steps (actor metrics 0 when not trained)."""
    agent, critic_metrics = jax.lax.scan(lambda a, b: a.critic_step(b), self, critic_batches)

    def train(agent):
      agent, metrics = jax.lax.scan(lambda a, d: a.actor_step(d), agent, actor_dialogues)
      return agent, jax.tree.map(jnp.mean, metrics)

    agent, actor_metrics = training.when(train_actor, train, agent)
    metrics = jax.tree.map(jnp.mean, critic_metrics)
    metrics.update(actor_metrics)
    return agent, metrics


# ----------------------------------------------------------------------------------------------
# The run: rollout -> replay -> critic (and actor) updates, as a Learner and as one program.
# ----------------------------------------------------------------------------------------------


class RunnerState(struct.PyTreeNode):
  """Everything a run carries from one iteration to the next; checkpointed whole.

  Only `env` (per-environment state) is split along the mesh's data axis; the replay buffer is
  replicated (every device holds all of it and draws the same batches from the same key), so the
  updates equal the single-device ones.
  """

  agent: ArcherAgent
  buffer: replay.ReplayBuffer
  env: EnvCarry
  key: Array
  eval_key: Array  # the run's evaluation games (`tc.evaluation_key`)
  update: Array  # int32 count of iterations done
  critic_ready: Array  # bool: the q_gap gates (warmup_q_gap, warmup_fresh_q_gap) have passed
  fresh_q_gap: Array  # float32: running mean of the q_gap on not-yet-replayed transitions


def pretrain_critic(
  agent: ArcherAgent, buffer: replay.ReplayBuffer, key: Array, num_steps: int
) -> ArcherAgent:
  """`num_steps` critic steps (`ArcherAgent.critic_step`) on uniform batches of `buffer`."""
  batches = tc.sample_batches(buffer, key, num_steps, agent.config.batch_size)
  return jax.lax.scan(lambda a, b: (a.critic_step(b)[0], None), agent, batches)[0]


def make_learner(config: ml_collections.ConfigDict) -> Learner:
  """A `Learner` whose `step` is one ArCHer iteration (rollout, critic steps, actor steps)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params, policy, sample, evaluate = tc.learner_parts(config)
  steps_per_update = config.num_envs * config.num_steps
  train_evaluation = tc.greedy_evaluation(env, env_params, policy, config.train_eval_episodes)

  def init(key: Array, policy_params: Optional[PyTree] = None) -> RunnerState:
    """The run state of `key`; `policy_params` (optional) is `tc.warm_start_policy_params(key,
    config)` computed beforehand, e.g. as its own jitted program (see that function)."""
    eval_key = tc.evaluation_key(key)
    agent_key, env_key, key = jax.random.split(key, 3)
    agent = ArcherAgent.create(agent_key, env, env_params, config, policy_params)
    carry = rollout.reset(env, env_params, env_key, config.num_envs)
    buffer = tc.empty_buffer(env_params, config.buffer_size)
    if config.critic_pretrain_steps:
      pretrain_key, key = jax.random.split(key)
      buffer = replay.add(
        buffer, tc.warm_start_transitions(tc.bc_key_of(agent_key), env, env_params, config)
      )
      agent = pretrain_critic(agent, buffer, pretrain_key, config.critic_pretrain_steps)
    return RunnerState(
      agent=agent,
      buffer=buffer,
      env=carry,
      key=key,
      eval_key=eval_key,
      update=jnp.zeros((), jnp.int32),
      critic_ready=jnp.asarray((config.warmup_q_gap <= 0.0) & (config.warmup_fresh_q_gap <= 0.0)),
      fresh_q_gap=jnp.zeros((), jnp.float32),
    )

  def step(state: RunnerState) -> tuple[RunnerState, dict[str, Array]]:
    key, rollout_key, critic_key, actor_key, eval_key = jax.random.split(state.key, 5)
    carry, traj = rollout.rollout(
      env,
      env_params,
      sample,
      state.agent.policy_params,
      state.env,
      rollout_key,
      config.num_steps,
      unroll=config.rollout_unroll,
    )
    fresh = tc.transitions_from_rollout(traj)
    # Scored before the critic ever trains on them: a held-out check of the critic.
    fresh_gap = tc.outcome_means(tc.min_q(state.agent, fresh), fresh, env_params.turn_reward)[
      "q_gap"
    ]
    fresh_q_gap = FRESH_GAP_DECAY * state.fresh_q_gap + (1.0 - FRESH_GAP_DECAY) * fresh_gap
    buffer = replay.add(state.buffer, fresh)
    critic_batches = tc.sample_batches(buffer, critic_key, config.critic_updates, config.batch_size)
    actor_dialogues = tc.sample_batches(
      buffer, actor_key, config.actor_updates, config.batch_size
    ).dialogue
    train_actor = (state.update >= config.warmup_iters) & state.critic_ready
    agent, metrics = state.agent.update(critic_batches, actor_dialogues, train_actor)
    # Latched: once the critic has separated successes from failures, the actor keeps training.
    # An off gate (0) passes whatever the fresh gap is: it can be negative or NaN (no failure
    # among the new games), which must not hold back the actor of a config without the gate.
    fresh_passed = (config.warmup_fresh_q_gap <= 0.0) | (fresh_q_gap >= config.warmup_fresh_q_gap)
    critic_ready = state.critic_ready | ((metrics["q_gap"] >= config.warmup_q_gap) & fresh_passed)
    metrics["q_gap_fresh"] = fresh_gap
    metrics["q_gap_fresh_mean"] = fresh_q_gap
    metrics["actor_trained"] = train_actor.astype(jnp.float32)
    metrics.update(rollout_statistics(traj))
    if config.train_eval_episodes:
      # The greedy success of the policy this iteration started from, on fresh games.
      metrics["eval_return"] = train_evaluation(state.agent.policy_params, eval_key)["eval_return"]
    return state.replace(
      agent=agent,
      buffer=buffer,
      env=carry,
      key=key,
      update=state.update + 1,
      critic_ready=critic_ready,
      fresh_q_gap=fresh_q_gap,
    ), metrics

  return Learner(
    init=init,
    step=step,
    evaluate=evaluate,
    num_updates=training.num_updates(config.total_timesteps, steps_per_update),
    env_steps_per_update=steps_per_update,
    sharded_field="env",
    warm_start=tc.warm_start(config),
  )


def make_train(config: ml_collections.ConfigDict):
  """`train(key) -> (final RunnerState, per-iteration metrics)`: a whole run as one program.

  Jit it, or `jax.jit(jax.vmap(make_train(config)))(keys)` for many seeds at once.
  """
  return training.whole_run(make_learner(config))
