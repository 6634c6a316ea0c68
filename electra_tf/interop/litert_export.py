"""LiteRT (TFLite) export of a fine-tuned model's ``classify`` / ``tag`` signatures.

``export_litert`` reads the ``saved_model/`` that ``convert`` wrote for a fine-tuned model and
writes ``<out>/litert/``:

- ``<variant>.tflite``: one flatbuffer per variant with one signature per classification /
  regression / tagging task of the model, named as in the SavedModel (``classify``, ``tag``,
  ``classify_<task>``, ...). Inputs: int32 ``input_ids``, ``input_mask``, ``segment_ids``
  [1, max_seq_length] (batch 1, fixed length, featurised as for ``run_finetuning.py``);
  outputs as the SavedModel signature (``logits`` + ``probabilities``, ``score`` + ``logits``,
  or ``logits`` + ``predictions``).
- ``litert.json``: the input spec, each signature's task, kind and label list, the variants
  written and, for a variant whose conversion failed, the op named in the converter's error.
- ``vocab.txt``.

Variants (``VARIANTS``): ``float32``; ``float16`` (weights stored as float16, computed in
float32); ``int8`` (dynamic-range: int8 weights, activations quantised on the fly, no
calibration data); ``int8_full`` (full-integer: int8 weights and activations calibrated on
``representative`` inputs, float kernels where an op has no int8 one).
Run them on raw text with ``electra_tf.interop.litert_runner.LiteRTModel`` (TensorFlow-free),
or with ``ai_edge_litert.interpreter.Interpreter(model_path).get_signature_runner(name)``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401 -- registers the ops of the raw-text signatures

from electra_tf import atomic_io, console
from electra_tf.interop import signatures
from electra_tf.interop.litert_runner import SPEC_FILE
from electra_tf.interop.task_outputs import INPUT_NAMES
from electra_tf.model_files import SAVED_MODEL_DIR, VOCAB_FILE

LITERT_DIR = "litert"
VARIANTS = ("float32", "float16", "int8", "int8_full")
DEFAULT_VARIANTS = ("float32", "float16", "int8")


def parse_variants(values: Sequence[str]) -> list[str]:
  """``--litert`` values -> variant names (``all`` = every variant); unknown is a one-line
  ValueError."""
  out: list[str] = []
  for value in values:
    names = VARIANTS if value == "all" else DEFAULT_VARIANTS if value == "default" else [value]
    for name in names:
      if name not in VARIANTS:
        raise ValueError(f"--litert: unknown variant {value!r} (known: {', '.join(VARIANTS)}, "
                         "default, all)")
      if name not in out:
        out.append(name)
  return out


def pretraining_heads(hparams: Mapping[str, Any]) -> list[str]:
  """The SavedModel signatures (heads) of a pre-training model with these hparams."""
  electric = bool(hparams.get("electric_objective", False))
  electra = bool(hparams.get("electra_objective", True))
  heads = []
  if electra or electric:
    heads.append("rtd (replaced-token detection)")
  if electric or not hparams.get("uniform_generator", False) or not electra:
    heads.append("mlm (generator)")
  return heads


def no_finetuned_head_message(checkpoint: str, hparams: Mapping[str, Any] | None) -> str:
  """The one line for a LiteRT export asked of a pre-training model."""
  heads = ", ".join(pretraining_heads(hparams or {})) if hparams is not None else "unknown"
  return (f"--litert exports a fine-tuned model's classify / tag signatures, but {checkpoint} "
          f"is a pre-training model (heads: {heads}; no task_names); fine-tune it first "
          "(run_finetuning.py) or drop --litert")


def signature_kinds(tasks: Sequence[Any], signature_names: Mapping[str, str]) -> dict[str, Any]:
  """Signature name -> the task's definition (``Task.definition``: name, kind, labels or score
  range, scorer) and its "outputs", for the LiteRT-able tasks (not span QA)."""
  definitions = {task.name: {k: v for k, v in task.definition().items()
                             if k not in ("name", "data")}
                 for task in tasks if task.kind in signatures.LITERT_KINDS}
  return {name: {**entry, "outputs": list(signatures.OUTPUTS[entry["kind"]])}
          for name, entry in signatures.by_signature(definitions, signature_names).items()}


def failure_reason(error: BaseException) -> str:
  """``op tf.Erf`` for a converter error that names an op, else the error's first line."""
  text = str(error)
  match = re.search(r"'((?:tf|tfl|mhlo|stablehlo)\.\w+)' op", text)
  if match:
    return f"op {match.group(1)}"
  match = re.search(r"(?:Flex|Select TF) ops?:?\s*(\w+)", text)
  if match:
    return f"op {match.group(1)}"
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  return lines[0][:200] if lines else type(error).__name__


def convert_saved_model(saved_model_dir: str, signatures: Sequence[str], variant: str,
                        representative: Callable[[], Iterable[Any]] | None = None) -> bytes:
  """TFLite flatbuffer of the SavedModel's ``signatures`` (fixed shapes) as ``variant``."""
  converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir,
                                                       signature_keys=list(signatures))
  if variant == "float16":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_types = [tf.float16]
  elif variant == "int8":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  elif variant == "int8_full":
    if representative is None:
      raise ValueError("int8_full needs representative inputs (the tasks' train splits)")
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
  elif variant != "float32":
    raise ValueError(f"unknown LiteRT variant {variant!r}")
  with console.native_logs_hidden():  # the converter's C++ log lines, unless --verbose
    return converter.convert()


