"""The randomized kill harness (benchmarks/chaos.py): its verdict on a small run, and its checks,
which must fail on damaged, duplicated, left-over or lost work and on a noisy kill."""

import collections
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
from helpers.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import chaos  # noqa: E402
import chaos_checks as checks  # noqa: E402
import chaos_faults as faults  # noqa: E402
import chaos_plan as plan  # noqa: E402
import chaos_runs as runs  # noqa: E402
import chaos_trial as trial  # noqa: E402

SEED = 149  # its 2 trials, plain: pre-training led by a persistent read error, fine-tuning by
# an unsynced cut, each with 1-3 faults more
STATS = {"seconds": 30.0, "restore_t": 10.0,
         "calls": {"ckpt_save": [0.1] * 20, "input_state_save": [0.01] * 20,
                   "restore": [0.001], "results_write": [0.002] * 2}}


def test_kill_plans_are_drawn_from_the_seed_and_the_trial_only():
  plans = {k: plan.draw_kills(0, k, STATS) for k in range(1, 201)}
  assert plans[7] == plan.draw_kills(0, 7, STATS)  # what --only 7 replays
  assert plans[7] != plan.draw_kills(1, 7, STATS)
  kills = [kill for drawn in plans.values() for kill in drawn]
  assert all(2 <= len(drawn) <= 4 for drawn in plans.values())
  assert {k["fault"] for k in kills} == set(plan.FAULTS)
  assert any(k["fault"] == "worker 1" and k["at"] == "start" for k in kills)
  assert {k["at"] for k in kills} == {"start", "ckpt_read", "set_aside", "move_aside",
                                      *STATS["calls"]}
  assert {k["when"] for k in kills if k["at"] != "start"} == {"before", "during", "after"}
  assert all(drawn[0]["fault"] not in plan.READS or drawn[0]["fault"] in plan.LEADS
             for drawn in plans.values())
  for k in kills:
    if k["fault"] in plan.READS:
      assert (k["at"], k["call"], k["repeat"] in (1, 2)) == ("ckpt_read", 1, True)
    elif k["fault"] in plan.SECOND_RUNS:
      assert (k["at"], k["call"], k["when"]) == ("restore", 1, "after")
    elif k["fault"] == "set-aside kill":
      assert k["at"] in ("set_aside", "move_aside") and k["signal"] == "SIGKILL"
    elif k["at"] == "start":
      assert 0 <= k["delay"] <= STATS["seconds"]
      # worker 1 is lost once the cluster formed (TensorFlow's registration waits before)
      assert k["fault"] != "worker 1" or k["delay"] >= STATS["restore_t"], k
    else:
      assert 1 <= k["call"] <= len(STATS["calls"][k["at"]])
      assert 0 <= k["delay"] <= STATS["calls"][k["at"]][k["call"] - 1]
      assert k["fault"] != "paused holder" or k["when"] == plan.PAUSE_AT[k["at"]]


def test_every_leading_fault_kind_comes_first_in_three_of_the_default_trials():
  """Shared storage and many hosts: a second run by a bind mount and from another PID
  namespace, a paused holder, no hard links, a persistent read error, an unsynced cut, a kill
  in the set-aside and a fault on worker 1; and SIGTERM, ENOSPC, a write error and two SIGINTs,
  which the random draw behind them reaches too rarely: each leads at least 3 trials of the
  default run."""
  for seed in (0, 1):
    first = collections.Counter(plan.draw_kills(seed, k, STATS,
                                                runs.workers_of(plan.kind_of(k),
                                                                plan.variant_of(seed, k)))[0][
                                                                    "fault"]
                                for k in range(1, chaos.DEFAULT_TRIALS + 1))
    assert set(first) == {*plan.LEADS, "set-aside kill", "worker 1"}, first
    assert {"SIGTERM", "ENOSPC", "write error", "SIGINT x2", "unsynced cut"} <= set(first), first
    assert min(first.values()) >= 3, first


def _run(output: str, returncode: int) -> runs.Run:
  return runs.Run(returncode, output, [], 1.0, runs.MARKER in output)


