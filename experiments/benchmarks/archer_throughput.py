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
* `ppo_update`: one token-PPO gradient step on the same policy and batch, with token PPO's own
  code (`agents/token_ppo.py`, config `token_ppo_token_game` with one epoch of one minibatch):
  clipped surrogate on teacher-forced token log-probs, the token value network's clipped value
  loss, the entropy bonus, Adam on both networks.

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


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  config_flags.DEFINE_config_file(
    "config", None, "ArCHer experiment config file.", lock_config=False
  )
  flags.DEFINE_integer("batch", 1024, "Dialogues per generated batch and transitions per update.")
  flags.DEFINE_integer("reps", 7, "Timed executions of each program after compile.")
  flags.DEFINE_integer("seed", 0, "PRNG seed.")


def build(config, batch: int, seed: int):
  """The agent (random policy: speed does not depend on the weights), a batch of transitions and
  the four jitted programs with their arguments."""
  import jax
  import jax.numpy as jnp

  from hrljax import envs
  from hrljax.agents import archer
  from hrljax.agents import token_common as tc
  from hrljax.networks import transformer

  config.bc_steps = 0
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  key = jax.random.key(seed)
  agent_key, data_key, run_key = jax.random.split(key, 3)
  # Built under jit: flax's eager init dispatches op by op, several times slower.
  agent = jax.jit(lambda k: archer.ArcherAgent.create(k, env, env_params, config))(agent_key)
  episodes = math.ceil(batch / env_params.max_turns)
  data = tc.scripted_dataset(data_key, env, env_params, episodes, 0.5)
  dialogue, utterance = data.dialogue[:batch], data.utterance[:batch]
  # Successors and rewards only need the right shapes and dtypes for timing.
  transitions = tc.UtteranceTransition(
    dialogue=dialogue,
    utterance=utterance,
    reward=jnp.zeros((batch,), jnp.float32),
    next_dialogue=dialogue,
    terminated=jnp.zeros((batch,), bool),
  )
  length = env_params.utterance_len
  policy = agent.policy

  @jax.jit
  def generate(params, dialogue, key):
    return transformer.generate(
      policy, params, dialogue, key, num_tokens=length, temperature=config.temperature
    )[0]

  @jax.jit
  def archer_update(agent, transitions):
    expand = lambda x: x[None]
    new_agent, metrics = agent.update(
      jax.tree.map(expand, transitions), transitions.dialogue[None], jnp.asarray(True)
    )
    return new_agent.policy_params, new_agent.critic_params, metrics

  @jax.jit
  def critic_step(agent, transitions):
    new_agent, metrics = agent.critic_step(transitions)
    return new_agent.critic_params, metrics

  @jax.jit
  def actor_step(agent, dialogue):
    new_agent, metrics = agent.actor_step(dialogue)
    return new_agent.policy_params, metrics

  ppo_agent, ppo_batch = token_ppo_step_inputs(agent, dialogue, utterance, run_key)

  @jax.jit
  def ppo_update(ppo_agent, ppo_batch):
    new_agent, metrics = ppo_agent.update(ppo_batch)
    return new_agent.policy_params, new_agent.value_params, metrics

  gen_key = jax.random.fold_in(run_key, 1)
  return {
    "generate": (generate, (agent.policy_params, dialogue, gen_key)),
    "archer_update": (archer_update, (agent, transitions)),
    "critic_step": (critic_step, (agent, transitions)),
    "actor_step": (actor_step, (agent, dialogue)),
    "ppo_update": (ppo_update, (ppo_agent, ppo_batch)),
  }


POLICY_FIELDS = ("env_kwargs", "d_model", "num_layers", "num_heads", "temperature")


