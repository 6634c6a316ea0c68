"""The model ``predict`` runs: described from its JSON files first (``read_model_spec``: the
task's definition, no weights read, so the input can be checked against it before anything heavy
loads), then loaded (``load``) as a batch call.

``path`` is a fine-tuned model directory (``run_finetuning.py``'s
``finetuning_models/<tasks>_model_<trial>`` or its ``tf1/``, ``convert``'s ``<out>/tf2`` or
``<out>/tf1``: read as evaluation reads it, see ``_model_directory``), a SavedModel export
(``<out>/saved_model``, what ``<out>`` itself runs) or a LiteRT ``.tflite`` with its
``litert.json`` beside it (``<out>/litert/int8.tflite``; the folder ``<out>/litert`` runs its
most exact variant there, ``float32.tflite`` when it was written). Each carries its task
definitions (``tasks.json`` / ``litert.json``) and ``vocab.txt``. A ``.tflite`` loads no
TensorFlow (numpy, ``ai_edge_litert`` and the pure-Python tokenizer) and runs one row per call.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from electra_tf import console, model_files
from electra_tf.full_tokenizer import FullTokenizer
from electra_tf.interop import task_outputs
from electra_tf.interop.litert_runner import SPEC_FILE as LITERT_SPEC
from electra_tf.interop.litert_runner import (
  LiteRTModel,
  pick_signature,
  read_spec,
  task_definition,
)
from electra_tf.interop.signatures import LITERT_KINDS, by_signature

INPUTS = task_outputs.INPUT_NAMES
LITERT = "LiteRT"
SAVED_MODEL = "SavedModel"
MODEL_DIRECTORY = "model directory"
# A LiteRT folder given as --model: its most exact variant there.
LITERT_PREFERENCE = ("float32", "float16", "int8", "int8_full")


@dataclasses.dataclass
class ModelSpec:
  """A model as its files describe it: its format, path (the ``.tflite``, the SavedModel
  folder or the checkpoint), the task's definition (``tasks.json`` / ``litert.json``); a
  SavedModel's or model directory's ``hparams.json`` and every task definition, read once."""

  kind: str
  path: str
  definition: dict[str, Any]
  hparams: dict[str, Any] = dataclasses.field(default_factory=dict)
  definitions: dict[str, dict] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Predictor:
  """A loaded model, one task: its definition, how to featurise, a batch call (int32 [B, T]
  inputs by name -> the signature's outputs, numpy [B, ...]) and the most rows it takes in
  one call (``max_batch``: 1 for LiteRT, whose inputs are [1, T]; None: any)."""

  definition: dict[str, Any]
  tokenizer: Any
  max_seq_length: int
  run_batch: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
  description: str
  max_batch: int | None = None


def litert_in_folder(folder: str) -> str | None:
  """The ``.tflite`` to run when ``folder`` is a LiteRT folder (``litert.json`` in it, as
  ``convert --litert`` writes ``<out>/litert/``): the first of ``LITERT_PREFERENCE`` that
  its ``litert.json`` lists and that is there, else its first ``.tflite``; None for any other
  folder. A LiteRT folder without a ``.tflite`` is a one-line FileNotFoundError."""
  spec_path = os.path.join(folder, LITERT_SPEC)
  if not os.path.isfile(spec_path):
    return None
  try:
    with open(spec_path, encoding="utf-8") as f:
      variants = json.load(f).get("variants") or {}
  except (OSError, ValueError, AttributeError):
    variants = {}
  listed = [variants[v] for v in LITERT_PREFERENCE if isinstance(variants.get(v), str)]
  present = sorted(n for n in os.listdir(folder) if n.endswith(".tflite"))
  for name in [*listed, *present]:
    if os.path.isfile(os.path.join(folder, name)):
      return os.path.join(folder, name)
  raise FileNotFoundError(f"{folder} has {LITERT_SPEC} but no .tflite model")


def _definitions(folder: str, model: str) -> tuple[dict[str, Any], dict[str, dict]]:
  """(hparams.json, task definitions) of a fine-tuned model's folder; a one-line error naming
  the command that writes them when one is missing."""
  from electra_tf.reading import model_dir, model_tasks  # local: they load TensorFlow

  hparams = model_dir.read_model_hparams(folder)
  definitions = model_tasks.read_tasks(folder)
  if hparams is None:
    raise ValueError(f"{folder} has no {model_dir.HPARAMS_FILE}: predict needs a fine-tuned "
                     "model written by run_finetuning.py or python -m electra_tf.convert")
  if definitions is None:
    raise ValueError(
        f"{folder} has no {model_tasks.TASKS_FILE} (saved before models carried their task "
        f"definitions); write a model that has it with: python -m electra_tf.convert "
        f"--checkpoint {model} --data_dir <the data_dir it was fine-tuned with> --output_dir "
        "<new folder>, then predict with --model <new folder>")
  return hparams, definitions


def _files(spec: ModelSpec, folder: str) -> tuple[dict[str, Any], dict[str, dict]]:
  """The (hparams.json, task definitions) ``read_model_spec`` read, else read from ``folder``."""
  return (spec.hparams, spec.definitions) if spec.hparams else _definitions(folder, spec.path)


def _task_definition(definitions: dict[str, dict], task: str | None, where: str
                     ) -> tuple[str, dict[str, Any]]:
  entries = by_signature(definitions)
  signature = pick_signature(entries, task, where)
  if entries[signature]["kind"] not in LITERT_KINDS:
    raise ValueError(f"predict labels classification, regression and tagging tasks; "
                     f"{entries[signature]['task']} is {entries[signature]['kind']} "
                     f"(its SavedModel signature is {signature})")
  return signature, entries[signature]


def read_model_spec(path: str, task: str | None = None) -> ModelSpec:
  """The model at ``path`` for ``task`` (its only one if None), from its JSON files only; a
  missing model, definition or task is a one-line error."""
  if os.path.isdir(path):
    path = litert_in_folder(path) or path
  if path.endswith(".tflite"):
    signature, definition = task_definition(read_spec(path), task, path)
    return ModelSpec(LITERT, path, {**definition, "signature": signature})
  if not os.path.isdir(path) and not os.path.exists(path + ".index"):
    raise FileNotFoundError(f"--model {path} not found")
  if not console.has_tensorflow():  # a device install runs only .tflite models
    raise console.needs_tensorflow(f"--model {path}, a SavedModel or model directory,")
  for folder in (path, os.path.join(path, model_files.SAVED_MODEL_DIR)):
    if os.path.isfile(os.path.join(folder, "saved_model.pb")):
      hparams, definitions = _definitions(folder, path)
      signature, definition = _task_definition(definitions, task, folder)
      return ModelSpec(SAVED_MODEL, folder, {**definition, "signature": signature}, hparams,
                       definitions)
  from electra_tf.reading.model_dir import model_dir_of

  folder = model_dir_of(path)
  hparams, definitions = _definitions(folder, path)
  signature, definition = _task_definition(definitions, task, folder)
  return ModelSpec(MODEL_DIRECTORY, path, {**definition, "signature": signature}, hparams,
                   definitions)


def load(spec: ModelSpec, threads: int | None = None) -> Predictor:
  """The described model, loaded and ready to run."""
  if spec.kind == LITERT:
    return _litert(spec.path, spec.definition["task"], threads)
  if spec.kind == SAVED_MODEL:
    return _saved_model(spec)
  return _model_directory(spec)


def open_model(path: str, task: str | None = None, threads: int | None = None) -> Predictor:
  """``load(read_model_spec(path, task))``."""
  return load(read_model_spec(path, task), threads)


def _litert(path: str, task: str, threads: int | None) -> Predictor:
  model = LiteRTModel(path, task, num_threads=threads)

  def run_batch(batch):  # the .tflite inputs are [1, T]: one row per call
    outs = [model.run(*(batch[k][i:i + 1] for k in INPUTS)) for i in range(len(batch[INPUTS[0]]))]
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
  return Predictor(model.definition, model.tokenizer, model.max_seq_length, run_batch,
                   f"LiteRT {os.path.basename(path)}, {threads or 'default'} thread(s)", 1)


def _vocab(folder: str) -> str:
  path = model_files.vocab_in(folder)
  if path is None:
    raise FileNotFoundError(f"{folder} has no {model_files.VOCAB_FILE}")
  return path


def _saved_model(spec: ModelSpec) -> Predictor:
  import tensorflow as tf
  import tensorflow_text  # noqa: F401 -- registers the ops of the raw-text signatures

  hparams, _ = _files(spec, spec.path)
  with console.native_logs_hidden():
    function = tf.saved_model.load(spec.path).signatures[spec.definition["signature"]]

  def run_batch(batch):
    out = function(**{k: tf.constant(batch[k]) for k in INPUTS})
    return {k: v.numpy() for k, v in out.items()}
  tokenizer = FullTokenizer(_vocab(spec.path), bool(hparams.get("do_lower_case", True)))
  return Predictor(spec.definition, tokenizer, int(hparams["max_seq_length"]), run_batch,
                   f"SavedModel {spec.path}")


def _model_directory(spec: ModelSpec) -> Predictor:
  """A fine-tuned model directory read as evaluation reads it: ``hparams.json`` -> the config,
  ``tasks.json`` -> the tasks and their heads, then its newest complete ``ckpt-<N>``
  (``restore_latest``), else the checkpoint at ``path`` (a prefix, or ``tf1/model.ckpt`` /
  ``ckpt`` in it: ``checkpoints.resolve_checkpoint``), read by object (ours, TF2) or by
  official TF1 name (``tf1/``). Every variable must be there."""
  from electra_tf import checkpoints  # local: they load TensorFlow
  from electra_tf.config import FinetuningConfig
  from electra_tf.finetuning import finetuning_model, registry
  from electra_tf.interop.finetuned_saved_model import FinetunedExport
  from electra_tf.reading import model_dir

  folder = model_dir.model_dir_of(spec.path)
  hparams, definitions = _files(spec, folder)
  config = FinetuningConfig("predict", folder, **{
      **model_dir.recorded_values(FinetuningConfig, hparams), "vocab_file": _vocab(folder)})
  tasks = registry.model_tasks(config, definitions, spec.path)
  model = finetuning_model.create_model(config, tasks)
  if not finetuning_model.restore_latest(model, spec.path):
    prefix = checkpoints.resolve_checkpoint(spec.path)
    if checkpoints.is_tf1_checkpoint(prefix):
      checkpoints.load_tf1_checkpoint(model.tf1_variables(), prefix)
    else:
      finetuning_model.restore_finetuned(model, prefix)
  function = FinetunedExport(model, tasks).signatures()[spec.definition["signature"]]

  def run_batch(batch):
    import tensorflow as tf

    out = function(**{k: tf.constant(batch[k]) for k in INPUTS})
    return {k: v.numpy() for k, v in out.items()}
  tokenizer = FullTokenizer(config.vocab_file, config.do_lower_case)
  return Predictor(spec.definition, tokenizer, config.max_seq_length, run_batch,
                   f"model directory {folder}")
