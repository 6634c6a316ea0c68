"""One run per model folder (electra_tf/folder_lock.py): a second run is refused in one line
naming the first (by whatever path it reaches the folder, from whatever PID namespace), a
SIGKILLed run's lock is taken over at once, a lock nobody renews (another host, another boot, a
copy, an unreadable one) once its lease lapses, with one line; the lock goes away after a clean
run. The lease is set to a few seconds ($ELECTRA_LOCK_LEASE_SECONDS)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers import procs
from helpers.paths import HELPERS, REPO_ROOT

from electra_tf import atomic_io, folder_lock, lock_lease

LEASE = 3.0
TOY = HELPERS / "toy_train.py"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1", lock_lease.LEASE_ENV: str(LEASE)}
REPO = REPO_ROOT


@pytest.fixture(autouse=True)
def _short_lease(monkeypatch):
  monkeypatch.setenv(lock_lease.LEASE_ENV, str(LEASE))


def _toy(model_dir: pathlib.Path, *args: str) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, str(TOY), "--model_dir", str(model_dir), *args],
                          env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120) -> None:
  deadline = time.monotonic() + timeout
  while not predicate():
    assert proc.poll() is None, proc.communicate()
    assert time.monotonic() < deadline, "timed out"
    time.sleep(0.1)


def _lock(folder: pathlib.Path, **fields) -> pathlib.Path:
  """A lock nobody renews, by default of this host, boot and PID namespace (pid 1, start 0)."""
  folder.mkdir(parents=True, exist_ok=True)
  path = folder / folder_lock.LOCK_NAME
  holder = {"host": socket.gethostname(), "pid": 1, "start": "0", "boot": lock_lease.boot_id(),
            "pidns": lock_lease.pid_namespace(), "since": "2026-01-02 03:04:05 UTC",
            "command": "python run_pretraining.py x", "run": "other",
            "folder": str(folder.resolve()), **fields}
  path.write_text(json.dumps(holder))
  return path


def test_a_second_run_is_refused_and_a_killed_runs_lock_taken_over(tmp_path):
  model_dir = tmp_path / "run"
  lock = model_dir / folder_lock.LOCK_NAME
  first = _toy(model_dir, "--num_train_steps", "100000", "--step_sleep", "0.02")
  try:
    _wait_for(lambda: list(model_dir.glob("ckpt-10.index")), first)
    holder = json.loads(lock.read_text())
    assert holder["pid"] == first.pid
    second = _toy(model_dir, "--num_train_steps", "5")
    out, err = second.communicate(timeout=300)
    assert second.returncode == 1, (out, err)
    command = holder["command"]  # its first 57 characters and "..." when longer than 60
    command = command if len(command) <= 60 else command[:57] + "..."
    assert err.splitlines() == [
        f"toy_train.py: error: {model_dir} is in use by another run (host "
        f"{socket.gethostname()}, pid {first.pid}, since {holder['since']}, command: "
        f"{command}); wait for it to end or stop it"], err
    assert "toy_train.py --model_dir" in holder["command"]
    assert first.poll() is None  # the first one trains on, its checkpoints untouched
    first.send_signal(signal.SIGKILL)
  finally:
    procs.finish(first)
  assert json.loads(lock.read_text())["pid"] == first.pid  # a SIGKILL leaves the lock
  third = _toy(model_dir, "--num_train_steps", "5")
  out, err = third.communicate(timeout=300)
  assert third.returncode == 0, (out, err)
  assert (f"Took over the lock {lock} of a run that ended without releasing it (host "
          f"{socket.gethostname()}, pid {first.pid}, since {holder['since']}") in out
  assert not lock.exists()  # released by the clean exit


@pytest.mark.parametrize("other", [{"host": "node-7"}, {"boot": "another-boot"},
                                   {"pidns": "4026531999"}], ids=["host", "boot", "pidns"])
def test_a_lock_nobody_renews_lapses_and_one_renewed_is_refused(tmp_path, capsys, other):
  """Another hostname (a preempted VM), another boot id (a cloned VM), another PID namespace:
  the holder's process cannot be judged here; its lease can."""
  path = tmp_path / "run" / folder_lock.LOCK_NAME
  with procs.renewed_lock(path, **other):
    started = time.monotonic()
    with pytest.raises(folder_lock.FolderLockedError) as err:
      folder_lock.acquire(str(tmp_path / "run"))
    assert time.monotonic() - started < LEASE  # refused at its first renewal
  assert str(err.value) == (
      f"{tmp_path}/run is in use by another run (host {other.get('host', socket.gethostname())}"
      f", pid {os.getpid()}, since 2026-01-02 03:04:05 UTC, command: python run_pretraining.py "
      "x); wait for it to end or stop it")
  assert json.loads(path.read_text())["run"] == "other"  # never taken
  capsys.readouterr()
  started = time.monotonic()  # its holder stopped renewing: the lease lapses
  line = folder_lock.acquire(str(tmp_path / "run"))
  try:
    assert time.monotonic() - started >= LEASE
    holder = f"host {other.get('host', socket.gethostname())}, pid {os.getpid()}, since "
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path}/run: waiting up to {LEASE:.0f} s for the lease of {holder}2026-01-02 "
        "03:04:05 UTC, command: python run_pretraining.py x to lapse"]
    assert line == (f"Took over the lock {path} of a run that did not renew its lease for "
                    f"{LEASE:.0f} s ({holder}2026-01-02 03:04:05 UTC, command: python "
                    "run_pretraining.py x)")
    assert json.loads(path.read_text())["run"] == lock_lease.RUN_ID
  finally:
    folder_lock.release(str(tmp_path / "run"))


