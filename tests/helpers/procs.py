"""Waiting on and killing the training subprocesses the failure-drill tests start."""

from __future__ import annotations

import pathlib
import re
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
  match and the output so far. A test failure if the process ends or `timeout` passes first."""
  deadline, seen = time.time() + timeout, []
  while time.time() < deadline:
    line = proc.stdout.readline()
    if not line and proc.poll() is not None:
      break
    seen.append(line)
    m = re.search(pattern, line)
    if m:
      return m, "".join(seen)
  proc.kill()
  pytest.fail(f"no line matching {pattern!r}:\n{''.join(seen)[-3000:]}{finish(proc)[-2000:]}")
