"""Fine-tuning trials are durable: a run killed at any moment (SIGKILL in training, while test
outputs, a trial's record or the results are written, while a finished trial's folder is
deleted, between trials) and rerun with the same command ends as an uninterrupted run does,
bit for bit, never training a finished trial again; a rerun with other settings moves the old
work aside with one line. Real run_finetuning.py subprocesses on RTE-layout rows (tests/data)."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import procs, trial_logs, user_data
from helpers.paths import REPO_ROOT

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}
# one layer: what these tests prove is the bookkeeping of trials, and each run traces its graphs
HPARAMS = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1},
           "embedding_size": 16, "max_seq_length": 64, "train_batch_size": 8,
           "eval_batch_size": 8, "init_checkpoint": None, "seed": 3, "task_names": ["rte"],
           "num_trials": 2, "num_train_epochs": 3.0, "save_checkpoints_steps": 5,
           "iterations_per_loop": 5, "keep_all_models": False, "write_test_outputs": True}
KILL = REPO_ROOT / "tests" / "helpers" / "kill_finetuning.py"


def _rows(path: pathlib.Path, start: int, stop: int) -> str:
  lines = path.read_text(encoding="utf-8").split("\n")
  return "\n".join([lines[0], *lines[start:stop]]) + "\n"


@pytest.fixture(scope="module")
def root(data_dir, tmp_path_factory) -> pathlib.Path:
  """<root>/finetuning_data/rte: 40 train, 16 dev and 8 test rows of tests/data/glue/RTE."""
  root = tmp_path_factory.mktemp("trials")
  rte = root / "finetuning_data" / "rte"
  rte.mkdir(parents=True)
  for split, (start, stop) in {"train": (1, 41), "dev": (1, 17), "test": (101, 109)}.items():
    (rte / f"{split}.tsv").write_text(_rows(data_dir / "glue" / "RTE" / f"{split}.tsv", start,
                                            stop), encoding="utf-8")
  return root


def _start(root: pathlib.Path, name: str, vocab_file: str, moment: str | None = None,
           **more) -> subprocess.Popen:
  script = [str(KILL), moment] if moment else [str(REPO_ROOT / "run_finetuning.py")]
  return subprocess.Popen(
      [sys.executable, *script, "--data_dir", str(root), "--model_name", name,
       "--hparams", json.dumps({**HPARAMS, "vocab_file": vocab_file, **more})],
      cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _killed_after_line(proc: subprocess.Popen, pattern: str) -> str:
  _, out = procs.wait_for_line(proc, pattern, timeout=300)
  proc.kill()
  return out + procs.finish(proc)


def _weights(folder: pathlib.Path) -> dict[str, np.ndarray]:
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(folder)))
  return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
          if "OBJECT_GRAPH" not in n}


def _leftovers(folder: pathlib.Path) -> list[str]:
  return [str(p) for p in folder.rglob("*") if ".tmp-" in p.name or p.name.endswith("_temp")]


@pytest.mark.slow
def test_a_run_killed_at_every_moment_ends_as_an_uninterrupted_run(root, vocab_file):
  reference = _start(root, "once", vocab_file)
  out = procs.finish(reference, timeout=600)
  assert reference.returncode == 0, out[-3000:]

  logs = {}  # SIGKILL in trial 1's training, then at each bookkeeping moment, then in trial 2's
  logs["train 1"] = _killed_after_line(_start(root, "killed", vocab_file),
                                       r"rte_model_1/ckpt-5$")
  for moment in ("test_outputs", "record", "results", "delete", "between"):
    proc = _start(root, "killed", vocab_file, moment)
    logs[moment] = procs.finish(proc, timeout=600)
    assert proc.returncode == -9, f"{moment}: {logs[moment][-3000:]}"
  logs["train 2"] = _killed_after_line(_start(root, "killed", vocab_file),
                                       r"rte_model_2/ckpt-5$")
  last = _start(root, "killed", vocab_file)
  logs["last"] = procs.finish(last, timeout=600)
  assert last.returncode == 0, logs["last"][-3000:]

  for name, log in logs.items():
    assert "Traceback" not in log, f"{name}: {log[-3000:]}"
  # steps trained (progress lines against the restored step): trial 1 in the first two runs
  # only (the second died writing test outputs, after its training), never after; trial 2's
  # training resumed once
  steps = {n: trial_logs.steps_trained(log) for n, log in logs.items()}
  one, two = ({n: s.get(t) for n, s in steps.items()} for t in (1, 2))
  assert re.search(r"Restored \S+/rte_model_1/ckpt-\d+ at step", logs["test_outputs"])
  assert one["train 1"] >= 5 and one["train 1"] + one["test_outputs"] >= 15, steps
  assert one["record"] == one["results"] == 0, steps  # restored at step 15: nothing trained
  assert [n for n in logs if one[n] is not None] == ["train 1", "test_outputs", "record",
                                                     "results"], steps
  assert two["train 2"] >= 5 and two["train 2"] + two["last"] >= 15, steps
  for name in ("delete", "between", "train 2", "last"):
    assert "Trial 1/2 finished earlier" in logs[name], logs[name][-3000:]
  assert re.search(r"Restored \S+/rte_model_2/ckpt-\d+ at step", logs["last"])

  once, killed = (root / "models" / n for n in ("once", "killed"))
  for results in ("rte_results.txt", "rte_results.json"):
    want = (once / "results" / results).read_text()
    assert (killed / "results" / results).read_text() == want
  assert len((killed / "results" / "rte_results.txt").read_text().splitlines()) == 3
  for trial in (1, 2):
    with open(once / "test_predictions" / f"rte_test_{trial}_predictions.pkl", "rb") as f:
      want = pickle.load(f)
    with open(killed / "test_predictions" / f"rte_test_{trial}_predictions.pkl", "rb") as f:
      got = pickle.load(f)
    assert sorted(got) == sorted(want)
    assert all(np.array_equal(got[k], want[k]) for k in want), trial
    name = pathlib.Path(f"glue_submission_{trial}") / "RTE.tsv"
    assert (killed / "test_predictions" / name).read_text() == (
        once / "test_predictions" / name).read_text()
  want, got = (_weights(m / "finetuning_models" / "rte_model_2") for m in (once, killed))
  assert sorted(got) == sorted(want)
  assert all(np.array_equal(got[k], want[k]) for k in want)
  assert not (killed / "finetuning_models" / "rte_model_1").exists()
  assert _leftovers(killed) == []


@pytest.mark.slow
def test_reruns_reuse_recorded_trials_and_move_aside_work_of_other_settings(
    root, vocab_file, tmp_path, capsys):
  from electra_tf.config import FinetuningConfig
  from electra_tf.finetuning.trials import run_finetuning

  data = tmp_path / "data"
  (data / "finetuning_data").mkdir(parents=True)
  os.symlink(root / "finetuning_data" / "rte", data / "finetuning_data" / "rte")

  def run(**more):
    hparams = {**HPARAMS, "vocab_file": vocab_file, "num_train_epochs": 1.0,
               "keep_all_models": True, "write_test_outputs": False, **more}
    results = run_finetuning(FinetuningConfig("m", str(data), **hparams))
    return results, capsys.readouterr().out

  first, _ = run(num_trials=1)
  # more trials: trial 1 is reported from its record, only trial 2 trains
  both, log = run(num_trials=2)
  assert both[0] == first[0] and len(both) == 2
  assert "Trial 1/2 finished earlier" in log and "trial 1/2\n" not in log
  assert "Start training: model=m, trial 2/2" in log
  models = data / "models" / "m" / "finetuning_models"
  assert not list(models.rglob("*.rejected-*"))

  # a power cut after trial 1's record cut its kept checkpoint: one line, the checkpoint moved
  # aside, the trial trained again to the same weights and results; trial 2 stays recorded
  folder = models / "rte_model_1"
  want = _weights(folder)
  final = pathlib.Path(tf.train.latest_checkpoint(str(folder)))
  data_file = next(folder.glob(f"{final.name}.data-*"))
  data_file.write_bytes(data_file.read_bytes()[:data_file.stat().st_size // 2])
  again, log = run(num_trials=2)
  assert again == both
  assert re.search(rf"^Trial 1/2 finished earlier, but its checkpoint \S+/{final.name} is "
                   rf"corrupt or truncated \(.+\); moved it to \S+/{final.name}\.rejected; "
                   "training the trial again", log, re.M), log
  assert "Start training: model=m, trial 1/2" in log and "Trial 2/2 finished earlier" in log
  got = _weights(folder)
  assert sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k]) for k in want)

  # again, but killed inside that set-aside, right after the index moved: the rerun takes no
  # older checkpoint for the trial's model, finishes the set-aside and trains the trial again
  data_file = next(folder.glob(f"{final.name}.data-*"))
  data_file.write_bytes(data_file.read_bytes()[:data_file.stat().st_size // 2])

  class Killed(Exception):
    pass

  def dying_rename(src, dst, *args, **kwargs):
    rename(src, dst, *args, **kwargs)
    raise Killed

  rename = tf.io.gfile.rename
  tf.io.gfile.rename = dying_rename
  try:
    with pytest.raises(Killed):
      run(num_trials=2)
  finally:
    tf.io.gfile.rename = rename
  assert data_file.exists() and not (folder / f"{final.name}.index").exists()
  again, log = run(num_trials=2)
  assert again == both
  assert f"Finished setting {folder / final.name} aside into {folder / final.name}" in log, log
  assert "Start training: model=m, trial 1/2" in log and "Trial 2/2 finished earlier" in log
  assert {data_file.name, f"{final.name}.index"} <= {
      p.name for p in (folder / f"{final.name}.rejected-2").iterdir()}
  got = _weights(folder)
  assert sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k]) for k in want)

  # another learning rate: one line naming it, the old work moved aside, trained afresh
  _, log = run(num_trials=2, learning_rate=2e-4)
  lines = [line for line in log.splitlines() if line.startswith("Settings changed")]
  assert len(lines) == 1 and "(learning_rate changed (0.0001 -> 0.0002))" in lines[0], log
  assert sorted(p.name for p in models.glob("*.rejected-1")) == [
      "rte_model_1.rejected-1", "rte_model_2.rejected-1"]
  assert sorted(p.name for p in (models / "rte_model_trials").iterdir()) == [
      "trial_1.json", "trial_1.json.rejected-1", "trial_2.json", "trial_2.json.rejected-1"]
  assert (data / "models" / "m" / "results" / "rte_results.txt.rejected-1").is_file()
  assert "Start training: model=m, trial 1/2" in log

  # an edited data file: named, and trained afresh
  dev = root / "finetuning_data" / "rte" / "dev.tsv"
  text = dev.read_text(encoding="utf-8")
  try:
    dev.write_text(text.replace("\tentailment\n", "\tnot_entailment\n", 1), encoding="utf-8")
    _, log = run(num_trials=1, learning_rate=2e-4)
  finally:
    dev.write_text(text, encoding="utf-8")
  assert re.search(r"^Settings changed since the earlier run \(rte/dev\.tsv "
                   r"changed\); moved aside ", log, re.M), log


def test_reruns_with_other_flags_do_what_the_flags_say(data_dir, vocab_file, tmp_path, capsys):
  """keep_all_models, num_trials and n_writes_test changed between reruns (user task, each
  trial's predictions file its own): a model that must now be kept but was deleted is trained
  again, to the same results; a trial now asked for test outputs writes them; nothing else
  trains (steps counted from the progress lines)."""
  from electra_tf.config import FinetuningConfig
  from electra_tf.finetuning.trials import run_finetuning

  user_data.write_all(tmp_path, data_dir)
  models = tmp_path / "models" / "m" / "finetuning_models"
  preds = tmp_path / "models" / "m" / "test_predictions"

  def run(**more):
    hparams = {**HPARAMS, "vocab_file": vocab_file, "num_train_epochs": 1.0,
               "task_names": ["movie_reviews"], "n_writes_test": 1, **more}
    results = run_finetuning(FinetuningConfig("m", str(tmp_path), **hparams))
    log = capsys.readouterr().out
    assert "Traceback" not in log
    return results, trial_logs.steps_trained(log), log

  first, trained, _ = run(num_trials=3)
  assert trained == {1: 5, 2: 5, 3: 5}
  assert sorted(p.name for p in models.iterdir()) == ["movie_reviews_model_3",
                                                      "movie_reviews_model_trials"]
  assert sorted(p.name for p in preds.iterdir()) == ["movie_reviews_test_1_predictions.tsv"]
  trial_1 = (preds / "movie_reviews_test_1_predictions.tsv").read_bytes()

  # num_trials 3 -> 2: trial 2 is now the last, whose model is kept: trained again
  results, trained, log = run(num_trials=2)
  assert results == first[:2] and trained == {2: 5}, log
  assert re.search(r"^Trial 2/2 finished earlier, but its folder \S+movie_reviews_model_2 "
                   r"holds no complete checkpoint \(.+\); training the trial again", log,
                   re.M), log
  assert (models / "movie_reviews_model_2" / "tf1" / "model.ckpt.index").is_file()

  # keep_all_models false -> true: trial 1's model is trained again and kept
  results, trained, _ = run(num_trials=2, keep_all_models=True)
  assert results == first[:2] and trained == {1: 5}
  assert (models / "movie_reviews_model_1" / "tf1" / "model.ckpt.index").is_file()

  # n_writes_test 1 -> 5: trial 2 writes its own predictions (its kept model, no step trained)
  results, trained, _ = run(num_trials=2, keep_all_models=True, n_writes_test=5)
  assert results == first[:2] and trained == {2: 0}
  assert (preds / "movie_reviews_test_1_predictions.tsv").read_bytes() == trial_1
  trial_2 = (preds / "movie_reviews_test_2_predictions.tsv").read_bytes()
  assert trial_2.count(b"\n") == 17  # a header and the 16 test rows

  # n_writes_test 5 -> 1: nothing to do; each trial's file stays its own
  results, trained, _ = run(num_trials=2, keep_all_models=True, n_writes_test=1)
  assert results == first[:2] and trained == {}
  assert (preds / "movie_reviews_test_1_predictions.tsv").read_bytes() == trial_1
  assert (preds / "movie_reviews_test_2_predictions.tsv").read_bytes() == trial_2
