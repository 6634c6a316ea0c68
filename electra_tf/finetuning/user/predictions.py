"""Test-set prediction files of user tasks, one per trial: ``<stem>.jsonl`` when the test file
is JSONL, else ``<stem>.tsv``; the stem names task, split and trial as the GLUE test outputs
do (``test_predictions/<name>_test_<trial>_predictions``).

Sentence tasks: one row per test row with its id (the ``id`` column, else the 0-based row
number), its text(s), and ``prediction`` (the label as written in the data, or the score).
Tagging: CoNLL style ``word<TAB>tag`` lines with a blank line after each sentence, or JSONL
rows with the id (when ``task.json`` names one), the tokens and the predicted tags.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from electra_tf import atomic_io
from electra_tf.finetuning.scorers import get_span_labels, get_tags
from electra_tf.finetuning.user.records import Record, TaggedSentence
from electra_tf.finetuning.user.spec import TaskSpec


def outputs_by_eid(predictions: Any) -> dict[int, Mapping[str, Any]]:
  """eid -> one example's head outputs, from a mapping by eid or an iterable of output dicts
  (each with ``eid``)."""
  items = predictions.values() if isinstance(predictions, Mapping) else predictions
  return {int(np.asarray(out["eid"]).item()): out for out in items}


def _write(path: str, text: str) -> str:
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  atomic_io.write_text(path, text)
  return path


def _name(column: Any, default: str) -> str:
  return column if isinstance(column, str) else default


def _json_value(value: Any) -> Any:
  return value.item() if isinstance(value, np.generic) else value


def _path(stem: str, test_path: str) -> str:
  return stem + (".jsonl" if test_path.endswith(".jsonl") else ".tsv")


def write_table(spec: TaskSpec, test_path: str, records: Sequence[Record],
                values: Sequence[Any], stem: str) -> str:
  """Writes one row per test record (``values``: its prediction, None if it has none)."""
  keys = [("id", _name(spec.id, "id")), ("text_a", _name(spec.text_a, "text_a"))]
  if spec.text_b is not None:
    keys.append(("text_b", _name(spec.text_b, "text_b")))
  rows = []
  for i, (record, value) in enumerate(zip(records, values, strict=True)):
    row = {name: record.values.get(role) for role, name in keys}
    if row[keys[0][1]] is None:  # no id column: the row number
      row[keys[0][1]] = i
    row["prediction"] = _json_value(value)
    rows.append(row)
  if test_path.endswith(".jsonl"):
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return _write(_path(stem, test_path), text)
  buffer = io.StringIO()
  writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
  writer.writerow([name for _, name in keys] + ["prediction"])
  writer.writerows([list(row.values()) for row in rows])
  return _write(_path(stem, test_path), buffer.getvalue())


def word_tags(predicted: Sequence[str], n_words: int, scheme: str | None) -> list[str]:
  """Tags of all ``n_words`` words from the predicted tags of the first ones (the rest ``O``).

  ``scheme`` ``BIO`` / ``BIOES``: spans are read with the official rules (as the scorer does)
  and written well-formed in that scheme; None: per-word tags, unchanged.
  """
  tags = list(predicted[:n_words]) + ["O"] * (n_words - len(predicted))
  if scheme is None:
    return tags
  return get_tags(get_span_labels(tags), n_words, scheme)


def write_tagged(spec: TaskSpec, test_path: str, sentences: Sequence[TaggedSentence],
                 tags: Sequence[Sequence[str]], stem: str) -> str:
  if test_path.endswith(".jsonl"):
    rows = []
    for s, t in zip(sentences, tags, strict=True):
      row = {} if spec.id is None else {str(spec.id): _json_value(s.id)}
      row.update({str(spec.text_a): s.words, str(spec.label): list(t)})
      rows.append(json.dumps(row, ensure_ascii=False) + "\n")
    return _write(_path(stem, test_path), "".join(rows))
  text = "".join("".join(f"{w}\t{tag}\n" for w, tag in zip(s.words, t, strict=True)) + "\n"
                 for s, t in zip(sentences, tags, strict=True))
  return _write(_path(stem, test_path), text)
