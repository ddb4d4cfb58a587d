"""End-to-end tests of `python -m experiments.token_game_curves` in subprocesses: a tiny ArCHer
curve over two vmapped seeds (JSONL rows, progress lines, PNG), plotting alone, and the errors."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A tiny game and networks: 3 iterations of 4 games x 3 utterances, 2 BC steps.
TINY = ["--config.env_kwargs.num_items=4", "--config.env_kwargs.num_attributes=2",
        "--config.env_kwargs.max_turns=3", "--config.d_model=16", "--config.num_layers=1",
        "--config.num_heads=2", "--config.critic_d_model=16", "--config.critic_num_layers=1",
        "--config.bc_steps=2", "--config.bc_batch_size=8", "--config.bc_dataset_episodes=4",
        "--config.num_envs=4", "--config.num_steps=3", "--config.batch_size=8",
        "--config.critic_updates=2", "--config.actor_updates=1", "--config.warmup_iters=1",
        "--config.buffer_size=64", "--config.total_timesteps=36", "--config.eval_episodes=4"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(*args):
  return subprocess.run([sys.executable, "-m", "experiments.token_game_curves", *args],
                        cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_archer_curve_writes_one_row_per_evaluation_and_a_png(tmp_path):
  out = tmp_path / "archer.jsonl"
  result = run("--config=archer_token_game", "--num_seeds=2", "--eval_every=2", f"--out={out}",
               *TINY)
  assert result.returncode == 0, result.stderr[-3000:]
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  # Evaluations at 0, every 2 iterations, and at the last (3rd) iteration.
  assert [r["iter"] for r in rows] == [0, 2, 3]
  assert [r["utterances"] for r in rows] == [0, 24, 36]
  for row in rows:
    assert len(row["eval_return"]) == 2
    assert all(0.0 <= r <= 1.0 for r in row["eval_return"])
    assert abs(row["eval_return_mean"] - sum(row["eval_return"]) / 2) < 1e-3
  assert "q_gap" not in rows[0] and len(rows[1]["q_gap"]) == 2
  assert "iter 3 | utterances/seed 36 | greedy success" in result.stdout
  assert (tmp_path / "archer.png").read_bytes()[:8] == PNG_MAGIC
  environment = json.loads((tmp_path / "archer.environment.json").read_text())
  import jax
  assert environment["packages"]["jax"] == jax.__version__ and environment["cpu"]


def test_fixed_eval_games_show_an_unchanged_policy_as_a_flat_curve(tmp_path):
  """With the actor kept still (warm-up longer than the run) the policy never changes, so on the
  same games (the default) every evaluation equals iteration 0's."""
  out = tmp_path / "still.jsonl"
  result = run("--config=archer_token_game", "--num_seeds=2", "--eval_every=1", f"--out={out}",
               *TINY, "--config.warmup_iters=1000", "--config.eval_episodes=16")
  assert result.returncode == 0, result.stderr[-3000:]
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["iter"] for r in rows] == [0, 1, 2, 3]
  assert all(r["actor_trained"] == [0.0, 0.0] for r in rows[1:])
  assert all(r["eval_return"] == rows[0]["eval_return"] for r in rows[1:])


def test_eval_keys_are_fixed_by_default_and_fresh_on_request():
  import jax
  import numpy as np
  from experiments import token_game_curves

  data = lambda keys: np.asarray(jax.random.key_data(keys))
  fixed = [data(token_game_curves.eval_keys(i, 3, True)) for i in (0, 5)]
  fresh = [data(token_game_curves.eval_keys(i, 3, False)) for i in (0, 5)]
  np.testing.assert_array_equal(fixed[0], fixed[1])
  np.testing.assert_array_equal(fixed[0], fresh[0])  # iteration 0's games either way
  assert not np.array_equal(fresh[0], fresh[1])
  assert fixed[0].shape[0] == 3


def test_compare_only_draws_the_png(tmp_path):
  curve = tmp_path / "curve.jsonl"
  curve.write_text("\n".join(json.dumps({"iter": i, "utterances": 10 * i,
                                         "eval_return": [0.5, 0.7],
                                         "eval_return_mean": 0.6}) for i in range(3)))
  png = tmp_path / "both.png"
  result = run(f"--compare=A={curve}", f"--compare=B={curve}", f"--png={png}")
  assert result.returncode == 0, result.stderr
  assert png.read_bytes()[:8] == PNG_MAGIC


def test_bad_arguments_fail_with_one_line(tmp_path):
  missing = run(f"--compare=A={tmp_path / 'absent.jsonl'}", f"--png={tmp_path / 'x.png'}")
  assert missing.returncode == 2 and "--compare: no file at" in missing.stderr
  malformed = run("--compare=nolabel", f"--png={tmp_path / 'x.png'}")
  assert malformed.returncode == 2 and "expected LABEL=FILE" in malformed.stderr
  nothing = run()
  assert nothing.returncode == 2 and "--config: expected" in nothing.stderr
  no_out = run("--config=archer_token_game")
  assert no_out.returncode == 2 and "--out: expected" in no_out.stderr
  seeds = run("--config=archer_token_game", "--num_seeds=0", f"--out={tmp_path / 'c.jsonl'}")
  assert seeds.returncode == 2 and "--num_seeds: expected an integer >= 1, got 0" in seeds.stderr
  wrong_game = run("--config=ppo_cartpole", f"--out={tmp_path / 'c.jsonl'}")
  assert wrong_game.returncode == 2 and "expected a token-game config" in wrong_game.stderr


def test_warm_start_cache_returns_the_computed_start(tmp_path):
  """The cached BC start equals the computed one, and the cache file depends on the BC fields."""
  import jax
  import ml_collections
  import numpy as np
  from experiments import token_game_curves
  from hrljax.agents import archer

  config = archer.get_config()
  config.update(dict(env_kwargs=ml_collections.ConfigDict(dict(num_items=4, num_attributes=2,
                                                               max_turns=3)),
                     d_model=16, num_layers=1, num_heads=2, bc_steps=2, bc_batch_size=8,
                     bc_dataset_episodes=4))
  keys = jax.random.split(jax.random.key(0), 2)
  computed = token_game_curves.warm_start(archer, config, keys, str(tmp_path))
  path = token_game_curves.warm_start_cache_path(str(tmp_path), config, 2)
  assert os.path.exists(path)
  cached = token_game_curves.warm_start(archer, config, keys, str(tmp_path))
  for a, b in zip(jax.tree.leaves(computed), jax.tree.leaves(cached)):
    np.testing.assert_array_equal(a, b)
  config.bc_steps = 3
  assert token_game_curves.warm_start_cache_path(str(tmp_path), config, 2) != path
  assert token_game_curves.warm_start_cache_path(str(tmp_path), config, 3) != \
      token_game_curves.warm_start_cache_path(str(tmp_path), config, 2)
