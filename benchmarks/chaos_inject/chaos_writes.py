"""Writes as a fault sees them (imported by sitecustomize.py in a run with such a fault only): a
full disk (``full_disk``, an ENOSPC fault inside an atomic write), and the write journal of an
"unsynced cut": every file this process opens for writing, each fsync (of a file or a folder)
and each rename is appended to the events file, and a file about to be overwritten or replaced
is first copied to a shadow folder, so that after the SIGKILL the harness can put every write
that was not yet durable back to its last durable state (benchmarks/chaos_power.py).
Python-level writes only (``open``, ``os.open``, ``os.rename`` / ``os.replace``, ``os.fsync``):
what the package writes itself; TensorFlow's own C++ writes (checkpoints) are not seen.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import itertools
import os
import shutil
import threading

_SHADOW_MAX = 64 << 20  # bytes: a bigger file overwritten is not copied (never in these runs)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_inside = threading.local()  # this module's own file operations are not recorded
_count = itertools.count()


def start(event, shadow_dir: str) -> None:
  """Records every write of this process from now on with ``event(**fields)``."""
  real_open, real_os_open = builtins.open, os.open
  real_rename, real_replace, real_fsync = os.rename, os.replace, os.fsync
  os.makedirs(shadow_dir, exist_ok=True)

  def shadow(path: str) -> str | None:
    """A copy of ``path`` as it is now (before this write changes it), or None."""
    try:
      if not os.path.isfile(path) or os.path.getsize(path) > _SHADOW_MAX:
        return None
      copy = os.path.join(shadow_dir, str(next(_count)))
      _inside.on = True
      try:
        shutil.copyfile(path, copy)
      finally:
        _inside.on = False
      return copy
    except OSError:
      return None

  def opened(path, writing: bool) -> None:
    if not writing or getattr(_inside, "on", False) or not isinstance(path, (str, os.PathLike)):
      return
    path = os.path.abspath(os.fspath(path))
    existed = os.path.lexists(path)
    event(ev="w", path=path, new=not existed, shadow=shadow(path) if existed else None)

  def open_(file, mode="r", *args, **kwargs):
    opened(file, any(c in mode for c in "wax+"))
    return real_open(file, mode, *args, **kwargs)

  def os_open(path, flags, *args, **kwargs):
    opened(path, bool(flags & _WRITE_FLAGS))
    return real_os_open(path, flags, *args, **kwargs)

  def renamer(real):
    def rename(src, dst, *args, **kwargs):
      if not getattr(_inside, "on", False):
        dst_abs = os.path.abspath(os.fspath(dst))
        event(ev="rename", src=os.path.abspath(os.fspath(src)), dst=dst_abs,
              shadow=shadow(dst_abs))
      return real(src, dst, *args, **kwargs)
    return rename

  def fsync(fd):
    result = real_fsync(fd)
    try:
      event(ev="fsync", path=os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
      pass
    return result

  builtins.open = open_
  os.open, os.rename, os.replace, os.fsync = os_open, renamer(real_rename), renamer(
      real_replace), fsync


class _ShortWrite:
  """A file whose first write stores half its bytes, then raises OSError ENOSPC."""

  def __init__(self, f):
    self._f = f

  def write(self, data):
    self._f.write(data[:len(data) // 2])
    self._f.flush()
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._f.name)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return self._f.__exit__(*exc)

  def __getattr__(self, name):
    return getattr(self._f, name)


@contextlib.contextmanager
def full_disk():
  """Within the block, files opened for writing run out of space in their first write."""
  real = builtins.open

  def short_open(file, mode="r", *args, **kwargs):
    f = real(file, mode, *args, **kwargs)
    return _ShortWrite(f) if any(c in mode for c in "wax") else f

  builtins.open = short_open
  try:
    yield
  finally:
    builtins.open = real