def test_a_live_holder_is_refused_and_a_reused_pid_is_not_taken_for_it(tmp_path):
  parent = os.getppid()
  start = lock_lease.proc_start(parent)
  with procs.renewed_lock(tmp_path / "live" / folder_lock.LOCK_NAME, pid=parent, start=start):
    with pytest.raises(folder_lock.FolderLockedError, match="is in use by another run"):
      folder_lock.acquire(str(tmp_path / "live"))
  _lock(tmp_path / "reused", pid=parent, start=str(int(start) + 1))  # same pid, other process
  started = time.monotonic()
  note = folder_lock.acquire(str(tmp_path / "reused"))
  assert time.monotonic() - started < 1  # provably dead: at once, no lease to wait for
  assert note.startswith(f"Took over the lock {tmp_path}/reused/{folder_lock.LOCK_NAME} of a run "
                         "that ended without releasing it")
  assert json.loads((tmp_path / "reused" / folder_lock.LOCK_NAME).read_text())["pid"] == (
      os.getpid())
  assert folder_lock.acquire(str(tmp_path / "reused")) is None  # again: this process's
  folder_lock.release(str(tmp_path / "reused"))
  assert not (tmp_path / "reused" / folder_lock.LOCK_NAME).exists()


def test_a_takeover_in_progress_elsewhere_is_not_joined(tmp_path, monkeypatch):
  path = _lock(tmp_path / "run", pid=2**22 + 1)  # dead
  guard = tmp_path / "run" / (folder_lock.LOCK_NAME + ".takeover")
  guard.write_text("0")
  monkeypatch.setattr(folder_lock, "_TRIES", 3)
  looks = []

  def busy(folder):  # another run's takeovers, one after another: the guard keeps changing
    looks.append(1)
    guard.write_text(str(len(looks)))

  monkeypatch.setattr(folder_lock.time, "sleep", busy)
  with pytest.raises(folder_lock.FolderLockedError, match=r"\.takeover stayed unreadable or busy"):
    folder_lock.acquire(str(tmp_path / "run"))
  assert json.loads(path.read_text())["run"] == "other"


