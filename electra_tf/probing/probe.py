"""A labelled task's rows, an encoder's frozen features of them, and the probe's dev score.

    rows = task_rows("topic", data_dir, tokenizer, max_seq_length=128, train_rows=500,
                     dev_rows=500)        # any sentence(-pair) task run_finetuning.py reads
    features = PooledFeatures(encoder)    # the encoder in inference mode, no gradients
    scores = score(features, rows)        # {"cls": 0.53, "mean": 0.56}: the task's dev metric

Rows are featurized exactly as fine-tuning featurizes them (``Task.featurize``: [CLS] a [SEP]
b [SEP], segment ids; a table's single texts by the same ``wordpiece.sentence_features``), so
the probe reads the user's own task (GLUE folders, ``task.json`` tasks). Encoding runs in
batches of rows sorted by length, each batch cut to its longest row (the attention mask hides
padding, so the features do not depend on it). A feature is the [CLS] vector or the mean over
the real tokens ([CLS] and [SEP] included) of a layer's output; a ridge read-out
(``ridge.py``) fitted on the train rows' features is scored on the dev rows.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from electra_tf import checkpoints, names
from electra_tf.finetuning import registry, task_base
from electra_tf.finetuning.builtin.classification import ClassificationTask, RegressionTask
from electra_tf.finetuning.scorers import pearson
from electra_tf.finetuning.wordpiece import sentence_features
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer
from electra_tf.probing import paired
from electra_tf.probing import ridge as ridge_lib
from electra_tf.training.runtime import set_seed

POOLINGS = ("cls", "mean")
# The pooling the verdict against random init reads, fixed before any run was looked at: the
# discriminator is trained on every token and on no sentence-level objective, so nothing trains
# its [CLS] vector to summarise a row, while the mean reads every token it was trained on.
# [CLS] is reported beside it, never chosen after the fact.
VERDICT_POOLING = "mean"


@dataclasses.dataclass(frozen=True)
class Split:
  """Featurized rows: int32 [N, T] ``input_ids`` / ``input_mask`` / ``segment_ids`` and
  ``labels`` [N] (class ids, or scores for a regression task)."""

  input_ids: np.ndarray
  input_mask: np.ndarray
  segment_ids: np.ndarray
  labels: np.ndarray

  def __len__(self) -> int:
    return len(self.labels)


@dataclasses.dataclass(frozen=True)
class ProbeRows:
  """A task's train and dev rows, its number of classes (None: regression) and the metric the
  probe reports (higher is better, as a fraction: accuracy, MCC, Pearson...)."""

  task: str
  train: Split
  dev: Split
  num_classes: int | None
  metric_name: str
  metric: ridge_lib.Metric = dataclasses.field(compare=False, repr=False)

  def signature(self) -> str:
    """sha256 of everything the scores depend on in the rows (ids, masks, labels, metric)."""
    digest = hashlib.sha256(f"{self.task}|{self.num_classes}|{self.metric_name}".encode())
    for split in (self.train, self.dev):
      for array in (split.input_ids, split.input_mask, split.segment_ids, split.labels):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


# ------------------------------------------------------------------------------ reading rows


def _columns(rows: list[dict[str, Any]], labels: np.ndarray, width: int | None = None) -> Split:
  """A ``Split`` of feature dicts (``input_ids`` / ``input_mask`` / ``segment_ids``), [N, width]
  even when there are no rows if ``width`` is given."""

  def column(key):
    array = np.array([row[key] for row in rows], np.int32)
    return array if width is None else array.reshape(len(rows), width)

  return Split(column("input_ids"), column("input_mask"), column("segment_ids"), labels)


def _split(task: Any, split: str, limit: int | None) -> Split:
  """The first ``limit`` rows of ``split``, featurized by the task."""
  rows = task_base.first_featurized(task, split, limit)
  label_key = (f"{task.name}_label_ids" if isinstance(task, ClassificationTask)
               else f"{task.name}_targets")
  return _columns(rows, np.array([row[label_key] for row in rows],
                                 np.int64 if label_key.endswith("ids") else np.float64))


def _task_metric(task: Any) -> tuple[str, ridge_lib.Metric]:
  """The task's first dev metric other than ``loss`` / ``mse`` (as a fraction), computed by
  its own fine-tuning scorer; a regression task naming only ``mse`` gets Pearson's r."""
  key = "label_ids" if isinstance(task, ClassificationTask) else "targets"

  def results(labels, predictions):
    scorer = task.get_scorer("dev")
    for label, prediction in zip(labels, predictions, strict=True):
      scorer.update({"loss": 0.0, key: label, "predictions": prediction})
    return dict(scorer.get_results())

  with np.errstate(all="ignore"):
    names_ = [n for n in results([0, 1], [0, 1]) if n not in ("loss", "mse")]
  if not names_:
    return "pearson", lambda y, p: pearson(y, p)
  name = names_[0]
  return name, lambda y, p: results(y, p)[name] / 100.0


