"""The rows ``predict`` reads, streamed and checked; TensorFlow-free.

Input formats (by extension):

- ``.txt``: one row a line (blank lines skipped); a tab separates the two texts of a pair; a
  tagging task splits the line into words on whitespace. No labels.
- ``.csv`` / ``.tsv`` / ``.jsonl``: the columns a user task's ``task.json`` names (``text_a``,
  ``text_b``, ``label``, ``id``, TSV ``header``), else ``text_a`` / ``text_b`` / ``label`` /
  ``id``; the flags ``--text_a`` / ``--text_b`` / ``--label`` / ``--id`` override them (a name,
  or a 0-based column number). The label and id columns are optional.
- tagging: ``.conll`` CoNLL files (``word ... tag`` lines, blank lines between sentences; a
  ``.txt`` whose first lines have 2 to 4 fields is read so too), or ``.jsonl`` with token and
  tag lists (``tokens`` / ``tags``, or task.json's). Tags are read when every word has one.

Every format is read a row (a sentence) at a time (``iter_rows``), so a file of any size takes
the memory of one batch. ``check_rows`` reads the file once before any model loads, keeping no
row (a CoNLL or tagged JSONL file with a word without a tag: up to that word, then again
without tags): a missing column, a blank or unknown label, or no row at all is a one-line
error naming the file and the line.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

from electra_tf.finetuning.task_base import DataError, data_error
from electra_tf.finetuning.user.records import (
  TaggedSentence,
  iter_conll,
  iter_json_lines,
  iter_tagged_jsonl,
)
from electra_tf.interop import task_outputs

TABLES = (".csv", ".tsv", ".jsonl")
ROLES = ("text_a", "text_b", "label", "id")


@dataclasses.dataclass
class Row:
  """One input row: where it is (1-based line), its id, texts or words, label if any ("" for
  a blank cell of a label column), and the input's own columns in their order (``fields``)."""

  line: int
  id: Any
  text_a: str | None = None
  text_b: str | None = None
  words: list[str] | None = None
  label: Any = None
  fields: dict[str, Any] = dataclasses.field(default_factory=dict)