def test_a_takeover_guard_left_by_a_killed_run_lapses_with_the_lease(tmp_path, capsys):
  path = _lock(tmp_path / "run", pid=2**22 + 1)  # dead: taken over at once but for the guard
  guard = tmp_path / "run" / (folder_lock.LOCK_NAME + ".takeover")
  guard.write_text('{"run": "killed mid-takeover"}')
  started = time.monotonic()
  note = folder_lock.acquire(str(tmp_path / "run"))
  took = time.monotonic() - started
  assert LEASE <= took < LEASE + 2, took
  assert note.startswith(f"Took over the lock {path} of a run that ended without releasing it")
  assert note.endswith(f"its takeover guard {guard.name}, unchanged for {LEASE:.0f} s (a run "
                       "stopped mid-takeover), removed")
  assert capsys.readouterr().out == ""  # the one line is the caller's to print
  assert lock_lease.mine(json.loads(path.read_text())) and not guard.exists()
  folder_lock.release(str(tmp_path / "run"))


def test_restart_does_not_move_a_folder_another_run_uses(tmp_path):
  from electra_tf.training import restart

  model_dir = tmp_path / "run"
  with procs.renewed_lock(model_dir / folder_lock.LOCK_NAME):
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    (model_dir / "ckpt-2_temp").mkdir()  # a save killed mid-write: the holder's to remove
    (model_dir / "ckpt-2_temp" / "part-00000-of-00001.data-00000-of-00001").write_text("x")
    with pytest.raises(folder_lock.FolderLockedError, match="is in use by another run"):
      restart.move_aside(str(model_dir))
  assert (model_dir / "checkpoint").exists() and (model_dir / "ckpt-2_temp").exists()
  (model_dir / folder_lock.LOCK_NAME).unlink()  # that run ended, releasing it
  assert restart.move_aside(str(model_dir)) == f"{model_dir}.before-restart-1"
  assert sorted(os.listdir(tmp_path / "run.before-restart-1")) == ["checkpoint"]  # nothing partial
  assert not [p for p in folder_lock.held() if p.startswith(str(model_dir))]


def test_a_ctrl_c_stop_releases_the_lock(tmp_path):
  model_dir = tmp_path / "run"
  proc = _toy(model_dir, "--num_train_steps", "100000", "--step_sleep", "0.02")
  try:
    _wait_for(lambda: list(model_dir.glob("ckpt-10.index")), proc)
    assert (model_dir / folder_lock.LOCK_NAME).exists()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.communicate()
  assert proc.returncode == 128 + signal.SIGINT, (out, err)
  assert "interrupted at step" in err
  assert not (model_dir / folder_lock.LOCK_NAME).exists()


_STARTER = """
import sys, time
from electra_tf import folder_lock
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all start at once
try:
  folder_lock.acquire(sys.argv[1])
  print("got", flush=True)
  time.sleep(3)
except folder_lock.FolderLockedError:
  print("refused", flush=True)
"""


@pytest.mark.parametrize("dead_holder", [False, True])
def test_of_runs_starting_at_once_exactly_one_gets_the_lock(tmp_path, dead_holder):
  folder = tmp_path / "run"
  if dead_holder:
    _lock(folder, pid=2**22 + 1)
  at = time.time() + 1.5
  starters = [subprocess.Popen([sys.executable, "-c", _STARTER, str(folder), str(at)],
                               cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True) for _ in range(6)]
  said = sorted(procs.finish(p).strip() for p in starters)
  assert said == ["got"] + ["refused"] * 5, said
  assert not (folder / folder_lock.LOCK_NAME).exists()  # released at exit


def _other_process_acquires(folder: pathlib.Path) -> str:
  return subprocess.run([sys.executable, "-c", _STARTER, str(folder), "0"], cwd=REPO,
                        capture_output=True, text=True, check=True).stdout.strip()


