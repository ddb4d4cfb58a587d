"""Tests of hrljax.warm_start and `experiments.train --warm_start_cache`: a learner's costly start
(the token agents' behaviour-cloned policy) computed once per seed, cached, and read back by a
later run of another agent, which then trains exactly as if it had computed the start itself."""

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hrljax import warm_start as ws
from hrljax.load import load_config
from tests.same_numbers import assert_same
from tests.train_in_process import cli

TREE = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.int32)}


def test_entry_name_depends_on_the_fields_and_the_key():
  key = jax.random.key(0)
  name = ws.entry_name({"bc_steps": 10}, key)
  assert name == ws.entry_name({"bc_steps": 10}, jax.random.key(0))
  assert name != ws.entry_name({"bc_steps": 11}, key)
  assert name != ws.entry_name({"bc_steps": 10}, jax.random.key(1))


def test_member_starts_compute_once_then_read(tmp_path):
  traces, lines = [], []

  def compute(key):
    traces.append(1)  # once per trace: the computation's program, or the read's shapes
    return {"w": jax.random.normal(key, (2, 3)), "b": jax.random.randint(key, (3,), 0, 9)}

  warm = ws.WarmStart(compute=compute, fields={"f": 1})
  keys = jnp.stack([jax.random.key(0), jax.random.key(1)])
  first = ws.member_starts(warm, keys, str(tmp_path), progress=lines.append)
  second = ws.member_starts(warm, keys, str(tmp_path), progress=lines.append)
  assert len(traces) == 2  # one computation, then the shapes of the read (no second program)
  assert "computing the warm start of 2 member(s)" in lines[0]
  assert "and cached" in lines[1] and "read from" in lines[2] and len(lines) == 3
  for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(second), strict=True):
    np.testing.assert_array_equal(a, b)
    assert a.dtype == b.dtype
  np.testing.assert_array_equal(second["w"][1], jax.random.normal(jax.random.key(1), (2, 3)))
  assert not [f for f in os.listdir(tmp_path) if f.endswith(".partial")]
  # A member missing from the cache: all are computed again (one program for all members).
  three = jnp.stack([jax.random.key(0), jax.random.key(1), jax.random.key(2)])
  assert ws.member_starts(warm, three, str(tmp_path), progress=lines.append)["w"].shape == (3, 2, 3)
  assert len(traces) == 3 and "computing the warm start of 3 member(s)" in lines[3]
  assert "and cached" in lines[4]


def test_an_entry_of_another_shape_is_named_not_used(tmp_path):
  path = str(tmp_path / "entry.npz")
  ws.save(path, TREE)
  like = {
    "w": jax.ShapeDtypeStruct((2, 4), jnp.float32),
    "b": jax.ShapeDtypeStruct((3,), jnp.int32),
  }
  with pytest.raises(ValueError, match="entry.npz does not fit"):
    ws.load(path, like)


# Token PPO on a small game, two seeds, two updates; its BC start is 20 steps.
TINY = [
  "--config.seeds=0,1",
  "--config.env_kwargs.num_items=4",
  "--config.env_kwargs.num_attributes=2",
  "--config.env_kwargs.max_turns=3",
  "--config.d_model=16",
  "--config.num_layers=1",
  "--config.num_heads=2",
  "--config.value_d_model=16",
  "--config.bc_steps=20",
  "--config.bc_batch_size=8",
  "--config.bc_dataset_episodes=8",
  "--config.eval_episodes=8",
  "--config.num_envs=8",
  "--config.num_steps=3",
  "--config.num_minibatches=2",
  "--config.update_epochs=1",
  "--config.total_timesteps=48",
  "--config.log_every=1",
]
PPO = "experiments/configs/token_ppo_token_game.py"


def records(workdir) -> list:
  """The run's train and evaluation records without their timings (numbers as float32)."""
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    lines = [json.loads(line) for line in f]
  timing = ("wall_time", "env_steps_per_second")
  return [
    {k: np.float32(v) for k, v in r.items() if k not in timing and not isinstance(v, str)}
    for r in lines
    if r.get("update", 0) > 0
  ]


def test_a_cached_warm_start_is_the_agent_s_start_and_trains_the_same(tmp_path):
  """A run with an empty cache computes the start as its own program and writes one entry per
  seed, each `warm_start_policy_params` of the seed's key (whose `init(key, start)` is
  `init(key)`: tests/agents/test_archer.py); a second run reads them and trains to the same
  records, to float32 rounding."""
  from hrljax.agents import token_common as tc

  cache = str(tmp_path / "cache")
  filled = cli(PPO, tmp_path / "filled", *TINY, f"--warm_start_cache={cache}")
  assert filled.code == 0, filled.err
  assert "computing the warm start of 2 member(s)" in filled.out + filled.err
  assert re.search(r"warm start computed in \d+ s and cached", filled.out + filled.err)
  config = load_config(str(tmp_path / "filled"))
  warm = tc.warm_start(config)
  # The training loop's init keys of seeds 0 and 1; the start of both computed in one program,
  # as the loop does (a one-seed program can round differently, and Adam turns the rounding
  # noise of the attention's key bias, whose true gradient is 0, into visible steps).
  keys = jnp.stack([jax.random.split(jax.random.key(seed))[0] for seed in (0, 1)])
  want = jax.jit(jax.vmap(lambda k: tc.warm_start_policy_params(k, config)))(keys)
  for member, key in enumerate(keys):
    like = jax.eval_shape(warm.compute, key)
    cached = ws.load(os.path.join(cache, ws.entry_name(warm.fields, key)), like)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(cached), strict=True):
      assert_same(a[member], b)
  read = cli(PPO, tmp_path / "read", *TINY, f"--warm_start_cache={cache}")
  assert read.code == 0, read.err
  assert "warm start read from" in read.out + read.err
  reference = records(tmp_path / "filled")
  assert len(reference) == 6  # two seeds: two updates and the final evaluation
  for want, got in zip(reference, records(tmp_path / "read"), strict=True):
    assert want.keys() == got.keys()
    for name in want:
      assert_same(want[name], got[name], err_msg=name)


def test_the_token_agents_share_one_start():
  """ArCHer's and token PPO's presets (same game, policy and BC settings) name the same entry,
  so either reads the start the other cached; a BC setting changes the name."""
  from experiments.configs import archer_token_game, token_ppo_token_game
  from hrljax.agents import token_common as tc

  key = jax.random.key(3)
  ppo, archer = token_ppo_token_game.get_config(), archer_token_game.get_config()
  name = ws.entry_name(tc.warm_start(ppo).fields, key)
  assert name == ws.entry_name(tc.warm_start(archer).fields, key)
  ppo.bc_random_question_prob = 0.25
  assert name != ws.entry_name(tc.warm_start(ppo).fields, key)
