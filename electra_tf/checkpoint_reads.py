"""Reading checkpoints and model folders from storage that may fail: errors sorted by kind
(proof of damage, or a read that may succeed later), reads retried before they count, folder
listings, and which checkpoint files are whole. The one way this package reads a checkpoint or
lists a model folder on a run's start, resume or initialisation (re-exported by checkpoints).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import tensorflow as tf


def tf_error_summary(error: BaseException) -> str:
  """What TensorFlow said, in a few words: first line, without op context or file paths.

  ``{{function_node ...}} /x/ckpt-20_temp/part-0.data...; No space left on device [Op:SaveV2]``
  becomes ``No space left on device``.
  """
  text = (getattr(error, "message", None) or str(error)).strip()
  text = text.splitlines()[0] if text else type(error).__name__
  text = re.sub(r"\{\{[^}]*\}\}\s*", "", text)
  text = re.sub(r"\s*\[Op:\w+\]$", "", text).strip()
  if "; " in text:
    text = text.rsplit("; ", 1)[1]
  return text[:120] or type(error).__name__


class CorruptCheckpointError(ValueError):
  """A checkpoint's files exist but are damaged (truncated data file, damaged index, a checksum
  that does not match): proof that it cannot be read, ever."""


class CheckpointUnavailableError(RuntimeError):
  """A checkpoint could not be read for a reason that is not damage (storage unavailable, a
  timeout, a permission, a file gone): nothing is moved or deleted; a rerun may read it."""


# Damage that TensorFlow reports as a generic error (the checkpoint reader's errors all carry
# code UNKNOWN): a truncated, empty or garbled index (an SSTable), a checksum mismatch.
_DAMAGE = re.compile(r"sstable|bad magic|checksum|corrupted|bad block|bad entry|truncated "
                     r"(block|record)|read less bytes", re.IGNORECASE)
# The bundle reader wraps every error reading an index, a 503 too, in this sentence.
_WRAPPER = re.compile(r"Perhaps the file is corrupt or was produced by a newer version of "
                      r"TensorFlow with format changes")
# Seconds to wait before each retry of a read that failed without proof of damage; the
# environment variable (comma-separated seconds, e.g. "1,2,4,8,16") overrides it.
READ_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)
READ_RETRY_ENV = "ELECTRA_CHECKPOINT_READ_RETRY_SECS"


def is_damage(error: BaseException) -> bool:
  """Whether a read error proves the checkpoint's files are damaged (truncated, garbled, a
  checksum mismatch), as opposed to a transient or access error that a retry may cure."""
  if isinstance(error, IndexError | tf.errors.DataLossError | tf.errors.OutOfRangeError):
    return True  # OutOfRange / IndexError: "Read less bytes than requested", a short file
  if not isinstance(error, tf.errors.OpError):
    return False
  text = _WRAPPER.sub("", getattr(error, "message", None) or str(error))
  return bool(_DAMAGE.search(text))


def _cause(error: BaseException) -> str:
  """``UnavailableError: HTTP 503`` (the type only where it says more than OpError)."""
  name = type(error).__name__
  summary = tf_error_summary(error)
  return summary if name in ("OpError", "IndexError") else f"{name}: {summary}"


@contextlib.contextmanager
def _reading(path: str, what: str) -> Iterator[None]:
  """Turns TensorFlow's read errors inside the block into one-line errors naming ``what`` and
  ``path``: CorruptCheckpointError on proof of damage (see is_damage), CheckpointUnavailableError
  for any other read error (OpError, OSError). InvalidArgumentError (a shape or dtype mismatch,
  the caller's) and FileNotFoundError (the reader's answer: no checkpoint there) pass through.
  """
  try:
    yield
  except (tf.errors.InvalidArgumentError, FileNotFoundError):  # the caller's, not the storage's
    raise
  except (tf.errors.OpError, IndexError, OSError) as e:
    if is_damage(e):
      raise CorruptCheckpointError(f"{what} {path} is corrupt or truncated "
                                   f"(TensorFlow: {tf_error_summary(e)})") from None
    raise CheckpointUnavailableError(
        f"{what} {path} could not be read ({_cause(e)}); nothing was moved; rerun when "
        "the storage answers") from None


def read_retry_delays() -> tuple[float, ...]:
  """The waits before each retry of a failed checkpoint read (READ_RETRY_ENV overrides)."""
  text = os.environ.get(READ_RETRY_ENV)
  if text is None:
    return READ_RETRY_DELAYS
  try:
    delays = tuple(float(t) for t in text.split(",") if t.strip())
  except ValueError:
    delays = (-1.0,)
  if any(not d >= 0 for d in delays):
    raise ValueError(f"{READ_RETRY_ENV}={text!r}: expected comma-separated seconds >= 0, "
                     "e.g. 0.5,1,2,4")
  return delays


T = TypeVar("T")


def read_retried(path: str, read: Callable[[], T], what: str = "checkpoint") -> T:
  """``read()``, tried again after each of read_retry_delays() while it fails without proof of
  damage (e.g. a cloud bucket's 503): CorruptCheckpointError at once, CheckpointUnavailableError
  (naming ``what`` and ``path``, the error, and how often it was tried) if every try failed.
  The one way this package reads a checkpoint or lists a model folder on a run's start, resume
  or initialisation, so a transient error never passes for an absent or damaged file."""
  delays = read_retry_delays()
  for delay in delays:
    try:
      with _reading(path, what):
        return read()
    except CheckpointUnavailableError:
      time.sleep(delay)
  try:
    with _reading(path, what):
      return read()
  except CheckpointUnavailableError as e:
    if not delays:
      raise
    tries = f"{len(delays) + 1} tries over {sum(delays):g} s"
    message = str(e).replace(" could not be read (", f" could not be read in {tries} (", 1)
    raise CheckpointUnavailableError(message) from None


def is_folder(path: str) -> bool:
  """tf.io.gfile.isdir, but a read error raises (isdir answers False for a 503 too)."""
  try:
    return tf.io.gfile.stat(path).is_directory
  except (tf.errors.NotFoundError, tf.errors.FailedPreconditionError):  # no such path, or a
    return False  # file on the way to it


def list_folder(folder: str) -> list[str] | None:
  """The names in ``folder`` (no trailing ``/``), or None when there is no such folder; read
  with read_retried. tf.io.gfile.listdir says NotFound for any failure of its own is-a-folder
  test: a folder that is there after all makes that a read error (retried), not an absence."""
  def names() -> list[str] | None:
    try:
      return [n.rstrip("/") for n in tf.io.gfile.listdir(folder)]
    except tf.errors.NotFoundError:
      if is_folder(folder):
        raise
      return None
  return read_retried(folder, names, what="folder")


# A TensorFlow index file is an SSTable: a 48-byte footer ending in this magic number
# (little-endian); an index cut short by a crash or a copy in place does not end in it.
TABLE_MAGIC = (0xdb4775248b80fb57).to_bytes(8, "little")
FOOTER_BYTES = 48
_NUMBERED = re.compile(r"^(.+)-(\d+)\.index$")  # <name>-<N>.index: ckpt-8, model.ckpt-1000
_SHARD_RE = re.compile(r"\.data-\d+-of-(\d+)$")


def index_tail(index_path: str) -> bytes | None:
  """The last 8 bytes of an index file, read once; None when it is missing or shorter than a
  footer (or the read returned fewer bytes)."""
  try:
    with tf.io.gfile.GFile(index_path, "rb") as f:
      size = f.size()
      if size < FOOTER_BYTES:
        return None
      f.seek(size - len(TABLE_MAGIC))
      tail = f.read(len(TABLE_MAGIC))
  except tf.errors.NotFoundError:
    return None
  return tail if len(tail) == len(TABLE_MAGIC) else None


def has_all_shards(names: set[str], stem: str) -> bool:
  """Whether ``names`` hold every data shard of ``stem`` (one shard's name gives the count)."""
  shards = [n for n in names if n.startswith(stem + ".data-")]
  counts = {int(c.group(1)) for c in map(_SHARD_RE.search, shards) if c}
  return len(counts) == 1 and len(shards) == counts.pop()


def newest_whole(folder: str, names: set[str]) -> str | None:
  """The prefix of the newest numbered checkpoint (``<name>-<N>``) among ``names`` (the
  folder's listing) whose index ends in its footer and whose data shards are all there; read
  once (call it inside read_retried)."""
  found = []
  for name in names:
    m = _NUMBERED.match(name)
    if m and has_all_shards(names, m.group(1) + "-" + m.group(2)):
      found.append((int(m.group(2)), os.path.join(folder, name[:-len(".index")])))
  for _, prefix in sorted(found, reverse=True):
    if index_tail(prefix + ".index") == TABLE_MAGIC:
      return prefix
  return None
