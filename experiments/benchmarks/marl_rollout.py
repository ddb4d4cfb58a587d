"""Multi-agent rollout speed: hrljax's rollout of MPE simple_spread against JaxMARL's IPPO loop.

  python -m experiments.benchmarks.marl_rollout --num_envs=256 --num_steps=128 --reps=7

Both sides roll out `--num_envs` copies of JaxMARL's `MPE_simple_spread_v3` (`--num_agents`
agents and as many landmarks) for `--num_steps` steps with the same policy and parameters, and
keep the trajectories they produce:

- hrljax: `hrljax.envs.make("MPE_simple_spread_v3")` (observations `[n_agents, obs_dim]`,
  actions `[n_agents]`, one team reward) stepped by the single-agent `hrljax.rollout.rollout`
  (keys split before the loop, auto-reset computed only when an episode ended, the true
  successor observation and running episode return kept per step);
- reference: the rollout loop of JaxMARL's IPPO baseline, `baselines/IPPO/ippo_ff_mpe.py` in
  FLAIROx/JaxMARL (commit 014b4f0af877856dc0a90437596a23a31153e303, the file's last change;
  read at c793d095618c6d3edfb5632802348f57b70a4b94), written out below in this module's own
  code (`reference_rollout`): JaxMARL's environment class itself, `jax.vmap(env.step)` over
  environments (JaxMARL's auto-resetting step, which computes a reset at every step and
  selects it), observations and actions as dictionaries keyed by agent, stacked into one
  `[n_agents * num_envs, obs_dim]` batch for the policy and split back per agent, keys split
  inside the `lax.scan` body, and the episode-return bookkeeping of JaxMARL's `MPELogWrapper`.
  The pip package (jaxmarl 0.2.0) ships no baselines, so nothing of that file is imported.

The policy is a tanh MLP (64-64, JaxMARL IPPO's actor sizes) with random parameters, shared
by the agents, sampling one categorical action per agent and returning its log-probability;
both sides call the same function on the same parameters, so the ratio measures the rollout
machinery (environment stepping, resets, layout changes, key handling, what is stored).
Episodes last the same number of steps on both sides: JaxMARL's MPE episode ends after
`max_steps + 1` = 26 steps (its counter is compared before it is incremented), so the hrljax
environment gets `max_steps_in_episode=26`.

Both programs are compiled once (`compile_seconds`, apart from execution), then executed
alternately rep by rep so both see the same load; the speed is env steps (one step of every
agent in one environment) divided by the median wall time, and by the median process CPU time
(all threads; steadier on a shared machine). One JSON line per side, then one with the ratios
(hrljax over reference) and the result of the reward check.

Reward check: the keys can be made to match for the environments (the reference is given the
reset keys and per-step environment keys that `hrljax.rollout` derives; both split a step key
into step and reset keys the same way), but not for sampled actions: the two sides draw the
categorical noise for batches laid out differently (`[num_envs, n_agents]` against JaxMARL's
agent-major `[n_agents * num_envs]`). So the check runs both loops once more, at the requested
sizes, with the greedy (argmax) version of the policy and matched keys, and compares every
step's team reward (the sum over agents of JaxMARL's per-agent rewards); the run fails with
exit status 1 if they differ.
"""

import itertools
import json
import statistics
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
ENV_NAME = "MPE_simple_spread_v3"
HIDDEN = 64


def define_flags() -> None:
  """The command-line flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_integer("num_envs", 256, "Environments stepped in parallel (both sides).")
  flags.DEFINE_integer("num_steps", 128, "Steps per rollout.")
  flags.DEFINE_integer("num_agents", 3, "Agents (and landmarks) of simple_spread.")
  flags.DEFINE_integer("reps", 7, "Timed executions of each side after compile (median reported).")
  flags.DEFINE_integer("seed", 0, "PRNG seed of the policy parameters and the rollouts.")


def validate(num_envs: int, num_steps: int, num_agents: int, reps: int) -> None:
  """Raises ValueError naming the first bad argument."""
  for name, value in (
    ("num_envs", num_envs),
    ("num_steps", num_steps),
    ("num_agents", num_agents),
    ("reps", reps),
  ):
    if value < 1:
      raise ValueError(f"--{name}: expected an integer >= 1, got {value}")


def init_policy(key, obs_dim: int, num_actions: int) -> dict:
  """Random parameters of a tanh MLP `obs_dim -> 64 -> 64 -> num_actions`."""
  import jax
  import jax.numpy as jnp

  sizes = (obs_dim, HIDDEN, HIDDEN, num_actions)
  params = {}
  for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
    key, sub = jax.random.split(key)
    params[f"w{i}"] = jax.random.normal(sub, (fan_in, fan_out), jnp.float32) / jnp.sqrt(fan_in)
    params[f"b{i}"] = jnp.zeros((fan_out,), jnp.float32)
  return params


def policy_logits(params: dict, obs):
  """Logits over actions for observations with any leading axes (`[..., obs_dim]`)."""
  import jax.numpy as jnp

  hidden = jnp.tanh(dense(params, 0, obs))
  hidden = jnp.tanh(dense(params, 1, hidden))
  return dense(params, 2, hidden)


def dense(params: dict, layer: int, x):
  """`x @ w + b` of one layer, the bias broadcast explicitly over `x`'s leading axes."""
  bias = params[f"b{layer}"]
  return x @ params[f"w{layer}"] + bias.reshape((1,) * (x.ndim - 1) + bias.shape)


