"""Checkpoints for the training loop: fail-fast model_dir checks, periodic saves, safe resume.

Why a kill during a save cannot corrupt a resume (TF 2.20 behaviour, tested in
tests/test_training.py by SIGKILLing a process inside a save):
  1. `tf.train.Checkpoint` writes tensor shards to `<prefix>_temp/`, then MergeV2Checkpoints
     moves the data file to `<prefix>.data-*` and writes `<prefix>.index` last.
  2. Only after that returns does `CheckpointManager` rewrite the `checkpoint` state file, with
     `atomic_write_string_to_file` (write a temp file, rename over the old one).
So the state file only ever names fully written checkpoints; a kill leaves at worst orphan
`<prefix>_temp/` or `<prefix>.data-*` files, which the next save at that step overwrites.
`latest()` still checks that the named checkpoint's index exists, so a state file damaged by
hand gives a clear error instead of a silent restart from scratch.
"""

from __future__ import annotations

import os
import shutil
import uuid

import tensorflow as tf


class ModelDirError(ValueError):
  """model_dir cannot hold checkpoints (not creatable, not writable, or too little space)."""


class CheckpointSaveError(RuntimeError):
  """A checkpoint could not be written; the previous checkpoint is still the latest."""


def _first_line(error: BaseException) -> str:
  text = getattr(error, "message", None) or str(error) or type(error).__name__
  return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def checkpoint_bytes(variables: list[tf.Variable]) -> int:
  """Bytes one checkpoint of `variables` takes on disk (tensor data; the index is small)."""
  seen, total = set(), 0
  for v in variables:
    if id(v) in seen:
      continue
    seen.add(id(v))
    total += v.shape.num_elements() * v.dtype.size
  return total


def check_model_dir(model_dir: str, bytes_per_checkpoint: int) -> None:
  """Raises ModelDirError unless model_dir can be created, written, and fits two checkpoints.

  Two, because CheckpointManager writes a new checkpoint before it deletes the oldest. Free
  space is only checked on local paths (gs:// and other file systems have no cheap query).
  """
  if not model_dir:
    raise ModelDirError("model_dir is empty")
  try:
    tf.io.gfile.makedirs(model_dir)
  except (tf.errors.OpError, OSError) as e:
    raise ModelDirError(f"model_dir {model_dir} cannot be created: {_first_line(e)}") from None
  if not tf.io.gfile.isdir(model_dir):
    raise ModelDirError(f"model_dir {model_dir} exists and is not a directory")
  probe = os.path.join(model_dir, f".write_probe_{uuid.uuid4().hex}")
  try:
    with tf.io.gfile.GFile(probe, "w") as f:
      f.write("ok")
    tf.io.gfile.remove(probe)
  except (tf.errors.OpError, OSError) as e:
    raise ModelDirError(f"model_dir {model_dir} is not writable: {_first_line(e)}") from None
  if "://" in model_dir:
    return
  free = shutil.disk_usage(model_dir).free
  need = 2 * bytes_per_checkpoint
  if free < need:
    raise ModelDirError(
        f"not enough free disk space in model_dir {model_dir}: {free / 2**20:.1f} MiB free, "
        f"need {need / 2**20:.1f} MiB (2 checkpoints of model + optimizer variables)")


def latest_checkpoint(model_dir: str) -> str | None:
  """Prefix named by model_dir's `checkpoint` state file, or None; error if its files are gone."""
  state = tf.train.get_checkpoint_state(model_dir)
  if state is None or not state.model_checkpoint_path:
    return None
  path = state.model_checkpoint_path  # relative names come back joined to model_dir already
  if not tf.io.gfile.exists(path + ".index"):
    raise FileNotFoundError(
        f"{os.path.join(model_dir, 'checkpoint')} names {path} but {path}.index does not exist; "
        "fix or delete the state file to resume from an older checkpoint")
  return path


def step_of(checkpoint_path: str) -> int:
  """Global step of a checkpoint from this loop (`<model_dir>/ckpt-<step>`)."""
  return int(checkpoint_path.rsplit("-", 1)[-1])


class CheckpointKeeper:
  """Saves `checkpoint` as `<model_dir>/ckpt-<step>`, keeping the newest `max_to_keep` (0: all).

  Under MultiWorkerMirroredStrategy every worker must take part in a save; the chief writes
  model_dir and the others write a scratch folder that is deleted right after (the
  tf.distribute multi-worker checkpointing recipe). All workers restore from model_dir.
  """

  def __init__(self, checkpoint: tf.train.Checkpoint, model_dir: str, max_to_keep: int,
               is_chief: bool = True, task_id: int = 0):
    self.model_dir = model_dir
    self.is_chief = is_chief
    self.save_dir = model_dir if is_chief else os.path.join(model_dir, f"worker_tmp_{task_id}")
    self._manager = tf.train.CheckpointManager(
        checkpoint, self.save_dir, max_to_keep=(max_to_keep or None) if is_chief else 1)

  def check(self, bytes_per_checkpoint: int) -> None:
    """Fail-fast check of the folder this worker saves to (see check_model_dir)."""
    check_model_dir(self.save_dir, bytes_per_checkpoint)
    if not self.is_chief:
      tf.io.gfile.rmtree(self.save_dir)  # recreated by each save, deleted after it

  def latest(self) -> str | None:
    return latest_checkpoint(self.model_dir)

  def save(self, step: int) -> str:
    """Writes the checkpoint for `step`; returns its prefix (the scratch one on non-chiefs)."""
    try:
      path = self._manager.save(checkpoint_number=step)
    except (tf.errors.OpError, OSError) as e:
      raise CheckpointSaveError(
          f"saving the checkpoint for step {step} in {self.save_dir} failed "
          f"({_first_line(e)}); the latest complete checkpoint is still "
          f"{latest_checkpoint(self.model_dir)}") from None
    if not self.is_chief:
      tf.io.gfile.rmtree(self.save_dir)
    return path
