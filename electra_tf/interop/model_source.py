"""What a model path given to a command holds: its shape hparams, its vocabulary, its weights.

Every command that takes a model (``run_pretraining.py`` / ``run_finetuning.py`` through
``init_checkpoint``, ``convert --checkpoint``) accepts the same things:

- a model directory this project wrote (``hparams.json`` + ``vocab.txt`` beside checkpoints;
  a ``convert`` output directory, whose checkpoint is ``tf1/model.ckpt``);
- an official TF1 checkpoint without ``hparams.json`` (the released models): its shape is
  inferred from the tensor shapes and one line says what was inferred;
- a Hugging Face ELECTRA folder (``config.json`` with ``model_type`` "electra").

``describe`` merges the shape it finds with the user's ``--hparams`` (a contradiction is a
one-line error, see ``model_dir.merge_hparams``); ``load_hf_variables`` reads an HF folder's
weights under their official TF1 names.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from electra_tf.interop import model_dir


@dataclasses.dataclass
class ModelSource:
  """``hparams``: the user's merged with the stored / inferred shape; ``message``: the line to
  print about where the shape came from ("" when nothing described the model); ``vocab_file``:
  the model's ``vocab.txt`` (None if it has none); ``hf``: the ``HFImport`` of an HF folder;
  ``record``: the model's ``hparams.json`` as stored (training values included), or {}."""

  hparams: dict[str, Any]
  message: str = ""
  vocab_file: str | None = None
  hf: Any = None
  record: dict[str, Any] = dataclasses.field(default_factory=dict)

  def with_record(self, config_class: type) -> dict[str, Any]:
    """``hparams`` over the recorded values that ``config_class`` takes: what a conversion
    keeps of the run that trained the model (its learning rate, sequence length, ...)."""
    names = {f.name for f in dataclasses.fields(config_class)}
    return {**{k: v for k, v in self.record.items() if k in names}, **self.hparams}


def is_hf(path: str | None) -> bool:
  """True for a Hugging Face ELECTRA folder (or a folder with discriminator/ + generator/)."""
  from electra_tf.interop.hf_import import is_hf_folder

  return bool(path) and os.path.isdir(path) and is_hf_folder(path)


def vocab_beside(path: str) -> str | None:
  """``vocab.txt`` in the model directory of ``path`` (itself, or a checkpoint's folder)."""
  vocab = os.path.join(model_dir._model_dir_of(path), model_dir.VOCAB_FILE)
  return vocab if os.path.isfile(vocab) else None


def _exists(path: str | None) -> bool:
  return bool(path) and (os.path.exists(path) or os.path.exists(path + ".index"))


def describe(path: str | None, user: Mapping[str, Any], target: str = "pretraining",
             generator: str | None = None) -> ModelSource:
  """The model at ``path`` (see the module docstring) merged with the ``user`` hparams.

  ``target``: "pretraining" or "finetuning" (which shape fields apply); ``generator``: a
  separate HF ``ElectraForMaskedLM`` folder to pair with an HF ``path``.
  Raises ValueError (one line) when ``user`` contradicts the model's shape.
  """
  if not _exists(path):
    return ModelSource(dict(user))
  if is_hf(path):
    from electra_tf.interop.hf_import import import_hf

    imported = import_hf(path, generator)
    merged = model_dir.merge_hparams(imported.hparams, user, source=f"Hugging Face {path}",
                                     target=target)
    return ModelSource(merged, imported.summary, imported.vocab_file, imported)
  if generator:
    raise ValueError(f"a separate generator ({generator}) goes only with a Hugging Face "
                     f"discriminator folder, and {path} is not one")
  stored = model_dir.read_model_hparams(path)
  if stored is not None:
    source = model_dir.hparams_source(path)
    merged = model_dir.merge_hparams(stored, user, source=source, target=target)
    return ModelSource(merged, f"model shape from {source}", vocab_beside(path), record=stored)
  from electra_tf import checkpoints

  try:
    prefix = checkpoints.resolve_checkpoint(path)
  except FileNotFoundError:
    return ModelSource(dict(user))
  if not checkpoints.is_tf1_checkpoint(prefix):
    return ModelSource(dict(user), "", vocab_beside(path))
  inferred, summary = model_dir.infer_hparams_from_checkpoint(prefix)
  merged = model_dir.merge_hparams(inferred, user, source=f"checkpoint {prefix}", target=target)
  return ModelSource(merged, summary, vocab_beside(path))


def load_hf_variables(path: str, variables: Mapping[str, Any],
                      allow_unused: bool = False) -> Any:
  """Assigns an HF folder's weights to ``variables`` ({TF1 name: tf.Variable}).

  Every variable must be filled; with ``allow_unused`` the folder may hold more (a
  fine-tuning encoder takes the discriminator and leaves the heads). Returns a
  ``checkpoints.LoadReport``.
  """
  from electra_tf import checkpoints
  from electra_tf.interop.hf_import import assign, import_hf

  arrays = import_hf(path).variables
  unused = tuple(sorted(set(arrays) - set(variables))) if allow_unused else ()
  missing = tuple(sorted(set(variables) - set(arrays)))
  if allow_unused:
    arrays = {k: v for k, v in arrays.items() if k in variables}
    variables = {k: v for k, v in variables.items() if k in arrays}
  assign(variables, arrays)
  return checkpoints.LoadReport(tuple(sorted(arrays)), (), unused, missing)


def _first_description(places: list[str | None], user: Mapping[str, Any],
                       target: str) -> ModelSource:
  for place in places:
    source = describe(place, user, target)
    if source.message:
      return source
  return ModelSource(dict(user))


def pretraining_config(model_name: str, data_dir: str, user: Mapping[str, Any],
                       log_fn: Any = None) -> Any:
  """The ``PretrainingConfig`` of a run: ``user`` completed with the shape of the run's own
  model directory (resuming), else of ``init_checkpoint``; the source is logged."""
  from electra_tf.config import PretrainingConfig

  config = PretrainingConfig(model_name, data_dir, **user)
  # debug + do_train deletes model_dir first (official behaviour): its files do not count
  places = [config.init_checkpoint] if config.debug and config.do_train else [
    config.model_dir, config.init_checkpoint]
  source = _first_description(places, user, "pretraining")
  if not source.message:
    return config
  if log_fn:
    log_fn(source.message)
  return PretrainingConfig(model_name, data_dir, **source.hparams)


def finetuning_config(model_name: str, data_dir: str, user: Mapping[str, Any],
                      log_fn: Any = None) -> Any:
  """The ``FinetuningConfig`` of a run: ``user`` completed with the shape of
  ``init_checkpoint`` (default ``models/<model_name>``), whose ``vocab.txt`` is used unless
  the ``vocab_file`` hparam is given; the source is logged."""
  from electra_tf.config import FinetuningConfig

  config = FinetuningConfig(model_name, data_dir, **user)
  source = _first_description([config.init_checkpoint], user, "finetuning")
  if not source.message:
    return config
  if log_fn:
    log_fn(source.message)
  merged = dict(source.hparams)
  if source.vocab_file and "vocab_file" not in user:
    merged["vocab_file"] = source.vocab_file
  return FinetuningConfig(model_name, data_dir, **merged)
