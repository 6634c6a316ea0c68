"""Races: a signal at every moment of the stop handlers' hand-over reaches a handler, the umask
is read without being changed, `--restart` on several workers reads nothing of the old folder
before the chief has moved it. Each moment is forced (a hook at that point, a process started
first), so a test fails on every run of a racy implementation, not on an unlucky one.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest
from helpers import ports, pretrain_data, procs
from helpers.paths import REPO_ROOT

from electra_tf import atomic_io
from electra_tf.training import interrupt, restart

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}


# ----- the signal handlers' hand-over -----------------------------------------------------------


def _watch_then_signal_at(call: int, raises: bool, monkeypatch) -> tuple[list[int], int, int]:
  """Runs a `watching()` block (ending with an error if `raises`, as after a stop) and raises
  SIGINT right after the `call`-th call to signal.signal / signal.set_wakeup_fd made while the
  block is left (0: at the block's end). Returns (the signals the previous SIGINT handler
  received, the signal the stop request holds, the number of calls made on the way out)."""
  received: list[int] = []
  original = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
  leaving, calls = [False], [0]

  def hooked(real):
    def call_then_signal(*args, **kwargs):
      out = real(*args, **kwargs)
      if leaving[0]:
        calls[0] += 1
        if calls[0] == call:
          signal.raise_signal(signal.SIGINT)
      return out
    return call_then_signal

  monkeypatch.setattr(signal, "signal", hooked(signal.signal))
  monkeypatch.setattr(signal, "set_wakeup_fd", hooked(signal.set_wakeup_fd))
  stop = interrupt.StopRequest()
  try:
    with stop.watching():
      leaving[0] = True
      if call == 0:
        signal.raise_signal(signal.SIGINT)
        while not stop.signum:  # the watcher thread took it; the block is past its last check
          time.sleep(0.01)
      if raises:
        raise RuntimeError("the block ends with an error")
  except RuntimeError:
    pass
  finally:
    monkeypatch.undo()
    signal.signal(signal.SIGINT, original)
  return received, stop.signum, calls[0]


@pytest.mark.parametrize("raises", [False, True], ids=["block_returns", "block_raises"])
def test_a_signal_at_any_moment_of_leaving_the_watch_reaches_a_handler(raises, monkeypatch):
  """Returning, the block never acted on the signal: the previous handler gets it (once).
  Raising (the loop stopped, saved, and ends the run), the watcher or the previous handler
  must see it (a second signal then exits at once)."""
  calls = _watch_then_signal_at(-1, raises, monkeypatch)[2]  # the calls made on the way out
  assert calls >= 3  # two handlers and the wake-up fd
  for call in range(calls + 1):
    received, requested, _ = _watch_then_signal_at(call, raises, monkeypatch)
    if raises:
      assert received == [signal.SIGINT] or requested == signal.SIGINT, f"after call {call}"
    else:
      assert received == [signal.SIGINT], f"signal after call {call} of {calls}: {received}"


# ----- reading the umask -------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002, 0o077])
def test_the_umask_is_read_without_changing_it(mask, monkeypatch, tmp_path):
  old = os.umask(mask)
  try:
    def no_umask_calls(value):  # os.umask(0) even for an instant gives another thread's file 0666
      raise AssertionError(f"os.umask({value:#o}) called")

    monkeypatch.setattr(os, "umask", no_umask_calls)
    assert atomic_io.umask_mode() == 0o666 & ~mask
    assert atomic_io.umask_mode(directory=True) == 0o777 & ~mask
    monkeypatch.setattr(atomic_io, "_PROC_STATUS", str(tmp_path / "missing"))  # not Linux
    assert atomic_io.umask_mode() == 0o666 & ~mask
  finally:
    monkeypatch.undo()
    os.umask(old)


def test_files_another_thread_creates_meanwhile_keep_the_umask_mode(tmp_path):
  old = os.umask(0o022)
  done = threading.Event()
  try:
    def read_modes():
      while not done.is_set():
        atomic_io.umask_mode()

    reader = threading.Thread(target=read_modes)
    reader.start()
    for i in range(2000):  # with os.umask(0) in umask_mode, some of these got 0666
      (tmp_path / f"f{i}").write_bytes(b"")
    done.set()
    reader.join()
    modes = {stat.S_IMODE((tmp_path / f"f{i}").stat().st_mode) for i in range(2000)}
    assert modes == {0o644}, sorted(map(oct, modes))
  finally:
    done.set()
    os.umask(old)


# ----- --restart on several workers -------------------------------------------------------------


def _as_worker(monkeypatch, index: int) -> None:
  config = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
            "task": {"type": "worker", "index": index}}
  monkeypatch.setenv("TF_CONFIG", json.dumps(config))


def _old_run(model_dir: pathlib.Path) -> None:
  model_dir.mkdir(parents=True)
  for name in ("ckpt-2.index", "ckpt-2.data-00000-of-00001", "checkpoint"):
    (model_dir / name).write_bytes(b"x")


def test_a_worker_waits_for_the_chief_to_move_the_folder(tmp_path, monkeypatch):
  model_dir = tmp_path / "m"
  _old_run(model_dir)
  _as_worker(monkeypatch, 1)
  lines: list[str] = []
  chief = threading.Timer(1.0, restart.move_aside, [str(model_dir)])  # starts late
  chief.start()
  began = time.monotonic()
  restart.restart(str(model_dir), lines.append, wait_seconds=60, poll_seconds=0.05)
  assert time.monotonic() - began >= 0.9 and not model_dir.exists()
  assert lines == [f"--restart: waiting for the chief to move {model_dir} aside"]
  assert (tmp_path / "m.before-restart-1" / "ckpt-2.index").is_file()


def test_a_worker_whose_chief_never_moves_the_folder_stops_with_one_line(tmp_path, monkeypatch):
  model_dir = tmp_path / "m"
  _old_run(model_dir)
  _as_worker(monkeypatch, 1)
  with pytest.raises(restart.RestartError, match=(
      rf"^--restart: {model_dir} still holds checkpoints after 0.5 s; the chief moves it aside: "
      r"start the chief with --restart too$")):
    restart.restart(str(model_dir), lambda line: None, wait_seconds=0.5, poll_seconds=0.05)
  _as_worker(monkeypatch, 0)  # the chief moves it, at once
  lines: list[str] = []
  restart.restart(str(model_dir), lines.append)
  assert lines == [f"--restart: moved {model_dir} to {tmp_path}/m.before-restart-1"]


@pytest.mark.slow
def test_restart_on_two_workers_trains_the_new_shape_from_step_0(tmp_path, data_dir):
  """The old run has another shape: a worker reading its hparams.json would fail on the
  contradiction. Worker 1 starts first and is given time to read; the chief comes later."""
  root = pretrain_data.char_vocab_data_dir(tmp_path, _corpus(tmp_path, data_dir))
  old = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
         "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
         "num_train_steps": 1, "iterations_per_loop": 1, "vocab_size": len(
             pretrain_data.CHAR_VOCAB), "seed": 3}
  new = {**old, "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1},
         "num_train_steps": 2}
  first = _pretrain(root, old)
  assert first.wait(timeout=300) == 0, first.stdout.read()[-3000:]
  configs = ports.two_worker_tf_configs()
  other = _pretrain(root, new, "--restart", "--distribution_strategy", "multi_worker_mirrored",
                    tf_config=configs[1])
  m, early = procs.wait_for_line(other, r"(waiting for the chief|full config:|error)", timeout=300)
  time.sleep(3)  # time to read the old folder, if it does not wait
  chief = _pretrain(root, new, "--restart", "--distribution_strategy", "multi_worker_mirrored",
                    tf_config=configs[0])
  other_log = early + procs.finish(other, timeout=600)
  if other.returncode:  # the chief would wait for it in its first collective
    chief.kill()
  logs = [procs.finish(chief, timeout=600), other_log]
  assert [chief.returncode, other.returncode] == [0, 0], "\n".join(log[-3000:] for log in logs)
  model_dir = root / "models" / "m"
  assert f"--restart: waiting for the chief to move {model_dir} aside" in logs[1]
  assert f"--restart: moved {model_dir} to {model_dir}.before-restart-1" in logs[0]
  for log in logs:
    assert "Running training from step 0" in log and "Restored" not in log
  assert sorted(p.name for p in model_dir.glob("*.index")) == ["ckpt-2.index"]
  shape = json.loads((model_dir / "hparams.json").read_text())["model_hparam_overrides"]
  assert shape["num_hidden_layers"] == 1


def _corpus(tmp_path: pathlib.Path, data_dir: pathlib.Path) -> pathlib.Path:
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  text = (data_dir / "gutenberg" / "austen-emma.txt").read_text(encoding="utf-8")[:20000]
  (corpus / "emma.txt").write_text(text, encoding="utf-8")
  return corpus


def _pretrain(data_dir: pathlib.Path, hparams: dict, *flags: str,
              tf_config: str | None = None) -> subprocess.Popen:
  env = {**ENV, "TF_CONFIG": tf_config} if tf_config else ENV
  return subprocess.Popen(
      [sys.executable, str(REPO_ROOT / "run_pretraining.py"), "--data_dir", str(data_dir),
       "--model_name", "m", "--hparams", json.dumps(hparams), *flags],
      cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