def task_rows(task_name: str, data_dir: str, tokenizer: Any, max_seq_length: int,
              train_rows: int, dev_rows: int | None = None) -> ProbeRows:
  """The first ``train_rows`` train rows and ``dev_rows`` (None: all) dev rows of a task in
  ``<data_dir>/finetuning_data/<task>/`` (a GLUE name or a folder with a ``task.json``)."""
  task = registry.get_task(task_name, tokenizer, data_dir, max_seq_length,
                           double_unordered=False)  # each row once, as given
  if not isinstance(task, (ClassificationTask, RegressionTask)):
    raise ValueError(f"probe task {task_name!r} is not a sentence(-pair) classification or "
                     "regression task; the probe reads one label or score per row")
  name, metric = _task_metric(task)
  num_classes = len(task.label_list) if isinstance(task, ClassificationTask) else None
  return ProbeRows(task_name, _split(task, "train", train_rows), _split(task, "dev", dev_rows),
                   num_classes, name, metric)


def read_table(path: str, text_column: str, label_column: str,
               limit: int | None = None) -> tuple[list[str], list[str]]:
  """(texts, labels) of a TSV (or, by its extension, a .csv: a user task's files) with a header;
  a missing column is one line naming the file."""
  with open(path, encoding="utf-8", newline="") as f:
    reader = (csv.DictReader(f) if path.endswith(".csv")
              else csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    for column in (text_column, label_column):
      if column not in (reader.fieldnames or []):
        raise ValueError(f"{path}: no column {column!r} (columns: {reader.fieldnames})")
    rows = list(itertools.islice(reader, limit))
  return [r[text_column] for r in rows], [r[label_column] for r in rows]


def table_rows(train_path: str, dev_path: str, text_column: str, label_column: str,
               tokenizer: Any, max_seq_length: int, train_rows: int | None) -> ProbeRows:
  """The first ``train_rows`` rows of a train table and every dev row, classes in sorted
  order of the label strings, scored by accuracy."""
  texts, labels = read_table(train_path, text_column, label_column, train_rows)
  dev_texts, dev_labels = read_table(dev_path, text_column, label_column)
  classes = sorted(set(labels) | set(dev_labels))
  ids = {c: i for i, c in enumerate(classes)}

  def featurized(texts_: list[str], labels_: list[str]) -> Split:  # as a sentence task does
    return _columns([sentence_features(tokenizer, t, None, max_seq_length)[0] for t in texts_],
                    np.array([ids[x] for x in labels_]), max_seq_length)

  return ProbeRows("table", featurized(texts, labels), featurized(dev_texts, dev_labels),
                   len(classes), "accuracy", ridge_lib.accuracy)


# ------------------------------------------------------------------------------ encoders


def random_encoder(bert_config: BertConfig, embedding_size: int | None, seed: int) -> Transformer:
  """A discriminator-shaped encoder (scope ``electra``) at random init, seeded as a run seeds:
  python, numpy and TF (tf_keras initializers draw from all three)."""
  set_seed(seed)
  encoder = Transformer(bert_config, embedding_size, scope=names.DISCRIMINATOR)
  encoder.build(None)
  return encoder


def load_encoder(encoder: Transformer, path: str) -> None:
  """Discriminator weights from our pre-training checkpoints or an official TF1 checkpoint."""
  prefix = checkpoints.resolve_checkpoint(path)
  if checkpoints.is_tf1_checkpoint(prefix):
    checkpoints.load_tf1_checkpoint(encoder.variables, prefix, allow_unused=True)
  else:
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(discriminator=encoder))
    root.read(prefix).assert_existing_objects_matched().expect_partial()


