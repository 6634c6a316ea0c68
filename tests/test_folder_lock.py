"""One run per model folder (electra_tf/folder_lock.py): a second run is refused in one line
naming the first, a SIGKILLed run's lock is taken over, another host's lock is reported with
the command that clears it, the lock goes away after a clean run."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers import procs

from electra_tf import folder_lock

TOY = pathlib.Path(__file__).parent / "helpers" / "toy_train.py"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}


def _toy(model_dir: pathlib.Path, *args: str) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, str(TOY), "--model_dir", str(model_dir), *args],
                          env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120) -> None:
  deadline = time.monotonic() + timeout
  while not predicate():
    assert proc.poll() is None, proc.communicate()
    assert time.monotonic() < deadline, "timed out"
    time.sleep(0.1)


def _lock(folder: pathlib.Path, **fields) -> pathlib.Path:
  folder.mkdir(parents=True, exist_ok=True)
  path = folder / folder_lock.LOCK_NAME
  holder = {"host": socket.gethostname(), "pid": 1, "start": "0", "boot": "",
            "since": "2026-01-02 03:04:05 UTC", "command": "python run_pretraining.py x",
            "token": "other", **fields}
  path.write_text(json.dumps(holder))
  return path


def test_a_second_run_is_refused_and_a_killed_runs_lock_taken_over(tmp_path):
  model_dir = tmp_path / "run"
  lock = model_dir / folder_lock.LOCK_NAME
  first = _toy(model_dir, "--num_train_steps", "100000", "--step_sleep", "0.02")
  try:
    _wait_for(lambda: list(model_dir.glob("ckpt-10.index")), first)
    holder = json.loads(lock.read_text())
    assert holder["pid"] == first.pid
    second = _toy(model_dir, "--num_train_steps", "5")
    out, err = second.communicate(timeout=300)
    assert second.returncode == 1, (out, err)
    command = holder["command"]  # its first 57 characters and "..." when longer than 60
    command = command if len(command) <= 60 else command[:57] + "..."
    assert err.splitlines() == [
        f"toy_train.py: error: {model_dir} is in use by another run (host "
        f"{socket.gethostname()}, pid {first.pid}, since {holder['since']}, command: "
        f"{command}); wait for it to end or stop it"], err
    assert "toy_train.py --model_dir" in holder["command"]
    assert first.poll() is None  # the first one trains on, its checkpoints untouched
    first.send_signal(signal.SIGKILL)
  finally:
    procs.finish(first)
  assert json.loads(lock.read_text())["pid"] == first.pid  # a SIGKILL leaves the lock
  third = _toy(model_dir, "--num_train_steps", "5")
  out, err = third.communicate(timeout=300)
  assert third.returncode == 0, (out, err)
  assert (f"Took over the lock {lock} of a run that ended without releasing it (host "
          f"{socket.gethostname()}, pid {first.pid}, since {holder['since']}") in out
  assert not lock.exists()  # released by the clean exit


def test_another_hosts_lock_is_reported_with_the_command_that_clears_it(tmp_path):
  path = _lock(tmp_path / "run", host="node-7", pid=os.getpid())
  before = path.read_bytes()
  with pytest.raises(folder_lock.FolderLockedError) as err:
    folder_lock.acquire(str(tmp_path / "run"))
  assert str(err.value) == (
      f"{tmp_path}/run is locked by a run on another host (host node-7, pid {os.getpid()}, "
      "since 2026-01-02 03:04:05 UTC, command: python run_pretraining.py x); this host cannot "
      f"tell whether it still runs: if it has ended, clear the lock with `rm {path}` and rerun")
  assert path.read_bytes() == before  # never taken


def test_a_live_holder_is_refused_and_a_reused_pid_is_not_taken_for_it(tmp_path):
  parent = os.getppid()
  start = folder_lock._proc_start(parent)
  _lock(tmp_path / "live", pid=parent, start=start)
  with pytest.raises(folder_lock.FolderLockedError, match="is in use by another run"):
    folder_lock.acquire(str(tmp_path / "live"))
  _lock(tmp_path / "reused", pid=parent, start=str(int(start) + 1))  # same pid, other process
  note = folder_lock.acquire(str(tmp_path / "reused"))
  assert note.startswith(f"Took over the lock {tmp_path}/reused/{folder_lock.LOCK_NAME} ")
  assert json.loads((tmp_path / "reused" / folder_lock.LOCK_NAME).read_text())["pid"] == (
      os.getpid())
  assert folder_lock.acquire(str(tmp_path / "reused")) is None  # again: this process's
  folder_lock.release(str(tmp_path / "reused"))
  assert not (tmp_path / "reused" / folder_lock.LOCK_NAME).exists()


def test_a_takeover_in_progress_elsewhere_is_not_joined(tmp_path, monkeypatch):
  path = _lock(tmp_path / "run", pid=2**22 + 1)  # dead
  (tmp_path / "run" / (folder_lock.LOCK_NAME + ".takeover")).write_text("{}")
  monkeypatch.setattr(folder_lock, "_TRIES", 3)
  with pytest.raises(folder_lock.FolderLockedError, match=r"\.takeover stayed unreadable or busy"):
    folder_lock.acquire(str(tmp_path / "run"))
  assert json.loads(path.read_text())["token"] == "other"


def test_restart_does_not_move_a_folder_another_run_uses(tmp_path):
  from electra_tf.training import restart

  model_dir = tmp_path / "run"
  parent = os.getppid()
  _lock(model_dir, pid=parent, start=folder_lock._proc_start(parent))
  (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
  with pytest.raises(folder_lock.FolderLockedError, match="is in use by another run"):
    restart.move_aside(str(model_dir))
  assert (model_dir / "checkpoint").exists()
  (model_dir / folder_lock.LOCK_NAME).unlink()  # that run ended, releasing it
  assert restart.move_aside(str(model_dir)) == f"{model_dir}.before-restart-1"
  assert not (tmp_path / "run.before-restart-1" / folder_lock.LOCK_NAME).exists()
  assert not [p for p in folder_lock.held() if p.startswith(str(model_dir))]


def test_a_ctrl_c_stop_releases_the_lock(tmp_path):
  model_dir = tmp_path / "run"
  proc = _toy(model_dir, "--num_train_steps", "100000", "--step_sleep", "0.02")
  try:
    _wait_for(lambda: list(model_dir.glob("ckpt-10.index")), proc)
    assert (model_dir / folder_lock.LOCK_NAME).exists()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.communicate()
  assert proc.returncode == 128 + signal.SIGINT, (out, err)
  assert "interrupted at step" in err
  assert not (model_dir / folder_lock.LOCK_NAME).exists()


_STARTER = """
import sys, time
from electra_tf import folder_lock
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all start at once
try:
  folder_lock.acquire(sys.argv[1])
  print("got", flush=True)
  time.sleep(3)
