"""Tasks described by a ``task.json`` (``spec``) instead of code.

They are subclasses of the built-in task classes and only change where examples come from:
a user classification task is featurized, headed and exported exactly as ``sst`` / ``mrpc``,
a regression task as ``sts``, a tagging task as ``chunk``. Label lists inferred from the
train split are stored as JSON next to the featurized records, so later runs (evaluation,
export) use the same label ids.
"""

from __future__ import annotations

import json
import os
from typing import Any

from electra_tf import atomic_io
from electra_tf.console import log
from electra_tf.finetuning.builtin.classification import (
  ClassificationTask,
  InputExample,
  RegressionTask,
)
from electra_tf.finetuning.builtin.tagging import TaggingExample, TaggingTask
from electra_tf.finetuning.features import read_cached_json
from electra_tf.finetuning.task_base import data_error
from electra_tf.finetuning.user import predictions as user_predictions
from electra_tf.finetuning.user import scoring
from electra_tf.finetuning.user.records import (
  TABLE_EXTENSIONS,
  TAGGING_EXTENSIONS,
  Record,
  TaggedSentence,
  find_split,
  read_conll,
  read_records,
  read_tagged_jsonl,
)
from electra_tf.finetuning.user.spec import TaskSpec, label_key, load_spec, spec_json

_DEBUG_MAX_ROWS = 100
_SPAN_PREFIXES = ("B-", "I-", "E-", "S-")


def _stored(path: str | None, compute):
  """JSON at ``path`` when it holds a list, else ``compute()``, written to ``path`` (when
  given) whole: an empty, short or unparseable file (a power cut) is rebuilt, one line."""
  value = read_cached_json(path, log)
  if isinstance(value, list):
    return value
  if value is not None:
    log(f"Rebuilding {path}: it holds no list")
  value = compute()
  if path:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    atomic_io.write_text(path, json.dumps(value))
  return value


class _TruncationCounter:
  """Counts examples longer than ``max_seq_length`` while a split is featurized; one line
  with the count once the split's last example is done."""

  def start(self, task_name: str, split: str, n_examples: int, max_seq_length: int) -> None:
    self.what = f"{task_name} {split}"
    self.left, self.total, self.truncated = n_examples, n_examples, 0
    self.max_seq_length = max_seq_length

  def add(self, truncated: bool) -> None:
    if getattr(self, "left", 0) <= 0:
      return
    self.truncated += int(truncated)
    self.left -= 1
    if self.left == 0 and self.truncated:
      log(f"{self.what}: {self.truncated} of {self.total} examples are longer than "
          f"max_seq_length={self.max_seq_length} tokens and were truncated")


class _UserFiles:
  """The split files of a user task's folder: ``<split>.<one of extensions>``."""

  extensions: tuple[str, ...]
  raw_data_dir: str

  def split_file(self, split: str, required: bool = True) -> str | None:
    return find_split(self.raw_data_dir, split, self.extensions, required)

  def source_files(self, split: str) -> list[str]:
    """The files ``split``'s features are made from (the cache key): task.json, the split's
    file, and the train and dev files that labels, tag ids or the target range come from."""
    files = [os.path.join(self.raw_data_dir, "task.json")]
    for name in dict.fromkeys([split, "train", "dev"]):
      path = self.split_file(name, required=False)
      if path:
        files.append(path)
    return files

  def get_test_splits(self) -> list[str]:
    return ["test"] if self.split_file("test", required=False) else []

  def definition(self) -> dict[str, Any]:
    """The built-in kind's definition with this task's task.json, labels / range resolved."""
    labels = self.label_values if self.kind == "classification" else None
    score_range = self.score_range if self.kind == "regression" else None
    return {**super().definition(), "task_json": spec_json(self.spec, labels, score_range)}