PRINTED = "Training for 32 steps (64 records, batch 8, 4.0 epochs)"
STOP = ("Saved /m/ckpt-120\n121/200 = 60.5%, SPS: 40\nSaved /m/ckpt-121\n"
        "run_pretraining.py: interrupted at step 121: saved /m/ckpt-121; rerun to resume\n")


@pytest.mark.parametrize("fault, signal, output, returncode, problem", [
    ("SIGINT", "SIGINT", f"10/200 = 5%\n{runs.MARKER}\n{STOP}", 130, None),
    ("SIGKILL", "SIGKILL", f"10/200 = 5%\n{runs.MARKER}\n", -9, None),
    ("SIGTERM", "SIGTERM", f"{runs.MARKER}\n", -15, None),
    ("SIGINT", "SIGINT", f"{runs.MARKER}\nrun_finetuning.py: interrupted\n", 130, None),
    ("SIGINT", "SIGINT", f"{runs.MARKER}\n{STOP}Warning: x\n", 130, "2 lines after the signal"),
    ("SIGTERM", "SIGTERM", f"{runs.MARKER}\n{'x' * 400}\n", 143, "400-character line"),
    ("SIGINT", "SIGINT", f"{runs.MARKER}\nSaved /m/ckpt-200\nSummary: model chaos\n", 0,
     "went on and ended with status 0"),
    ("SIGINT", "SIGINT", f"{runs.MARKER}\n20/200 = 10%\nSaved /m/ckpt-20\n30/200 = 15%\n"
     "Saved /m/ckpt-30\nSaved /m/ckpt-31\nrun_pretraining.py: interrupted\n", 130, "went on"),
    ("SIGTERM", "SIGTERM", f"{runs.MARKER}\nrun_pretraining.py: error: x\n", 1, "exit status 1"),
    # a line of the run's own (the uninterrupted run prints it) caught being printed
    ("SIGINT x2", "SIGINT", f"{runs.MARKER}\n{PRINTED}\nrun_finetuning.py: interrupted\n",
     130, None),
    ("SIGINT x2", "SIGINT", f"{runs.MARKER}\nNot printed\nrun_finetuning.py: interrupted\n",
     130, "2 lines after the signal"),
    ("SIGINT", "SIGINT", f"{runs.MARKER}\n{PRINTED}\n{PRINTED}\nrun_finetuning.py: "
     "interrupted\n", 130, "2 lines after the signal"),
])
def test_a_kill_may_cause_one_short_line(fault, signal, output, returncode, problem):
  found = faults.kill_problems(fault, signal, _run(output, returncode), {PRINTED})
  if problem is None:
    assert found == []
  else:
    assert len(found) == 1 and problem in found[0], found


def test_a_traceback_is_found_with_its_exception():
  out = ("ok\nTraceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
         "    import tensorflow\nKeyboardInterrupt\n")
  assert runs.traceback_of(out) == "KeyboardInterrupt"
  assert runs.traceback_of("Exception ignored in: <function f>\nKeyboardInterrupt: \n")
  assert runs.traceback_of("a line about a Traceback\n") is None


def _save(model_dir: pathlib.Path, values: dict[int, float]) -> None:
  """Checkpoints ckpt-<step> holding one variable equal to values[step], as the loop names them."""
  v = tf.Variable([0.0, 0.0])
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=v), str(model_dir), max_to_keep=None,
                                       checkpoint_name="ckpt")
  for step, value in values.items():
    v.assign([value, 1.0])
    manager.save(checkpoint_number=step)