except folder_lock.FolderLockedError:
  print("refused", flush=True)
"""


@pytest.mark.parametrize("dead_holder", [False, True])
def test_of_runs_starting_at_once_exactly_one_gets_the_lock(tmp_path, dead_holder):
  folder = tmp_path / "run"
  if dead_holder:
    _lock(folder, pid=2**22 + 1)
  at = time.time() + 1.5
  starters = [subprocess.Popen([sys.executable, "-c", _STARTER, str(folder), str(at)],
                               cwd=pathlib.Path(__file__).parent.parent, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True) for _ in range(6)]
  said = sorted(procs.finish(p).strip() for p in starters)
  assert said == ["got"] + ["refused"] * 5, said
  assert not (folder / folder_lock.LOCK_NAME).exists()  # released at exit


def _other_process_acquires(folder: pathlib.Path) -> str:
  return subprocess.run([sys.executable, "-c", _STARTER, str(folder), "0"],
                        cwd=pathlib.Path(__file__).parent.parent, capture_output=True,
                        text=True, check=True).stdout.strip()


def test_a_lock_copied_with_its_folder_is_no_lock_on_the_copy(tmp_path):
  """`cp -r` of a folder a live run holds: the copy is free, the original still held."""
  original = tmp_path / "run"
  assert folder_lock.acquire(str(original)) is None
  copy = tmp_path / "copy"
  shutil.copytree(original, copy)
  out = _other_process_acquires(copy)
  assert out == "got", out
  assert _other_process_acquires(original).startswith("refused"), "the original lost its lock"
  folder_lock.release(str(original))


@pytest.mark.parametrize("damage", [b"", b'{"host": "vm", "pi'])
def test_a_lock_a_power_cut_left_unreadable_is_taken_over_with_one_line(tmp_path, damage):
  folder = tmp_path / "run"
  folder.mkdir()
  (folder / folder_lock.LOCK_NAME).write_bytes(damage)  # empty, or cut short
  started = time.monotonic()
  line = folder_lock.acquire(str(folder))
  try:
    assert line is not None and line.startswith(f"Took over the lock {folder}/.run.lock, left "
                                                f"unreadable ({len(damage)} bytes)"), line
    assert "\n" not in line and time.monotonic() - started < 5
    assert json.loads((folder / folder_lock.LOCK_NAME).read_text())["pid"] == os.getpid()
  finally:
    folder_lock.release(str(folder))


def test_a_second_pretraining_run_is_refused_in_its_first_line(tmp_path):
  model_dir = tmp_path / "models" / "m"  # nothing else: the refusal comes before any reading
  folder_lock.acquire(str(model_dir))  # held by this (live) process
  try:
    done = subprocess.run([sys.executable, str(TOY.parents[2] / "run_pretraining.py"),
                           "--data_dir", str(tmp_path), "--model_name", "m"],
                          env=ENV, capture_output=True, text=True, timeout=300)
  finally:
    folder_lock.release(str(model_dir))
  lines = (done.stdout + done.stderr).strip().splitlines()
  assert done.returncode == 1 and len(lines) == 1, lines
  assert lines[0].startswith(f"run_pretraining.py: error: {model_dir} is in use by another run "
                             f"(host {socket.gethostname()}, pid {os.getpid()},"), lines
