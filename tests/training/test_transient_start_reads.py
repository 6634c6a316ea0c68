"""A transient read error (a bucket's 503) where a run starts is retried like one at restore
(checkpoints.read_retried): reading ``init_checkpoint`` for fine-tuning (through
model_source.load_model and load_tf1_checkpoint, which convert reads with too), and listing the
model folder on resume. If it persists, one line names the error and the file, and nothing
is written or moved; damage is still not retried.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil

import numpy as np
import pytest
from helpers import procs, read_faults, rte_finetune, toy_train
from helpers.paths import GOLDEN
from tensorflow.python.lib.io import file_io

from electra_tf import checkpoints, folder_lock, training
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import finetuning_model as model_lib
from electra_tf.finetuning import registry
from electra_tf.training import checkpoint_files

INIT = GOLDEN / "electra_small_2l"  # an official TF1 pre-training checkpoint at tiny shapes
ENV = read_faults.quiet_env()


@pytest.fixture(autouse=True)
def no_waits(monkeypatch):
  read_faults.no_waits(monkeypatch)


def _digests(folder: pathlib.Path) -> dict[str, str]:
  return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(folder.rglob("*"))
          if p.is_file() and p.name != folder_lock.LOCK_NAME}


# ----- init_checkpoint at fine-tuning start -----------------------------------------------------


def _hparams() -> dict:
  stored = json.loads((INIT / "hparams.json").read_text())
  return {k: stored[k] for k in ("model_size", "model_hparam_overrides", "vocab_size",
                                 "embedding_size")}


def _model(tmp_path: pathlib.Path) -> model_lib.FinetuningModel:
  config = FinetuningConfig("m", str(tmp_path), **_hparams(), max_seq_length=32,
                            task_names=["rte"])
  tasks = registry.get_tasks(["rte"], registry.make_tokenizer(str(GOLDEN / "vocab.txt")),
                             str(tmp_path), 32, preprocessed_data_dir=str(tmp_path))
  return model_lib.create_model(config, tasks)


@pytest.mark.parametrize("function", ["train.load_checkpoint", "train.list_variables",
                                      "io.gfile.exists", "io.gfile.GFile.read"])
def test_two_503s_on_the_init_checkpoint_load_the_same_weights(tmp_path, monkeypatch, function):
  init = tmp_path / "init"
  shutil.copytree(INIT, init)
  clean = _model(tmp_path)
  want = model_lib.load_init_checkpoint(clean, str(init))  # a folder: its state file is read too
  flaky = _model(tmp_path)
  calls = read_faults.install(2, function, monkeypatch.setattr)
  report = model_lib.load_init_checkpoint(flaky, str(init))
  assert len(calls) > 2, calls  # two 503s, then read
  assert report == want and len(report.loaded) > 10
  before, after = clean.tf1_variables(), flaky.tf1_variables()
  for name in report.loaded:
    np.testing.assert_array_equal(after[name].numpy(), before[name].numpy(), err_msg=name)


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_a_damaged_init_checkpoint_is_damage_a_short_file_after_the_retries(tmp_path,
                                                                            monkeypatch, damage):
  """A checksum mismatch is proof at the first read; a file cut short reads short every time,
  which counts once the retries saw it (a network read can be cut short once)."""
  init = tmp_path / "init"
  shutil.copytree(INIT, init)
  data = init / "model.ckpt.data-00000-of-00001"
  raw = bytearray(data.read_bytes())
  if damage == "flipped":
    raw[len(raw) // 2] ^= 0xFF
  data.write_bytes(bytes(raw) if damage == "flipped" else bytes(raw[:len(raw) // 2]))
  calls = read_faults.install(0, "train.load_checkpoint", monkeypatch.setattr)  # counts only
  with pytest.raises(checkpoints.CorruptCheckpointError, match="is corrupt or truncated"):
    model_lib.load_init_checkpoint(_model(tmp_path), str(init))
  assert len(calls) == (1 if damage == "flipped" else 5)


def test_a_persistent_503_on_the_init_checkpoint_stops_fine_tuning_in_one_line(
    data_dir, vocab_file, tmp_path):
  init = tmp_path / "init"
  shutil.copytree(INIT, init)
  before = _digests(init)
  start = rte_finetune.rte_run(
      data_dir, vocab_file, tmp_path, ENV, **_hparams(), init_checkpoint=str(init),
      wrapper=[read_faults.__file__, "-1:train.list_variables"])
  faulty = start()
  log = procs.finish(faulty, timeout=300)
  assert faulty.returncode == 1 and "Traceback" not in log, log[-3000:]
  assert log.strip().splitlines()[-1] == (
      f"run_finetuning.py: error: CheckpointUnavailableError: checkpoint {init}/model.ckpt "
      f"could not be read in 5 tries over 0 s (UnavailableError: {read_faults.MESSAGE}); "
      "nothing was moved; rerun when the storage answers"), log[-3000:]
  assert _digests(init) == before
  written = [str(p.relative_to(tmp_path)) for p in (tmp_path / "models").rglob("*")]
  assert not [p for p in written if "ckpt" in p or "rejected" in p or "aside" in p], written


# ----- listing the model folder on resume -------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> pathlib.Path:
  """A toy run's folder with ckpt-10 and ckpt-20."""
  folder = tmp_path_factory.mktemp("toy")
  toy_train.run(_one_device(), str(folder), 20, log_fn=lambda line: None)
  folder_lock.release(str(folder))
  return folder


