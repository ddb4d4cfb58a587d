"""A jittable goal-relabelling sampler for offline goal-conditioned RL (OGBench's GC/HGCDataset).

Park, Frans, Eysenbach, Levine. "OGBench: Benchmarking Offline Goal-Conditioned RL",
arXiv:2410.20092, `impls/utils/datasets.py` (`GCDataset.sample_goals`, `HGCDataset.sample`) at
seohongpark/ogbench @1d41409; HIQL (Park, Ghosh, Eysenbach, Levine, arXiv:2307.11949) for the
subgoals; OTA (Ahn, Choi, Han, Moon, arXiv:2505.12737) for the option end.

Every sampler is a pure function of a PRNG key and dataset arrays on the device, so it runs inside
the jitted train step (no host round trip), is reproducible per key and vmaps over seeds. The
index arithmetic (`subgoal_indices`, the uniform-future formula) is separate from the randomness
and testable on its own.

Dataset layout: OGBench's "regular" transitions (`hrljax.data.pointmaze.load`): row i holds
(s_i, a_i, s'_i), and `terminals[i] = 1` on the last transition of each trajectory. For every
row, `traj_end[i]` is the index of that last transition; goal indices never leave [i, traj_end[i]]
except for the uniformly random goals, which are drawn over the whole dataset.

Goal draw for each sampled row i (OGBench's `sample_goals`):
  * with probability p_cur: i itself (the goal is reached: reward 0, mask 0 with gc_negative);
  * else with probability p_traj / (1 − p_cur): a future row of the same trajectory,
    min(i + Geom(1 − γ), traj_end) if `geom_sample`, else round(lerp) uniform in
    [min(i + 1, traj_end), traj_end];
  * else a uniformly random row.
Success is index equality (`goal == i`), as in OGBench, not state equality.

Deviations from OGBench, each deliberate:
  * randomness from explicit keys instead of the global `np.random`;
  * the uniform-future draw is computed in float32 (exact for datasets below 2**24 rows);
  * the returned `GoalDraw` also says which branch each goal came from (OTA's option end,
    `hrljax.losses.goal_conditioned.ota_option_indices`, needs it).
"""

import dataclasses
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

Array = chex.Array


class GoalDataset(NamedTuple):
  """Dataset arrays on the device: N transitions of D-dim observations and A-dim actions."""

  observations: Array  # [N, D] float32
  next_observations: Array  # [N, D] float32
  actions: Array  # [N, A] float32
  traj_end: Array  # [N] int32, index of the last transition of row i's trajectory


def trajectory_ends(terminals: Array) -> Array:
  """`traj_end[i]`: the first index >= i whose terminal flag is set (jittable, [N] -> [N] int32).

  The last row must be terminal, as OGBench asserts; `from_arrays` checks it.
  """
  chex.assert_rank(terminals, 1)
  n = terminals.shape[0]
  marks = jnp.where(terminals > 0, jnp.arange(n, dtype=jnp.int32), jnp.int32(n))
  return jax.lax.cummin(marks, axis=0, reverse=True)


def from_arrays(dataset: dict) -> GoalDataset:
  """A `GoalDataset` from `observations, next_observations, actions, terminals` (NumPy or jax)."""
  for key in ("observations", "next_observations", "actions", "terminals"):
    if key not in dataset:
      raise ValueError(f"dataset: expected the key {key!r}, got keys {sorted(dataset)}")
  terminals = np.asarray(dataset["terminals"])
  if terminals.ndim != 1 or terminals.shape[0] == 0 or not terminals[-1]:
    raise ValueError(
      "dataset['terminals']: expected a non-empty [N] array whose last entry is 1, "
      f"got shape {terminals.shape}"
    )
  n = terminals.shape[0]
  for key in ("observations", "next_observations", "actions"):
    if np.shape(dataset[key])[0] != n:
      raise ValueError(f"dataset[{key!r}]: expected {n} rows, got {np.shape(dataset[key])[0]}")
  return GoalDataset(
    observations=jnp.asarray(dataset["observations"], jnp.float32),
    next_observations=jnp.asarray(dataset["next_observations"], jnp.float32),
    actions=jnp.asarray(dataset["actions"], jnp.float32),
    traj_end=trajectory_ends(jnp.asarray(terminals)),
  )


@dataclasses.dataclass(frozen=True)
class GoalDistribution:
  """One goal mixture: probabilities of the current / future-in-trajectory / random goal."""

  p_cur: float
  p_traj: float
  p_rand: float
  geom_sample: bool

  def __post_init__(self):
    for name in ("p_cur", "p_traj", "p_rand"):
      value = getattr(self, name)
      if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name}: expected a probability in [0, 1], got {value!r}")
    total = self.p_cur + self.p_traj + self.p_rand
    if not np.isclose(total, 1.0):
      raise ValueError(f"p_cur + p_traj + p_rand: expected 1, got {total!r}")
    if not isinstance(self.geom_sample, (bool, np.bool_)):
      raise ValueError(f"geom_sample: expected a bool, got {self.geom_sample!r}")


