"""The training input iterator's state saved beside each checkpoint, so a seeded resume
continues its data stream without re-reading the consumed examples.

`<model_dir>/input_state/ckpt-<N>/` holds a `tf.train.Checkpoint(input=iterator)` of the stream
after step N (every file reader's position, the interleave, the shuffle buffer's records, the
RNG state, the prefetched batches) and `signature.json`, what that stream depends on (files
and sizes, batch, seed, ...). It is written after `ckpt-<N>` by atomic_io.staged_dir, so it
exists whole or not at all (each file and the folder fsynced before the rename, the parent
folder after it: durable once the save returns), and it is removed when `ckpt-<N>` is pruned
(or moved aside with it when a resume rejects `ckpt-<N>`, see checkpoint_files.reject).

A resume at step N restores it when it exists and its signature equals the run's; otherwise
the pipeline drops the consumed records (`skip_steps`), which gives the same batches at a cost
that grows with N. One line says which. Why only runs with one replica: TF 2.20's distributed
iterator (`strategy.distribute_datasets_from_function`) cannot be checkpointed (not a
`Trackable`; its per-worker `OwnedMultiDeviceIterator` has no state serialization), so the
state is that of a plain `tf.data` iterator, which feeds a single replica directly; runs with
several replicas or workers keep the distributed iterator and the record skip.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from electra_tf import atomic_io, lock_lease
from electra_tf.console import error_line

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]  # the training stream's builder
FOLDER = "input_state"  # in model_dir; not named ckpt-*, which tools take for checkpoint files
_SIGNATURE = "signature.json"
_STATE_DIR_RE = re.compile(r"^(\.)?ckpt-(\d+)(\.tmp-[0-9a-f-]+)?$")
_STAGED_RE = re.compile(r"^\.ckpt-(\d+)\.staged$")  # a save killed between its renames


def state_dir(model_dir: str, step: int) -> str:
  return os.path.join(model_dir, FOLDER, f"ckpt-{step}")


def supported(strategy: tf.distribute.Strategy) -> bool:
  """Whether the input state can be saved under `strategy`: one replica, one worker, no TPU
  (whose steps need the distributed iterator's infeed)."""
  return (strategy.num_replicas_in_sync == 1
          and not isinstance(strategy, (tf.distribute.MultiWorkerMirroredStrategy,
                                        tf.distribute.TPUStrategy)))


@dataclasses.dataclass
class InputState:
  """How a run's training stream starts and whether its state is saved with checkpoints.

  `skip_steps`: global batches the pipeline drops when built (the record-skip fallback, or
  the skip the restored state's pipeline was built with: its graph must be the same).
  `restore_from`: an `input_state/ckpt-<N>` folder to restore, or None. `signature`: JSON-able
  description of the stream, saved with each state (None: nothing is saved).
  """

  skip_steps: int
  restore_from: str | None
  signature: dict[str, Any] | None
  # dataset_fn_for(skip_steps) -> dataset_fn(input_context) of the training stream
  dataset_fn_for: Callable[[int], DatasetFn] | None = None
  fallback_skip_steps: int = 0  # the record skip, if the restore fails
  log_fn: Callable[[str], None] = print
  iterator: Any = None

  @property
  def saved(self) -> bool:
    """Whether the run iterates a plain, checkpointable iterator (see `open`)."""
    return self.signature is not None and self.dataset_fn_for is not None

  def open(self):
    """A plain iterator over the one pipeline of a one-replica run, restored from
    `restore_from` if set; a state that does not restore is reported in one line and
    replaced by the record skip."""
    make_dataset = lambda skip: self.dataset_fn_for(skip)(tf.distribute.InputContext())
    self.iterator = iter(make_dataset(self.skip_steps))
    if self.restore_from:
      try:
        tf.train.Checkpoint(input=self.iterator).read(
            os.path.join(self.restore_from, "state")).assert_consumed()
      except (tf.errors.OpError, AssertionError, ValueError) as e:
        self.log_fn(f"Resume: the input state in {self.restore_from} does not restore "
                    f"({error_line(e, name_type=False)}); skipping the consumed examples by "
                    "reading them instead")
        self.skip_steps, self.restore_from = self.fallback_skip_steps, None
        self.iterator = iter(make_dataset(self.skip_steps))
    return self.iterator

  def save(self, model_dir: str, step: int) -> None:
    """Writes `input_state/ckpt-<step>/` whole (atomic_io.staged_dir). A failure (e.g. a full
    disk) is one warning: the checkpoint stands, its resume uses the record skip."""
    if self.iterator is None or not self.saved or "://" in model_dir:
      return
    final = state_dir(model_dir, step)
    try:
      with atomic_io.staged_dir(final) as stage:
        tf.train.Checkpoint(input=self.iterator).write(os.path.join(stage, "state"))
        with open(os.path.join(stage, _SIGNATURE), "w", encoding="utf-8") as f:
          json.dump({**self.signature, "built_skip_steps": self.skip_steps}, f, sort_keys=True)
    except lock_lease.LostLockError:
      raise  # another run holds the folder now: this run stops, without a warning
    except (OSError, tf.errors.OpError) as e:
      self.log_fn(f"Warning: saving the input state of step {step} in {final} failed "
                  f"({error_line(e, name_type=False)}); a resume from it will skip the "
                  "consumed examples by reading them")


def prune(model_dir: str, keep_steps: set[int]) -> None:
  """Removes the states in `model_dir/input_state/` whose step is not in keep_steps, and the
  temporary folders of killed saves (atomic_io's hidden siblings; `.tmp-` ones of old),
  after putting in place a whole state a save killed between its renames left staged."""
  folder = os.path.join(model_dir, FOLDER)
  if "://" in model_dir or not os.path.isdir(folder):
    return
  for staged in filter(None, map(_STAGED_RE.match, os.listdir(folder))):
    atomic_io.finish_swap(state_dir(model_dir, int(staged.group(1))))
  for name in os.listdir(folder):
    m = _STATE_DIR_RE.match(name)
    if m and m.group(1):  # a hidden leftover: removed unless its writer still runs
      atomic_io.remove_leftovers(state_dir(model_dir, int(m.group(2))))
    elif m and (m.group(3) or int(m.group(2)) not in keep_steps):
      shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


def plan(model_dir: str, step: int, consumed_steps: int, signature: dict[str, Any] | None,
         strategy: tf.distribute.Strategy, batch_size: int,
         dataset_fn_for: Callable[[int], DatasetFn],
         log_fn: Callable[[str], None]) -> InputState:
  """How the run restarting at global `step` continues its stream of `consumed_steps` batches
  (global batches of `batch_size`); `dataset_fn_for(skip_steps)` builds the stream.

  `signature` None (an unseeded stream, which restarts) saves and restores nothing. Logs one
  line when consumed examples are to be skipped: restored, or dropped by reading and why.
  """
  if signature is None:
    return InputState(consumed_steps, None, None)
  if not supported(strategy):
    if consumed_steps:
      log_fn(f"Resume: skipping the {consumed_steps * batch_size} consumed examples by reading "
             f"them (the input state is saved only for one-replica CPU/GPU runs; this one runs "
             f"{strategy.num_replicas_in_sync} replica(s) under {type(strategy).__name__})")
    return InputState(consumed_steps, None, None)
  if not consumed_steps:
    return InputState(0, None, signature, dataset_fn_for, 0, log_fn)
  folder = state_dir(model_dir, step)
  why = _mismatch(folder, signature)
  if why is None:
    with open(os.path.join(folder, _SIGNATURE), encoding="utf-8") as f:
      built = int(json.load(f)["built_skip_steps"])
    log_fn(f"Resume: restoring the input stream saved in {folder} (no consumed example re-read)")
    return InputState(built, folder, signature, dataset_fn_for, consumed_steps, log_fn)
  log_fn(f"Resume: skipping the {consumed_steps * batch_size} consumed examples by reading "
         f"them ({why})")
  return InputState(consumed_steps, None, signature, dataset_fn_for, consumed_steps, log_fn)


def _mismatch(folder: str, signature: dict[str, Any]) -> str | None:
  """Why the state in `folder` cannot continue a stream of `signature`, or None if it can."""
  path = os.path.join(folder, _SIGNATURE)
  if not os.path.isfile(path):
    return f"{os.path.basename(folder)} has no saved input state"
  try:
    with open(path, encoding="utf-8") as f:
      saved = json.load(f)
    int(saved["built_skip_steps"])
  except (OSError, ValueError, KeyError, TypeError):
    return f"{path} is unreadable"
  for key in sorted(signature):
    if saved.get(key) != signature[key]:
      def short(v):
        text = json.dumps(v)
        return text if len(text) <= 60 else text[:57] + "..."
      return (f"its input state was saved with {key} {short(saved.get(key))}, this run has "
              f"{short(signature[key])}")
  return None
