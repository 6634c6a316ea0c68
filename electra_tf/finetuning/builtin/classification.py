"""GLUE sentence(-pair) classification and regression tasks (official ``classification_tasks``).

Raw files are the GLUE TSVs (``<raw_data_dir>/<split>.tsv``, tab-separated, no quoting).
Featurisation is BERT's: ``[CLS] a [SEP] b [SEP]``, segment ids 0/1, pairs truncated by
popping from the longer side, zero padding to ``max_seq_length``.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Any, ClassVar

from electra_tf.finetuning import scorers
from electra_tf.finetuning.features import FeatureSpec
from electra_tf.finetuning.task_base import (
  BuiltInTask,
  Task,
  check_defined,
  data_error,
  scorer_fields,
)
from electra_tf.finetuning.task_heads import ClassificationHead, RegressionHead
from electra_tf.finetuning.wordpiece import sentence_features

_DEBUG_MAX_LINES = 100


@dataclasses.dataclass
class InputExample:
  """One sentence or sentence pair; ``label`` is a label string (or a score for regression)."""

  eid: int
  task_name: str
  text_a: str
  text_b: str | None = None
  label: Any = None
  source: str = ""  # "file:line", for error messages


@dataclasses.dataclass(frozen=True)
class _Layout:
  """Column indices for one split (negative counts from the end); ``label`` None = no label."""

  text_a: int
  text_b: int | None
  label: int | None
  header: bool


def read_tsv(path: str, max_lines: int | None = None) -> list[tuple[int, list[str]]]:
  """Rows of a GLUE TSV with their 1-based line numbers (no quote handling, as GLUE)."""
  rows = []
  with open(path, encoding="utf-8-sig", newline="") as f:  # MRPC files start with a BOM
    reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    for i, row in enumerate(reader):
      if max_lines and i >= max_lines:
        break
      rows.append((reader.line_num, row))
  return rows


class SingleOutputTask(Task):
  """A task with one prediction per example, read from GLUE-style TSVs.

  ``double_unordered``: training pairs also go in swapped (default: the class's
  ``pairs_unordered``, True for the symmetric MRPC and STS).
  """

  pairs_unordered: ClassVar[bool] = False
  # GLUE column layouts: of the labelled splits, and of the test splits (None: the same)
  train_layout: ClassVar[_Layout]
  test_layout: ClassVar[_Layout | None] = None

  def __init__(self, name: str, raw_data_dir: str, tokenizer: Any, max_seq_length: int,
               task_id: int = 0, debug: bool = False, double_unordered: bool | None = None):
    super().__init__(name, raw_data_dir, tokenizer, max_seq_length, task_id, debug)
    self.double_unordered = (self.pairs_unordered if double_unordered is None
                             else double_unordered)

  # --- reading -------------------------------------------------------------------------------
  def layout(self, split: str) -> _Layout:
    return self.test_layout if "test" in split and self.test_layout else self.train_layout

  def file_split(self, split: str) -> str:
    """The file stem holding ``split`` (MNLI maps ``dev`` to ``dev_matched``)."""
    return split

  def has_labels(self, split: str) -> bool:
    return "test" not in split and "diagnostic" not in split

  def swap_copy(self, split: str) -> bool:
    """Whether ``split`` also gets every pair again with the two texts swapped."""
    return self.double_unordered and split == "train"

  def get_examples(self, split: str) -> list[InputExample]:
    path = self.split_path(self.file_split(split), ".tsv")
    rows = read_tsv(path, _DEBUG_MAX_LINES if self.debug else None)
    layout = self.layout(split)
    examples = self._load_rows(path, rows, split, layout, eid_offset=0, swap=False)
    if self.swap_copy(split):
      examples += self._load_rows(path, rows, split, layout, len(examples), swap=True)
    return examples

  def _load_rows(self, path: str, rows: list[tuple[int, list[str]]], split: str,
                 layout: _Layout, eid_offset: int, swap: bool) -> list[InputExample]:
    if layout.header and rows:
      n_columns, data = len(rows[0][1]), rows[1:]
    else:
      n_columns, data = (len(rows[0][1]) if rows else 0), rows
    needed = [c for c in (layout.text_a, layout.text_b,
                          layout.label if self.has_labels(split) else None) if c is not None]
    min_columns = max([c + 1 if c >= 0 else -c for c in needed])
    if rows and n_columns < min_columns:
      raise data_error(path, f"expected at least {min_columns} tab-separated columns, "
                       f"found {n_columns}", rows[0][0])
    examples = []
    for i, (line_num, row) in enumerate(data):
      if len(row) != n_columns:
        raise data_error(path, f"expected {n_columns} tab-separated columns, found {len(row)}",
                         line_num)
      text_a = row[layout.text_a]
      text_b = None if layout.text_b is None else row[layout.text_b]
      label = row[layout.label] if self.has_labels(split) else self.dummy_label()
      label = self.check_label(label, path, line_num)
      if swap:
        text_a, text_b = text_b, text_a
      examples.append(InputExample(eid=i + eid_offset, task_name=self.name, text_a=text_a,
                                   text_b=text_b, label=label, source=f"{path}:{line_num}"))
    if not examples:
      raise data_error(path, f"split '{split}' of task '{self.name}' has no examples")
    return examples

  def dummy_label(self) -> Any:
    raise NotImplementedError

  def check_label(self, label: Any, path: str, line_num: int) -> Any:
    return label

  # --- features ------------------------------------------------------------------------------
  def featurize(self, example: InputExample, is_training: bool = False) -> list[dict[str, Any]]:
    features, n_tokens = sentence_features(self.tokenizer, example.text_a, example.text_b,
                                           self.max_seq_length)
    self.note_length(n_tokens)
    features.update({"task_id": self.task_id, self.name + "_eid": example.eid})
    features.update(self.label_features(example))
    return [features]

  def label_features(self, example: InputExample) -> dict[str, Any]:
    raise NotImplementedError

  def note_length(self, n_tokens: int) -> None:
    """Hook: the untruncated length (special tokens included) of each featurized example."""


class ClassificationTask(SingleOutputTask):
  """One categorical label per example; accuracy unless the task says otherwise."""

  kind = "classification"
  label_list: tuple[str, ...] = ("0", "1")
  scorer_class: ClassVar[type[scorers.Scorer]] = scorers.AccuracyScorer

  def definition(self) -> dict[str, Any]:
    return {**super().definition(), "labels": list(self.label_list),
            **scorer_fields(self.get_scorer())}

  def use_definition(self, definition: dict[str, Any]) -> None:
    check_defined(self.name, "labels", definition["labels"], list(self.label_list))

  def dummy_label(self) -> str:
    return self.label_list[0]

  def check_label(self, label: str, path: str, line_num: int) -> str:
    if label not in self.label_list:
      raise data_error(path, f"unknown label {label!r} for task '{self.name}' "
                       f"(known: {', '.join(self.label_list)})", line_num)
    return label

  def feature_specs(self) -> list[FeatureSpec]:
    return [FeatureSpec(self.name + "_eid"), FeatureSpec(self.name + "_label_ids")]

  def label_features(self, example: InputExample) -> dict[str, Any]:
    return {self.name + "_label_ids": self.label_list.index(example.label)}

  def make_head(self, dropout_rate: float = 0.1, seed: int | None = None) -> ClassificationHead:
    return ClassificationHead(self.name, len(self.label_list), dropout_rate, seed)

  def get_scorer(self, split: str = "dev") -> scorers.Scorer:
    return self.scorer_class()


class RegressionTask(SingleOutputTask):
  """A real-valued score in [min_value, max_value], target ``(score - min) / max`` (official)."""

  kind = "regression"
  min_value: float = 0.0
  max_value: float = 1.0

  def definition(self) -> dict[str, Any]:
    return {**super().definition(), "range": [self.min_value, self.max_value],
            **scorer_fields(self.get_scorer())}

  def use_definition(self, definition: dict[str, Any]) -> None:
    check_defined(self.name, "score range", definition["range"],
                  [self.min_value, self.max_value])

  def dummy_label(self) -> float:
    return 0.0

  def check_label(self, label: Any, path: str, line_num: int) -> float:
    try:
      value = float(label)
    except ValueError:
      raise data_error(path, f"score {label!r} is not a number", line_num) from None
    if not self.min_value <= value <= self.max_value:
      raise data_error(path, f"score {value} outside [{self.min_value}, {self.max_value}]",
                       line_num)
    return value

  def feature_specs(self) -> list[FeatureSpec]:
    return [FeatureSpec(self.name + "_eid"), FeatureSpec(self.name + "_targets", is_int=False)]

  def label_features(self, example: InputExample) -> dict[str, Any]:
    # Official normalisation divides by max_value (not max - min); identical for STS's [0, 5].
    return {self.name + "_targets": (float(example.label) - self.min_value) / self.max_value}

  def make_head(self, dropout_rate: float = 0.1, seed: int | None = None) -> RegressionHead:
    return RegressionHead(self.name, dropout_rate, seed)

  def get_scorer(self, split: str = "dev") -> scorers.Scorer:
    return scorers.RegressionScorer()


class CoLA(BuiltInTask, ClassificationTask):
  """Corpus of Linguistic Acceptability: train/dev have no header, sentence in column 3."""

  task_name = "cola"
  train_layout, test_layout = _Layout(3, None, 1, False), _Layout(1, None, None, True)
  scorer_class = scorers.MCCScorer


class SST(BuiltInTask, ClassificationTask):
  """Stanford Sentiment Treebank (SST-2)."""

  task_name = "sst"
  train_layout, test_layout = _Layout(0, None, 1, True), _Layout(1, None, None, True)


class MRPC(BuiltInTask, ClassificationTask):
  """Microsoft Research Paraphrase Corpus; ``double_unordered`` adds swapped training pairs."""

  task_name = "mrpc"
  pairs_unordered = True
  train_layout = _Layout(3, 4, 0, True)
  scorer_class = scorers.AccuracyF1Scorer


class QQP(BuiltInTask, ClassificationTask):
  """Quora Question Pairs."""

  task_name = "qqp"
  train_layout, test_layout = _Layout(3, 4, 5, True), _Layout(1, 2, None, True)
  scorer_class = scorers.AccuracyF1Scorer


class RTE(BuiltInTask, ClassificationTask):
  """Recognizing Textual Entailment."""

  task_name = "rte"
  label_list = ("entailment", "not_entailment")
  train_layout = _Layout(1, 2, 3, True)


class QNLI(BuiltInTask, ClassificationTask):
  """Question NLI (same layout and labels as RTE)."""

  task_name = "qnli"
  label_list = ("entailment", "not_entailment")
  train_layout = _Layout(1, 2, 3, True)


class WNLI(BuiltInTask, ClassificationTask):
  """Winograd NLI. Not in the official ELECTRA task list; GLUE layout index/s1/s2/label."""

  task_name = "wnli"
  train_layout = _Layout(1, 2, 3, True)


class MNLI(BuiltInTask, ClassificationTask):
  """Multi-NLI: ``dev`` is ``dev_matched``; also ``dev_mismatched``, test splits, diagnostic."""

  task_name = "mnli"
  label_list = ("contradiction", "entailment", "neutral")

  def file_split(self, split):
    return "dev_matched" if split == "dev" else split

  def layout(self, split):
    return _Layout(1, 2, None, True) if split == "diagnostic" else _Layout(8, 9, -1, True)

  def get_dev_splits(self) -> list[str]:
    """Matched dev (the official ``dev``) and mismatched dev when its file exists."""
    extra = ["dev_mismatched"] if os.path.isfile(
        os.path.join(self.raw_data_dir, "dev_mismatched.tsv")) else []
    return ["dev", *extra]

  def get_test_splits(self):
    # Official lists diagnostic unconditionally; here only when diagnostic.tsv is present.
    splits = ["test_matched", "test_mismatched"]
    if os.path.isfile(os.path.join(self.raw_data_dir, "diagnostic.tsv")):
      splits.append("diagnostic")
    return splits


class STS(BuiltInTask, RegressionTask):
  """Semantic Textual Similarity benchmark: score in [0, 5]; texts in the last columns."""

  task_name = "sts"
  min_value, max_value = 0.0, 5.0
  pairs_unordered = True
  train_layout, test_layout = _Layout(-3, -2, -1, True), _Layout(-2, -1, None, True)
