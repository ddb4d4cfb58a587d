"""Same-seed parity of GCIVL / HIQL / OTA losses with OGBench's formulas.

The reference below is written from OGBench's `impls/agents/{gcivl,hiql}.py` and
`impls/utils/networks.py` (seohongpark/ogbench @1d41409; the OGBench fork vendored in
ktolnos/TTGS `impls/ota-v/agents/{gcivl,hiql,ota}.py` @4408b01 for OTA), restated in plain
NumPy float64: it shares nothing with hrljax but the parameter pytree and the sampled batch.

  MLP        Dense -> GELU (tanh form, flax's default) -> LayerNorm (eps 1e-6) per hidden layer;
  ensemble   two such MLPs (stacked kernels), value = their scalar outputs;
  goal rep   φ([s; g]) = MLP(...)/‖·‖·√rep_dim;  HIQL/OTA values see [s; φ([s; g])], the target
             heads use the online φ;
  actor      N(Dense(MLP_activate_final(x)), 1) (const_std);
  value      Σ_i mean_B[w·(q_i − v_i)²], w = τ if r + γm·min_i v̄'_i − mean_i v̄_i >= 0 else 1 − τ,
             q_i = r + γm·v̄'_i;
  actors     −mean_B[min(exp(α·(mean_i V(to) − mean_i V(from))), 100)·log π].
"""

import math

import jax
import numpy as np
import pytest
from hrljax.agents import gcivl, hiql, ota

from hrljax import offline
from hrljax.data import goal_sampler
from tests.fast_compile import fast_jit

RTOL = 2e-5  # float32 network vs float64 reference
BATCH = 64


def np_tree(tree):
  return jax.tree.map(lambda x: np.asarray(x, np.float64), tree)


def gelu(x):
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def layer_norm(x, p):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-6) * p["scale"] + p["bias"]


def mlp(p, x, num_layers, layer_norm_on, activate_final):
  for k in range(num_layers):
    x = x @ p[f"Dense_{k}"]["kernel"] + p[f"Dense_{k}"]["bias"]
    if k + 1 < num_layers or activate_final:
      x = gelu(x)
      if layer_norm_on:
        x = layer_norm(x, p[f"LayerNorm_{k}"])
  return x


def ensemble_value(p, x, num_layers):
  """[B, 2] from OGBench's ensemblized value MLP (kernels stacked on a leading axis)."""
  heads = []
  for e in range(2):
    head = jax.tree.map(lambda a, e=e: a[e], p["params"]["VmapGoalMLP_0"])
    heads.append(mlp(head, x, num_layers, True, False)[:, 0])
  return np.stack(heads, 1)


def actor_mean(p, x, num_hidden):
  feat = mlp(p["params"]["GoalMLP_0"], x, num_hidden, False, True)
  return feat @ p["params"]["Dense_0"]["kernel"] + p["params"]["Dense_0"]["bias"]


def unit_gaussian_log_prob(x, mean):
  return -0.5 * np.sum((x - mean) ** 2, -1) - 0.5 * x.shape[-1] * np.log(2 * np.pi)


def goal_rep(p, s, g, num_layers):
  x = mlp(p["params"]["GoalMLP_0"], np.concatenate([s, g], -1), num_layers, True, False)
  return x / np.linalg.norm(x, axis=-1, keepdims=True) * np.sqrt(x.shape[-1])


def ivl(v, vt, nvt, r, m, gamma, tau):
  q = r[:, None] + gamma * m[:, None] * nvt
  adv = r + gamma * m * nvt.min(1) - vt.mean(1)
  w = np.where(adv >= 0, tau, 1 - tau)
  return sum(np.mean(w * (q[:, i] - v[:, i]) ** 2) for i in range(2))


def awr(v_from, v_to, alpha, log_prob):
  weight = np.minimum(np.exp(alpha * (v_to.mean(1) - v_from.mean(1))), 100.0)
  return -np.mean(weight * log_prob)


