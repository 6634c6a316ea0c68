"""Checkpoints for the training loop: fail-fast model_dir checks, periodic saves, safe resume.

Why a kill during a save cannot corrupt a resume (TF 2.20 behaviour, tested in
tests/training/test_training.py by SIGKILLing a process inside a save):
  1. `tf.train.Checkpoint` writes tensor shards to `<prefix>_temp/`, then MergeV2Checkpoints
     moves the data file to `<prefix>.data-*` and writes `<prefix>.index` last.
  2. Only after that returns does `CheckpointManager` rewrite the `checkpoint` state file, with
     `atomic_write_string_to_file` (write a temp file, rename over the old one).
A kill leaves at worst orphan `<prefix>_temp/` or `<prefix>.data-*` files, which the next
save at that step overwrites; start-up deletes every `ckpt-<N>_temp/` folder (never resumable).
The checkpoint resumed from is the newest complete one on disk (index and every data shard
present), whatever the `checkpoint` state file says: a state file deleted or naming files
deleted by hand is rewritten, with one line, never a restart from step 0 over older
checkpoints (checkpoint_files.py). A checkpoint whose files prove damaged (checkpoints.is_damage),
or whose values hold NaN or Inf, is moved aside on resume (`checkpoint_files.reject`: kept in
`ckpt-<N>.rejected/`, never counted again), with a warning, for the newest older one that is
usable; any other read error (a 503, a timeout) is retried, then stops the run and moves
nothing. All workers must restore the same step. The training loop never writes a checkpoint
holding NaN or Inf. A failed save (e.g. a full disk) deletes its partial files and leaves the
previous checkpoint as the latest.

Durable on a local model_dir: a save returns once the new checkpoint's files and the folder are
fsynced (before TensorFlow rewrites the state file and deletes the checkpoints beyond
`max_to_keep`), then the state file and the folder; a power cut leaves the newest saved
checkpoint readable (see atomic_io for what is not promised).

One run per model_dir: the chief holds model_dir's lock (folder_lock.py) from `check`, before
it deletes anything there, until the process ends, and checks it before each save (a run whose
lease was taken stops with one line, writing nothing). Non-chief workers save to a scratch
folder of their own (`worker_tmp_<task>-<run>/`) and delete nothing else.
"""

from __future__ import annotations

import glob
import os
import shutil
import uuid
from collections.abc import Callable

import tensorflow as tf

from electra_tf import atomic_io, checkpoints, folder_lock, lock_lease
from electra_tf.console import error_line
from electra_tf.training import checkpoint_files, input_state
from electra_tf.training.checkpoint_files import (
  complete_checkpoints,
  remove_stale_temp_dirs,
  remove_stale_worker_dirs,
  repair_state_file,
  step_of,
)
from electra_tf.training.checkpoint_restore import (
  NO_CHECKPOINT,
  RESTORE_FAILED,
  RestoreDisagreementError,
  restore_readable,
)


class ModelDirError(ValueError):
  """model_dir cannot hold checkpoints (not creatable, not writable, or too little space)."""


class CheckpointSaveError(RuntimeError):
  """A checkpoint could not be written; the previous checkpoint is still the latest."""


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
    raise ModelDirError(f"model_dir {model_dir} cannot be created: "
                        f"{error_line(e, name_type=False)}") from None
  if not tf.io.gfile.isdir(model_dir):
    raise ModelDirError(f"model_dir {model_dir} exists and is not a directory")
  probe = os.path.join(model_dir, f".write_probe_{uuid.uuid4().hex}")
  try:
    with tf.io.gfile.GFile(probe, "w") as f:
      f.write("ok")
    tf.io.gfile.remove(probe)
  except (tf.errors.OpError, OSError) as e:
    raise ModelDirError(f"model_dir {model_dir} is not writable: "
                        f"{error_line(e, name_type=False)}") from None
  if "://" in model_dir:
    return
  free = shutil.disk_usage(model_dir).free
  need = 2 * bytes_per_checkpoint
  if free < need:
    raise ModelDirError(
        f"not enough free disk space in model_dir {model_dir}: {free / 2**20:.1f} MiB free, "
        f"need {need / 2**20:.1f} MiB (2 checkpoints of model + optimizer variables)")


def _remove_partial_save(save_dir: str, step: int, force: bool = False) -> None:
  """Deletes what a failed save of `ckpt-<step>` wrote (temp folder, data files, index);
  a complete checkpoint only with `force` (its files are this save's, not durable)."""
  prefix = os.path.join(save_dir, f"ckpt-{step}")
  if not force and prefix in complete_checkpoints(save_dir):  # never touch a complete one
    return
  for path in (tf.io.gfile.glob(glob.escape(prefix) + "_temp")
               + tf.io.gfile.glob(glob.escape(prefix) + ".index")
               + tf.io.gfile.glob(glob.escape(prefix) + ".data-*")):  # not <prefix>.rejected/
    try:
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)
    except (tf.errors.OpError, OSError):
      pass


