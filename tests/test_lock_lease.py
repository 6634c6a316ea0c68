"""The lease behind a folder's lock (electra_tf/lock_lease.py): a paused holder loses it and
writes nothing more, a holder on a file system without hard links is not taken over before the
lease lapses and learns when it is, a remote (`ram://`) lock of a preempted VM lapses and the
rerun takes it, a checkpoint save after the lease was lost writes nothing. Real subprocesses,
SIGSTOP / SIGCONT; the lease is a few seconds ($ELECTRA_LOCK_LEASE_SECONDS)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
from helpers import procs
from helpers.paths import REPO_ROOT

from electra_tf import atomic_io, folder_lock, lock_lease

LEASE = 3.0
REPO = REPO_ROOT
ENV = {**os.environ, lock_lease.LEASE_ENV: str(LEASE), "PYTHONPATH": str(REPO)}
NO_LINKS = ("import errno, os\n"
            "def _refused(*args, **kwargs):\n"
            "  raise OSError(errno.EPERM, 'hard links not supported')\n"
            "os.link = _refused\n")


@pytest.fixture(autouse=True)
def _short_lease(monkeypatch):
  monkeypatch.setenv(lock_lease.LEASE_ENV, str(LEASE))


def _python(code: str, *args: str) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


_WRITER = """
import sys, time
from electra_tf import atomic_io, folder_lock
folder = sys.argv[1]
folder_lock.acquire(folder)
print("got", flush=True)
n = 0
try:
  while True:
    n += 1
    atomic_io.write_text(folder + "/count.txt", str(n))
    time.sleep(0.05)
except folder_lock.LostLockError as e:
  print(e, flush=True)
  sys.exit(1)
"""


def test_a_paused_holder_loses_its_lease_and_writes_nothing_more(tmp_path):
  folder = tmp_path / "run"
  writer = _python(_WRITER, str(folder))
  try:
    assert writer.stdout.readline().strip() == "got"
    while not (folder / "count.txt").exists():
      time.sleep(0.05)
    writer.send_signal(signal.SIGSTOP)  # a VM pause, a debugger, a swapped-out process
    started = time.monotonic()
    line = folder_lock.acquire(str(folder))
    assert time.monotonic() - started >= LEASE
    assert line.startswith(f"Took over the lock {folder}/{folder_lock.LOCK_NAME} of a run that "
                           f"did not renew its lease for {LEASE:.0f} s (host "), line
    atomic_io.write_text(str(folder / "count.txt"), "taken")
    writer.send_signal(signal.SIGCONT)
    out = procs.finish(writer, timeout=60)
    assert writer.returncode == 1, out
    me = lock_lease.describe(json.loads((folder / folder_lock.LOCK_NAME).read_text()))
    assert me.startswith(f"host {socket.gethostname()}, pid {os.getpid()}, ")
    assert out.splitlines()[-1] == (
        f"this run lost its lock on {folder} to another run ({me}); stopping without writing")
    assert (folder / "count.txt").read_text() == "taken"  # nothing written after the takeover
    assert not [p.name for p in folder.iterdir() if ".tmp-" in p.name]
    assert lock_lease.mine(lock_lease.read(str(folder / folder_lock.LOCK_NAME))[0])
  finally:
    writer.send_signal(signal.SIGCONT)
    writer.kill()
    writer.communicate()
    folder_lock.release(str(folder))


_STARTER = NO_LINKS + """
import sys, time
from electra_tf import folder_lock
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
try:
  folder_lock.acquire(sys.argv[1])
  print("got", flush=True)
  time.sleep(2)
except folder_lock.FolderLockedError:
  print("refused", flush=True)
"""


def test_without_hard_links_the_create_is_still_exclusive(tmp_path):
  folder = tmp_path / "run"
  at = time.time() + 1.5
  starters = [_python(_STARTER, str(folder), str(at)) for _ in range(5)]
  said = sorted(procs.finish(p).strip().splitlines()[-1] for p in starters)
  assert said == ["got"] + ["refused"] * 4, said


_STALLED = NO_LINKS + """
import os, signal, sys
from electra_tf import folder_lock
real_fdopen = os.fdopen
def stalled_fdopen(*args, **kwargs):  # between the exclusive create and the write
  os.kill(os.getpid(), signal.SIGSTOP)
  return real_fdopen(*args, **kwargs)
os.fdopen = stalled_fdopen
try:
  folder_lock.acquire(sys.argv[1])
  print("got", flush=True)
except folder_lock.LostLockError as e:
  print(e, flush=True)
  sys.exit(1)