class PooledFeatures:
  """features(split) -> name -> float32 [N, H]: '<pooling>' of the last layer's output, or with
  ``all_layers`` '<layer>_<pooling>' for the embedding output ('emb') and every layer
  ('layer0', ...). The encoder runs in inference mode (no dropout), traced once."""

  def __init__(self, encoder: Transformer, all_layers: bool = False, batch_size: int = 64):
    self.encoder, self.all_layers, self.batch_size = encoder, all_layers, batch_size
    spec = tf.TensorSpec([None, None], tf.int32)
    self._outputs = tf.function(self._layer_outputs, input_signature=[spec] * 3)

  def _layer_outputs(self, input_ids, input_mask, segment_ids):
    out = self.encoder(input_ids, input_mask, segment_ids, training=False)
    if not self.all_layers:
      return {"": tf.cast(out["sequence_output"], tf.float32)}
    layers = {"emb": out["embedding_output"]}
    layers.update({f"layer{n}": x for n, x in enumerate(tf.unstack(out["all_layer_outputs"]))})
    return {name: tf.cast(x, tf.float32) for name, x in layers.items()}

  def __call__(self, split: Split) -> dict[str, np.ndarray]:
    lengths = split.input_mask.sum(1)
    order = np.argsort(lengths, kind="stable")
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(order), self.batch_size):
      rows = order[start:start + self.batch_size]
      width = max(int(lengths[rows].max()), 1)
      mask = split.input_mask[rows, :width]
      outputs = self._outputs(split.input_ids[rows, :width], mask,
                              split.segment_ids[rows, :width])
      weights = mask[..., None].astype(np.float32)
      for layer, x in outputs.items():
        x = x.numpy()
        prefix = f"{layer}_" if layer else ""
        parts.setdefault(prefix + "cls", []).append(x[:, 0])
        parts.setdefault(prefix + "mean", []).append((x * weights).sum(1) / weights.sum(1))
    back = np.argsort(order, kind="stable")  # the rows' own order
    return {k: np.concatenate(v)[back] for k, v in parts.items()}


def score(features: Callable[[Split], dict[str, np.ndarray]], rows: ProbeRows,
          ridge: float | None = None) -> dict[str, float]:
  """Feature name -> dev metric of a ridge read-out fitted on the train rows' features
  (``ridge`` None: the penalty is chosen on a split of the train rows)."""
  return evaluate(features, rows, ridge)[0]


def evaluate(features: Callable[[Split], dict[str, np.ndarray]], rows: ProbeRows,
             ridge: float | None = None) -> tuple[dict[str, float], np.ndarray]:
  """``score``'s dev metrics and the per-row dev losses of the ``VERDICT_POOLING`` read-out
  (``paired.row_losses``): what the paired verdict against random init compares."""
  train, dev = features(rows.train), features(rows.dev)
  scores, losses = {}, None
  for k in train:
    predictions = ridge_lib.probe_predictions(train[k], rows.train.labels, dev[k],
                                              rows.num_classes, rows.metric, ridge)
    scores[k] = float(rows.metric(rows.dev.labels, predictions))
    if k == VERDICT_POOLING:
      losses = paired.row_losses(rows.dev.labels, predictions, rows.num_classes is not None)
  if losses is None:
    losses = np.zeros(0)
  return scores, losses