def columns(definition: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
  """Column of each role: ``given`` (flags) over the task.json's over the defaults."""
  task_json = definition.get("task_json") or {}
  tagging = definition["kind"] == "tagging"
  out = {"text_a": "tokens" if tagging else "text_a", "text_b": None if tagging else "text_b",
         "label": "tags" if tagging else "label", "id": "id", "header": True}
  out.update({k: task_json[k] for k in out if k in task_json})
  out.update({k: v for k, v in given.items() if v is not None})
  for role in ROLES:  # "3" on the command line is column 3
    if isinstance(out[role], str) and out[role].isdigit():
      out[role] = int(out[role])
  return out


def _text_rows(path: str, tagging: bool) -> Iterator[Row]:
  with open(path, encoding="utf-8-sig") as f:
    for count, (line_num, line) in enumerate(
        (n, t) for n, t in enumerate(f, start=1) if t.strip()):
      text = line.rstrip("\n").rstrip("\r")
      if tagging:
        yield Row(line_num, count, words=text.split(), fields={"words": text.split()})
      else:  # a tab separates the texts of a pair
        a, _, b = text.partition("\t")
        fields = {"text_a": a, **({"text_b": b} if b else {})}
        yield Row(line_num, count, text_a=a, text_b=b or None, fields=fields)


def _sentences(path: str, cols: Mapping[str, Any], tagged: bool
               ) -> Iterator[TaggedSentence]:
  if path.endswith(".jsonl"):
    return iter_tagged_jsonl(path, str(cols["text_a"]), str(cols["label"]),
                             None if cols["id"] is None else str(cols["id"]), tagged)
  return iter_conll(path, tagged)


def _has_tags(path: str, cols: Mapping[str, Any]) -> bool:
  """Whether every word of a tagged file has a tag: the file read once, nothing kept."""
  try:
    for _ in _sentences(path, cols, True):
      pass
  except DataError:
    return False
  return True


def _tagged_rows(path: str, cols: Mapping[str, Any], tagged: bool | None) -> Iterator[Row]:
  """Sentences, read as they go, with their tags when every word of the file has one (``tagged``
  None: found by reading the file once first), else without."""
  if tagged is None:
    tagged = _has_tags(path, cols)
  for i, s in enumerate(_sentences(path, cols, tagged)):
    fields = {**({"id": s.id} if s.id is not None else {}), "words": s.words,
              **({"tags": s.tags} if s.tags is not None else {})}
    yield Row(s.line, s.id if s.id is not None else i, words=s.words, label=s.tags,
              fields=fields)


def _index(path: str, role: str, column: Any, names: list[str] | None, width: int,
           line: int, optional: bool) -> int | None:
  """The column number of a role (None: an optional role the file lacks)."""
  if isinstance(column, int):
    if column < width:
      return column
    if optional:
      return None
    raise data_error(path, f"missing column {column} for {role} (the file has {width} columns)",
                     line)
  if names is None:
    raise data_error(path, f"{role} names column {column!r} but the file has no header (use "
                     "a 0-based column number)", line)
  if column in names:
    return names.index(column)
  if optional:
    return None
  raise data_error(path, f"missing column {column!r} for {role} (columns: {', '.join(names)}; "
                   f"--{role} names another)", line)


def _delimited_rows(path: str, cols: Mapping[str, Any]) -> Iterator[Row]:
  tsv = path.endswith(".tsv")
  has_header = cols["header"] or not tsv
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if tsv else csv.reader(f)
    names, index, count, header_line = None, None, 0, None
    try:
      for row in reader:
        if not row:
          continue
        line = reader.line_num
        if has_header and names is None:
          names, header_line = row, line
          continue
        if index is None:
          width = len(names) if names is not None else len(row)
          names = names or [f"column_{i}" for i in range(width)]
          index = {r: _index(path, r, cols[r], names if has_header else None, width,
                             header_line or line, r != "text_a")
                   for r in ROLES if cols[r] is not None}
        if len(row) != len(names):
          kind = "tab" if tsv else "comma"
          raise data_error(path, f"expected {len(names)} {kind}-separated fields, found "
                           f"{len(row)}", line)
        value = {r: row[i] for r, i in index.items() if i is not None}
        yield Row(line, value.get("id") if value.get("id") is not None else count,
                  text_a=value["text_a"], text_b=value.get("text_b") or None,
                  label=value.get("label"), fields=dict(zip(names, row, strict=True)))
        count += 1
    except csv.Error as e:
      raise data_error(path, f"bad CSV: {e}", reader.line_num) from None


def _json_rows(path: str, cols: Mapping[str, Any]) -> Iterator[Row]:
  keys = {r: cols[r] for r in ROLES if cols[r] is not None}
  count = 0
  for line, row in iter_json_lines(path):
    if keys["text_a"] not in row:
      raise data_error(path, f"missing column {json.dumps(keys['text_a'])} for text_a "
                       f"(keys: {', '.join(row)}; --text_a names another)", line)
    for role in ("text_a", "text_b"):
      if role in keys and row.get(keys[role]) is not None and not isinstance(
          row[keys[role]], str):
        raise data_error(path, f"{role} must be a string, got "
                         f"{json.dumps(row[keys[role]])}", line)
    label = None  # no label key: an unlabelled row; a null or "" label: a blank one
    if keys.get("label") in row:
      label = "" if row[keys["label"]] is None else row[keys["label"]]
    yield Row(line, row.get(keys["id"], count) if "id" in keys else count,
              text_a=row[keys["text_a"]], text_b=row.get(keys.get("text_b")) or None,
              label=label, fields=row)
    count += 1


def check_input(path: str) -> None:
  """A one-line error for an input that is not there or of no known format."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"input file not found: {path}")
  ext = os.path.splitext(path)[1]
  if ext not in (".txt", ".conll", *TABLES):
    raise ValueError(f"{path}: unknown input format {ext or '(none)'} (known: .txt, .csv, "
                     ".tsv, .jsonl; tagging also .conll)")


def _is_tagged_file(path: str, definition: Mapping[str, Any]) -> bool:
  """A file of sentences (CoNLL or tagged JSONL) rather than of texts."""
  ext = os.path.splitext(path)[1]
  return definition["kind"] == "tagging" and (
      ext in (".conll", ".jsonl") or ext == ".txt" and _looks_conll(path))


def iter_rows(path: str, definition: Mapping[str, Any], given: Mapping[str, Any],
              tagged: bool | None = None) -> Iterator[Row]:
  """The rows of ``path`` for the task ``definition`` (see the module docstring), read one at
  a time; a bad file or row is a one-line error naming it (and the line). ``tagged``: whether
  a CoNLL or tagged JSONL file's tags are read (``check_rows`` found it; None: the file is read
  once first to find it)."""
  check_input(path)
  cols = columns(definition, given)
  kind, ext = definition["kind"], os.path.splitext(path)[1]
  if _is_tagged_file(path, definition):
    return _tagged_rows(path, cols, tagged)
  if ext == ".txt":
    return _text_rows(path, kind == "tagging")
  if ext == ".jsonl":
    return _json_rows(path, cols)
  if ext in TABLES:
    return _delimited_rows(path, cols)
  raise ValueError(f"{path}: unknown input format {ext or '(none)'} (known: .txt, .csv, .tsv, "
                   ".jsonl; tagging also .conll)")


def read_rows(path: str, definition: Mapping[str, Any], given: Mapping[str, Any]) -> list[Row]:
  """All the rows of ``path`` (``iter_rows``); none is a one-line error."""
  rows = list(iter_rows(path, definition, given))
  if not rows:
    raise ValueError(f"{path}: no rows to predict")
  return rows


def check_label(path: str, definition: Mapping[str, Any], row: Row) -> Any:
  """The row's label as the scorer wants it (``task_outputs.gold_ids``); a blank or unknown
  one is a one-line ValueError naming the file and line."""
  if row.label is None or isinstance(row.label, str) and not row.label.strip():
    raise ValueError(f"{path}:{row.line}: blank label (every row of a labelled file needs "
                     "one; leave the column out, or --label names another, to predict "
                     "without scoring)")
  try:
    return task_outputs.gold_ids(definition, row.label)
  except (ValueError, TypeError) as e:
    why = f"label {row.label!r} is not a number" if definition["kind"] == "regression" else e
    raise ValueError(f"{path}:{row.line}: {why}") from None


@dataclasses.dataclass
class RowCheck:
  """What ``check_rows`` found: rows (up to ``max_rows``), labelled rows, the first row."""

  rows: int
  labelled: int
  first: Row
  fields: list[str]  # the input's columns: every row's, in first-seen order
  tagged: bool | None = None  # a CoNLL or tagged JSONL file: its tags read (iter_rows)


def _check(path: str, definition: Mapping[str, Any], given: Mapping[str, Any],
           max_rows: int | None, tagged: bool | None) -> RowCheck:
  rows = labelled = 0
  first = None
  fields: dict[str, None] = {}
  for row in itertools.islice(iter_rows(path, definition, given, tagged), max_rows or None):
    first = first or row
    fields.update(dict.fromkeys(row.fields))
    if row.label is not None:
      check_label(path, definition, row)
      labelled += 1
    rows += 1
  if first is None:
    raise ValueError(f"{path}: no rows to predict")
  return RowCheck(rows, labelled, first, list(fields), tagged)


def check_rows(path: str, definition: Mapping[str, Any], given: Mapping[str, Any],
               max_rows: int | None = None) -> RowCheck:
  """Reads ``path`` once (the first ``max_rows``), keeping no row, and checks every row before
  any model loads: columns, texts and labels (a labelled file's labels all known to the
  model). A CoNLL or tagged JSONL file is read with its tags; from its first word without one
  on (among the rows read), read again without them (``RowCheck.tagged``)."""
  if not _is_tagged_file(path, definition):
    return _check(path, definition, given, max_rows, None)
  try:
    return _check(path, definition, given, max_rows, True)
  except DataError:  # a word without a tag: the file's tags are not read (an error in the
    return _check(path, definition, given, max_rows, False)  # words is raised again here)


def _looks_conll(path: str) -> bool:
  """A .txt file of ``word ... tag`` lines (CoNLL: 2 to 4 fields each in its first 50 lines)
  rather than one sentence a line."""
  with open(path, encoding="utf-8-sig") as f:
    lines = [line.split() for line, _ in zip(f, range(50), strict=False) if line.strip()]
  return bool(lines) and all(2 <= len(fields) <= 4 for fields in lines)