def sample_policy(params: dict, obs, key):
  """One sampled action per row of `obs` and its log-probability (`(action, extras)`)."""
  import jax

  logits = policy_logits(params, obs)
  action = jax.random.categorical(key, logits)
  log_prob = jax.numpy.take_along_axis(jax.nn.log_softmax(logits), action[..., None], axis=-1)
  return action, {"log_prob": log_prob[..., 0]}


def greedy_policy(params: dict, obs, key):
  """The argmax action of every row (no randomness: the key is unused)."""
  import jax

  del key
  log_prob = jax.nn.log_softmax(policy_logits(params, obs))
  return log_prob.argmax(axis=-1), {"log_prob": log_prob.max(axis=-1)}


def make_envs(num_agents: int):
  """`(hrljax env, its params, JaxMARL env)`: the same task, episodes of the same length."""
  from hrljax import envs
  from hrljax.envs.mpe import import_task_class

  reference_env = import_task_class(ENV_NAME)(num_agents=num_agents, num_landmarks=num_agents)
  env, env_params = envs.make(
    ENV_NAME,
    num_agents=num_agents,
    num_landmarks=num_agents,
    max_steps_in_episode=reference_env.max_steps + 1,
  )
  return env, env_params, reference_env


def hrljax_program(env, env_params, policy, num_envs: int, num_steps: int):
  """`run(params, key) -> (carry, transitions)`: reset, then `hrljax.rollout.rollout`."""
  from hrljax import rollout

  def run(params, key):
    reset_key, run_key = hrljax_keys(key)
    carry = rollout.reset(env, env_params, reset_key, num_envs)
    return rollout.rollout(env, env_params, policy, params, carry, run_key, num_steps)

  return run


def hrljax_keys(key):
  """The reset and rollout keys the hrljax side derives from `key`."""
  import jax

  reset_key, run_key = jax.random.split(key)
  return reset_key, run_key


def batchify(per_agent: dict, agents, num_actors: int):
  """Agent-keyed arrays `[num_envs, ...]` stacked agent-major into rows `[num_actors, ...]`."""
  import jax.numpy as jnp

  stacked = jnp.stack([per_agent[a] for a in agents])
  return stacked.reshape((num_actors,) + stacked.shape[2:])


def unbatchify(rows, agents, num_envs: int) -> dict:
  """Agent-major rows `[n_agents * num_envs, ...]` split back into one array per agent."""
  rows = rows.reshape((len(agents), num_envs) + rows.shape[1:])
  return {a: rows[i] for i, a in enumerate(agents)}