def test_a_lock_copied_with_its_folder_is_a_lock_nobody_renews(tmp_path):
  """`cp -r` of a folder a live run holds: the copy's lock lapses, the original is renewed."""
  original = tmp_path / "run"
  assert folder_lock.acquire(str(original)) is None
  copy = tmp_path / "copy"
  shutil.copytree(original, copy)
  started = time.monotonic()
  out = _other_process_acquires(copy)
  assert out == "got" and time.monotonic() - started >= LEASE, out
  assert _other_process_acquires(original).startswith("refused"), "the original lost its lock"
  folder_lock.release(str(original))


@pytest.mark.parametrize("damage", [b"", b'{"host": "vm", "pi'])
def test_a_lock_a_power_cut_left_unreadable_is_taken_over_with_one_line(tmp_path, damage):
  folder = tmp_path / "run"
  folder.mkdir()
  (folder / folder_lock.LOCK_NAME).write_bytes(damage)  # empty, or cut short
  started = time.monotonic()
  line = folder_lock.acquire(str(folder))
  try:
    assert line is not None and line.startswith(f"Took over the lock {folder}/.run.lock, left "
                                                f"unreadable ({len(damage)} bytes)"), line
    assert "\n" not in line and LEASE <= time.monotonic() - started < LEASE + 2
    assert json.loads((folder / folder_lock.LOCK_NAME).read_text())["pid"] == os.getpid()
  finally:
    folder_lock.release(str(folder))


def test_a_second_pretraining_run_is_refused_in_its_first_line(tmp_path, monkeypatch):
  # A lease far longer than a loaded machine's pauses: the refusal must not hang on a renewal
  # that came late (nothing here waits for the lease to lapse).
  monkeypatch.setenv(lock_lease.LEASE_ENV, "60")
  model_dir = tmp_path / "models" / "m"  # nothing else: the refusal comes before any reading
  folder_lock.acquire(str(model_dir))  # held by this (live) process
  try:
    done = subprocess.run([sys.executable, str(REPO / "run_pretraining.py"),
                           "--data_dir", str(tmp_path), "--model_name", "m"],
                          env={**ENV, lock_lease.LEASE_ENV: "60"}, capture_output=True,
                          text=True, timeout=300)
  finally:
    folder_lock.release(str(model_dir))
  lines = (done.stdout + done.stderr).strip().splitlines()
  assert done.returncode == 1 and len(lines) == 1, lines
  assert lines[0].startswith(f"run_pretraining.py: error: {model_dir} is in use by another run "
                             f"(host {socket.gethostname()}, pid {os.getpid()},"), lines


