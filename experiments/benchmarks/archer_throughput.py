"""Speed of ArCHer's compiled pieces on the token game: generation, one update, and token PPO's.

  python -m experiments.benchmarks.archer_throughput \
      --config=experiments/configs/archer_token_game.py --batch=1024 --reps=7

prints one JSON line. Four programs, each compiled once (compile time reported apart) and run
`--reps` times interleaved rep by rep, so that load from other jobs hits all of them alike; the
median and the minimum of the wall times are reported:

* `generate`: a batch of `batch` utterances of L tokens, sampled at the config's temperature from
  the token policy with its KV cache (prefill + L - 1 decode steps), for `batch` dialogues of the
  scripted questioner (real mid-game dialogues of every length); reported as utterances/s;
* `archer_update`: one ArCHer update on a batch of `batch` utterance-level transitions: one critic
  step (a fresh policy utterance per dialogue, target-critic Q at it and V at s', online critic
  forward/backward, Adam, Polyak) followed by one actor step (a fresh utterance, online critic
  advantage, policy forward/backward, Adam), i.e. `ArcherAgent.update` with one step of each;
  reported as updates/s, and split into `critic_step` and `actor_step`;
* `ppo_update`: one token-level PPO policy step on the same policy and batch (teacher-forced token
  log-probs, clipped surrogate of `hrljax.losses.policy_gradient` with per-utterance advantages
  broadcast to the tokens, token-mean aggregation, Adam). When `agents/token_ppo.py` is absent
  this stands in for token PPO's minibatch step (its value loss is not included: a value head on
  the same trunk adds little to the policy's forward/backward).

`archer_to_ppo` is the ratio of the median times of `archer_update` and `ppo_update`. An ArCHer
iteration of a config runs `critic_updates` critic steps and `actor_updates` actor steps; its
cost is about `critic_updates * critic_step + actor_updates * actor_step`.
"""

import json
import math
import statistics
import time

from absl import app, flags
from ml_collections import config_flags

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "ArCHer experiment config file.", lock_config=False)
flags.DEFINE_integer("batch", 1024, "Dialogues per generated batch and transitions per update.")
flags.DEFINE_integer("reps", 7, "Timed executions of each program after compile.")
flags.DEFINE_integer("seed", 0, "PRNG seed.")


def build(config, batch: int, seed: int):
  """The agent (random policy: speed does not depend on the weights), a batch of transitions and
  the four jitted programs with their arguments."""
  import jax
  import jax.numpy as jnp
  import optax

  from hrljax import envs
  from hrljax.agents import archer, token_bc
  from hrljax.losses import policy_gradient as pg
  from hrljax.networks import transformer

  config.bc_steps = 0
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  key = jax.random.key(seed)
  agent_key, data_key, run_key = jax.random.split(key, 3)
  agent = archer.ArcherAgent.create(agent_key, env, env_params, config)
  episodes = math.ceil(batch / env_params.max_turns)
  data = token_bc.scripted_dataset(data_key, env, env_params, episodes, 0.5)
  dialogue, utterance = data.dialogue[:batch], data.utterance[:batch]
  # Successors and rewards only need the right shapes and dtypes for timing.
  transitions = archer.UtteranceTransition(
      dialogue=dialogue, utterance=utterance, reward=jnp.zeros((batch,), jnp.float32),
      next_dialogue=dialogue, terminated=jnp.zeros((batch,), bool))
  length = env_params.utterance_len
  policy = agent.policy

  @jax.jit
  def generate(params, dialogue, key):
    return transformer.generate(policy, params, dialogue, key, num_tokens=length,
                                temperature=config.temperature)[0]

  @jax.jit
  def archer_update(agent, transitions):
    expand = lambda x: x[None]
    new_agent, metrics = agent.update(jax.tree.map(expand, transitions),
                                      transitions.dialogue[None], jnp.asarray(True))
    return new_agent.policy_params, new_agent.critic_params, metrics

  @jax.jit
  def critic_step(agent, transitions):
    new_agent, metrics = agent.critic_step(transitions)
    return new_agent.critic_params, metrics

  @jax.jit
  def actor_step(agent, dialogue):
    new_agent, metrics = agent.actor_step(dialogue)
    return new_agent.policy_params, metrics

  ppo_tx = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(3e-4))
  old_logp = transformer.utterance_log_probs(policy, agent.policy_params, dialogue, utterance)
  advantages = jax.random.normal(run_key, (batch,))
  mask = token_bc.token_mask(utterance)

  @jax.jit
  def ppo_update(params, opt_state):
    def loss_fn(params):
      logp = transformer.utterance_log_probs(policy, params, dialogue, utterance)
      per_token, _ = pg.clipped_surrogate_loss(
          logp, old_logp, jnp.broadcast_to(advantages[:, None], logp.shape))
      return pg.aggregate(per_token, mask, "token_mean")[0]
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = ppo_tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  gen_key = jax.random.fold_in(run_key, 1)
  return {
      "generate": (generate, (agent.policy_params, dialogue, gen_key)),
      "archer_update": (archer_update, (agent, transitions)),
      "critic_step": (critic_step, (agent, transitions)),
      "actor_step": (actor_step, (agent, dialogue)),
      "ppo_update": (ppo_update, (agent.policy_params, ppo_tx.init(agent.policy_params))),
  }


def main(argv):
  del argv
  import jax

  programs = build(FLAGS.config, FLAGS.batch, FLAGS.seed)
  compile_seconds, times = {}, {name: [] for name in programs}
  compiled = {}
  for name, (fn, args) in programs.items():
    start = time.perf_counter()
    compiled[name] = fn.lower(*args).compile()
    compile_seconds[name] = time.perf_counter() - start
    jax.block_until_ready(compiled[name](*args))  # warm-up run
  for _ in range(FLAGS.reps):
    for name, (_, args) in programs.items():
      start = time.perf_counter()
      jax.block_until_ready(compiled[name](*args))
      times[name].append(time.perf_counter() - start)
  median = {name: statistics.median(t) for name, t in times.items()}
  result = {
      "batch": FLAGS.batch,
      "utterance_len": int(FLAGS.config.env_kwargs.get("utterance_len", 4)),
      "reps": FLAGS.reps,
      "devices": jax.device_count(),
      "utterances_per_second": FLAGS.batch / median["generate"],
      "archer_updates_per_second": 1.0 / median["archer_update"],
      "ppo_updates_per_second": 1.0 / median["ppo_update"],
      "archer_to_ppo": median["archer_update"] / median["ppo_update"],
      "median_seconds": median,
      "min_seconds": {name: min(t) for name, t in times.items()},
      "compile_seconds": compile_seconds,
  }
  print(json.dumps(result))


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  app.run(main)
