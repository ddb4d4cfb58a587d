"""Test-wide JAX settings.

* Implicit rank promotion is an error (a silent broadcast would hide a shape bug).
* XLA:CPU's multi-threaded Eigen pool is off. With it on, a jitted program occasionally never
  finishes on this 2-core machine: every XLA thread parks in a futex wait and the caller sits in
  `BlockUntilReady` (seen here in a CI run and three times in ArCHer's vmapped init; the same
  wedge, and the same cure, are reported in PyAutoLabs/PyAutoFit#1528 and #1530). Tests measure
  no speed, and two xdist workers already use both cores. Subprocesses inherit the flag through
  `os.environ`; those that need fake devices take `eight_cpu_devices_env`, which keeps it.
"""

import importlib.util
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# JAX's persistent compilation cache, shared by the xdist workers and the subprocesses they start
# (which inherit the variable): a program compiled once in the run (the PPO config of the CLI
# tests, the tiny learners several files build) is read back instead of compiled again. It starts
# empty in a clean clone; entries are keyed by the program, its compile options and the library
# versions. Every program is kept, not only those that took a second to compile (JAX's default):
# most test programs compile in a fraction of a second, and the same ones are built again and again
# by fresh closures, other files and subprocesses (about a tenth of the compile time of a file).
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(ROOT, ".jax_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

SINGLE_THREAD_EIGEN = "--xla_cpu_multi_thread_eigen=false"
if SINGLE_THREAD_EIGEN not in os.environ.get("XLA_FLAGS", ""):
  # Must happen before the CPU backend starts (at the first computation, after this import).
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SINGLE_THREAD_EIGEN}".strip()

import jax  # noqa: E402
import pytest  # noqa: E402

from tests.fast_compile import bitwise_compile, learning_compile  # noqa: E402
from tests.gc_settings import relax_gc  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
relax_gc()
# The same settings when a plugin imported JAX before this file set the variables.
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
  "jax_persistent_cache_min_compile_time_secs",
  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
)

# The files that take longest (every file over 10 s in a clean-clone `make test`), longest first:
# they start first, so that with `--dist loadfile --no-loadscope-reorder` (which keeps this order;
# xdist's own puts the files with the most tests first) the workers take the long files in turn
# and finish on short ones, together.
SLOW_FILES_FIRST = (
  "tests/agents/test_eight_devices.py",
  "tests/agents/test_bresa.py",
  "tests/agents/test_archer.py",
  "tests/agents/test_recovery_rl.py",
  "tests/experiments/test_configs_online.py",
  "tests/agents/test_llm_archer.py",
  "tests/losses/test_hostile_inputs.py",
  "tests/agents/test_task_risk_penalty.py",
  "tests/agents/test_llm_grpo.py",
  "tests/agents/test_ppo_lagrangian.py",
  "tests/agents/test_group_relative_agent.py",
  "tests/losses/test_group_relative.py",
  "tests/experiments/test_device_benchmark.py",
  "tests/spine/test_multidevice.py",
  "tests/agents/test_option_critic.py",
  "tests/agents/test_dqn.py",
  "tests/experiments/test_configs_smollm2.py",
  "tests/spine/test_two_rate_rollout.py",
  "tests/experiments/test_notebook.py",
  "tests/networks/test_llama.py",
  "tests/agents/test_token_ppo.py",
  "tests/agents/test_sac.py",
  "tests/experiments/test_configs_safety_off_policy.py",
  "tests/experiments/test_safety_table.py",
  "tests/agents/test_gmah.py",
  "tests/agents/test_ppo.py",
  "tests/agents/test_offline_learner.py",
  "tests/test_wheel.py",
  "tests/agents/test_llm_grpo_scaffold.py",
  "tests/agents/test_shielded_ppo.py",
  "tests/experiments/test_configs_offline.py",
  "tests/agents/test_hi_agent.py",
  "tests/agents/test_token_offline.py",
  "tests/envs/test_token_game.py",
  "tests/losses/test_safety.py",
  "tests/experiments/test_multihost.py",
  "tests/networks/test_transformer.py",
  "tests/spine/test_sweep.py",
  "tests/agents/test_qmix.py",
  "tests/experiments/test_llm_benchmarks.py",
  "tests/networks/test_lora.py",
  "tests/test_docs.py",
  "tests/experiments/test_configs_safety_on_policy.py",
  "tests/losses/test_goal_conditioned.py",
  "tests/losses/test_options.py",
  "tests/experiments/test_configs_token_game.py",
  "tests/agents/test_smore.py",
  "tests/experiments/test_train_cli.py",
  "tests/agents/test_token_grpo.py",
  "tests/losses/test_dual_rl.py",
  "tests/agents/test_token_filtered_bc.py",
  "tests/agents/test_ogbench_parity.py",
  "tests/agents/test_ota.py",
  "tests/experiments/test_plot_hi_agent.py",
  "tests/envs/test_snapshot_reset.py",
  "tests/experiments/test_pointhazard_layouts.py",
  "tests/experiments/test_archer_throughput_benchmark.py",
  "tests/losses/test_safety_recovery.py",
  "tests/agents/test_llm_token_ppo.py",
  "tests/agents/test_llm_game_grpo.py",
  "tests/agents/test_hilp.py",
  "tests/agents/test_latent_skills.py",
  "tests/agents/test_hiql.py",
  "tests/experiments/test_plot_safety.py",
  "tests/test_fast_compile.py",
  "tests/losses/test_hierarchical_critics.py",
  "tests/spine/test_training.py",
)


