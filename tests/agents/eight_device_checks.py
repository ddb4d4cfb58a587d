"""The agents' 1-device vs 8-device checks, run in one subprocess with 8 fake CPU devices (see
test_eight_devices.py): `python -m tests.agents.eight_device_checks WORKDIR`.

One Python and JAX start for every agent. Prints one JSON object, a dict per check (or its
traceback under "error", so that one failing agent does not hide the others); the tests assert
on them. Each check runs its agent's learner with SGD, so that a wrong gradient scale shows.
"""

import json
import math
import os
import re
import sys
import traceback

import jax
import ml_collections
import numpy as np

from hrljax import distributed, envs, replay, training
from hrljax.agents import archer, dqn, gmah, ippo, macro_mixture, option_critic, ppo, sac
from hrljax.agents import group_relative as gr
from hrljax.logging import read_jsonl
from hrljax.networks.discrete_q import DiscreteQNetwork
from tests.gc_settings import relax_gc


def max_abs_diff(a, b) -> float:
  return max(
    float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
  )


def float64_leaves(tree) -> list:
  return [np.asarray(x, np.float64) for x in jax.tree.leaves(jax.device_get(tree))]


def archer_check() -> dict:
  """Env carry sharded, replay buffer replicated: policy, critic, target critic, buffer and
  metrics after two iterations (the second trains the actor) on 1 and on 8 devices. The smallest
  widths and budget that keep that (compiling the step twice is the cost of the check)."""
  config = archer.get_config()
  config.update(
    {
      "env_kwargs": ml_collections.ConfigDict(
        {"num_items": 4, "num_attributes": 2, "num_values": 2, "max_turns": 2}
      ),
      "d_model": 8,
      "num_layers": 1,
      "num_heads": 2,
      "critic_d_model": 8,
      "critic_num_layers": 1,
      "bc_steps": 0,
      "num_envs": 8,
      "num_steps": 2,
      "batch_size": 8,
      "critic_updates": 1,
      "actor_updates": 1,
      "warmup_iters": 1,
      "buffer_size": 32,
      "total_timesteps": 8 * 2 * 2,
      "optimizer": "sgd",
      "actor_learning_rate": 0.1,
      "critic_learning_rate": 0.1,
    }
  )
  learner = archer.make_learner(config)
  leaves, specs, before = {}, {}, None
  init = jax.jit(learner.init)
  for devices in (1, 8):
    mesh = distributed.make_mesh(devices)
    state = init(jax.random.key(0))
    before = jax.device_get((state.agent.policy_params, state.agent.critic_params))
    shardings = distributed.data_parallel_shardings(state, mesh, learner.sharded_field)
    state = distributed.place(state, shardings)
    step = distributed.jit_step(learner.step, shardings, donate=False)
    for _ in range(2):
      state, metrics = step(state)
    leaves[devices] = float64_leaves(
      (
        state.agent.policy_params,
        state.agent.critic_params,
        state.agent.target_critic_params,
        state.buffer.storage,
        metrics,
      )
    )
    specs[devices] = (
      str(jax.tree.leaves(state.env)[0].sharding.spec),
      str(jax.tree.leaves(state.buffer)[0].sharding.spec),
    )
  before = float64_leaves(before)
  return {
    "diff": max(float(np.max(np.abs(a - b))) for a, b in zip(leaves[1], leaves[8])),
    "change": max(float(np.max(np.abs(a - b))) for a, b in zip(leaves[1][: len(before)], before)),
    "specs": specs[8],
  }


def gigpo_check() -> dict:
  """One GiGPO Learner step on 1 and on 8 devices: the advantages of the batch it collects (the
  same rollout from the same state and key), its metrics and the updated parameters."""
  config = gr.get_config()
  config.update(
    estimator="gigpo",
    optimizer="sgd",
    learning_rate=0.5,
    max_grad_norm=1e6,
    num_groups=4,
    group_size=4,
    num_steps=12,
    total_timesteps=4 * 4 * 12,
    update_epochs=2,
    num_minibatches=2,
    kl_coef=0.05,
    entropy_coef=0.01,
    observation_one_hot=13,
    hidden_sizes=(32,),
    rollout_unroll=1,
  )
  config.env_kwargs.resample_init_pos = True
  config.env_kwargs.resample_goal_pos = True
  config.env_kwargs.max_steps_in_episode = 12
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  learner = gr.make_learner(config)
  results = {}
  for devices in (1, 8):
    mesh = distributed.make_mesh(devices)
    state = learner.init(jax.random.key(0))
    shardings = distributed.data_parallel_shardings(state, mesh, learner.sharded_field)
    state = distributed.place(state, shardings)

    # One program per mesh: the learner's step, plus the advantages of the batch it collects,
    # returned beside its metrics.
    def step_and_advantage(s):
      new_s, metrics = learner.step(s)
      return new_s, (metrics, gr.collect(s, env, env_params, config)[0].advantage)

    step = distributed.jit_step(step_and_advantage, shardings, donate=False)
    new_state, (metrics, advantage) = step(state)
    results[devices] = jax.device_get(
      (advantage, new_state.agent.params, metrics, state.agent.params)
    )
    spec = str(new_state.group_ids.sharding.spec)
  (adv_1, params_1, metrics_1, before), (adv_8, params_8, metrics_8, _) = results[1], results[8]
  return {
    "advantage_abs_max": float(np.max(np.abs(adv_1))),
    "advantage_diff": max_abs_diff(adv_1, adv_8),
    "param_diff": max_abs_diff(params_1, params_8),
    "param_change": max_abs_diff(params_1, before),
    "metric_diff": max(abs(float(metrics_1[k]) - float(metrics_8[k])) for k in metrics_1),
    "group_ids_spec_8": spec,
  }


