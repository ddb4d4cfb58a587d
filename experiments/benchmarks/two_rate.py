"""Speed of the two-rate rollout with Bresa's reflex on against the same rollout with it off.

  python -m experiments.benchmarks.two_rate [--num_envs=1,16] [--num_decisions=20] [--reps=7]
      [--eps_quantile=0.9]

Builds a Bresa agent from `experiments/configs/bresa_pointhazard.py` (its networks, K = 10, the
waypoint controller, the latching reflex) and times `hrljax.rollout.two_rate_rollout` on
PointHazard-v0 with three safety layers:

* `reflex_on`: `two_rate_common.make_reflex`, what Bresa runs: each decision's K nominal control
  steps are simulated, scored by the safety critic in one batched call, and re-simulated from the
  first reflex with the recovery policy only if the reflex fires somewhere (`lookahead=True`);
* `reflex_per_step`: the same reflex consulted at every control step (`lookahead=False`: one
  critic call per control step; the same trajectory);
* `reflex_off`: `rollout.no_safety_layer`.

All are compiled first in this process, then executed in turn rep by rep so that they see the
same load; the speed is env (control) steps divided by the median execution time. The agent's
critic is untrained, so ε is set to the `--eps_quantile` quantile of the risks of the nominal
actions: the reflex then fires on a controlled fraction of the control steps (printed as
`intervention_rate`, and `reflex_decision_rate`, the fraction of decisions in which it fired in
some environment, which is what the lookahead pays for; Bresa's PointHazard training runs see
30-70% of control steps early, under 1% once the task policy has learned the detour), and the
recovery path really runs. Prints one JSON line per batch size with the median and the best
execution of each variant, the median in process CPU time (steadier than wall time on a loaded
machine), and the ratios to `reflex_off`; a summary line per batch size on stderr.
"""

import json
import os
import statistics
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_list("num_envs", ["1", "16"], "Environment batch sizes to time.")
  flags.DEFINE_integer("num_decisions", 20, "Decisions per rollout (K control steps each).")
  flags.DEFINE_integer("reps", 7, "Timed executions per variant after compile (median reported).")
  flags.DEFINE_float("eps_quantile", 0.9, "ε = this quantile of the nominal actions' risks.")


def build(num_envs: int, num_decisions: int, eps_quantile: float):
  """`(variants {name: (compiled fn, args)}, env steps per call, {rate name: rate})`."""
  import jax
  import jax.numpy as jnp
  import ml_collections
  import numpy as np

  from experiments.configs import bresa_pointhazard
  from hrljax import envs, rollout
  from hrljax.agents import recovery_rl, two_rate_common
  from hrljax.rollout import two_rate_streams

  config = bresa_pointhazard.get_config()
  env, params = envs.make(config.env_name, **config.env_kwargs)
  spec = envs.spec(env, params)
  agent = recovery_rl.RecoveryAgent.create(jax.random.key(0), spec, config)
  space = env.action_space(params)
  controller = two_rate_common.make_controller(
    config, (float(space.low), float(space.low)), (float(space.high), float(space.high))
  )
  actor = agent.task.actor
  K = config.control_steps

  def policy(actor_params, obs, key):
    command = actor.apply(actor_params, obs).sample(seed=key)
    return command, command

  def make(layer: str):
    def run(agent, carry, key):
      safety_fn = (
        rollout.no_safety_layer if layer == "reflex_off" else two_rate_common.make_reflex(agent)
      )
      noise_fn = (
        None
        if layer == "reflex_off"
        else two_rate_common.recovery_noise_fn(num_envs, spec.action_dim)
      )
      return rollout.two_rate_rollout(
        env,
        params,
        policy,
        agent.task.actor_params,
        controller,
        safety_fn,
        (agent, jnp.asarray(True)),
        carry,
        key,
        num_decisions,
        K,
        info_keys=two_rate_streams.SAFETY_INFO_KEYS,
        safety_noise_fn=noise_fn,
        lookahead=layer == "reflex_on",
      )

    return jax.jit(run)

  carry = rollout.reset(env, params, jax.random.key(1), num_envs)
  key = jax.random.key(2)
  # ε inside the range of the nominal risks, so that the reflex fires on part of the steps.
  control = make("reflex_off")(agent, carry, key)[1].control
  flat = lambda x: x.reshape((-1,) + x.shape[3:])
  risks = np.asarray(agent.risk(flat(control.obs), flat(control.proposed_action)))
  eps = float(np.quantile(risks, eps_quantile))
  agent = agent.replace(
    config=ml_collections.FrozenConfigDict(
      {**agent.config.as_configdict().to_dict(), "risk_epsilon": eps}
    )
  )
  variants = {}
  for layer in LAYERS:
    compiled = make(layer).lower(agent, carry, key).compile()
    variants[layer] = (compiled, (agent, carry, key))
  intervened = np.asarray(variants["reflex_on"][0](agent, carry, key)[1].control.intervened)
  rates = {
    "intervention_rate": float(intervened.mean()),
    "reflex_decision_rate": float(intervened.any(axis=(1, 2)).mean()),
  }
  return variants, num_envs * num_decisions * K, rates


LAYERS = ("reflex_on", "reflex_per_step", "reflex_off")


def main(argv):
  del argv
  import jax

  for num_envs in (int(n) for n in FLAGS.num_envs):
    variants, steps, rates = build(num_envs, FLAGS.num_decisions, FLAGS.eps_quantile)
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
    record = {
      "num_envs": num_envs,
      "num_decisions": FLAGS.num_decisions,
      "env_steps": steps,
      "eps_quantile": FLAGS.eps_quantile,
      **{name: round(value, 3) for name, value in rates.items()},
      "load_average_1min": round(os.getloadavg()[0], 1),
    }
    for kind, table in (("", speed), ("best_", best), ("cpu_", cpu)):
      unit = "cpu_second" if kind == "cpu_" else "second"
      for name in LAYERS:
        record[f"{kind}{name}_env_steps_per_{unit}"] = round(table[name])
      for name in LAYERS[:2]:
        record[f"{kind}ratio_{name}_off"] = round(table[name] / table["reflex_off"], 3)
    print(json.dumps(record), flush=True)
    print(
      f"N={num_envs}: reflex on {speed['reflex_on']:,.0f} / per step "
      f"{speed['reflex_per_step']:,.0f} / off {speed['reflex_off']:,.0f} env steps/s; "
      f"ratio on/off {record['ratio_reflex_on_off']:.2f} (CPU time "
      f"{record['cpu_ratio_reflex_on_off']:.2f}, best {record['best_ratio_reflex_on_off']:.2f}), "
      f"per step/off {record['ratio_reflex_per_step_off']:.2f}; "
      f"reflex in {rates['reflex_decision_rate']:.0%} of decisions",
      file=sys.stderr,
    )


if __name__ == "__main__":
  define_flags()
  app.run(main)
