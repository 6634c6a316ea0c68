"""Recovery of interrupted bookkeeping: a checkpoint set aside (`checkpoint_files.reject`) killed
after any of its moves is finished by the next start-up; orphan data files of killed saves are
removed; `tf1/` is replaced whole; a finished trial counts only when its kept model is at the
recorded final step (TF2 checkpoint and `tf1/`); a settings file or record that a power cut left
empty is recovered or set aside with one line. Tiny checkpoints in temp folders."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import read_faults
from helpers.paths import REPO_ROOT

from electra_tf import checkpoints
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import trial_book
from electra_tf.training import checkpoint_files, checkpointing, input_state


def _checkpoint() -> tf.train.Checkpoint:
  return tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64), w=tf.Variable(np.ones(3)))


def _save(folder: pathlib.Path, steps=(4, 8)) -> tf.train.Checkpoint:
  ckpt = _checkpoint()
  manager = tf.train.CheckpointManager(ckpt, str(folder), max_to_keep=None)
  for step in steps:
    ckpt.step.assign(step)
    manager.save(checkpoint_number=step)
    os.makedirs(input_state.state_dir(str(folder), step))  # a saved input state beside it
  return ckpt


def _start_up(folder: pathlib.Path) -> list[str]:
  """What a training run's chief does first (CheckpointKeeper.check)."""
  return checkpointing.CheckpointKeeper(_checkpoint(), str(folder), 0).check(0)


def _names(folder: pathlib.Path) -> list[str]:
  return sorted(p.name for p in folder.iterdir())


class _Killed(Exception):
  pass


def _kill_after(monkeypatch, moves: int) -> None:
  """Every rename after the first ``moves`` ones raises (reject has no clean-up: the state on
  disk is what a kill at that point leaves)."""
  done = [0]
  gfile_rename, os_rename = tf.io.gfile.rename, os.rename

  def counting(real):
    def rename(*args, **kwargs):
      if done[0] >= moves:
        raise _Killed
      done[0] += 1
      return real(*args, **kwargs)
    return rename

  monkeypatch.setattr(tf.io.gfile, "rename", counting(gfile_rename))
  monkeypatch.setattr(os, "rename", counting(os_rename))


@pytest.mark.parametrize("moves", [0, 1, 2, 3])  # index, data file, input state; state file
def test_a_set_aside_killed_after_any_move_is_finished_at_start_up(tmp_path, monkeypatch, moves):
  _save(tmp_path)
  prefix = str(tmp_path / "ckpt-8")
  _kill_after(monkeypatch, moves)
  if moves == 3:  # every file moved, the state file not rewritten yet
    monkeypatch.setattr(checkpoint_files, "write_state_file", lambda *_: (_ for _ in ()).throw(
        _Killed()))
  with pytest.raises(_Killed):
    checkpoint_files.reject(prefix)
  monkeypatch.undo()
  if moves:  # the index moved first: ckpt-8 counts no more
    assert checkpoint_files.complete_checkpoints(str(tmp_path)) == [str(tmp_path / "ckpt-4")]
  notes = _start_up(tmp_path)
  if not moves:  # killed before the first move: ckpt-8 is whole and still counts
    assert [n for n in _names(tmp_path) if n.startswith("ckpt-8")] == [
        "ckpt-8.data-00000-of-00001", "ckpt-8.index"]
    assert notes == [f"Removed {tmp_path / 'ckpt-8.rejected'}, an empty folder left by an "
                     "interrupted set-aside"]
    return
  assert [n for n in _names(tmp_path) if n.startswith("ckpt-8")] == ["ckpt-8.rejected"], (
      _names(tmp_path), notes)
  assert sorted(os.listdir(tmp_path / "ckpt-8.rejected")) == [
      "ckpt-8.data-00000-of-00001", "ckpt-8.index", "input_state"]
  assert any(n.startswith("Finished setting") for n in notes) == (moves < 3), notes
  assert tf.train.get_checkpoint_state(str(tmp_path)).model_checkpoint_path.endswith("ckpt-4")
  assert os.listdir(tmp_path / "input_state") == ["ckpt-4"]


