"""What the token-level agents on the token game share; defines no agent.

The agents (`archer`, `token_ppo`, `token_filtered_bc`, `token_grpo`, and the critic side of
`llm_archer`) play `TokenGame-v0`, where one environment step is one utterance of L tokens. They
share:

* the token policy (`make_policy`: a `networks.transformer.CausalTransformer`), its sampling and
  greedy evaluation, and teacher-forced token log-probs and entropies;
* the behaviour-cloned warm start. Every ArCHer run starts from a supervised (SFT) policy:
  "ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL", Zhou, Zanette, Pan,
  Levine, Kumar (arXiv 2402.19446); reference `scripts/run_bc.py` of YifeiZhou02/ArCHer (Adam,
  lr 1e-4, batch 8, on offline dialogues). Here the offline dialogues come from the token game's
  `scripted_questioner`, a tunably imperfect player, so the data set is a pure function of a key
  and the whole warm start runs inside an agent's `init` (jit). Every agent hands the same key
  (`bc_key_of` its agent key) to `pretrained_policy_params`, so with the same seed they all start
  from the same policy. The BC loss is `hierarchical_critics.filtered_bc_loss` with every example
  kept (the reference's `plain_bc_loss`) on the tokens the environment reads;
* utterance-level transitions for a replay buffer and the twin Q/V utterance critic over the
  game's tokens (`make_critic`, its fields `add_critic_fields` / `validate_critic_fields` and its
  initialisation `init_critic_params`), with its diagnostics (`outcome_means`,
  `critic_diagnostics`) and the logged statistics of an ArCHer critic and actor step
  (`critic_metrics`, `actor_metrics`);
* the config fields of the above (`add_config_fields`, `validate_config_fields`) and the
  optimizer (`make_optimizer`, and `critic_step` with the target critic's Polyak step).

Deviation from the reference warm start: the policy is a small transformer trained from scratch
(no pretrained GPT-2), cloned on the tokens the environment reads (`utterance_token_mask`).
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import optax

from hrljax import config_checks as checks
from hrljax import envs, replay, rollout
from hrljax.envs import token_game
from hrljax.losses import hierarchical_critics as hc
from hrljax.losses import policy_gradient as pg
from hrljax.networks import transformer
from hrljax.types import Array, PyTree
from hrljax.warm_start import WarmStart

# Every config field `warm_start_policy_params` reads: the game, the policy's size, the BC settings.
WARM_START_FIELDS = (
  "env_name",
  "env_kwargs",
  "d_model",
  "num_layers",
  "num_heads",
  "bc_steps",
  "bc_batch_size",
  "bc_learning_rate",
  "bc_dataset_episodes",
  "bc_random_question_prob",
)
# Key streams: folded into an agent's BC key for the warm start, and into its init key for the
# evaluation games (the same for every token agent).
BC_STREAM = 101
EVAL_STREAM = 102
OPTIMIZERS = ("adam", "sgd")
CRITIC_INITS = ("random", "policy")


class UtteranceData(NamedTuple):
  """Utterance-level examples (leading axis = examples): a dialogue and the utterance spoken."""

  dialogue: Array  # int32 [N, max_dialogue_len]
  utterance: Array  # int32 [N, L]


class UtteranceTransition(NamedTuple):
  """One utterance-level transition (or a `[B]` batch): what a replay buffer stores."""

  dialogue: Array  # int32 [D]: s, the dialogue the utterance was spoken after
  utterance: Array  # int32 [L]: a, the utterance as generated
  reward: Array  # float32 []
  next_dialogue: Array  # int32 [D]: s', the true successor (before any auto-reset)
  terminated: Array  # bool []: the game ended (no bootstrap); a truncation keeps False


class SpeaksUtterances:
  """`act` for a token-game agent holding `policy`, `policy_params`, `utterance_len`, `config`."""

  def act(self, dialogue: Array, key: Array, deterministic: bool = False) -> Array:
    """Utterances int32 `[B, L]` for dialogues `[B, D]` (greedy decoding if `deterministic`)."""
    tokens, _ = transformer.generate(
      self.policy,
      self.policy_params,
      dialogue,
      key,
      num_tokens=self.utterance_len,
      temperature=self.config.temperature,
      greedy=deterministic,
    )
    return tokens


# ----------------------------------------------------------------------------------------------
# Config fields and optimizer.
# ----------------------------------------------------------------------------------------------


def add_config_fields(config: ml_collections.ConfigDict) -> None:
  """The game, policy-network and warm-start fields of every token-game agent."""
  config.env_name = "TokenGame-v0"
  config.env_kwargs = ml_collections.ConfigDict()
  config.d_model = 64  # policy transformer width
  config.num_layers = 2  # policy transformer blocks
  config.num_heads = 4  # attention heads (policy and critics)
  config.temperature = 1.0  # sampling temperature of rollouts (ArCHer: 1)
  config.bc_steps = 500  # BC warm-start steps (reference run_bc.py); 0: random initialisation
  config.bc_batch_size = 64
  config.bc_learning_rate = 1e-3
  config.bc_dataset_episodes = 256  # dialogues of the scripted questioner
  config.bc_random_question_prob = 0.5  # its imperfection (token_game.scripted_questioner)


def non_negative_int(config, *fields: str) -> None:
  """Each field is an int >= 0 (not a bool); `ConfigError` naming the field otherwise."""
  for field in fields:
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      raise checks.ConfigError(f"config.{field}: expected an integer >= 0, got {value!r}")


def check_heads_divide(config, width_field: str) -> None:
  """`config.<width_field>` is a multiple of `config.num_heads`."""
  if config[width_field] % config.num_heads:
    raise checks.ConfigError(
      f"config.{width_field}: expected a multiple of config.num_heads "
      f"({config.num_heads}), got {config[width_field]}"
    )


def validate_config_fields(config: ml_collections.ConfigDict) -> None:
  """Checks of the fields `add_config_fields` adds (ConfigError naming the field)."""
  checks.positive_int(
    config, "d_model", "num_layers", "num_heads", "bc_batch_size", "bc_dataset_episodes"
  )
  checks.positive(config, "temperature", "bc_learning_rate")
  checks.in_unit_interval(config, "bc_random_question_prob")
  non_negative_int(config, "bc_steps")
  check_heads_divide(config, "d_model")
  if config.env_name != "TokenGame-v0":
    raise checks.ConfigError(f"config.env_name: expected 'TokenGame-v0', got {config.env_name!r}")


def make_optimizer(
  name: str,
  learning_rate: float,
  max_grad_norm: float,
  adam_eps: float = 1e-8,
  weight_decay: float = 0.0,
) -> optax.GradientTransformation:
  """Global-norm clipping, then "sgd" or "adam" at a constant rate; Adam with `weight_decay` > 0
  is AdamW ("Decoupled Weight Decay Regularization", Loshchilov & Hutter, arXiv 1711.05101)."""
  if name == "sgd":
    optimizer = optax.sgd(learning_rate)
  elif weight_decay:
    optimizer = optax.adamw(learning_rate, weight_decay=weight_decay)
  else:
    optimizer = optax.adam(learning_rate, eps=adam_eps)
  return optax.chain(optax.clip_by_global_norm(max_grad_norm), optimizer)


def critic_step(
  tx: optax.GradientTransformation,
  params: PyTree,
  target_params: PyTree,
  opt_state: PyTree,
  grads: PyTree,
  tau: float,
) -> tuple[PyTree, PyTree, PyTree]:
  """`(params, target_params, opt_state)` after one critic step of `tx` on `grads` and the
  target critic's Polyak step towards the post-step parameters (ArCHer: after every critic
  step, τ = 0.1; reference `soft_update`)."""
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, optax.incremental_update(params, target_params, tau), opt_state


# ----------------------------------------------------------------------------------------------
# The policy: networks, sampling, scoring, evaluation.
# ----------------------------------------------------------------------------------------------


def make_policy(env_params: token_game.EnvParams, config) -> transformer.CausalTransformer:
  """The token policy, sized so that a full dialogue plus one utterance fits."""
  max_len = token_game.max_dialogue_len(env_params) + env_params.utterance_len + 1
  return transformer.CausalTransformer(
    vocab_size=token_game.vocabulary(env_params).size,
    d_model=config.d_model,
    num_layers=config.num_layers,
    num_heads=config.num_heads,
    max_len=max_len,
    pad_token=token_game.PAD,
  )


def first_dialogue(env_params: token_game.EnvParams) -> Array:
  """A `[1, D]` dialogue holding only BOS: the example input of `init` calls."""
  dialogue = jnp.zeros((1, token_game.max_dialogue_len(env_params)), jnp.int32)
  return dialogue.at[:, 0].set(token_game.BOS)


def first_utterance(env_params: token_game.EnvParams) -> Array:
  """A `[1, L]` utterance of PADs: the example utterance of `init` calls."""
  return jnp.zeros((1, env_params.utterance_len), jnp.int32)


def init_policy_params(
  key: Array, model: transformer.CausalTransformer, env_params: token_game.EnvParams
) -> PyTree:
  return model.init(key, first_dialogue(env_params))


def token_mask(utterance: Array) -> Array:
  """The tokens the game reads, bool `[..., L]` (through the first END/PAD)."""
  rows = utterance.reshape(-1, utterance.shape[-1])
  return jax.vmap(token_game.utterance_token_mask)(rows).reshape(utterance.shape)


def sampling_policy(policy: transformer.CausalTransformer, utterance_len: int, temperature):
  """`policy_fn(params, dialogue [N, D], key) -> (utterance [N, L], token log-probs [N, L])`."""

  def sample(params, obs, key):
    return transformer.generate(
      policy, params, obs, key, num_tokens=utterance_len, temperature=temperature
    )

  return sample


def greedy_evaluation(
  env, env_params: token_game.EnvParams, policy: transformer.CausalTransformer, num_episodes: int
):
  """`evaluate(policy_params, key)`: greedy decoding over `num_episodes` games (ArCHer evaluates
  greedily): the return and length statistics and `eval_success`, the fraction of games won
  (`token_game.success_rate`; with the default rewards it equals `eval_return`)."""

  def greedy(params, obs, key):
    tokens, _ = transformer.generate(
      policy, params, obs, key, num_tokens=env_params.utterance_len, greedy=True
    )
    return tokens, None

  def evaluate(params, key):
    stats = rollout.evaluate(
      env, env_params, greedy, params, key, num_episodes, env_params.max_steps_in_episode
    )
    success = token_game.success_rate(stats["eval_return"], stats["eval_length"], env_params)
    return dict(stats, eval_success=success)

  return evaluate


def token_log_probs_and_entropy(
  policy: transformer.CausalTransformer,
  params: PyTree,
  dialogue: Array,
  utterance: Array,
  temperature,
) -> tuple[Array, Array]:
  """Teacher-forced token log-probs and entropies `[B, L]` of softmax(logits / temperature)."""
  logits = policy.apply(
    params, dialogue, utterance, method=transformer.CausalTransformer.utterance_logits
  )
  log_probs = jax.nn.log_softmax(logits / temperature, axis=-1)
  token_logp = jnp.take_along_axis(log_probs, utterance[..., None].astype(jnp.int32), axis=-1)
  return token_logp[..., 0], pg.categorical_entropy(logits / temperature)


def flatten_steps(x: Array) -> Array:
  """`[T, N, ...]` -> `[T * N, ...]` (time-major rows)."""
  return x.reshape((-1,) + x.shape[2:])


def evaluation_key(init_key: Array) -> Array:
  """The key of a run's evaluation games, drawn once from its init key: every evaluation of a
  run plays the same games, so a learning curve shows the policy changing, not the sampling
  spread of new games (a fixed BC policy on fresh games of 256 moves by up to 0.1)."""
  return jax.random.fold_in(init_key, EVAL_STREAM)


def fixed_games_evaluation(evaluate_params: Callable) -> Callable:
  """A `Learner.evaluate` for a run state with `agent.policy_params` and `eval_key`: greedy play
  on the run's fixed evaluation games (the key the loop passes is not used)."""

  def evaluate(state, key: Array) -> dict[str, Array]:
    del key  # the same games at every evaluation: `evaluation_key`
    return evaluate_params(state.agent.policy_params, state.eval_key)

  return evaluate


