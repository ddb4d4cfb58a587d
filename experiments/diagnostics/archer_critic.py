"""Does ArCHer's critic learn the token game? The critic alone, on a fixed buffer, vs critic steps.

  python -m experiments.diagnostics.archer_critic --config=archer_token_game \
      --warm_start_cache=runs/bc_cache --steps=400 --out=runs/diagnostics/critic.jsonl

ArCHer (Zhou et al., arXiv 2402.19446) moves its token policy with the advantage of an
utterance-level critic, so the actor can only improve once the critic ranks utterances. On the
token game an utterance that ends the game is worth exactly Q*(s, guess i) = [i consistent with
the answers of s] / (number of consistent items) (the target is uniform over the items the answers
leave possible, `token_game.consistent_items`); a question on the last turn is worth 0. Under
other rewards (the Twenty Questions rules: `turn_reward` for every turn not won,
`correct_reward` for the win, and a wrong guess does not end the game) the same probability of a
win gives Q* = turn_reward + (correct_reward - turn_reward) x it, exact for the utterances that
end the game whatever the target (`oracle_q`: every utterance on the last turn; a guess of the
only item left); the gaps and errors below are taken over those. This script measures how
fast the critic of a config (any `--config.critic_*` override) learns that, with the policy fixed
at the behaviour-cloned start of seed `--seed` (the start `python -m experiments.train` gives
that seed, `common.init_keys`, cached in `--warm_start_cache`):

1. a training buffer of `--buffer_iterations` ArCHer iterations of the BC policy (num_envs games x
   num_steps utterances each; games continue across iterations, as in the run), with
   `--warm_start_data` also the seed's behaviour-cloning dataset (`tc.warm_start_transitions`,
   the scripted questioner's games that `config.critic_pretrain_steps` pretrains on), and a
   held-out buffer of `--held_out_iterations` iterations of the BC policy from other games;
2. `--steps` critic steps of `archer.ArcherAgent.critic_step` (the run's critic update: twin Q on
   r + gamma V_target(s'), twin V on Q_target(s, a_pi), Polyak target) on uniform batches of the
   training buffer;
3. every `--eval_every` steps one JSON line: `q_gap` (min-Q of correct guesses minus failed final
   utterances, the agent's diagnostic) on the whole training buffer and on the held-out buffer,
   the same gap of Q* (`oracle_gap`: the best a critic can show on these outcomes, below 1
   because a guess among several consistent items is a coin flip), and the mean |min-Q - Q*| over
   final utterances of the held-out buffer (`final_error`); and whether the critic's advantage
   points where the exact one does (`advantage_agreement`: at those of the first
   `AGREEMENT_DIALOGUES` held-out dialogues that are on the game's last turn, 8 policy samples
   each, the correlation of the critic's min Q - min V with Q*(s, a) - mean over the samples of
   Q*, the advantage the actor would need).
"""

import os
import sys

from absl import app, flags
from ml_collections import config_flags

from experiments.diagnostics import common

FLAGS = flags.FLAGS
# Held-out dialogues (the first ones) where the critic's advantage is compared with the exact one.
AGREEMENT_DIALOGUES = 2048
# Dialogue tokens sampled at once for the agreement: 2,048 dialogues of the 4-turn game (21 tokens)
# fit in this machine's memory; at 20 turns (101 tokens) the same dialogues asked for 30 GB, so
# longer dialogues are sampled in chunks.
AGREEMENT_TOKENS = AGREEMENT_DIALOGUES * 21


def define_flags() -> None:
  """The command line (defined only when run as a script)."""
  flags.DEFINE_integer("seed", 0, "The seed whose BC policy fills the buffers.")
  flags.DEFINE_integer(
    "buffer_iterations",
    8,
    "ArCHer iterations of BC-policy data in the "
    "training buffer (0: none; then --warm_start_data is needed).",
  )
  flags.DEFINE_integer(
    "held_out_iterations",
    -1,
    "ArCHer iterations of BC-policy data in the held-out buffer (-1: as --buffer_iterations).",
  )
  flags.DEFINE_boolean(
    "warm_start_data", False, "Add the seed's BC dataset (with rewards) to the training buffer."
  )
  flags.DEFINE_integer("steps", 400, "Critic steps.")
  flags.DEFINE_integer("eval_every", 50, "Critic steps between evaluations.")
  flags.DEFINE_string("warm_start_cache", None, "Directory caching the seed's BC start.")
  flags.DEFINE_string("out", None, "JSONL output (one line per evaluation).")
  config_flags.DEFINE_config_file(
    "config", None, "ArCHer token-game config file or name.", lock_config=True
  )