def option_critic_check(workdir: str) -> dict:
  """`training.train` of a 6-update option-critic run on 1 and on 8 devices (workdirs
  `WORKDIR/1`, `WORKDIR/8`): the train records each logs."""
  config = option_critic.get_config()
  config.update(
    num_envs=8,
    num_steps=4,
    n_step=4,
    total_timesteps=8 * 4 * 6,
    optimizer="sgd",
    critic_learning_rate=0.5,
    intra_option_learning_rate=0.25,
    termination_learning_rate=0.25,
    eval_episodes=8,
    log_every=2,
    checkpoint_every=6,
    rollout_unroll=1,
    head_init_scale=5.0,  # random heads: non-zero TD errors from the start
  )
  config.env_kwargs.max_steps_in_episode = 20
  out = {}
  for devices in (1, 8):
    run = os.path.join(workdir, str(devices))
    training.train(
      option_critic.make_learner(config), config, run, mesh=distributed.make_mesh(devices)
    )
    out[str(devices)] = [r for r in read_jsonl(run) if r["phase"] == "train"]
  return out


def collective_elements(hlo_text: str) -> int:
  """The number of array elements all the all-gathers and all-reduces of a compiled program
  produce (their result shapes summed)."""
  total = 0
  for line in hlo_text.splitlines():
    match = re.search(r"= (.*?) all-(?:gather|reduce)\(", line)
    if match:
      for dims in re.findall(r"\w+\[([\d,]*)\]", match.group(1)):
        total += math.prod(int(d) for d in dims.split(",") if d)
  return total


def ppo_shuffle_shards_check() -> dict:
  """PPO's update with `shuffle_shards` 1 and 8 compiled for the 8-device mesh: the elements its
  collectives move (against the batch's and the parameters'); and the parameters after one
  Learner step with 8 shards on 1 and 8 devices (SGD). The 1-shard update is only compiled (its
  collectives are the measure), not run."""
  config = ppo.get_config()
  config.update(
    num_envs=8, num_steps=16, total_timesteps=8 * 16 * 2, num_minibatches=2, optimizer="sgd"
  )
  config.hidden_sizes = (16,)
  out = {"collective_elements": {}, "all_gathers": {}, "all_reduces": {}, "batch_elements": 8 * 16}
  for shards in (1, 8):
    config.shuffle_shards = shards
    ppo.validate_config(config, 8)
    learner = ppo.make_learner(config)
    init_state = jax.jit(learner.init)(jax.random.key(0))
    results = {}
    for devices in (8,) if shards == 1 else (1, 8):
      mesh = distributed.make_mesh(devices)
      shardings = distributed.data_parallel_shardings(init_state, mesh, learner.sharded_field)
      state = distributed.place(init_state, shardings)
      step = distributed.jit_step(learner.step, shardings, donate=False)
      if devices == 8:
        # The compiled program both read and run: traced and compiled once.
        step = step.lower(state).compile()
        out["collective_elements"][str(shards)] = collective_elements(step.as_text())
        out["all_gathers"][str(shards)] = step.as_text().count(" all-gather(")
        out["all_reduces"][str(shards)] = step.as_text().count(" all-reduce(")
      if shards == 8:
        new_state, _ = step(state)
        results[devices] = jax.device_get((new_state.agent.params, state.agent.params))
    out["param_elements"] = sum(x.size for x in jax.tree.leaves(init_state.agent.params))
    if shards == 8:
      out["param_diff"] = max_abs_diff(results[1][0], results[8][0])
      out["param_change"] = max_abs_diff(results[1][0], results[1][1])
  return out