class LearnerParts(NamedTuple):
  """What every token-game learner builds from its config before `init`."""

  env: token_game.TokenGame
  env_params: token_game.EnvParams
  policy: transformer.CausalTransformer
  sample: Callable  # `sampling_policy` of the config's policy
  evaluate: Callable  # `fixed_games_evaluation` of the greedy policy: `Learner.evaluate`


def learner_parts(config) -> LearnerParts:
  """The game, its parameters, the policy, its sampling function and the learner's evaluation."""
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  policy = make_policy(env_params, config)
  return LearnerParts(
    env,
    env_params,
    policy,
    sampling_policy(policy, env_params.utterance_len, config.temperature),
    fixed_games_evaluation(greedy_evaluation(env, env_params, policy, config.eval_episodes)),
  )


# ----------------------------------------------------------------------------------------------
# The behaviour-cloned warm start.
# ----------------------------------------------------------------------------------------------


def scripted_rollout(
  key: Array, env, env_params: token_game.EnvParams, num_episodes: int, random_question_prob: float
):
  """`num_episodes` games of the scripted questioner run in parallel for `max_turns` turns: the
  rollout's `[max_turns, num_episodes]` trajectory (rewards and successors included). A game that
  ends early is reset and its next game's first turns fill the remaining steps, so every step is
  a real utterance. A pure function of `key`."""
  reset_key, run_key = jax.random.split(key)
  carry = rollout.reset(env, env_params, reset_key, num_episodes)

  def scripted(_, obs, step_key):
    keys = jax.random.split(step_key, obs.shape[0])
    utterance = jax.vmap(token_game.scripted_questioner, in_axes=(0, 0, None, None))(
      keys, obs, env_params, random_question_prob
    )
    return utterance, None

  return rollout.rollout(env, env_params, scripted, None, carry, run_key, env_params.max_turns)[1]


