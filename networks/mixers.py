"""Mixing networks: QMIX's hypernetworks over agent values, and the gate over frozen experts.

`QMixHypernetwork`: the mixing network's weights and biases as functions of the state.

Rashid et al., "QMIX: Monotonic Value Function Factorisation for Deep Multi-Agent Reinforcement
Learning", ICML 2018, arXiv:1803.11485, Section 4 and Appendix C: the mixing network has one
hidden layer of `embed_dim` ELU units; its weights come from hypernetworks of the global state
(taken through an absolute value by the mixer, so Q_tot is monotonic in every agent's value),
its first bias from a linear layer of the state and its final bias V(s) from a two-layer ReLU
network. The weight hypernetworks have one hidden ReLU layer of `hypernet_hidden` units (the
authors' pymarl `QMixer` with `hypernet_layers=2`, `hypernet_embed=64`); `hypernet_hidden=0` makes
them linear (`hypernet_layers=1`).

The module returns the raw outputs; `hrljax.losses.value_based.monotonic_mix` takes the absolute
values and mixes.

`ExpertMixtureGate`: the logits of a softmax mixture over K frozen experts, as a function of the
observation, and the state encoding an episodic memory compares (MacroHFT's hyper-agent: Zong et
al., "MacroHFT: Memory Augmented Context-aware Reinforcement Learning On High Frequency Trading",
KDD 2024, arXiv:2406.14537, Section 4.3). `hrljax.losses.value_based.expert_mixture` mixes.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from hrljax.networks import initializers
from hrljax.networks.actor_critic import flatten_observation


class QMixHypernetwork(nn.Module):
  """`apply(params, state[..., S]) -> (w1[..., N, M], b1[..., M], w2[..., M], b2[...])`.

  Attributes:
    num_agents: N, the number of agent values mixed.
    embed_dim: M, the mixing network's hidden units (QMIX: 32).
    hypernet_hidden: hidden ReLU units of the weight hypernetworks (pymarl: 64); 0: linear.
    init_scale: orthogonal-init scale of the weight hypernetworks' output layers. 1.0 is the
      usual scale; a small one (1e-3) starts the mixer near V(s), with a small gain on the
      agents' values (Q_tot's gain in q_i is a sum of products of absolute weights over the
      `embed_dim` units), so the TD error is not magnified onto the shared agent network early on.
  """

  num_agents: int
  embed_dim: int = 32
  hypernet_hidden: int = 64
  init_scale: float = 1.0

  def _weights(self, state: jax.Array, size: int, name: str) -> jax.Array:
    if self.hypernet_hidden:
      state = nn.relu(nn.Dense(self.hypernet_hidden, name=f"{name}_hidden")(state))
    init = initializers.orthogonal(self.init_scale)
    return nn.Dense(size, kernel_init=init, name=name)(state)

  @nn.compact
  def __call__(self, state: jax.Array):
    if self.num_agents < 1 or self.embed_dim < 1:
      raise ValueError(
        f"num_agents, embed_dim: expected integers >= 1, got {self.num_agents!r}, "
        f"{self.embed_dim!r}"
      )
    lead = state.shape[:-1]
    n, m = self.num_agents, self.embed_dim
    w1 = self._weights(state, n * m, "hyper_w1").reshape(lead + (n, m))
    w2 = self._weights(state, m, "hyper_w2")
    b1 = nn.Dense(m, name="hyper_b1")(state)
    b2 = nn.Dense(1, name="value_out")(nn.relu(nn.Dense(m, name="value_hidden")(state)))
    return w1, b1, w2, jnp.squeeze(b2, -1)


class ExpertMixtureGate(nn.Module):
  """`apply(params, obs) -> (logits [..., K], encoding [..., H])`: the mixture's logits and the
  state encoding the episodic memory compares.

  After the authors' `hyperagent` (ZONG0004/MacroHFT, `model/net.py`): a linear encoding of the
  state (the memory's key), a hidden layer, and an output layer initialised to zero, so that
  every expert starts with weight 1/K.
  """

  num_experts: int
  hidden_size: int = 32
  observation_ndim: int = 1

  @nn.compact
  def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    x = flatten_observation(obs, self.observation_ndim)
    encoding = nn.Dense(self.hidden_size, name="encoder")(x)
    h = nn.LayerNorm(use_scale=False, use_bias=False)(encoding)
    h = nn.gelu(nn.Dense(4 * self.hidden_size)(h))
    logits = nn.Dense(
      self.num_experts,
      kernel_init=nn.initializers.zeros,
      bias_init=nn.initializers.zeros,
      name="logits",
    )(h)
    return logits, encoding