def reference_rollout(env, policy, params, obs, env_state, rng, num_envs, num_steps, keys=None):
  """JaxMARL IPPO's way of rolling out, in this module's words (see the module docstring).

  `obs` is JaxMARL's agent-keyed dictionary of `[num_envs, obs_dim]` observations and
  `env_state` the batch of its states. Each scan step stacks the observations agent-major,
  applies the policy to the `[n_agents * num_envs, obs_dim]` batch, splits the actions back per
  agent, steps every environment with `jax.vmap(env.step)` (JaxMARL's auto-resetting step) and
  keeps per-agent episode returns and lengths as JaxMARL's `MPELogWrapper` does. Keys are split
  from `rng` inside the loop; with `keys=(policy_keys [T], env_keys [T, num_envs])` those are
  used instead (the reward check). Returns the final runner state and the `[T, ...]` trajectory.
  """
  import jax
  import jax.numpy as jnp

  agents = env.agents
  num_actors = len(agents) * num_envs

  def one_step(runner, step_keys):
    env_state, last_obs, returns, lengths, rng = runner
    obs_rows = batchify(last_obs, agents, num_actors)
    if step_keys is None:
      rng, policy_key = jax.random.split(rng)
      rng, env_key = jax.random.split(rng)
      env_keys = jax.random.split(env_key, num_envs)
    else:
      policy_key, env_keys = step_keys
    action, extras = policy(params, obs_rows, policy_key)
    env_action = unbatchify(action, agents, num_envs)
    obs, env_state, reward, done, _ = jax.vmap(env.step)(env_keys, env_state, env_action)
    episode_done = done["__all__"]
    returns = returns + jnp.stack([reward[a] for a in agents], axis=-1)
    lengths = lengths + 1
    transition = {
      "obs": obs_rows,
      "action": action,
      "log_prob": extras["log_prob"],
      "reward": batchify(reward, agents, num_actors),
      "done": batchify(done, agents, num_actors),
      "returned_episode_return": jnp.where(episode_done[:, None], returns, 0.0),
    }
    returns = jnp.where(episode_done[:, None], 0.0, returns)
    lengths = jnp.where(episode_done, 0, lengths)
    return (env_state, obs, returns, lengths, rng), transition

  runner = (
    env_state,
    obs,
    jnp.zeros((num_envs, len(agents)), jnp.float32),
    jnp.zeros((num_envs,), jnp.int32),
    rng,
  )
  with jax.numpy_rank_promotion("allow"):  # JaxMARL broadcasts arrays of different ranks
    return jax.lax.scan(one_step, runner, keys, length=num_steps)


def reference_reset(env, key, num_envs: int):
  """`jax.vmap(env.reset)` over `num_envs` keys split from `key`."""
  import jax

  with jax.numpy_rank_promotion("allow"):
    return jax.vmap(env.reset)(jax.random.split(key, num_envs))


def reference_program(env, policy, num_envs: int, num_steps: int):
  """`run(params, key) -> (runner, trajectory)`: JaxMARL IPPO's reset, then its rollout loop."""
  import jax

  def run(params, key):
    rng, reset_key = jax.random.split(key)
    obs, env_state = reference_reset(env, reset_key, num_envs)
    return reference_rollout(env, policy, params, obs, env_state, rng, num_envs, num_steps)

  return run


def matched_reference_program(env, policy, num_envs: int, num_steps: int):
  """The reference loop given the reset and environment keys the hrljax side uses for `key`.

  `hrljax.rollout.rollout` splits its key into a policy key and an environment key, and the
  latter into `num_steps * num_envs` keys, step-major; `rollout.reset` splits its key into
  `num_envs` reset keys. The policy keys are passed along but only the greedy policy is used
  here, which ignores them."""
  import jax

  def run(params, key):
    reset_key, run_key = hrljax_keys(key)
    policy_key, env_key = jax.random.split(run_key)
    env_keys = jax.random.split(env_key, num_steps * num_envs).reshape(num_steps, num_envs)
    keys = (jax.random.split(policy_key, num_steps), env_keys)
    obs, env_state = reference_reset(env, reset_key, num_envs)
    return reference_rollout(env, policy, params, obs, env_state, None, num_envs, num_steps, keys)

  return run


def team_rewards(trajectory, num_agents: int, num_envs: int):
  """The reference's per-agent rewards `[T, n_agents * num_envs]` summed into `[T, num_envs]`."""
  reward = trajectory["reward"]
  return reward.reshape(reward.shape[0], num_agents, num_envs).sum(axis=1)


def check_rewards(num_envs: int, num_steps: int, num_agents: int, seed: int) -> dict:
  """Runs both sides with the greedy policy and matched keys; their team rewards per step.

  Returns {"max_abs_difference", "episodes_ended", "equal"} (equal: within 1e-5)."""
  import jax
  import numpy as np

  env, env_params, reference_env = make_envs(num_agents)
  key = jax.random.key(seed)
  obs_dim = env.observation_space(env_params).shape[-1]
  params = init_policy(jax.random.fold_in(key, 1), obs_dim, env.num_actions)
  ours = jax.jit(hrljax_program(env, env_params, greedy_policy, num_envs, num_steps))
  theirs = jax.jit(matched_reference_program(reference_env, greedy_policy, num_envs, num_steps))
  _, transitions = ours(params, key)
  _, trajectory = theirs(params, key)
  a = np.asarray(transitions.reward)
  b = np.asarray(team_rewards(trajectory, num_agents, num_envs))
  difference = float(np.max(np.abs(a - b)))
  return {
    "max_abs_difference": difference,
    "episodes_ended": int(np.asarray(transitions.done).sum()),
    "equal": bool(a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-5)),
  }


