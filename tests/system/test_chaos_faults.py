"""The faults of shared storage and many hosts in the fault harness (benchmarks/chaos.py): a
second run by a bind mount or from another PID namespace, a paused holder, no hard links, a
persistent read error, a power cut that drops every unsynced write, a kill in a set-aside and a
fault on worker 1, each fired in a real process, and the checks that judge them."""

import json
import os
import sys

import pytest
import tensorflow as tf
from helpers.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import chaos_faults as faults  # noqa: E402
import chaos_power as power  # noqa: E402
import chaos_runs as runs  # noqa: E402

LOCKED = """import sys, time
from electra_tf import atomic_io, folder_lock
folder = sys.argv[sys.argv.index('--data-dir') + 1]
try:
  note = folder_lock.acquire(folder)
  print(note or 'holding', flush=True)
  atomic_io.write_text(folder + '/a.txt', 'first')
  atomic_io.write_text(folder + '/b.txt', 'second')
  time.sleep(float(sys.argv[-1]))
except (folder_lock.FolderLockedError, folder_lock.LostLockError) as e:
  sys.exit(f'locked.py: {e}')
"""


def _plan(fault: str, at: str, call: int = 1, when: str = "before", **more) -> dict:
  return {"fault": fault, "at": at, "call": call, "when": when, "delay": 0.0, "signal": None,
          "repeat": 1, **more}


def test_a_persistent_read_error_fails_every_read_of_one_checkpoint(tmp_path):
  for step in (1, 2):
    ckpt = tf.train.Checkpoint(v=tf.Variable(float(step)))
    ckpt.write(str(tmp_path / f"ckpt-{step}"))
  script = tmp_path / "reads.py"
  script.write_text(
      "import sys, tensorflow as tf\n"
      f"for prefix in ['ckpt-2', 'ckpt-2', 'ckpt-1', 'ckpt-2']:\n"
      "  try:\n"
      f"    tf.train.load_checkpoint({str(tmp_path)!r} + '/' + prefix); print(prefix, 'read')\n"
      "  except tf.errors.OpError as e:\n"
      "    print(prefix, type(e).__name__, e.message.split('; ')[-1])\n"
      "sys.exit('reads.py: ckpt-2 cannot be read (Input/output error); copy it back')\n")
  r = runs.run([sys.executable, str(script)], _plan("persistent read error", "ckpt_read",
                                                     error="EIO"), tmp_path / "e")
  assert faults.after_kill(r.output) == [
      "ckpt-2 UnknownError Input/output error", "ckpt-2 UnknownError Input/output error",
      "ckpt-1 read", "ckpt-2 UnknownError Input/output error",
      "reads.py: ckpt-2 cannot be read (Input/output error); copy it back"], r.output
  # the check: one line naming the file, status 1; never completed around it
  assert [p.split(":")[0] for p in faults.persistent_problems(r)] == [
      "persistent read error"]  # four lines of its own before the one line
  r.output = f"{runs.MARKER}\nreads.py: ckpt-2 cannot be read; copy it back\n"
  assert faults.persistent_problems(r) == []
  r.output = f"{runs.MARKER}\nreads.py: a checkpoint cannot be read\n"
  assert "does not name ckpt-2" in faults.persistent_problems(r)[0]
  r.returncode = 0
  assert "completed around" in faults.persistent_problems(r)[0]


def test_without_hard_links_the_lock_is_still_exclusive(tmp_path):
  """The run's os.link raises EPERM (as on a file system without hard links); the second run,
  with links refused too, is refused in one line naming the holder."""
  script = tmp_path / "locked.py"
  script.write_text(LOCKED)
  folder = tmp_path / "run"
  r = runs.run([sys.executable, str(script), "--data-dir", str(folder), "2"],
               _plan("no hard links", "atomic_write", when="after"), tmp_path / "e")
  assert r.returncode == 0, r.output
  assert any(e["ev"] == "reached" for e in r.events)  # os.link was called and refused
  assert any(e["ev"] == "reached" for e in r.second.events)
  assert faults.second_problems(r) == [], r.second.output


@pytest.mark.parametrize("fault", ["bind mount", "pid namespace"])
def test_a_second_run_by_another_path_or_pid_namespace_is_refused(tmp_path, fault):
  script = tmp_path / "locked.py"
  script.write_text(LOCKED)
  folder = tmp_path / "run"
  r = runs.run([sys.executable, str(script), "--data-dir", str(folder), "15"],
               _plan(fault, "atomic_write", when="after"), tmp_path / "e")
  assert r.returncode == 0 and r.second is not None, r.output
  cmd, _ = runs.second_of({"fault": fault}, ["x", "--data-dir", str(folder)], tmp_path / "e")
  assert cmd[0] == "unshare"
  lines = r.second.output.strip().splitlines()
  assert r.output.splitlines()[0] == "holding"
  assert lines[-1].startswith(f"locked.py: {folder if fault != 'bind mount' else tmp_path}")
  assert f"pid {r.pid}" in lines[-1] and "is in use by another run" in lines[-1]
  assert faults.second_problems(r) == []
  assert (folder / "b.txt").read_text() == "second"  # the first run's work intact


