"""Reading the newest checkpoint of a folder checks TensorFlow's state file against the folder
listing: a state file a power cut left empty, or naming an older checkpoint, is not trusted
(init_checkpoint, convert); tiny TF2 checkpoints in temp folders."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import checkpoint_reads, checkpoints
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import trials


def _save(folder: pathlib.Path, steps=(4, 8)) -> None:
  ckpt = tf.train.Checkpoint(w=tf.Variable(np.ones(3)))
  manager = tf.train.CheckpointManager(ckpt, str(folder), max_to_keep=None)
  for step in steps:
    manager.save(checkpoint_number=step)


def _init_checkpoint_error(folder: pathlib.Path) -> str | None:
  config = FinetuningConfig("m", str(folder), init_checkpoint=str(folder), task_names=["rte"])
  try:
    trials.check_init_checkpoint(config)
  except FileNotFoundError as e:
    return str(e)
  return None


def test_an_empty_state_file_still_finds_the_newest_checkpoint(tmp_path):
  _save(tmp_path)
  (tmp_path / "checkpoint").write_text("")  # renamed into place, its content not yet on disk
  assert checkpoints.resolve_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-8")
  assert _init_checkpoint_error(tmp_path) is None  # no advice to train from random weights


def test_a_stale_state_file_does_not_give_an_older_checkpoint(tmp_path):
  _save(tmp_path)
  (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-4"\n')
  assert checkpoints.resolve_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-8")


def test_the_newest_checkpoint_must_be_whole(tmp_path):
  _save(tmp_path)
  index = tmp_path / "ckpt-8.index"
  index.write_bytes(index.read_bytes()[:-8])  # its footer cut off: not a checkpoint
  assert checkpoints.resolve_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-4")
  (tmp_path / "ckpt-4.data-00000-of-00001").unlink()  # a shard missing: not whole either
  with pytest.raises(FileNotFoundError, match="no checkpoint found in directory"):
    checkpoints.resolve_checkpoint(str(tmp_path))


def test_an_unnumbered_checkpoint_is_found_through_the_state_file(tmp_path):
  checkpoints.save_tf1_checkpoint({"w": np.ones(2)}, str(tmp_path / "out"), global_step=3)
  os.rename(tmp_path / "out" / "model.ckpt.index", tmp_path / "out" / "weights.index")
  for data in (tmp_path / "out").glob("model.ckpt.data-*"):
    os.rename(data, str(data).replace("model.ckpt", "weights"))
  (tmp_path / "out" / "checkpoint").write_text('model_checkpoint_path: "weights"\n')
  assert checkpoints.resolve_checkpoint(str(tmp_path / "out")) == str(tmp_path / "out" /
                                                                      "weights")


def test_newest_whole_reads_numbered_names_of_any_stem(tmp_path):
  _save(tmp_path)
  for name in os.listdir(tmp_path):
    if name.startswith("ckpt-"):
      os.rename(tmp_path / name, tmp_path / name.replace("ckpt-", "model.ckpt-"))
  names = set(os.listdir(tmp_path))
  assert checkpoint_reads.newest_whole(str(tmp_path), names) == str(tmp_path / "model.ckpt-8")