def test_a_real_kill_inside_a_set_aside(tmp_path):
  """os._exit right after the index moved (the case that left a finished trial on ckpt-4)."""
  _save(tmp_path)
  script = (
      "import os, sys, tensorflow as tf\n"
      "from electra_tf.training import checkpoint_files\n"
      "real = tf.io.gfile.rename\n"
      "def rename(a, b, *args, **kw):\n"
      "  real(a, b, *args, **kw)\n"
      "  os._exit(9)\n"
      "tf.io.gfile.rename = rename\n"
      "checkpoint_files.reject(sys.argv[1])\n")
  proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "ckpt-8")], cwd=REPO_ROOT,
                        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True)
  assert proc.returncode == 9, proc.stderr.decode()[-2000:]
  assert (tmp_path / "ckpt-8.data-00000-of-00001").exists()  # killed half-way
  notes = _start_up(tmp_path)
  assert notes[0] == (f"Finished setting {tmp_path / 'ckpt-8'} aside into "
                      f"{tmp_path / 'ckpt-8.rejected'} (interrupted earlier)"), notes
  assert [n for n in _names(tmp_path) if n.startswith("ckpt-8")] == ["ckpt-8.rejected"]


def test_orphan_data_files_are_removed_at_start_up_and_complete_ones_kept(tmp_path):
  _save(tmp_path, (4, 8, 12))
  (tmp_path / "ckpt-12.index").unlink()  # a kill in TensorFlow's cleanup of ckpt-12
  folder = checkpoint_files.reject(str(tmp_path / "ckpt-8"))  # set aside whole earlier
  orphan = tmp_path / "ckpt-8.data-00000-of-00001"  # then a killed save of ckpt-8 again
  orphan.write_bytes(b"partial")
  notes = _start_up(tmp_path)
  assert sorted(notes) == sorted(
      f"Removed {tmp_path / n}: a data file without its index, left by an interrupted save "
      "or deletion" for n in ("ckpt-12.data-00000-of-00001", "ckpt-8.data-00000-of-00001"))
  assert [n for n in _names(tmp_path) if n.startswith("ckpt-")] == [
      "ckpt-4.data-00000-of-00001", "ckpt-4.index", "ckpt-8.rejected"]
  assert sorted(os.listdir(folder)) == ["ckpt-8.data-00000-of-00001", "ckpt-8.index",
                                        "input_state"]
  assert _start_up(tmp_path) == []  # nothing more to do


def _tf1_step(folder: str) -> int:
  return int(tf.train.load_checkpoint(os.path.join(folder, "model.ckpt")
                                      ).get_tensor("global_step"))


def test_tf1_folder_is_replaced_whole_keeping_its_other_files(tmp_path, monkeypatch):
  tf1 = tmp_path / "tf1"
  checkpoints.save_tf1_checkpoint({"w": np.ones(2)}, str(tf1), global_step=3)
  (tf1 / "hparams.json").write_text("{}")
  checkpoints.save_tf1_checkpoint({"w": np.zeros(2)}, str(tf1), global_step=5)
  assert _tf1_step(str(tf1)) == 5 and (tf1 / "hparams.json").read_text() == "{}"
  assert _names(tmp_path) == ["tf1"]

  def dying_save(self, sess, path, **kwargs):  # writes a partial data file, then dies
    pathlib.Path(path + ".data-00000-of-00001").write_bytes(b"x")
    raise _Killed

  monkeypatch.setattr(tf.compat.v1.train.Saver, "save", dying_save)
  with pytest.raises(_Killed):
    checkpoints.save_tf1_checkpoint({"w": np.ones(2)}, str(tf1), global_step=7)
  monkeypatch.undo()
  assert _tf1_step(str(tf1)) == 5 and _names(tmp_path) == ["tf1"]
  assert _names(tf1) == ["checkpoint", "hparams.json", "model.ckpt.data-00000-of-00001",
                         "model.ckpt.index"]


# ------------------------------------------------------------------------------ trial records


class _Preprocessor:
  def data_key(self):
    return {"rte": "data"}


