"""Tests of hrljax.networks.latent_skills: the encoder's mean is the prior's plus a residual (a
zero residual layer gives the prior's mean exactly), the log standard deviations are clamped, the
untrained decoder is near uniform, and the high level's a_hi starts with the spread it is given."""

import jax
import jax.numpy as jnp
import numpy as np

from hrljax.networks.latent_skills import LatentActorCritic, LatentSkillModel

OBS = jax.nn.one_hot(jnp.arange(5), 7)
CONDITION = jax.nn.one_hot(jnp.array([0, 1, 2, 3, 0]), 4)


def model_and_params():
  model = LatentSkillModel(num_actions=4, latent_dim=3, hidden_sizes=(8,))
  return model, model.init(jax.random.key(0), OBS, CONDITION)


def test_encoder_mean_is_the_prior_mean_plus_the_residual():
  model, params = model_and_params()
  q_mean, _, p_mean, _ = model.apply(params, OBS, CONDITION, method=LatentSkillModel.posterior)
  prior_mean, _ = model.apply(params, OBS, method=LatentSkillModel.prior)
  np.testing.assert_allclose(p_mean, prior_mean)
  assert np.any(np.abs(np.asarray(q_mean - p_mean)) > 0)  # the residual depends on the condition
  zeroed = jax.tree_util.tree_map_with_path(
    lambda path, x: jnp.zeros_like(x) if "encoder_net" in jax.tree_util.keystr(path) else x, params
  )
  encoder_head = zeroed["params"]["encoder_net"]
  assert all(float(jnp.abs(x).sum()) == 0 for x in jax.tree.leaves(encoder_head))
  q_mean, q_log_std, _, _ = model.apply(zeroed, OBS, CONDITION, method=LatentSkillModel.posterior)
  np.testing.assert_allclose(q_mean, prior_mean, rtol=1e-6)  # zero residual: the prior's mean
  np.testing.assert_allclose(q_log_std, 0.0)


def test_log_standard_deviations_are_clamped():
  model, params = model_and_params()
  big = jax.tree.map(lambda x: x * 1e4, params)
  _, q_log_std, _, p_log_std = model.apply(big, OBS, CONDITION, method=LatentSkillModel.posterior)
  for log_std in (q_log_std, p_log_std):
    assert float(log_std.min()) >= -2.5 and float(log_std.max()) <= 1.0
  assert float(jnp.max(jnp.abs(q_log_std))) > 0.9  # the clamp was reached


def test_untrained_decoder_is_near_uniform_and_reads_the_latent():
  model, params = model_and_params()
  z = jnp.ones((5, 3))
  probs = model.apply(params, OBS, z, method=LatentSkillModel.decode).probs
  np.testing.assert_allclose(probs, 0.25, atol=0.02)
  logits = lambda z: model.apply(params, OBS, z, method=LatentSkillModel.decode).logits
  assert np.any(np.asarray(logits(z)) != np.asarray(logits(-z)))


def test_high_level_starts_with_the_given_spread():
  network = LatentActorCritic(latent_dim=3, hidden_sizes=(8,), log_std_init=-1.5)
  params = network.init(jax.random.key(1), OBS)
  dist, value = network.apply(params, OBS)
  np.testing.assert_allclose(dist.scale_diag, np.exp(-1.5), rtol=1e-6)
  assert dist.loc.shape == (5, 3) and value.shape == (5,)
  assert float(jnp.max(jnp.abs(dist.loc))) < 0.1  # a_hi starts near 0: at the prior's skill
  np.testing.assert_allclose(network.apply(params, OBS, method=LatentActorCritic.value), value)