def _one_device():
  return training.get_strategy("one_device", num_gpus=0)


def _swallowed_503s(monkeypatch, failures: int) -> list[str]:
  """tf.io.gfile's is-a-folder test answering False (as it does for any error, a 503 too) on
  its first `failures` calls for a toy run's folder: tf.io.gfile.listdir then says NotFound."""
  original, calls = file_io.is_directory, []

  def is_directory(path):
    if os.path.basename(str(path).rstrip("/")) == "run":
      calls.append(str(path))
      if failures < 0 or len(calls) <= failures:
        return False
    return original(path)

  monkeypatch.setattr(file_io, "is_directory", is_directory)
  return calls


def test_a_503_listing_the_folder_on_resume_is_retried(trained, tmp_path, monkeypatch):
  folder = tmp_path / "run"
  shutil.copytree(trained, folder)
  calls = read_faults.install(2, "io.gfile.listdir", monkeypatch.setattr)
  lines: list[str] = []
  summary = toy_train.run(_one_device(), str(folder), 30, log_fn=lines.append)
  assert len(calls) > 2
  assert summary["start_step"] == 20 and f"Restored {folder}/ckpt-20 at step 20" in lines, lines
  assert not list(folder.glob("*.rejected*"))


def test_a_swallowed_503_is_no_empty_folder(trained, tmp_path, monkeypatch):
  folder = tmp_path / "run"
  shutil.copytree(trained, folder)
  calls = _swallowed_503s(monkeypatch, 2)
  assert checkpoint_files.complete_checkpoints(str(folder)) == [str(folder / "ckpt-20"),
                                                               str(folder / "ckpt-10")]
  assert len(calls) == 3


@pytest.mark.parametrize("fault", ["503", "swallowed_503"])
def test_a_persistent_503_listing_the_folder_stops_and_moves_nothing(trained, tmp_path,
                                                                      monkeypatch, fault):
  folder = tmp_path / "run"
  shutil.copytree(trained, folder)
  before = _digests(folder)
  if fault == "503":
    read_faults.install(-1, "io.gfile.listdir", monkeypatch.setattr)
  else:
    _swallowed_503s(monkeypatch, -1)
  with pytest.raises(checkpoints.CheckpointUnavailableError) as err:
    toy_train.run(_one_device(), str(folder), 30, log_fn=lambda line: None)
  cause = f"UnavailableError: {read_faults.MESSAGE}" if fault == "503" else (
      "NotFoundError: Could not find directory " + str(folder))
  assert str(err.value) == (
      f"folder {folder} could not be read in 5 tries over 0 s ({cause}); nothing was moved; "
      "rerun when the storage answers")
  assert _digests(folder) == before
