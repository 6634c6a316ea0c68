"""Waiting on and killing the training subprocesses the failure-drill tests start."""

from __future__ import annotations

import pathlib
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
