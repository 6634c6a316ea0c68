"""Checkpoints for the training loop: fail-fast model_dir checks, periodic saves, safe resume.

Why a kill during a save cannot corrupt a resume (TF 2.20 behaviour, tested in
tests/test_training.py by SIGKILLing a process inside a save):
  1. `tf.train.Checkpoint` writes tensor shards to `<prefix>_temp/`, then MergeV2Checkpoints
     moves the data file to `<prefix>.data-*` and writes `<prefix>.index` last.
  2. Only after that returns does `CheckpointManager` rewrite the `checkpoint` state file, with
     `atomic_write_string_to_file` (write a temp file, rename over the old one).
So the state file only ever names fully written checkpoints; a kill leaves at worst orphan
`<prefix>_temp/` or `<prefix>.data-*` files, which the next save at that step overwrites;
start-up deletes `ckpt-<N>_temp/` folders older than the newest complete checkpoint.
`latest()` still checks that the named checkpoint's index exists, so a state file damaged by
hand gives a clear error instead of a silent restart from scratch; a checkpoint whose files
cannot be read on resume is skipped, with a warning, for the newest older one that can.
A failed save (e.g. a full disk) deletes its partial files and leaves the previous checkpoint
as the latest.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import uuid
from collections.abc import Callable

import tensorflow as tf

from electra_tf import checkpoints

_TEMP_DIR_RE = re.compile(r"^ckpt-(\d+)_temp$")
_INDEX_RE = re.compile(r"^ckpt-(\d+)\.index$")


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


def remove_stale_temp_dirs(model_dir: str) -> list[str]:
  """Deletes `ckpt-<N>_temp/` folders left by a save that was killed; returns their paths.

  Only this loop's temp folders, and only those older than the newest complete checkpoint
  (N at or below its step, or last modified before its index): a save in progress is newer.
  Local model_dir only (the folders are found by listing it).
  """
  if "://" in model_dir or not os.path.isdir(model_dir):
    return []
  try:
    newest = latest_checkpoint(model_dir)
  except FileNotFoundError:
    return []
  if newest is None:
    return []
  newest_step, newest_time = step_of(newest), os.path.getmtime(newest + ".index")
  removed = []
  for name in sorted(os.listdir(model_dir)):
    m = _TEMP_DIR_RE.match(name)
    path = os.path.join(model_dir, name)
    if not m or not os.path.isdir(path):
      continue
    if int(m.group(1)) <= newest_step or os.path.getmtime(path) < newest_time:
      shutil.rmtree(path, ignore_errors=True)
      removed.append(path)
  return removed


def _older_checkpoints(model_dir: str, step: int) -> list[str]:
  """Prefixes of complete-looking `ckpt-<N>` (index present) with N < step, newest first."""
  found = []
  for index in glob.glob(os.path.join(glob.escape(model_dir), "ckpt-*.index")):
    m = _INDEX_RE.match(os.path.basename(index))
    if m and int(m.group(1)) < step:
      found.append((int(m.group(1)), index[:-len(".index")]))
  return [p for _, p in sorted(found, reverse=True)]


def restore_readable(checkpoint: tf.train.Checkpoint, model_dir: str,
                     warn: Callable[[str], None]):
  """Restores the newest checkpoint of model_dir whose files can be read.

  Returns (prefix, load status), or (None, None) without a checkpoint. A corrupt newest one
  (truncated data file, damaged index) is skipped with a warning for the next older one;
  CorruptCheckpointError if none is readable.
  """
  newest = latest_checkpoint(model_dir)
  if newest is None:
    return None, None
  candidates = [newest] + _older_checkpoints(model_dir, step_of(newest))
  for i, path in enumerate(candidates):
    try:
      with checkpoints.reading(path):
        return path, checkpoint.restore(path)
    except checkpoints.CorruptCheckpointError as e:
      if i + 1 == len(candidates):
        raise
      warn(f"Warning: {e}; resuming from the previous checkpoint {candidates[i + 1]}")
  raise AssertionError("unreachable")


def _remove_partial_save(save_dir: str, step: int) -> None:
  """Deletes what a failed save of `ckpt-<step>` wrote (temp folder, data files, index)."""
  prefix = os.path.join(save_dir, f"ckpt-{step}")
  try:
    if latest_checkpoint(save_dir) == prefix:  # never touch a complete checkpoint
      return
  except FileNotFoundError:
    pass
  for path in tf.io.gfile.glob(glob.escape(prefix) + "_temp") + \
      tf.io.gfile.glob(glob.escape(prefix) + ".*"):
    try:
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)
    except (tf.errors.OpError, OSError):
      pass


class CheckpointKeeper:
  """Saves `checkpoint` as `<model_dir>/ckpt-<step>`, keeping the newest `max_to_keep` (0: all).

  Under MultiWorkerMirroredStrategy every worker must take part in a save; the chief writes
  model_dir and the others write a scratch folder that is deleted right after (the
  tf.distribute multi-worker checkpointing recipe). All workers restore from model_dir.
  """

  def __init__(self, checkpoint: tf.train.Checkpoint, model_dir: str, max_to_keep: int,
               is_chief: bool = True, task_id: int = 0):
    self.model_dir = model_dir
    self.checkpoint = checkpoint
    self.is_chief = is_chief
    self.save_dir = model_dir if is_chief else os.path.join(model_dir, f"worker_tmp_{task_id}")
    self._manager = tf.train.CheckpointManager(
        checkpoint, self.save_dir, max_to_keep=(max_to_keep or None) if is_chief else 1)

  def check(self, bytes_per_checkpoint: int) -> list[str]:
    """Fail-fast check of the folder this worker saves to (see check_model_dir), after the
    chief deleted stale temp folders of killed saves (returned, to be reported)."""
    removed = remove_stale_temp_dirs(self.model_dir) if self.is_chief else []
    check_model_dir(self.save_dir, bytes_per_checkpoint)
    if not self.is_chief:
      tf.io.gfile.rmtree(self.save_dir)  # recreated by each save, deleted after it
    return removed

  def latest(self) -> str | None:
    return latest_checkpoint(self.model_dir)

  def restore(self, warn: Callable[[str], None]):
    """(prefix, status) of the newest readable checkpoint, or (None, None); see restore_readable."""
    return restore_readable(self.checkpoint, self.model_dir, warn)

  def save(self, step: int) -> str:
    """Writes the checkpoint for `step`; returns its prefix (the scratch one on non-chiefs)."""
    try:
      path = self._manager.save(checkpoint_number=step)
    except (tf.errors.OpError, OSError) as e:
      _remove_partial_save(self.save_dir, step)
      raise CheckpointSaveError(
          f"saving the checkpoint for step {step} in {self.save_dir} failed "
          f"({checkpoints.tf_error_summary(e)}); the latest complete checkpoint is still "
          f"{latest_checkpoint(self.model_dir)}") from None
    if not self.is_chief:
      tf.io.gfile.rmtree(self.save_dir)
    return path
