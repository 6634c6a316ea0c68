"""TF1 name-based checkpoints in and out, with the official ELECTRA variable names.

Our variables carry the official TF1 names (``electra/encoder/layer_0/...``), so reading an
official checkpoint is a name-to-name copy and writing one back is a ``Saver`` over a dict.
Every checkpoint tensor is either loaded or reported as deliberately unused (optimizer slots,
``global_step``, towers the model does not have); a shape mismatch is a one-line error naming
the variable and both shapes. Optimizer slots (``<var>/adam_m`` ... ``<var>/lamb_v``) can be
carried into a TF1 export: read from a TF1 checkpoint as they are (``tf1_slots``) or from the
optimizer a TF2 training checkpoint restores (``restore_optimizer_slots``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState  # the state file

from electra_tf import atomic_io
from electra_tf.checkpoint_reads import (  # noqa: F401 -- re-exported: checkpoints.read_retried
  READ_RETRY_DELAYS,
  READ_RETRY_ENV,
  TABLE_MAGIC,
  CheckpointAccessError,
  CheckpointUnavailableError,
  CorruptCheckpointError,
  index_tail,
  is_damage,
  is_folder,
  list_folder,
  newest_whole,
  read_retried,
  read_retry_delays,
  tf_error_summary,
)
from electra_tf.names import GLOBAL_STEP, OPTIMIZER_SLOT, OPTIMIZER_STATE, tf1_name


def variables_by_name(variables: Iterable[tf.Variable]) -> dict[str, tf.Variable]:
  """Maps TF1 names to variables; duplicate names (two variables, one key) are an error."""
  out: dict[str, tf.Variable] = {}
  for v in variables:
    name = tf1_name(v)
    if name in out and out[name] is not v:
      raise ValueError(f"two different variables share the checkpoint name {name!r}")
    out[name] = v
  return out


def _refuse_other_hf_model(folder: str) -> None:
  """A Hugging Face folder of another model type (e.g. BERT) gets its own one-line error."""
  config = os.path.join(folder, "config.json")
  try:
    with tf.io.gfile.GFile(config) as f:
      model_type = json.load(f).get("model_type")
  except (tf.errors.OpError, ValueError, AttributeError):
    return
  if model_type and model_type != "electra":
    raise ValueError(f"{folder} is a Hugging Face {model_type.upper()} folder ({config}: "
                     f"model_type {model_type!r}); an ELECTRA model (model_type 'electra') "
                     "is expected")


def resolve_checkpoint(path: str) -> str:
  """A checkpoint prefix from a prefix or a directory (its latest checkpoint, or model.ckpt);
  read with read_retried."""
  def resolve() -> str:
    if is_folder(path):
      latest = _latest_in(path)
      if latest:
        return latest
      for name in ("model.ckpt", "ckpt", "tf1/model.ckpt"):  # tf1/: a convert output folder
        if tf.io.gfile.exists(os.path.join(path, name + ".index")):
          return os.path.join(path, name)
      _refuse_other_hf_model(path)
      raise FileNotFoundError(f"no checkpoint found in directory {path}")
    if tf.io.gfile.exists(path + ".index"):
      return path
    raise FileNotFoundError(f"checkpoint not found: {path} (no {path}.index)")
  return read_retried(path, resolve)


def _latest_in(folder: str) -> str | None:
  """The folder's newest checkpoint, read from the folder listing: its newest whole numbered
  one (``checkpoint_reads.newest_whole``), whatever the ``checkpoint`` state file says
  (TensorFlow renames it into place unsynced: a power cut can leave it empty, or naming an
  older checkpoint); else the one the state file names, when its index is whole (e.g. a
  ``model.ckpt``). A read error raises (tf.train.latest_checkpoint answers None for one)."""
  newest = newest_whole(folder, {n.rstrip("/") for n in tf.io.gfile.listdir(folder)})
  if newest:
    return newest
  try:
    with tf.io.gfile.GFile(os.path.join(folder, "checkpoint")) as f:
      text = f.read()
  except tf.errors.NotFoundError:
    return None
  state = CheckpointState()
  try:
    text_format.Merge(text, state)
  except text_format.ParseError:
    return None
  prefix = state.model_checkpoint_path
  if prefix and not os.path.isabs(prefix) and "://" not in prefix:
    prefix = os.path.join(folder, prefix)
  if not prefix or not tf.io.gfile.exists(prefix + ".index"):
    return None
  return prefix if index_tail(prefix + ".index") == TABLE_MAGIC else None


def is_tf1_checkpoint(prefix: str) -> bool:
  """True for name-based (TF1 Saver) checkpoints, False for TF2 object-based ones."""
  keys = read_retried(prefix, lambda: tf.train.list_variables(prefix))
  return not any(name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH") for name, _ in keys)


@dataclasses.dataclass(frozen=True)
class LoadReport:
  """What happened to every tensor of a checkpoint."""

  loaded: tuple[str, ...]
  unused_optimizer_state: tuple[str, ...]  # adam slots, global_step
  unused_other: tuple[str, ...]  # tensors of parts the model does not have
  missing: tuple[str, ...]  # model variables the checkpoint lacks (left as initialised)

  def summary(self) -> str:
    return (f"loaded {len(self.loaded)} tensors; unused: {len(self.unused_optimizer_state)} "
            f"optimizer-state, {len(self.unused_other)} other; missing: {len(self.missing)}")


def load_tf1_checkpoint(variables: Mapping[str, tf.Variable] | Iterable[tf.Variable],
                        checkpoint: str, allow_missing: bool = False,
                        allow_unused: bool = True) -> LoadReport:
  """Assigns checkpoint tensors to the variables of the same TF1 name.

  Args:
    variables: TF1 name -> variable, or variables (named by ``tf1_name``).
    checkpoint: prefix or directory of an official (name-based) checkpoint.
    allow_missing: tolerate model variables absent from the checkpoint (e.g. task heads when
      initialising fine-tuning from a pre-trained checkpoint).
    allow_unused: tolerate checkpoint tensors other than optimizer state that the model does
      not have (e.g. the generator when only the discriminator is built).
  Raises:
    FileNotFoundError: no checkpoint at ``checkpoint``.
    ValueError: a shape mismatch, a missing variable or an unused tensor that is not allowed.
    CorruptCheckpointError: the checkpoint's files cannot be read.
  """
  if not isinstance(variables, Mapping):
    variables = variables_by_name(variables)
  prefix = resolve_checkpoint(checkpoint)
  return read_retried(prefix, lambda: _load_tf1(variables, prefix, allow_missing, allow_unused))


def _load_tf1(variables: Mapping[str, tf.Variable], prefix: str, allow_missing: bool,
              allow_unused: bool) -> LoadReport:
  reader = tf.train.load_checkpoint(prefix)
  shapes = reader.get_variable_to_shape_map()
  for name, var in variables.items():
    if name in shapes and list(shapes[name]) != var.shape.as_list():
      raise ValueError(
          f"shape mismatch for {name}: checkpoint {list(shapes[name])} vs model "
          f"{var.shape.as_list()} (is the config the one the checkpoint was trained with? e.g. "
          f"generator_hidden_size, embedding_size, vocab_size, model_size)")
  missing = sorted(set(variables) - set(shapes))
  if missing and not allow_missing:
    raise ValueError(f"checkpoint {prefix} lacks {len(missing)} model variable(s), "
                     f"first: {missing[0]}")
  unused = sorted(set(shapes) - set(variables))
  optimizer_state = [n for n in unused if OPTIMIZER_STATE.search(n)]
  other = [n for n in unused if not OPTIMIZER_STATE.search(n)]
  if other and not allow_unused:
    raise ValueError(f"checkpoint {prefix} has {len(other)} tensor(s) the model does not use, "
                     f"first: {other[0]}")
  loaded = sorted(set(variables) & set(shapes))
  for name in loaded:
    variables[name].assign(reader.get_tensor(name))
  return LoadReport(tuple(loaded), tuple(optimizer_state), tuple(other), tuple(missing))


def save_tf1_checkpoint(variables: Mapping[str, tf.Variable | np.ndarray], output_dir: str,
                        global_step: int = 0, name: str = "model.ckpt") -> str:
  """Writes a TF1 name-based checkpoint ``<output_dir>/<name>`` readable by the official code.

  ``global_step`` is stored as an int64 scalar, as the official graphs do. The whole folder is
  written staged (the checkpoint, its ``checkpoint`` state file and a copy of the folder's
  other files, e.g. ``hparams.json``) and renamed into place (``atomic_io.staged_dir``), so a
  killed process leaves the old folder or the new one, never a mix of two checkpoints.
  Returns the checkpoint prefix.
  """
  var_list = {}
  for key, value in variables.items():
    if not isinstance(value, tf.Variable):
      value = tf.Variable(value, name=key.replace("/", "_"), trainable=False)
    var_list[key] = value
  var_list.setdefault(GLOBAL_STEP, tf.Variable(np.int64(global_step), dtype=tf.int64,
                                               trainable=False, name=GLOBAL_STEP))
  with atomic_io.staged_dir(output_dir) as stage:
    if tf.io.gfile.isdir(output_dir):
      _copy_other_files(output_dir, stage, name)
    saver = tf.compat.v1.train.Saver(var_list=var_list, save_relative_paths=True)
    saver.save(None, os.path.join(stage, name), write_meta_graph=False, write_state=False)
    with tf.io.gfile.GFile(os.path.join(stage, "checkpoint"), "w") as f:
      f.write(f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
  return os.path.join(output_dir, name)


def _copy_other_files(src: str, dst: str, name: str) -> None:
  """Copies what ``src`` holds besides checkpoint ``name``, its state file and hidden
  temporaries into ``dst`` (sub-folders too)."""
  for entry in tf.io.gfile.listdir(src):
    entry = entry.rstrip("/")
    if entry == "checkpoint" or entry.startswith((name + ".", ".")):
      continue
    path, target = os.path.join(src, entry), os.path.join(dst, entry)
    if tf.io.gfile.isdir(path):
      tf.io.gfile.makedirs(target)
      _copy_other_files(path, target, name)
    else:
      tf.io.gfile.copy(path, target, overwrite=True)


# ------------------------------------------------------------------------------ optimizer slots

# TF2 training checkpoints (``tf.train.Checkpoint(model=, optimizer=, step=)``): AdamWeightDecay
# (a new-style optimizer) keeps its slots in ``optimizer/_variables/<i>``, LAMB (a legacy one)
# under each model variable's ``.OPTIMIZER_SLOT/optimizer/<m|v>``; float16 loss scaling only
# adds ``optimizer/loss_scale/*``.
_TF2_SLOT = re.compile(r"^optimizer/_variables/\d+/|/\.OPTIMIZER_SLOT/optimizer/")


def tf2_slot_count(prefix: str) -> int:
  """How many optimizer slot tensors a TF2 (object-based) checkpoint holds (0: model only)."""
  keys = read_retried(prefix, lambda: tf.train.list_variables(prefix))
  return sum(1 for name, _ in keys if _TF2_SLOT.search(name))


def restore_optimizer_slots(prefix: str, model: tf.Module, optimizer: object
                            ) -> dict[str, tf.Variable]:
  """Restores the slots of ``optimizer`` (built for ``model.trainable_variables``, ``model``
  already restored) from the TF2 training checkpoint ``prefix``; returns them by official
  TF1 name (``optimizer.tf1_slot_variables()``).

  Raises ValueError (one line) when the checkpoint's optimizer state does not fit this
  optimizer: another optimizer type, or slots for a different set of variables.
  """
  slots = optimizer.tf1_slot_variables()
  stored = tf2_slot_count(prefix)
  if stored != len(slots):
    raise ValueError(f"checkpoint {prefix} holds {stored} optimizer slots, this model's "
                     f"{type(optimizer).__name__} has {len(slots)}")
  try:
    status = read_retried(
        prefix, lambda: tf.train.Checkpoint(model=model, optimizer=optimizer).read(prefix))
    status.expect_partial().assert_existing_objects_matched()
  except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
    raise ValueError(f"checkpoint {prefix}: its optimizer state does not fit "
                     f"{type(optimizer).__name__}: {first}") from None
  return slots


def tf1_slots(prefix: str, slot_names: Iterable[str],
              variables: Mapping[str, tf.Variable]) -> tuple[dict[str, np.ndarray], list[str]]:
  """The optimizer slots among ``slot_names`` (tensors of TF1 checkpoint ``prefix``), as
  stored, for the variables in ``variables``; and the slot names of other variables (left out).

  Raises ValueError (one line) when a slot's shape differs from its variable's.
  """
  wanted, orphans = {}, []
  for name in sorted(slot_names):
    match = OPTIMIZER_SLOT.match(name)
    if not match:
      continue
    if match["variable"] in variables:
      wanted[name] = variables[match["variable"]]
    else:
      orphans.append(name)
  def read() -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in wanted}
  values = read_retried(prefix, read)
  for name, var in wanted.items():
    if list(values[name].shape) != var.shape.as_list():
      raise ValueError(f"shape mismatch for {name}: checkpoint {list(values[name].shape)} vs "
                       f"its variable {var.shape.as_list()}")
  return values, orphans


def slots_summary(slot_names: Iterable[str]) -> str:
  """``164 adam slots`` (or ``lamb``; both kinds: ``82 adam + 82 lamb slots``)."""
  kinds: dict[str, int] = {}
  for name in slot_names:
    match = OPTIMIZER_SLOT.match(name)
    if match:
      kinds[match["kind"]] = kinds.get(match["kind"], 0) + 1
  return " + ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) + " slots"
