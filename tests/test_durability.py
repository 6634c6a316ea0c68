"""Durable writes (power cuts): each commit point fsyncs the new file, renames it, then fsyncs
the folder, as databases do; a checkpoint is durable before TensorFlow deletes older ones."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from electra_tf import atomic_io
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import trial_book
from electra_tf.training import checkpointing


@pytest.fixture
def events(monkeypatch) -> list[tuple[str, str]]:
  """Records ("fsync", path) for every os.fsync and ("replace", destination) for every
  os.replace, in order; both still act."""
  seen: list[tuple[str, str]] = []
  real_fsync, real_replace = os.fsync, os.replace

  def fsync(fd):
    seen.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
    return real_fsync(fd)

  def replace(src, dst, **kwargs):
    seen.append(("replace", os.fspath(dst)))
    return real_replace(src, dst, **kwargs)

  monkeypatch.setattr(os, "fsync", fsync)
  monkeypatch.setattr(os, "replace", replace)
  return seen


def test_an_atomic_write_fsyncs_the_file_then_renames_then_fsyncs_the_folder(tmp_path, events):
  path = str(tmp_path / "record.json")
  atomic_io.write_json(path, {"a": 1})
  assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"]
  assert os.path.basename(events[0][1]).startswith(".record.json.tmp-")
  assert events[1:] == [("replace", path), ("fsync", str(tmp_path))]


def test_a_staged_folder_is_fsynced_whole_before_its_rename(tmp_path, events):
  target = tmp_path / "tf1"
  with atomic_io.staged_dir(str(target)) as stage:
    os.makedirs(os.path.join(stage, "sub"))
    for name in ("a", "sub/b"):
      with open(os.path.join(stage, name), "w") as f:
        f.write(name)
  synced = [os.path.relpath(p, tmp_path) for kind, p in events if kind == "fsync"]
  stage = synced[0].split("/")[0]
  assert stage.startswith(".tf1.tmp-")
  assert sorted(synced[:4]) == sorted([f"{stage}/a", f"{stage}/sub/b", f"{stage}/sub", stage])
  assert synced[4:] == [".", "."]  # the parent, after each rename (to .tf1.staged, to tf1)
  assert (target / "sub" / "b").read_text() == "sub/b"


def test_a_checkpoint_is_durable_before_older_ones_are_deleted(tmp_path, events):
  model_dir = str(tmp_path)
  checkpoint = tf.train.Checkpoint(v=tf.Variable([1.0, 2.0]))
  keeper = checkpointing.CheckpointKeeper(checkpoint, model_dir, max_to_keep=1)
  keeper.check(64)
  keeper.save(1)
  events.clear()
  older_present = []
  real = os.fsync

  def fsync(fd):  # ckpt-1 must still be there when ckpt-2's files are made durable
    older_present.append(os.path.exists(os.path.join(model_dir, "ckpt-1.index")))
    real(fd)

  os.fsync = fsync
  try:
    keeper.save(2)
  finally:
    os.fsync = real
  synced = [os.path.relpath(p, model_dir) for kind, p in events if kind == "fsync"]
  data = sorted(n for n in os.listdir(model_dir) if n.startswith("ckpt-2.data-"))
  assert synced == ["ckpt-2.index", *data, ".", "checkpoint", "."]
  assert older_present[:len(data) + 2] == [True] * (len(data) + 2)
  assert not os.path.exists(os.path.join(model_dir, "ckpt-1.index"))  # max_to_keep 1
  assert tf.train.latest_checkpoint(model_dir) == os.path.join(model_dir, "ckpt-2")


class _Preprocessor:
  def data_key(self):
    return {"rte": "data"}


def test_a_new_trial_folder_and_its_parents_are_durable(tmp_path, events, vocab_file):
  config = FinetuningConfig("m", str(tmp_path), task_names=["rte"], vocab_file=vocab_file,
                            init_checkpoint=None)
  folder = trial_book.TrialBook(config, _Preprocessor()).prepare_dir(1)
  synced = [path for kind, path in events if kind == "fsync"]
  models = os.path.dirname(folder)  # .../models/m/finetuning_models: new as well
  for parent in (models, os.path.dirname(models), str(tmp_path)):
    assert parent in synced, (parent, synced)
