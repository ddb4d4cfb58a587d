"""Faults a long run meets: killed mid-checkpoint, unwritable or full workdir, NaN in parameters.

The runs are `hrljax.training.train` with a tiny learner (a parameter vector that a random walk
updates), in a subprocess where the fault needs one (SIGKILL, a file-size limit). Waits are
bounded by poll counts and `Popen.wait(timeout=...)`; nothing reads the clock.
"""

import errno
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import struct

from hrljax import checkpoint as ckpt
from hrljax import training
from hrljax.logging import read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_config(**run_fields) -> ml_collections.ConfigDict:
  """The walker's experiment config: the spine's run-level fields and an agent name."""
  config = training.run_config(**run_fields)
  config.agent = "walker"
  return config


PARAMS = 4096  # 16 KiB of float32: a checkpoint bigger than the file-size limit used below


class Walker(struct.PyTreeNode):
  params: jax.Array
  n: jax.Array
  key: jax.Array


def walker_learner(num_updates: int, poison_at: int = 0, poison=math.nan) -> training.Learner:
  """Params take a random step per update; from update `poison_at` on one param is `poison`.

  The metric stays finite, so only the parameter check can catch the poison.
  """

  def init(key):
    return Walker(params=jnp.zeros(PARAMS), n=jnp.zeros((), jnp.int32), key=key)

  def step(state):
    key, sub = jax.random.split(state.key)
    n = state.n + 1
    params = state.params + jax.random.normal(sub, (PARAMS,))
    params = params.at[7].set(jnp.where((poison_at > 0) & (n >= poison_at), poison, params[7]))
    return (
      Walker(params=params, n=n, key=key),
      {"loss": jnp.mean(jnp.abs(state.params[:4])), "episode_return_sum": 1.0, "episodes": 1.0},
    )

  def evaluate(state, key):
    del key
    return {"eval_return": jnp.mean(state.params)}

  return training.Learner(init, step, evaluate, num_updates, env_steps_per_update=1)


# The subprocess: the same learner (this file is imported from the tests directory), with a fault.
SCRIPT = textwrap.dedent("""
    import os, resource, signal, sys, threading
    sys.path.insert(0, {tests_dir!r})
    import test_faults as t
    from hrljax import training

    mode, workdir, arg = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "pause_in_finalize":
      # Stop checkpoint `arg` after its data is in the temporary directory and before orbax
      # commits it (the rename), announce it with a file, and hang until killed.
      import orbax.checkpoint as ocp
      cls = ocp.path.atomicity.AtomicRenameTemporaryPath
      original = cls.finalize
      async def finalize(self):
        if self.get_final().name == arg:
          with open(os.path.join(workdir, "paused"), "w") as f:
            f.write(str(self.get()))
          threading.Event().wait()
        return await original(self)
      cls.finalize = finalize
    elif mode == "file_size_limit":
      # Writes beyond `arg` bytes fail in the kernel (EFBIG), as they would on a full disk.
      signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
      resource.setrlimit(resource.RLIMIT_FSIZE, (int(arg), int(arg)))
    training.train(t.walker_learner(24), t.walker_run_config(), workdir)
""")


def walker_run_config() -> ml_collections.ConfigDict:
  """The run of the fault tests: 24 updates, logged and checkpointed every 4, 3 kept."""
  return run_config(log_every=4, checkpoint_every=4, max_checkpoints=3, seeds=(5,))


