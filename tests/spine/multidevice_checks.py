"""Checks run in a subprocess with 8 fake CPU devices (see test_multidevice.py):
`python -m tests.spine.multidevice_checks WORKDIR`.

Prints one JSON object with the measured differences and the outcomes of the command lines it ran
(in this process, through `tests.train_in_process.cli`, into subdirectories of WORKDIR); the tests
assert on them.
"""

import json
import os
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from hrljax import distributed
from hrljax.agents import ppo
from tests.gc_settings import relax_gc
from tests.train_in_process import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO_CARTPOLE = os.path.join(ROOT, "experiments", "configs", "ppo_cartpole.py")
# The tiny PPO command line run on 1 and on 8 devices (test_multidevice.py also runs it in 2
# processes of 4 devices).
CLI_ARGS = (
  "--config.num_envs=8",
  "--config.num_steps=16",
  "--config.total_timesteps=384",
  "--config.log_every=1",
  "--config.checkpoint_every=3",
  "--config.eval_episodes=8",
)


def max_abs_diff(a, b) -> float:
  return max(
    float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
  )


def ppo_sgd_update_difference() -> dict:
  """One PPO update with SGD (rollout, GAE, 2 epochs x 2 minibatches) on 8 devices vs 1."""
  config = ppo.get_config()
  config.update(
    optimizer="sgd",
    learning_rate=0.5,
    anneal_lr=False,
    max_grad_norm=1e6,
    num_envs=8,
    num_steps=16,
    total_timesteps=128,
    update_epochs=2,
    num_minibatches=2,
  )
  learner = ppo.make_learner(config)
  results = {}
  for devices in (1, 8):
    mesh = distributed.make_mesh(devices)
    state = learner.init(jax.random.key(0))
    shardings = distributed.data_parallel_shardings(state, mesh, learner.sharded_field)
    state = distributed.place(state, shardings)
    step = distributed.jit_step(learner.step, shardings, donate=False)
    new_state, metrics = step(state)
    results[devices] = (
      jax.device_get(new_state.agent.params),
      jax.device_get(metrics),
      jax.device_get(state.agent.params),
      new_state,
    )
  params_1, metrics_1, before, _ = results[1]
  params_8, metrics_8, _, state_8 = results[8]
  env_leaf = jax.tree.leaves(state_8.env)[0]
  param_leaf = jax.tree.leaves(state_8.agent.params)[0]
  return {
    "ppo_param_diff": max_abs_diff(params_1, params_8),
    "ppo_param_change": max_abs_diff(params_1, before),
    "ppo_metric_diff": max(abs(float(metrics_1[k]) - float(metrics_8[k])) for k in metrics_1),
    "env_spec_8": str(env_leaf.sharding.spec),
    "param_spec_8": str(param_leaf.sharding.spec),
    "num_devices": jax.device_count(),
  }


def shard_map_gradient_scaling() -> dict:
  """The pitfall of `pmap`-style code: under shard_map, grad-then-pmean is N times too large; the
  gradient of the globally averaged loss (`distributed.global_mean`) is right."""
  mesh = distributed.make_mesh(8)
  x = jnp.arange(32.0).reshape(16, 2) / 10.0
  y = jnp.arange(16.0) / 4.0
  w = jnp.array([0.3, -0.2])
  loss = lambda w, x, y: jnp.mean((x @ w - y) ** 2)
  reference = jax.grad(loss)(w, x, y)

  def global_mean_grad(w, x, y):
    return jax.grad(lambda w: distributed.global_mean(loss(w, x, y)))(w)

  def grad_then_pmean(w, x, y):
    return jax.lax.pmean(jax.grad(loss)(w, x, y), "data")

  shard = lambda f: jax.jit(
    jax.shard_map(f, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P())
  )
  good = shard(global_mean_grad)(w, x, y)
  bad = shard(grad_then_pmean)(w, x, y)
  return {
    "global_mean_grad_diff": float(jnp.max(jnp.abs(good - reference))),
    "grad_then_pmean_ratio": float(jnp.linalg.norm(bad) / jnp.linalg.norm(reference)),
  }


def command_lines(workdir: str) -> dict:
  """`python -m experiments.train` of `CLI_ARGS` with `--num_devices=1` and `=8` (workdirs
  `WORKDIR/d1`, `WORKDIR/d8`), and with 4 envs, which 8 devices cannot split (`WORKDIR/x`): each
  one's exit code, stdout and stderr."""
  runs = {}
  for devices in (1, 8):
    runs[f"d{devices}"] = cli(
      PPO_CARTPOLE, os.path.join(workdir, f"d{devices}"), f"--num_devices={devices}", *CLI_ARGS
    )._asdict()
  runs["x"] = cli(PPO_CARTPOLE, os.path.join(workdir, "x"), "--config.num_envs=4")._asdict()
  # The 8-device run as if killed after its checkpoint at update 2 (the last one removed), then
  # resumed: the restored state, read into the shapes of `init` with their shardings, trains on.
  resumed = os.path.join(workdir, "r8")
  args = ("--num_devices=8", *CLI_ARGS, "--config.checkpoint_every=2")
  runs["r8_first"] = cli(PPO_CARTPOLE, resumed, *args)._asdict()
  shutil.rmtree(os.path.join(resumed, "checkpoints", "3"))
  runs["r8"] = cli(PPO_CARTPOLE, resumed, *args)._asdict()
  return {"cli": runs}


if __name__ == "__main__":
  relax_gc()
  out = {}
  out.update(ppo_sgd_update_difference())
  out.update(shard_map_gradient_scaling())
  out.update(command_lines(sys.argv[1]))
  sys.stdout.flush()
  print(json.dumps(out))
