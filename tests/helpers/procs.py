"""Waiting on and killing the training subprocesses the failure-drill tests start."""

from __future__ import annotations

import codecs
import os
import pathlib
import re
import select
import signal
import subprocess
import time

import pytest


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
