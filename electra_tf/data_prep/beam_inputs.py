"""The corpora the Beam pipeline reads, as line blocks the example writer packs.

Every input kind gives, per unit of work (a file, or one job's share of a TFDS split), blocks of
``(lines, n_bytes, n_bad_bytes)`` as :func:`pretraining_examples.read_line_blocks` does for a
text file. A line of ``None`` ends a document whatever ``blanks_separate_docs`` says: a JSON
Lines record, a Parquet row and a TFDS example are each one document, split into lines on
"\\n" ("\\r" removed), so their text gives the same examples as a text file holding the same
documents separated by blank lines.

- ``text``: a folder or glob of files, a line per sentence, blank lines between documents.
- ``jsonl``: JSON Lines, plain or ``.gz``, the text in ``--text_field``.
- ``parquet``: the text in ``--text_column``, read one row group at a time (through Beam's
  filesystems, so any path Beam can open, ``gs://`` with ``apache-beam[gcp]``).
- ``tfds``: a prepared tensorflow-datasets folder ``<data_dir>/<name>/<version>``, read with
  ``tfds.builder_from_directory`` (never downloads).

Bad records (a malformed JSON line, a missing field, a null row) are counted in
:class:`BadRecords` and logged with their file and line or row group; with ``strict`` the first
one raises :class:`InputError`, one line.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from collections.abc import Iterator

import tensorflow as tf
from absl import logging

from electra_tf.data_prep.pretraining_examples import decode_utf8, read_line_blocks

KINDS = ("text", "jsonl", "parquet", "tfds")
_BATCH_DOCS = 4096  # documents a block holds at most
Block = tuple[list, int, int]  # (lines, n_bytes, n_bad_bytes); a None line ends a document


class InputError(ValueError):
  """A corpus problem, one line naming the file and its line or row group."""


@dataclasses.dataclass
class BadRecords:
  """Records skipped (malformed or without text) and documents read, for one job."""

  strict: bool = False
  count: int = 0
  documents: int = 0
  messages: list[str] = dataclasses.field(default_factory=list)  # the first 10

  def skip(self, where: str, what: str) -> None:
    if self.strict:
      raise InputError(f"{where}: {what} (--strict)")
    self.count += 1
    if self.count <= 10:
      self.messages.append(f"{where}: {what}; skipped")
      logging.warning("%s", self.messages[-1])


def list_files(pattern: str) -> list[str]:
  """Files of a folder (sorted names, sub-folders skipped, as the text builder) or a glob."""
  if tf.io.gfile.isdir(pattern):
    names = sorted(tf.io.gfile.listdir(pattern))
    paths = [os.path.join(pattern, n) for n in names]
    paths = [p for p in paths if not tf.io.gfile.isdir(p)]
  else:
    paths = sorted(p for p in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(p))
  if not paths:
    raise InputError(f"--input {pattern!r} matches no file")
  return paths


def _document_lines(text: str) -> list[str]:
  lines = text.replace("\r", "").split("\n")
  if lines[-1] == "":
    lines.pop()
  return lines


def _documents_as_blocks(docs: Iterator[tuple[str, int, int]]) -> Iterator[Block]:
  """Blocks of the documents' lines, a None line between two documents (the end of the unit
  ends the last one, as the end of a text file does)."""
  lines: list = []
  n_bytes = n_bad = n_docs = 0
  for text, size, bad in docs:
    if n_docs:
      lines.append(None)
    lines += _document_lines(text)
    n_bytes, n_bad, n_docs = n_bytes + size, n_bad + bad, n_docs + 1
    if n_docs % _BATCH_DOCS == 0:
      yield lines, n_bytes, n_bad
      lines, n_bytes, n_bad = [], 0, 0
  if lines or n_bytes:
    yield lines, n_bytes, n_bad


def _open(path: str):
  f = tf.io.gfile.GFile(path, "rb")
  return gzip.GzipFile(fileobj=f) if path.endswith(".gz") else f


def jsonl_documents(path: str, field: str, bad: BadRecords) -> Iterator[tuple[str, int, int]]:
  try:
    with _open(path) as f:
      for number, raw in enumerate(f, 1):
        if not raw.strip():
          continue
        line, n_bad = decode_utf8(raw)
        if n_bad:
          bad.skip(f"{path}:{number}", f"{n_bad} byte(s) are not UTF-8")
          continue
        try:
          record = json.loads(line)
        except json.JSONDecodeError as e:
          bad.skip(f"{path}:{number}", f"not JSON ({e.msg})")
          continue
        text = record.get(field) if isinstance(record, dict) else None
        if not isinstance(text, str):
          bad.skip(f"{path}:{number}", f"no text field {field!r}")
          continue
        bad.documents += 1
        yield text, len(raw), 0
  except (OSError, EOFError, gzip.BadGzipFile) as e:
    raise InputError(f"{path}: cannot be read ({e})") from None


def parquet_documents(path: str, column: str, bad: BadRecords) -> Iterator[tuple[str, int, int]]:
  import pyarrow.parquet as pq
  from apache_beam.io.filesystems import CompressionTypes, FileSystems

  with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
    try:
      table = pq.ParquetFile(f)
    except Exception as e:  # noqa: BLE001 -- pyarrow raises several kinds; one line each
      raise InputError(f"{path}: not a Parquet file ({str(e).splitlines()[0]})") from None
    names = table.schema_arrow.names
    if column not in names:
      raise InputError(f"{path}: no column {column!r} (columns: {', '.join(names)})")
    for group in range(table.num_row_groups):
      values = table.read_row_group(group, columns=[column]).column(0).to_pylist()
      for row, text in enumerate(values):
        if not isinstance(text, str):
          bad.skip(f"{path}: row group {group} row {row}", f"{column!r} is not text")
          continue
        bad.documents += 1
        yield text, len(text.encode("utf-8")), 0


def text_blocks(path: str, blanks_separate_docs: bool, bad: BadRecords) -> Iterator[Block]:
  previous_blank = True
  for lines, n_bytes, n_bad in read_line_blocks(path):
    for line in lines:
      blank = not line.strip()
      if previous_blank and not blank:
        bad.documents += 1
      previous_blank = blank if blanks_separate_docs else False
    yield lines, n_bytes, n_bad


def resolve_tfds(name: str, data_dir: str | None) -> str:
  """The prepared folder of ``name`` (``wikipedia/20230601.en``, ``:1.0.0`` optional) under
  ``data_dir`` (default ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``); InputError if none."""
  data_dir = data_dir or os.environ.get("TFDS_DATA_DIR") or os.path.expanduser(
      "~/tensorflow_datasets")
  name, _, version = name.partition(":")
  folder = os.path.join(data_dir, name)
  versions = [version] if version else sorted(
      (v for v in (tf.io.gfile.listdir(folder) if tf.io.gfile.isdir(folder) else [])),
      key=lambda v: [int(p) if p.isdigit() else -1 for p in v.strip("/").split(".")])
  for v in reversed(versions):
    path = os.path.join(folder, v.strip("/"))
    if tf.io.gfile.exists(os.path.join(path, "dataset_info.json")):
      return path
  raise InputError(f"tfds dataset {name}{':' + version if version else ''} is not prepared "
                   f"in {data_dir} (no {folder}/<version>/dataset_info.json); prepare it with "
                   f"`tfds build {name}` first (nothing is downloaded here)")


def tfds_documents(path: str, split: str, job: int, num_jobs: int, field: str,
                   bad: BadRecords) -> Iterator[tuple[str, int, int]]:
  import tensorflow_datasets as tfds

  builder = tfds.builder_from_directory(path)
  if split not in builder.info.splits:
    raise InputError(f"tfds dataset {path} has no split {split!r} "
                     f"(splits: {', '.join(builder.info.splits)})")
  part = tfds.even_splits(split, n=num_jobs)[job]
  for number, example in enumerate(builder.as_dataset(split=part).as_numpy_iterator()):
    value = example.get(field) if isinstance(example, dict) else None
    if not isinstance(value, bytes):
      bad.skip(f"{path} {part} example {number}", f"no text feature {field!r}")
      continue
    text, n_bad = decode_utf8(value)
    bad.documents += 1
    yield text, len(value), n_bad


def unit_blocks(kind: str, unit: str, bad: BadRecords, *, text_field: str = "text",
                blanks_separate_docs: bool = True, tfds_split: str = "train", job: int = 0,
                num_jobs: int = 1) -> Iterator[Block]:
  """Line blocks of one unit of work of input kind ``kind``."""
  if kind == "text":
    return text_blocks(unit, blanks_separate_docs, bad)
  if kind == "jsonl":
    return _documents_as_blocks(jsonl_documents(unit, text_field, bad))
  if kind == "parquet":
    return _documents_as_blocks(parquet_documents(unit, text_field, bad))
  if kind == "tfds":
    return _documents_as_blocks(
        tfds_documents(unit, tfds_split, job, num_jobs, text_field, bad))
  raise InputError(f"unknown input kind {kind!r} (one of {', '.join(KINDS)})")