def _why(error: BaseException) -> str:
  """What went wrong, in a few words (an OSError's text without its ``[Errno N]``)."""
  if isinstance(error, OSError) and error.strerror:
    return error.strerror
  return checkpoints.tf_error_summary(error)


class CheckpointKeeper:
  """Saves `checkpoint` as `<model_dir>/ckpt-<step>`, keeping the newest `max_to_keep` (0: all).

  Under MultiWorkerMirroredStrategy every worker must take part in a save; the chief writes
  model_dir and the others write a scratch folder that is deleted right after (the
  tf.distribute multi-worker checkpointing recipe). All workers restore from model_dir; a
  checkpoint the restore rejects is moved aside by the chief (see `reject`) and skipped by all.
  """

  def __init__(self, checkpoint: tf.train.Checkpoint, model_dir: str, max_to_keep: int,
               is_chief: bool = True, task_id: int = 0):
    self.model_dir = model_dir
    self.checkpoint = checkpoint
    self.is_chief = is_chief
    self.save_dir = model_dir if is_chief else os.path.join(  # unique: a folder of its own
        model_dir, f"worker_tmp_{task_id}-{lock_lease.RUN_ID[:8]}")
    self._max_to_keep = (max_to_keep or None) if is_chief else 1
    self._manager = self._new_manager()
    self.input: input_state.InputState | None = None  # saved beside each checkpoint if set
    self._ours: set[int] = set()  # steps whose checkpoint this run restored or saved
    self._rejected: set[str] = set()  # prefixes the restore rejected (moved aside by the chief)

  def _new_manager(self) -> tf.train.CheckpointManager:
    """A manager counting the checkpoints the state file lists now (it reads it once)."""
    return tf.train.CheckpointManager(self.checkpoint, self.save_dir, self._max_to_keep)

  def check(self, bytes_per_checkpoint: int) -> list[str]:
    """Fail-fast check of the folder this worker saves to (see check_model_dir), after the
    chief deleted stale temp folders of killed saves and repaired a stale state file; returns
    the lines reporting those."""
    notes = []
    if self.is_chief:  # first: no other run may be writing what is cleaned below
      notes = [line for line in [self._lock(bytes_per_checkpoint)] if line]
      notes += [f"Removed {p}, left by a save that was interrupted"
                for p in remove_stale_temp_dirs(self.model_dir)]
      remove_stale_worker_dirs(self.model_dir)  # scratch folders of workers that ended
      notes += checkpoint_files.finish_interrupted(self.model_dir)
      input_state.prune(self.model_dir, set(map(step_of, complete_checkpoints(self.model_dir))))
    try:
      check_model_dir(self.save_dir, bytes_per_checkpoint)
    except ModelDirError:
      if self.is_chief:
        folder_lock.release(self.model_dir)  # the run ends here, having written nothing
      raise
    if self.is_chief:
      repaired = repair_state_file(self.model_dir)
      if repaired:
        notes.append(repaired)
        self._manager = self._new_manager()  # it read the old state file
    else:
      tf.io.gfile.rmtree(self.save_dir)  # this worker's own; recreated by each save
    return notes

  def _lock(self, bytes_per_checkpoint: int) -> str | None:
    """Takes model_dir's lock (folder_lock.acquire); a folder that cannot hold it gets
    check_model_dir's line."""
    try:
      return folder_lock.acquire(self.model_dir)
    except folder_lock.FolderLockedError:
      raise
    except (tf.errors.OpError, OSError) as e:
      check_model_dir(self.model_dir, bytes_per_checkpoint)
      raise ModelDirError(f"model_dir {self.model_dir}: the run's lock cannot be created "
                          f"({error_line(e, name_type=False)})") from None

  def latest(self) -> str | None:
    """The newest complete checkpoint in model_dir, never one the restore rejected."""
    return next((p for p in complete_checkpoints(self.model_dir) if p not in self._rejected),
                None)

  def made_or_restored(self, step: int) -> bool:
    """Whether the checkpoint of `step` is one this run restored or saved (a complete-looking
    `ckpt-<step>` it did not make may be damaged: a save at that step replaces it)."""
    return step in self._ours

  def restore(self, warn: Callable[[str], None],
              non_finite: Callable[[], str | None] = lambda: None,
              agree: Callable[[int], list[int]] = lambda step: [step]):
    """(prefix, status) of the newest usable checkpoint, or (None, None); see restore_readable.

    `agree(step)` gives the restored step of every worker (NO_CHECKPOINT: none,
    RESTORE_FAILED: the restore raised; a collective, so every worker calls it, also one whose
    restore failed). A disagreement raises RestoreDisagreementError on every worker that
    restored (the failed one raises its own error) and nothing is moved. Otherwise each
    checkpoint the restore rejected gets one warning line and is never counted again; the
    chief moves it aside (`checkpoint_files.reject`), once every worker has read (`agree`
    is a barrier), other workers only skip it. A read error that is not damage
    (CheckpointUnavailableError) moves nothing.
    """
    rejected: list[tuple[str, str, str]] = []
    failure, path, status = None, None, None
    try:
      path, status = restore_readable(self.checkpoint, self.model_dir, non_finite, rejected)
    except Exception as e:  # noqa: BLE001 -- raised below, once every worker has said its step
      failure = e
    mine = RESTORE_FAILED if failure else NO_CHECKPOINT if path is None else step_of(path)
    steps = agree(mine)
    if len(set(steps)) > 1:
      raise failure or RestoreDisagreementError(self.model_dir, steps)
    if not isinstance(failure, checkpoints.CheckpointUnavailableError):
      for prefix, problem, previous in rejected:
        done = self._set_aside(prefix)
        warn(f"Warning: {problem}; {done + '; ' if done else ''}resuming from the previous "
             f"checkpoint {previous}")
    if failure is not None:
      raise failure
    if path is not None:
      self._ours.add(step_of(path))
    return path, status

  def _set_aside(self, path: str) -> str | None:
    """Moves a rejected checkpoint aside on the chief; what was done, for the warning."""
    self._rejected.add(path)
    if not self.is_chief:
      return None
    try:
      folder = checkpoint_files.reject(path)
    except (tf.errors.OpError, OSError) as e:
      return f"could not move it aside ({error_line(e, name_type=False)})"
    self._manager = self._new_manager()  # its list named the moved checkpoint
    return f"moved it to {folder}"

  def _failed_save_line(self, step: int, error: BaseException) -> str:
    """One line saying what a failed save left: `ckpt-<step>` kept when its files were
    complete (only the state file failed), else the previous checkpoint, by name."""
    name = f"ckpt-{step}"
    failed = f"saving the checkpoint for step {step} in {self.save_dir} failed ({_why(error)})"
    if os.path.join(self.save_dir, name) in complete_checkpoints(self.save_dir):
      return f"{failed} after its files were complete; {name} is kept and is the latest"
    latest = self.latest()
    return (f"{failed}; its files were removed and the latest complete checkpoint is still "
            f"{os.path.basename(latest)}" if latest else
            f"{failed}; its files were removed and there is no complete checkpoint")

  def save(self, step: int) -> str:
    """Writes the checkpoint for `step`; returns its prefix (the scratch one on non-chiefs).
    On the chief, durable (see the module doc) before the older checkpoints are deleted."""
    if self.is_chief:
      folder_lock.check_held(self.model_dir)  # a run that lost its lease writes nothing more
    durable = self.is_chief and "://" not in self.save_dir
    unsynced: list[str] = []  # the prefix while its complete files are being fsynced

    def make_durable(prefix: str) -> None:  # TensorFlow calls it before the state file
      unsynced.append(prefix)
      for path in [prefix + ".index", *tf.io.gfile.glob(glob.escape(prefix) + ".data-*")]:
        atomic_io.fsync_file(path)
      atomic_io.fsync_dir(self.save_dir)
      unsynced.clear()

    options = (tf.train.CheckpointOptions(experimental_write_callbacks=[make_durable])
               if durable else None)
    try:
      path = self._manager.save(checkpoint_number=step, options=options)
      if durable:
        atomic_io.fsync_file(os.path.join(self.save_dir, "checkpoint"))
        atomic_io.fsync_dir(self.save_dir)
    except (tf.errors.OpError, OSError) as e:
      # files not durable: removed (neither the state file nor the deletion of older
      # checkpoints happened yet); a failure after the fsyncs leaves the complete checkpoint
      _remove_partial_save(self.save_dir, step, force=bool(unsynced))
      raise CheckpointSaveError(self._failed_save_line(step, e)) from None
    self._ours.add(step)
    self._rejected.discard(os.path.join(self.model_dir, f"ckpt-{step}"))  # replaced by this save
    if not self.is_chief:
      tf.io.gfile.rmtree(self.save_dir)
    elif self.input is not None and self.input.saved:
      self.input.save(self.model_dir, step)  # after the checkpoint: a kill between = no state
      input_state.prune(self.model_dir, set(map(step_of, complete_checkpoints(self.model_dir))))
    return path