class GoalDraw(NamedTuple):
  """Sampled goal indices [B] with the reward and mask of the goal-reaching task."""

  goal_idx: Array  # int32
  reward: Array  # float32, 1[goal == i] − 1 (gc_negative) or 1[goal == i]
  mask: Array  # float32, 1 − 1[goal == i]
  is_traj: Array  # bool, the future-in-trajectory branch was drawn (before the cur override)
  is_cur: Array  # bool, the current-state branch was drawn
  drawn_idx: Array  # int32, the trajectory or random goal before the current-state override


def _check_discount(gamma) -> None:
  if not (isinstance(gamma, (int, float)) and 0.0 <= gamma < 1.0):
    raise ValueError(f"gamma: expected a float in [0, 1), got {gamma!r}")


def _check_indices(idx: Array, traj_end: Array) -> None:
  chex.assert_rank([idx, traj_end], 1)
  chex.assert_type([idx, traj_end], int)
  chex.assert_equal_shape([idx, traj_end])


def uniform_indices(key: Array, batch_size: int, dataset_size: int) -> Array:
  """[batch_size] int32 rows drawn uniformly from [0, dataset_size) (OGBench `get_random_idxs`)."""
  return jax.random.randint(key, (batch_size,), 0, dataset_size, dtype=jnp.int32)


def future_indices(
  key: Array, idx: Array, traj_end: Array, *, geom_sample: bool, gamma: float
) -> Array:
  """A future row of each row's trajectory, in [min(i + 1, traj_end), traj_end] (batch, [B]).

  `geom_sample`: min(i + Geom(1 − γ), traj_end), offsets in {1, 2, ...} with mean 1/(1 − γ).
  Otherwise OGBench's uniform draw round(min(i + 1, end)·u + end·(1 − u)), u ~ U[0, 1).
  """
  _check_indices(idx, traj_end)
  _check_discount(gamma)
  if geom_sample:
    offsets = jax.random.geometric(key, 1.0 - gamma, idx.shape, dtype=jnp.int32)
    return jnp.minimum(idx + offsets, traj_end)
  u = jax.random.uniform(key, idx.shape)
  near = jnp.minimum(idx + 1, traj_end).astype(jnp.float32)
  far = traj_end.astype(jnp.float32)
  return jnp.round(near * u + far * (1.0 - u)).astype(jnp.int32)


def sample_goal_indices(
  key: Array,
  idx: Array,
  traj_end: Array,
  dataset_size: int,
  dist: GoalDistribution,
  gamma: float,
  gc_negative: bool = True,
) -> GoalDraw:
  """OGBench's three-way goal draw for rows `idx` [B] (batch-level; see the module docstring).

  Args:
    key: PRNG key.
    idx: [B] int rows.
    traj_end: [B] int, `GoalDataset.traj_end[idx]`.
    dataset_size: N, the range of random goals.
    dist: the mixture (value goals: 0.2/0.5/0.3 geometric; actor goals: 0/1/0 uniform).
    gamma: discount of the geometric offsets.
    gc_negative: rewards 0/−1 (OGBench default) instead of 1/0.
  """
  _check_indices(idx, traj_end)
  _check_discount(gamma)
  traj_key, rand_key, pick_key, cur_key = jax.random.split(key, 4)
  traj_goal = future_indices(traj_key, idx, traj_end, geom_sample=dist.geom_sample, gamma=gamma)
  rand_goal = uniform_indices(rand_key, idx.shape[0], dataset_size)
  if dist.p_cur >= 1.0:
    is_traj = jnp.zeros(idx.shape, bool)
    is_cur = jnp.ones(idx.shape, bool)
  else:
    is_traj = jax.random.uniform(pick_key, idx.shape) < dist.p_traj / (1.0 - dist.p_cur)
    is_cur = jax.random.uniform(cur_key, idx.shape) < dist.p_cur
  drawn = jnp.where(is_traj, traj_goal, rand_goal).astype(jnp.int32)
  goal = jnp.where(is_cur, idx, drawn).astype(jnp.int32)
  success = (goal == idx).astype(jnp.float32)
  reward = success - 1.0 if gc_negative else success
  return GoalDraw(
    goal_idx=goal,
    reward=reward,
    mask=1.0 - success,
    is_traj=is_traj,
    is_cur=is_cur,
    drawn_idx=drawn,
  )


def subgoal_indices(idx: Array, traj_end: Array, subgoal_steps: int) -> Array:
  """HIQL's low-level subgoal row min(i + k, traj_end) (elementwise)."""
  _check_indices(idx, traj_end)
  if isinstance(subgoal_steps, bool) or not isinstance(subgoal_steps, int) or subgoal_steps < 1:
    raise ValueError(f"subgoal_steps: expected an integer >= 1, got {subgoal_steps!r}")
  return jnp.minimum(idx + subgoal_steps, traj_end)


