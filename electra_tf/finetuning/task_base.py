"""What every fine-tuning task provides (the official ``finetune/task.py`` contract).

A task reads its raw split files, turns examples into fixed-length feature dicts, declares
those features, builds its head and its scorer. Values come in as plain constructor
arguments (no config object): the raw data folder, tokenizer, sequence length, task id.
"""

from __future__ import annotations

import abc
import os
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the task interface itself needs no TensorFlow (read by on-device code)
  from electra_tf.finetuning.features import FeatureSpec


class DataError(ValueError):
  """Bad or missing fine-tuning data; the message names the file (and line when known)."""


def data_error(path: str, message: str, line: int | None = None) -> DataError:
  where = f"{path}:{line}" if line is not None else path
  return DataError(f"{where}: {message}")


def scorer_fields(scorer: Any) -> dict[str, Any]:
  """How a definition names a task's scorer: {"scorer": "scorers.AccuracyScorer"} (module and
  class), with "metrics" for a scorer of named metrics (``user.scoring``)."""
  cls = type(scorer)
  fields: dict[str, Any] = {"scorer": f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"}
  if getattr(scorer, "metrics", None):
    fields["metrics"] = list(scorer.metrics)
  return fields


def check_defined(task: str, what: str, stored: Any, own: Any) -> None:
  """One line when the model's stored ``what`` (labels, score range) is not the task's."""
  if stored != own:
    raise ValueError(f"task '{task}': the model was fine-tuned with {what} {stored} but the "
                     f"task has {own}")


def first_featurized(task: Any, split: str, limit: int | None) -> list[dict[str, Any]]:
  """The first feature dict of each of the first ``limit`` (None: all) examples of ``split``,
  featurized for evaluation: the rows a probe, a LiteRT check or a keras-hub check reads."""
  return [task.featurize(example, is_training=False)[0]
          for example in task.get_examples(split)[:limit]]


class Task(abc.ABC):
  """One fine-tuning task.

  Args:
    name: official task name (``rte``, ``squad``, ...); prefixes its feature names.
    raw_data_dir: folder with ``train``/``dev``/``test`` files (official:
      ``<data_dir>/finetuning_data/<name>``).
    tokenizer: object with the official ``FullTokenizer`` interface.
    max_seq_length: length of every sequence feature.
    task_id: index of this task in the run's task list (feature ``task_id``).
    debug: official ``debug`` mode (reads only the first few rows / ``-debug`` files).
  """

  # What the task predicts: "classification", "regression", "tagging" or "span_qa"; the
  # export signatures follow from it (``interop.signatures``).
  kind: ClassVar[str]

  def __init__(self, name: str, raw_data_dir: str, tokenizer: Any, max_seq_length: int,
               task_id: int = 0, debug: bool = False):
    if max_seq_length < 3:
      raise ValueError(f"max_seq_length must be >= 3, got {max_seq_length}")
    self.name, self.raw_data_dir, self.tokenizer = name, raw_data_dir, tokenizer
    self.max_seq_length, self.task_id, self.debug = max_seq_length, task_id, debug

  def split_path(self, split: str, extension: str) -> str:
    """Path of one split's raw file; a missing folder or file is a one-line error."""
    if not os.path.isdir(self.raw_data_dir):
      raise data_error(self.raw_data_dir, f"data folder for task '{self.name}' not found")
    path = os.path.join(self.raw_data_dir, split + extension)
    if not os.path.isfile(path):
      raise data_error(path, f"split '{split}' of task '{self.name}' not found")
    return path

  def get_dev_splits(self) -> list[str]:
    """Splits scored during evaluation (MNLI adds ``dev_mismatched``)."""
    return ["dev"]

  def get_test_splits(self) -> list[str]:
    return ["test"]

  @abc.abstractmethod
  def get_examples(self, split: str) -> list[Any]:
    """Examples of one split (``train``, ``dev``, ``test``, or a task-specific name)."""

  @abc.abstractmethod
  def featurize(self, example: Any, is_training: bool) -> list[dict[str, Any]]:
    """One example -> one or more feature dicts keyed by feature name."""

  @abc.abstractmethod
  def feature_specs(self) -> list[FeatureSpec]:
    """This task's own features (the shared ones are in ``features.shared_feature_specs``)."""

  @abc.abstractmethod
  def make_head(self, **kwargs: Any):
    """The task head layer: ``head(sequence_output, features, training) -> (outputs, loss)``."""

  @abc.abstractmethod
  def get_scorer(self, split: str = "dev"):
    """A fresh scorer for ``split``."""

  def definition(self) -> dict[str, Any]:
    """What defines this task's outputs, as JSON values (a fine-tuned model directory's
    ``tasks.json``): name, kind, the data folder it was trained on; subclasses add their
    labels / score range and scorer."""
    return {"name": self.name, "kind": self.kind, "data": os.path.abspath(self.raw_data_dir)}

  def use_definition(self, definition: dict[str, Any]) -> None:
    """Takes the labels (tag ids, score range) a model was trained with from its
    ``definition``; a contradiction with the task's own is a one-line ValueError."""
    return None  # span QA: nothing to take (its options are hparams)

  def __repr__(self) -> str:
    return f"Task({self.name})"


class BuiltInTask:
  """Mixin for a built-in task whose official name is the class attribute ``task_name``: its
  constructor is ``(raw_data_dir, tokenizer, max_seq_length, task_id=0, debug=False,
  **options)``, the options going to the task type's constructor."""

  task_name: ClassVar[str]

  def __init__(self, raw_data_dir: str, tokenizer: Any, max_seq_length: int, task_id: int = 0,
               debug: bool = False, **options: Any):
    super().__init__(self.task_name, raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                     **options)
