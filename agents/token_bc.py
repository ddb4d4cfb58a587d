"""Behaviour-cloned warm start for token-level agents on the token game (`TokenGame-v0`).

Every ArCHer run starts from a supervised (SFT) policy: "ArCHer: Training Language Model Agents
via Hierarchical Multi-Turn RL", Zhou, Zanette, Pan, Levine, Kumar (arXiv 2402.19446); reference
`scripts/run_bc.py` of YifeiZhou02/ArCHer (Adam, lr 1e-4, batch 8, on offline dialogues). Here the
offline dialogues come from the token game's `scripted_questioner`, a tunably imperfect player,
so the data set is a pure function of a key and the whole warm start runs inside `init` (jit).
ArCHer and every baseline on the game (`token_ppo`, `filtered_bc`, `token_grpo`) call
`pretrained_policy` with the same key stream, so with the same seed they start from the same
policy.

Deviations from the reference: the policy is a small `CausalTransformer` trained from scratch
(no pretrained GPT-2); the BC loss is `hrljax.losses.hierarchical_critics.filtered_bc_loss` with
every example kept (the mean over utterances of the token-summed NLL, the reference's
`plain_bc_loss`), on the tokens the environment reads (`utterance_token_mask`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax

from hrljax import config_checks as checks
from hrljax import rollout
from hrljax.envs import token_game
from hrljax.losses import hierarchical_critics as hc
from hrljax.networks import transformer
from hrljax.types import Array, PyTree

# Key streams folded into an agent's init key, shared by every token-game agent.
BC_STREAM = 101


class UtteranceData(NamedTuple):
  """Utterance-level examples (leading axis = examples): a dialogue and the utterance spoken."""

  dialogue: Array  # int32 [N, max_dialogue_len]
  utterance: Array  # int32 [N, L]


class SpeaksUtterances:
  """`act` for a token-game agent holding `policy`, `policy_params`, `utterance_len`, `config`."""

  def act(self, dialogue: Array, key: Array, deterministic: bool = False) -> Array:
    """Utterances int32 `[B, L]` for dialogues `[B, D]` (greedy decoding if `deterministic`)."""
    tokens, _ = transformer.generate(self.policy, self.policy_params, dialogue, key,
                                     num_tokens=self.utterance_len,
                                     temperature=self.config.temperature, greedy=deterministic)
    return tokens


def add_config_fields(config: ml_collections.ConfigDict) -> None:
  """The policy-network and warm-start fields shared by every token-game agent."""
  config.env_name = "TokenGame-v0"
  config.env_kwargs = ml_collections.ConfigDict()
  config.d_model = 64
  config.num_layers = 2
  config.num_heads = 4
  config.temperature = 1.0  # ArCHer's rollouts sample at temperature 1
  # Behaviour-cloning warm start (reference run_bc.py: Adam lr 1e-4, batch 8).
  config.bc_steps = 500  # 0: start from the randomly initialised policy
  config.bc_batch_size = 64
  config.bc_learning_rate = 1e-3
  config.bc_dataset_episodes = 256  # dialogues of the scripted questioner
  config.bc_random_question_prob = 0.5  # its imperfection (token_game.scripted_questioner)


def validate_config_fields(config: ml_collections.ConfigDict) -> None:
  """Checks of the fields `add_config_fields` adds (ConfigError naming the field)."""
  checks.positive_int(config, "d_model", "num_layers", "num_heads", "bc_batch_size",
                      "bc_dataset_episodes")
  checks.positive(config, "temperature", "bc_learning_rate")
  checks.in_unit_interval(config, "bc_random_question_prob")
  if isinstance(config.bc_steps, bool) or not isinstance(config.bc_steps, int) \
      or config.bc_steps < 0:
    raise checks.ConfigError(f"config.bc_steps: expected an integer >= 0, got {config.bc_steps!r}")
  if config.d_model % config.num_heads:
    raise checks.ConfigError(f"config.d_model: expected a multiple of config.num_heads "
                             f"({config.num_heads}), got {config.d_model}")
  if config.env_name != "TokenGame-v0":
    raise checks.ConfigError(f"config.env_name: expected 'TokenGame-v0', got {config.env_name!r}")


def make_policy(env_params: token_game.EnvParams, config) -> transformer.CausalTransformer:
  """The token policy, sized so that a full dialogue plus one utterance fits."""
  max_len = token_game.max_dialogue_len(env_params) + env_params.utterance_len + 1
  return transformer.CausalTransformer(
      vocab_size=token_game.vocabulary(env_params).size, d_model=config.d_model,
      num_layers=config.num_layers, num_heads=config.num_heads, max_len=max_len,
      pad_token=token_game.PAD)


def init_policy_params(key: Array, model: transformer.CausalTransformer,
                       env_params: token_game.EnvParams) -> PyTree:
  dialogue = jnp.zeros((1, token_game.max_dialogue_len(env_params)), jnp.int32)
  return model.init(key, dialogue.at[:, 0].set(token_game.BOS))


def scripted_rollout(key: Array, env, env_params: token_game.EnvParams, num_episodes: int,
                     random_question_prob: float):
  """`num_episodes` games of the scripted questioner run in parallel for `max_turns` turns: the
  rollout's `[max_turns, num_episodes]` trajectory (rewards and successors included). A game that
  ends early is reset and its next game's first turns fill the remaining steps, so every step is
  a real utterance. A pure function of `key`."""
  reset_key, run_key = jax.random.split(key)
  carry = rollout.reset(env, env_params, reset_key, num_episodes)

  def scripted(_, obs, step_key):
    keys = jax.random.split(step_key, obs.shape[0])
    utterance = jax.vmap(token_game.scripted_questioner, in_axes=(0, 0, None, None))(
        keys, obs, env_params, random_question_prob)
    return utterance, None

  return rollout.rollout(env, env_params, scripted, None, carry, run_key, env_params.max_turns)[1]


def scripted_dataset(key: Array, env, env_params: token_game.EnvParams, num_episodes: int,
                     random_question_prob: float) -> UtteranceData:
  """`num_episodes * max_turns` utterances of the scripted questioner (`scripted_rollout`)."""
  traj = scripted_rollout(key, env, env_params, num_episodes, random_question_prob)
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  return UtteranceData(dialogue=flat(traj.obs), utterance=flat(traj.action))


def token_mask(utterance: Array) -> Array:
  """The tokens the game reads, bool `[B, L]` (through the first END/PAD)."""
  return jax.vmap(token_game.utterance_token_mask)(utterance)


def behaviour_cloning(key: Array, model: transformer.CausalTransformer, params: PyTree,
                      data: UtteranceData, num_steps: int, batch_size: int,
                      learning_rate: float) -> tuple[PyTree, Array]:
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

  (params, _), losses = jax.lax.scan(bc_step, (params, tx.init(params)),
                                     jax.random.split(key, num_steps))
  return params, losses


def warm_start_keys(key: Array) -> Array:
  """The init, dataset and BC-step keys `pretrained_policy_params(key, ...)` uses."""
  return jax.random.split(jax.random.fold_in(key, BC_STREAM), 3)


def pretrained_policy_params(key: Array, model: transformer.CausalTransformer, env,
                             env_params: token_game.EnvParams, config) -> PyTree:
  """Warm-started policy parameters: `config.bc_steps` BC steps on scripted dialogues (the random
  initialisation if 0). Deterministic in `key`; jittable."""
  init_key, data_key, bc_key = warm_start_keys(key)
  params = init_policy_params(init_key, model, env_params)
  if config.bc_steps > 0:
    data = scripted_dataset(data_key, env, env_params, config.bc_dataset_episodes,
                            config.bc_random_question_prob)
    params, _ = behaviour_cloning(bc_key, model, params, data, config.bc_steps,
                                  config.bc_batch_size, config.bc_learning_rate)
  return params
