"""The rows ``predict`` reads and the predictions it writes; TensorFlow-free.

Input formats (by extension):

- ``.txt``: one row a line (blank lines skipped); a tab separates the two texts of a pair; a
  tagging task splits the line into words on whitespace. No labels.
- ``.csv`` / ``.tsv`` / ``.jsonl``: the columns a user task's ``task.json`` names (``text_a``,
  ``text_b``, ``label``, ``id``, TSV ``header``), else ``text_a`` / ``text_b`` / ``label`` /
  ``id``;
  the flags ``--text_a`` / ``--text_b`` / ``--label`` / ``--id`` override them (a name, or a
  0-based column number). The label and id columns are optional.
- tagging: ``.conll`` CoNLL files (``word ... tag`` lines, blank lines between sentences; a
  ``.txt`` whose first lines have 2 to 4 fields is read so too), or ``.jsonl`` with token and
  tag lists (``tokens`` / ``tags``, or task.json's). Tags are read when every word has one.

Output (by extension): ``.jsonl`` (one object a row: id, the texts or words, the prediction),
``.tsv`` / ``.csv`` (id, prediction, probability and one column per label; tags joined by
spaces).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from electra_tf import atomic_io
from electra_tf.finetuning.task_base import DataError
from electra_tf.finetuning.user.records import read_conll, read_records, read_tagged_jsonl

TABLES = (".csv", ".tsv", ".jsonl")
OUTPUTS = (".jsonl", ".tsv", ".csv")


@dataclasses.dataclass
class Row:
  """One input row: where it is (1-based line), its id, texts or words, and label if any."""

  line: int
  id: Any
  text_a: str | None = None
  text_b: str | None = None
  words: list[str] | None = None
  label: Any = None


def columns(definition: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
  """Column of each role: ``given`` (flags) over the task.json's over the defaults."""
  task_json = definition.get("task_json") or {}
  tagging = definition["kind"] == "tagging"
  out = {"text_a": "tokens" if tagging else "text_a", "text_b": None if tagging else "text_b",
         "label": "tags" if tagging else "label", "id": "id", "header": True}
  out.update({k: task_json[k] for k in out if k in task_json})
  out.update({k: v for k, v in given.items() if v is not None})
  for role in ("text_a", "text_b", "label", "id"):  # "3" on the command line is column 3
    if isinstance(out[role], str) and out[role].isdigit():
      out[role] = int(out[role])
  return out


def _read_text(path: str, tagging: bool) -> list[Row]:
  rows = []
  with open(path, encoding="utf-8-sig") as f:
    for line_num, line in enumerate(f, start=1):
      text = line.rstrip("\n").rstrip("\r")
      if not text.strip():
        continue
      if tagging:
        rows.append(Row(line_num, len(rows), words=text.split()))
      else:  # a tab separates the texts of a pair
        a, _, b = text.partition("\t")
        rows.append(Row(line_num, len(rows), text_a=a, text_b=b or None))
  return rows


def _read_tagged(path: str, cols: Mapping[str, Any]) -> list[Row]:
  """Sentences with their tags when every word has one, else without."""
  def read(tagged: bool):
    if path.endswith(".jsonl"):
      return read_tagged_jsonl(path, str(cols["text_a"]), str(cols["label"]),
                               None if cols["id"] is None else str(cols["id"]), tagged)
    return read_conll(path, tagged)
  try:
    sentences = read(True)
  except DataError:
    sentences = read(False)
  return [Row(s.line, s.id if s.id is not None else i, words=s.words, label=s.tags)
          for i, s in enumerate(sentences)]


def read_rows(path: str, definition: Mapping[str, Any], given: Mapping[str, Any]) -> list[Row]:
  """The rows of ``path`` for the task ``definition`` (see the module docstring); a bad file
  is a one-line error naming it (and the line)."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"input file not found: {path}")
  cols = columns(definition, given)
  kind, ext = definition["kind"], os.path.splitext(path)[1]
  if kind == "tagging" and (ext in (".conll", ".jsonl") or ext == ".txt" and _looks_conll(path)):
    rows = _read_tagged(path, cols)
  elif ext == ".txt":
    rows = _read_text(path, kind == "tagging")
  elif ext in TABLES:
    roles = {r: cols[r] for r in ("text_a", "text_b", "label", "id")}
    optional = ("id", "label", "text_b")
    records = read_records(path, roles, optional, cols["header"])
    rows = [Row(r.line, r.values.get("id") if r.values.get("id") is not None else i,
                text_a=r.values["text_a"], text_b=r.values.get("text_b") or None,
                label=r.values.get("label")) for i, r in enumerate(records)]
  else:
    raise ValueError(f"{path}: unknown input format {ext or '(none)'} (known: .txt, .csv, "
                     ".tsv, .jsonl; tagging also .conll)")
  if not rows:
    raise ValueError(f"{path}: no rows to predict")
  return rows


def _looks_conll(path: str) -> bool:
  """A .txt file of ``word ... tag`` lines (CoNLL: 2 to 4 fields each in its first 50 lines)
  rather than one sentence a line."""
  with open(path, encoding="utf-8-sig") as f:
    lines = [line.split() for line, _ in zip(f, range(50), strict=False) if line.strip()]
  return bool(lines) and all(2 <= len(fields) <= 4 for fields in lines)


def _table_row(row: Row, prediction: Mapping[str, Any]) -> dict[str, Any]:
  out: dict[str, Any] = {"id": row.id}
  if "label" in prediction:
    out.update(prediction=prediction["label"], probability=prediction["probability"])
    out.update({f"p({label})": p for label, p in prediction["probabilities"].items()})
  elif "score" in prediction:
    out["prediction"] = prediction["score"]
  else:
    out["prediction"] = " ".join(prediction["tags"])
  return out


def write_predictions(path: str, rows: Sequence[Row], predictions: Sequence[Mapping[str, Any]]
                      ) -> str:
  """One prediction per row into ``path`` (``.jsonl``, ``.tsv`` or ``.csv``), atomically."""
  ext = os.path.splitext(path)[1]
  if ext not in OUTPUTS:
    raise ValueError(f"--output {path}: unknown format {ext or '(none)'} (known: "
                     f"{', '.join(OUTPUTS)})")
  if ext == ".jsonl":
    lines = []
    for row, prediction in zip(rows, predictions, strict=True):
      texts = ({"words": row.words} if row.words is not None else
               {"text_a": row.text_a, **({"text_b": row.text_b} if row.text_b else {})})
      lines.append(json.dumps({"id": row.id, **texts, **prediction}, ensure_ascii=False))
    text = "\n".join(lines) + "\n"
  else:
    table = [_table_row(r, p) for r, p in zip(rows, predictions, strict=True)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, list(table[0]), delimiter="\t" if ext == ".tsv" else ",",
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    text = buffer.getvalue()
  atomic_io.write_text(path, text)
  return path