class _UserSentenceTask(_UserFiles):
  """Reading and prediction writing shared by user classification and regression tasks
  (mixed into the built-in ``SingleOutputTask`` subclasses)."""

  extensions = TABLE_EXTENSIONS
  spec: TaskSpec

  def __init__(self, name: str, spec: TaskSpec, raw_data_dir: str, tokenizer: Any,
               max_seq_length: int, task_id: int = 0, debug: bool = False,
               double_unordered: bool = True, labels_path: str | None = None):
    super().__init__(name, raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                     double_unordered)
    self.spec = spec
    self.labels_path = labels_path  # where labels / score range found in train are kept
    self._counter = _TruncationCounter()
    self._values: list[Any] | None = None

  def spec_or_train_values(self) -> list[Any]:
    """The labels (classification) or score range (regression): task.json's, else found in
    train once (``_values_from_train``) and kept at ``labels_path``."""
    if self._values is None:
      given = self._spec_values()
      self._values = (list(given) if given
                      else _stored(self.labels_path, self._values_from_train))
    return self._values

  def read_split(self, split: str) -> tuple[str, list[Record]]:
    """(file, rows) of one split; test rows need no label (it is ignored)."""
    path = self.split_file(split)
    s = self.spec
    columns = {"id": s.id, "text_a": s.text_a, "text_b": s.text_b, "label": s.label}
    optional = ("id", "label") if split == "test" else ("id",)
    records = read_records(path, columns, optional, s.header,
                           _DEBUG_MAX_ROWS if self.debug else None)
    if not records:
      raise data_error(path, f"split '{split}' of task '{self.name}' has no examples")
    return path, records

  def get_examples(self, split: str) -> list[InputExample]:
    path, records = self.read_split(split)
    examples = []
    for i, r in enumerate(records):
      label = (self.dummy_label() if split == "test"
               else self.check_label(r.values["label"], path, r.line))
      examples.append(InputExample(i, self.name, r.values["text_a"], r.values.get("text_b"),
                                   label, f"{path}:{r.line}"))
    if self.swap_copy(split):
      examples += [InputExample(len(records) + e.eid, self.name, e.text_b, e.text_a, e.label,
                                e.source) for e in examples]
    self._counter.start(self.name, split, len(examples), self.max_seq_length)
    return examples

  def swap_copy(self, split: str) -> bool:
    return self.spec.symmetric and self.double_unordered and split == "train"

  def note_length(self, n_tokens: int) -> None:
    self._counter.add(n_tokens > self.max_seq_length)

  def write_predictions(self, predictions: Any, stem: str) -> str:
    """Writes ``<stem>.{tsv,jsonl}`` (one trial's file) for the test split: its ids and
    texts and the predicted label / score. ``predictions``: the head's per-example outputs
    (dicts with ``eid`` and ``logits`` or ``predictions``), a list or a mapping by eid."""
    path, records = self.read_split("test")
    by_eid = user_predictions.outputs_by_eid(predictions)
    values = [self.prediction_value(by_eid[i]) if i in by_eid else None
              for i in range(len(records))]
    return user_predictions.write_table(self.spec, path, records, values, stem)


class UserClassificationTask(_UserSentenceTask, ClassificationTask):
  """Single texts or text pairs with one label each (the ``sst`` / ``mrpc`` code)."""

  def _spec_values(self) -> tuple[Any, ...] | None:
    return self.spec.labels

  @property
  def label_values(self) -> list[Any]:
    """The labels as written in the files / task.json, in label-id order."""
    return self.spec_or_train_values()

  @property
  def label_list(self) -> tuple[str, ...]:  # the built-in attribute, from the spec or train
    return tuple(label_key(v) for v in self.label_values)

  def _values_from_train(self) -> list[Any]:
    path, records = self.read_split("train")
    seen: dict[str, Any] = {}
    for r in records:
      value = r.values["label"]
      if not isinstance(value, (str, int, float, bool)) or value == "":
        raise data_error(path, f"label {json.dumps(value)} is not a label value", r.line)
      seen.setdefault(label_key(value), value)
    if len(seen) < 2:
      raise data_error(path, f"only {len(seen)} distinct label(s) in train; a classification "
                       "task needs 2 or more")
    return list(seen.values())

  def check_label(self, label: Any, path: str, line_num: int) -> str:
    return super().check_label(label_key(label), path, line_num)

  def metrics(self) -> tuple[str, ...]:
    if self.spec.metrics:
      if len(self.label_list) != 2 and {"precision", "recall", "f1"} & set(self.spec.metrics):
        raise data_error(self.spec.path, "precision / recall / f1 need exactly 2 labels (the "
                         "second is the positive one); use macro_f1")
      return self.spec.metrics
    return ("accuracy", "macro_f1") + (("mcc",) if len(self.label_list) == 2 else ())

  def get_scorer(self, split: str = "dev") -> scoring.ClassificationScorer:
    return scoring.ClassificationScorer(self.metrics())

  def prediction_value(self, outputs: dict) -> Any:
    return self.label_values[int(outputs["logits"].argmax())]


