"""Pre-training example writing: text files -> packed A/B segments -> TFRecord shards.

The library behind ``build_pretraining_dataset.py`` and
``build_openwebtext_pretraining_dataset.py``: reading text as the official line loop sees it
(:func:`read_line_blocks`), packing tokenized lines by the official rules
(:class:`ExampleBuilder`), wire-format encoding in the schema of
``electra_tf/pretraining/schema.py`` (:class:`ExampleEncoder`) and round-robin shard writing
with atomic, fsynced renames (:class:`ShardWriter`), driven file by file, in large tokenizer
batches, by :class:`ExampleWriter`.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import tensorflow as tf
from absl import logging

from electra_tf import atomic_io, tokenization
from electra_tf.pretraining import schema

SHARD_FORMAT = "pretrain_data.tfrecord-{}-of-{}"
SHARD_GLOB = "pretrain_data.tfrecord-*-of-*"
TMP_SHARD_GLOB = ".pretrain_data.tfrecord-*-of-*.tmp"
_READ_BLOCK_BYTES = 1 << 24


class Segments(NamedTuple):
  """Token ids of one example's two segments (second may be empty), without [CLS]/[SEP]."""

  first: list[int]
  second: list[int]


class ExampleBuilder:
  """Packs tokenized lines into A/B segments exactly like the official ``ExampleBuilder``.

  Random draws come from `rng` and happen only in `_create_example`, in the official order, so
  `random.Random(S)` reproduces the official code after `random.seed(S)`.
  """

  def __init__(self, max_length: int, rng: random.Random):
    self._max_length = max_length
    self._rng = rng
    self._current_sentences: list[list[int]] = []
    self._current_length = 0
    self._target_length = max_length

  def add_line(self, token_ids: list[int] | None) -> Segments | None:
    """Adds one line's token ids (None: a blank line); returns an example when one is full."""
    if token_ids is None:
      if self._current_length != 0:  # a blank line ends the document
        return self._create_example()
      token_ids = []  # the official code tokenizes "" and keeps the empty sentence
    self._current_sentences.append(token_ids)
    self._current_length += len(token_ids)
    if self._current_length >= self._target_length:
      return self._create_example()
    return None

  def _create_example(self) -> Segments:
    rng = self._rng
    if rng.random() < 0.1:  # one segment, as in single-sentence classification
      first_target = 100000
    else:  # -3: room for [CLS] and two [SEP]
      first_target = (self._target_length - 3) // 2

    first: list[int] = []
    second: list[int] = []
    for sentence in self._current_sentences:
      # Keep this condition's short-circuit order: it decides when rng.random() is drawn.
      if (not first or len(first) + len(sentence) < first_target
          or (not second and len(first) < first_target and rng.random() < 0.5)):
        first += sentence
      else:
        second += sentence

    first = first[:self._max_length - 2]
    second = second[:max(0, self._max_length - len(first) - 3)]

    self._current_sentences = []
    self._current_length = 0
    if rng.random() < 0.05:  # sometimes aim the next example at a random, shorter length
      self._target_length = rng.randint(5, self._max_length)
    else:
      self._target_length = self._max_length
    return Segments(first, second)


class ExampleEncoder:
  """Serializes segments as pre-training `tf.train.Example` bytes
  (``electra_tf.pretraining.schema``): [CLS] a [SEP] b [SEP] padded to `max_length`.

  Uses the schema's wire-format encoder (no protobuf objects), the builder's largest cost
  after tokenization otherwise.
  """

  def __init__(self, max_length: int, cls_id: int, sep_id: int, vocab_size: int):
    self._max_length = max_length
    self._wire = schema.PackedExampleEncoder(max_length, vocab_size)
    self._varints = self._wire.varints
    self._cls = self._varints[cls_id]
    self._sep = self._varints[sep_id]

  def encode(self, segments: Segments) -> bytes:
    first, second = segments
    v = self._varints
    input_ids = self._cls + b"".join(map(v.__getitem__, first)) + self._sep
    n = len(first) + 2
    segment_ids = b"\x00" * n
    if second:
      input_ids += b"".join(map(v.__getitem__, second)) + self._sep
      segment_ids += b"\x01" * (len(second) + 1)
      n += len(second) + 1
    pad = b"\x00" * (self._max_length - n)
    # input_mask and segment_ids hold 0/1, one byte each.
    return self._wire.example((input_ids + pad, b"\x01" * n + pad, segment_ids + pad))


