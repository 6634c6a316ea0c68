"""Reading checkpoints and model folders from storage that may fail: errors sorted by kind
(proof of damage, or a read that may succeed later), reads retried before they count, folder
listings, and which checkpoint files are whole. The one way this package reads a checkpoint or
lists a model folder on a run's start, resume or initialisation (re-exported by checkpoints).
"""

from __future__ import annotations

import contextlib
import errno
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


class CheckpointAccessError(CheckpointUnavailableError):
  """A read error no retry cures (a permission, a read-only or missing folder, an I/O error of
  a local disk): raised at once, naming the file and what to do; nothing is moved."""


class _ShortRead(CheckpointUnavailableError):
  """A read that returned fewer bytes than the file holds: retried (a network read can be cut
  short), damage only when every try is short."""


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
  checksum mismatch), as opposed to a transient or access error that a retry may cure. A
  short read (is_short_read) counts only once retries saw it every time (read_retried)."""
  if isinstance(error, IndexError | tf.errors.DataLossError | tf.errors.OutOfRangeError):
    return True
  if not isinstance(error, tf.errors.OpError):
    return False
  text = _WRAPPER.sub("", getattr(error, "message", None) or str(error))
  return bool(_DAMAGE.search(text))


def is_short_read(error: BaseException) -> bool:
  """OutOfRange / IndexError / "Read less bytes than requested": fewer bytes than asked, from
  a file cut short or from a network read cut short."""
  text = getattr(error, "message", None) or str(error)
  return (isinstance(error, IndexError | tf.errors.OutOfRangeError)
          or "read less bytes" in text.lower())


def permanent_advice(error: BaseException, path: str) -> str | None:
  """What to do about a read error that no retry cures, or None for one that may pass: a
  permission (EACCES, EPERM), a read-only file system (EROFS), a missing folder on the way to
  a local ``path`` (ENOENT of a parent), an I/O error of a local disk (EIO: a bad sector)."""
  code = getattr(error, "errno", None)
  text = (getattr(error, "message", None) or str(error)).lower()
  local = "://" not in path
  if (isinstance(error, tf.errors.PermissionDeniedError) or code in (errno.EACCES, errno.EPERM)
      or "permission denied" in text):
    return "permission denied: make it readable by this account (chmod, chown), then rerun"
  if code == errno.EROFS or "read-only file system" in text:
    return "the file system is read-only: remount it writable or use another folder, then rerun"
  parent = os.path.dirname(path.rstrip("/")) or "."
  if (local and (isinstance(error, tf.errors.NotFoundError) or code == errno.ENOENT)
      and not os.path.isdir(parent)):
    return (f"the folder {parent} does not exist (moved, renamed or not mounted?): mount or "
            "restore it, or point the run at where the files are, then rerun")
  if local and (code == errno.EIO or "input/output error" in text):
    return ("the disk reported an I/O error (a bad sector?): copy what still reads elsewhere "
            "or restore the file from a copy, then rerun")
  return None


def _cause(error: BaseException) -> str:
  """``UnavailableError: HTTP 503`` (the type only where it says more than OpError)."""
  name = type(error).__name__
  summary = tf_error_summary(error)
  return summary if name in ("OpError", "IndexError") else f"{name}: {summary}"


@contextlib.contextmanager
def _reading(path: str, what: str) -> Iterator[None]:
  """Turns TensorFlow's read errors inside the block into one-line errors naming ``what`` and
  ``path``: CheckpointAccessError for a permanent error (permanent_advice), _ShortRead for a
  short read, CorruptCheckpointError on other proof of damage (see is_damage),
  CheckpointUnavailableError for any other read error (OpError, OSError). InvalidArgumentError
  (a shape or dtype mismatch, the caller's) and FileNotFoundError (the reader's answer: no
  checkpoint there) pass through.
  """
  try:
    yield
  except (tf.errors.InvalidArgumentError, FileNotFoundError):  # the caller's, not the storage's
    raise
  except (tf.errors.OpError, IndexError, OSError) as e:
    advice = permanent_advice(e, path)
    if advice:
      raise CheckpointAccessError(f"{what} {path} could not be read: {advice}; nothing was "
                                  "moved") from None  # the advice names the cause
    damage = (f"{what} {path} is corrupt or truncated (TensorFlow: {tf_error_summary(e)})")
    if is_short_read(e):
      raise _ShortRead(damage) from None
    if is_damage(e):
      raise CorruptCheckpointError(damage) from None
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
  damage (e.g. a cloud bucket's 503, a short read): CorruptCheckpointError at once (a short
  read once every try was short), CheckpointAccessError at once for a permanent error (see
  permanent_advice), CheckpointUnavailableError (naming ``what`` and ``path``, the error, and
  how often it was tried) if every try failed.
  The one way this package reads a checkpoint or lists a model folder on a run's start, resume
  or initialisation, so a transient error never passes for an absent or damaged file."""
  delays = read_retry_delays()
  for delay in delays:
    try:
      with _reading(path, what):
        return read()
    except CheckpointAccessError:
      raise
    except CheckpointUnavailableError:
      time.sleep(delay)
  try:
    with _reading(path, what):
      return read()
  except _ShortRead as e:  # short every time: the file is
    raise CorruptCheckpointError(str(e)) from None
  except CheckpointAccessError:
    raise
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
  """The last 8 bytes of an index file, read once; None when it is shorter than a footer.
  Raises NotFoundError when it is missing, OutOfRangeError when the read returned fewer bytes
  than asked (a short read): read_retried tries both again."""
  with tf.io.gfile.GFile(index_path, "rb") as f:
    size = f.size()
    if size < FOOTER_BYTES:
      return None
    f.seek(size - len(TABLE_MAGIC))
    tail = f.read(len(TABLE_MAGIC))
  if len(tail) < len(TABLE_MAGIC):
    raise tf.errors.OutOfRangeError(None, None, f"{index_path}: read less bytes than requested "
                                    f"({len(tail)} of {len(TABLE_MAGIC)})")
  return tail


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
