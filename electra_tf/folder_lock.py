"""One run per model folder: a lock file that a run holds on its folder for as long as it writes.

`acquire(folder)` creates `<folder>/.run.lock` naming the run (a random run id, its host,
process id, start date and command line; lock_lease.py) and renews it as a lease: a beat every
`lease / 6` s, the lease 60 s by default (`ELECTRA_LOCK_LEASE_SECONDS`). A second run on the
folder, by whatever path it reaches it (a bind mount, another host's mount), is refused with
one line naming the holder once it sees the lease renewed. A lock that is not renewed for the
lease, as the waiting run's own clock measures it, has lapsed wherever it was written (another
host, a preempted VM, another PID namespace, a paused process, a copy made by `cp -r`): the
waiting run says it waits, then takes it over with one line. One fast path, as before: a lock
written on this boot and in this PID namespace whose process (pid and start time) is gone is
taken over at once. A holder whose lease was taken stops before its next write in the folder
(lock_lease.check_write, `LostLockError`), with one line.

Locally the lock is created whole (written and fsynced under a temporary name, then hard-linked
to its name, which fails if it exists; `O_CREAT | O_EXCL` where hard links are not supported,
then read back: a holder paused between its create and its write is taken over only once the
lease lapses, and learns it), so two starters never both get it. A takeover replaces the lock
by a rename, only while holding `<lock>.takeover` (created with `O_EXCL`, held for a few
milliseconds), and only if the lock still is the one that lapsed: of two starters, one takes it
and the other is refused. A guard left by a run killed mid-takeover is judged as a lock: once
it stays unchanged for the lease it is removed and the takeover goes on (its line says so).
The lock is released (deleted, if it still is this process's) at the process's normal exit, on
an error, on a stop by SIGINT / SIGTERM (`release_all`, also before the at-once exit of a
multi-worker stop); a SIGKILL or a second Ctrl-C leaves it, and the next run takes it over (at
once on this host, after the lease elsewhere).

Remote folders (`gs://` ...) have no exclusive create through `tf.io.gfile`: the lock is
written when absent, read back after a settle time (`_SETTLE`), and kept only if it still is
this run's, so two runs started within one settle time of each other both see one winner,
except when a write takes longer than the settle time to show (the window that remains).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import time

from electra_tf import atomic_io, lock_lease
from electra_tf.lock_lease import LostLockError, describe, mine, read

__all__ = ["LOCK_NAME", "FolderLockedError", "LostLockError", "acquire", "check_free",
           "check_held", "held", "release", "release_all"]

LOCK_NAME = ".run.lock"
_at_exit = []  # [True] once release_all is registered
_TRIES = 100  # lock gone meanwhile, or a takeover held by another run: how many looks
_SETTLE = 1.0  # s: remote create and takeover are read back this long after the write
_guards: dict[str, tuple[bytes | None, float]] = {}  # takeover guard -> (content, first seen)
_cleared: list[str] = []  # what the takeover line adds when a lapsed guard was removed
_watched: dict[str, tuple[bytes, float]] = {}  # lock -> (content, since): lapsed in check_free


class FolderLockedError(FileExistsError):
  """The folder is locked by another run (the message names it)."""


def _say(line: str) -> None:
  print(line, flush=True)


def _write_temp(path: str) -> str:
  tmp = atomic_io._temp_name(path)
  with open(tmp, "wb") as f:
    f.write(lock_lease.content(path))
    f.flush()
    os.fsync(f.fileno())
  return tmp


def _create(path: str) -> bool:
  """Creates the lock whole if it does not exist; whether it did (and still is this run's)."""
  if "://" in path:
    fs = atomic_io._gfile()
    if fs.exists(path):
      return False
    lock_lease.write_whole(path, lock_lease.content(path))
    time.sleep(_SETTLE)  # a starter that wrote at the same time: the last write wins
    return mine(read(path)[0])
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
      f.write(lock_lease.content(path))
      f.flush()
      os.fsync(f.fileno())
    holder, _ = read(path)
    if not mine(holder):  # paused past the lease between the create and the write
      raise LostLockError(lock_lease.lost_line(path, describe(holder))) from None
  finally:
    with contextlib.suppress(OSError):
      os.remove(tmp)
  atomic_io.fsync_dir(os.path.dirname(path))
  return True


def _guard_lapsed(guard: str) -> bool | None:
  """Judges a takeover guard another run holds by the lease, as a lock: True when it stayed the
  same for the lease (this run's clock; its run was killed mid-takeover) and was removed;
  None while it is watched; False when it changed or went (a takeover under way)."""
  try:
    with open(guard, "rb") as f:
      raw = f.read()
  except FileNotFoundError:
    _guards.pop(guard, None)
    return False
  seen = _guards.get(guard)
  if seen is None or seen[0] != raw:
    _guards[guard] = (raw, time.monotonic())
    return None if seen is None else False
  if time.monotonic() - seen[1] < lock_lease.lease_seconds():
    return None
  with open(guard, "rb") as f:  # the last look, right before it goes
    if f.read() != raw:
      return False
  os.remove(guard)
  _guards.pop(guard, None)
  return True


def _take_over(path: str, raw: bytes) -> bool | None:
  """Replaces the lapsed lock (content `raw`) by this run's; False when another run holds the
  takeover or changed the lock meanwhile (the caller looks again); None while a takeover guard
  left unchanged is watched for the lease (taken over, with the lock, once it lapses)."""
  if "://" in path:
    if read(path)[1] != raw:
      return False
    lock_lease.write_whole(path, lock_lease.content(path))
    time.sleep(_SETTLE)
    return mine(read(path)[0])
  guard = path + ".takeover"
  try:
    fd = os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, atomic_io.umask_mode())
  except FileExistsError:
    lapsed = _guard_lapsed(guard)
    if not lapsed:
      return lapsed
    _cleared.append(f"; its takeover guard {os.path.basename(guard)}, unchanged for "
                    f"{lock_lease.lease_seconds():.0f} s (a run stopped mid-takeover), removed")
    return _take_over(path, raw)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(lock_lease.content(path))
    if read(path)[1] != raw:
      return False
    os.replace(_write_temp(path), path)
    atomic_io.fsync_dir(os.path.dirname(path))
    return True
  finally:
    os.remove(guard)