def scripted_dataset(
  key: Array, env, env_params: token_game.EnvParams, num_episodes: int, random_question_prob: float
) -> UtteranceData:
  """`num_episodes * max_turns` utterances of the scripted questioner (`scripted_rollout`)."""
  traj = scripted_rollout(key, env, env_params, num_episodes, random_question_prob)
  return UtteranceData(dialogue=flatten_steps(traj.obs), utterance=flatten_steps(traj.action))


def behaviour_cloning(
  key: Array,
  model: transformer.CausalTransformer,
  params: PyTree,
  data: UtteranceData,
  num_steps: int,
  batch_size: int,
  learning_rate: float,
) -> tuple[PyTree, Array]:
  """`num_steps` Adam steps of BC on uniformly sampled batches; returns params and the losses."""
  tx = optax.adam(learning_rate)
  num_examples = data.utterance.shape[0]

  def bc_step(carry, step_key):
    params, opt_state = carry
    index = jax.random.randint(step_key, (batch_size,), 0, num_examples)
    dialogue, utterance = data.dialogue[index], data.utterance[index]

    def loss_fn(params):
      logp = transformer.utterance_log_probs(model, params, dialogue, utterance)
      keep = jnp.ones((batch_size,), bool)
      return hc.filtered_bc_loss(logp, token_mask(utterance), keep)[0]

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss

  (params, _), losses = jax.lax.scan(
    bc_step, (params, tx.init(params)), jax.random.split(key, num_steps)
  )
  return params, losses


