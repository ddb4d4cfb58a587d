"""Checks run in a subprocess with 8 fake CPU devices (see test_multidevice.py):
`python -m tests.spine.multidevice_checks WORKDIR`.

Prints one JSON object with the measured differences and the outcomes of the command lines it ran
(in this process, through `tests.train_in_process.cli`, into subdirectories of WORKDIR); the tests
assert on them.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import PartitionSpec as P

from hrljax import distributed
from hrljax.agents import ppo
from tests.train_in_process import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO_CARTPOLE = os.path.join(ROOT, "experiments", "configs", "ppo_cartpole.py")
# The tiny PPO command line run on 1 and on 8 devices (test_multidevice.py also runs it in 2
# processes of 4 devices): 3 updates (rollout, GAE, 2 epochs x 2 minibatches) with plain SGD, no
# gradient clipping and no annealing, so that a gradient scaled wrongly on a mesh (summed over the
# devices instead of averaged) moves the parameters and losses apart (Adam would normalise it
# away; at 0.01 the 3 updates stay stable: a larger step made the value loss diverge); a
# checkpoint after every update (the last two are kept).
CLI_ARGS = (
  "--config.num_envs=8",
  "--config.num_steps=16",
  "--config.total_timesteps=384",
  "--config.update_epochs=2",
  "--config.num_minibatches=2",
  "--config.optimizer=sgd",
  "--config.learning_rate=0.01",
  "--config.anneal_lr=False",
  "--config.max_grad_norm=1e6",
  "--config.log_every=1",
  "--config.checkpoint_every=1",
  "--config.eval_episodes=8",
)


def max_abs_diff(a, b) -> float:
  return max(
    float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
  )


def state_layout(devices: int) -> dict:
  """The partition specs the driver places a PPO run state with on `devices` devices (and that
  `distributed.jit_step` keeps for the updated state): an environment leaf, a parameter leaf.
  From the state's shapes (`init` traced, not run)."""
  config = ppo.get_config()
  config.num_envs = 8
  learner = ppo.make_learner(config)
  like = jax.eval_shape(learner.init, jax.random.key(0))
  shardings = distributed.data_parallel_shardings(
    like, distributed.make_mesh(devices), learner.sharded_field
  )
  return {
    "env_spec_8": str(jax.tree.leaves(shardings.env)[0].spec),
    "param_spec_8": str(jax.tree.leaves(shardings.agent.params)[0].spec),
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


def checkpointed_params(workdir: str, update: int):
  """The agent's parameters in checkpoint `update` of a run in `workdir` (orbax's generic
  restore, as saved)."""
  path = os.path.join(workdir, "checkpoints", str(update), "state")
  return jax.device_get(ocp.StandardCheckpointer().restore(path)["agent"]["params"])


def command_lines(workdir: str) -> dict:
  """`python -m experiments.train` of `CLI_ARGS` with `--num_devices=1` and `=8` (workdirs
  `WORKDIR/d1`, `WORKDIR/d8`), and with 4 envs, which 8 devices cannot split (`WORKDIR/x`): each
  one's exit code, stdout and stderr; how far the parameters of the two runs are apart after the
  last update, and how far the last update moved them (checkpoints 2 and 3)."""
  runs = {}
  for devices in (1, 8):
    runs[f"d{devices}"] = cli(
      PPO_CARTPOLE, os.path.join(workdir, f"d{devices}"), f"--num_devices={devices}", *CLI_ARGS
    )._asdict()
  runs["x"] = cli(PPO_CARTPOLE, os.path.join(workdir, "x"), "--config.num_envs=4")._asdict()
  out = {"cli": runs}
  if runs["d1"]["code"] == runs["d8"]["code"] == 0:
    one, eight = (checkpointed_params(os.path.join(workdir, d), 3) for d in ("d1", "d8"))
    before = checkpointed_params(os.path.join(workdir, "d1"), 2)
    out.update(ppo_param_diff=max_abs_diff(one, eight), ppo_param_change=max_abs_diff(one, before))
  return out


if __name__ == "__main__":
  out = {}
  out.update(state_layout(8))
  out.update(shard_map_gradient_scaling())
  out.update(command_lines(sys.argv[1]))
  sys.stdout.flush()
  print(json.dumps(out))