def token_ppo_step_inputs(archer_agent, dialogue, utterance, key):
  """Token PPO's agent with ArCHer's policy (its game and policy fields, `POLICY_FIELDS`; one
  epoch of one minibatch, so `update` is one gradient step on the whole batch) and a `TokenBatch`
  of the given utterances: behaviour log-probs of the policy itself, random advantages, values of
  the fresh value network."""
  import jax

  from experiments.configs import token_ppo_token_game
  from hrljax import envs
  from hrljax.agents import token_ppo
  from hrljax.agents import token_common as tc

  config = token_ppo_token_game.get_config()
  for field in POLICY_FIELDS:
    config[field] = archer_agent.config[field]
  config.bc_steps = 0
  config.update_epochs = 1
  config.num_minibatches = 1
  env, env_params = envs.make(config.env_name, **config.env_kwargs)

  @jax.jit  # the batch is an argument: as a captured constant XLA would fold it for seconds
  def inputs(policy_params, dialogue, utterance, key):
    agent = token_ppo.TokenPPOAgent.create(key, env, env_params, config)
    agent = agent.replace(
      policy_params=policy_params, policy_opt_state=agent.policy_tx.init(policy_params)
    )
    log_prob, _ = tc.token_log_probs_and_entropy(
      agent.policy, policy_params, dialogue, utterance, config.temperature
    )
    value = agent.value_network.apply(agent.value_params, dialogue, utterance)
    advantage = jax.random.normal(jax.random.fold_in(key, 2), value.shape)
    batch = token_ppo.TokenBatch(
      dialogue=dialogue,
      utterance=utterance,
      log_prob=log_prob,
      value=value,
      advantage=advantage,
      target=advantage + value,
      mask=tc.token_mask(utterance),
    )
    return agent, batch

  return inputs(archer_agent.policy_params, dialogue, utterance, key)


def measure(programs: dict, reps: int) -> tuple[dict, dict, dict]:
  """Compiles each program once, runs it once to warm up, then `reps` timed runs interleaved
  program by program; returns compile seconds and per-program lists of wall seconds, and the
  warm-up outputs (for checks)."""
  import jax

  compile_seconds, times, outputs = {}, {name: [] for name in programs}, {}
  compiled = {}
  for name, (fn, args) in programs.items():
    start = time.perf_counter()
    compiled[name] = fn.lower(*args).compile()
    compile_seconds[name] = time.perf_counter() - start
    outputs[name] = jax.block_until_ready(compiled[name](*args))
  for _ in range(reps):
    for name, (_, args) in programs.items():
      start = time.perf_counter()
      jax.block_until_ready(compiled[name](*args))
      times[name].append(time.perf_counter() - start)
  return compile_seconds, times, outputs


def summary(batch: int, utterance_len: int, reps: int, compile_seconds: dict, times: dict) -> dict:
  """The JSON record: rates from the median times, and the ArCHer-to-PPO cost ratio."""
  import jax

  median = {name: statistics.median(t) for name, t in times.items()}
  return {
    "batch": batch,
    "utterance_len": utterance_len,
    "reps": reps,
    "devices": jax.device_count(),
    "utterances_per_second": batch / median["generate"],
    "archer_updates_per_second": 1.0 / median["archer_update"],
    "ppo_updates_per_second": 1.0 / median["ppo_update"],
    "archer_to_ppo": median["archer_update"] / median["ppo_update"],
    "median_seconds": median,
    "min_seconds": {name: min(t) for name, t in times.items()},
    "compile_seconds": compile_seconds,
  }


def main(argv):
  del argv
  if FLAGS.batch < 1 or FLAGS.reps < 1:
    raise app.UsageError(
      f"batch and reps: expected integers >= 1, got {FLAGS.batch} and {FLAGS.reps}"
    )
  programs = build(FLAGS.config, FLAGS.batch, FLAGS.seed)
  compile_seconds, times, _ = measure(programs, FLAGS.reps)
  utterance_len = int(FLAGS.config.env_kwargs.get("utterance_len", 4))
  print(json.dumps(summary(FLAGS.batch, utterance_len, FLAGS.reps, compile_seconds, times)))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("config")
  app.run(main)
