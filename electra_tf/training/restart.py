"""`--restart`: start from step 0 in a model folder that holds checkpoints, deleting nothing but
the `ckpt-<N>_temp/` folders of killed saves (never resumable, as a resume's start-up deletes
them too). A folder another run holds (folder_lock.py) is refused in one line, not moved.

The chief renames the folder to `<folder>.before-restart-<n>` (the first free n) before
anything reads it. With several workers (TF_CONFIG) the others must not read the old folder
either (its hparams.json, its checkpoints): each waits, at most `wait_seconds`, until the
folder holds no checkpoint, then goes on. That cannot be a new run's checkpoint: every step of
a multi-worker run, so its first save too, needs every worker. Runs before TensorFlow builds
anything (the strategy, hence `runtime.worker_role`, comes later), so roles come from TF_CONFIG.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import tensorflow as tf

from electra_tf import checkpoints, folder_lock
from electra_tf.training.checkpoint_files import remove_stale_temp_dirs
from electra_tf.training.checkpointing import complete_checkpoints

WAIT_SECONDS = 600.0  # for the chief to start and move the folder


class RestartError(RuntimeError):
  """A worker's --restart found the old folder still in place after waiting for the chief."""


def is_chief(tf_config: str | None = None) -> bool:
  """Whether this process is the chief of the TF_CONFIG cluster (`tf_config`, default the
  environment's): task `chief`, else `worker` 0 of a cluster without a `chief` job, as
  `runtime.worker_role` decides once the strategy exists. No TF_CONFIG: the only process."""
  raw = os.environ.get("TF_CONFIG") if tf_config is None else tf_config
  config = json.loads(raw or "{}")
  task = config.get("task", {})
  if task.get("type") in (None, "chief"):
    return True
  return (task.get("type") == "worker" and int(task.get("index", 0)) == 0
          and "chief" not in config.get("cluster", {}))


def holds_run(model_dir: str) -> bool:
  """Whether model_dir holds a run to move aside: a complete checkpoint or a state file."""
  state_file = os.path.join(model_dir, "checkpoint")
  return bool(complete_checkpoints(model_dir)) or checkpoints.read_retried(
      state_file, lambda: tf.io.gfile.exists(state_file), what="checkpoint state file")


def move_aside(model_dir: str) -> str | None:
  """Renames a model_dir holding checkpoints to `<model_dir>.before-restart-<n>` (the first
  free n) so a run can start from step 0 without destroying it; returns the new name."""
  if not holds_run(model_dir):
    return None
  folder_lock.acquire(model_dir)  # refused in one line while another run uses the folder
  remove_stale_temp_dirs(model_dir)  # the holder's to remove: nothing partial goes aside
  base, n = model_dir.rstrip("/"), 1
  while tf.io.gfile.exists(f"{base}.before-restart-{n}"):
    n += 1
  tf.io.gfile.rename(base, f"{base}.before-restart-{n}")
  folder_lock.release(f"{base}.before-restart-{n}")  # it moved with the folder
  folder_lock.release(model_dir)
  return f"{base}.before-restart-{n}"


def restart(model_dir: str, log_fn: Callable[[str], None],
            wait_seconds: float = WAIT_SECONDS, poll_seconds: float = 0.5) -> None:
  """The chief moves a model_dir holding a run aside (one line); another worker returns once
  it is gone, or raises RestartError after `wait_seconds` (e.g. the chief lacks --restart)."""
  if is_chief():
    aside = move_aside(model_dir)
    if aside:
      log_fn(f"--restart: moved {model_dir} to {aside}")
    return
  if not holds_run(model_dir):
    return
  log_fn(f"--restart: waiting for the chief to move {model_dir} aside")
  deadline = time.monotonic() + wait_seconds
  while holds_run(model_dir):
    if time.monotonic() > deadline:
      raise RestartError(
          f"--restart: {model_dir} still holds checkpoints after {wait_seconds:g} s; the chief "
          "moves it aside: start the chief with --restart too")
    time.sleep(poll_seconds)
