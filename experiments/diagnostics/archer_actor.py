"""Can ArCHer's token-level actor improve on its BC start when its advantage is right?

  python -m experiments.diagnostics.archer_actor --config=archer_token_game \
      --warm_start_cache=runs/bc_cache --optimizer=adam --learning_rate=1e-4 \
      --iterations=100 --eval_every=10 --out=runs/diagnostics/actor_oracle_adam.jsonl

ArCHer (Zhou et al., arXiv 2402.19446) moves its token policy with REINFORCE weighted by an
utterance-level advantage from a learned critic. On the token game no ArCHer run has improved on
the behaviour-cloned start (`experiments/results/ARCHER.md`), and the critic's ranking of fresh
guesses is poor; this script removes the critic to ask whether the actor update itself can
improve the start when the advantage is right. It trains the library's actor loss
(`hierarchical_critics.archer_actor_loss`, the loss `agents/archer.py` uses) on on-policy batches,
with the advantage computed from the game's exact values instead of a critic:

* every iteration `--num_games` fresh games are played to the end by the current policy (one
  episode each, `rollout.grouped_episodes`; the game's turn limit ends every episode inside
  `max_turns` utterances); utterances are counted as `num_games * max_turns` per iteration,
  the way token PPO counts its `num_envs * num_steps` (steps after an early guess are played but
  not trained on);
* the return of an utterance: `--advantage=oracle` replaces the final reward of its episode by
  its expectation given the final dialogue, Q*(s_T, a_T) (`archer_critic.oracle_q`:
  1 / #consistent items for a guess of a consistent item, else 0; every guess ends the game), and
  discounts it by gamma per utterance: R_t = gamma^(T - t) Q*(s_T, a_T). For the final guess this
  is exactly its Q*; for a question it is the Monte-Carlo return with the target's coin flip at
  the end averaged out. `--advantage=monte_carlo` uses the sampled reward instead (plain
  REINFORCE returns, what token PPO's targets are built from);
* the baseline V: the mean of R over the batch's utterances at the same turn (a state-independent
  baseline per turn, so the estimate stays unbiased); A = (R - V) / std(R - V) over the batch,
  the standardisation of ArCHer's `advantage_normalization="batch"` and of token PPO;
* `--epochs` passes of `--minibatches` minibatch steps over the batch per iteration, with the
  optimizer `--optimizer` (adam with token PPO's eps 1e-5, or sgd) at `--learning_rate` after
  global-norm clipping at the config's `max_grad_norm`, as both agents do.

Seeds: `--seeds`, vmapped, each from the BC start `python -m experiments.train
--config.seeds=...` gives it (`common.init_keys`, cached in `--warm_start_cache`). Every
`--eval_every` iterations one JSON line: greedy success per seed on fixed evaluation games (the
keys `experiments.train` evaluates the seed with) and the mean sampled success of the training
games since the previous line.
"""

import os
import sys

from absl import app, flags
from ml_collections import config_flags

from experiments.diagnostics import common

FLAGS = flags.FLAGS
ADVANTAGES = ("oracle", "monte_carlo")
OPTIMIZERS = ("adam", "sgd")


def define_flags() -> None:
  """The command line (defined only when run as a script)."""
  flags.DEFINE_string("seeds", "0,1,2", "Seeds (as --config.seeds of experiments.train).")
  flags.DEFINE_enum("advantage", "oracle", ADVANTAGES, "Return of an utterance (module doc).")
  flags.DEFINE_enum("optimizer", "adam", OPTIMIZERS, "Actor optimizer.")
  flags.DEFINE_float("learning_rate", 1e-4, "Actor learning rate (token PPO: adam 1e-4).")
  flags.DEFINE_float(
    "advantage_noise",
    0.0,
    "Std of Gaussian noise added to the standardised advantage (0: none; see make_iteration).",
  )
  flags.DEFINE_float("adam_eps", 1e-5, "Adam epsilon (token PPO's).")
  flags.DEFINE_integer("num_games", 32, "Games per iteration (token PPO: 32 x 4 utterances).")
  flags.DEFINE_integer("epochs", 1, "Passes over each iteration's batch (token PPO: 4).")
  flags.DEFINE_integer("minibatches", 1, "Minibatch steps per pass (token PPO: 4).")
  flags.DEFINE_integer("iterations", 60, "Iterations (60 x 128 = token PPO's 7,680 utterances).")
  flags.DEFINE_integer("eval_every", 10, "Iterations between greedy evaluations.")
  flags.DEFINE_string("warm_start_cache", None, "Directory caching the seeds' BC start.")
  flags.DEFINE_string("out", None, "JSONL output (one line per evaluation).")
  config_flags.DEFINE_config_file(
    "config", None, "ArCHer token-game config file or name.", lock_config=True
  )