class ShardWriter:
  """Writes records round-robin over one job's shards (shard i belongs to job i % num_jobs).

  Each shard is written as a hidden ``.<name>.tmp`` and renamed on `close`, so an interrupted
  run never leaves a file that matches ``pretrain_data.tfrecord*`` and looks complete.
  """

  def __init__(self, output_dir: str, job_id: int, num_jobs: int, num_out_files: int):
    names = [SHARD_FORMAT.format(i, num_out_files) for i in range(num_out_files)
             if i % num_jobs == job_id]
    if not names:
      raise ValueError(f"job {job_id} has no output shard: num_out_files ({num_out_files}) "
                       f"must be >= num_processes ({num_jobs})")
    self._final = [os.path.join(output_dir, n) for n in names]
    self._tmp = [os.path.join(output_dir, f".{n}.tmp") for n in names]
    self._writers = [tf.io.TFRecordWriter(p) for p in self._tmp]
    self.n_written = 0

  def write(self, record: bytes) -> None:
    self._writers[self.n_written % len(self._writers)].write(record)
    self.n_written += 1

  def close(self) -> None:
    for w in self._writers:
      w.close()
    for tmp, final in zip(self._tmp, self._final, strict=True):
      atomic_io.fsync_file(tmp)  # the content on disk before the name says "finished"
      tf.io.gfile.rename(tmp, final, overwrite=True)
    if self._final:
      atomic_io.fsync_dir(os.path.dirname(self._final[0]))

  def abort(self) -> None:
    """Closes and deletes the unfinished shards."""
    for w, tmp in zip(self._writers, self._tmp, strict=True):
      w.close()
      if tf.io.gfile.exists(tmp):
        tf.io.gfile.remove(tmp)


def decode_utf8(data: bytes) -> tuple[str, int]:
  """Decodes UTF-8, turning undecodable bytes into U+FFFD; returns (text, n_bad_bytes).

  The text equals ``data.decode("utf-8", "replace")``.
  """
  try:
    return data.decode("utf-8"), 0
  except UnicodeDecodeError:
    pass
  parts, n_bad = [], 0
  while True:
    try:
      parts.append(data.decode("utf-8"))
      return "".join(parts), n_bad
    except UnicodeDecodeError as e:
      parts.append(data[:e.start].decode("utf-8"))
      parts.append("\ufffd")
      n_bad += e.end - e.start
      data = data[e.end:]


def read_line_blocks(path: str) -> Iterator[tuple[list[str], int, int]]:
  """Yields (lines, n_bytes, n_bad_bytes) for consecutive blocks of a text file.

  Lines are what the official ``for line in tf.io.gfile.GFile(path)`` loop sees: split on
  "\\n" only, every "\\r" removed, no empty line after a final newline. Blocks end on a
  newline, so no UTF-8 sequence is cut.
  """
  with tf.io.gfile.GFile(path, "rb") as f:
    tail = b""
    while True:
      block = f.read(_READ_BLOCK_BYTES)
      if not block:
        break
      data = tail + block
      cut = data.rfind(b"\n") + 1
      data, tail = data[:cut], data[cut:]
      if data:
        yield _split_lines(data)
    if tail:
      yield _split_lines(tail)


def _split_lines(data: bytes) -> tuple[list[str], int, int]:
  text, n_bad = decode_utf8(data.replace(b"\r", b""))
  lines = text.split("\n")
  if lines[-1] == "":
    lines.pop()
  return lines, len(data), n_bad


class _EndOfFile(NamedTuple):
  path: str
  n_bytes: int


_TEXT_LINE = object()  # buffered-line markers (the text itself is kept apart, for the tokenizer)
_BLANK_LINE = object()


@dataclasses.dataclass
class JobStats:
  """Counts one job reports back."""

  job_id: int
  files: int = 0
  examples: int = 0
  tokens: int = 0
  bytes: int = 0
  bad_bytes: int = 0
  empty_files: int = 0
  skipped_archives: int = 0
  seconds: float = 0.0


