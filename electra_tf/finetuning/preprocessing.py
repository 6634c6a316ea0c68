"""Featurised fine-tuning data: cached TFRecords per split (official ``Preprocessor``), keyed on
everything that produced them.

A cache ``<preprocessed_data_dir>/<tasks>_<split>.tfrecord`` is reused only while its key
(``<...>.key.json``) matches: the raw files the split is read from (size + content hash),
the vocab file's hash, ``max_seq_length``, the task list and order, the split, ``is_training``,
the training shuffle seed, the padding batch size, TFDS use and each task's featurisation
options (``doc_stride``, ``max_query_length``, ``double_unordered``, ...). Otherwise it is
rebuilt with one line naming what changed.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from electra_tf.config import FinetuningConfig
from electra_tf.console import log
from electra_tf.finetuning import features
from electra_tf.finetuning.builtin import tfds_glue
from electra_tf.finetuning.builtin.classification import SingleOutputTask
from electra_tf.finetuning.builtin.qa import QATask
from electra_tf.finetuning.task_base import DataError, Task

CACHE_FORMAT = 1  # bump when the record layout changes
# task attributes that change the features a task makes from the same examples
FEATURIZATION_ATTRIBUTES = ("debug", "max_query_length", "doc_stride", "v2",
                            "double_unordered", "is_token_level")


def source_paths(task: Any, split: str) -> list[str]:
  """The raw files ``split`` of ``task`` is read from: the task's own ``source_files(split)``
  when it has one; the split's file for GLUE-style and QA tasks; otherwise every file in the
  task's folder (a tagging task's label ids come from every split's tags). Missing files are
  left out: reading the split reports them."""
  if callable(getattr(task, "source_files", None)):
    return list(task.source_files(split))
  try:
    if isinstance(task, SingleOutputTask):
      return [task.split_path(task.file_split(split), ".tsv")]
    if isinstance(task, QATask):
      return [task.raw_path(split)]
  except DataError:
    return []
  folder = getattr(task, "raw_data_dir", None)
  if not folder or not os.path.isdir(folder):
    return []
  return [os.path.join(folder, name) for name in sorted(os.listdir(folder))
          if os.path.isfile(os.path.join(folder, name))]


def source_fingerprints(tasks: Sequence[Any], split: str) -> dict[str, dict[str, Any]]:
  """``<task>/<file>`` -> fingerprint of every raw file ``split`` of ``tasks`` is read from."""
  return {f"{task.name}/{os.path.basename(path)}": features.file_fingerprint(path)
          for task in tasks for path in source_paths(task, split) if os.path.isfile(path)}


def task_options(task: Any) -> dict[str, Any]:
  """A task's featurisation settings: the known attributes it has, plus its own
  ``cache_key()`` dict when it defines one (for task types with other settings)."""
  options = {k: getattr(task, k) for k in FEATURIZATION_ATTRIBUTES if hasattr(task, k)}
  options["type"] = type(task).__name__
  if callable(getattr(task, "cache_key", None)):
    options.update(task.cache_key())
  return options


class Preprocessor:
  """Featurises splits into cached TFRecords (official ``Preprocessor``) and reads them back.

  ``examples_fn(task, split)`` gives a split's examples (the task's own reader, or TFDS).
  A training file mixes every task's examples, shuffled; both kinds are padded with
  ``task_id = len(tasks)`` records up to a multiple of the batch size.

  Args:
    config: a ``FinetuningConfig`` (sizes, paths, ``use_tfrecords_if_existing``).
    tasks: the run's tasks in ``task_id`` order.
    examples_fn: ``(task, split) -> examples``.
    seed: shuffles the training examples (None: unseeded, as the official code).
    source: JSON-able description of where examples come from besides the raw files
      (e.g. ``{"use_tfds": True, "tfds_data_dir": ...}``), part of every cache key.
  """

  def __init__(self, config: FinetuningConfig, tasks: Sequence[Task],
               examples_fn: Callable[[Any, str], list], seed: int | None = None,
               source: dict[str, Any] | None = None):
    self.config = config
    self.tasks = list(tasks)
    self.examples_fn = examples_fn
    self.seed = seed
    self.source = dict(source or {})
    self.specs = features.all_feature_specs(tasks, config.max_seq_length)
    self._by_name = {t.name: t for t in tasks}
    self._vocab_fingerprint: dict[str, Any] | None = None

  def _feature_dicts(self, tasks: Sequence[Any], split: str, is_training: bool) -> Iterator:
    examples = [ex for task in tasks for ex in self.examples_fn(task, split)]
    if is_training:
      (random.Random(self.seed) if self.seed is not None else random).shuffle(examples)
    for i, example in enumerate(examples):
      for feature in self._by_name[example.task_name].featurize(example, is_training):
        if self.config.log_examples and i == 0:
          log(f"example features ({example.task_name} {split}): {feature}")
        yield feature

  def cache_key(self, tasks: Sequence[Any], split: str, is_training: bool) -> dict[str, Any]:
    """Everything the records of ``split`` of ``tasks`` are made from (see the module doc)."""
    c = self.config
    return {
        "format": CACHE_FORMAT,
        "split": split,
        "is_training": is_training,
        "task_names": [t.name for t in self.tasks],  # order = task ids; padding id = length
        "cached_tasks": [t.name for t in tasks],
        "max_seq_length": c.max_seq_length,
        "do_lower_case": c.do_lower_case,
        "vocab": self._vocab_key(),
        "seed": self.seed if is_training else None,
        "batch_size": c.train_batch_size if is_training else c.eval_batch_size,
        "source": self.source,
        "options": {t.name: task_options(t) for t in tasks},
        "files": source_fingerprints(tasks, split),
    }

  def _vocab_key(self) -> dict[str, Any]:
    if self._vocab_fingerprint is None:
      vocab = self.config.vocab_file
      self._vocab_fingerprint = features.file_fingerprint(vocab) if os.path.isfile(vocab) else {}
    return self._vocab_fingerprint

  def data_key(self) -> dict[str, Any]:
    """What every split of the run's tasks is made from (train, dev and test): the raw files,
    the vocabulary, the example source and each task's featurisation options; part of a
    fine-tuning trial's settings."""
    files: dict[str, Any] = {}
    for task in self.tasks:
      for split in ("train", *task.get_dev_splits(), *task.get_test_splits()):
        files.update(source_fingerprints([task], split))
    return {"files": files, "vocab": self._vocab_key(), "source": self.source,
            "options": {t.name: task_options(t) for t in self.tasks}}

  def prepare(self, tasks: Sequence[Any], split: str, is_training: bool) -> tuple[str, int]:
    """(TFRecord path, number of records incl. padding), featurising unless cached."""
    c = self.config
    batch_size = c.train_batch_size if is_training else c.eval_batch_size
    prefix = features.cache_prefix(c.preprocessed_data_dir, [t.name for t in tasks], split)
    log(f"Loading dataset {os.path.basename(prefix)}")
    return features.build_or_load_cached(
        prefix, lambda: self._feature_dicts(tasks, split, is_training), self.specs,
        pad_to_multiple_of=batch_size, padding_task_id=len(self.tasks),
        use_existing=c.use_tfrecords_if_existing,
        key=self.cache_key(tasks, split, is_training), log_fn=log)


def make_examples_fn(use_tfds: bool, tfds_data_dir: str | None) -> Callable[[Any, str], list]:
  """``(task, split) -> examples``: TFDS for GLUE tasks when ``use_tfds``, else the task's
  own reader of its raw files."""
  def examples_fn(task: Any, split: str) -> list:
    if use_tfds and task.name in tfds_glue.TFDS_GLUE:
      return tfds_glue.get_examples(task, split, tfds_data_dir)
    return task.get_examples(split)

  return examples_fn