def write_fixed_shape_saved_model(saved_model_dir: str, signatures: Sequence[str],
                                  max_seq_length: int, out_dir: str) -> None:
  """Re-saves the SavedModel's ``signatures`` with [1, max_seq_length] inputs into
  ``out_dir``, which the converter reads (its signature names become the LiteRT ones)."""
  loaded = tf.saved_model.load(saved_model_dir)
  spec = tf.TensorSpec([1, max_seq_length], tf.int32)
  module = tf.Module()
  module.loaded = loaded  # keeps the variables
  functions = {}
  for name in signatures:
    restored = getattr(loaded, name)

    def call(input_ids, input_mask, segment_ids, restored=restored):
      return restored(input_ids, input_mask, segment_ids)
    functions[name] = tf.function(call, input_signature=[spec] * 3).get_concrete_function()
  tf.saved_model.save(module, out_dir, signatures=functions)


def _convert_variants(saved_model_dir: str, signatures: list[str], variants: Sequence[str],
                      out_dir: str, representative: Callable[[], Iterable[Any]] | None
                      ) -> tuple[dict[str, str], dict[str, str]]:
  """({variant: .tflite path}, {variant: why it failed}); a failure does not stop the rest."""
  files: dict[str, str] = {}
  failed: dict[str, str] = {}
  for variant in variants:
    try:
      flatbuffer = convert_saved_model(saved_model_dir, signatures, variant, representative)
    except Exception as e:  # noqa: BLE001 -- any converter failure: keep the other variants
      failed[variant] = failure_reason(e)
      console.log(f"litert/{variant}.tflite not written: conversion failed ({failed[variant]}); "
                  "the other exports are kept")
      continue
    path = os.path.join(out_dir, f"{variant}.tflite")
    atomic_io.write_bytes(path, flatbuffer)
    files[variant] = path
  return files, failed


def export_litert(export_dir: str, tasks: Sequence[Any], signature_names: Mapping[str, str],
                  max_seq_length: int, variants: Sequence[str] = DEFAULT_VARIANTS,
                  vocab_file: str | None = None, do_lower_case: bool = True,
                  representative: Callable[[], Iterable[list[Any]]] | None = None
                  ) -> dict[str, Any]:
  """Writes ``<export_dir>/litert/`` from ``<export_dir>/saved_model`` (see the module
  docstring). ``signature_names``: task name -> SavedModel signature name.

  A variant whose conversion fails is left out with one line naming the op; the others (and
  every other export) are kept. Returns {"dir", "files": {variant: path}, "failed":
  {variant: reason}, "signatures": [...]}; with no classify / tag task, one line naming the
  signatures the model has and nothing written ("dir" None).
  """
  kinds = signature_kinds(tasks, signature_names)
  if not kinds:
    have = ", ".join(sorted(signature_names.values())) or "none"
    console.log(f"litert/ not written: LiteRT covers classify / tag signatures, this model "
                f"has only {have}; the other exports are kept")
    return {"dir": None, "files": {}, "failed": {}, "signatures": []}
  skipped = sorted(set(signature_names.values()) - set(kinds))
  if skipped:
    console.log(f"litert/: {', '.join(skipped)} not exported (LiteRT covers classify and tag)")
  out_dir = os.path.join(export_dir, LITERT_DIR)
  os.makedirs(out_dir, exist_ok=True)
  fixed = tempfile.mkdtemp(prefix=".fixed-", dir=out_dir)
  try:
    write_fixed_shape_saved_model(os.path.join(export_dir, SAVED_MODEL_DIR), list(kinds),
                                  max_seq_length, fixed)
    files, failed = _convert_variants(fixed, list(kinds), variants, out_dir, representative)
  finally:
    shutil.rmtree(fixed, ignore_errors=True)
  if vocab_file:
    atomic_io.copy_file(vocab_file, os.path.join(out_dir, VOCAB_FILE))
  spec = {
      "inputs": {name: {"shape": [1, max_seq_length], "dtype": "int32"} for name in INPUT_NAMES},
      "max_seq_length": max_seq_length, "do_lower_case": bool(do_lower_case),
      "vocab": VOCAB_FILE if vocab_file else None,
      "signatures": kinds,
      "variants": {v: os.path.basename(p) for v, p in files.items()},
      "failed": failed,
  }
  atomic_io.write_json(os.path.join(out_dir, SPEC_FILE), spec, indent=2, sort_keys=True)
  return {"dir": out_dir, "files": files, "failed": failed, "signatures": sorted(kinds)}


def representative_inputs(tasks: Mapping[str, Any], max_examples: int = 100
                          ) -> Callable[[], Iterable[Any]]:
  """Calibration inputs for ``int8_full``: the first ``max_examples`` featurised train
  examples of each task ({signature name: task}), as [1, T] int32 arrays keyed by input name;
  (signature, inputs) pairs when there are several signatures, as the converter expects."""
  def generate():
    for signature, task in tasks.items():
      count = 0
      try:
        examples = task.get_examples("train")
      except (OSError, ValueError) as e:
        raise ValueError("int8_full calibrates on train rows: "
                         f"{console.error_line(e, name_type=False)} (--data_dir gives them)"
                         ) from None
      for example in examples:
        for features in task.featurize(example):
          inputs = {k: np.asarray([features[k]], np.int32) for k in INPUT_NAMES}
          yield (signature, inputs) if len(tasks) > 1 else inputs
          count += 1
        if count >= max_examples:
          break
  return generate


def update_spec(litert_dir: str, values: Mapping[str, Any]) -> None:
  """Adds ``values`` to ``<litert_dir>/litert.json`` (rewritten atomically)."""
  path = os.path.join(litert_dir, SPEC_FILE)
  with open(path, encoding="utf-8") as f:
    spec = json.load(f)
  atomic_io.write_json(path, {**spec, **values}, indent=2, sort_keys=True)