def _fresh_here(path: str, holder: dict) -> bool:
  """A live holder of this boot whose lock changed within the lease (this host's clock)."""
  if "://" in path or not lock_lease.alive_here(holder):
    return False
  try:
    return time.time() - os.stat(path).st_mtime < lock_lease.lease_seconds()
  except OSError:
    return False


def acquire(folder: str) -> str | None:
  """Takes the lock of `folder` (created if missing) for this process until it exits (or
  `release_all`); returns a line to log when it took over a lapsed lease, else None. Waits up
  to the lease for a lock that is not provably dead (one line says so unless its holder runs
  on this host); FolderLockedError (one line) when the lease is renewed meanwhile."""
  path = os.path.join(folder, LOCK_NAME)
  if "://" in folder:
    atomic_io._gfile().makedirs(folder)
  else:
    os.makedirs(folder, exist_ok=True)
  lease = lock_lease.lease_seconds()
  poll = min(0.25, lease / 20) if "://" not in folder else min(1.0, lease / 10)
  (watched, since), tries = _watched.pop(path, (None, 0.0)), 0
  _cleared.clear()
  while tries < _TRIES:
    if _create(path):
      _hold(path)
      return None
    holder, raw = read(path)
    if raw is None:  # released meanwhile
      tries += 1
      continue
    if mine(holder):
      _hold(path)
      return None
    if holder is not None and lock_lease.provably_dead(holder):
      taken = _take_over(path, raw)
      if taken:
        _hold(path)
        return (f"Took over the lock {path} of a run that ended without releasing it "
                f"({describe(holder)}){''.join(_cleared[-1:])}")
      tries += taken is not None
      time.sleep(0.05 if taken is not None else poll)
      continue
    if raw != watched:
      if watched is not None and holder is not None:  # renewed, or taken by another run
        raise _in_use(folder, holder)
      if watched is not None:  # being rewritten (a remote write shows in parts): look again
        tries += 1
        time.sleep(poll)
        continue
      watched, since = raw, time.monotonic()
      if holder is None or not _fresh_here(path, holder):
        _say(f"{folder}: waiting up to {lease:.0f} s for the lease of "
             f"{describe(holder) if holder else f'an unreadable lock ({len(raw)} bytes)'} "
             f"to lapse")
    elif time.monotonic() - since >= lease:
      taken = _take_over(path, raw)
      if taken:
        _hold(path)
        if holder is None:  # a power cut on a disk that lost it, or a crash mid-create
          return (f"Took over the lock {path}, left unreadable ({len(raw)} bytes) by a run "
                  f"that ended without releasing it{''.join(_cleared[-1:])}")
        return (f"Took over the lock {path} of a run that did not renew its lease for "
                f"{lease:.0f} s ({describe(holder)}){''.join(_cleared[-1:])}")
      tries += taken is not None
    time.sleep(poll)
  busy = path + ".takeover" if os.path.exists(path + ".takeover") else path
  raise FolderLockedError(f"{folder}: the lock {busy} stayed unreadable or busy for "
                          f"{_TRIES} looks; if no other run uses the folder, clear it with "
                          f"`rm {busy}` and rerun")


