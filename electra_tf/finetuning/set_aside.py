"""Moving aside a fine-tuning run's earlier work (trial folders, records, the test outputs they
list, results files) so that a kill at any step leaves it finished or finishable, never half
done: the paths are written to a journal (``<model_dir>_trials/set_aside.json``, atomically)
before the first move; each is then renamed to ``<path>.rejected-<n>`` (atomic_io.move_aside),
the parents are fsynced, and the journal is removed last. A run that finds a journal finishes
it first (``finish_interrupted``): a path still in place is moved, one already moved is not
there any more. Nothing is deleted. Also the retried reads of those files (``exists``,
``read_json``): a transient read error is never taken for an absent or damaged file.
"""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

from electra_tf import atomic_io, checkpoints

JOURNAL = "set_aside.json"  # in <model_dir>_trials: the paths of a set-aside under way


def journal_path(trials_dir: str) -> str:
  return os.path.join(trials_dir, JOURNAL)


def exists(path: str) -> bool:
  """tf.io.gfile.exists, a read error retried (checkpoints.read_retried), never taken for no."""
  return checkpoints.read_retried(path, lambda: tf.io.gfile.exists(path), what="path")


def read_json(path: str) -> tuple[bool, Any]:
  """(whether ``path`` exists, its JSON value: None when it does not parse, e.g. left empty or
  short by a power cut). A read error is retried (checkpoints.read_retried), then stops the
  run in one line: a transient error is not damage."""
  def read() -> str | None:
    try:
      with tf.io.gfile.GFile(path) as f:
        return f.read()
    except tf.errors.NotFoundError:
      return None

  text = checkpoints.read_retried(path, read, what="file")
  if text is None:
    return False, None
  try:
    return True, json.loads(text)
  except ValueError:
    return True, None


def _move(trials_dir: str, paths: list[str]) -> list[str]:
  """Moves each path still in place aside, fsyncs their parents, removes the journal; returns
  ``<path> -> <new name>`` for each path moved now."""
  moved = []
  for path in paths:
    if exists(path):
      moved.append(f"{path} -> {os.path.basename(atomic_io.move_aside(path))}")
  for parent in sorted({os.path.dirname(p) or "." for p in paths}):
    if "://" in parent or os.path.isdir(parent):
      atomic_io.fsync_dir(parent)  # the moves durable before the journal goes
  tf.io.gfile.remove(journal_path(trials_dir))
  atomic_io.fsync_dir(trials_dir)
  return moved


def move_aside(trials_dir: str, paths: list[str]) -> list[str]:
  """Moves ``paths`` aside (files or folders; each once, in order) through the journal;
  returns ``<path> -> <new name>`` for each."""
  paths = list(dict.fromkeys(p.rstrip("/") for p in paths))
  tf.io.gfile.makedirs(trials_dir)
  atomic_io.write_json(journal_path(trials_dir), {"paths": paths}, indent=1)
  return _move(trials_dir, paths)


def finish_interrupted(trials_dir: str) -> str | None:
  """Finishes a set-aside a kill interrupted (its journal is still there); returns the line
  saying what it moved, or None when there was none."""
  path = journal_path(trials_dir)
  found, journal = read_json(path)
  if not found:
    return None
  try:
    paths = [str(p) for p in journal["paths"]]
  except (KeyError, TypeError):  # written atomically: not by this package
    raise ValueError(f"{path} does not parse: it lists the files a set-aside interrupted "
                     "earlier still has to move; move the files it names aside by hand (or "
                     "none), then delete it") from None
  moved = _move(trials_dir, paths)
  return ("Finished a set-aside interrupted earlier: moved aside "
          f"{', '.join(moved) if moved else 'nothing more (all were moved)'}")
