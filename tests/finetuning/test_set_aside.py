"""A fine-tuning run's set-aside of earlier work is complete and safe to interrupt: trial
folders, records, the test outputs the records list and the results files all move aside, and a
kill after any move (or before the journal is removed) is finished by the next run; a model an
earlier run kept is deleted only once this run's last trial is complete. Bookkeeping files in
temp folders; one real SIGKILL; one real two-run fine-tuning."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import tensorflow as tf
from helpers import read_faults, trial_logs, user_data
from helpers.paths import REPO_ROOT

from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import outputs, set_aside, trial_book, trials

VOCAB = str(REPO_ROOT / "tests" / "golden" / "vocab.txt")


class _Preprocessor:
  def data_key(self):
    return {"rte": "data"}


def _book(root: str, **hparams) -> trial_book.TrialBook:
  hparams = {"task_names": ["rte"], "num_trials": 2, "seed": 1, "init_checkpoint": None,
             "vocab_file": VOCAB, "keep_all_models": True, **hparams}
  return trial_book.TrialBook(FinetuningConfig("m", root, **hparams), _Preprocessor())


def _earlier_run(root: pathlib.Path) -> list[pathlib.Path]:
  """Two recorded trials (n_writes_test 2) with folders, test outputs and results files, as a
  finished run leaves them; returns every path a run with other settings must move aside."""
  book = _book(str(root), n_writes_test=2)
  test_dir = pathlib.Path(book._test_dir(1))
  paths = []
  for trial in (1, 2):
    folder = pathlib.Path(book.prepare_dir(trial))
    written = [test_dir / f"rte_test_{trial}_predictions.pkl",
               test_dir / f"glue_submission_{trial}" / "RTE.tsv"]
    for path in written:
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(f"old {path.name}")
    book.record(trial, 8, {"rte": {"accuracy": 50.0 + trial}}, [str(p) for p in written])
    paths += [folder, pathlib.Path(book.record_path(trial)), *written]
  c = book.config
  outputs.write_results([{"rte": {"accuracy": 51.0}}, {"rte": {"accuracy": 52.0}}],
                        c.results_txt, c.results_pkl)
  return paths + [pathlib.Path(p) for p in (
      c.results_txt, c.results_pkl, os.path.splitext(c.results_txt)[0] + ".json")]


class _Killed(BaseException):
  pass


def _assert_all_set_aside(paths: list[pathlib.Path], root: pathlib.Path) -> None:
  left = [p.name for p in paths if p.exists()]
  assert left == [], f"left in place: {left}"
  assert all(pathlib.Path(f"{p}.rejected-1").exists() for p in paths)
  assert not any(pathlib.Path(f"{p}.rejected-2").exists() for p in paths)
  trials_dir = os.path.dirname(_book(str(root)).record_path(1))
  assert not os.path.exists(set_aside.journal_path(trials_dir))


N_MOVES = 11  # 2 folders, 2 records, 4 test outputs, 3 results files


@pytest.mark.parametrize("moves", range(N_MOVES + 1))
def test_a_set_aside_killed_after_any_move_is_finished_by_the_rerun(tmp_path, monkeypatch,
                                                                     capsys, moves):
  """Killed after ``moves`` renames (N_MOVES: after every move, before the journal went)."""
  paths = _earlier_run(tmp_path)
  other = _book(str(tmp_path), learning_rate=2e-4, n_writes_test=1)
  done, rename = [0], os.rename

  def dying_rename(*args, **kwargs):
    if done[0] == moves:
      raise _Killed
    done[0] += 1
    return rename(*args, **kwargs)

  monkeypatch.setattr(os, "rename", dying_rename)
  monkeypatch.setattr(tf.io.gfile, "remove", lambda p: (_ for _ in ()).throw(_Killed()))
  with pytest.raises(_Killed):
    other.reject_other_settings()
  monkeypatch.undo()
  assert done[0] == moves
  assert sum(pathlib.Path(f"{p}.rejected-1").exists() for p in paths) == moves
  capsys.readouterr()
  _book(str(tmp_path), learning_rate=2e-4, n_writes_test=1).reject_other_settings()
  out = capsys.readouterr().out
  _assert_all_set_aside(paths, tmp_path)
  assert "Finished a set-aside interrupted earlier: moved aside " in out, out
  assert "Settings changed" not in out  # nothing of the old settings was left to find
  for path in paths[2:4]:  # trial 1's test outputs, as the earlier run wrote them
    assert pathlib.Path(f"{path}.rejected-1").read_text() == f"old {path.name}"


def test_a_complete_set_aside_moves_test_outputs_and_results_in_one_line(tmp_path, capsys):
  paths = _earlier_run(tmp_path)
  _book(str(tmp_path), learning_rate=2e-4, n_writes_test=1).reject_other_settings()
  lines = capsys.readouterr().out.splitlines()
  lines = [line for line in lines if line.startswith("Settings changed")]
  assert len(lines) == 1 and "rte_test_2_predictions.pkl -> rte_test_2_predictions.pkl." \
      "rejected-1" in lines[0], lines
  _assert_all_set_aside(paths, tmp_path)


def test_a_real_sigkill_inside_the_set_aside(tmp_path):
  paths = _earlier_run(tmp_path)
  script = (
      "import os, sys\n"
      "sys.path[:0] = ['tests', 'tests/finetuning']\n"
      "import test_set_aside as t\n"
      "real, n = os.rename, [0]\n"
      "def rename(a, b):\n"
      "  real(a, b)\n"
      "  n[0] += 1\n"
      "  if n[0] == 5:\n"
      "    os._exit(9)\n"
      "os.rename = rename\n"
      "t._book(sys.argv[1], learning_rate=2e-4).reject_other_settings()\n")
  proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO_ROOT,
                        env={**read_faults.quiet_env(), "PYTHONPATH": str(REPO_ROOT)},
                        capture_output=True)
  assert proc.returncode == 9, proc.stderr.decode()[-2000:]
  assert sum(pathlib.Path(f"{p}.rejected-1").exists() for p in paths) == 5
  _book(str(tmp_path), learning_rate=2e-4).reject_other_settings()
  _assert_all_set_aside(paths, tmp_path)


def test_a_journal_that_does_not_parse_stops_in_one_line(tmp_path):
  journal = pathlib.Path(set_aside.journal_path(str(tmp_path)))
  journal.write_text('{"paths": 3}')
  with pytest.raises(ValueError, match="set_aside.json does not parse: it lists the files"):
    set_aside.finish_interrupted(str(tmp_path))


@pytest.mark.slow
def test_a_kept_model_is_deleted_only_once_its_replacement_is_complete(data_dir, vocab_file,
                                                                       tmp_path, capsys,
                                                                       monkeypatch):
  """num_trials 1 -> 2 with keep_all_models false: trial 1's model (kept as the last) stays
  while trial 2 trains, also when trial 2's run is killed; it goes once trial 2 is complete."""
  from electra_tf.finetuning.runner import ModelRunner

  user_data.write_all(tmp_path, data_dir)
  models = tmp_path / "models" / "m" / "finetuning_models"
  kept = models / "movie_reviews_model_1"

  def run(**more):
    hparams = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1},
               "embedding_size": 16, "max_seq_length": 64, "train_batch_size": 8,
               "eval_batch_size": 8, "init_checkpoint": None, "seed": 3,
               "task_names": ["movie_reviews"], "num_train_epochs": 1.0,
               "save_checkpoints_steps": 5, "keep_all_models": False,
               "write_test_outputs": False, "vocab_file": vocab_file, **more}
    results = trials.run_finetuning(FinetuningConfig("m", str(tmp_path), **hparams))
    return results, capsys.readouterr().out

  first, _ = run(num_trials=1)
  assert (kept / "tf1" / "model.ckpt.index").is_file()
  train = ModelRunner.train

  def killed_in_trial_2(runner):
    if runner.model_dir.endswith("_2"):
      raise _Killed
    return train(runner)

  monkeypatch.setattr(ModelRunner, "train", killed_in_trial_2)
  with pytest.raises(_Killed):
    run(num_trials=2)
  monkeypatch.undo()
  assert (kept / "tf1" / "model.ckpt.index").is_file()  # still the one kept model
  assert tf.train.latest_checkpoint(str(kept)) is not None
  both, log = run(num_trials=2)
  assert both[0] == first[0] and trial_logs.steps_trained(log) == {2: 5}, log
  assert not kept.exists()
  assert sorted(p.name for p in models.iterdir()) == ["movie_reviews_model_2",
                                                      "movie_reviews_model_trials"]