# Tiny off-policy runs learning from the first step with SGD, two gradient steps per Learner
# step (value-based: a target copy every two) (`off_policy_check`).
VALUE_BASED = {
  "num_envs": 8,
  "num_steps": 2,
  "updates_per_step": 2,
  "total_timesteps": 8 * 2 * 3,
  "learning_starts": 0,
  "batch_size": 16,
  "buffer_size": 32,
  "hidden_sizes": (16,),
  "optimizer": "sgd",
  "learning_rate": 0.05,
  "target_update_interval": 2,
}
MULTI_AGENT = {"mixer_embed_dim": 8, "hypernet_hidden": 8}
IPPO = {
  "num_envs": 8,
  "num_steps": 2,
  "total_timesteps": 8 * 2 * 3,
  "update_epochs": 2,
  "num_minibatches": 2,
  "hidden_sizes": (8,),
  "optimizer": "sgd",
  "learning_rate": 0.05,
  "anneal_lr": False,
}
MIXTURE = {
  **{k: v for k, v in VALUE_BASED.items() if k not in ("hidden_sizes", "num_steps")},
  "env_kwargs": {"max_steps_in_episode": 20},
  "expert_runs": ("unused",),  # the experts are passed to make_learner
  "memory_size": 8,
  "num_neighbours": 2,
  "hyper_hidden_size": 8,
}
SAC = {
  **{k: v for k, v in VALUE_BASED.items() if k not in ("learning_rate", "target_update_interval")},
  "actor_learning_rate": 0.05,
  "critic_learning_rate": 0.05,
  "alpha_learning_rate": 0.05,
}


def float_leaves(tree) -> list:
  """The floating-point leaves of `tree` as float64 host arrays (typed keys and counters left
  out)."""
  return [
    np.asarray(x, np.float64)
    for x in jax.tree.leaves(tree)
    if jax.dtypes.issubdtype(x.dtype, jax.numpy.floating)
  ]


def off_policy_check(agent, overrides: dict) -> dict:
  """`learner_check` of `agent`'s learner with its default config and `overrides`."""
  config = agent.get_config()
  config.update(overrides)
  return learner_check(agent.make_learner(config))


def learner_check(learner) -> dict:
  """Per-environment state sharded, replay buffers replicated: the whole run state (agent,
  targets, optimizer state, buffers, environments) and the metrics after three Learner steps on
  1 and on 8 devices; the partition specs of the sharded field and of every replay buffer."""
  leaves, sharded = {}, None
  for devices in (1, 8):
    mesh = distributed.make_mesh(devices)
    state = learner.init(jax.random.key(0))
    before = float_leaves(state.agent)
    shardings = distributed.data_parallel_shardings(state, mesh, learner.sharded_field)
    state = distributed.place(state, shardings)
    step = distributed.jit_step(learner.step, shardings, donate=False)
    for _ in range(3):
      state, metrics = step(state)
    leaves[devices] = float_leaves((state, metrics))
    sharded = str(jax.tree.leaves(getattr(state, learner.sharded_field))[0].sharding.spec)
    buffers = [b for b in vars(state).values() if isinstance(b, replay.ReplayBuffer)]
    replicated = sorted({str(jax.tree.leaves(b)[0].sharding.spec) for b in buffers})
  change = max(float(np.max(np.abs(a - b))) for a, b in zip(float_leaves(state.agent), before))
  return {
    "diff": max(float(np.max(np.abs(a - b))) for a, b in zip(leaves[1], leaves[8])),
    "change": change,
    "sharded": sharded,
    "replicated": replicated,
  }


def ippo_check() -> dict:
  """IPPO (on-policy, every agent of every environment a row of the batch): three Learner steps
  of a rollout and 2 epochs x 2 minibatches of SGD, whole-batch shuffle."""
  config = ippo.get_config()
  config.update(IPPO)
  return learner_check(ippo.make_learner(config))


def macro_mixture_check() -> dict:
  """MacroHFT's hyper-agent over three frozen random DQN experts on four rooms (SGD)."""
  config = macro_mixture.get_config()
  config.update(MIXTURE)
  env, env_params = envs.make(config.env_name)
  spec = envs.spec(env, env_params)
  network = DiscreteQNetwork(num_actions=spec.action_dim, hidden_sizes=(8,))
  obs = jax.numpy.zeros((1,) + tuple(spec.observation_shape))
  params = [network.init(k, obs) for k in jax.random.split(jax.random.key(5), 3)]
  experts = macro_mixture.stack_experts(network, params)
  return learner_check(macro_mixture.make_learner(config, experts))


def guarded(check, *args) -> dict:
  """`check(*args)`, or its traceback under "error"."""
  try:
    return check(*args)
  except Exception:  # reported to the test that asserts on this check
    return {"error": traceback.format_exc()}


if __name__ == "__main__":
  relax_gc()
  out = {
    "devices": jax.device_count(),
    "archer": guarded(archer_check),
    "sac": guarded(off_policy_check, sac, SAC),
    "gigpo": guarded(gigpo_check),
    "option_critic": guarded(option_critic_check, sys.argv[1]),
    "ppo_shuffle_shards": guarded(ppo_shuffle_shards_check),
    "dqn": guarded(off_policy_check, dqn, VALUE_BASED),
    "gmah": guarded(
      off_policy_check, gmah, {**VALUE_BASED, **MULTI_AGENT, "low_hidden_sizes": (16,)}
    ),
    "ippo": guarded(ippo_check),
    "macro_mixture": guarded(macro_mixture_check),
  }
  sys.stdout.flush()
  print(json.dumps(out))