class UserRegressionTask(_UserSentenceTask, RegressionTask):
  """Single texts or text pairs with a real-valued score (the ``sts`` code)."""

  def _spec_values(self) -> tuple[float, float] | None:
    return self.spec.range

  @property
  def score_range(self) -> list[float]:
    return self.spec_or_train_values()

  @property
  def min_value(self) -> float:  # the built-in attributes, from the spec or train
    return self.score_range[0]

  @property
  def max_value(self) -> float:
    return self.score_range[1]

  def _values_from_train(self) -> list[float]:
    path, records = self.read_split("train")
    scores = [self._parse(r.values["label"], path, r.line) for r in records]
    low, high = min(scores), max(scores)
    if high <= 0 or low == high:
      raise data_error(path, f"train scores span [{low}, {high}]; set \"range\": [low, high] "
                       "in task.json (targets are (score - low) / high, high > 0)")
    return [low, high]

  @staticmethod
  def _parse(label: Any, path: str, line_num: int) -> float:
    if isinstance(label, bool):
      raise data_error(path, f"score {label!r} is not a number", line_num)
    try:
      return float(label)
    except (TypeError, ValueError):
      raise data_error(path, f"score {label!r} is not a number", line_num) from None

  def check_label(self, label: Any, path: str, line_num: int) -> float:
    if self.spec.range:  # a given range is checked, an inferred one is not
      return super().check_label(self._parse(label, path, line_num), path, line_num)
    return self._parse(label, path, line_num)

  def get_scorer(self, split: str = "dev") -> scoring.RegressionScorer:
    return scoring.RegressionScorer(self.spec.metrics or ("pearson", "spearman"))

  def prediction_value(self, outputs: dict) -> float:
    return round(float(outputs["predictions"]) * self.max_value + self.min_value, 6)


