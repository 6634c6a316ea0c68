"""Transient checkpoint read errors, as a cloud bucket gives them: a 503 on `Checkpoint.restore`
(or another TensorFlow read function), around a script run in a real subprocess:

    python tests/helpers/read_faults.py N[:FUNCTION] SCRIPT [ARGS...]

runs SCRIPT as `__main__` with the first N calls of FUNCTION (every one if N < 0) raising
tf.errors.UnavailableError before reading anything. FUNCTION is a dotted name under `tf`
(default `train.Checkpoint.restore`; e.g. `train.list_variables`, `io.gfile.listdir`).
"""

from __future__ import annotations

import functools
import runpy
import sys
from collections.abc import Callable

MESSAGE = "HTTP 503 Service Unavailable (simulated)"
RESTORE = "train.Checkpoint.restore"
NO_WAITS = "0,0,0,0"  # checkpoints.READ_RETRY_ENV: retried at once (the tests' runs)


def quiet_env() -> dict[str, str]:
  """The environment of a test's subprocess run: quiet TensorFlow on CPU, retries at once."""
  import os

  from electra_tf import checkpoints

  return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
          "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1", checkpoints.READ_RETRY_ENV: NO_WAITS}


def no_waits(monkeypatch) -> None:
  """Retries at once in this process (a test's monkeypatch undoes it)."""
  from electra_tf import checkpoint_reads

  monkeypatch.setattr(checkpoint_reads, "READ_RETRY_DELAYS", (0.0, 0.0, 0.0, 0.0))


def install(failures: int, function: str = RESTORE,
            patch: Callable[[object, str, object], None] = setattr) -> list[str]:
  """Makes the first `failures` calls of `tf.<function>` (all if < 0) raise a 503; returns the
  list of paths each call was given (the first argument; for a method, the one after `self`,
  else its object's name), growing as they come. `patch`: how to replace it (a test's
  monkeypatch.setattr undoes it)."""
  import tensorflow as tf

  *owner_path, name = function.split(".")
  owner = functools.reduce(getattr, owner_path, tf)
  original = getattr(owner, name)
  calls: list[str] = []
  method = isinstance(owner, type)

  def failing(*args, **kwargs):
    calls.append(str(args[0] if not method else args[1] if len(args) > 1
                     else getattr(args[0], "name", "")))  # GFile.read(): the file's name
    if failures < 0 or len(calls) <= failures:
      raise tf.errors.UnavailableError(None, None, MESSAGE)
    return original(*args, **kwargs)

  patch(owner, name, failing)
  return calls


if __name__ == "__main__":
  count, _, target = sys.argv[1].partition(":")
  install(int(count), target or RESTORE)
  sys.argv = sys.argv[2:]
  runpy.run_path(sys.argv[0], run_name="__main__")