def check_free(folder: str) -> None:
  """Raises the FolderLockedError ``acquire`` would raise, before the run prints anything, so
  that a second run is refused in its first line: at once when a live run of this host holds
  `folder`'s lock and renewed it within the lease; after watching the lease (one line says
  so) when the holder cannot be judged by its process (another PID namespace, boot or host)
  and renews it. A lock that lapses meanwhile is left to ``acquire``, which takes it over
  without watching it again; remote locks are left to ``acquire``."""
  path = os.path.join(folder, LOCK_NAME)
  holder, raw = read(path)
  if raw is None or mine(holder):
    return
  if holder is not None and _fresh_here(path, holder):
    raise _in_use(folder, holder)
  if "://" in folder or (holder is not None and lock_lease.provably_dead(holder)):
    return
  lease = lock_lease.lease_seconds()
  _say(f"{folder}: waiting up to {lease:.0f} s for the lease of "
       f"{describe(holder) if holder else f'an unreadable lock ({len(raw)} bytes)'} to lapse")
  since = time.monotonic()
  while time.monotonic() - since < lease:
    time.sleep(min(0.25, lease / 20))
    now, now_raw = read(path)
    if now_raw != raw:
      if now is not None and not mine(now):  # renewed, or taken by another run
        raise _in_use(folder, now)
      return  # released meanwhile: acquire creates it
  _watched[path] = (raw, since)


def check_held(target: str) -> None:
  """Raises LostLockError (one line) before a write to `target` when it lies in a folder
  whose lease this process lost (see lock_lease.check_write)."""
  lock_lease.check_write(target)


def _in_use(folder: str, holder: dict | None) -> FolderLockedError:
  return FolderLockedError(f"{folder} is in use by another run ({describe(holder)}); wait "
                           "for it to end or stop it")


def _may_clean(folder: str) -> bool:
  """Whether this process may remove leftovers in `folder`: under a lock it holds, or where no
  run's lock covers it (atomic_io.unlocked)."""
  folder = folder.rstrip("/")
  for path in list(lock_lease.held):
    locked = os.path.dirname(path)
    if folder == locked or folder.startswith(locked + "/"):
      return True
  return atomic_io.unlocked(folder)


atomic_io.write_checks.append(check_held)
atomic_io.may_clean[:] = [_may_clean]


def _remove_leftovers_in(folder: str) -> None:
  """The new holder cleans the top of its folder: the temporary files killed writes left there
  (the lock files of killed starters included), each as atomic_io.remove_leftovers judges."""
  with contextlib.suppress(OSError):
    hidden = [n for n in os.listdir(folder) if n.startswith(".") and atomic_io.TMP in n[1:]]
    for name in sorted({n[1:n.index(atomic_io.TMP, 1)] for n in hidden}):
      atomic_io.remove_leftovers(os.path.join(folder, name))


def _hold(path: str) -> None:
  lock_lease.hold(path)
  if "://" not in path:
    _remove_leftovers_in(os.path.dirname(path))
  if not _at_exit:
    atexit.register(release_all)
    _at_exit.append(True)


def release(folder: str) -> None:
  """Releases this process's lock of `folder` (deleted if it still is this process's)."""
  path = os.path.join(folder, LOCK_NAME)
  with lock_lease.mutex:
    lock_lease.held.pop(path, None)
    lock_lease.lost.pop(path, None)
    holder, _ = read(path)
    if not mine(holder):
      return  # gone with its folder, or taken over
    with contextlib.suppress(Exception):
      if "://" in path:
        atomic_io._gfile().remove(path)
      else:
        os.remove(path)
        atomic_io.fsync_dir(folder)


def release_all() -> None:
  """Releases every lock this process holds (at exit, and before an at-once exit)."""
  for path in sorted(lock_lease.held):
    release(os.path.dirname(path))


def held() -> list[str]:
  """The lock files this process holds."""
  return sorted(lock_lease.held)