def build(num_envs: int, num_steps: int, num_agents: int, seed: int) -> dict:
  """The two timed programs, each `(function, arguments)`, with the same policy parameters."""
  import jax

  env, env_params, reference_env = make_envs(num_agents)
  key = jax.random.key(seed)
  obs_dim = env.observation_space(env_params).shape[-1]
  params = init_policy(jax.random.fold_in(key, 1), obs_dim, env.num_actions)
  return {
    "hrljax": (hrljax_program(env, env_params, sample_policy, num_envs, num_steps), (params, key)),
    "jaxmarl_ippo": (
      reference_program(reference_env, sample_policy, num_envs, num_steps),
      (params, key),
    ),
  }


def measure(programs: dict, reps: int) -> tuple[dict, dict, dict]:
  """Compiles every program once, then runs them alternately `reps` times.

  Returns (compile seconds, {name: {"wall": [...], "cpu": [...]}}, last outputs)."""
  import jax

  compiled, compile_seconds = {}, {}
  for name, (function, arguments) in programs.items():
    start = time.perf_counter()
    compiled[name] = jax.jit(function).lower(*arguments).compile()
    compile_seconds[name] = time.perf_counter() - start
  times = {name: {"wall": [], "cpu": []} for name in programs}
  outputs = {}
  for rep in range(reps):  # interleaved, so both sides see the same load
    for name, (_, arguments) in programs.items():
      start, cpu_start = time.perf_counter(), time.process_time()
      outputs[name] = jax.block_until_ready(compiled[name](*arguments))
      times[name]["wall"].append(time.perf_counter() - start)
      times[name]["cpu"].append(time.process_time() - cpu_start)
      print(
        f"rep {rep + 1}/{reps} {name}: {times[name]['wall'][-1]:.3f} s",
        file=sys.stderr,
        flush=True,
      )
  return compile_seconds, times, outputs


def summary(name: str, compile_seconds: float, times: dict, env_steps: int) -> dict:
  """One side's JSON line."""
  return {
    "implementation": name,
    "env_steps_per_second": env_steps / statistics.median(times["wall"]),
    "env_steps_per_cpu_second": env_steps / statistics.median(times["cpu"]),
    "compile_seconds": compile_seconds,
    "env_steps": env_steps,
    "run_seconds": [round(s, 4) for s in times["wall"]],
    "cpu_seconds": [round(s, 4) for s in times["cpu"]],
  }


def report(
  num_envs: int, num_steps: int, num_agents: int, reps: int, seed: int
) -> tuple[list, dict]:
  """Measures both sides and checks their rewards; (per-side lines, ratio line)."""
  import jax

  programs = build(num_envs, num_steps, num_agents, seed)
  compile_seconds, times, _ = measure(programs, reps)
  env_steps = num_envs * num_steps
  device = jax.devices()[0]
  lines = []
  for name in programs:
    line = summary(name, compile_seconds[name], times[name], env_steps)
    line.update(
      env=ENV_NAME,
      num_agents=num_agents,
      num_envs=num_envs,
      num_steps=num_steps,
      reps=reps,
      device=device.device_kind,
      platform=device.platform,
    )
    lines.append(line)
  ours, theirs = lines
  ratios = {
    "speed_ratio_hrljax_over_jaxmarl": ours["env_steps_per_second"]
    / theirs["env_steps_per_second"],
    "cpu_speed_ratio_hrljax_over_jaxmarl": ours["env_steps_per_cpu_second"]
    / theirs["env_steps_per_cpu_second"],
    "compile_ratio_hrljax_over_jaxmarl": ours["compile_seconds"] / theirs["compile_seconds"],
    "reward_check": check_rewards(num_envs, num_steps, num_agents, seed),
  }
  return lines, ratios


def main(argv):
  del argv
  try:
    validate(FLAGS.num_envs, FLAGS.num_steps, FLAGS.num_agents, FLAGS.reps)
  except ValueError as error:
    sys.exit(f"error: {error}")
  lines, ratios = report(FLAGS.num_envs, FLAGS.num_steps, FLAGS.num_agents, FLAGS.reps, FLAGS.seed)
  for line in lines + [ratios]:
    print(json.dumps(line))
  if not ratios["reward_check"]["equal"]:
    sys.exit(f"error: team rewards differ: {ratios['reward_check']}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
