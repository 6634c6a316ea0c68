"""Run a fine-tuned model's LiteRT export on raw text, TensorFlow-free (numpy, the
``ai_edge_litert`` interpreter and this package's pure-Python tokenizer), e.g. on a small
device::

  from electra_tf.interop.litert_runner import LiteRTModel

  model = LiteRTModel("out/litert/int8.tflite")       # litert.json and vocab.txt beside it
  model.predict("Return the path of the temporary directory.")
  # {"label": "tempfile", "probability": 0.93, "probabilities": {"json": 0.01, ...}}
  model.predict("A man is playing.", "A man plays.")  # a sentence-pair task
  model.predict("He reckons the deficit".split())      # tagging: {"tags": ["B-NP", ...]}

The text is featurised as ``run_finetuning.py`` does (``[CLS] a [SEP] b [SEP]``, WordPiece ids
of the shipped ``vocab.txt``, input mask, segment ids, zero padding to ``max_seq_length``);
``run(input_ids, input_mask, segment_ids)`` calls the signature on int32 [1, T] arrays directly.
A model with several tasks takes ``task=<name>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from electra_tf import console
from electra_tf.full_tokenizer import FullTokenizer
from electra_tf.interop import task_outputs

SPEC_FILE = "litert.json"  # the spec beside the .tflite files (``litert_export`` writes it)


def read_spec(tflite_path: str) -> dict[str, Any]:
  """The ``litert.json`` beside a ``.tflite`` file (written by ``convert --litert``)."""
  path = os.path.join(os.path.dirname(os.path.abspath(tflite_path)), SPEC_FILE)
  if not os.path.isfile(tflite_path):
    raise FileNotFoundError(f"LiteRT model not found: {tflite_path}")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{tflite_path}: no {SPEC_FILE} beside it (convert --litert "
                            "writes both into litert/; keep them together)")
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def pick_signature(signatures: dict[str, dict], task: str | None, where: str) -> str:
  """The signature of ``task`` (by task or signature name), or the only one."""
  if task is None:
    if len(signatures) == 1:
      return next(iter(signatures))
    tasks = ", ".join(s["task"] for s in signatures.values())
    raise ValueError(f"{where} has several tasks ({tasks}): pass the task to use")
  for name, signature in signatures.items():
    if task in (name, signature["task"]):
      return name
  tasks = ", ".join(s["task"] for s in signatures.values())
  raise ValueError(f"{where} has no task {task!r} (its tasks: {tasks})")


def task_definition(spec: dict[str, Any], task: str | None, where: str
                    ) -> tuple[str, dict[str, Any]]:
  """(signature, its task's definition with ``name``) of ``task`` in a ``litert.json``."""
  signature = pick_signature(spec["signatures"], task, where)
  definition = {**spec["signatures"][signature]}
  definition["name"] = definition["task"]
  return signature, definition


class LiteRTModel:
  """One task of a ``.tflite`` export on raw text (see the module docstring).

  Attributes: ``task``, ``kind`` (classification / regression / tagging), ``definition``
  (labels or score range, scorer; from ``litert.json``), ``max_seq_length``, ``tokenizer``.
  """

  def __init__(self, tflite_path: str, task: str | None = None,
               num_threads: int | None = None):
    from ai_edge_litert.interpreter import Interpreter

    spec = read_spec(tflite_path)
    self.signature, self.definition = task_definition(spec, task, tflite_path)
    self.task = self.definition["task"]
    self.kind = self.definition["kind"]
    self.max_seq_length = int(spec["max_seq_length"])
    if not spec.get("vocab"):
      raise ValueError(f"{tflite_path}: {SPEC_FILE} names no vocab.txt (convert it with one)")
    vocab = os.path.join(os.path.dirname(os.path.abspath(tflite_path)), spec["vocab"])
    self.tokenizer = FullTokenizer(vocab, bool(spec["do_lower_case"]))
    with console.native_logs_hidden():  # LiteRT's INFO line at the first call
      self.interpreter = Interpreter(model_path=tflite_path, num_threads=num_threads)
      self._runner = self.interpreter.get_signature_runner(self.signature)
      zeros = np.zeros([1, self.max_seq_length], np.int32)
      self.run(zeros, zeros, zeros)

  def featurize(self, text: str | Sequence[str], text_b: str | None = None
                ) -> dict[str, Any]:
    """The row's inputs as int lists (``task_outputs.featurize``); tagging takes words (a
    list, or a string split on whitespace)."""
    if self.kind == "tagging":
      words = text.split() if isinstance(text, str) else list(text)
      return task_outputs.featurize(self.tokenizer, self.kind, self.max_seq_length, words=words)
    return task_outputs.featurize(self.tokenizer, self.kind, self.max_seq_length, text, text_b)

  def run(self, input_ids: Any, input_mask: Any, segment_ids: Any) -> dict[str, np.ndarray]:
    """The signature's outputs for int32 [1, max_seq_length] inputs (e.g. ``logits`` [1, n]
    and ``probabilities`` [1, n])."""
    return self._runner(input_ids=np.asarray(input_ids, np.int32),
                        input_mask=np.asarray(input_mask, np.int32),
                        segment_ids=np.asarray(segment_ids, np.int32))

  def run_features(self, features: dict[str, Any]) -> dict[str, np.ndarray]:
    """One featurised row's outputs, batch dimension removed."""
    out = self.run(*([features[k]] for k in task_outputs.INPUT_NAMES))
    return {k: v[0] for k, v in out.items()}

  def predict(self, text: str | Sequence[str], text_b: str | None = None) -> dict[str, Any]:
    """{"label", "probability", "probabilities"} (classification), {"score"} (regression) or
    {"tags"} (tagging, one per word) for one text (pair, word list)."""
    features = self.featurize(text, text_b)
    n_words = len(text.split() if isinstance(text, str) else text)
    return task_outputs.prediction(self.definition, self.run_features(features), features,
                                   n_words if self.kind == "tagging" else None)