def high_actor_indices(
  key: Array,
  idx: Array,
  traj_end: Array,
  dataset_size: int,
  *,
  subgoal_steps: int,
  p_rand: float,
  geom_sample: bool,
  gamma: float,
) -> tuple[Array, Array]:
  """HIQL's high-level actor goal and target rows ([B] each; OGBench `HGCDataset.sample`).

  With probability `p_rand` the goal is a uniformly random row and the target
  min(i + k, traj_end); otherwise the goal is a future row of the trajectory and the target
  min(i + k, goal). As in OGBench, `actor_p_curgoal` plays no part here.
  """
  _check_indices(idx, traj_end)
  if not (isinstance(p_rand, (int, float)) and 0.0 <= p_rand <= 1.0):
    raise ValueError(f"p_rand: expected a probability in [0, 1], got {p_rand!r}")
  traj_key, rand_key, pick_key = jax.random.split(key, 3)
  traj_goal = future_indices(traj_key, idx, traj_end, geom_sample=geom_sample, gamma=gamma)
  rand_goal = uniform_indices(rand_key, idx.shape[0], dataset_size)
  pick_random = jax.random.uniform(pick_key, idx.shape) < p_rand
  goal = jnp.where(pick_random, rand_goal, traj_goal)
  target = jnp.where(
    pick_random,
    subgoal_indices(idx, traj_end, subgoal_steps),
    jnp.minimum(idx + subgoal_steps, traj_goal),
  )
  return goal, target


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
  """The sampler's share of an agent config (OGBench key names, see `from_config`)."""

  value: GoalDistribution
  actor: GoalDistribution
  gamma: float
  gc_negative: bool = True
  subgoal_steps: int = 25

  @classmethod
  def from_config(cls, config) -> "SamplerConfig":
    get = lambda name, default: config[name] if name in config else default
    return cls(
      value=GoalDistribution(
        config.value_p_curgoal,
        config.value_p_trajgoal,
        config.value_p_randomgoal,
        bool(config.value_geom_sample),
      ),
      actor=GoalDistribution(
        config.actor_p_curgoal,
        config.actor_p_trajgoal,
        config.actor_p_randomgoal,
        bool(config.actor_geom_sample),
      ),
      gamma=config.gamma,
      gc_negative=bool(get("gc_negative", True)),
      subgoal_steps=int(get("subgoal_steps", 25)),
    )


def rows(data: GoalDataset, idx: Array, field: str = "observations") -> Array:
  """`data.<field>[idx]`: the rows of dataset indices `idx` (any shape)."""
  return jnp.take(getattr(data, field), idx, axis=0)


def transitions(data: GoalDataset, idx: Array) -> dict:
  """The batch keys every sampler returns: `observations, next_observations, actions`."""
  return {
    "observations": rows(data, idx),
    "next_observations": rows(data, idx, "next_observations"),
    "actions": rows(data, idx, "actions"),
  }


def sample_gc_batch(key: Array, data: GoalDataset, batch_size: int, config: SamplerConfig) -> dict:
  """One GCIVL batch (OGBench `GCDataset.sample`): transitions, value/actor goals, rewards,
  masks."""
  idx_key, value_key, actor_key = jax.random.split(key, 3)
  n = data.traj_end.shape[0]
  idx = uniform_indices(idx_key, batch_size, n)
  end = data.traj_end[idx]
  value = sample_goal_indices(
    value_key, idx, end, n, config.value, config.gamma, config.gc_negative
  )
  actor = sample_goal_indices(
    actor_key, idx, end, n, config.actor, config.gamma, config.gc_negative
  )
  return {
    **transitions(data, idx),
    "value_goals": rows(data, value.goal_idx),
    "actor_goals": rows(data, actor.goal_idx),
    "rewards": value.reward,
    "masks": value.mask,
  }


def sample_hgc_rows(
  idx_key: Array,
  value_key: Array,
  high_key: Array,
  data: GoalDataset,
  batch_size: int,
  config: SamplerConfig,
) -> tuple[dict, Array, Array]:
  """`sample_hgc_batch` from its three keys, with the sampled rows `idx` [B] and their
  trajectory ends [B] (for samplers that add goals of their own to the HIQL batch)."""
  n = data.traj_end.shape[0]
  idx = uniform_indices(idx_key, batch_size, n)
  end = data.traj_end[idx]
  value = sample_goal_indices(
    value_key, idx, end, n, config.value, config.gamma, config.gc_negative
  )
  high_goal, high_target = high_actor_indices(
    high_key,
    idx,
    end,
    n,
    subgoal_steps=config.subgoal_steps,
    p_rand=config.actor.p_rand,
    geom_sample=config.actor.geom_sample,
    gamma=config.gamma,
  )
  batch = {
    **transitions(data, idx),
    "value_goals": rows(data, value.goal_idx),
    "rewards": value.reward,
    "masks": value.mask,
    "low_actor_goals": rows(data, subgoal_indices(idx, end, config.subgoal_steps)),
    "high_actor_goals": rows(data, high_goal),
    "high_actor_targets": rows(data, high_target),
  }
  return batch, idx, end


def sample_hgc_batch(key: Array, data: GoalDataset, batch_size: int, config: SamplerConfig) -> dict:
  """One HIQL batch (OGBench `HGCDataset.sample`): adds low-actor subgoals and high-actor
  goals/targets k = `subgoal_steps` rows ahead."""
  return sample_hgc_rows(*jax.random.split(key, 3), data, batch_size, config)[0]