def episode_returns(transitions, valid, final_value, gamma):
  """`[T, N]` returns R_t = gamma^(T_end - t) * final_value[T_end] of each column's first episode
  (0 outside it), where T_end is the column's first terminated step.

  `final_value` `[T, N]` is the value credited to a terminal utterance (its reward, or its Q*);
  rewards of non-terminal utterances are 0 on the token game with its default rewards.
  """
  import jax
  import jax.numpy as jnp

  def backward(next_return, step):
    terminated, value = step
    current = jnp.where(terminated, value, gamma * next_return)
    return current, current

  _, returns = jax.lax.scan(
    backward, jnp.zeros_like(final_value[0]), (transitions.terminated, final_value), reverse=True
  )
  return jnp.where(valid, returns, 0.0)


def turn_baseline_advantage(returns, valid):
  """(R - mean of R over the valid utterances of the same turn) / its std over valid rows.

  Every column's first episode starts at row 0, so row t holds the (t+1)-th utterance of every
  game: the per-row mean is a per-turn baseline.
  """
  import jax.numpy as jnp

  weights = valid.astype(returns.dtype)
  per_turn = jnp.sum(returns * weights, axis=1, keepdims=True) / jnp.maximum(
    jnp.sum(weights, axis=1, keepdims=True), 1.0
  )
  centred = jnp.where(valid, returns - per_turn, 0.0)
  std = jnp.sqrt(jnp.sum(jnp.square(centred)) / jnp.maximum(jnp.sum(weights), 1.0))
  return centred / (std + 1e-6)


def utterance_returns(transitions, valid, env_params, gamma, advantage):
  """The per-utterance return `[T, N]` of `advantage` ("oracle" or "monte_carlo")."""
  from experiments.diagnostics import archer_critic
  from hrljax.agents import token_common as tc

  if advantage == "oracle":
    flat = tc.transitions_from_rollout(transitions)
    final_value = archer_critic.oracle_q(flat, env_params)[0].reshape(transitions.reward.shape)
  else:
    final_value = transitions.reward
  return episode_returns(transitions, valid, final_value, gamma)


def actor_minibatch_loss(policy_params, policy, rows, temperature):
  """`archer_actor_loss` on `rows` (dialogue, utterance, advantage, valid), the advantage fed as
  a single Q head with V = 0 (as `archer.actor_objective` feeds a standardised advantage)."""
  import jax.numpy as jnp
  from hrljax.agents import token_common as tc
  from hrljax.losses import hierarchical_critics as hc
  from hrljax.networks import transformer

  dialogue, utterance, advantage, valid = rows
  token_logp = transformer.utterance_log_probs(
    policy, policy_params, dialogue, utterance, temperature
  )
  loss, _ = hc.archer_actor_loss(
    token_logp,
    tc.token_mask(utterance),
    advantage[None],
    jnp.zeros_like(advantage)[None],
    valid=valid,
  )
  return loss


def make_optimizer(name: str, learning_rate: float, adam_eps: float, max_grad_norm: float):
  """Global-norm clipping then adam (token PPO's eps) or sgd."""
  import optax

  if name not in OPTIMIZERS:
    raise ValueError(f"optimizer: expected one of {OPTIMIZERS}, got {name!r}")
  optimizer = optax.sgd(learning_rate) if name == "sgd" else optax.adam(learning_rate, eps=adam_eps)
  return optax.chain(optax.clip_by_global_norm(max_grad_norm), optimizer)