def bc_key_of(agent_key: Array) -> Array:
  """The key an agent's `create(agent_key, ...)` hands to `pretrained_policy_params` (the second
  half of its split; the first starts the agent's other networks)."""
  return jax.random.split(agent_key)[1]


def warm_start_keys(bc_key: Array) -> Array:
  """The init, dataset and BC-step keys `pretrained_policy_params(bc_key, ...)` uses."""
  return jax.random.split(jax.random.fold_in(bc_key, BC_STREAM), 3)


def pretrained_policy_params(
  bc_key: Array, model: transformer.CausalTransformer, env, env_params: token_game.EnvParams, config
) -> PyTree:
  """Warm-started policy parameters: `config.bc_steps` BC steps on scripted dialogues (the random
  initialisation if 0). Deterministic in `bc_key`; jittable."""
  init_key, data_key, step_key = warm_start_keys(bc_key)
  params = init_policy_params(init_key, model, env_params)
  if config.bc_steps > 0:
    data = scripted_dataset(
      data_key, env, env_params, config.bc_dataset_episodes, config.bc_random_question_prob
    )
    params, _ = behaviour_cloning(
      step_key, model, params, data, config.bc_steps, config.bc_batch_size, config.bc_learning_rate
    )
  return params


def policy_start(
  bc_key: Array,
  model: transformer.CausalTransformer,
  env,
  env_params: token_game.EnvParams,
  config,
  policy_params: Optional[PyTree] = None,
) -> PyTree:
  """An agent's starting policy: `policy_params` when given (its learner's `warm_start`,
  computed beforehand), else `pretrained_policy_params(bc_key, ...)`."""
  if policy_params is not None:
    return policy_params
  return pretrained_policy_params(bc_key, model, env, env_params, config)


