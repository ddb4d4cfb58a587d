"""The option-critic network: a shared torso, option values, terminations, intra-option policies.

Bacon, Harb, Precup, "The Option-Critic Architecture", AAAI 2017, arXiv:1609.05140 (Fig. 1:
the policy over options reads Q(s, .), each option w has a termination beta_w(s) and a policy
pi_w(a | s)); layout as in the reference codes (jeanharb/option_critic `neural_net.py`,
jeanharb/a2oc_delib `OC_theano.py`): one feature torso, a linear Q head, a sigmoid termination
head with one output per option, and per-option linear softmax heads.

All options are computed at once: the policy head is one Dense layer with `O * A` outputs,
reshaped to `[..., O, A]`, so there is no Python loop over options.
"""

from typing import NamedTuple, Sequence

import flax.linen as nn
import jax

from hrljax.networks import initializers
from hrljax.networks.actor_critic import flatten_observation
from hrljax.networks.torsos import MLP


class OptionCriticOutput(NamedTuple):
  """Per observation: option values, termination probabilities and intra-option logits."""

  q: jax.Array  # [..., O] Q(s, w)
  beta: jax.Array  # [..., O] beta_w(s) in (0, 1)
  logits: jax.Array  # [..., O, A] logits of pi_w(. | s), already divided by the temperature


class OptionCriticNetwork(nn.Module):
  """`apply(params, obs) -> OptionCriticOutput` for a batch of observations.

  Attributes:
    num_options: O.
    num_actions: A (discrete actions).
    observation_ndim: rank of one observation; its axes are flattened, leading ones kept.
    hidden_sizes: torso layers; `()` makes the heads linear in the observation, which with a
      one-hot observation is the paper's tabular parametrisation.
    activation: torso activation.
    temperature: the intra-option policies are `softmax(logits / temperature)` (> 0).
    head_init_scale: orthogonal-init scale of the three heads; 0 initialises them to zero (the
      paper's four-rooms setting: Q = 0, beta = 0.5, uniform policies).
    head_bias: give the heads a bias. Without a torso and with one-hot observations, no bias
      keeps every state's parameters separate (a table); a bias is shared by all states.
  """

  num_options: int
  num_actions: int
  observation_ndim: int = 1
  hidden_sizes: Sequence[int] = ()
  activation: str = "relu"
  temperature: float = 1.0
  head_init_scale: float = 0.0
  head_bias: bool = True

  def setup(self):
    if self.num_options < 1 or self.num_actions < 1:
      raise ValueError(
        f"num_options, num_actions: expected integers >= 1, got "
        f"{self.num_options}, {self.num_actions}"
      )
    if not self.temperature > 0:
      raise ValueError(f"temperature: expected a float > 0, got {self.temperature!r}")
    self.torso = MLP(tuple(self.hidden_sizes), self.activation) if self.hidden_sizes else None
    init = initializers.orthogonal(self.head_init_scale)
    head = lambda size: nn.Dense(
      size, use_bias=self.head_bias, kernel_init=init, bias_init=nn.initializers.zeros
    )
    self.q_head = head(self.num_options)
    self.termination_head = head(self.num_options)
    self.policy_head = head(self.num_options * self.num_actions)

  def features(self, obs: jax.Array) -> jax.Array:
    x = flatten_observation(obs, self.observation_ndim)
    return x if self.torso is None else self.torso(x)

  def __call__(self, obs: jax.Array) -> OptionCriticOutput:
    x = self.features(obs)
    logits = self.policy_head(x).reshape(x.shape[:-1] + (self.num_options, self.num_actions))
    return OptionCriticOutput(
      q=self.q_head(x),
      beta=jax.nn.sigmoid(self.termination_head(x)),
      logits=logits / self.temperature,
    )

  def option_values(self, obs: jax.Array) -> jax.Array:
    """Q(s, .) alone (`[..., O]`)."""
    return self.q_head(self.features(obs))


def param_labels(params) -> dict:
  """`'termination'` / `'policy'` for the parameters of those heads, `'critic'` for the Q head and
  the shared torso: the three parts option-critic steps at their own rates (Bacon et al. 2017,
  Algorithm 1)."""

  def label(path, _):
    names = [getattr(k, "key", "") for k in path]
    if "termination_head" in names:
      return "termination"
    if "policy_head" in names:
      return "policy"
    return "critic"

  return jax.tree_util.tree_map_with_path(label, params)
