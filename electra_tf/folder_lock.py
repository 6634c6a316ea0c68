"""One run per model folder: a lock file that a run holds on its folder for as long as it writes.

`acquire(folder)` creates `<folder>/.run.lock` holding the run's host, process id, process
start time (Linux: `/proc/<pid>/stat`, so a reused id is not taken for the holder), boot id,
start date, command line and the folder's real path (a lock copied along with the folder, by
`cp -r`, is no lock on the copy: it is replaced). A second run on the folder is refused with
one line naming the holder. A lock whose holder is dead on this host (killed, SIGKILLed, a
crash, a reboot) is taken over, with one line. A lock from another host is never taken: this
host cannot tell whether that run still goes on; the line names it and the `rm` command that
clears it. A lock that stays unreadable and unchanged for 2 s (empty or cut short: a power cut
on a disk that lost it, or a crash in the middle of an exclusive create) is damaged, not being
written, and is taken over the same way, with one line.

Locally the lock is created whole (written and fsynced under a temporary name, then hard-linked
to its name, which fails if it exists; `O_CREAT | O_EXCL` where hard links are not supported),
so two starters never both get it. A takeover replaces the dead holder's lock by a rename,
only while holding `<lock>.takeover` (created with `O_EXCL`, held for a few milliseconds), and
only if the lock still is the dead holder's: of two starters, one takes it over and the other
is refused. The lock is released (deleted, if it still is this process's) at the process's
normal exit, on an error, on a stop by SIGINT / SIGTERM (`release_all`, also before the
at-once exit of a multi-worker stop); a SIGKILL or a second Ctrl-C leaves it, and the next run
on this host takes it over. A process that trains in a folder and goes on (a notebook, a
library caller) holds its lock until it exits or calls `release(folder)`.

Remote folders (`gs://` ...) have no exclusive create through `tf.io.gfile`: the lock is
written when absent and read back, so a run started while another one holds it is refused,
but two runs started within the time of one write may both go on. A holder's liveness is
checked only on its own host, as locally.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import shlex
import socket
import sys
import time
import uuid

from electra_tf import atomic_io

LOCK_NAME = ".run.lock"
_TOKEN = uuid.uuid4().hex  # this process's locks; the same process may acquire one again
_held: set[str] = set()  # lock files this process holds
_at_exit = []  # [True] once release_all is registered
_TRIES = 100  # of 0.05 s: how long a lock being created or taken over by another run is awaited
_DAMAGED_TRIES = 40  # of 0.05 s: a lock unreadable and unchanged this long is damaged


class FolderLockedError(FileExistsError):
  """The folder is locked by another run (the message names it)."""


def _proc_start(pid: int) -> str | None:
  """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or
  None when it does not exist (or /proc is not there)."""
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
      return f.read().rsplit(")", 1)[1].split()[19]
  except (OSError, IndexError):
    return None


def _boot_id() -> str:
  try:
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
      return f.read().strip()
  except OSError:
    return ""


def _where(path: str) -> str:
  """The folder a lock file `path` locks, as the lock records it."""
  folder = os.path.dirname(path)
  return folder if "://" in folder else os.path.realpath(folder)


def _me(path: str) -> dict[str, str | int | None]:
  return {"folder": _where(path), "host": socket.gethostname(), "pid": os.getpid(),
          "start": _proc_start(os.getpid()),
          "boot": _boot_id(), "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
          "command": shlex.join([os.path.basename(sys.executable), *sys.argv]),
          "token": _TOKEN}


def _alive_here(holder: dict) -> bool:
  """Whether the holder (a lock of this host) is a running process."""
  if holder.get("boot") and _boot_id() and holder["boot"] != _boot_id():
    return False  # written before a reboot
  pid = holder.get("pid")
  if not isinstance(pid, int) or pid <= 0:
    return False
  if os.path.isdir("/proc/self"):
    start = _proc_start(pid)
    return start is not None and (holder.get("start") is None or start == holder["start"])
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except OSError:  # alive, another user's
    return True
  return True


def _describe(holder: dict) -> str:
  command = str(holder.get("command", "?"))
  command = command if len(command) <= 60 else command[:57] + "..."
  return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, since "
          f"{holder.get('since', '?')}, command: {command}")


def _read(path: str) -> tuple[dict | None, bytes | None]:
  """(the parsed holder or None if unreadable, the raw bytes or None if there is no lock)."""
  try:
    if "://" in path:
      with atomic_io._gfile().GFile(path, "rb") as f:
        raw = f.read()
    else:
      with open(path, "rb") as f:
        raw = f.read()
  except Exception:  # noqa: BLE001 -- gone (released meanwhile) or unreadable
    return None, None
  try:
    holder = json.loads(raw)
  except ValueError:
    return None, raw
  return (holder if isinstance(holder, dict) else None), raw


def _content(path: str) -> bytes:
  return (json.dumps(_me(path), sort_keys=True) + "\n").encode("utf-8")


def _write_temp(path: str) -> str:
  tmp = atomic_io._temp_name(path)
  with open(tmp, "wb") as f:
    f.write(_content(path))
    f.flush()
    os.fsync(f.fileno())
  return tmp


def _create(path: str) -> bool:
  """Creates the lock whole if it does not exist; whether it did."""
  tmp = _write_temp(path)
  try:
    os.link(tmp, path)
  except FileExistsError:
    return False
  except OSError as e:  # no hard links on this file system: an exclusive create
    if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
      raise
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, atomic_io.umask_mode())
    except FileExistsError:
      return False
    with os.fdopen(fd, "wb") as f:
      f.write(_content(path))
      f.flush()
      os.fsync(f.fileno())
  finally:
    with contextlib.suppress(OSError):
      os.remove(tmp)
  atomic_io.fsync_dir(os.path.dirname(path))
  return True


def _take_over(path: str, raw: bytes) -> bool:
  """Replaces the dead holder's lock (content `raw`) by this run's; False when another run
  holds the takeover or changed the lock meanwhile (the caller looks again)."""
  guard = path + ".takeover"
  try:
    fd = os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, atomic_io.umask_mode())
  except FileExistsError:
    return False
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(_content(path))
    if _read(path)[1] != raw:
      return False
    os.replace(_write_temp(path), path)
    atomic_io.fsync_dir(os.path.dirname(path))
    return True
  finally:
    os.remove(guard)


def acquire(folder: str) -> str | None:
  """Takes the lock of `folder` (created if missing) for this process until it exits (or
  `release_all`); returns a line to log when it took over a dead run's lock, else None.
  FolderLockedError (one line) when another run holds it. The same process may call it again."""
  path = os.path.join(folder, LOCK_NAME)
  if "://" in folder:
    return _acquire_remote(folder, path)
  os.makedirs(folder, exist_ok=True)
  unreadable = 0  # looks in a row at the same unreadable lock
  last = None
  for _ in range(_TRIES):
    if _create(path):
      _hold(path)
      return None
    holder, raw = _read(path)
    if raw is None:  # released meanwhile
      continue
    unreadable = unreadable + 1 if holder is None and raw == last else 0
    last = raw if holder is None else None
    if holder is None and unreadable >= _DAMAGED_TRIES and _take_over(path, raw):
      _hold(path)  # not being written (a lock is created whole): damaged, by a power cut on
      return (f"Took over the lock {path}, left unreadable ({len(raw)} bytes) by a run "  # a
              "that ended without releasing it")  # disk that lost it, or a crash mid-create
    if holder is None:  # being written (no hard links) or damaged
      time.sleep(0.05)
      continue
    if holder.get("token") == _TOKEN:
      _hold(path)
      return None
    if holder.get("folder", _where(path)) != _where(path):  # copied with the folder
      if _take_over(path, raw):
        _hold(path)
        return None
      time.sleep(0.05)
      continue
    if holder.get("host") != socket.gethostname():
      raise _foreign(folder, path, holder)
    if _alive_here(holder):
      raise _in_use(folder, holder)
    if _take_over(path, raw):
      _hold(path)
      return (f"Took over the lock {path} of a run that ended without releasing it "
              f"({_describe(holder)})")
    time.sleep(0.05)
  busy = path + ".takeover" if os.path.exists(path + ".takeover") else path
  raise FolderLockedError(f"{folder}: the lock {busy} stayed unreadable or busy for "
                          f"{_TRIES * 0.05:.0f} s; if no other run uses the folder, clear it with "
                          f"`rm {busy}` and rerun")


def check_free(folder: str) -> None:
  """Raises the FolderLockedError ``acquire`` would raise when another run holds `folder`'s
  lock (alive on this host, or on another host); reads only. A run calls it before it prints
  anything, so that a second run is refused in its first line; ``acquire`` still takes the
  lock (and decides: a dead holder, a damaged or copied lock are left to it)."""
  path = os.path.join(folder, LOCK_NAME)
  holder, _ = _read(path)
  if holder is None or holder.get("token") == _TOKEN:
    return
  if holder.get("folder", _where(path)) != _where(path):  # copied with the folder
    return
  if holder.get("host") != socket.gethostname():
    raise _foreign(folder, path, holder)
  if _alive_here(holder):
    raise _in_use(folder, holder)


def _in_use(folder: str, holder: dict) -> FolderLockedError:
  return FolderLockedError(f"{folder} is in use by another run ({_describe(holder)}); wait "
                           "for it to end or stop it")


def _foreign(folder: str, path: str, holder: dict) -> FolderLockedError:
  return FolderLockedError(
      f"{folder} is locked by a run on another host ({_describe(holder)}); this host cannot "
      f"tell whether it still runs: if it has ended, clear the lock with `rm {path}` and rerun")


def _acquire_remote(folder: str, path: str) -> str | None:
  """The lock on a remote file system: written when absent, read back (see the module doc)."""
  fs = atomic_io._gfile()
  fs.makedirs(folder)
  note = None
  holder, raw = _read(path)
  if raw is not None and (holder or {}).get("token") != _TOKEN:
    if holder is None or holder.get("host") != socket.gethostname():
      raise _foreign(folder, path, holder or {})
    if _alive_here(holder):
      raise _in_use(folder, holder)
    note = (f"Took over the lock {path} of a run that ended without releasing it "
            f"({_describe(holder)})")
  if raw is None or note:
    with fs.GFile(path, "wb") as f:
      f.write(_content(path))
  holder, _ = _read(path)
  if (holder or {}).get("token") != _TOKEN:
    raise FolderLockedError(f"{folder} is in use by another run, started at the same time "
                            f"({_describe(holder or {})}); wait for it to end or stop it")
  _hold(path)
  return note


def _hold(path: str) -> None:
  if "://" not in path:
    atomic_io.remove_leftovers(path)  # the temporary lock files of killed starters
  if not _at_exit:
    atexit.register(release_all)
    _at_exit.append(True)
  _held.add(path)


def release(folder: str) -> None:
  """Releases this process's lock of `folder` (deleted if it still is this process's)."""
  path = os.path.join(folder, LOCK_NAME)
  _held.discard(path)
  holder, _ = _read(path)
  if (holder or {}).get("token") != _TOKEN:
    return  # gone with its folder, or taken over
  with contextlib.suppress(Exception):
    if "://" in path:
      atomic_io._gfile().remove(path)
    else:
      os.remove(path)
      atomic_io.fsync_dir(folder)


def release_all() -> None:
  """Releases every lock this process holds (at exit, and before an at-once exit)."""
  for path in sorted(_held):
    release(os.path.dirname(path))


def held() -> list[str]:
  """The lock files this process holds."""
  return sorted(_held)