def collect(config, policy_params, key, iterations: int):
  """`iterations` x num_envs x num_steps utterance transitions of the sampling policy, flat."""
  import jax
  from hrljax import envs, rollout
  from hrljax.agents import token_common as tc

  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  sampled = tc.sampling_policy(
    tc.make_policy(env_params, config), env_params.utterance_len, config.temperature
  )
  reset_key, rollout_key = jax.random.split(key)
  carry = rollout.reset(env, env_params, reset_key, config.num_envs)
  _, traj = rollout.rollout(
    env, env_params, sampled, policy_params, carry, rollout_key, iterations * config.num_steps
  )
  return tc.transitions_from_rollout(traj)


def oracle_q(batch, env_params):
  """`(Q*(s, a), decided)`, `[B]` each. `decided` marks the utterances that end the game
  whatever the hidden item: every utterance on the last turn; a guess, under rules where a wrong
  guess ends the game (the default); a guess of the only item the answers leave. Such an
  utterance earns `correct_reward` with the probability that it is a correct guess (1 / the
  number of items consistent with the answers, for a consistent item; 0 otherwise) and
  `turn_reward` otherwise, which is its exact value. Elsewhere (a question before the last turn;
  under the Twenty Questions rules, a guess among several items) the value depends on the play
  that follows, and `Q*` is meaningless (and unused)."""
  import jax
  import jax.numpy as jnp
  from hrljax.envs import token_game

  candidates, turns = jax.vmap(lambda d: token_game.consistent_items(d, env_params))(batch.dialogue)
  parsed = jax.vmap(lambda u: token_game.parse_utterance(u, env_params))(batch.utterance)
  guess = parsed.kind == token_game.KIND_GUESS
  item = jnp.clip(parsed.item, 0, env_params.num_items - 1)
  consistent = jnp.take_along_axis(candidates, item[:, None], axis=1)[:, 0]
  count = jnp.maximum(jnp.sum(candidates, axis=1), 1)
  correct = jnp.where(guess & consistent, 1.0 / count, 0.0)
  q_star = env_params.turn_reward + (env_params.correct_reward - env_params.turn_reward) * correct
  decided = (
    (turns == env_params.max_turns - 1)
    | (guess & env_params.end_on_wrong_guess)
    | (guess & consistent & (count == 1))
  )
  return q_star, decided


def outcome_gap(values, batch, decided, turn_reward):
  """Mean of `values` over the correct guesses minus over the failed final utterances, among the
  `decided` utterances (`oracle_q`): all of them under the default rules."""
  import jax.numpy as jnp
  from hrljax.agents import token_common as tc

  kept = batch._replace(
    reward=jnp.where(decided, batch.reward, turn_reward), terminated=batch.terminated & decided
  )
  return tc.outcome_means(values, kept, turn_reward)["q_gap"]


def critic_report(
  agent,
  train,
  held_out,
  oracle_train,
  oracle_held_out,
  env_params,
  sample_key=None,
  num_samples: int = 8,
):
  """The evaluation numbers of one point of the curve (see the module docstring); with
  `sample_key` also the `advantage_agreement` of the held-out buffer's dialogues.
  `oracle_train` and `oracle_held_out` are `oracle_q` of the two buffers."""
  import jax.numpy as jnp
  from hrljax.agents import token_common as tc

  min_q = lambda batch: tc.min_q(agent, batch)
  q_held_out = min_q(held_out)
  (q_star_train, decided_train), (q_star_held_out, decided_held_out) = oracle_train, oracle_held_out
  final = decided_held_out.astype(jnp.float32)
  turn_reward = env_params.turn_reward
  agreement = {}
  if sample_key is not None:
    # At most AGREEMENT_DIALOGUES dialogues: K samples of all 8,192 of a 32-iteration buffer
    # in one batch exhausted the machine's memory.
    agreement = advantage_agreement(
      *last_turn_advantages(
        agent, held_out.dialogue[:AGREEMENT_DIALOGUES], sample_key, env_params, num_samples
      )
    )
  return {
    **agreement,
    "q_gap_train": outcome_gap(min_q(train), train, decided_train, turn_reward),
    "q_gap_held_out": outcome_gap(q_held_out, held_out, decided_held_out, turn_reward),
    "oracle_gap_train": outcome_gap(q_star_train, train, decided_train, turn_reward),
    "oracle_gap_held_out": outcome_gap(q_star_held_out, held_out, decided_held_out, turn_reward),
    "final_error": jnp.sum(jnp.abs(q_held_out - q_star_held_out) * final) / jnp.sum(final),
  }


