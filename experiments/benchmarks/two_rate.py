"""Speed of the two-rate rollout with Bresa's reflex on against the same rollout with it off.

  python -m experiments.benchmarks.two_rate [--num_envs=1,16] [--num_decisions=20] [--reps=7]

Builds a Bresa agent from `experiments/configs/bresa_pointhazard.py` (its networks, K = 10, the
waypoint controller, the latching reflex) and times `hrljax.rollout.two_rate_rollout` on
PointHazard-v0 with (a) `recovery_rl.make_safety_layer` (the safety critic scores every control
step, the recovery policy takes over above ε) and (b) `rollout.no_safety_layer`. Both are
compiled first in this process, then executed alternately rep by rep so that they see the same
load; the speed is env (control) steps divided by the median execution time. The agent's critic
is untrained, so ε is set to the `--eps_quantile` quantile of the risks of the nominal actions:
the reflex then fires on a realistic fraction of the control steps (printed as
`intervention_rate`; Bresa's PointHazard training runs see 30-70% early, under 1% once the task
policy has learned the detour), and the recovery path really runs. Prints one JSON line per batch
size with the median and the best execution of each variant and the median in process CPU time
(steadier than wall time on a loaded machine), and the ratio on/off of each.
"""

import json
import statistics
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("num_envs", ["1", "16"], "Environment batch sizes to time.")
flags.DEFINE_integer("num_decisions", 20, "Decisions per rollout (K control steps each).")
flags.DEFINE_integer("reps", 7, "Timed executions per variant after compile (median reported).")
flags.DEFINE_float("eps_quantile", 0.9, "ε = this quantile of the nominal actions' risks.")


def build(num_envs: int, num_decisions: int, eps_quantile: float):
  """`(variants {name: (compiled fn, args)}, env steps per call, intervention rate)`."""
  import jax
  import jax.numpy as jnp
  import ml_collections
  import numpy as np

  from experiments.configs import bresa_pointhazard
  from hrljax import envs, rollout
  from hrljax.agents import recovery_rl

  config = bresa_pointhazard.get_config()
  env, params = envs.make(config.env_name, **config.env_kwargs)
  spec = envs.spec(env, params)
  agent = recovery_rl.RecoveryAgent.create(jax.random.key(0), spec, config)
  space = env.action_space(params)
  controller = recovery_rl.make_controller(config, (float(space.low), float(space.low)),
                                           (float(space.high), float(space.high)))
  actor = agent.task.actor
  K = config.control_steps

  def policy(actor_params, obs, key):
    command = actor.apply(actor_params, obs).sample(seed=key)
    return command, command

  def make(reflex: bool):
    def run(agent, carry, key):
      safety_fn = recovery_rl.make_safety_layer(agent) if reflex else rollout.no_safety_layer
      noise_fn = recovery_rl.recovery_noise_fn(num_envs, spec.action_dim) if reflex else None
      return rollout.two_rate_rollout(
          env, params, policy, agent.task.actor_params, controller, safety_fn,
          (agent, jnp.asarray(True)), carry, key, num_decisions, K,
          info_keys=recovery_rl.SAFETY_INFO_KEYS, safety_noise_fn=noise_fn)
    return jax.jit(run)

  carry = rollout.reset(env, params, jax.random.key(1), num_envs)
  key = jax.random.key(2)
  # ε inside the range of the nominal risks, so that the reflex fires on part of the steps.
  control = make(False)(agent, carry, key)[1].control
  flat = lambda x: x.reshape((-1,) + x.shape[3:])
  risks = np.asarray(agent.risk(flat(control.obs), flat(control.proposed_action)))
  eps = float(np.quantile(risks, eps_quantile))
  agent = agent.replace(config=ml_collections.FrozenConfigDict(
      {**agent.config.as_configdict().to_dict(), "eps_risk": eps}))
  variants = {}
  for name, reflex in (("reflex_on", True), ("reflex_off", False)):
    compiled = make(reflex).lower(agent, carry, key).compile()
    variants[name] = (compiled, (agent, carry, key))
  on = variants["reflex_on"][0](agent, carry, key)[1]
  rate = float(np.asarray(on.control.intervened).mean())
  return variants, num_envs * num_decisions * K, rate


def main(argv):
  del argv
  import jax
  for num_envs in (int(n) for n in FLAGS.num_envs):
    variants, steps, rate = build(num_envs, FLAGS.num_decisions, FLAGS.eps_quantile)
    seconds = {name: [] for name in variants}
    cpu_seconds = {name: [] for name in variants}
    for name, (fn, args) in variants.items():  # warm up
      jax.block_until_ready(fn(*args))
    for _ in range(FLAGS.reps):
      for name, (fn, args) in variants.items():
        start, cpu_start = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
        seconds[name].append(time.perf_counter() - start)
        cpu_seconds[name].append(time.process_time() - cpu_start)
    speed = {name: steps / statistics.median(times) for name, times in seconds.items()}
    best = {name: steps / min(times) for name, times in seconds.items()}
    cpu = {name: steps / statistics.median(times) for name, times in cpu_seconds.items()}
    record = {"num_envs": num_envs, "num_decisions": FLAGS.num_decisions, "env_steps": steps,
              "intervention_rate": round(rate, 3),
              **{f"{name}_env_steps_per_second": round(v) for name, v in speed.items()},
              "ratio_on_off": round(speed["reflex_on"] / speed["reflex_off"], 3),
              **{f"{name}_best_env_steps_per_second": round(v) for name, v in best.items()},
              "best_ratio_on_off": round(best["reflex_on"] / best["reflex_off"], 3),
              **{f"{name}_env_steps_per_cpu_second": round(v) for name, v in cpu.items()},
              "cpu_ratio_on_off": round(cpu["reflex_on"] / cpu["reflex_off"], 3)}
    print(json.dumps(record), flush=True)
    print(f"N={num_envs}: reflex on {speed['reflex_on']:,.0f} / off {speed['reflex_off']:,.0f} "
          f"env steps/s, ratio {record['ratio_on_off']:.2f} (CPU time: "
          f"{record['cpu_ratio_on_off']:.2f})", file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
