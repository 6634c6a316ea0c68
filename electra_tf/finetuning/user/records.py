"""Readers for the files of a user task (see ``spec``): rows of CSV / TSV / JSONL tables,
sentences of CoNLL / JSONL tagging files. Every problem is a one-line ``DataError`` naming the
file and line.

The format is the file extension: ``.csv`` (header row, standard quoting), ``.tsv`` (header row
unless ``task.json`` says ``"header": false``; no quoting, as GLUE), ``.jsonl`` (one JSON object
a line); tagging also reads CoNLL ``.txt`` / ``.conll`` (``word ... tag`` a line, blank lines
between sentences, ``-DOCSTART-`` lines skipped).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

from electra_tf.finetuning.task_base import data_error
from electra_tf.finetuning.user.spec import Column

TABLE_EXTENSIONS = (".csv", ".tsv", ".jsonl")
TAGGING_EXTENSIONS = (".txt", ".conll", ".jsonl")


def find_split(raw_data_dir: str, split: str, extensions: tuple[str, ...],
               required: bool = True) -> str | None:
  """``<raw_data_dir>/<split><ext>`` for the one present extension (None if optional and none)."""
  found = [split + e for e in extensions if os.path.isfile(os.path.join(raw_data_dir, split + e))]
  if len(found) > 1:
    raise data_error(raw_data_dir, f"several files for split '{split}': {', '.join(found)}")
  if not found:
    if required:
      names = " or ".join(split + e for e in extensions)
      raise data_error(raw_data_dir, f"no {split} file ({names})")
    return None
  return os.path.join(raw_data_dir, found[0])


@dataclasses.dataclass
class Record:
  """One table row: ``values`` by role (``text_a``, ``text_b``, ``label``, ``id``)."""

  line: int  # 1-based line of the row (its last line for a multi-line CSV row)
  values: dict[str, Any]


def iter_json_lines(path: str) -> Iterator[tuple[int, dict]]:
  """(1-based line, object) of each non-blank line of a JSONL file, read as it goes; a line
  that is not a JSON object is a one-line DataError naming the file and the line."""
  with open(path, encoding="utf-8-sig") as f:
    for line_num, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise data_error(path, f"not valid JSON: {e.msg}", line_num) from None
      if not isinstance(row, dict):
        raise data_error(path, "expected a JSON object", line_num)
      yield line_num, row


def _read_json_lines(path: str, max_rows: int | None) -> list[tuple[int, dict]]:
  rows = []
  for line_num, row in iter_json_lines(path):
    if max_rows and len(rows) >= max_rows:
      break
    rows.append((line_num, row))
  return rows


def _read_delimited(path: str, max_rows: int | None) -> list[tuple[int, list[str]]]:
  rows = []
  tsv = path.endswith(".tsv")
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = (csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if tsv else csv.reader(f))
    try:
      for row in reader:
        if max_rows and len(rows) > max_rows:  # the header is one more
          break
        if row:  # a blank line is no row
          rows.append((reader.line_num, row))
    except csv.Error as e:
      raise data_error(path, f"bad CSV: {e}", reader.line_num) from None
  return rows


def _index(path: str, role: str, column: Column, header: list[str] | None, width: int,
           line: int) -> int:
  if isinstance(column, int):
    if column >= width:
      raise data_error(path, f"missing column {column} for {role} (the file has {width} "
                       "columns)", line)
    return column
  if header is None:
    raise data_error(path, f"{role} names column {column!r} but the file has no header "
                     "(use a 0-based column number)")
  if column not in header:
    raise data_error(path, f"missing column {column!r} for {role} (columns: "
                     f"{', '.join(header)})", line)
  return header.index(column)


def _check_text(path: str, role: str, value: Any, line: int) -> None:
  if role in ("text_a", "text_b") and not isinstance(value, str):
    raise data_error(path, f"{role} must be a string, got {json.dumps(value)}", line)


def read_records(path: str, columns: Mapping[str, Column | None], optional: tuple[str, ...] = (),
                 header: bool = True, max_rows: int | None = None) -> list[Record]:
  """Rows of a CSV / TSV / JSONL file as ``Record``s holding the ``columns`` roles.

  A role in ``optional`` whose column the file lacks is None (CSV / TSV: missing from the
  header; JSONL: missing from the row). ``header`` matters for TSV only (CSV always has one).
  """
  columns = {role: col for role, col in columns.items() if col is not None}
  records = []
  if path.endswith(".jsonl"):
    for line, row in _read_json_lines(path, max_rows):
      values = {}
      for role, col in columns.items():
        if col not in row:
          if role in optional:
            values[role] = None
            continue
          raise data_error(path, f"missing column {json.dumps(col)} for {role}", line)
        _check_text(path, role, row[col], line)
        values[role] = row[col]
      records.append(Record(line, values))
    return records
  rows = _read_delimited(path, max_rows)
  has_header = header or path.endswith(".csv")
  names = rows[0][1] if has_header and rows else None
  data = rows[1:] if has_header else rows
  if not data:
    return []
  width = len(names) if names is not None else len(data[0][1])
  first_line = rows[0][0]
  index = {}
  for role, col in columns.items():
    present = (col < width) if isinstance(col, int) else (names is not None and col in names)
    if not present and role in optional:
      continue
    index[role] = _index(path, role, col, names, width, first_line)
  kind = "tab" if path.endswith(".tsv") else "comma"
  for line, row in data:
    if len(row) != width:
      raise data_error(path, f"expected {width} {kind}-separated fields, found {len(row)}", line)
    records.append(Record(line, {role: row[index[role]] if role in index else None
                                 for role in columns}))
  return records


@dataclasses.dataclass
class TaggedSentence:
  """One sentence: its words, their tags (None when the file has none), first line, id."""

  words: list[str]
  tags: list[str] | None
  line: int
  id: Any = None


def iter_conll(path: str, require_tags: bool) -> Iterator[TaggedSentence]:
  """CoNLL sentences, read as they go: first field the word, last field the tag (official
  rules).

  Without ``require_tags`` (test files) a line may be a bare word; tags are then dropped.
  """
  words: list[str] = []
  tags: list[str] = []
  first_line = 0
  with open(path, encoding="utf-8-sig") as f:
    for line_num, line in enumerate(f, start=1):
      fields = line.strip().split()
      if not fields:
        if words:
          yield TaggedSentence(words, tags if require_tags else None, first_line)
          words, tags = [], []
        continue
      if fields[0] == "-DOCSTART-":
        continue
      if len(fields) < 2 and require_tags:
        raise data_error(path, f"no tag on this line (expected 'word ... tag'): "
                         f"{line.strip()!r}", line_num)
      if not words:
        first_line = line_num
      words.append(fields[0])
      tags.append(fields[-1])
  if words:
    yield TaggedSentence(words, tags if require_tags else None, first_line)


def read_conll(path: str, require_tags: bool, max_sentences: int | None = None
               ) -> list[TaggedSentence]:
  """The first ``max_sentences`` (all if None) sentences of ``iter_conll``."""
  return list(itertools.islice(iter_conll(path, require_tags), max_sentences or None))


def iter_tagged_jsonl(path: str, tokens_key: str, tags_key: str, id_key: str | None,
                      require_tags: bool) -> Iterator[TaggedSentence]:
  """``{"tokens": [...], "tags": [...]}`` lines (the keys as ``task.json`` names them), read
  as they go."""
  for line, row in iter_json_lines(path):
    words = row.get(tokens_key)
    if not isinstance(words, list) or not words or not all(
        isinstance(w, str) and w.strip() for w in words):
      raise data_error(path, f"{json.dumps(tokens_key)} must be a non-empty list of words",
                       line)
    tags = row.get(tags_key)
    if tags is None and not require_tags:
      pass
    elif not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
      raise data_error(path, f"{json.dumps(tags_key)} must be a list of tags, one per word",
                       line)
    elif len(tags) != len(words):
      raise data_error(path, f"{len(words)} words but {len(tags)} tags", line)
    yield TaggedSentence(list(words), list(tags) if require_tags else None, line,
                         row.get(id_key) if id_key else None)


def read_tagged_jsonl(path: str, tokens_key: str, tags_key: str, id_key: str | None,
                      require_tags: bool, max_sentences: int | None = None
                      ) -> list[TaggedSentence]:
  """The first ``max_sentences`` (all if None) sentences of ``iter_tagged_jsonl``."""
  return list(itertools.islice(
      iter_tagged_jsonl(path, tokens_key, tags_key, id_key, require_tags), max_sentences or None))