def make_iteration(
  config,
  tx,
  num_games: int,
  epochs: int,
  minibatches: int,
  advantage: str,
  advantage_noise: float = 0.0,
):
  """`iteration((params, opt_state), key) -> ((params, opt_state), metrics)`: one on-policy
  batch of `num_games` whole games, then `epochs * minibatches` actor steps on it.

  `advantage_noise` = sigma > 0 adds independent N(0, sigma^2) noise to every standardised
  advantage, so the actor's weight correlates with the right one by 1 / sqrt(1 + sigma^2): a
  stand-in for a critic whose advantage is only that well correlated with the exact one
  (`archer_critic.advantage_agreement` measures the learned critic's).
  """
  import jax
  import jax.numpy as jnp
  import optax
  from hrljax import envs, rollout
  from hrljax.agents import token_common as tc

  if num_games % minibatches:
    raise ValueError(
      f"minibatches: expected a divisor of num_games ({num_games}), got {minibatches}"
    )
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  policy = tc.make_policy(env_params, config)
  sample = tc.sampling_policy(policy, env_params.utterance_len, config.temperature)
  group_ids = rollout.grouped_ids(num_games, 1)
  max_turns = env_params.max_turns

  def iteration(carry, key):
    params, opt_state = carry
    rollout_key, shuffle_key = jax.random.split(key)
    episodes = rollout.grouped_episodes(
      env, env_params, sample, params, rollout_key, group_ids, max_turns
    )
    transitions, valid = episodes.transitions, episodes.valid
    returns = utterance_returns(transitions, valid, env_params, config.gamma, advantage)
    adv = turn_baseline_advantage(returns, valid)
    if advantage_noise:
      noise = jax.random.normal(jax.random.fold_in(shuffle_key, 1), adv.shape)
      adv = jnp.where(valid, adv + advantage_noise * noise, 0.0)
    rows = tuple(tc.flatten_steps(x) for x in (transitions.obs, transitions.action, adv, valid))

    def epoch(carry, epoch_key):
      perm = jax.random.permutation(epoch_key, rows[0].shape[0])
      split = jax.tree.map(lambda x: x[perm].reshape((minibatches, -1) + x.shape[1:]), rows)

      def minibatch_step(carry, minibatch):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(actor_minibatch_loss)(
          params, policy, minibatch, config.temperature
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

      return jax.lax.scan(minibatch_step, carry, split)

    (params, opt_state), losses = jax.lax.scan(
      epoch, (params, opt_state), jax.random.split(shuffle_key, epochs)
    )
    first_episode_reward = jnp.where(valid, transitions.reward, 0.0).sum(axis=0)
    return (params, opt_state), {
      "sampled_success": first_episode_reward.mean(),
      "actor_loss": losses.mean(),
      "return_mean": jnp.sum(returns) / jnp.sum(valid),
    }

  return iteration


def run(
  config,
  seeds,
  advantage,
  optimizer,
  learning_rate,
  adam_eps,
  num_games,
  epochs,
  minibatches,
  iterations,
  eval_every,
  cache_dir,
  out,
  advantage_noise=0.0,
):
  """Trains the actor of every seed against the `advantage` returns; writes the curve to `out`."""
  import jax
  from experiments.diagnostics import common
  from hrljax import envs
  from hrljax.agents import archer
  from hrljax.agents import token_common as tc

  archer.validate_config(config)
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  rules = (env_params.correct_reward, env_params.turn_reward, env_params.end_on_wrong_guess)
  if rules != (1.0, 0.0, True):
    # Every guess must end the game for the oracle return, and a win must earn 1 for
    # `sampled_success`.
    raise ValueError(
      "config.env_kwargs: expected the game's default rules (correct_reward=1.0, "
      f"turn_reward=0.0, end_on_wrong_guess=True), got {rules}"
    )
  keys = common.init_keys(seeds)
  params = common.warm_start(config, seeds, cache_dir)
  tx = make_optimizer(optimizer, learning_rate, adam_eps, config.max_grad_norm)
  opt_state = jax.vmap(tx.init)(params)
  iteration = make_iteration(config, tx, num_games, epochs, minibatches, advantage, advantage_noise)
  run_keys = jax.vmap(lambda k: jax.random.fold_in(k, 2))(keys)

  @jax.jit
  def chunk(carry, run_keys, start):
    def one_seed(carry, key):
      step_keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(
        start + jax.numpy.arange(eval_every)
      )
      return jax.lax.scan(iteration, carry, step_keys)

    carry, metrics = jax.vmap(one_seed)(carry, run_keys)
    return carry, jax.tree.map(lambda m: m.mean(axis=1), metrics)

  policy = tc.make_policy(env_params, config)
  evaluate = jax.jit(jax.vmap(tc.greedy_evaluation(env, env_params, policy, config.eval_episodes)))
  eval_keys = common.eval_keys(seeds)
  utterances_per_iteration = num_games * env_params.max_turns
  carry = (params, opt_state)
  with open(out, "w") as f:
    for done in range(0, iterations + 1, eval_every):
      metrics = {}
      if done:
        carry, metrics = chunk(carry, run_keys, done - eval_every)
      greedy = evaluate(carry[0], eval_keys)["eval_return"]
      row = common.curve_row(done, done * utterances_per_iteration, greedy)
      for name, values in metrics.items():
        row[name] = [round(float(v), 4) for v in values]
      common.emit_row(f, row)


def main(argv):
  common.check_command_line(argv, FLAGS.config, FLAGS.out)
  for name in ("num_games", "epochs", "minibatches", "eval_every"):
    if FLAGS[name].value < 1:
      sys.exit(f"error: --{name}: expected an integer >= 1, got {FLAGS[name].value}")
  if FLAGS.iterations < 0 or FLAGS.iterations % FLAGS.eval_every:
    sys.exit(
      f"error: --iterations: expected a multiple of --eval_every ({FLAGS.eval_every}), "
      f"got {FLAGS.iterations}"
    )
  if FLAGS.advantage_noise < 0:
    sys.exit(f"error: --advantage_noise: expected >= 0, got {FLAGS.advantage_noise}")
  if FLAGS.learning_rate <= 0:
    sys.exit(f"error: --learning_rate: expected > 0, got {FLAGS.learning_rate}")
  os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
  run(
    FLAGS.config,
    common.parse_seeds(FLAGS.seeds),
    FLAGS.advantage,
    FLAGS.optimizer,
    FLAGS.learning_rate,
    FLAGS.adam_eps,
    FLAGS.num_games,
    FLAGS.epochs,
    FLAGS.minibatches,
    FLAGS.iterations,
    FLAGS.eval_every,
    FLAGS.warm_start_cache,
    FLAGS.out,
    FLAGS.advantage_noise,
  )


if __name__ == "__main__":
  define_flags()
  app.run(main, argv=common.resolve_config_argument(sys.argv))