def pytest_collection_modifyitems(config, items):
  rank = {path: i for i, path in enumerate(SLOW_FILES_FIRST)}

  def file_rank(item):
    path = os.path.relpath(str(item.path), ROOT).replace(os.sep, "/")
    return rank.get(path, len(rank))

  items.sort(key=file_rank)  # stable: tests keep their order within a file


@pytest.fixture(autouse=True)
def _optimised_programs_for_optimised_and_bitwise_tests(request):
  """An `optimised` test compiles with `LEARNING_COMPILE` (LLVM at -O1), a `bitwise` one with the
  bitwise options (LLVM at -O3, `tests/fast_compile.py`), even when the run's XLA_FLAGS are the
  fast-compile ones: `make test` runs every test in one pass with those flags. Measured on this
  machine, the other learning tests are faster with the fast options (option-critic, Bresa,
  Recovery RL, Hi-Agent, the transformer's overfit), while the runs of DQN, GiGPO, SAC, PPO and
  PPO-Lagrangian are long enough that optimised code pays (`optimised`)."""
  if request.node.get_closest_marker("optimised"):
    with learning_compile():
      yield
  elif request.node.get_closest_marker("bitwise"):
    with bitwise_compile():
      yield
  else:
    yield


@pytest.fixture(scope="session")
def eight_cpu_devices_env() -> dict:
  """The environment for a subprocess that sees 8 CPU devices, with this file's XLA flags."""
  flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
  return dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")


@pytest.fixture(scope="session")
def experiment_config():
  """`experiment_config(name)`: `get_config()` of `experiments/configs/<name>.py`, loaded by path
  (the tests do not rely on the repository root being importable)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

  def load(name: str):
    path = os.path.join(root, "experiments", "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"experiment_config_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()

  return load


def write_random_walk(path, episodes=4, steps=60, seed=0):
  """A raw OGBench-layout file: 2-D positions moved by the clipped actions (no ogbench needed)."""
  rng = np.random.default_rng(seed)
  obs, actions, terminals = [], [], []
  for _ in range(episodes):
    pos = rng.uniform(0, 5, size=2)
    for t in range(steps):
      action = np.clip(rng.normal(0, 0.7, size=2), -1, 1)
      obs.append(pos.copy())
      actions.append(action)
      terminals.append(t == steps - 1)
      pos = pos + 0.1 * action
  np.savez_compressed(
    path,
    observations=np.asarray(obs, np.float32),
    actions=np.asarray(actions, np.float32),
    terminals=np.asarray(terminals),
  )
  return str(path)


@pytest.fixture(scope="session")
def random_walk_path(tmp_path_factory):
  """4 random-walk episodes of 60 steps in OGBench's raw layout (a path to the .npz)."""
  return write_random_walk(tmp_path_factory.mktemp("walk") / "walk.npz")