def test_the_disk_checks_fail_on_damaged_changed_or_left_over_files(tmp_path):
  ref, got = tmp_path / "ref" / "models" / "m", tmp_path / "got" / "models" / "m"
  _save(ref, {2: 1.0, 4: 2.0})
  _save(got, {2: 1.0, 4: 2.0})
  assert checks.weight_problems([ref], [got], [4]) == []
  assert checks.latest_problems(got, 4) == [] and checks.usable_step(got) == 4
  assert checks.leftovers(tmp_path) == []

  shutil.rmtree(got)
  _save(got, {2: 1.0, 4: 2.5})  # one value differs
  assert checks.weight_problems([ref], [got], [4]) == ["m/ckpt-4: v/.ATTRIBUTES/VARIABLE_VALUE "
                                                       "differs (max |diff| 0.5)"]
  data = next(got.glob("ckpt-4.data-*"))
  data.write_bytes(data.read_bytes()[:4])  # a power cut
  assert checks.usable_step(got) == 2
  problems = checks.latest_problems(got, 4)
  assert len(problems) == 1 and problems[0].startswith(
      "the latest checkpoint m/ckpt-4 is unreadable ("), problems
  assert checks.weight_problems([ref], [got], [4])[0].startswith("m/ckpt-4 unreadable (")
  (got / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
  assert checks.latest_problems(got, 4)[0] == f"{got / 'checkpoint'} names ckpt-2, not ckpt-4"

  for name in (".hparams.json.tmp-123-ab12cd34", "ckpt-6_temp", "ckpt-8.data-00000-of-00001",
               "checkpoint.tmp" + "0" * 32, ".write_probe_ab"):
    (got / name).write_text("x")
  (got / "input_state" / "ckpt-6.tmp-1a2b3c4d").mkdir(parents=True)
  (got / "tf1" / ".tmp-tf1-xyz").mkdir(parents=True)
  assert checks.leftovers(tmp_path) == sorted(
      f"got/models/m/{n}" for n in (".hparams.json.tmp-123-ab12cd34", ".write_probe_ab",
                                    "checkpoint.tmp" + "0" * 32, "ckpt-6_temp",
                                    "ckpt-8.data-00000-of-00001", "input_state/ckpt-6.tmp-1a2b3c4d",
                                    "tf1/.tmp-tf1-xyz"))


def test_a_power_cut_empties_cuts_or_un_renames_any_file_written_in_its_last_moments(tmp_path):
  _save(tmp_path, {2: 1.0, 4: 2.0})
  (tmp_path / "trial_settings.json").write_text('{"seed": 1}')
  now = pathlib.Path(tmp_path / "trial_settings.json").stat().st_mtime
  old = now - 60
  for path in tmp_path.iterdir():  # all but the settings written long before the cut
    if path.name != "trial_settings.json":
      os.utime(path, (old, old))
  assert checks.damage(tmp_path, 4e9, None, set(), 1, random.Random(0)) == \
      "nothing written to cut"
  hit = collections.Counter()
  for seed in range(12):
    case = tmp_path.parent / f"case{seed}"
    shutil.copytree(tmp_path, case)
    said = checks.damage(case, old - 1, now + 0.5, {"ckpt-2.index"}, 1, random.Random(seed))
    assert said.startswith("trial_settings.json "), said  # the only file of the last moments
    hit[said.split()[1]] += 1
    if said.split()[1] == "un-renamed":
      assert not (case / "trial_settings.json").exists()
      assert checks.leftovers(case) == [said.split("(")[1].rstrip(")")]
    else:
      assert (case / "trial_settings.json").stat().st_size < len('{"seed": 1}')
  assert set(hit) == {"emptied", "cut", "un-renamed"}, hit
  assert "un-renamed" not in checks.damage(tmp_path, old - 1, None, checks.files(tmp_path), 1,
                                           random.Random(0))  # an old name stays


def test_a_power_cut_un_renames_only_what_the_run_renamed_into_place(tmp_path):
  """A file written in place (TensorBoard's events) or still inside a staged folder under its
  temporary name never had a rename to lose: it is emptied or cut, never given a name the run
  never used (found by the harness's own 40-trial run)."""
  src = tmp_path / "src"
  stage = src / "input_state" / ".ckpt-180.tmp-551-5d2bf971"
  stage.mkdir(parents=True)
  (stage / "state.index").write_bytes(b"x" * 40)
  (src / "events.out.tfevents.1795782057.vm.23540.0.v2").write_bytes(b"x" * 40)
  (src / "ckpt-10_temp").mkdir()
  (src / "ckpt-10_temp" / "part-00000-of-00001.index").write_bytes(b"x" * 40)
  hit = collections.Counter()
  for seed in range(30):
    case = tmp_path / f"case{seed}"
    shutil.copytree(src, case)
    said = checks.damage(case, 0, None, set(), 1, random.Random(seed))
    hit[said.split()[1]] += 1
    assert sorted(checks.leftovers(case)) == ["ckpt-10_temp", "input_state/" + stage.name], said
  assert set(hit) == {"emptied", "cut"}, hit


def test_a_read_error_waits_for_a_checkpoint_to_read():
  read, kill, cut = ({"fault": f} for f in ("read error", "SIGKILL", "power cut"))
  pending = [read, kill, cut]
  assert plan.next_fault(pending, readable=False) is kill and pending == [read, cut]
  assert plan.next_fault(pending, readable=False) is cut and pending == [read]
  assert plan.next_fault(pending, readable=False) is None and pending == [read]  # no fault
  assert plan.next_fault(pending, readable=True) is read and pending == []
  assert plan.next_fault(pending, readable=True) is None


def test_a_good_checkpoint_moved_aside_is_found_a_damaged_one_is_not(tmp_path):
  _save(tmp_path, {2: 1.0, 4: 2.0, 6: 3.0})
  before = checks.set_aside(tmp_path)
  for step, cut in ((4, False), (6, True)):
    folder = tmp_path / f"ckpt-{step}.rejected"
    folder.mkdir()
    for path in tmp_path.glob(f"ckpt-{step}.*"):
      if path.is_file():
        if cut and path.name.endswith(".index"):
          path.write_bytes(path.read_bytes()[:10])
        path.rename(folder / path.name)
  assert checks.good_set_aside(tmp_path, before) == [
      "the good checkpoint ckpt-4 was moved to ckpt-4.rejected"]
  assert checks.good_set_aside(tmp_path, checks.set_aside(tmp_path)) == []


def _results(home: pathlib.Path, trials: list[dict]) -> None:
  from electra_tf.finetuning import outputs

  (home / "test_predictions").mkdir(parents=True)
  for t in (1, 2):
    (home / "test_predictions" / f"{runs.TASK}_test_{t}_predictions.tsv").write_text("r0\t1\n")
  outputs.write_results(trials, str(home / "results" / f"{runs.TASK}_results.txt"),
                        str(home / "results" / f"{runs.TASK}_results.pkl"))


def test_the_results_check_fails_on_a_missing_duplicated_or_changed_result(tmp_path):
  one, two = {runs.TASK: {"accuracy": 50.0}}, {runs.TASK: {"accuracy": 62.5}}
  _results(tmp_path / "ref", [one, two])
  cases = {"same": [one, two], "duplicated": [one, one, two], "missing": [two],
           "changed": [one, {runs.TASK: {"accuracy": 62.6}}]}
  found = {}
  for name, trials in cases.items():
    _results(tmp_path / name, trials)
    found[name] = checks.result_problems(tmp_path / "ref", tmp_path / name, runs.TASK, 2)
  assert found["same"] == []
  assert found["duplicated"][0] == (f"{runs.TASK}_results.json holds 3 trial results "
                                    "(num_trials 3), not 2")
  assert found["missing"][0].endswith("holds 1 trial results (num_trials 1), not 2")
  assert found["changed"] == [
      f"{runs.TASK}_results.json differs from the uninterrupted run's",
      f"results/{runs.TASK}_results.txt differs from the uninterrupted run's",
      f"{runs.TASK}_results.pkl differs from the uninterrupted run's"]


def test_lost_work_is_a_restore_behind_the_newest_usable_checkpoint_or_one_deleted():
  dirs = [pathlib.Path("/m/a_1"), pathlib.Path("/m/a_2")]
  r = _run("", 0)
  r.events = [{"ev": "restore", "dir": "/m/a_1", "step": 0},
              {"ev": "restore", "dir": "/m/a_2", "step": 8}]
  assert checks.lost_work(r.events, dirs, [32, 8], [32, 12], 2) == [
      "run 2 restarted a_1 at step 0, its ckpt-32 was usable"]
  assert checks.lost_work([], dirs, [32, 8], [0, 8], 3) == [
      "run 3 left a_1 without its usable ckpt-32 (newest usable: 0)"]
  assert checks.lost_work(r.events, dirs, [0, 8], [32, 32], 1) == []


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> tuple[subprocess.CompletedProcess, pathlib.Path]:
  """benchmarks/chaos.py run with 2 trials (one pre-training, one fine-tuning), folders kept."""
  work = tmp_path_factory.mktemp("chaos")
  # by default the harness reads a corpus and SST-2 rows from tests/golden/ and tests/data/
  done = subprocess.run(
      [sys.executable, str(REPO_ROOT / "benchmarks" / "chaos.py"), "--trials", "2", "--seed",
       str(SEED), "--work_dir", str(work), "--keep"], cwd=REPO_ROOT,
      capture_output=True, text=True, timeout=1800)
  return done, work


@pytest.mark.slow
def test_two_faulted_run_series_complete_with_nothing_lost(harness):
  done, _ = harness
  lines = done.stdout.splitlines()
  verdict = (r"chaos: 2/2 runs complete, nothing lost, 0 tracebacks "
             r"\(\d+ faults reached of \d+ drawn\)")
  assert re.fullmatch(verdict, lines[-1]), done.stdout[-5000:] + done.stderr[-3000:]
  trials = [line for line in lines if line.startswith("trial ")]
  assert [t.split()[1:4] for t in trials] == [["1/2", "pretrain", "(plain)"],
                                              ["2/2", "finetune", "(plain)"]]
  for t in trials:
    assert " ok: " in t, t
    fired = [k for k in t.split(" s: ", 1)[1].split("; ") if not k.endswith("(not reached)")]
    assert fired, t
  assert done.returncode == 0


def _check(work: pathlib.Path, k: int, kind: str, folder: pathlib.Path) -> dict[str, list[str]]:
  """The harness's final checks of trial k's series in `folder` against its reference run."""
  variant = plan.variant_of(SEED, k)
  ref = {"folder": work / chaos.reference_name(kind, variant)}
  ref["finals"] = [checks.complete_steps(d)[0]
                   for d in runs.model_dirs(kind, ref["folder"], variant)]
  out = trial.Outcome(k, kind, variant)
  trial.check_final(out, ref, folder, runs.model_dirs(kind, folder, variant))
  return {c: p for c, p in out.problems.items() if p}


@pytest.mark.slow
@pytest.mark.parametrize("k, kind", [(1, "pretrain"), (2, "finetune")])
def test_the_harness_checks_fail_on_sabotaged_outcomes(harness, tmp_path, k, kind):
  """A trial's completed folder passes the checks; sabotaged it fails them: a truncated final
  checkpoint, an older checkpoint under the final name, a leftover, a duplicated result."""
  _, work = harness
  folder = work / f"trial-{k}"
  assert _check(work, k, kind, folder) == {}
  variant = plan.variant_of(SEED, k)
  final_dir = runs.model_dirs(kind, folder, variant)[0]
  final, older = checks.complete_steps(final_dir)[:2]

  def copy(name: str) -> tuple[pathlib.Path, pathlib.Path]:
    sabotaged = shutil.copytree(folder, tmp_path / name)
    return sabotaged, runs.model_dirs(kind, sabotaged, variant)[0]

  cut, model_dir = copy("cut")
  data = next(model_dir.glob(f"ckpt-{final}.data-*"))
  data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
  assert set(_check(work, k, kind, cut)) == {"weights", "latest"}

  swapped, model_dir = copy("older")
  for path in final_dir.glob(f"ckpt-{older}.*"):
    shutil.copy(path, model_dir / path.name.replace(f"ckpt-{older}", f"ckpt-{final}"))
  assert set(_check(work, k, kind, swapped)) == {"weights"}

  left, model_dir = copy("leftover")
  (model_dir / ".hparams.json.tmp-99-0a1b2c3d").write_text("{")
  assert _check(work, k, kind, left) == {"leftovers": [
      f"left {model_dir.relative_to(left)}/.hparams.json.tmp-99-0a1b2c3d"]}

  if kind == "finetune":
    duplicated, _ = copy("duplicated")
    path = duplicated / "models" / runs.MODEL / "results" / f"{runs.TASK}_results.json"
    record = json.loads(path.read_text())
    record["trials"].append(record["trials"][0])
    record["num_trials"] = 3
    path.write_text(json.dumps(record))
    assert _check(work, k, kind, duplicated) == {"results": [
        f"{runs.TASK}_results.json holds 3 trial results (num_trials 3), not 2"]}


@pytest.mark.parametrize("output, returncode, problem", [
    (f"{runs.MARKER}\n10/20 = 50%\nSaved /m/ckpt-10\nsummary\n", 0, None),  # retried
    (f"{runs.MARKER}\nrun_pretraining.py: reading /m/ckpt-8 failed (503); rerun\n", 1, None),
    (f"{runs.MARKER}\n", 1, "0 lines after the error"),
    (f"{runs.MARKER}\nWarning: moved it\nrun_pretraining.py: error\n", 1, "2 lines"),
    (f"{runs.MARKER}\nrun_pretraining.py: error\n", 2, "exit status 2"),
])
def test_an_error_fault_is_retried_or_stops_the_run_with_one_line(output, returncode, problem):
  found = faults.fault_problems("ENOSPC", _run(output, returncode))
  assert (found == []) if problem is None else (len(found) == 1 and problem in found[0]), found


def test_a_second_run_must_be_refused_in_one_line_naming_the_holder():
  first = _run("", 0)
  first.pid = 4242
  assert faults.second_problems(first) == ["the second run did not start"]
  first.second = _run("run_pretraining.py: /m is in use by pid 4242 on host h\n", 1)
  assert faults.second_problems(first) == []
  first.second = _run("200/200 = 100%\nSaved /m/ckpt-200\n", 0)
  first.second.events = [{"ev": "saved", "dir": "/m", "step": 200}]
  assert faults.second_problems(first) == [
      "not refused: it ran beside the first (exit status 0, saved 1 checkpoints, the last "
      "ckpt-200)"]
  first.second = _run("Warning: x\nrun_pretraining.py: /m is in use\n", 1)
  assert [p.split(":")[0] for p in faults.second_problems(first)] == [
      "refused in 2 lines, not one short line", "its refusal does not name the holder (pid 4242)"]


def test_the_headline_counts_passed_runs_lost_work_tracebacks_and_faults_reached():
  good, bad = trial.Outcome(1, "pretrain"), trial.Outcome(2, "finetune")
  good.faults = [("SIGKILL", True), ("read error", True)]
  bad.faults = [("second run", True), ("ENOSPC", False)]
  assert chaos.headline([good])[-1] == \
      "chaos: 1/1 runs complete, nothing lost, 0 tracebacks (2 faults reached of 2 drawn)"
  bad.problems["aside"].append("run 2: the good checkpoint ckpt-8 was moved to ckpt-8.rejected")
  bad.problems["tracebacks"] += ["run 1: KeyError", "run 3: KeyError"]
  kinds, last = chaos.headline([good, bad])
  assert last == "chaos: 1/2 runs complete, 1 lost, 2 tracebacks (3 faults reached of 4 drawn)"
  assert "SIGKILL 1/1" in kinds and "ENOSPC 0/1" in kinds and "power cut 0/0" in kinds
  assert kinds.endswith("; reached fewer than 3 times: " + ", ".join(plan.FAULTS))
  good.faults = [(f, True) for f in plan.FAULTS for _ in range(3)]
  assert chaos.headline([good])[0].endswith("; every kind reached at least 3 times")
  good.faults[0] = ("SIGKILL", False)
  assert chaos.headline([good])[0].endswith("; reached fewer than 3 times: SIGKILL")


def test_a_hooked_function_that_no_longer_exists_fails_the_harness_and_the_run(tmp_path):
  """A fake electra_tf whose atomic_io lost write_bytes: the harness's check names it; a run
  importing it ends at once with one line and MISSING_HOOK."""
  fake = tmp_path / "fake" / "electra_tf"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text("")
  (fake / "atomic_io.py").write_text("def write_text(path, text):\n  pass\n")
  (tmp_path / "fake" / "gone.py").write_text("class Book:\n  pass\n")
  sys.path.insert(0, str(tmp_path / "fake"))
  try:
    assert runs.check_hooks({"finished": ("gone", "Book.finished"), "x": ("gone", "Book")}) \
        == ["hook finished: gone.Book.finished no longer exists"]
  finally:
    sys.path.remove(str(tmp_path / "fake"))
  assert runs.check_hooks() == []  # the real functions are all there
  code = (f"import sys; sys.path.insert(0, {str(tmp_path / 'fake')!r}); "
          "import electra_tf.atomic_io; print('imported')")
  r = runs.run([sys.executable, "-c", code], None, tmp_path / "events")
  assert r.returncode == runs.MISSING_HOOK and "imported" not in r.output, r.output
  assert r.problem == ("chaos: hook atomic_write: electra_tf.atomic_io.write_bytes no longer "
                       "exists; update HOOKS in benchmarks/chaos_inject/sitecustomize.py")


def test_the_error_faults_fire_inside_a_real_process(tmp_path):
  """ENOSPC inside an atomic write (half the file written, then the error), a transient read
  error on the first two checkpoint reads, and a second run of the command started beside it."""
  _save(tmp_path / "m", {2: 1.0})
  reads, writes = tmp_path / "reads.py", tmp_path / "writes.py"
  reads.write_text(
      "import tensorflow as tf\n"
      "for attempt in range(3):\n"
      "  try:\n"
      f"    tf.train.load_checkpoint({str(tmp_path / 'm' / 'ckpt-2')!r})\n"
      "    print('read on attempt', attempt + 1); break\n"
      "  except tf.errors.UnavailableError as e:\n"
      "    print('unavailable:', e.message.split('; ')[-1])\n")
  writes.write_text(
      "import sys\nfrom electra_tf import atomic_io\ntry:\n"
      f"  atomic_io.write_text({str(tmp_path / 'out.txt')!r}, 'x' * 100)\n"
      "except OSError as e:\n  sys.exit(f'writes.py: {e.strerror}')\n")
  plans = {"read error": {"fault": "read error", "at": "ckpt_read", "call": 1, "repeat": 2,
                          "when": "before", "delay": 0.0, "signal": None},
           "ENOSPC": {"fault": "ENOSPC", "at": "atomic_write", "call": 1, "repeat": 1,
                      "when": "before", "delay": 0.0, "signal": None}}
  r = runs.run([sys.executable, str(reads)], plans["read error"], tmp_path / "e1")
  assert faults.after_kill(r.output) == [
      "unavailable: 503 Service Unavailable (chaos)", "unavailable: 503 Service Unavailable "
      "(chaos)", "read on attempt 3"], r.output
  r = runs.run([sys.executable, str(writes)], plans["ENOSPC"], tmp_path / "e2")
  assert (r.returncode, faults.after_kill(r.output)) == (1, ["writes.py: No space left on device"])
  assert faults.fault_problems("ENOSPC", r) == [] and not (tmp_path / "out.txt").exists()
  assert checks.leftovers(tmp_path) == []  # atomic_io removed its half-written temporary file
  r = runs.run([sys.executable, str(writes)], None, tmp_path / "e3")
  assert r.returncode == 0 and (tmp_path / "out.txt").read_text() == "x" * 100
  twice = tmp_path / "twice.py"
  twice.write_text(f"import os, sys\nif not os.path.exists({str(tmp_path / 'once')!r}):\n"
                   f"  open({str(tmp_path / 'once')!r}, 'w').close()\n"
                   f"  print({runs.SECOND!r}, flush=True)\n  import time; time.sleep(1)\n"
                   "else:\n  sys.exit('twice.py: in use by pid %d' % os.getppid())\n")
  r = runs.run([sys.executable, str(twice)], None, tmp_path / "e3")
  assert r.returncode == 0 and r.second is not None
  assert r.second.output.strip().startswith("twice.py: in use by pid")
