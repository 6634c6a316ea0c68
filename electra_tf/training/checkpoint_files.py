"""Which checkpoint files a model_dir holds: complete `ckpt-<N>` (index and every data shard),
the `checkpoint` state file, checkpoints rejected on resume, leftovers of killed saves.

What counts is what is on disk, not what the state file says: the state file is rewritten
from the files (`write_state_file`) when it is missing or stale, and when a checkpoint is
moved aside (`reject`).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import time

import numpy as np
import tensorflow as tf

from electra_tf import checkpoint_reads, checkpoints, lock_lease
from electra_tf.checkpoint_reads import has_all_shards
from electra_tf.training import input_state

_TEMP_DIR_RE = re.compile(r"^ckpt-(\d+)_temp$")
_INDEX_RE = re.compile(r"^ckpt-(\d+)\.index$")


def index_is_whole(index_path: str) -> bool:
  """Whether the index file ends in an SSTable footer (reads its last 8 bytes only); False for
  an empty, short or garbled file, or an index gone since it was listed. A read that fails, an
  index not found a moment after it was listed and a read cut short are tried again
  (checkpoints.read_retried): only one still missing or short after every try is not whole; a
  read that keeps failing otherwise raises CheckpointUnavailableError (a checkpoint is never
  dropped for it)."""
  prefix = index_path[:-len(".index")]
  try:
    tail = checkpoints.read_retried(prefix, lambda: checkpoint_reads.index_tail(index_path))
  except checkpoints.CorruptCheckpointError:  # every read of it was short
    return False
  except checkpoints.CheckpointAccessError:
    raise
  except checkpoints.CheckpointUnavailableError:
    if not tf.io.gfile.exists(index_path):  # gone for good since it was listed
      return False
    raise
  return tail == checkpoint_reads.TABLE_MAGIC


def complete_checkpoints(model_dir: str) -> list[str]:
  """Prefixes of this loop's complete `ckpt-<N>` in model_dir (an index ending in its footer,
  and every data shard), newest first. The folder is listed with retries
  (checkpoints.list_folder): a listing that keeps failing raises CheckpointUnavailableError,
  never passes for an empty folder."""
  names = set(checkpoints.list_folder(model_dir) or ())
  found = []
  for name in names:
    m = _INDEX_RE.match(name)
    if not m:
      continue
    stem = name[:-len(".index")]
    if has_all_shards(names, stem) and index_is_whole(os.path.join(model_dir, name)):
      found.append((int(m.group(1)), os.path.join(model_dir, stem)))
  return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(model_dir: str) -> str | None:
  """Prefix of the newest complete `ckpt-<N>` in model_dir (see module docstring), or None."""
  found = complete_checkpoints(model_dir)
  return found[0] if found else None


def unusable(prefix: str) -> str | None:
  """Why the checkpoint at ``prefix`` cannot be resumed from, read from its files alone (no
  model needed), worded as a resume's rejection is: a tensor that does not read back (proof of
  damage: a truncated or garbled file, a checksum) or a floating-point one holding NaN or Inf;
  None if usable. A read that fails otherwise (storage unavailable, a timeout, a permission)
  is retried (checkpoints.read_retried), then raises CheckpointUnavailableError: that is no
  reason to set the checkpoint aside."""
  def first_non_finite() -> str | None:
    reader = tf.train.load_checkpoint(prefix)
    for name in sorted(reader.get_variable_to_shape_map()):
      value = np.asarray(reader.get_tensor(name))  # the object graph is bytes
      if value.dtype.kind == "f" and not np.isfinite(value).all():
        return name
    return None

  try:
    name = checkpoints.read_retried(prefix, first_non_finite)
  except checkpoints.CorruptCheckpointError as e:
    return str(e)
  return None if name is None else f"checkpoint {prefix} holds NaN or Inf values ({name})"


def write_state_file(model_dir: str) -> None:
  """Rewrites model_dir's `checkpoint` state file to list the complete checkpoints on disk,
  the newest as the latest (removes it when there is none). Each keeps the save time the old
  file gives it (else its index file's), so tf.train.CheckpointManager still counts every one
  against max_to_keep (one without a time would be kept forever, unlisted)."""
  found = list(reversed(complete_checkpoints(model_dir)))  # oldest first
  path = os.path.join(model_dir, "checkpoint")
  if not found:
    if tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)
    return
  try:
    state = tf.train.get_checkpoint_state(model_dir)
  except (tf.errors.OpError, ValueError):  # an unparsable state file is rewritten
    state = None
  times = {}
  if state is not None:
    times = {os.path.basename(p): t for p, t in zip(  # timestamps may be missing: not strict
        state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps, strict=False)}
  stamps = [times.get(os.path.basename(p)) or tf.io.gfile.stat(p + ".index").mtime_nsec / 1e9
            for p in found]
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, found[-1], found, all_model_checkpoint_timestamps=stamps,
      last_preserved_timestamp=min(stamps) - 1)


def repair_state_file(model_dir: str) -> str | None:
  """Points model_dir's `checkpoint` state file at the newest complete checkpoint on disk when
  it names another one or is missing; returns the line saying so, or None."""
  found = complete_checkpoints(model_dir)
  if not found:
    return None
  try:
    state = tf.train.get_checkpoint_state(model_dir)
  except (tf.errors.OpError, ValueError):  # an unparsable state file is rewritten too
    state = None
  named = state.model_checkpoint_path if state else None
  if named and os.path.basename(named) == os.path.basename(found[0]):
    return None
  write_state_file(model_dir)
  said = (f"names {os.path.basename(named)}, which is not complete" if named
          else "is missing")
  return (f"The checkpoint state file {os.path.join(model_dir, 'checkpoint')} {said}; "
          f"resuming from {found[0]}, the newest complete checkpoint")


def reject(prefix: str) -> str:
  """Moves checkpoint `prefix` (index, data files, saved input state) into the folder
  `<prefix>.rejected/` (`.rejected-2/`, ... when taken), kept for inspection, and rewrites the
  state file without it; returns the folder. The index moves first: from then on the
  checkpoint is not complete, so no listing, resume or state file counts it again. A kill at
  any point is finished by the next start-up (`finish_interrupted`)."""
  folder, n = f"{prefix}.rejected", 1
  while tf.io.gfile.exists(folder):
    n += 1
    folder = f"{prefix}.rejected-{n}"
  tf.io.gfile.makedirs(folder)
  tf.io.gfile.rename(prefix + ".index", os.path.join(folder, os.path.basename(prefix) + ".index"))
  _move_rest(prefix, folder)
  return folder


def _move_rest(prefix: str, folder: str) -> None:
  """The data files and saved input state of `prefix` (whose index is in `folder`) into
  `folder`, then the state file rewritten: each step can be redone after a kill."""
  for path in sorted(tf.io.gfile.glob(glob.escape(prefix) + ".data-*")):
    tf.io.gfile.rename(path, os.path.join(folder, os.path.basename(path)))
  model_dir = os.path.dirname(prefix)
  state = input_state.state_dir(model_dir, step_of(prefix))
  if "://" not in state and os.path.isdir(state):
    os.rename(state, os.path.join(folder, input_state.FOLDER))
  write_state_file(model_dir)


_REJECTED_RE = re.compile(r"^(ckpt-(\d+))\.rejected(-\d+)?$")
_DATA_RE = re.compile(r"^ckpt-(\d+)\.data-\d+-of-\d+$")


def _pending(model_dir: str, names: list[str], inside: set[str], stem: str) -> bool:
  """Whether a set-aside of ``stem`` (index in the folder holding ``inside``) left files out:
  data shards, or the saved input state of its step."""
  if not has_all_shards(inside, stem) and any(n.startswith(stem + ".data-") for n in names):
    return True
  state = input_state.state_dir(model_dir, step_of(stem))
  return input_state.FOLDER not in inside and "://" not in state and os.path.isdir(state)


def finish_interrupted(model_dir: str) -> list[str]:
  """Start-up tidying of what a kill left (before any save of this run); returns one line per
  thing done. A set-aside that was interrupted (a `ckpt-<N>.rejected*/` folder holding the
  index while `ckpt-<N>.data-*` are still outside) is finished; an empty set-aside folder
  (killed before its first move) is removed; data files of a step with no index (a kill during
  TensorFlow's own save or cleanup) are deleted: without an index they never load."""
  names = checkpoints.list_folder(model_dir)
  if names is None:
    return []
  notes = []
  for name in sorted(names):
    m = _REJECTED_RE.match(name)
    folder = os.path.join(model_dir, name)
    listed = checkpoints.list_folder(folder) if m else None  # None: not a folder
    if listed is None:
      continue
    inside = set(listed)
    if not inside:
      tf.io.gfile.rmtree(folder)
      notes.append(f"Removed {folder}, an empty folder left by an interrupted set-aside")
    elif (m.group(1) + ".index" in inside and m.group(1) + ".index" not in names
          and _pending(model_dir, names, inside, m.group(1))):
      _move_rest(os.path.join(model_dir, m.group(1)), folder)
      notes.append(f"Finished setting {os.path.join(model_dir, m.group(1))} aside into "
                   f"{folder} (interrupted earlier)")
      names = checkpoints.list_folder(model_dir) or []
  complete = {os.path.basename(p) for p in complete_checkpoints(model_dir)}
  for name in sorted(names):
    m = _DATA_RE.match(name)
    stem = name.split(".data-")[0]
    if m and stem + ".index" not in names and stem not in complete:
      tf.io.gfile.remove(os.path.join(model_dir, name))
      notes.append(f"Removed {os.path.join(model_dir, name)}: a data file without its index, "
                   "left by an interrupted save or deletion")
  return notes


def step_of(checkpoint_path: str) -> int:
  """Global step of a checkpoint from this loop (`<model_dir>/ckpt-<step>`)."""
  return int(checkpoint_path.rsplit("-", 1)[-1])


def remove_stale_temp_dirs(model_dir: str) -> list[str]:
  """Deletes `ckpt-<N>_temp/` folders left by a save that was killed; returns their paths.

  Called at start-up, before any save of this run: such a folder is never resumable.
  Local model_dir only (the folders are found by listing it).
  """
  if "://" in model_dir or not os.path.isdir(model_dir):
    return []
  removed = []
  for name in sorted(os.listdir(model_dir)):
    path = os.path.join(model_dir, name)
    if _TEMP_DIR_RE.match(name) and os.path.isdir(path):
      shutil.rmtree(path, ignore_errors=True)
      removed.append(path)
  return removed


def remove_stale_worker_dirs(model_dir: str) -> list[str]:
  """Deletes the scratch folders (`worker_tmp_<task>-<run>/`) of non-chief workers that ended
  (killed in a save): those not modified for longer than the lock's lease, so a live worker's
  folder is never touched. Called by the chief, under model_dir's lock; local model_dir only."""
  if "://" in model_dir or not os.path.isdir(model_dir):
    return []
  removed = []
  for name in sorted(os.listdir(model_dir)):
    path = os.path.join(model_dir, name)
    try:
      age = time.time() - os.stat(path).st_mtime
    except OSError:
      continue
    if name.startswith("worker_tmp_") and age > lock_lease.lease_seconds():
      shutil.rmtree(path, ignore_errors=True)
      removed.append(path)
  return removed