def start(tmp_path, mode, workdir, arg="0"):
  script = tmp_path / "run_walker.py"
  script.write_text(SCRIPT.format(tests_dir=os.path.dirname(os.path.abspath(__file__))))
  return subprocess.Popen(
    [sys.executable, str(script), mode, str(workdir), arg],
    cwd=ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def finish(process, timeout=240):
  out, err = process.communicate(timeout=timeout)
  return process.returncode, out, err


def train_records(workdir):
  return [r["update"] for r in read_jsonl(str(workdir)) if r["phase"] == "train"]


def test_killed_while_writing_a_checkpoint_resumes_from_the_last_complete_one(tmp_path, capsys):
  """The uninterrupted reference and the resumed run run in this process (the same program as the
  killed subprocess's: the same learner, config and XLA flags); the kill needs a process."""
  killed_dir = tmp_path / "killed"
  killed = start(tmp_path, "pause_in_finalize", killed_dir, "12")
  reference = training.train(walker_learner(24), walker_run_config(), str(tmp_path / "reference"))
  signal_file = killed_dir / "paused"
  for _ in range(6000):  # poll every 50 ms, for at most about 5 minutes
    if signal_file.exists() or killed.poll() is not None:
      break
    time.sleep(0.05)
  assert signal_file.exists(), killed.communicate()[1][-3000:]
  tmp_dir = signal_file.read_text()
  # Mid-write: checkpoint 12 has data in its temporary directory and no committed directory.
  assert ocp.path.atomicity_types.TMP_DIR_SUFFIX in tmp_dir and os.listdir(tmp_dir)
  checkpoints = killed_dir / "checkpoints"
  assert not (checkpoints / "12").exists()
  killed.send_signal(signal.SIGKILL)
  killed.wait(timeout=60)
  assert killed.returncode == -signal.SIGKILL
  assert ckpt.Checkpointer(str(checkpoints)).latest_step() == 8

  capsys.readouterr()
  resumed = training.train(walker_learner(24), walker_run_config(), str(killed_dir))
  assert f"resumed from the checkpoint at update 8 in {checkpoints}" in capsys.readouterr().out
  assert not [n for n in os.listdir(checkpoints) if "tmp" in n]  # the half save was removed
  assert ckpt.Checkpointer(str(checkpoints)).all_steps() == [16, 20, 24]
  assert train_records(killed_dir) == [4, 8, 12, 16, 20, 24]
  assert float(resumed.params.sum()) == float(reference.params.sum())


def test_a_step_directory_without_its_state_is_not_restored(tmp_path):
  """A committed-looking step directory that lacks the state item (e.g. a half copy) is skipped."""
  checkpointer = ckpt.Checkpointer(str(tmp_path / "ckpt"), max_to_keep=3)
  checkpointer.save(4, {"w": jnp.ones(3)})
  checkpointer.wait()
  os.makedirs(tmp_path / "ckpt" / "8")
  assert checkpointer.latest_step() == 4 and checkpointer.all_steps() == [4]
  np.testing.assert_array_equal(checkpointer.restore({"w": jnp.zeros(3)})["w"], np.ones(3))


def test_full_disk_fails_at_the_first_save_naming_the_checkpoint_directory(tmp_path):
  workdir = tmp_path / "full"
  code, _, err = finish(start(tmp_path, "file_size_limit", workdir, "4000"))
  assert code != 0
  # The error line, wherever it lands: orbax's writer coroutines may print shutdown noise after it.
  prefix = (
    f"hrljax.checkpoint.CheckpointError: saving checkpoint 4 in {workdir / 'checkpoints'} failed"
  )
  errors = [line for line in err.splitlines() if line.startswith(prefix)]
  assert errors, err[-3000:]
  assert "File too large" in errors[0]
  assert train_records(workdir) == [4]  # stopped at the first save, not chunks later


# orbax's background save thread reports the error, then finds its event loop closed on exit.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_enospc_from_the_writer_is_a_checkpoint_error_naming_the_directory(tmp_path, monkeypatch):
  async def no_space(path, text):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

  monkeypatch.setattr(ocp.path.atomicity.async_path, "write_text", no_space)
  directory = tmp_path / "ckpt"
  checkpointer = ckpt.Checkpointer(str(directory))
  with pytest.raises(
    ckpt.CheckpointError,
    match=f"saving checkpoint 3 in {directory} failed.*No space left on device",
  ):
    checkpointer.save(3, {"w": jnp.ones(3)})
  monkeypatch.undo()
  assert ckpt.Checkpointer(str(directory)).latest_step() is None


def unwritable_directories(tmp_path):
  """Paths no one can write to, for root too (root ignores chmod, so that one is non-root only)."""
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  paths = [(blocker / "run", "Not a directory"), ("/proc/hrljax_run", "No such file")]
  if os.geteuid() != 0:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    paths.append((locked / "run", "Permission denied"))
  return paths


def test_unwritable_workdir_is_a_clear_error_at_start_up(tmp_path):
  for path, reason in unwritable_directories(tmp_path):
    directory = os.path.join(str(path), "checkpoints")
    with pytest.raises(
      ckpt.CheckpointError, match=f"checkpoint directory '{directory}' is not writable: {reason}"
    ):
      ckpt.Checkpointer(directory)


@pytest.mark.parametrize("poison", [math.nan, math.inf])
def test_non_finite_parameters_stop_the_run_and_keep_the_last_good_checkpoint(tmp_path, poison):
  workdir = str(tmp_path / "poisoned")
  with pytest.raises(training.TrainingDiverged) as raised:
    training.train(
      walker_learner(24, poison_at=10, poison=poison),
      run_config(log_every=4, checkpoint_every=4, max_checkpoints=3),
      workdir,
    )
  message = str(raised.value)
  assert message.startswith("non-finite state leaf .params in the chunk ending at update 12;")
  assert f"The last good checkpoint is update 8 in {workdir}/checkpoints." in message
  checkpointer = ckpt.Checkpointer(f"{workdir}/checkpoints", max_to_keep=3)
  assert checkpointer.all_steps() == [4, 8]
  like = walker_learner(24).init(jax.random.key(0))
  assert np.all(np.isfinite(checkpointer.restore(like).params))
  assert train_records(workdir) == [4, 8]  # the poisoned chunk was not logged
