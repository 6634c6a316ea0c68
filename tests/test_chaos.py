"""The randomized kill harness (benchmarks/chaos.py): its verdict on a small run, and its checks,
which must fail on damaged, duplicated, left-over or lost work and on a noisy kill."""

import json
import pathlib
import random
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
from helpers.paths import GOLDEN, REPO_ROOT, TEST_DATA

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import chaos  # noqa: E402
import chaos_checks as checks  # noqa: E402
import chaos_runs as runs  # noqa: E402

SEED = 6  # its 2 trials: 3 kills each (a power cut; kills after a result, in the tf1/ copy)
STATS = {"seconds": 30.0, "restore_t": 10.0,
         "calls": {"ckpt_save": [0.1] * 20, "input_state_save": [0.01] * 20,
                   "restore": [0.001], "results_write": [0.002] * 2}}


def test_kill_plans_are_drawn_from_the_seed_and_the_trial_only():
  plans = {k: chaos.draw_kills(0, k, STATS) for k in range(1, 201)}
  assert plans[7] == chaos.draw_kills(0, 7, STATS)  # what --only 7 replays
  assert plans[7] != chaos.draw_kills(1, 7, STATS)
  kills = [kill for plan in plans.values() for kill in plan]
  assert all(2 <= len(plan) <= 4 for plan in plans.values())
  assert {k["fault"] for k in kills} == set(chaos.FAULTS)
  assert {k["at"] for k in kills} == {"start", *STATS["calls"]}
  assert {k["when"] for k in kills if k["at"] != "start"} == {"before", "during", "after"}
  for k in kills:
    if k["at"] == "start":
      assert 0 <= k["delay"] <= STATS["seconds"]
    else:
      assert 1 <= k["call"] <= len(STATS["calls"][k["at"]])
      assert 0 <= k["delay"] <= STATS["calls"][k["at"]][k["call"] - 1]


def _run(output: str, returncode: int) -> runs.Run:
  return runs.Run(returncode, output, [], 1.0, runs.MARKER in output)


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
])
def test_a_kill_may_cause_one_short_line(fault, signal, output, returncode, problem):
  found = runs.kill_problems(fault, signal, _run(output, returncode))
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


def test_the_damage_of_a_power_cut_hits_the_newest_checkpoint_written_by_the_run(tmp_path):
  _save(tmp_path, {2: 1.0, 4: 2.0})
  assert checks.damage([tmp_path], since=4e9, rng=random.Random(0)) == "nothing written to cut"
  said = checks.damage([tmp_path], since=0, rng=random.Random(0))
  assert said.startswith("ckpt-4.") and checks.usable_step(tmp_path) == 2, said


def _results(home: pathlib.Path, trials: list[dict]) -> None:
  from electra_tf.finetuning import outputs

  (home / "test_predictions").mkdir(parents=True)
  for trial in (1, 2):
    (home / "test_predictions" / f"{runs.TASK}_test_{trial}_predictions.tsv").write_text("r0\t1\n")
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
  assert chaos.lost_work(r, dirs, [32, 8], [32, 12], 2) == [
      "run 2 restarted a_1 at step 0, its ckpt-32 was usable"]
  assert chaos.lost_work(_run("", 0), dirs, [32, 8], [0, 8], 3) == [
      "run 3 left a_1 without its usable ckpt-32 (newest usable: 0)"]
  assert chaos.lost_work(r, dirs, [0, 8], [32, 32], 1) == []


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> tuple[subprocess.CompletedProcess, pathlib.Path]:
  """benchmarks/chaos.py run with 2 trials (one pre-training, one fine-tuning), folders kept."""
  work = tmp_path_factory.mktemp("chaos")
  # the harness reads a corpus and SST-2 rows from a folder laid out as ../shared: the repository's
  inputs = tmp_path_factory.mktemp("chaos_inputs")
  (inputs / "reference").symlink_to(GOLDEN)
  (inputs / "data").symlink_to(TEST_DATA)
  done = subprocess.run(
      [sys.executable, str(REPO_ROOT / "benchmarks" / "chaos.py"), "--trials", "2", "--seed",
       str(SEED), "--work_dir", str(work), "--keep", "--shared", str(inputs)], cwd=REPO_ROOT,
      capture_output=True, text=True, timeout=1800)
  return done, work


@pytest.mark.slow
def test_two_killed_run_series_resume_bit_identical(harness):
  done, _ = harness
  lines = done.stdout.splitlines()
  assert lines[-1] == "chaos: 2/2 runs resumed bit-identical, 0 lost, 0 tracebacks", \
      done.stdout[-5000:] + done.stderr[-3000:]
  trials = [line for line in lines if line.startswith("trial ")]
  assert [t.split()[1:3] for t in trials] == [["1/2", "pretrain"], ["2/2", "finetune"]]
  for t in trials:
    assert " ok: " in t, t
    fired = [k for k in t.split(" s: ", 1)[1].split("; ") if not k.endswith("(not reached)")]
    assert fired, t
  assert done.returncode == 0


def _check(work: pathlib.Path, k: int, kind: str, folder: pathlib.Path) -> dict[str, list[str]]:
  """The harness's final checks of trial k's series in `folder` against its reference run."""
  ref = {"folder": work / f"reference-{kind}"}
  ref["finals"] = [checks.complete_steps(d)[0] for d in runs.model_dirs(kind, ref["folder"])]
  out = chaos.Outcome(k, kind)
  chaos.check_final(out, ref, folder, runs.model_dirs(kind, folder))
  return {c: p for c, p in out.problems.items() if p}


@pytest.mark.slow
@pytest.mark.parametrize("k, kind", [(1, "pretrain"), (2, "finetune")])
def test_the_harness_checks_fail_on_sabotaged_outcomes(harness, tmp_path, k, kind):
  """A trial's completed folder passes the checks; sabotaged it fails them: a truncated final
  checkpoint, an older checkpoint under the final name, a leftover, a duplicated result."""
  _, work = harness
  folder = work / f"trial-{k}"
  assert _check(work, k, kind, folder) == {}
  final_dir = runs.model_dirs(kind, folder)[0]
  final, older = checks.complete_steps(final_dir)[:2]

  def copy(name: str) -> tuple[pathlib.Path, pathlib.Path]:
    sabotaged = shutil.copytree(folder, tmp_path / name)
    return sabotaged, runs.model_dirs(kind, sabotaged)[0]

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
