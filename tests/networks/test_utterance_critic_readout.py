"""Tests of the `readout` and `causal` options of `hrljax.networks.transformer.UtteranceCritic`.

`readout="last"` reads the final hidden state of the last non-PAD token; `causal=True` gives the
encoder the policy's causal mask, so a critic whose encoder holds a `CausalTransformer`'s trunk
computes exactly that policy's hidden states (checked through the policy's logits).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.networks import transformer as tr
from tests.fast_compile import fast_jit


VOCAB = 16
DIALOGUES = np.array([[1, 5, 6, 9, 0, 0], [1, 2, 3, 4, 5, 6], [1, 9, 0, 0, 0, 0]], np.int32)
UTTERANCES = np.array([[3, 11, 4], [12, 4, 0], [2, 15, 9]], np.int32)


def _critic(**options):
  return tr.UtteranceCritic(
    vocab_size=VOCAB, d_model=16, num_layers=2, num_heads=2, max_len=12, **options
  )


def _scaled(params, scale=0.5, seed=0):
  """Every leaf redrawn from N(0, scale²), so features vary by O(1) and a wrong readout shows."""
  leaves, tree = jax.tree.flatten(params)
  rng = np.random.default_rng(seed)
  return jax.tree.unflatten(
    tree, [jnp.asarray(rng.normal(0.0, scale, x.shape), x.dtype) for x in leaves]
  )


def test_last_readout_ignores_right_padding_and_reads_the_last_token():
  critic = _critic(readout="last")
  # Only the shapes of the initial parameters matter: `_scaled` redraws every leaf.
  params = _scaled(jax.eval_shape(critic.init, jax.random.key(0), DIALOGUES, UTTERANCES))
  values = fast_jit(lambda d: critic.apply(params, d, method=tr.UtteranceCritic.values))
  padded = np.concatenate([DIALOGUES, np.zeros((3, 4), np.int32)], axis=1)
  np.testing.assert_allclose(values(DIALOGUES), values(padded), rtol=1e-5, atol=1e-5)
  # Changing only the last real token of row 0 changes its value; the other rows are untouched.
  changed = DIALOGUES.copy()
  changed[0, 3] = 7
  before, after = values(DIALOGUES), values(changed)
  assert np.all(np.abs(before[:, 0] - after[:, 0]) > 1e-4)
  np.testing.assert_allclose(before[:, 1:], after[:, 1:], rtol=1e-6)


def test_mean_and_last_readouts_differ():
  """Same parameters, different features: the option is not ignored."""
  mean, last = _critic(), _critic(readout="last")
  params = _scaled(jax.eval_shape(mean.init, jax.random.key(0), DIALOGUES, UTTERANCES))
  q_mean, q_last = fast_jit(
    lambda p: (mean.apply(p, DIALOGUES, UTTERANCES).q, last.apply(p, DIALOGUES, UTTERANCES).q)
  )(params)
  assert np.max(np.abs(q_mean - q_last)) > 1e-3


def test_causal_encoder_with_a_policy_trunk_computes_the_policy_hidden_states():
  """With the trunk of a `CausalTransformer`, a causal last-token encoding is the policy's hidden
  state at the last token: the policy's head on it gives the policy's next-token logits."""
  policy = tr.CausalTransformer(vocab_size=VOCAB, d_model=16, num_layers=2, num_heads=2, max_len=12)
  policy_params = _scaled(jax.eval_shape(policy.init, jax.random.key(1), DIALOGUES), seed=1)
  critic = _critic(readout="last", causal=True, utterance_encoding="joint")
  critic_params = fast_jit(critic.init)(jax.random.key(2), DIALOGUES, UTTERANCES)
  critic_params["params"]["encoder"] = policy_params["params"]["trunk"]
  tokens = jnp.asarray(DIALOGUES)

  @fast_jit
  def encodings_and_logits(critic_params, policy_params):
    encode = lambda c: c.apply(critic_params, tokens, tokens != 0, method=tr.UtteranceCritic.encode)
    # The bidirectional encoder with the same parameters, for the last check.
    return (encode(critic), encode(critic.clone(causal=False)), policy.apply(policy_params, tokens))

  features, bidirectional, logits = encodings_and_logits(critic_params, policy_params)
  head = policy_params["params"]["lm_head"]
  from_critic = features @ head["kernel"] + head["bias"][None]
  last = tr.last_valid_index(tokens != 0)
  expected = jnp.take_along_axis(logits, last[:, None, None], axis=1)[:, 0]
  np.testing.assert_allclose(from_critic, expected, rtol=1e-4, atol=1e-4)
  # The bidirectional encoder with the same parameters does not (earlier tokens see later ones).
  assert np.max(np.abs(bidirectional @ head["kernel"] + head["bias"][None] - expected)) > 1e-3


def test_unknown_readout_is_named():
  with pytest.raises(ValueError, match=r"readout: expected one of \['mean', 'last'\], got 'cls'"):
    _critic(readout="cls").init(jax.random.key(0), DIALOGUES, UTTERANCES)
