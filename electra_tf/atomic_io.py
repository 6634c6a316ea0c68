"""Atomic writes: a file or a folder appears whole under its final name, or not at all.

Every writer here writes a hidden temporary sibling (``.<name>.tmp-<id>``) and renames it into
place, so a kill or an error leaves the old content (or nothing) and at worst a hidden
leftover, which a later successful write of the same name removes. Temporary names are unique
across hosts (``<pid>-<host key>-<random>``, the key from this boot and PID namespace): a
leftover of this host is removed once its process is gone; any other (another host's, or a
name without a key) only once it has not been modified for longer than the lock's lease, so a
live writer elsewhere is never touched; a folder under a run's lock is cleaned only by the
process holding it (``may_clean``, set by folder_lock.py). The final file gets the
mode the umask gives a newly created file (``tempfile.mkstemp`` alone would leave 0600, and a
shared model would not be readable by another account). Local paths use ``os``; other file
systems (``gs://`` ...) go through ``tf.io.gfile``.

Durable on local paths, the way databases commit: the temporary file (every file of a staged
folder, and the folder) is fsynced before the rename, and the parent folder after it, so once a
write returns, a power cut leaves the new content; before that, the old one. Not promised:
remote file systems (``tf.io.gfile`` has no fsync: a bucket's write is durable when it returns,
by the service's word), and a disk or virtual disk that acknowledges an fsync it did not
perform.

    write_text(path, text); write_bytes(path, data); write_json(path, obj)
    with temp_path(path) as tmp: library_that_writes_a_file(tmp)   # e.g. safetensors, PNG
    with staged_dir(output_dir) as stage: write files into stage   # replaces it whole
    finish_swap(output_dir)   # a staged_dir swap a kill interrupted, finished before reading
    with scratch_dir(path) as tmp: write several files, then move them into place
    remove_tree(path); move_aside(path)   # a folder gone whole; kept under another name
    fsync_file(path); fsync_dir(folder); fsync_tree(folder)   # for other writers' files
    make_dirs(folder)   # created, its parents fsynced
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

TMP = ".tmp-"  # in a temporary name: .<name>.tmp-<pid>-<host key>-<random>
write_checks: list[Callable[[str], None]] = []  # called with a path before it is replaced


def unlocked(folder: str) -> bool:
  """Whether no run's lock (``.run.lock``, folder_lock.py) covers ``folder`` (in it or in its
  parent): only a lock's holder cleans leftovers there."""
  exists = _gfile().exists if _remote(folder) else os.path.exists
  return not any(exists(os.path.join(d, ".run.lock")) for d in (folder, os.path.dirname(folder)))


may_clean: list[Callable[[str], bool]] = [unlocked]  # folder_lock: also under the locks it holds


def _remote(path: str) -> bool:
  return "://" in path


def _gfile():
  import tensorflow as tf  # only for non-local paths: local writes need no TensorFlow

  return tf.io.gfile


_PROC_STATUS = "/proc/self/status"  # Linux: holds "Umask:\t0022"


def _umask() -> int:
  """The process umask, read without changing it: ``os.umask(0)`` then back would give a file
  another thread creates in between mode 0666. Linux reports it in /proc (kernel >= 4.7);
  elsewhere a probe file is created in the temp folder and its mode read."""
  try:
    with open(_PROC_STATUS, encoding="ascii") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except (OSError, ValueError, IndexError):
    pass
  probe = os.path.join(tempfile.gettempdir(), f".umask-probe-{os.getpid()}-{uuid.uuid4().hex}")
  fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o777)
  try:
    return 0o777 & ~stat.S_IMODE(os.fstat(fd).st_mode)
  finally:
    os.close(fd)
    os.remove(probe)


def umask_mode(directory: bool = False) -> int:
  """The mode the process umask gives a new file (0o666 base) or folder (0o777 base)."""
  return (0o777 if directory else 0o666) & ~_umask()


def fsync_file(path: str) -> None:
  """Flushes a local file's content to the disk (no-op on remote paths)."""
  if _remote(path):
    return
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def fsync_dir(path: str) -> None:
  """Flushes a local folder's entries (names created, renamed, removed) to the disk; a file
  system that cannot fsync a folder (EINVAL) is skipped. No-op on remote paths."""
  if _remote(path):
    return
  fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
  try:
    os.fsync(fd)
  except OSError as e:
    if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
      raise
  finally:
    os.close(fd)


def fsync_tree(path: str) -> None:
  """fsyncs every file under a local folder, then each folder, deepest first."""
  if _remote(path):
    return
  for root, _, files in os.walk(path, topdown=False):
    for name in files:
      fsync_file(os.path.join(root, name))
    fsync_dir(root)


def _host_key() -> str:
  """8 hex digits naming this boot and PID namespace (a pid means something only there)."""
  ids = ["", ""]
  with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
    ids[0] = f.read().strip()
  with contextlib.suppress(OSError):
    ids[1] = str(os.stat("/proc/self/ns/pid").st_ino)
  return hashlib.sha1("/".join(ids).encode()).hexdigest()[:8]