def _book(tmp_path: pathlib.Path, **hparams) -> trial_book.TrialBook:
  hparams = {"task_names": ["rte"], "num_trials": 2, "seed": 1, "init_checkpoint": None,
             "vocab_file": str(REPO_ROOT / "tests" / "golden" / "vocab.txt"), **hparams}
  config = FinetuningConfig("m", str(tmp_path), **hparams)
  return trial_book.TrialBook(config, _Preprocessor())


def _finished_trial(book: trial_book.TrialBook, trial: int = 1) -> pathlib.Path:
  """A trial folder as a finished run leaves it: ckpt-4, ckpt-8, tf1/ at step 8, settings,
  and its record (final step 8)."""
  folder = pathlib.Path(book.prepare_dir(trial))
  ckpt = _save(folder)
  checkpoints.save_tf1_checkpoint({"w": ckpt.w}, str(folder / "tf1"), global_step=8)
  book.record(trial, 8, {"rte": {"accuracy": 50.0}}, None)
  return folder


def test_a_finished_trial_needs_its_kept_model_at_the_recorded_step(tmp_path, capsys):
  book = _book(tmp_path, keep_all_models=True)
  folder = _finished_trial(book)
  assert book.finished(1)["final_step"] == 8
  assert "Trial 1/2 finished earlier, but" not in capsys.readouterr().out

  # an interrupted set-aside of ckpt-8: ckpt-4 is complete, but not the trial's model
  index = folder / "ckpt-8.index"
  (folder / "ckpt-8.rejected").mkdir()
  index.rename(folder / "ckpt-8.rejected" / index.name)
  assert book.finished(1) is None
  assert (f"Trial 1/2 finished earlier, but its newest checkpoint {folder}/ckpt-4 is at step 4, "
          "not its final step 8; training the trial again") in capsys.readouterr().out
  (folder / "ckpt-8.rejected" / index.name).rename(index)
  (folder / "ckpt-8.rejected").rmdir()

  # tf1/ from another step, or missing
  checkpoints.save_tf1_checkpoint({"w": np.ones(3)}, str(folder / "tf1"), global_step=4)
  assert book.finished(1) is None
  assert f"its {folder}/tf1/model.ckpt is at step 4, not at step 8" in capsys.readouterr().out
  checkpoints.save_tf1_checkpoint({"w": np.ones(3)}, str(folder / "tf1"), global_step=8)
  assert book.finished(1) is not None
  data = next((folder / "tf1").glob("model.ckpt.data-*"))
  data.write_bytes(data.read_bytes()[:3])
  assert book.finished(1) is None
  assert "tf1/model.ckpt is corrupt or truncated" in capsys.readouterr().out


def test_a_finished_trial_removes_the_old_tf1_copy_a_kill_left_beside_it(tmp_path):
  """A kill while the last save of tf1/ deleted the copy it replaced left that hidden copy in a
  finished trial's folder, which no later run writes again (found by benchmarks/chaos.py)."""
  book = _book(tmp_path, keep_all_models=True)
  folder = _finished_trial(book)
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  old = folder / f".tf1.tmp-{dead}-0a1b2c3d"  # as atomic_io.staged_dir names it
  (old / "sub").mkdir(parents=True)
  (old / "model.ckpt.index").write_bytes(b"x")
  assert book.finished(1)["final_step"] == 8
  assert not old.exists() and _tf1_step(str(folder / "tf1")) == 8


def test_a_503_reading_trial_records_is_retried_then_stops_touching_nothing(tmp_path,
                                                                            monkeypatch):
  """A transient error reading a trial's record or settings (a bucket's 503) is retried; one
  that persists stops the run in one line naming the file, with nothing moved or retrained."""
  read_faults.no_waits(monkeypatch)
  book = _book(tmp_path, keep_all_models=True)
  folder = _finished_trial(book)
  record = book.record_path(1)
  calls = read_faults.install(2, "io.gfile.GFile.read", monkeypatch.setattr)
  assert book.finished(1)["final_step"] == 8
  assert calls[:3] == [record] * 3
  monkeypatch.undo()
  read_faults.no_waits(monkeypatch)
  before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
  read_faults.install(-1, "io.gfile.GFile.read", monkeypatch.setattr)
  with pytest.raises(checkpoints.CheckpointUnavailableError,
                     match=f"file {record} could not be read in 5 tries"):
    book.finished(1)
  with pytest.raises(checkpoints.CheckpointUnavailableError, match="trial_settings.json"):
    trial_book._read_json(str(folder / trial_book.SETTINGS_FILE))
  assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
  assert folder.is_dir()