def warm_start_policy_params(key: Array, config: ml_collections.ConfigDict) -> PyTree:
  """The behaviour-cloned policy that a token agent's `make_learner(config).init(key)` starts
  from (every token agent splits its init key into agent, env and run keys, and hands
  `bc_key_of(agent key)` to `pretrained_policy_params`), as a function of its own: the BC start
  is the costly part of `init` and the same for every run of a config and seed, so a driver can
  compute it once, cache it and pass it to `init(key, policy_params)`; the result is identical
  (`warm_start`)."""
  config = ml_collections.FrozenConfigDict(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  agent_key = jax.random.split(key, 3)[0]
  return pretrained_policy_params(
    bc_key_of(agent_key), make_policy(env_params, config), env, env_params, config
  )


def warm_start(config: ml_collections.ConfigDict) -> WarmStart:
  """The BC start as the `WarmStart` of a token agent's learner: `warm_start_policy_params`
  computed from `WARM_START_FIELDS` alone (reading any other field fails), so that every token
  agent with the same game, policy size and BC settings shares one cached start per seed."""
  fields = {name: config[name] for name in WARM_START_FIELDS}
  fields["env_kwargs"] = fields["env_kwargs"].to_dict()
  own = ml_collections.FrozenConfigDict(fields)
  return WarmStart(
    compute=lambda key: warm_start_policy_params(key, own),
    fields={"warm_start": "token game behaviour cloning", "version": 1, **fields},
  )


def warm_start_transitions(
  bc_key: Array, env, env_params: token_game.EnvParams, config
) -> UtteranceTransition:
  """The behaviour-cloning dataset of `pretrained_policy_params(bc_key, ...)` as
  utterance-level transitions, with the rewards and successors BC does not need.

  The same games as `scripted_dataset` (same key derivation), so a critic can be pretrained
  on the data the policy was cloned from: ArCHer's critic starts from a pretrained LM and its
  policy from an SFT checkpoint, both made before any interaction.
  """
  data_key = warm_start_keys(bc_key)[1]
  return transitions_from_rollout(
    scripted_rollout(
      data_key, env, env_params, config.bc_dataset_episodes, config.bc_random_question_prob
    )
  )


# ----------------------------------------------------------------------------------------------
# Utterance-level transitions and the twin Q/V utterance critic.
# ----------------------------------------------------------------------------------------------


def transitions_from_rollout(traj) -> UtteranceTransition:
  """The `[T, N]` rollout as a flat `[T * N]` batch of utterance-level transitions."""
  return UtteranceTransition(
    dialogue=flatten_steps(traj.obs),
    utterance=flatten_steps(traj.action),
    reward=flatten_steps(traj.reward),
    next_dialogue=flatten_steps(traj.next_obs),
    terminated=flatten_steps(traj.terminated),
  )


def empty_buffer(env_params: token_game.EnvParams, capacity: int) -> replay.ReplayBuffer:
  """A replay buffer of `capacity` utterance-level transitions of the game."""
  dialogue = first_dialogue(env_params)[0]
  example = UtteranceTransition(
    dialogue=dialogue,
    utterance=first_utterance(env_params)[0],
    reward=jnp.zeros((), jnp.float32),
    next_dialogue=dialogue,
    terminated=jnp.zeros((), bool),
  )
  return replay.init(example, capacity)


def sample_batches(
  buffer: replay.ReplayBuffer, key: Array, num_batches: int, batch_size: int
) -> UtteranceTransition:
  """`num_batches` uniform batches, leaves `[num_batches, batch_size, ...]`."""
  return jax.vmap(lambda k: replay.sample(buffer, k, batch_size))(
    jax.random.split(key, num_batches)
  )


def make_critic(env_params: token_game.EnvParams, config) -> transformer.UtteranceCritic:
  """The twin Q/V utterance critic of `config` over the game's tokens (`critic_*` fields of the
  `archer` and `llm_archer` configs)."""
  max_len = token_game.max_dialogue_len(env_params) + env_params.utterance_len
  return transformer.UtteranceCritic(
    vocab_size=token_game.vocabulary(env_params).size,
    d_model=config.critic_d_model,
    num_layers=config.critic_num_layers,
    num_heads=config.num_heads,
    max_len=max_len,
    pad_token=token_game.PAD,
    num_critics=config.num_critics,
    utterance_encoding=config.critic_utterance_encoding,
    readout=config.critic_readout,
    causal=config.critic_causal,
  )


def add_critic_fields(config: ml_collections.ConfigDict, d_model: int, num_layers: int) -> None:
  """The fields of the twin Q/V utterance critic (`make_critic`, `init_critic_params`), with an
  encoder of `d_model` x `num_layers`."""
  config.num_critics = 2
  config.critic_utterance_encoding = "separate"  # reference DoubleCritic layout; or "joint"
  config.critic_readout = "mean"  # encoder features: "mean" over tokens or the "last" token
  config.critic_init = "random"  # or "policy": the encoder starts from the BC policy's trunk
  config.critic_causal = False  # the policy's causal mask in the critic's encoder
  config.critic_d_model = d_model
  config.critic_num_layers = num_layers


def validate_critic_fields(config: ml_collections.ConfigDict) -> None:
  """Checks of the fields `add_critic_fields` adds (ConfigError naming the field); a critic
  started from the policy (`critic_init="policy"`) has the policy's width and depth."""
  checks.positive_int(config, "num_critics", "critic_d_model", "critic_num_layers")
  checks.one_of(config, "critic_utterance_encoding", transformer.UTTERANCE_ENCODINGS)
  checks.one_of(config, "critic_readout", transformer.CRITIC_READOUTS)
  checks.one_of(config, "critic_init", CRITIC_INITS)
  checks.one_of(config, "critic_causal", (True, False))
  if config.critic_init == "policy":
    for critic_field, policy_field in (
      ("critic_d_model", "d_model"),
      ("critic_num_layers", "num_layers"),
    ):
      if config[critic_field] != config[policy_field]:
        raise checks.ConfigError(
          f"config.{critic_field}: expected config.{policy_field} ({config[policy_field]}) "
          f"because config.critic_init is 'policy' (the critic's encoder is a copy of the "
          f"policy's trunk), got {config[critic_field]}"
        )
  check_heads_divide(config, "critic_d_model")


def init_critic_params(
  key: Array,
  critic: transformer.UtteranceCritic,
  env_params: token_game.EnvParams,
  policy_params: PyTree,
  critic_init: str,
) -> PyTree:
  """The critic's parameters: random, or with the encoder copied from the policy's trunk
  (`critic_init="policy"`, as the reference's critic starts from a pretrained LM)."""
  params = critic.init(key, first_dialogue(env_params), first_utterance(env_params))
  if critic_init == "policy":
    params = transformer.critic_params_from_policy(params, policy_params)
  return params


def outcome_means(
  values: Array, batch: UtteranceTransition, turn_reward: float
) -> dict[str, Array]:
  """Does a critic tell winning from losing utterances? `values` `[B]` averaged over the batch's
  successful utterances (correct guesses: a reward above the game's `turn_reward`, which every
  other turn earns), over its failed final ones (terminated, with `turn_reward`), and their
  difference (0 where the batch holds none of a kind): `q_success`, `q_failure`, `q_gap`. The
  reward of a win is not assumed positive: under the Twenty Questions rules it is 0 and every
  other turn costs 1."""
  success = batch.reward > turn_reward
  failure = batch.terminated & ~success

  def mean_over(mask):
    weights = mask.astype(values.dtype)
    return jnp.sum(values * weights) / jnp.maximum(jnp.sum(weights), 1.0)

  q_success, q_failure = mean_over(success), mean_over(failure)
  return {"q_success": q_success, "q_failure": q_failure, "q_gap": q_success - q_failure}


def critic_diagnostics(
  extras: hc.CriticExtras, batch: UtteranceTransition, turn_reward: float
) -> dict[str, Array]:
  """`outcome_means` of min_e Q_e(s, a) (before the step) over a critic batch."""
  return outcome_means(jnp.min(extras.q_target - extras.q_td_error, axis=0), batch, turn_reward)


def critic_metrics(
  loss: Array, extras: hc.CriticExtras, batch: UtteranceTransition, turn_reward: float
) -> dict[str, Array]:
  """What an ArCHer critic step (`hc.archer_critic_loss`) logs: its loss, the mean Q value, the
  mean absolute Q and V errors and `critic_diagnostics`."""
  return {
    "critic_loss": loss,
    "q_value": jnp.mean(extras.q_target - extras.q_td_error),
    "q_td_error_abs": jnp.mean(jnp.abs(extras.q_td_error)),
    "v_error_abs": jnp.mean(jnp.abs(extras.v_error)),
    **critic_diagnostics(extras, batch, turn_reward),
  }


def actor_metrics(loss: Array, extras: hc.ActorExtras) -> dict[str, Array]:
  """What an ArCHer actor step (`hc.archer_actor_loss`) logs: its loss, the advantage's mean,
  mean magnitude and spread, and the mean log-probability of the sampled utterances."""
  return {
    "actor_loss": loss,
    "advantage": jnp.mean(extras.advantage),
    "advantage_abs": jnp.mean(jnp.abs(extras.advantage)),
    "advantage_std": jnp.std(extras.advantage),
    "sequence_log_prob": jnp.mean(extras.sequence_log_prob),
  }


def min_q(agent, batch: UtteranceTransition) -> Array:
  """min_e Q_e(s, a) `[B]` of an agent's online critic (`agent.critic`, `agent.critic_params`) at
  the batch's own utterances."""
  out = agent.critic.apply(
    agent.critic_params, batch.dialogue, batch.utterance, token_mask(batch.utterance)
  )
  return jnp.min(out.q, axis=0)


def token_advantages(
  reward: Array,
  terminated: Array,
  done: Array,
  value: Array,
  next_dialogue_value: Array,
  mask: Array,
  config,
) -> Array:
  """Token-level GAE `[T, N, L]` from time-major `[T, N]` / `[T, N, L]` rollout fields (0 on
  unread tokens): `hierarchical_critics.token_level_advantages` per environment."""

  def one_env(*fields):
    return hc.token_level_advantages(*fields, config.gamma, config.gae_lambda, config.token_gamma)

  return jax.vmap(one_env, in_axes=1, out_axes=1)(
    reward.astype(jnp.float32), terminated, done, value, next_dialogue_value, mask
  )
