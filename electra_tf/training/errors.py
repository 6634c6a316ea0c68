"""Errors the training loop stops with, each carrying the one line the entry points print."""

from __future__ import annotations

import tensorflow as tf


class NonFiniteLossError(RuntimeError):
  """The loss became NaN or Inf; nothing was saved after the last good checkpoint."""


class InputDataError(RuntimeError):
  """The input pipeline failed mid-run (corrupt shard, bad token id); progress was saved."""


def data_error_line(error: tf.errors.OpError) -> str:
  """The one line a failed `tf.debugging.Assert` in the input pipeline carries (its message,
  without TensorFlow's "assertion failed: [...]" wrapper and op context), else TF's first line."""
  text = (error.message or str(error)).strip()
  marker = "assertion failed: ["
  for line in text.splitlines():
    if marker in line:
      said = line.split(marker, 1)[1].split("]", 1)[0]  # shard paths hold no "]" in practice
      return said.strip()
  lines = [line.strip() for line in text.splitlines()
           if line.strip() and not line.startswith("Graph execution error")]
  return lines[0] if lines else type(error).__name__
