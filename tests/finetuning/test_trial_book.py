"""A fine-tuning trial's settings and places (``electra_tf.finetuning.trial_book.TrialBook``):
what counts as a setting (not where things are, how often it logs or how many trials), each
trial's seed, its folder and record. The reuse and recovery rules:
tests/finetuning/test_trial_recovery.py and tests/finetuning/test_set_aside.py."""

from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import trial_book


class _Preprocessor:
  def data_key(self):
    return {"rte": "data"}


def _book(root, **hparams):
  hparams = {"task_names": ["rte"], "init_checkpoint": None, "seed": 5, **hparams}
  return trial_book.TrialBook(FinetuningConfig("m", str(root), **hparams), _Preprocessor())


def test_settings_hold_what_a_trial_computes_and_its_seed(tmp_path):
  book = _book(tmp_path)
  first, second = book.settings(1), book.settings(2)
  assert (first["seed"], second["seed"]) == (5, 6)
  assert {k: v for k, v in first.items() if k != "seed"} == {
    k: v for k, v in second.items() if k != "seed"}
  assert first["data"] == {"rte": "data"} and first["format"] == trial_book.SETTINGS_FORMAT
  assert "learning_rate" in first["hparams"]
  assert not set(first["hparams"]) & trial_book.NOT_SETTINGS
  moved = _book(tmp_path / "elsewhere", num_trials=3, iterations_per_loop=7, seed=5)
  assert moved.settings(1) == first  # places, trial counts and logging are no settings
  assert _book(tmp_path, learning_rate=1e-3).settings(1) != first
  assert trial_book.trial_seed(None, 3) is None


def test_a_trials_folder_and_record(tmp_path):
  book = _book(tmp_path)
  model_dir = book.config.model_dir
  assert book.trial_dir(2) == f"{model_dir}_2"
  assert book.record_path(2) == f"{model_dir}_trials/trial_2.json"


def test_a_run_that_lost_its_lease_prepares_no_trial_folder(tmp_path, capsys):
  """Paused past its lease right before a trial's folder, the run another run took over stops
  with the one line: nothing printed before it, nothing removed or written."""
  import os

  import pytest
  from helpers import procs

  from electra_tf import folder_lock

  book = _book(tmp_path)
  trials = f"{book.config.model_dir}_trials"
  folder_lock.acquire(trials)
  parent, name = os.path.split(book.trial_dir(2))
  with open(os.path.join(parent, f".{name}.tmp-1-0a1b2c3d-0a1b2c3d"), "w") as f:
    f.write("x")  # a killed staged write's leftover: not this run's to remove any more
  before = sorted(os.listdir(parent))
  with procs.renewed_lock(os.path.join(trials, folder_lock.LOCK_NAME), host="node-2"):
    with pytest.raises(folder_lock.LostLockError, match="^this run lost its lock on "):
      book.prepare_dir(2)
  assert sorted(os.listdir(parent)) == before and capsys.readouterr().out == ""
  folder_lock.release(trials)
