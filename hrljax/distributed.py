"""The device mesh, data-parallel shardings and the compiled train step.

A train step is written once, for one device. `data_parallel_shardings` says which part of the
run state is per-environment data (split along the mesh axis `data`) and replicates the rest
(parameters, optimizer state, keys); `jit_step` compiles the step with `jax.jit` and those
`NamedSharding`s, so XLA inserts the gradient all-reduce itself. The same program therefore runs
on one device or on a mesh of many with no code change, and computes the same numbers (up to the
order of floating-point sums).

No `jax.pmap` (in maintenance mode since JAX 0.8). Code that needs per-device bodies uses
`jax.shard_map` and differentiates the globally averaged loss (`lax.pmean` inside the
differentiated function), see `global_mean`.
"""

from typing import Any, Callable, Optional

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = "data"


def initialize_processes(
  coordinator_address: Optional[str] = None,
  num_processes: Optional[int] = None,
  process_id: Optional[int] = None,
) -> None:
  """Joins JAX's multi-controller runtime; call before anything touches a device.

  Every process then runs the same program over one global mesh (`make_mesh` spans all
  processes' devices). Without arguments JAX auto-detects the cluster (TPU pods, SLURM, ...). On
  CPU, cross-process collectives need gloo, which is switched on here.
  """
  if num_processes is not None and not (isinstance(num_processes, int) and num_processes >= 1):
    raise ValueError(f"num_processes: expected an integer >= 1, got {num_processes!r}")
  if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
    raise ValueError(f"process_id: expected 0..{num_processes - 1}, got {process_id!r}")
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(
    coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
  )


def make_mesh(num_devices: Optional[int] = None, axis_name: str = DATA_AXIS) -> Mesh:
  """A 1-D mesh over the first `num_devices` devices (all of them, across processes, if None).

  The axis is `Auto`: the compiler propagates shardings, which is what `jit` with
  `in_shardings` wants (JAX >= 0.9 makes `Explicit` axes the default for `jax.make_mesh`).
  """
  available = jax.device_count()
  num_devices = available if num_devices is None else num_devices
  if not 1 <= num_devices <= available:
    raise ValueError(
      f"num_devices: expected 1..{available} (devices visible to JAX), got {num_devices}"
    )
  devices = np.asarray(jax.devices()[:num_devices])
  return Mesh(devices, (axis_name,), axis_types=(AxisType.Auto,))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def data_sharded(mesh: Mesh, axis: int = 0) -> NamedSharding:
  """Axis `axis` split along the data axis (the leading one by default), the rest unsplit."""
  return NamedSharding(mesh, P(*([None] * axis), mesh.axis_names[0]))


def data_parallel_shardings(
  state: Any, mesh: Mesh, sharded_field: Optional[str], seed_axis: bool = False
) -> Any:
  """Shardings for a run state: `state.<sharded_field>` split on its environment axis, the rest
  replicated. With `seed_axis` every leaf has a leading seed axis and the environment axis is
  the second one."""
  shardings = jax.tree.map(lambda _: replicated(mesh), state)
  if sharded_field is None:
    return shardings
  per_env = jax.tree.map(
    lambda _: data_sharded(mesh, axis=int(seed_axis)), getattr(state, sharded_field)
  )
  return shardings.replace(**{sharded_field: per_env})


def place(tree: Any, shardings: Any) -> Any:
  """Puts a pytree on the mesh, every process supplying only its own devices' shards.

  Every process holds the same host values (the run state is initialised from the same seed), so
  each builds the global arrays from its copy with `make_array_from_callback`, which works for
  meshes that span several processes, where `device_put` does not. Going through host memory also
  avoids `device_put` aliasing a single-device buffer that a donated step would then delete.
  Typed PRNG keys travel as their key data.
  """

  def put(x, sharding):
    if _is_key(x):
      data = put(np.asarray(jax.random.key_data(x)), sharding)
      return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

  return jax.tree.map(put, tree, shardings)


def _is_key(x: Any) -> bool:
  return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def jit_step(
  fn: Callable, state_shardings: Any, num_other_args: int = 0, donate: bool = True
) -> Callable:
  """`jax.jit(fn)` for `fn(state, *others) -> (state, outputs)`, keeping the state's shardings.

  The other arguments are left to the compiler; the other outputs (metrics) come back replicated,
  so every process of a multi-process run can read them; the input state is donated.
  """
  mesh = jax.tree.leaves(state_shardings)[0].mesh
  return jax.jit(
    fn,
    in_shardings=(state_shardings,) + (None,) * num_other_args,
    out_shardings=(state_shardings, replicated(mesh)),
    donate_argnums=(0,) if donate else (),
  )


def jit_replicated_output(fn: Callable, mesh: Mesh) -> Callable:
  """`jax.jit(fn)` whose outputs are replicated over `mesh` (readable by every process)."""
  return jax.jit(fn, out_shardings=replicated(mesh))


def global_mean(local_value: jax.Array, axis_name: str = DATA_AXIS) -> jax.Array:
  """Mean over the mesh axis, for use INSIDE a function differentiated under `shard_map`.

  Under `shard_map`, gradients with respect to replicated inputs come out already summed over
  the axis; differentiating this global mean gives the global-mean gradient, whereas
  differentiating the local loss and `pmean`-ing the gradient afterwards (the `pmap` idiom)
  multiplies the update by the device count.
  """
  return jax.lax.pmean(local_value, axis_name)
