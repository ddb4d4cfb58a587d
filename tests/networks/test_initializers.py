"""hrljax.networks.initializers.orthogonal: flax's values, and no batched QR under vmap (the
batched CPU LAPACK QR of jaxlib 0.10 can deadlock XLA's intra-op pool; see the module)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.networks import MLP, initializers


@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (5, 5), (3, 2, 4)])
def test_vmapped_values_equal_flax_orthogonal_key_by_key(shape):
  keys = jax.random.split(jax.random.key(0), 3)
  ours = jax.jit(jax.vmap(lambda k: initializers.orthogonal(1.5)(k, shape)))(keys)
  flax_values = np.stack([np.asarray(nn.initializers.orthogonal(1.5)(k, shape)) for k in keys])
  np.testing.assert_array_equal(np.asarray(ours), flax_values)
  product = np.einsum("bij,bik->bjk", *(2 * [np.asarray(ours).reshape(3, -1, shape[-1])]))
  if shape[-1] <= np.prod(shape[:-1]):  # orthonormal columns, scaled
    np.testing.assert_allclose(
      product, np.broadcast_to(2.25 * np.eye(shape[-1]), product.shape), atol=1e-5
    )


def _qr_operand_ranks(jaxpr) -> list[int]:
  """Ranks of the operands of every `qr` in a (closed) jaxpr, sub-jaxprs included."""
  ranks = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "qr":
      ranks.append(eqn.invars[0].aval.ndim)
    for param in eqn.params.values():
      inner = getattr(param, "jaxpr", None)
      if inner is not None:
        ranks.extend(_qr_operand_ranks(inner if hasattr(inner, "eqns") else inner.jaxpr))
  return ranks


def test_vmapped_network_init_runs_one_unbatched_qr_per_key():
  model = MLP((8, 8))
  init = jax.vmap(lambda k: model.init(k, jnp.zeros((1, 3))))
  keys = jax.random.split(jax.random.key(1), 4)
  ranks = _qr_operand_ranks(jax.make_jaxpr(init)(keys).jaxpr)
  assert ranks and all(rank == 2 for rank in ranks), ranks
  # And flax's own initialiser would have batched it: the check can fail.
  flax_init = jax.vmap(lambda k: nn.initializers.orthogonal()(k, (8, 8)))
  assert _qr_operand_ranks(jax.make_jaxpr(flax_init)(keys).jaxpr) == [3]
  batched = jax.jit(init)(keys)  # under jit the torso's scale jnp.sqrt(2) is a tracer
  for i, key in enumerate(keys):
    one = model.init(key, jnp.zeros((1, 3)))
    jax.tree.map(
      lambda a, b: np.testing.assert_array_equal(np.asarray(a)[i], np.asarray(b)), batched, one
    )
