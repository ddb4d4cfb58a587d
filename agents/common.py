"""Pieces every gradient-based agent shares: one optimizer step, minibatch epochs, network init.

An agent here is a `flax.struct.PyTreeNode` with fields `params`, `opt_state`, `tx` (an
`optax.GradientTransformation`) and, for shuffled minibatches, `key`.
"""

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from hrljax.types import Array, PyTree


def apply_gradients(agent: Any, grads: PyTree) -> Any:
  """The agent after one optimizer step on `grads` (params and optimizer state updated)."""
  updates, opt_state = agent.tx.update(grads, agent.opt_state, agent.params)
  return agent.replace(params=optax.apply_updates(agent.params, updates), opt_state=opt_state)


def gradient_step(agent: Any, loss_fn: Callable[..., tuple[Array, dict]], *args
                  ) -> tuple[Any, dict[str, Array]]:
  """One optimizer step on `loss_fn(agent.params, *args) -> (loss, metrics)`."""
  grads, metrics = jax.grad(loss_fn, has_aux=True)(agent.params, *args)
  return apply_gradients(agent, grads), metrics


def minibatch_epochs(agent: Any, batch: PyTree,
                     minibatch_step: Callable[[Any, PyTree], tuple[Any, dict]],
                     num_minibatches: int, update_epochs: int) -> tuple[Any, dict[str, Array]]:
  """`update_epochs` passes over `batch` (leading axis = samples), each a fresh shuffle split into
  `num_minibatches` equal minibatches, one `minibatch_step` each; metrics averaged over all steps.

  The shuffle key is split off `agent.key`, so the agent's key advances once per epoch.
  """
  num_samples = jax.tree.leaves(batch)[0].shape[0]

  def epoch(agent, _):
    key, perm_key = jax.random.split(agent.key)
    perm = jax.random.permutation(perm_key, num_samples)
    minibatches = jax.tree.map(
        lambda x: jnp.take(x, perm, axis=0).reshape((num_minibatches, -1) + x.shape[1:]), batch)
    return jax.lax.scan(minibatch_step, agent.replace(key=key), minibatches)

  agent, metrics = jax.lax.scan(epoch, agent, None, length=update_epochs)
  return agent, jax.tree.map(jnp.mean, metrics)


def init_params(network: nn.Module, key: Array, observation_shape: tuple[int, ...]) -> PyTree:
  """Parameters of `network` for a batch of one float32 observation of `observation_shape`."""
  return network.init(key, jnp.zeros((1,) + tuple(observation_shape), jnp.float32))
