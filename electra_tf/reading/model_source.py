"""What a model path given to a command holds: its shape hparams, its vocabulary, its weights.

Every command that takes a model (``run_pretraining.py`` / ``run_finetuning.py`` through
``init_checkpoint``, ``convert --checkpoint``) accepts the same things:

- a model directory this project wrote (``hparams.json`` + ``vocab.txt`` beside checkpoints;
  a ``convert`` output directory, whose checkpoint is ``tf1/model.ckpt``);
- an official TF1 checkpoint without ``hparams.json`` (the released models): its shape is
  inferred from the tensor shapes and one line says what was inferred;
- a Hugging Face ELECTRA folder (``config.json`` with ``model_type`` "electra").

``load_model`` decides once which of these a path is and opens it (an HF folder's weights
are read under their official TF1 names); ``assign_tf1_names`` fills a model's variables from
it. ``read_model_source`` merges the shape it finds with the user's ``--hparams`` (a
contradiction is a one-line error, see ``model_dir.merge_hparams``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from electra_tf import checkpoints, model_files
from electra_tf.config import FinetuningConfig, PretrainingConfig
from electra_tf.reading import checkpoint_hparams, hf_import, model_dir

HUGGING_FACE, TF1, TF2 = "huggingface", "tf1", "tf2"  # LoadedModel.kind


@dataclasses.dataclass(frozen=True)
class LoadedModel:
  """A model path opened once by ``load_model``.

  ``kind``: "huggingface" (``hf`` holds its weights by official TF1 name, hparams and vocab),
  "tf1" (a name-based checkpoint: the released models, a ``convert`` output's ``tf1/``) or
  "tf2" (an object-based checkpoint of our training loop, restored into a built model);
  ``prefix``: the checkpoint prefix (the folder itself for "huggingface").
  """

  path: str
  kind: str
  prefix: str
  hf: hf_import.HFImport | None = None


@dataclasses.dataclass
class ModelSource:
  """``hparams``: the user's merged with the stored / inferred shape; ``message``: the line to
  print about where the shape came from ("" when nothing described the model); ``vocab_file``:
  the model's ``vocab.txt`` (None if it has none); ``model``: the path opened by
  ``load_model`` when describing it needed that (an HF folder, a checkpoint without
  ``hparams.json``), else None; ``record``: the model's ``hparams.json`` as stored (training
  values included), or {}."""

  hparams: dict[str, Any]
  message: str = ""
  vocab_file: str | None = None
  model: LoadedModel | None = None
  record: dict[str, Any] = dataclasses.field(default_factory=dict)

  def with_record(self, config_class: type) -> dict[str, Any]:
    """``hparams`` over the recorded values that ``config_class`` takes: what a conversion
    keeps of the run that trained the model (its learning rate, sequence length, ...)."""
    return {**model_dir.recorded_values(config_class, self.record), **self.hparams}


def is_hf(path: str | None) -> bool:
  """True for a Hugging Face ELECTRA folder (or a folder with discriminator/ + generator/)."""
  return bool(path) and os.path.isdir(path) and hf_import.is_hf_folder(path)


def vocab_beside(path: str) -> str | None:
  """``vocab.txt`` in the model directory of ``path`` (itself, or a checkpoint's folder)."""
  return model_files.vocab_in(model_dir.model_dir_of(path))


def _exists(path: str | None) -> bool:
  return bool(path) and (os.path.exists(path) or os.path.exists(path + ".index"))


def load_model(path: str, generator: str | None = None) -> LoadedModel:
  """Opens the model at ``path`` (see the module docstring); ``generator``: a separate HF
  ``ElectraForMaskedLM`` folder to pair with an HF ``path``.

  Raises FileNotFoundError (one line) when ``path`` holds no model.
  """
  if is_hf(path):
    return LoadedModel(path, HUGGING_FACE, path, hf_import.import_hf(path, generator))
  prefix = checkpoints.resolve_checkpoint(path)
  return LoadedModel(path, TF1 if checkpoints.is_tf1_checkpoint(prefix) else TF2, prefix)


def fingerprint(path: str | None) -> dict[str, str] | None:
  """What identifies the weights at a model path, to key work made from them (None: no path):
  the SHA-256 of a checkpoint's index file (it holds every tensor's checksum), or of every
  file of a Hugging Face folder."""
  if not path:
    return None
  digest = hashlib.sha256()
  if is_hf(path):
    for folder, _, names in sorted(os.walk(path)):
      for name in sorted(names):
        digest.update(os.path.relpath(os.path.join(folder, name), path).encode() + b"\0")
        with open(os.path.join(folder, name), "rb") as f:
          for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"kind": HUGGING_FACE, "sha256": digest.hexdigest()}
  index = checkpoints.resolve_checkpoint(path) + ".index"

  def read() -> bytes:
    with tf.io.gfile.GFile(index, "rb") as f:
      return f.read()
  digest.update(checkpoints.read_retried(index[:-len(".index")], read))
  return {"kind": "checkpoint", "sha256": digest.hexdigest()}


