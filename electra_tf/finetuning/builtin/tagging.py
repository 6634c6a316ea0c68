"""Sequence tagging (CoNLL-2000 chunking), official ``tagging_tasks``.

Raw files: ``<raw_data_dir>/{train,dev,test}.txt``, one ``word ... tag`` line per word, blank
lines between sentences, ``-DOCSTART-`` lines ignored. Chunk tags are converted to BIOES; the
label mapping is the sorted set of BIOES tags over every split present (cached as JSON).
Each word is labelled at its first word piece; ``segment_ids`` is 1 for every real token.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from electra_tf import atomic_io
from electra_tf.console import log
from electra_tf.finetuning import scorers
from electra_tf.finetuning.features import FeatureSpec, read_cached_json
from electra_tf.finetuning.scorers import get_span_labels, get_tags
from electra_tf.finetuning.task_base import Task, data_error, scorer_fields
from electra_tf.finetuning.task_heads import TaggingHead
from electra_tf.finetuning.user.records import TaggedSentence
from electra_tf.finetuning.user.records import read_conll as read_tagged
from electra_tf.finetuning.wordpiece import word_features

LABEL_ENCODING = "BIOES"
_SPLITS = ("train", "dev", "test")
_DEBUG_MAX_SENTENCES = 100


@dataclasses.dataclass
class TaggingExample:
  """One sentence: words and per-word label ids."""

  eid: int
  task_name: str
  words: list[str]
  labels: list[int]


def read_conll(path: str, max_sentences: int | None = None) -> list[TaggedSentence]:
  """Sentences of a CoNLL file: first column is the word, last column the tag (the user tasks'
  reader). With ``max_sentences`` (debug) it stops once it has read more than that many: the
  first ``max_sentences + 1``."""
  return read_tagged(path, require_tags=True,
                     max_sentences=max_sentences + 1 if max_sentences else None)


def to_encoding(tags: Sequence[str], encoding: str = LABEL_ENCODING) -> list[str]:
  """Re-encodes span tags (e.g. CoNLL IOB2) in ``encoding``."""
  return get_tags(get_span_labels(list(tags)), len(tags), encoding)


class TaggingTask(Task):
  """Word-level tagging; ``is_token_level`` tasks keep tags as-is, span tasks use BIOES."""

  kind = "tagging"

  def __init__(self, name: str, raw_data_dir: str, tokenizer: Any, max_seq_length: int,
               task_id: int = 0, debug: bool = False, is_token_level: bool = False,
               label_mapping_path: str | None = None):
    super().__init__(name, raw_data_dir, tokenizer, max_seq_length, task_id, debug)
    self.is_token_level = is_token_level
    self.label_mapping_path = label_mapping_path
    self._label_mapping: dict[str, int] | None = None

  def _sentences(self, split: str) -> tuple[str, list[TaggedSentence]]:
    path = self.split_path(split, ".txt")
    sentences = read_conll(path, _DEBUG_MAX_SENTENCES if self.debug else None)
    if not sentences:
      raise data_error(path, f"split '{split}' of task '{self.name}' has no sentences")
    return path, sentences

  def _encode(self, tags: Sequence[str]) -> list[str]:
    return list(tags) if self.is_token_level else to_encoding(tags)

  def label_splits(self) -> list[str]:
    """Splits whose tags make up the label mapping: every present one (official)."""
    return [s for s in _SPLITS if os.path.isfile(os.path.join(self.raw_data_dir, s + ".txt"))]

  @property
  def label_mapping(self) -> dict[str, int]:
    """Tag -> id: sorted tags of all present splits, or the cached JSON when it exists."""
    if self._label_mapping is None:
      path = self.label_mapping_path
      stored = read_cached_json(path, log)  # None when missing, empty or short: rebuilt
      if isinstance(stored, dict):
        self._label_mapping = {k: int(v) for k, v in stored.items()}
      else:
        if not os.path.isdir(self.raw_data_dir):
          raise data_error(self.raw_data_dir, f"data folder for task '{self.name}' not found")
        tags = set()
        for split in self.label_splits():
          for sentence in self._sentences(split)[1]:
            tags.update(self._encode(sentence.tags))
        if not tags:
          raise data_error(self.raw_data_dir, f"no {'/'.join(_SPLITS)}.txt with tags found")
        self._label_mapping = {t: i for i, t in enumerate(sorted(tags))}
        if path:
          os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
          atomic_io.write_text(path, json.dumps(self._label_mapping, indent=0, sort_keys=True))
    return self._label_mapping

  def definition(self) -> dict[str, Any]:
    mapping = self.label_mapping
    return {**super().definition(), "labels": sorted(mapping, key=mapping.get),
            "spans": not self.is_token_level, **scorer_fields(self.get_scorer())}

  def use_definition(self, definition: dict[str, Any]) -> None:
    """The model's tag ids win over the data's (a changed data folder cannot renumber them)."""
    self._label_mapping = {tag: i for i, tag in enumerate(definition["labels"])}

  def get_examples(self, split: str) -> list[TaggingExample]:
    path, sentences = self._sentences(split)
    mapping = self.label_mapping
    examples = []
    for i, sentence in enumerate(sentences):
      tags = self._encode(sentence.tags)
      unknown = [t for t in tags if t not in mapping]
      if unknown:
        raise data_error(path, f"unknown tag {unknown[0]!r} in the sentence starting here",
                         sentence.line)
      examples.append(TaggingExample(i, self.name, sentence.words, [mapping[t] for t in tags]))
    return examples

  def featurize(self, example: TaggingExample, is_training: bool = False) -> list[dict[str, Any]]:
    features = word_features(self.tokenizer, example.words, self.max_seq_length)
    n, seq = self.name, self.max_seq_length
    return [{
        "input_ids": features["input_ids"],
        "input_mask": features["input_mask"],
        "segment_ids": features["segment_ids"],
        "task_id": self.task_id,
        n + "_eid": example.eid,
        n + "_labels": (example.labels[:seq] + [0] * seq)[:seq],
        n + "_labels_mask": [1.0] * features["n_words"] + [0.0] * (seq - features["n_words"]),
        n + "_labeled_positions": features["labeled_positions"],
    }]

  def feature_specs(self) -> list[FeatureSpec]:
    seq = (self.max_seq_length,)
    return [FeatureSpec(self.name + "_eid"), FeatureSpec(self.name + "_labels", seq),
            FeatureSpec(self.name + "_labels_mask", seq, is_int=False),
            FeatureSpec(self.name + "_labeled_positions", seq)]

  def make_head(self) -> TaggingHead:
    return TaggingHead(self.name, len(self.label_mapping))

  def get_scorer(self, split: str = "dev") -> scorers.Scorer:
    if self.is_token_level:
      return scorers.WordAccuracyScorer()
    return scorers.EntityLevelF1Scorer(self.label_mapping)


class Chunking(TaggingTask):
  """CoNLL-2000 text chunking (span F1 over BIOES chunks)."""

  def __init__(self, raw_data_dir, tokenizer, max_seq_length, task_id=0, debug=False,
               label_mapping_path=None):
    super().__init__("chunk", raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                     is_token_level=False, label_mapping_path=label_mapping_path)