def test_the_second_run_of_another_pid_namespace_may_say_it_watches_the_lease():
  first = runs.Run(0, "", [], 1.0, False, pid=4242)
  first.second = runs.Run(1, "/m: waiting up to 60 s for the lease of host h, pid 4242 to lapse"
                          "\n/m is in use by another run (host h, pid 4242, ...)\n", [], 1.0,
                          False)
  assert faults.second_problems(first) == []
  first.second.output += "another line\n"
  assert "refused in 2 lines" in faults.second_problems(first)[0]


@pytest.mark.slow
def test_a_paused_holder_is_taken_over_and_then_writes_nothing(tmp_path, monkeypatch):
  """SIGSTOP before its second write past the lease: a second run takes the lock after the
  lease and completes; continued, the first stops with its one line and writes nothing."""
  monkeypatch.setattr(runs, "PAUSE_LEASE", 3)
  script = tmp_path / "locked.py"
  script.write_text(LOCKED)
  folder = tmp_path / "run"
  r = runs.run([sys.executable, str(script), "--data-dir", str(folder), "0"],
               _plan("paused holder", "atomic_write", call=2, signal="SIGSTOP"), tmp_path / "e")
  assert r.killed and r.second is not None, r.output
  assert faults.pause_problems(r) == [], (r.output, r.second.output)
  assert r.returncode == 1 and "lost its lock" in r.output
  assert "Took over the lock" in r.second.output
  r.wrote, r.returncode = ["b.txt"], 0
  assert [p.split(",")[0] for p in faults.pause_problems(r)] == [
      "paused holder: continued", "paused holder: continued"]


def test_an_unsynced_cut_drops_every_write_not_yet_durable(tmp_path):
  """A real process writes through the package's atomic writer (fsynced: kept) and in other
  ways (not fsynced: undone), then is SIGKILLed; the cut puts each file back to its last
  durable state."""
  folder = tmp_path / "run"
  folder.mkdir()
  (folder / "old.txt").write_text("durable")
  script = tmp_path / "writes.py"
  script.write_text(
      "import os, sys\nfrom electra_tf import atomic_io\n"
      f"d = {str(folder)!r}\n"
      "atomic_io.write_text(d + '/kept.txt', 'synced')\n"  # atomic_write #1
      "open(d + '/new.txt', 'w').write('never synced')\n"
      "with open(d + '/old.txt', 'w') as f:\n  f.write('overwritten'); f.flush(); "
      "os.fsync(f.fileno())\n"  # bytes synced, and the name already was
      "open(d + '/.tmp', 'w').write('renamed'); os.replace(d + '/.tmp', d + '/moved.txt')\n"
      "atomic_io.write_text(d + '/kept.txt', 'again')\n")  # killed before it (#2)
  r = runs.run([sys.executable, str(script)], _plan("unsynced cut", "atomic_write", call=2,
                                                    signal="SIGKILL"), tmp_path / "e")
  assert r.returncode == -9, r.output
  said = power.drop_unsynced(tmp_path / "e", folder)
  assert sorted(os.listdir(folder)) == ["kept.txt", "old.txt"], said
  assert (folder / "kept.txt").read_text() == "synced"
  assert (folder / "old.txt").read_text() == "overwritten"
  assert said.endswith(" 1 renames, 2 new names"), said  # moved.txt back to .tmp; both gone


def test_the_old_settings_must_be_kept_under_the_set_aside_names(tmp_path):
  home = tmp_path / "models"
  (home / "trial_1").mkdir(parents=True)
  (home / "trial_1" / "ckpt.index").write_text("weights")
  (home / "results.json").write_text(json.dumps({"trials": [1]}))
  before = faults.digests(tmp_path)
  journal = [str(home / "trial_1"), str(home / "results.json")]
  (home / "trial_1").rename(home / "trial_1.rejected-1")
  (home / "results.json").rename(home / "results.json.rejected-1")
  (home / "results.json").write_text("{}")  # the new settings' results
  assert faults.old_settings_kept(tmp_path, before, journal) == []
  (home / "trial_1.rejected-1" / "ckpt.index").write_text("changed")
  (home / "results.json.rejected-1").unlink()
  assert [p.split(" is ")[0] for p in faults.old_settings_kept(tmp_path, before, journal)] == [
      "the earlier settings' models/trial_1", "the earlier settings' models/results.json"]


def test_a_fault_on_worker_1_is_worker_1s(tmp_path):
  """A kill planned for worker 1 of two fires in worker 1's process, not in worker 0's."""
  script = tmp_path / "worker.py"
  script.write_text("import json, os, time\n"
                    "print('worker', json.loads(os.environ['TF_CONFIG'])['task']['index'],"
                    " flush=True)\ntime.sleep(3)\n")
  kill = {"fault": "worker 1", "at": "start", "call": 0, "when": "during", "delay": 0.5,
          "signal": "SIGTERM", "repeat": 1, "worker": 1}
  r = runs.run([sys.executable, str(script)], kill, tmp_path / "e", workers=2)
  assert r.killed and r.returncode == 0 and runs.MARKER not in r.output
  assert r.peer.returncode == -15 and faults.after_kill(r.peer.output) == []
  assert faults.kill_problems("worker 1", "SIGTERM", r.peer) == []
  assert faults.chief_problems(r) == []
  r.output, r.returncode = "error: one\nerror: two\n", 1
  assert "2 error or stop lines" in faults.chief_problems(r)[0]