def assign_tf1_names(model: LoadedModel, variables: Mapping[str, tf.Variable],
                     allow_missing: bool = False,
                     allow_unused: bool = False) -> checkpoints.LoadReport:
  """Fills ``variables`` ({TF1 name: tf.Variable}) from a "huggingface" or "tf1" ``model``.

  Every variable must be filled unless ``allow_missing`` (a TF1 checkpoint) or
  ``allow_unused``; with ``allow_unused`` the source may hold more (a fine-tuning encoder
  takes the discriminator and leaves the heads).
  """
  if model.hf is None:
    return checkpoints.load_tf1_checkpoint(variables, model.prefix,
                                           allow_missing=allow_missing,
                                           allow_unused=allow_unused)
  arrays = model.hf.variables
  unused = tuple(sorted(set(arrays) - set(variables))) if allow_unused else ()
  missing = tuple(sorted(set(variables) - set(arrays)))
  if allow_unused:
    arrays = {k: v for k, v in arrays.items() if k in variables}
    variables = {k: v for k, v in variables.items() if k in arrays}
  hf_import.assign(variables, arrays)
  return checkpoints.LoadReport(tuple(sorted(arrays)), (), unused, missing)


def read_model_source(path: str | None, user: Mapping[str, Any], target: str = "pretraining",
                      generator: str | None = None) -> ModelSource:
  """The model at ``path`` (see the module docstring) merged with the ``user`` hparams.

  ``target``: "pretraining" or "finetuning" (which shape fields apply); ``generator``: a
  separate HF ``ElectraForMaskedLM`` folder to pair with an HF ``path``.
  Raises ValueError (one line) when ``user`` contradicts the model's shape.
  """
  if not _exists(path):
    return ModelSource(dict(user))
  if is_hf(path):
    model = load_model(path, generator)
    merged = model_dir.merge_hparams(model.hf.hparams, user, source=f"Hugging Face {path}",
                                     target=target)
    return ModelSource(merged, model.hf.summary, model.hf.vocab_file, model)
  if generator:
    raise ValueError(f"a separate generator ({generator}) goes only with a Hugging Face "
                     f"discriminator folder, and {path} is not one")
  stored = model_dir.read_model_hparams(path)
  if stored is not None:
    source = model_dir.hparams_source(path)
    merged = model_dir.merge_hparams(stored, user, source=source, target=target)
    return ModelSource(merged, f"model shape from {source}", vocab_beside(path), record=stored)
  try:
    model = load_model(path)
  except FileNotFoundError:
    return ModelSource(dict(user))
  if model.kind != TF1:
    return ModelSource(dict(user), "", vocab_beside(path), model)
  inferred, summary = checkpoint_hparams.infer_hparams_from_checkpoint(model.prefix)
  merged = model_dir.merge_hparams(inferred, user, source=f"checkpoint {model.prefix}",
                                   target=target, inferred=True)
  return ModelSource(merged, summary, vocab_beside(path), model)


def _first_description(places: list[str | None], user: Mapping[str, Any],
                       target: str) -> ModelSource:
  for place in places:
    source = read_model_source(place, user, target)
    if source.message:
      return source
  return ModelSource(dict(user))


def pretraining_config(model_name: str, data_dir: str, user: Mapping[str, Any],
                       log_fn: Callable[[str], None] | None = None) -> PretrainingConfig:
  """The ``PretrainingConfig`` of a run: ``user`` completed with the shape of the run's own
  model directory (resuming), else of ``init_checkpoint``; the source is logged."""
  config = PretrainingConfig(model_name, data_dir, **user)
  # debug + do_train deletes model_dir first (official behaviour): its files do not count
  places = [config.init_checkpoint] if config.debug and config.do_train else [
    config.model_dir, config.init_checkpoint]
  own = os.path.join(config.model_dir, model_dir.HPARAMS_FILE)
  size = model_dir.cut_short(own) if config.model_dir in places else None
  if size is not None:  # a power cut's: the run writes it again before training
    if log_fn:
      log_fn(f"{own} is {'cut short' if size else 'empty'} ({size} bytes), as a power cut "
             "leaves it: the model shape comes from these settings, and the file is written "
             "again")
    places.remove(config.model_dir)
  source = _first_description(places, user, "pretraining")
  if not source.message:
    return config
  if log_fn:
    log_fn(source.message)
  return PretrainingConfig(model_name, data_dir, **source.hparams)


def finetuning_config(model_name: str, data_dir: str, user: Mapping[str, Any],
                      log_fn: Callable[[str], None] | None = None) -> FinetuningConfig:
  """The ``FinetuningConfig`` of a run: ``user`` completed with the shape of
  ``init_checkpoint`` (default ``models/<model_name>``), whose ``vocab.txt`` is used unless
  the ``vocab_file`` hparam is given; the source is logged."""
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