class ExampleWriter:
  """Tokenizes files in large batches and writes their examples to this job's shards.

  Lines of consecutive files are buffered until `chunk_lines` non-blank lines are pending, then
  tokenized in one call; the builder consumes the id lists in the original order, with the end
  of every file acting as a blank line (the builder state carries over between files, as in
  the official code).
  """

  def __init__(self, job_id: int, vocab_file: str, output_dir: str, max_seq_length: int,
               num_jobs: int, blanks_separate_docs: bool, do_lower_case: bool,
               num_out_files: int = 1000, strip_accents: bool = True,
               rng: random.Random | None = None, chunk_lines: int = 16384, tokenizer: Any = None):
    self._job_id = job_id
    self._blanks_separate_docs = blanks_separate_docs
    self._chunk_lines = chunk_lines
    self._tokenizer = tokenizer or tokenization.FastTokenizer(
      vocab_file, do_lower_case=do_lower_case, strip_accents=strip_accents)
    vocab = self._tokenizer.vocab
    self.rng = rng if rng is not None else random.Random()
    self._builder = ExampleBuilder(max_seq_length, self.rng)
    self._encoder = ExampleEncoder(max_seq_length, vocab["[CLS]"], vocab["[SEP]"],
                                   max(vocab.values()) + 1)
    self._shards = ShardWriter(output_dir, job_id, num_jobs, num_out_files)
    self.stats = JobStats(job_id)
    self._items: list[Any] = []  # _TEXT_LINE, _BLANK_LINE or _EndOfFile, in file order
    self._texts: list[str] = []  # the stripped non-blank lines, in order

  @property
  def n_written(self) -> int:
    return self._shards.n_written

  def write_files(self, paths: Sequence[str], label: str = "", log_every_s: float = 10.0,
                  read_blocks: Callable[[str], Iterator[tuple[list, int, int]]] | None = None,
                  ) -> None:
    """Writes the examples of `paths`, in order, logging progress every `log_every_s`.

    `read_blocks(path)` gives a path's line blocks (default :func:`read_line_blocks`); a None
    line ends a document whatever `blanks_separate_docs` says (a record of another format).
    """
    if read_blocks is None:
      read_blocks = read_line_blocks
      total_bytes = sum(tf.io.gfile.stat(p).length for p in paths)
    else:
      total_bytes = 0
    progress = _Progress(self, len(paths), total_bytes, label, log_every_s)
    for path in paths:
      n_bytes = n_bad = 0
      for lines, block_bytes, block_bad in read_blocks(path):
        n_bytes += block_bytes
        n_bad += block_bad
        self._buffer_lines(lines)
        if len(self._texts) >= self._chunk_lines:
          self._flush(progress)
      if n_bad:
        logging.warning("Job %d: %s: %d byte(s) are not UTF-8; replaced by U+FFFD, which the "
                        "tokenizer drops", self._job_id, path, n_bad)
        self.stats.bad_bytes += n_bad
      if n_bytes == 0:
        logging.warning("Job %d: %s is empty", self._job_id, path)
        self.stats.empty_files += 1
      self._items.append(_EndOfFile(path, n_bytes))
    self._flush(progress)
    progress.log(final=True)

  def _buffer_lines(self, lines: list[str | None]) -> None:
    items, texts = self._items, self._texts
    for line in lines:
      if line is None:  # a document's end (another format's record)
        items.append(_BLANK_LINE)
        continue
      line = line.strip()
      if line:
        items.append(_TEXT_LINE)
        texts.append(line)
      elif self._blanks_separate_docs:
        items.append(_BLANK_LINE)

  def _flush(self, progress: _Progress) -> None:
    """Tokenizes the buffered lines in one call, then packs and writes them in order."""
    ids = iter(self._tokenizer.tokenize_to_ids(self._texts) if self._texts else ())
    builder, encoder, shards, stats = self._builder, self._encoder, self._shards, self.stats
    for item in self._items:
      if item is _TEXT_LINE:
        token_ids = next(ids)
        stats.tokens += len(token_ids)
        segments = builder.add_line(token_ids)
      else:
        segments = builder.add_line(None)
        if item is not _BLANK_LINE:
          stats.files += 1
          stats.bytes += item.n_bytes
      if segments is not None:
        shards.write(encoder.encode(segments))
    stats.examples = shards.n_written
    self._items, self._texts = [], []
    progress.log()

  def finish(self) -> JobStats:
    self._shards.close()
    return self.stats

  def abort(self) -> None:
    self._shards.abort()


class _Progress:
  """Logs files done, examples written, tokens/s and ETA (by bytes) for one job."""

  def __init__(self, writer: ExampleWriter, n_files: int, total_bytes: int, label: str,
               every_s: float):
    self._w = writer
    self._n_files = n_files
    self._total = total_bytes
    self._label = f"{label} " if label else ""
    self._every_s = every_s
    s = writer.stats
    self._start = (time.time(), s.files, s.bytes, s.tokens)
    self._last = self._start[0]

  def log(self, final: bool = False) -> None:
    now = time.time()
    if not final and now - self._last < self._every_s:
      return
    self._last = now
    t0, files0, bytes0, tokens0 = self._start
    s = self._w.stats
    elapsed = max(now - t0, 1e-9)
    done_bytes = s.bytes - bytes0
    eta = elapsed * (self._total - done_bytes) / done_bytes if done_bytes else float("nan")
    logging.info("Job %d: %s%d/%d files (%.1f%%), %d examples written, %.0f tokens/s, "
                 "elapsed %.0fs, ETA %.0fs", s.job_id, self._label, s.files - files0,
                 self._n_files, 100.0 * done_bytes / max(self._total, 1), s.examples,
                 (s.tokens - tokens0) / elapsed, elapsed, eta)
