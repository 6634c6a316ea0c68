r"""Label a file with a fine-tuned model (the ``python -m electra_tf.predict`` command).

  python -m electra_tf.predict --model <model dir | SavedModel | .tflite | litert/> \
      --input rows.csv \
      [--output predictions.jsonl] [--task topic] [--batch_size 32] [--show 5]

``--model`` is a fine-tuned model directory (``run_finetuning.py``'s
``finetuning_models/<tasks>_model_<trial>``, or ``convert``'s output folder), a SavedModel
export (``<out>/saved_model``) or a LiteRT ``.tflite`` with its ``litert.json`` beside it
(``<out>/litert/int8.tflite``; the folder ``<out>/litert`` runs its most exact variant there,
``float32.tflite`` when it was written). Each carries its task definitions (``tasks.json`` /
``litert.json``) and ``vocab.txt``, so no data folder is needed. The ``.tflite`` path loads no
TensorFlow (numpy, ``ai_edge_litert`` and the pure-Python tokenizer), so it runs on a small
device; LiteRT models take one row per call.

Rows (``interop.prediction_rows``) are featurised as for ``run_finetuning.py``, run in batches
with a progress line, and each gets one prediction (label and probabilities; score; tags)
in ``--output``. Rows with a label are scored with the task's own scorer (its metrics, e.g.
accuracy), and the summary gives examples per second (featurisation and model, the model
already loaded).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from electra_tf import console
from electra_tf.full_tokenizer import FullTokenizer
from electra_tf.interop import prediction_rows, task_outputs
from electra_tf.interop.litert_runner import LiteRTModel, pick_signature
from electra_tf.interop.signatures import LITERT_KINDS, signature_names

INPUTS = task_outputs.INPUT_NAMES


@dataclasses.dataclass
class Predictor:
  """A loaded model, one task: its definition, how to featurise, and a batch call
  (int32 [B, T] inputs by name -> the signature's outputs, numpy [B, ...])."""

  definition: dict[str, Any]
  tokenizer: Any
  max_seq_length: int
  run_batch: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
  description: str


# A LiteRT folder given as --model: its most exact variant there.
LITERT_PREFERENCE = ("float32", "float16", "int8", "int8_full")
LITERT_SPEC = "litert.json"


def litert_in_folder(folder: str) -> str | None:
  """The ``.tflite`` to run when ``folder`` is a LiteRT folder (``litert.json`` in it, as
  ``convert --litert`` writes ``<out>/litert/``): the first of ``LITERT_PREFERENCE`` that
  its ``litert.json`` lists and that is there, else its first ``.tflite``; None for any other
  folder. A LiteRT folder without a ``.tflite`` is a one-line FileNotFoundError."""
  spec_path = os.path.join(folder, LITERT_SPEC)
  if not os.path.isfile(spec_path):
    return None
  import json

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


def open_model(path: str, task: str | None = None, threads: int | None = None) -> Predictor:
  """The model at ``path`` (see the module docstring) for ``task`` (its only one if None)."""
  if os.path.isdir(path):
    path = litert_in_folder(path) or path
  if path.endswith(".tflite"):
    return _litert(path, task, threads)
  if not os.path.isdir(path) and not os.path.exists(path + ".index"):
    raise FileNotFoundError(f"--model {path} not found")
  if os.path.isfile(os.path.join(path, "saved_model.pb")):
    return _saved_model(path, task)
  if os.path.isfile(os.path.join(path, "saved_model", "saved_model.pb")):
    return _saved_model(os.path.join(path, "saved_model"), task)
  return _model_directory(path, task)


def _litert(path: str, task: str | None, threads: int | None) -> Predictor:
  model = LiteRTModel(path, task, num_threads=threads)

  def run_batch(batch):  # the .tflite inputs are [1, T]: one row per call
    outs = [model.run(*(batch[k][i:i + 1] for k in INPUTS)) for i in range(len(batch[INPUTS[0]]))]
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
  return Predictor(model.definition, model.tokenizer, model.max_seq_length, run_batch,
                   f"LiteRT {os.path.basename(path)}, {threads or 'default'} thread(s)")


def _definitions(folder: str) -> tuple[dict[str, Any], dict[str, dict]]:
  """(hparams.json, task definitions) of a fine-tuned model's folder; one line if missing."""
  from electra_tf.reading import model_dir, model_tasks  # local: they load TensorFlow

  hparams = model_dir.read_model_hparams(folder)
  definitions = model_tasks.read_tasks(folder)
  if hparams is None or definitions is None:
    missing = model_dir.HPARAMS_FILE if hparams is None else model_tasks.TASKS_FILE
    raise ValueError(f"{folder} has no {missing}: predict needs a fine-tuned model written by "
                     "run_finetuning.py or python -m electra_tf.convert (which write it)")
  return hparams, definitions


def _task_definition(definitions: dict[str, dict], task: str | None, where: str
                     ) -> tuple[str, dict[str, Any]]:
  names = signature_names({n: d["kind"] for n, d in definitions.items()})
  by_signature = {names[n]: {**d, "task": n} for n, d in definitions.items()}
  signature = pick_signature(by_signature, task, where)
  if by_signature[signature]["kind"] not in LITERT_KINDS:
    raise ValueError(f"predict labels classification, regression and tagging tasks; "
                     f"{by_signature[signature]['task']} is {by_signature[signature]['kind']} "
                     f"(its SavedModel signature is {signature})")
  return signature, by_signature[signature]


def _vocab(folder: str) -> str:
  for path in (os.path.join(folder, "vocab.txt"), os.path.join(folder, "assets", "vocab.txt")):
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(f"{folder} has no vocab.txt")


def _saved_model(folder: str, task: str | None) -> Predictor:
  import tensorflow as tf
  import tensorflow_text  # noqa: F401 -- registers the ops of the raw-text signatures

  hparams, definitions = _definitions(folder)
  signature, definition = _task_definition(definitions, task, folder)
  with console.native_logs_hidden():
    function = tf.saved_model.load(folder).signatures[signature]

  def run_batch(batch):
    out = function(**{k: tf.constant(batch[k]) for k in INPUTS})
    return {k: v.numpy() for k, v in out.items()}
  tokenizer = FullTokenizer(_vocab(folder), bool(hparams.get("do_lower_case", True)))
  return Predictor(definition, tokenizer, int(hparams["max_seq_length"]), run_batch,
                   f"SavedModel {folder}")


def _model_directory(path: str, task: str | None) -> Predictor:
  """A checkpoint directory (TF2 or TF1 names) built into the model and its signatures."""
  from electra_tf.interop.conversion import load_finetuned
  from electra_tf.interop.finetuned_saved_model import FinetunedExport
  from electra_tf.reading.model_dir import model_dir_of

  folder = model_dir_of(path)
  _, definitions = _definitions(folder)
  signature, definition = _task_definition(definitions, task, folder)
  model, tasks, config, _, _ = load_finetuned(path, {}, folder)
  function = FinetunedExport(model, tasks).signatures()[signature]

  def run_batch(batch):
    import tensorflow as tf

    out = function(**{k: tf.constant(batch[k]) for k in INPUTS})
    return {k: v.numpy() for k, v in out.items()}
  tokenizer = FullTokenizer(config.vocab_file, config.do_lower_case)
  return Predictor(definition, tokenizer, config.max_seq_length, run_batch,
                   f"model directory {folder}")


@dataclasses.dataclass
class Result:
  predictions: list[dict[str, Any]]
  metrics: dict[str, float]  # the task's metrics over the labelled rows ({} if none)
  labelled: int
  seconds: float


def predict_rows(predictor: Predictor, rows: Sequence[prediction_rows.Row], batch_size: int,
                 where: str = "") -> Result:
  """Predictions for ``rows`` in batches, a progress line every 10%; labelled rows scored."""
  definition, kind = predictor.definition, predictor.definition["kind"]
  scored = any(r.label is not None for r in rows)
  scorer = task_outputs.make_scorer(definition) if scored else None
  predictions: list[dict[str, Any]] = []
  warm_up = np.zeros([min(batch_size, len(rows)), predictor.max_seq_length], np.int32)
  predictor.run_batch({k: warm_up for k in INPUTS})  # first-call setup is not timed
  labelled, start, step = 0, time.perf_counter(), max(1, len(rows) // 10)
  for first in range(0, len(rows), batch_size):
    batch = rows[first:first + batch_size]
    features = [task_outputs.featurize(predictor.tokenizer, kind, predictor.max_seq_length,
                                       r.text_a, r.text_b, r.words) for r in batch]
    outputs = predictor.run_batch({k: np.asarray([f[k] for f in features], np.int32)
                                   for k in INPUTS})
    for i, (row, f) in enumerate(zip(batch, features, strict=True)):
      out = {k: v[i] for k, v in outputs.items()}
      predictions.append(task_outputs.prediction(
          definition, out, f, len(row.words) if row.words is not None else None))
      if row.label is not None:
        try:
          gold = task_outputs.gold_ids(definition, row.label)
        except ValueError as e:
          raise ValueError(f"{where}:{row.line}: {e}") from None
        task_outputs.score_row(scorer, definition, out, f, gold)
        labelled += 1
    done = first + len(batch)
    if done // step != first // step or done == len(rows):
      seconds = time.perf_counter() - start
      console.log(f"predict: {done}/{len(rows)} rows ({100 * done / len(rows):.0f}%), "
                  f"{done / max(seconds, 1e-9):.1f} rows/s")
  metrics = task_outputs.metric_values(scorer) if labelled else {}
  return Result(predictions, metrics, labelled, time.perf_counter() - start)


def row_line(row: prediction_rows.Row, prediction: Mapping[str, Any]) -> str:
  """``label (p=0.93)  text`` (score / tags) for printing one row."""
  text = " ".join(row.words) if row.words is not None else row.text_a + (
      f" | {row.text_b}" if row.text_b else "")
  if "label" in prediction:
    return f"  {prediction['label']} (p={prediction['probability']:.2f})  {text}"
  if "score" in prediction:
    return f"  {prediction['score']:.3f}  {text}"
  return "  " + " ".join(f"{w}/{t}" for w, t in zip(row.words, prediction["tags"], strict=True))


def define_flags() -> None:
  """Command-line flags, defined on demand so importing this module defines none."""
  from absl import flags

  paths = {
      "model": "A fine-tuned model directory, a SavedModel export, a LiteRT .tflite "
               "(litert.json beside it) or a LiteRT folder (its float32 model if there).",
      "input": "Rows to label: .txt (one a line), .csv, .tsv, .jsonl; tagging also CoNLL .conll.",
      "output": "Where the predictions go (.jsonl, .tsv, .csv; default <input without "
                "extension>.predictions.jsonl).",
      "task": "The task to predict, for a model with several."}
  for name, text in paths.items():
    flags.DEFINE_string(name, None, text)
  for role in ("text_a", "text_b", "label", "id"):
    flags.DEFINE_string(role, None, f"Column of the {role} (name or 0-based number; default: "
                        "the task's task.json, else the role's name).")
  flags.DEFINE_integer("batch_size", 32, "Rows per model call (LiteRT: rows per progress step).")
  flags.DEFINE_integer("threads", None, "LiteRT interpreter threads (default: its own).")
  flags.DEFINE_integer("max_rows", None, "Only the first rows of --input.")
  flags.DEFINE_integer("show", 0, "Print the first N rows' predictions.")


def main(argv: list[str]) -> None:
  from absl import app, flags

  f = flags.FLAGS
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if not f.model or not f.input:
    raise app.UsageError("--model and --input are required")
  if f.batch_size < 1:
    raise app.UsageError(f"--batch_size must be >= 1, got {f.batch_size}")
  output = f.output or os.path.splitext(f.input)[0] + ".predictions.jsonl"
  predictor = open_model(f.model, f.task, f.threads)
  rows = prediction_rows.read_rows(f.input, predictor.definition,
                                   {r: getattr(f, r) for r in ("text_a", "text_b", "label", "id")})
  rows = rows[:f.max_rows] if f.max_rows else rows
  result = predict_rows(predictor, rows, f.batch_size, f.input)
  prediction_rows.write_predictions(output, rows, result.predictions)
  lines = [row_line(r, p) for r, p in zip(rows[:f.show], result.predictions, strict=False)]
  if result.labelled:
    scores = ", ".join(f"{k} {v:.2f}" for k, v in result.metrics.items())
    lines.append(f"  {scores} ({result.labelled} labelled rows)")
  lines += [f"  {len(rows) / max(result.seconds, 1e-9):.1f} examples/s ({len(rows)} rows in "
            f"{result.seconds:.2f} s: tokenisation, featurisation and the model, batch "
            f"{f.batch_size})", f"  predictions: {output}"]
  console.summary(f"Predicted {f.input} with {predictor.description} (task "
                  f"{predictor.definition['task']}):", lines)