def last_turn_advantages(agent, dialogue, key, env_params, num_samples: int):
  """`sampled_advantages` of `dialogue` `[B, D]`, in one batch when it holds at most
  `AGREEMENT_TOKENS` tokens (so the 4-turn game's numbers are those of one batch), else in
  `lax.map` chunks of halved size, each with its own key."""
  import jax

  batch_size, length = dialogue.shape
  chunks = 1
  while batch_size % (2 * chunks) == 0 and batch_size // chunks * length > AGREEMENT_TOKENS:
    chunks *= 2
  if chunks == 1:
    return sampled_advantages(agent, dialogue, key, env_params, num_samples)
  critic, exact, last_turn = jax.lax.map(
    lambda part: sampled_advantages(agent, part[0], part[1], env_params, num_samples),
    (dialogue.reshape(chunks, batch_size // chunks, length), jax.random.split(key, chunks)),
  )
  samples_first = lambda x: x.transpose(1, 0, 2).reshape(num_samples, batch_size)
  return samples_first(critic), samples_first(exact), last_turn.reshape(batch_size)


def sampled_advantages(agent, dialogue, key, env_params, num_samples: int):
  """The critic's and the exact advantage of `num_samples` policy utterances at every dialogue
  `[B, D]`, `[K, B]` each, and a `[B]` mask of the dialogues on the game's last turn.

  On the last turn every utterance ends the game, whatever the rules, so its exact value is
  Q*(s, a) (`oracle_q`), and the exact advantage of a sample is Q*(s, a_k) - mean_k Q*(s, a_k) (the policy's value
  estimated from the same samples). The critic's is the actor's weight
  min_e Q_e(s, a_k) - min_e V_e(s) (`hierarchical_critics.archer_advantage`).
  """
  import jax
  import jax.numpy as jnp
  from hrljax.agents import token_common as tc
  from hrljax.envs import token_game
  from hrljax.losses import hierarchical_critics as hc
  from hrljax.networks import transformer

  batch_size = dialogue.shape[0]
  repeated = jnp.tile(dialogue, (num_samples, 1))
  utterance, _ = transformer.generate(
    agent.policy,
    agent.policy_params,
    repeated,
    key,
    num_tokens=agent.utterance_len,
    temperature=agent.config.temperature,
  )
  out = agent.critic.apply(agent.critic_params, repeated, utterance, tc.token_mask(utterance))
  critic = hc.archer_advantage(out.q, out.v).reshape(num_samples, batch_size)
  samples = tc.UtteranceTransition(
    dialogue=repeated,
    utterance=utterance,
    reward=jnp.zeros((repeated.shape[0],)),
    next_dialogue=repeated,
    terminated=jnp.ones((repeated.shape[0],), bool),
  )
  q_star = oracle_q(samples, env_params)[0].reshape(num_samples, batch_size)
  exact = q_star - jnp.mean(q_star, axis=0, keepdims=True)
  _, turns = jax.vmap(lambda d: token_game.consistent_items(d, env_params))(dialogue)
  return critic, exact, turns == env_params.max_turns - 1


def advantage_agreement(critic, exact, last_turn):
  """How well the critic's advantage `[K, B]` points where the exact one does, over the samples
  of the dialogues in `last_turn` `[B]`:

  * `adv_corr`: Pearson correlation of the two over all those samples (the actor's REINFORCE
    direction is the advantage-weighted score, so this is what matters for its first steps);
  * `adv_corr_centred`: the same with the critic's advantage centred per dialogue over its K
    samples (a K-sample baseline in place of the critic's V);
  * `adv_sign_centred`: the fraction of samples with a non-zero exact advantage whose centred
    critic advantage has the same sign.
  """
  import jax.numpy as jnp

  weight = jnp.broadcast_to(last_turn[None].astype(jnp.float32), exact.shape)

  def corr(x, y):
    total = jnp.maximum(jnp.sum(weight), 1.0)
    x = x - jnp.sum(x * weight) / total
    y = y - jnp.sum(y * weight) / total
    covariance = jnp.sum(x * y * weight)
    return covariance / jnp.sqrt(jnp.sum(x * x * weight) * jnp.sum(y * y * weight) + 1e-12)

  centred = critic - jnp.mean(critic, axis=0, keepdims=True)
  decided = weight * (exact != 0)
  agree = jnp.sum((jnp.sign(centred) == jnp.sign(exact)) * decided) / jnp.maximum(
    jnp.sum(decided), 1.0
  )
  return {
    "adv_corr": corr(critic, exact),
    "adv_corr_centred": corr(centred, exact),
    "adv_sign_centred": agree,
  }


def load_policy_params(config, seed: int, cache_dir):
  """Seed `seed`'s BC start (computed and cached if absent) and its init key."""
  import jax

  params = common.warm_start(config, (seed,), cache_dir)
  return jax.tree.map(lambda x: x[0], params), common.init_keys((seed,))[0]


def training_buffer(config, policy_params, key, seed_key, buffer_iterations, warm_start_data):
  """`buffer_iterations` iterations of the policy's data, plus the seed's BC dataset if
  `warm_start_data` (the same transitions a run with `critic_pretrain_steps` starts from)."""
  import jax
  import jax.numpy as jnp
  from hrljax import envs
  from hrljax.agents import token_common as tc

  parts = []
  if buffer_iterations:
    parts.append(jax.jit(lambda p, k: collect(config, p, k, buffer_iterations))(policy_params, key))
  if warm_start_data:
    env, env_params = envs.make(config.env_name, **config.env_kwargs)
    bc_key = tc.bc_key_of(jax.random.split(seed_key, 3)[0])
    parts.append(jax.jit(lambda k: tc.warm_start_transitions(k, env, env_params, config))(bc_key))
  return jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)


def run(
  config,
  seed,
  buffer_iterations,
  steps,
  eval_every,
  cache_dir,
  out,
  held_out_iterations=-1,
  warm_start_data=False,
):
  import jax
  from hrljax import envs
  from hrljax.agents import archer

  archer.validate_config(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  policy_params, seed_key = load_policy_params(config, seed, cache_dir)
  train_key, held_out_key, agent_key, batch_key = jax.random.split(
    jax.random.fold_in(seed_key, 1), 4
  )
  if held_out_iterations < 0:
    held_out_iterations = buffer_iterations
  train = training_buffer(
    config, policy_params, train_key, seed_key, buffer_iterations, warm_start_data
  )
  held_out = jax.jit(lambda params, key: collect(config, params, key, held_out_iterations))(
    policy_params, held_out_key
  )
  oracle = jax.jit(lambda batch: oracle_q(batch, env_params))
  oracle_train, oracle_held_out = oracle(train), oracle(held_out)
  agent = archer.ArcherAgent.create(agent_key, env, env_params, config, policy_params)
  size = train.reward.shape[0]

  @jax.jit
  def train_chunk(agent, key):
    indices = jax.random.randint(key, (eval_every, config.batch_size), 0, size)
    batches = jax.tree.map(lambda x: x[indices], train)
    agent, metrics = jax.lax.scan(lambda a, b: a.critic_step(b), agent, batches)
    return agent, jax.tree.map(lambda m: m.mean(), metrics)

  # The same policy samples at every evaluation, so the agreement changes only with the critic.
  sample_key = jax.random.fold_in(batch_key, 1_000_000)
  # The buffers are arguments, not closure constants: XLA would constant-fold them for minutes.
  report_fn = jax.jit(
    lambda agent, *buffers: critic_report(agent, *buffers, env_params, sample_key)
  )
  report = lambda agent: report_fn(agent, train, held_out, oracle_train, oracle_held_out)
  with open(out, "w") as f:
    for chunk in range(steps // eval_every + 1):
      metrics = {}
      if chunk:
        agent, metrics = train_chunk(agent, jax.random.fold_in(batch_key, chunk))
      row = {
        "critic_steps": chunk * eval_every,
        **{k: round(float(v), 4) for k, v in report(agent).items()},
        **{
          f"batch_{k}": round(float(metrics[k]), 4)
          for k in ("q_gap", "critic_loss")
          if k in metrics
        },
      }
      common.emit_row(f, row)


def main(argv):
  common.check_command_line(argv, FLAGS.config, FLAGS.out)
  if FLAGS.seed < 0:
    sys.exit(f"error: --seed: expected an integer >= 0, got {FLAGS.seed}")
  if FLAGS.buffer_iterations < 0 or (FLAGS.buffer_iterations == 0 and not FLAGS.warm_start_data):
    sys.exit(
      f"error: --buffer_iterations: expected an integer >= 1 (or 0 with "
      f"--warm_start_data), got {FLAGS.buffer_iterations}"
    )
  if (
    FLAGS.held_out_iterations == 0
    or FLAGS.held_out_iterations < -1
    or (FLAGS.held_out_iterations == -1 and FLAGS.buffer_iterations == 0)
  ):
    sys.exit(
      f"error: --held_out_iterations: expected an integer >= 1 (or -1 with "
      f"--buffer_iterations >= 1), got {FLAGS.held_out_iterations}"
    )
  if FLAGS.eval_every < 1 or FLAGS.steps < 0:
    sys.exit(
      f"error: --eval_every must be >= 1 and --steps >= 0, got {FLAGS.eval_every}, {FLAGS.steps}"
    )
  os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
  run(
    FLAGS.config,
    FLAGS.seed,
    FLAGS.buffer_iterations,
    FLAGS.steps,
    FLAGS.eval_every,
    FLAGS.warm_start_cache,
    FLAGS.out,
    FLAGS.held_out_iterations,
    FLAGS.warm_start_data,
  )


if __name__ == "__main__":
  define_flags()
  app.run(main, argv=common.resolve_config_argument(sys.argv))
