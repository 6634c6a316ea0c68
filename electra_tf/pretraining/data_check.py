"""Read every pre-training shard once before step 1 and report every bad one.

The training pipeline already stops on a bad shard, but only when it reaches it (perhaps hours
in) and only on the first. ``check_data`` finds them all up front: corrupt or truncated
files (with the byte offset where reading stops), examples of another length, token ids
outside the vocabulary. A run does this by default when the data is small (< 1 GiB).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import tensorflow as tf

from electra_tf.console import log
from electra_tf.pretraining import data
from electra_tf.training.errors import data_error_line

AUTO_LIMIT_BYTES = 2**30  # "auto" checks data smaller than this
_CHECK_BATCH = 4096


def check_shard(path: str, max_seq_length: int, vocab_size: int | None = None) -> str | None:
  """None if every record of `path` reads and parses, else the one-line problem."""
  size = tf.io.gfile.stat(path).length
  if size == 0:
    return None
  records = data.read_shard(tf.constant(path), tf.constant(size, tf.int64), max_seq_length,
                             vocab_size)
  try:
    for _ in records.batch(_CHECK_BATCH):
      pass
  except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
    line = data_error_line(e)
    if path not in line:  # e.g. a record that is not a tf.train.Example
      line = f"pretraining_dataset: shard {path}: {line}"
    return line
  return None


def check_data(file_pattern: str | Sequence[str], max_seq_length: int,
               vocab_size: int | None = None, check: bool | None = None,
               log_fn: Callable[[str], None] = log) -> list[str]:
  """Checks every shard matching `file_pattern`; returns the files checked ([] if skipped).

  check: True always, False never, None ("auto") when the shards total < 1 GiB.
  Raises ValueError, one line listing every bad shard and its problem.
  """
  if check is False:
    return []
  files = data.expand_file_pattern(file_pattern)
  total = sum(tf.io.gfile.stat(f).length for f in files)
  if check is None and total >= AUTO_LIMIT_BYTES:
    log_fn(f"Not checking the {len(files)} data shard(s) up front: {total / 2**30:.1f} GiB "
           "(set check_data to check them anyway)")
    return []
  start = time.time()
  problems = [p for p in (check_shard(f, max_seq_length, vocab_size) for f in files) if p]
  if problems:
    raise ValueError(f"{len(problems)} of {len(files)} data shard(s) are bad: "
                     + "; ".join(problems))
  log_fn(f"Checked {len(files)} data shard(s), {total / 2**20:.1f} MiB, in "
         f"{time.time() - start:.1f}s: all readable")
  return files