def test_a_model_that_must_now_be_kept_but_was_deleted_trains_again(tmp_path, capsys):
  _finished_trial(_book(tmp_path, keep_all_models=False))
  _book(tmp_path, keep_all_models=False).remove_dir_unless_kept(1)
  assert _book(tmp_path, keep_all_models=False).finished(1) is not None  # not kept: finished
  assert _book(tmp_path, keep_all_models=True).finished(1) is None
  assert "rte_model_1 holds no complete checkpoint (an earlier run did not keep its model, or " \
         "set it aside); training the trial again" in capsys.readouterr().out
  assert _book(tmp_path, num_trials=1, keep_all_models=False).finished(1) is None  # now last


def test_an_empty_settings_file_is_rewritten_from_a_matching_record(tmp_path, capsys):
  book = _book(tmp_path)
  folder = _finished_trial(book)
  settings = folder / trial_book.SETTINGS_FILE
  settings.write_text("")  # a power cut
  book.reject_other_settings()
  out = capsys.readouterr().out
  assert f"{settings} is empty or does not parse" in out and "rewrote it from there" in out
  assert json.loads(settings.read_text()) == book.settings(1)
  assert "moved aside" not in out and book.finished(1) is not None


def test_an_empty_settings_file_without_a_record_moves_the_folder_aside(tmp_path, capsys):
  book = _book(tmp_path)
  folder = pathlib.Path(book.prepare_dir(1))
  _save(folder)
  (folder / trial_book.SETTINGS_FILE).write_text('{"form')
  book.reject_other_settings()
  out = capsys.readouterr().out
  assert ("Settings changed since the earlier run (trial_settings.json empty or does not parse, "
          "and no record proves the settings); moved aside") in out, out
  assert (tmp_path / "models" / "m" / "finetuning_models" / "rte_model_1.rejected-1").is_dir()


def test_an_empty_record_is_moved_aside_alone_and_the_trial_evaluated_again(tmp_path, capsys):
  book = _book(tmp_path, keep_all_models=True)
  folder = _finished_trial(book)
  results = pathlib.Path(book.config.results_txt)
  results.parent.mkdir(parents=True, exist_ok=True)
  results.write_text("rte: accuracy: 50.00\n")
  record = pathlib.Path(book.record_path(1))
  record.write_text("")
  book.reject_other_settings()
  out = capsys.readouterr().out
  assert f"{record} is empty or does not parse" in out and "moved it to trial_1.json.rejected-1"
  assert "Settings changed" not in out and results.is_file() and folder.is_dir()
  assert book.finished(1) is None


@pytest.mark.parametrize("renames", [0, 1, 2])
def test_a_tf1_save_killed_between_its_renames_is_finished_not_deleted(tmp_path, monkeypatch,
                                                                         renames):
  """A kill inside the swap of a staged folder (after ``renames`` of its renames) leaves a whole
  copy that the next run puts in place: the trial's kept model is found whole, not retrained,
  and no copy is deleted as a leftover."""
  book = _book(tmp_path, keep_all_models=True)
  folder = _finished_trial(book)
  _kill_after(monkeypatch, renames)
  with pytest.raises(_Killed):
    checkpoints.save_tf1_checkpoint({"w": np.ones(3)}, str(folder / "tf1"), global_step=8)
  monkeypatch.undo()
  assert book.finished(1)["final_step"] == 8
  assert _tf1_step(str(folder / "tf1")) == 8 and (folder / "tf1" / "hparams.json").is_file()
  assert [n for n in _names(folder) if n.startswith(".")] == []