def perturbed(tree, key):
  """Target parameters != online ones, so a swapped network is caught."""
  leaves, treedef = jax.tree.flatten(tree)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(
    treedef, [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
  )


def make(module, agent_cls, path, sample, **overrides):
  config = module.get_config()
  config.dataset_path = path
  config.value_hidden_sizes = (16, 16)
  config.actor_hidden_sizes = (16, 16)
  config.subgoal_steps = 5
  for k, v in overrides.items():
    config[k] = v
  data, _ = offline.load_datasets(config)
  sampler = goal_sampler.SamplerConfig.from_config(config)
  sample = fast_jit(sample, static_argnums=(2, 3))
  batch = np_tree(sample(jax.random.key(3), data, BATCH, sampler))
  agent = agent_cls.create(jax.random.key(0), 2, 2, config)
  return config, agent, batch


def test_gcivl_value_and_actor_losses_match_ogbench(random_walk_path):
  config, agent, batch = make(
    gcivl, gcivl.GCIVLAgent, random_walk_path, goal_sampler.sample_gc_batch
  )
  agent = agent.replace(target_params=perturbed(agent.target_params, jax.random.key(9)))
  _, metrics = fast_jit(type(agent).loss)(agent, agent.params, batch)
  p, t = np_tree(agent.params), np_tree(agent.target_params)
  s, s2, g, ga = (
    batch[k] for k in ("observations", "next_observations", "value_goals", "actor_goals")
  )
  value = lambda params, x, y: ensemble_value(params, np.concatenate([x, y], -1), 3)
  expected_value = ivl(
    value(p["value"], s, g),
    value(t, s, g),
    value(t, s2, g),
    batch["rewards"],
    batch["masks"],
    0.99,
    0.9,
  )
  log_prob = unit_gaussian_log_prob(
    batch["actions"], actor_mean(p["actor"], np.concatenate([s, ga], -1), 2)
  )
  expected_actor = awr(value(p["value"], s, ga), value(p["value"], s2, ga), 10.0, log_prob)
  np.testing.assert_allclose(float(metrics["value_loss"]), expected_value, rtol=RTOL)
  np.testing.assert_allclose(float(metrics["actor_loss"]), expected_actor, rtol=RTOL)


def hiql_reference(p, heads, target_heads, batch, high_heads=None):
  """OGBench HIQL losses (value, low actor, high actor); `high_heads` = OTA's V^h for the
  high actor's advantage (None: HIQL, the value heads)."""
  s, s2 = batch["observations"], batch["next_observations"]
  rep = lambda x, y: goal_rep(p["goal_rep"], x, y, 3)
  value = lambda h, x, y: ensemble_value(h, np.concatenate([x, rep(x, y)], -1), 3)
  g = batch["value_goals"]
  value_loss = ivl(
    value(heads, s, g),
    value(target_heads, s, g),
    value(target_heads, s2, g),
    batch["rewards"],
    batch["masks"],
    0.99,
    0.7,
  )
  w = batch["low_actor_goals"]
  low_mean = actor_mean(p["low_actor"], np.concatenate([s, rep(s, w)], -1), 2)
  low = awr(
    value(heads, s, w), value(heads, s2, w), 3.0, unit_gaussian_log_prob(batch["actions"], low_mean)
  )
  hg, ht = batch["high_actor_goals"], batch["high_actor_targets"]
  high_heads = heads if high_heads is None else high_heads
  high_mean = actor_mean(p["high_actor"], np.concatenate([s, hg], -1), 2)
  high = awr(
    value(high_heads, s, hg),
    value(high_heads, ht, hg),
    3.0,
    unit_gaussian_log_prob(rep(s, ht), high_mean),
  )
  return value_loss, low, high, value


def test_hiql_value_low_and_high_actor_losses_match_ogbench(random_walk_path):
  _, agent, batch = make(hiql, hiql.HIQLAgent, random_walk_path, goal_sampler.sample_hgc_batch)
  agent = agent.replace(target_params=perturbed(agent.target_params, jax.random.key(9)))
  losses, _ = fast_jit(type(agent).loss_terms)(agent, agent.params, batch)
  p = np_tree(agent.params)
  value_loss, low, high, _ = hiql_reference(p, p["value"], np_tree(agent.target_params), batch)
  np.testing.assert_allclose(float(losses["value"]), value_loss, rtol=RTOL)
  np.testing.assert_allclose(float(losses["low_actor"]), low, rtol=RTOL)
  np.testing.assert_allclose(float(losses["high_actor"]), high, rtol=RTOL)


@pytest.mark.parametrize("abstraction_factor", [1, 5])
def test_ota_option_value_and_actor_losses_match_the_reference(
  random_walk_path, abstraction_factor
):
  sample = lambda key, data, size, sampler: ota.sample_ota_batch(
    key, data, size, sampler, abstraction_factor
  )
  _, agent, batch = make(
    ota, ota.OTAAgent, random_walk_path, sample, abstraction_factor=abstraction_factor
  )
  agent = agent.replace(
    target_params=perturbed(agent.target_params, jax.random.key(9)),
    high_target_params=perturbed(agent.high_target_params, jax.random.key(10)),
  )
  losses, _ = fast_jit(type(agent).loss_terms)(agent, agent.params, batch)
  p = np_tree(agent.params)
  value_loss, low, high, value = hiql_reference(
    p, p["value"], np_tree(agent.target_params), batch, high_heads=p["high_value"]
  )
  s, so, hg = (
    batch[k] for k in ("observations", "high_value_option_observations", "high_value_goals")
  )
  th = np_tree(agent.high_target_params)
  high_value = ivl(
    value(p["high_value"], s, hg),
    value(th, s, hg),
    value(th, so, hg),
    batch["high_value_rewards"],
    batch["high_value_masks"],
    0.99,
    0.7,
  )
  np.testing.assert_allclose(float(losses["value"]), value_loss, rtol=RTOL)
  np.testing.assert_allclose(float(losses["high_value"]), high_value, rtol=RTOL)
  np.testing.assert_allclose(float(losses["low_actor"]), low, rtol=RTOL)
  np.testing.assert_allclose(float(losses["high_actor"]), high, rtol=RTOL)