"""


def _stopped(proc: subprocess.Popen) -> bool:
  with open(f"/proc/{proc.pid}/stat") as f:
    return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_without_hard_links_a_stalled_creator_is_taken_over_only_after_the_lease(tmp_path):
  folder = tmp_path / "run"
  stalled = _python(_STALLED, str(folder))
  try:
    deadline = time.monotonic() + 60
    while not (_stopped(stalled) and (folder / folder_lock.LOCK_NAME).exists()):
      assert stalled.poll() is None and time.monotonic() < deadline, procs.finish(stalled)
      time.sleep(0.05)
    assert (folder / folder_lock.LOCK_NAME).read_bytes() == b""  # created, not yet written
    started = time.monotonic()
    line = folder_lock.acquire(str(folder))
    assert time.monotonic() - started >= LEASE  # not after a fixed 2 s: the lease
    assert line.startswith(f"Took over the lock {folder}/{folder_lock.LOCK_NAME}, left "
                           "unreadable (0 bytes)"), line
    stalled.send_signal(signal.SIGCONT)
    out = procs.finish(stalled, timeout=60)
    assert stalled.returncode == 1, out
    assert out.splitlines()[-1].startswith(
        f"this run lost its lock on {folder} to another run (host {socket.gethostname()}, pid "
        f"{os.getpid()}, "), out
    assert lock_lease.mine(lock_lease.read(str(folder / folder_lock.LOCK_NAME))[0])
  finally:
    stalled.send_signal(signal.SIGCONT)
    stalled.kill()
    stalled.communicate()
    folder_lock.release(str(folder))


def test_a_remote_lock_of_a_preempted_vm_lapses_and_the_rerun_takes_it(capsys):
  """`ram://` goes through tf.io.gfile as `gs://` does: no exclusive create, no hard links."""
  import tensorflow as tf

  folder = f"ram://leases/{uuid.uuid4().hex}/run"
  lock = f"{folder}/{folder_lock.LOCK_NAME}"
  vm = {"host": "preempted-vm", "boot": "another-boot", "pidns": "1", "pid": 4242}
  with procs.renewed_lock(lock, **vm):  # still running: refused
    with pytest.raises(folder_lock.FolderLockedError, match=r"is in use by another run \(host "
                       r"preempted-vm, pid 4242, "):
      folder_lock.acquire(folder)
  assert json.loads(tf.io.gfile.GFile(lock, "rb").read())["run"] == "other"
  capsys.readouterr()
  started = time.monotonic()  # preempted: nobody renews it
  line = folder_lock.acquire(folder)
  try:
    assert time.monotonic() - started >= LEASE
    assert capsys.readouterr().out.startswith(f"{folder}: waiting up to {LEASE:.0f} s for the "
                                              "lease of host preempted-vm, pid 4242, ")
    assert line.startswith(f"Took over the lock {lock} of a run that did not renew its lease "
                           f"for {LEASE:.0f} s (host preempted-vm, pid 4242, "), line
    beat = json.loads(tf.io.gfile.GFile(lock, "rb").read())["beat"]
    time.sleep(LEASE / 3)
    assert json.loads(tf.io.gfile.GFile(lock, "rb").read())["beat"] > beat  # renewed remotely
  finally:
    folder_lock.release(folder)
  assert not tf.io.gfile.exists(lock)


def test_a_checkpoint_save_after_the_lease_was_taken_writes_nothing(tmp_path):
  import tensorflow as tf

  from electra_tf.training.checkpointing import CheckpointKeeper

  keeper = CheckpointKeeper(tf.train.Checkpoint(v=tf.Variable(1.0)), str(tmp_path), 3)
  keeper.check(64)
  keeper.save(1)
  with procs.renewed_lock(tmp_path / folder_lock.LOCK_NAME, host="node-2"):  # taken over
    with pytest.raises(folder_lock.LostLockError, match=rf"^this run lost its lock on {tmp_path} "
                       r"to another run \(host node-2, .*; stopping without writing$"):
      keeper.save(2)
  assert not list(tmp_path.glob("ckpt-2*"))
  folder_lock.release(str(tmp_path))


def test_a_holder_whose_lock_was_taken_and_released_meanwhile_writes_nothing(tmp_path):
  """Paused past the lease, then continued after the run that took its lock ended and removed
  it: the lock is gone, its folder is there; the next write stops with the one line."""
  folder_lock.acquire(str(tmp_path))
  atomic_io.write_text(str(tmp_path / "a.txt"), "1")
  os.remove(tmp_path / folder_lock.LOCK_NAME)  # taken over, then released by the other run
  with pytest.raises(folder_lock.LostLockError, match=rf"^this run lost its lock on {tmp_path} "
                     r"to another run \(a run that removed the lock\); stopping without writing$"):
    atomic_io.write_text(str(tmp_path / "a.txt"), "2")
  assert (tmp_path / "a.txt").read_text() == "1"
  beside = tmp_path.parent / f"{tmp_path.name}-results.txt"  # fine-tuning's results, beside
  with pytest.raises(folder_lock.LostLockError):  # the trials' folder: nothing written either
    atomic_io.write_text(str(beside), "2")
  assert not beside.exists()
  with pytest.raises(folder_lock.LostLockError):  # a staged folder (the input state) neither
    with atomic_io.staged_dir(str(tmp_path / "input_state" / "ckpt-2")) as stage:
      pathlib.Path(stage, "state").write_text("x")
  assert not (tmp_path / "input_state").exists()
  folder_lock.release(str(tmp_path))
  gone = tmp_path / "moved"
  folder_lock.acquire(str(gone))
  gone.rename(tmp_path / "elsewhere")  # a folder moved away: nothing left to hold, no error
  atomic_io.write_text(str(tmp_path / "b.txt"), "1")
  folder_lock.release(str(gone))
