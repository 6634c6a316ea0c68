"""The lease behind a folder's lock (folder_lock.py): who holds it, its renewal, its loss.

A lock file names its holder by a random run id (`run`, one per process), with the host,
process id, process start time, boot id and PID namespace for the line that names it and for
one fast judgement: a holder on this boot and in this PID namespace whose process is gone
(`provably_dead`). The holder renews its lease: a daemon thread rewrites every lock this
process holds with a counter one higher (`beat`) every `lease_seconds() / 6` s (the whole file
is replaced, locally by a rename, remotely by one `tf.io.gfile` write, so a reader never sees
half of it). A lock whose content does not change for `lease_seconds()` s, as a waiting run's
own clock measures it (no clock of another host is compared), has lapsed: its holder is paused,
dead, on a preempted VM, or the lock was copied with its folder; folder_lock takes it over.

A holder whose lease was taken (its run id no longer in the file) learns it from its next beat
and from `check_write`, which every write into a held folder calls first (atomic_io's writes,
checkpoint saves): one line, `LostLockError`, and nothing more is written. The window left: a
holder paused between that check (or the beat's read) and its write, for longer than the lease,
writes once more after the takeover.

    ELECTRA_LOCK_LEASE_SECONDS=60 (the default; tests set ~3)
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import threading
import time
import uuid

from electra_tf import atomic_io

RUN_ID = uuid.uuid4().hex  # this process: the same process may acquire its lock again
# the lease and its variable live with the writer, which keeps other hosts' leftovers as long
LEASE_ENV, DEFAULT_LEASE, lease_seconds = (atomic_io.LEASE_ENV, atomic_io.DEFAULT_LEASE,
                                           atomic_io.lease_seconds)
held: dict[str, int] = {}  # lock file -> its last beat, for the locks this process holds
lost: dict[str, str] = {}  # lock file -> who holds it now, for the leases this process lost
mutex = threading.Lock()  # a beat's read and write against a release's delete
_thread: list[threading.Thread] = []


class LostLockError(FileExistsError):
  """This run's lease on its folder was taken by another run; nothing more is written."""


def proc_start(pid: int) -> str | None:
  """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or
  None when it does not exist (or /proc is not there)."""
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
      return f.read().rsplit(")", 1)[1].split()[19]
  except (OSError, IndexError):
    return None


def boot_id() -> str:
  try:
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
      return f.read().strip()
  except OSError:
    return ""


def pid_namespace() -> str:
  """The inode of this process's PID namespace ("" where /proc does not say)."""
  try:
    return str(os.stat("/proc/self/ns/pid").st_ino)
  except OSError:
    return ""


def content(path: str, beat: int = 0, since: str | None = None) -> bytes:
  """The lock file's bytes for this process (`path`: the lock file; `since`: when it took it,
  now by default)."""
  folder = os.path.dirname(path)
  me = {"run": RUN_ID, "beat": beat, "lease": lease_seconds(), "host": socket.gethostname(),
        "pid": os.getpid(), "start": proc_start(os.getpid()), "boot": boot_id(),
        "pidns": pid_namespace(),
        "folder": folder if "://" in folder else os.path.realpath(folder),
        "since": since or time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": shlex.join([os.path.basename(sys.executable), *sys.argv])}
  return (json.dumps(me, sort_keys=True) + "\n").encode("utf-8")


def read(path: str) -> tuple[dict | None, bytes | None]:
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


def mine(holder: dict | None) -> bool:
  return (holder or {}).get("run") == RUN_ID


def describe(holder: dict | None) -> str:
  holder = holder or {}
  command = str(holder.get("command", "?"))
  command = command if len(command) <= 60 else command[:57] + "..."
  return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, since "
          f"{holder.get('since', '?')}, command: {command}")


def _here(holder: dict) -> bool:
  """Whether the holder wrote its lock on this host and boot, in this PID namespace (its pid
  means a process here)."""
  return bool(holder.get("boot") and holder.get("boot") == boot_id() and holder.get("pidns")
              and holder.get("pidns") == pid_namespace()
              and holder.get("host") == socket.gethostname())


def _running(pid: object, start: object) -> bool:
  if not isinstance(pid, int) or pid <= 0:
    return False
  now = proc_start(pid)
  return now is not None and (start is None or now == start)


def provably_dead(holder: dict) -> bool:
  """A holder of this boot and PID namespace whose process (pid and start time) is gone."""
  return _here(holder) and not _running(holder.get("pid"), holder.get("start"))


def alive_here(holder: dict) -> bool:
  """A holder of this boot and PID namespace whose process runs (it may still be paused)."""
  return _here(holder) and _running(holder.get("pid"), holder.get("start"))


def write_whole(path: str, data: bytes) -> None:
  """Replaces the lock file's content at once (a reader sees the old or the new bytes)."""
  tmp = atomic_io._temp_name(path)
  if "://" in path:  # an object written whole, then renamed over the lock (copied whole on gs://)
    fs = atomic_io._gfile()
    try:
      with fs.GFile(tmp, "wb") as f:
        f.write(data)
      fs.rename(tmp, path, overwrite=True)
    finally:
      with contextlib.suppress(Exception):
        if fs.exists(tmp):
          fs.remove(tmp)
    return
  try:
    with open(tmp, "wb") as f:
      f.write(data)
    os.replace(tmp, path)
  finally:
    with contextlib.suppress(OSError):
      os.remove(tmp)


def renew(path: str) -> None:
  """One beat for the lock file `path`: rewritten with a higher counter while it is this
  process's; marked lost (and no longer renewed) when another run holds it or it is gone."""
  with mutex:
    if path not in held:
      return
    holder, raw = read(path)
    if not mine(holder):
      if raw is None and "://" not in path and not os.path.isdir(os.path.dirname(path)):
        held.pop(path)  # its folder was removed or moved: nothing left to hold
        return
      lost[path] = describe(holder) if holder else "a run that removed or replaced the lock"
      held.pop(path)
      return
    held[path] += 1
    with contextlib.suppress(Exception):  # a missed beat is retried at the next one
      write_whole(path, content(path, held[path], holder.get("since")))


def _beat_forever() -> None:
  while True:
    time.sleep(lease_seconds() / 6)
    for path in list(held):
      renew(path)


def hold(path: str) -> None:
  """Counts the lock file `path` as this process's and renews it from now on."""
  with mutex:
    held.setdefault(path, int((read(path)[0] or {}).get("beat", 0)))
    lost.pop(path, None)
  if not _thread or not _thread[0].is_alive():
    _thread[:] = [threading.Thread(target=_beat_forever, name="lock-lease", daemon=True)]
    _thread[0].start()


def lost_line(path: str, holder: str) -> str:
  return (f"this run lost its lock on {os.path.dirname(path)} to another run ({holder}); "
          "stopping without writing")


def check_write(target: str) -> None:
  """Raises LostLockError (one line) before a write to `target` when this process lost a lock
  it held: another run took it (or took and released it: the lock is gone while its folder is
  there). Every held lock is read (one small read each), wherever `target` lies: a run that
  lost its folder writes nothing more, its results and test outputs beside the folder
  included."""
  for path in list(lost):
    raise LostLockError(lost_line(path, lost[path]))
  for path in list(held):
    holder, raw = read(path)
    if mine(holder):
      continue
    if raw is None and ("://" in path or not os.path.isdir(os.path.dirname(path))):
      continue  # its folder was removed or moved (renew drops it): nothing left to hold
    who = describe(holder) if raw is not None else "a run that removed the lock"
    with mutex:
      held.pop(path, None)
      lost[path] = who
    raise LostLockError(lost_line(path, who))
