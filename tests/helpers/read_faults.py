"""Transient checkpoint read errors, as a cloud bucket gives them: a 503 on `Checkpoint.restore`,
around a script run in a real subprocess:

    python tests/helpers/read_faults.py N SCRIPT [ARGS...]

runs SCRIPT as `__main__` with its first N restores (every one if N < 0) raising
tf.errors.UnavailableError before reading anything.
"""

from __future__ import annotations

import runpy
import sys

MESSAGE = "HTTP 503 Service Unavailable (simulated)"


def install(failures: int) -> list[str]:
  """Makes the first `failures` calls of tf.train.Checkpoint.restore (all if < 0) raise a 503;
  returns the list of prefixes each call was given (it grows as they come)."""
  import tensorflow as tf

  original = tf.train.Checkpoint.restore
  calls: list[str] = []

  def restore(self, save_path, *args, **kwargs):
    calls.append(str(save_path))
    if failures < 0 or len(calls) <= failures:
      raise tf.errors.UnavailableError(None, None, MESSAGE)
    return original(self, save_path, *args, **kwargs)

  tf.train.Checkpoint.restore = restore
  return calls


if __name__ == "__main__":
  install(int(sys.argv[1]))
  sys.argv = sys.argv[2:]
  runpy.run_path(sys.argv[0], run_name="__main__")