_HOST = _host_key()


def _temp_name(path: str) -> str:
  parent, name = os.path.split(path)
  return os.path.join(parent, f".{name}{TMP}{os.getpid()}-{_HOST}-{uuid.uuid4().hex[:8]}")


LEASE_ENV = "ELECTRA_LOCK_LEASE_SECONDS"
DEFAULT_LEASE = 60.0


def lease_seconds() -> float:
  """How long a lock may go unrenewed before another run takes it over, and so how long a
  leftover of another host is kept ($ELECTRA_LOCK_LEASE_SECONDS, default 60)."""
  try:
    value = float(os.environ.get(LEASE_ENV, DEFAULT_LEASE))
  except ValueError:
    return DEFAULT_LEASE
  return value if value > 0 else DEFAULT_LEASE


def _writer_alive(suffix: str, modified: float | None) -> bool:
  """Whether the temp name's writer (``<pid>-<host key>-...``) may still write it: another
  live process of this host (not this one: its own are left by its failed writes), or a writer
  elsewhere (another host key) whose file changed within the lock's lease
  ($ELECTRA_LOCK_LEASE_SECONDS, default 60 s). A name without a key (``<pid>-<random>``, as
  earlier versions wrote) is judged by its pid here."""
  parts = suffix.split("-")
  pid = parts[0]
  if len(parts) >= 3 and parts[1] != _HOST:
    return modified is None or time.time() - modified < lease_seconds()
  if not pid.isdigit():
    return False
  if int(pid) == os.getpid():
    return False  # this process's own: an earlier write of it that failed, or staged_dir's old
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except OSError:  # alive, another user's
    return True
  return True


def _modified(fs, path: str) -> float | None:
  try:
    return fs.stat(path).mtime_nsec / 1e9 if fs else os.stat(path).st_mtime
  except Exception:  # noqa: BLE001 -- gone meanwhile
    return None


def remove_leftovers(path: str, keep: str | None = None) -> list[str]:
  """Deletes hidden ``.<name>.tmp-<pid>...`` siblings of ``path`` left by killed writes (not
  ``keep``, nor those a writer may still be writing: see ``_writer_alive``; nothing in a folder
  another process's lock covers); returns them."""
  parent, name = os.path.split(path.rstrip("/"))
  parent = parent or "."
  prefix = f".{name}{TMP}"
  fs = _gfile() if _remote(path) else None
  try:
    names = fs.listdir(parent) if fs else os.listdir(parent)
  except (OSError, Exception):  # noqa: BLE001 -- a missing parent has no leftovers
    return []
  if not all(check(parent) for check in may_clean):
    return []
  removed = []
  for entry in names:
    entry = entry.rstrip("/")
    leftover = os.path.join(parent, entry)
    if (not entry.startswith(prefix) or leftover == keep
        or _writer_alive(entry[len(prefix):], _modified(fs, leftover))):
      continue
    if fs:
      (fs.rmtree if fs.isdir(leftover) else fs.remove)(leftover)
    elif os.path.isdir(leftover):
      shutil.rmtree(leftover, ignore_errors=True)
    else:
      with contextlib.suppress(FileNotFoundError):
        os.remove(leftover)
    removed.append(leftover)
  return removed


@contextlib.contextmanager
def temp_path(path: str) -> Iterator[str]:
  """Yields a temporary sibling path to write ``path``'s content to; on success it becomes
  ``path`` (umask mode), on an exception it is deleted and ``path`` is left as it was."""
  tmp = _temp_name(path)
  try:
    yield tmp
    if _remote(path):
      for check in write_checks:  # e.g. this run lost its folder's lock: nothing is replaced
        check(path)
      _gfile().rename(tmp, path, overwrite=True)
    else:
      fsync_file(tmp)
      os.chmod(tmp, umask_mode())
      for check in write_checks:  # right before the rename: a pause in the fsync is seen
        check(path)
      os.replace(tmp, path)
      fsync_dir(os.path.dirname(path))
  except BaseException:
    with contextlib.suppress(Exception):
      if _remote(path):
        _gfile().remove(tmp)
      elif os.path.exists(tmp):
        os.remove(tmp)
    raise
  remove_leftovers(path)


def write_bytes(path: str, data: bytes) -> None:
  """Writes ``data`` to ``path`` atomically."""
  with temp_path(path) as tmp:
    if _remote(path):
      with _gfile().GFile(tmp, "wb") as f:
        f.write(data)
    else:
      with open(tmp, "wb") as f:
        f.write(data)


def write_text(path: str, text: str) -> None:
  """Writes ``text`` (UTF-8) to ``path`` atomically."""
  write_bytes(path, text.encode("utf-8"))


