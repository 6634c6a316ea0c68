"""Waiting on and killing the training subprocesses the failure-drill tests start."""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import pathlib
import re
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest


def sigint_as_a_terminal() -> None:
  """A child's ``preexec_fn``: SIGINT back to its default, as a terminal starts a command (a
  suite started in the background, ``cmd &``, hands its children SIGINT ignored, and Python
  then installs no KeyboardInterrupt handler)."""
  signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen, timeout: float = 120) -> str:
  """The process's combined output once it exits; a test failure (with the output's tail) if it
  outlives `timeout` seconds."""
  try:
    out, _ = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    out, _ = proc.communicate()
    pytest.fail(f"subprocess timed out after {timeout}s:\n{out[-3000:]}")
  return out


def sigkill_after_first_checkpoint(proc: subprocess.Popen, model_dir: pathlib.Path,
                                   timeout: float, poll: float) -> None:
  """SIGKILLs a training run as soon as `model_dir/checkpoint` exists (mid-run, not at exit)."""
  deadline = time.time() + timeout
  while not (model_dir / "checkpoint").exists():
    if proc.poll() is not None or time.time() > deadline:
      pytest.fail(f"no checkpoint before exit/timeout:\n{finish(proc)}")
    time.sleep(poll)
  proc.send_signal(signal.SIGKILL)
  finish(proc)
  assert proc.returncode == -signal.SIGKILL


def wait_for_line(proc: subprocess.Popen, pattern: str, timeout: float) -> tuple[re.Match, str]:
  """Reads `proc`'s output (text, stderr merged) until a line matches `pattern`; returns the
  match and the output read so far (which may run past the matching line). A test failure if
  the process ends or `timeout` passes first, also for a silent process: the pipe is polled
  with select, never read by a blocking call. Read the rest with `finish`."""
  deadline, fd = time.monotonic() + timeout, proc.stdout.fileno()
  decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
  seen, partial = "", ""
  while (left := deadline - time.monotonic()) > 0:
    if not select.select([fd], [], [], min(left, 1.0))[0]:
      continue
    chunk = os.read(fd, 65536)
    if not chunk:  # the process closed its output
      break
    text = decoder.decode(chunk)
    seen += text
    *lines, partial = (partial + text).split("\n")
    for line in lines:
      m = re.search(pattern, line + "\n")
      if m:
        return m, seen
  proc.kill()
  pytest.fail(f"no line matching {pattern!r} within {timeout} s:\n{seen[-3000:]}"
              f"{finish(proc)[-2000:]}")


def took_over_lock(line: str, folder: object) -> bool:
  """Whether `line` is the one a rerun prints when it takes over the lock a killed run left in
  `folder` (folder_lock.py)."""
  return line.startswith(f"Took over the lock {folder}/.run.lock of a run that ended without "
                         "releasing it (host ")


@contextlib.contextmanager
def renewed_lock(path: pathlib.Path | str, every: float = 0.2, **fields) -> Iterator[dict]:
  """A lock file `path` (local or `ram://`) held by a live run that renews its lease
  (folder_lock.py): written with `fields` (another run id, this host's name, this process's pid
  unless given), its `beat` raised every `every` s by a thread until the block ends."""
  from electra_tf import atomic_io, lock_lease

  holder = {"run": "other", "beat": 0, "host": socket.gethostname(), "pid": os.getpid(),
            "start": lock_lease.proc_start(os.getpid()), "boot": lock_lease.boot_id(),
            "pidns": lock_lease.pid_namespace(), "since": "2026-01-02 03:04:05 UTC",
            "command": "python run_pretraining.py x", **fields}
  path = str(path)
  if "://" in path:
    atomic_io._gfile().makedirs(os.path.dirname(path))
  else:
    os.makedirs(os.path.dirname(path), exist_ok=True)
  lock_lease.write_whole(path, json.dumps(holder).encode())
  done = threading.Event()

  def beat() -> None:
    while not done.wait(every):
      holder["beat"] += 1
      lock_lease.write_whole(path, json.dumps(holder).encode())

  thread = threading.Thread(target=beat, daemon=True)
  thread.start()
  try:
    yield holder
  finally:
    done.set()
    thread.join()