class UserTaggingTask(_UserFiles, TaggingTask):
  """Word tagging from CoNLL or JSONL files (the ``chunk`` code). Span tags (BIO, IOB2,
  IOBES) are trained as BIOES; the label mapping is the sorted tags of train and dev."""

  extensions = TAGGING_EXTENSIONS

  def __init__(self, name: str, spec: TaskSpec, raw_data_dir: str, tokenizer: Any,
               max_seq_length: int, task_id: int = 0, debug: bool = False,
               label_mapping_path: str | None = None):
    super().__init__(name, raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                     is_token_level=not spec.spans, label_mapping_path=label_mapping_path)
    self.spec = spec
    self._counter = _TruncationCounter()

  def label_splits(self) -> list[str]:
    return ["train", "dev"]

  def read_split(self, split: str) -> tuple[str, list[TaggedSentence]]:
    """(file, sentences); test tags are optional and ignored."""
    path = self.split_file(split)
    tagged = split != "test"
    limit = _DEBUG_MAX_ROWS if self.debug else None
    if path.endswith(".jsonl"):
      s = self.spec
      sentences = read_tagged_jsonl(path, str(s.text_a), str(s.label),
                                    None if s.id is None else str(s.id), tagged, limit)
    else:
      sentences = read_conll(path, tagged, limit)
    if not sentences:
      raise data_error(path, f"split '{split}' of task '{self.name}' has no sentences")
    if tagged and self.spec.spans:
      for s in sentences:
        bad = [t for t in s.tags if t != "O" and not t.startswith(_SPAN_PREFIXES)]
        if bad:
          raise data_error(path, f"tag {bad[0]!r} is not a span tag (O, B-x, I-x, E-x, S-x); "
                           "for one tag per word set \"spans\": false in task.json", s.line)
    return path, sentences

  def _sentences(self, split: str):  # the built-in reader's interface
    return self.read_split(split)

  def get_examples(self, split: str) -> list[TaggingExample]:
    if split != "test":
      examples = super().get_examples(split)
    else:
      dummy = self.label_mapping.get("O", 0)
      examples = [TaggingExample(i, self.name, s.words, [dummy] * len(s.words))
                  for i, s in enumerate(self.read_split(split)[1])]
    self._counter.start(self.name, split, len(examples), self.max_seq_length)
    return examples

  def featurize(self, example: TaggingExample, is_training: bool = False) -> list[dict]:
    features = super().featurize(example, is_training)
    n_tagged = int(sum(features[0][self.name + "_labels_mask"]))
    self._counter.add(n_tagged < len(example.words))
    return features

  def get_scorer(self, split: str = "dev") -> scoring.TaggingScorer:
    default = ("precision", "recall", "f1") if self.spec.spans else ("accuracy",)
    return scoring.TaggingScorer(self.label_mapping, self.spec.metrics or default)

  def write_predictions(self, predictions: Any, stem: str) -> str:
    """Writes ``<stem>.{tsv,jsonl}`` (one trial's file) for the test split: CoNLL-style
    ``word<TAB>tag`` lines (JSONL: tokens and tags) in the tag scheme of the train file;
    words past ``max_seq_length`` get ``O``. ``predictions`` as for the sentence tasks."""
    path, sentences = self.read_split("test")
    by_eid = user_predictions.outputs_by_eid(predictions)
    inverse = {i: t for t, i in self.label_mapping.items()}
    scheme = None
    if self.spec.spans:
      train_tags = (t for s in self.read_split("train")[1] for t in s.tags)
      scheme = "BIOES" if any(t.startswith(("E-", "S-")) for t in train_tags) else "BIO"
    tags = []
    for i, s in enumerate(sentences):
      out = by_eid.get(i)
      n = 0 if out is None else int(round(float(sum(out["labels_mask"]))))
      words_tags = [inverse[int(t)] for t in out["predictions"][:n]] if n else []
      tags.append(user_predictions.word_tags(words_tags, len(s.words), scheme))
    return user_predictions.write_tagged(self.spec, path, sentences, tags, stem)


def make_user_task(name: str, raw_data_dir: str, tokenizer: Any, max_seq_length: int,
                   task_id: int = 0, debug: bool = False, double_unordered: bool = True,
                   preprocessed_data_dir: str | None = None, spec: TaskSpec | None = None):
  """The task of ``<raw_data_dir>/task.json`` (or of ``spec``, e.g. a fine-tuned model's);
  inferred labels are stored in ``preprocessed_data_dir`` (``[debug_]<name>_labels.json`` /
  ``_label_mapping.json``)."""
  spec = spec or load_spec(raw_data_dir)
  prefix = os.path.join(preprocessed_data_dir, ("debug_" if debug else "") + name) \
      if preprocessed_data_dir else None
  if spec.type == "tagging":
    return UserTaggingTask(name, spec, raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                           prefix and prefix + "_label_mapping.json")
  cls = UserClassificationTask if spec.type == "classification" else UserRegressionTask
  return cls(name, spec, raw_data_dir, tokenizer, max_seq_length, task_id, debug,
             double_unordered, prefix and prefix + "_labels.json")
