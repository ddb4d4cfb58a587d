"""Tests of hrljax.losses.latent_skills: the KL to the prior against the multivariate-normal
closed form (trace / log-determinant, float64 NumPy), the smoothness term by hand with episode
boundaries and invalid steps, the residual parameterisation, the distillation loss's parts and
gradients, masked entries and bad arguments."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax.losses import latent_skills as ls


def variants(fn):
  """The function itself and its jitted version."""
  return [fn, jax.jit(fn)]


def f32(x):
  return jnp.asarray(x, jnp.float32)


def numpy_mvn_kl(mq, log_sq, mp, log_sp):
  """KL(N(mq, Σq) ‖ N(mp, Σp)) by the general formula for full covariances:
  ½[tr(Σp⁻¹Σq) + (mp − mq)ᵀΣp⁻¹(mp − mq) − D + ln det Σp − ln det Σq]."""
  mq, mp = np.asarray(mq, np.float64), np.asarray(mp, np.float64)
  cov_q = np.diag(np.exp(2 * np.asarray(log_sq, np.float64)))
  cov_p = np.diag(np.exp(2 * np.asarray(log_sp, np.float64)))
  inv_p = np.linalg.inv(cov_p)
  gap = mp - mq
  _, logdet_p = np.linalg.slogdet(cov_p)
  _, logdet_q = np.linalg.slogdet(cov_q)
  return 0.5 * (np.trace(inv_p @ cov_q) + gap @ inv_p @ gap - len(mq) + logdet_p - logdet_q)


@pytest.mark.parametrize("fn", variants(ls.gaussian_kl))
def test_gaussian_kl_equals_the_multivariate_normal_closed_form(fn):
  rng = np.random.default_rng(0)
  mq, mp = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
  log_sq, log_sp = rng.uniform(-1.5, 1.0, size=(5, 3)), rng.uniform(-1.5, 1.0, size=(5, 3))
  kl = fn(f32(mq), f32(log_sq), f32(mp), f32(log_sp))
  expected = [numpy_mvn_kl(mq[i], log_sq[i], mp[i], log_sp[i]) for i in range(5)]
  np.testing.assert_allclose(np.asarray(kl), expected, rtol=1e-5, atol=1e-6)
  assert np.all(np.asarray(kl) > 0)


def test_gaussian_kl_is_zero_for_equal_distributions_and_not_symmetric():
  mean, log_std = f32([[0.3, -1.0]]), f32([[0.2, -0.5]])
  np.testing.assert_allclose(ls.gaussian_kl(mean, log_std, mean, log_std), [0.0], atol=1e-7)
  # 1-D by hand: q = N(0, 1), p = N(1, 2²): log 2 + (1 + 1) / 8 - ½ = 0.443147...
  q = (f32([[0.0]]), f32([[0.0]]))
  p = (f32([[1.0]]), f32([[np.log(2.0)]]))
  np.testing.assert_allclose(ls.gaussian_kl(*q, *p), [np.log(2.0) - 0.25], rtol=1e-6)
  # KL(p ‖ q) = -log 2 + (4 + 1) / 2 - ½ = 1.306853
  np.testing.assert_allclose(ls.gaussian_kl(*p, *q), [2.0 - np.log(2.0)], rtol=1e-6)


def test_gaussian_kl_gradient_reaches_both_distributions_and_not_the_prior_mean_of_a_residual():
  def kl(prior_mean, residual, log_sq, log_sp):
    return ls.gaussian_kl(prior_mean + residual, log_sq, prior_mean, log_sp).sum()

  args = (f32([[0.5, -1.0]]), f32([[0.2, 0.3]]), f32([[-0.3, 0.1]]), f32([[0.4, -0.2]]))
  grads = jax.jit(jax.grad(kl, argnums=(0, 1, 2, 3)))(*args)
  # A residual posterior's KL depends on the prior mean only through the gap: zero gradient.
  np.testing.assert_allclose(grads[0], 0.0, atol=1e-7)
  for g in grads[1:]:
    assert np.all(np.abs(np.asarray(g)) > 1e-3)


@pytest.mark.parametrize("fn", variants(ls.ar_smoothness))
def test_ar_smoothness_by_hand_with_an_episode_boundary_and_an_invalid_step(fn):
  mean = f32([[0.0, 0.0], [1.0, 0.0], [1.0, 2.0], [5.0, 5.0], [5.0, 6.0], [0.0, 0.0]])
  done = jnp.asarray([False, False, True, False, False, False])
  valid = jnp.asarray([True, True, True, True, True, False])
  loss, extras = fn(mean, done, valid)
  # pairs: (0,1) 1, (1,2) 4, (2,3) across the boundary: out, (3,4) 1, (4,5) step 5 invalid: out
  np.testing.assert_array_equal(extras.pair_mask, [True, True, False, True, False])
  np.testing.assert_allclose(extras.penalty, [1.0, 4.0, 0.0, 1.0, 0.0])
  np.testing.assert_allclose([extras.total, extras.count], [6.0, 3.0])
  np.testing.assert_allclose(loss, 2.0)


def test_ar_smoothness_never_reads_an_invalid_step_and_is_zero_without_pairs():
  mean = f32([[0.0], [1.0], [np.nan]])
  valid = jnp.asarray([True, True, False])
  done = jnp.zeros(3, bool)
  loss, _ = jax.jit(ls.ar_smoothness)(mean, done, valid)
  grad = jax.jit(jax.grad(lambda m: ls.ar_smoothness(m, done, valid)[0]))(mean)
  np.testing.assert_allclose(loss, 1.0)
  assert np.all(np.isfinite(np.asarray(grad)))
  np.testing.assert_allclose(grad[:, 0], [-2.0, 2.0, 0.0])
  loss, extras = jax.jit(ls.ar_smoothness)(f32([[1.0], [3.0]]), jnp.asarray([True, False]))
  assert float(loss) == 0.0 and float(extras.count) == 0.0


def test_residual_skill_with_zero_high_level_action_is_the_prior_mean():
  prior_mean = f32([[0.5, -1.5, 2.0], [0.0, 1.0, -3.0]])
  np.testing.assert_array_equal(
    ls.residual_skill(prior_mean, jnp.zeros_like(prior_mean)), prior_mean
  )
  a_hi = f32([[1.0, 1.0, 1.0], [-1.0, 0.0, 0.5]])
  np.testing.assert_allclose(ls.residual_skill(prior_mean, a_hi), prior_mean + a_hi)
  grad = jax.grad(lambda a: ls.residual_skill(prior_mean, a).sum())(a_hi)
  np.testing.assert_allclose(grad, 1.0)
  with pytest.raises(ValueError, match="a_hi"):
    ls.residual_skill(prior_mean, a_hi[:, :2])


def distillation_inputs(seed=0, steps=4, actions=3, latent=2):
  rng = np.random.default_rng(seed)
  return dict(
    decoder_logits_t=f32(rng.normal(size=(steps, actions))),
    expert_action_t=jnp.asarray(rng.integers(0, actions, size=steps), jnp.int32),
    q_mean_t=f32(rng.normal(size=(steps, latent))),
    q_log_std_t=f32(rng.uniform(-1, 0.5, size=(steps, latent))),
    p_mean_t=f32(rng.normal(size=(steps, latent))),
    p_log_std_t=f32(rng.uniform(-1, 0.5, size=(steps, latent))),
    done_t=jnp.asarray([False, True, False, False][:steps]),
  )


@pytest.mark.parametrize("fn", [jax.jit(ls.distillation_loss)])
def test_distillation_loss_is_nll_plus_weighted_kl_plus_weighted_smoothness(fn):
  x = distillation_inputs()
  loss, extras = fn(**x, kl_coef=0.01, ar_coef=0.005)
  log_probs = np.asarray(jax.nn.log_softmax(x["decoder_logits_t"]), np.float64)
  nll = -log_probs[np.arange(4), np.asarray(x["expert_action_t"])]
  kl = [
    numpy_mvn_kl(x["q_mean_t"][t], x["q_log_std_t"][t], x["p_mean_t"][t], x["p_log_std_t"][t])
    for t in range(4)
  ]
  mq = np.asarray(x["q_mean_t"], np.float64)
  # pairs (0,1) and (2,3); step 1 ended its episode
  ar = (np.sum((mq[1] - mq[0]) ** 2) + np.sum((mq[3] - mq[2]) ** 2)) / 2
  np.testing.assert_allclose(extras.nll, nll, rtol=1e-5)
  np.testing.assert_allclose(extras.kl, kl, rtol=1e-5)
  np.testing.assert_allclose(extras.smoothness, ar, rtol=1e-5)
  np.testing.assert_allclose(loss, nll.mean() + 0.01 * np.mean(kl) + 0.005 * ar, rtol=1e-5)
  logits = np.asarray(x["decoder_logits_t"])
  expected_accuracy = np.mean(logits.argmax(-1) == np.asarray(x["expert_action_t"]))
  np.testing.assert_allclose(extras.accuracy, expected_accuracy)


def test_distillation_loss_gradient_lowers_the_nll_of_the_expert_action():
  x = distillation_inputs()
  grad = jax.jit(
    jax.grad(lambda logits: ls.distillation_loss(**{**x, "decoder_logits_t": logits})[0])
  )(x["decoder_logits_t"])
  chosen = np.asarray(grad)[np.arange(4), np.asarray(x["expert_action_t"])]
  assert np.all(chosen < 0)  # descending raises the expert action's logit
  np.testing.assert_allclose(np.asarray(grad).sum(-1), 0.0, atol=1e-7)


def test_distillation_loss_never_reads_invalid_steps():
  x = distillation_inputs()
  valid = jnp.asarray([True, True, True, False])
  distill = jax.jit(ls.distillation_loss)
  reference, ref_extras = distill(**x, valid_t=valid)
  poisoned = dict(x)
  for name in ("decoder_logits_t", "q_mean_t", "q_log_std_t", "p_mean_t", "p_log_std_t"):
    poisoned[name] = x[name].at[3].set(jnp.nan)
  poisoned["expert_action_t"] = x["expert_action_t"].at[3].set(2)
  loss, extras = distill(**poisoned, valid_t=valid)
  np.testing.assert_allclose(loss, reference, rtol=1e-6)
  np.testing.assert_allclose(extras.nll, ref_extras.nll, rtol=1e-6)
  assert float(extras.count) == 3.0 and float(extras.nll[3]) == 0.0

  def total(logits, q_mean):
    return ls.distillation_loss(
      **{**poisoned, "decoder_logits_t": logits, "q_mean_t": q_mean}, valid_t=valid
    )[0]

  grads = jax.jit(jax.grad(total, argnums=(0, 1)))(
    poisoned["decoder_logits_t"], poisoned["q_mean_t"]
  )
  for g in grads:
    assert np.all(np.isfinite(np.asarray(g)))
    np.testing.assert_array_equal(np.asarray(g)[3], 0.0)


def test_distillation_loss_out_of_range_action_raises_eagerly_and_is_invalid_under_jit():
  x = distillation_inputs()
  bad = dict(x, expert_action_t=x["expert_action_t"].at[2].set(7))
  with pytest.raises(ValueError, match="expert_action_t"):
    ls.distillation_loss(**bad)
  loss, extras = jax.jit(ls.distillation_loss)(**bad)
  reference, _ = ls.distillation_loss(**x, valid_t=jnp.asarray([True, True, False, True]))
  np.testing.assert_allclose(loss, reference, rtol=1e-6)
  assert float(extras.count) == 3.0


@pytest.mark.parametrize("option, value", [("kl_coef", -0.1), ("ar_coef", float("nan"))])
def test_distillation_loss_bad_coefficient_is_a_value_error_naming_it(option, value):
  with pytest.raises(ValueError, match=option):
    ls.distillation_loss(**distillation_inputs(), **{option: value})


def test_distillation_loss_takes_an_annealed_traced_kl_coefficient():
  x = distillation_inputs()
  at = jax.jit(lambda c: ls.distillation_loss(**x, kl_coef=c)[0])
  np.testing.assert_allclose(at(0.01), ls.distillation_loss(**x, kl_coef=0.01)[0], rtol=1e-6)
  assert float(at(0.01)) > float(at(0.001))


def test_shape_mismatches_name_the_argument():
  x = distillation_inputs()
  with pytest.raises(ValueError, match="p_mean_t"):
    ls.distillation_loss(**dict(x, p_mean_t=x["p_mean_t"][:, :1]))
  with pytest.raises(ValueError, match="done_t"):
    ls.ar_smoothness(x["q_mean_t"], jnp.zeros(3, bool))
  with pytest.raises(ValueError, match="p_log_std"):
    ls.gaussian_kl(x["q_mean_t"], x["q_log_std_t"], x["p_mean_t"], x["p_log_std_t"][:2])
