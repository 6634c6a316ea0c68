"""What every fine-tuning task provides (the official ``finetune/task.py`` contract).

A task reads its raw split files, turns examples into fixed-length feature dicts, declares
those features, builds its head and its scorer. Values come in as plain constructor
arguments (no config object): the raw data folder, tokenizer, sequence length, task id.
"""

from __future__ import annotations

import abc
import os
from typing import Any, ClassVar

from electra_tf.finetuning.features import FeatureSpec


class DataError(ValueError):
  """Bad or missing fine-tuning data; the message names the file (and line when known)."""


def data_error(path: str, message: str, line: int | None = None) -> DataError:
  where = f"{path}:{line}" if line is not None else path
  return DataError(f"{where}: {message}")


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