_HOLDER = """
import sys, time
from electra_tf import folder_lock
folder_lock.acquire(sys.argv[1])
print("got", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _unshare_permitted(*flags: str) -> bool:
  return subprocess.run(["unshare", *flags, "true"], capture_output=True).returncode == 0


def test_a_second_run_through_a_bind_mount_is_refused_and_touches_nothing(tmp_path):
  """The same folder by another path (another host's mount, a container's): refused while the
  first run renews its lease; its save in progress is not cleaned away."""
  if not _unshare_permitted("-m"):
    pytest.skip("unshare -m is not permitted here (needs root or user namespaces)")
  model_dir, mount = tmp_path / "run", tmp_path / "mnt"
  mount.mkdir()
  first = _toy(model_dir, "--num_train_steps", "100000", "--step_sleep", "0.02")
  try:
    _wait_for(lambda: list(model_dir.glob("ckpt-10.index")), first)
    saving = model_dir / "ckpt-99999_temp"  # a save of the first run, in progress
    saving.mkdir()
    (saving / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    second = subprocess.run(
        ["unshare", "-m", "sh", "-c", 'mount --bind "$1" "$2" && exec "$3" "$4" --model_dir "$2" '
         "--num_train_steps 5", "sh", str(model_dir), str(mount), sys.executable, str(TOY)],
        env=ENV, capture_output=True, text=True, timeout=300)
    assert second.returncode == 1, (second.stdout, second.stderr)
    assert second.stderr.splitlines()[-1].startswith(
        f"toy_train.py: error: {mount} is in use by another run (host {socket.gethostname()}, "
        f"pid {first.pid}, "), second.stderr
    assert saving.exists() and first.poll() is None
    assert json.loads((model_dir / folder_lock.LOCK_NAME).read_text())["pid"] == first.pid
  finally:
    first.kill()
    procs.finish(first)


def test_a_holder_in_another_pid_namespace_is_not_taken_over_while_it_renews(tmp_path):
  """Same host, other PID namespace (hostNetwork pods): its pid means nothing here."""
  if not _unshare_permitted("-pf", "--mount-proc"):
    pytest.skip("unshare -pf --mount-proc is not permitted here (needs root)")
  folder = tmp_path / "run"
  holder = subprocess.Popen(["unshare", "-pf", "--mount-proc", sys.executable, "-c", _HOLDER,
                             str(folder), str(2 * LEASE)], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    assert holder.stdout.readline().strip() == "got"
    before = json.loads((folder / folder_lock.LOCK_NAME).read_text())
    assert before["pidns"] != lock_lease.pid_namespace() and before["pid"] < 10
    with pytest.raises(folder_lock.FolderLockedError, match="is in use by another run"):
      folder_lock.acquire(str(folder))
    assert json.loads((folder / folder_lock.LOCK_NAME).read_text())["run"] == before["run"]
  finally:
    procs.finish(holder)
  assert holder.returncode == 0


def test_a_run_that_cannot_see_the_holders_process_decides_before_it_prints(tmp_path, capsys):
  """check_free, called before a run prints anything: a renewed lock of another PID namespace
  is refused after the one waiting line; one that lapses is left to acquire, which takes it
  over at once (the lease was watched already)."""
  with procs.renewed_lock(tmp_path / "live" / folder_lock.LOCK_NAME, pidns="4026531999"):
    with pytest.raises(folder_lock.FolderLockedError, match="is in use by another run"):
      folder_lock.check_free(str(tmp_path / "live"))
  assert capsys.readouterr().out.splitlines() == [
      f"{tmp_path}/live: waiting up to {LEASE:.0f} s for the lease of host "
      f"{socket.gethostname()}, pid {os.getpid()}, since 2026-01-02 03:04:05 UTC, command: "
      "python run_pretraining.py x to lapse"]
  _lock(tmp_path / "lapsed", pidns="4026531999")
  started = time.monotonic()
  folder_lock.check_free(str(tmp_path / "lapsed"))
  assert LEASE <= time.monotonic() - started < LEASE + 1.5
  started = time.monotonic()
  note = folder_lock.acquire(str(tmp_path / "lapsed"))
  assert time.monotonic() - started < 1 and note.startswith("Took over the lock")
  assert len(capsys.readouterr().out.splitlines()) == 1  # check_free's line only
  folder_lock.release(str(tmp_path / "lapsed"))


def test_the_new_holder_removes_what_killed_writes_left_in_its_folder(tmp_path):
  """A stale lock kept every write from cleaning the folder (only a holder may): the run that
  takes the lock removes the temp files of dead writers at the top of it, and nothing else."""
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    (model_dir / folder_lock.LOCK_NAME).write_text(json.dumps(
        {"run": "gone", "beat": 1, "host": socket.gethostname(), "pid": int(dead)}))
    key = atomic_io._HOST
    left = [f".hparams.json.tmp-{dead}-{key}-0a1b2c3d", f".tasks.json.tmp-{dead}-{key}-1a1b2c3d"]
    kept = [f".vocab.txt.tmp-{live.pid}-{key}-2a1b2c3d", ".notes", "hparams.json", "x.tmp-1"]
    for name in left + kept:
      (model_dir / name).write_text("x")
    assert not atomic_io.unlocked(str(model_dir))  # before: the stale lock kept them
    folder_lock.acquire(str(model_dir))
    assert sorted(os.listdir(model_dir)) == sorted(kept + [folder_lock.LOCK_NAME])
    folder_lock.release(str(model_dir))
  finally:
    live.kill()
    live.wait()