def write_json(path: str, obj: Any, **dumps_kwargs: Any) -> None:
  """Writes ``json.dumps(obj, **dumps_kwargs)`` and a newline to ``path`` atomically."""
  write_text(path, json.dumps(obj, **dumps_kwargs) + "\n")


def copy_file(src: str, path: str) -> None:
  """Copies ``src`` to ``path`` atomically (local paths)."""
  with temp_path(path) as tmp:
    shutil.copyfile(src, tmp)


_STAGED = ".staged"  # .<name>.staged: a staged folder complete and fsynced, not yet in place


def _staged_name(path: str) -> str:
  parent, name = os.path.split(path)
  return os.path.join(parent, f".{name}{_STAGED}")


def finish_swap(output_dir: str) -> bool:
  """Finishes the swap a kill interrupted in ``staged_dir``: a complete staged copy
  (``.<name>.staged``) replaces ``output_dir``, which is moved to a hidden leftover first if
  it is still there. Returns whether there was one. Never leaves ``output_dir`` without a
  whole copy: the staged one is whole before it gets that name."""
  output_dir = output_dir.rstrip("/") or output_dir
  fs, staged = _gfile(), _staged_name(output_dir)
  if not fs.exists(staged):
    return False
  if fs.exists(output_dir):
    fs.rename(output_dir, _temp_name(output_dir))  # a leftover, removed below
  fs.rename(staged, output_dir)
  fsync_dir(os.path.dirname(output_dir) or ".")
  remove_leftovers(output_dir)
  return True


@contextlib.contextmanager
def staged_dir(output_dir: str) -> Iterator[str]:
  """Yields a fresh hidden sibling folder; on success it replaces ``output_dir`` whole (the old
  one, if any, is deleted) and leftovers of earlier killed writes are removed. On an exception
  the sibling is deleted and ``output_dir`` is left as it was. The complete sibling is renamed
  to ``.<name>.staged`` before the old folder moves, so a kill between the renames is finished
  by the next write or ``finish_swap`` (never both copies taken for leftovers)."""
  output_dir = output_dir.rstrip("/") or output_dir
  fs = _gfile()
  parent = os.path.dirname(output_dir) or "."
  for check in write_checks:  # e.g. this run lost its folder's lock: nothing is written
    check(output_dir)
  fs.makedirs(parent)
  finish_swap(output_dir)
  stage = _temp_name(output_dir)
  fs.makedirs(stage)
  try:
    yield stage
  except BaseException:
    with contextlib.suppress(Exception):
      fs.rmtree(stage)
    raise
  try:
    for check in write_checks:
      check(output_dir)
  except BaseException:
    with contextlib.suppress(Exception):
      fs.rmtree(stage)
    raise
  fsync_tree(stage)
  fs.rename(stage, _staged_name(output_dir))
  fsync_dir(parent)
  finish_swap(output_dir)


def make_dirs(path: str) -> None:
  """Creates the folder ``path`` and its missing parents; on local paths each new folder's
  parent is fsynced after, so the folder (and what is written in it) survives a power cut."""
  if _remote(path):
    _gfile().makedirs(path)
    return
  missing, folder = [], os.path.abspath(path)
  while not os.path.isdir(folder) and folder != os.path.dirname(folder):
    missing.append(folder)
    folder = os.path.dirname(folder)
  os.makedirs(path, exist_ok=True)
  for folder in reversed(missing):
    fsync_dir(os.path.dirname(folder))


@contextlib.contextmanager
def scratch_dir(path: str) -> Iterator[str]:
  """Yields a fresh hidden folder beside ``path`` (local), named as ``path``'s temporaries are,
  so one a killed writer left is removed by the next ``remove_leftovers(path)``; deleted when
  the block ends. For writers that move several files into place themselves."""
  stage = _temp_name(path)
  os.makedirs(stage)
  try:
    yield stage
  finally:
    shutil.rmtree(stage, ignore_errors=True)


def remove_tree(path: str) -> None:
  """Deletes the folder ``path`` so that a kill leaves it whole or gone: it is renamed to a
  hidden temporary sibling first, then deleted; the hidden folder of an earlier killed deletion
  is removed too."""
  if _remote(path):
    if _gfile().exists(path):
      _gfile().rmtree(path)
    return
  if os.path.isdir(path):
    doomed = _temp_name(path)
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
  remove_leftovers(path)


def move_aside(path: str, tag: str = "rejected") -> str:
  """Renames the file or folder ``path`` to ``<path>.<tag>-<n>`` (the first free n), so what a
  run will not use is kept for inspection, never deleted; returns the new name."""
  fs = _gfile() if _remote(path) else None
  exists = fs.exists if fs else os.path.lexists
  base, n = path.rstrip("/"), 1
  while exists(f"{base}.{tag}-{n}"):
    n += 1
  (fs.rename if fs else os.rename)(base, f"{base}.{tag}-{n}")
  return f"{base}.{tag}-{n}"
