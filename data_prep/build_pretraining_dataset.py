"""Writes a directory of raw text files as ELECTRA pre-training TFRecords.

Same examples as the official ``build_pretraining_dataset.py``: lines are packed into examples
of up to ``max_seq_length`` tokens without crossing a document boundary (a blank line when
``blanks_separate_docs``, and always the end of a file), 10% of examples have one segment,
the A/B split aims at ``(target_length - 3) // 2`` tokens, and 5% of examples aim at a random
length in ``[5, max_seq_length]``. Examples go round-robin to ``num_out_files`` shards named
``pretrain_data.tfrecord-I-of-N`` in the schema of ``electra_tf/pretraining/schema.py`` (int64
``input_ids``, ``input_mask``, ``segment_ids`` of length ``max_seq_length``).

What differs from the official script:
- ``--seed S``: with one process the output equals the official script run after
  ``random.seed(S)`` (the random draws happen in the official order). With ``P`` processes job 0
  uses ``S`` and job ``j > 0`` uses :func:`job_seed`. Without ``--seed`` a seed is drawn and
  logged, so every run can be repeated.
- Lines are tokenized in large batches with the tensorflow-text tokenizer (same ids as the
  official ``FullTokenizer``), then packed by the cheap pure-Python logic below.
- Bytes that are not UTF-8 become U+FFFD (which the tokenizer drops) and are counted per file,
  instead of crashing the run.
- Shards are written as hidden ``.pretrain_data.tfrecord-I-of-N.tmp`` files and renamed when
  complete; the output directory is not wiped, only old shards of ours in it are removed.

Flags use the official names; the official hyphenated spellings also work
(``--corpus-dir``, ``--no-lower-case``, ``--blanks-separate-docs False``, ...).

  python data_prep/build_pretraining_dataset.py --corpus_dir=texts/ --vocab_file=vocab.txt \
      --output_dir=pretrain_tfrecords --max_seq_length=128 --num_processes=2 --seed=1
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import multiprocessing
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import Any, NamedTuple

if __package__ in (None, ""):  # run as a script: make the repository root importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import console  # noqa: E402,I001 -- quiet must run before TensorFlow loads

if __name__ == "__main__":
  console.quiet(sys.argv)

import tensorflow as tf  # noqa: E402
from absl import app, flags, logging  # noqa: E402

from electra_tf import tokenization  # noqa: E402
from electra_tf.pretraining import schema  # noqa: E402

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
      tf.io.gfile.rename(tmp, final, overwrite=True)

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

  def write_files(self, paths: Sequence[str], label: str = "",
                  log_every_s: float = 10.0) -> None:
    """Writes the examples of `paths`, in order, logging progress every `log_every_s`."""
    total_bytes = sum(tf.io.gfile.stat(p).length for p in paths)
    progress = _Progress(self, len(paths), total_bytes, label, log_every_s)
    for path in paths:
      n_bytes = n_bad = 0
      for lines, block_bytes, block_bad in read_line_blocks(path):
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

  def _buffer_lines(self, lines: list[str]) -> None:
    items, texts = self._items, self._texts
    for line in lines:
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


@dataclasses.dataclass(frozen=True)
class BuildArgs:
  """Arguments of one build; the official names (picklable for worker processes)."""

  corpus_dir: str
  vocab_file: str
  output_dir: str
  max_seq_length: int = 128
  num_processes: int = 1
  blanks_separate_docs: bool = True
  do_lower_case: bool = True
  strip_accents: bool = True
  num_out_files: int = 1000
  seed: int | None = None
  chunk_lines: int = 16384


@contextlib.contextmanager
def lean_gc() -> Iterator[None]:
  """Stops the cyclic GC from rescanning TensorFlow's ~10^6 long-lived objects.

  A job allocates millions of small lists; with default thresholds the full collections they
  trigger cost more than the tokenization itself. Objects alive now are frozen (never scanned)
  and young collections run less often; our lists hold no cycles.
  """
  old = gc.get_threshold()
  gc.freeze()
  gc.set_threshold(100_000, 50, 1000)
  try:
    yield
  finally:
    gc.set_threshold(*old)
    gc.unfreeze()


def job_seed(seed: int, job_id: int) -> int:
  """Seed of job `job_id`: `seed` itself for job 0, else 64 bits of sha256("seed:job_id")."""
  if job_id == 0:
    return seed
  digest = hashlib.sha256(f"{seed}:{job_id}".encode()).digest()
  return int.from_bytes(digest[:8], "big")


def list_corpus_files(corpus_dir: str) -> list[str]:
  """Sorted file names in `corpus_dir` (the official order); sub-directories are skipped."""
  if not tf.io.gfile.isdir(corpus_dir):
    raise ValueError(f"corpus_dir {corpus_dir!r} does not exist or is not a directory")
  names = []
  for name in sorted(tf.io.gfile.listdir(corpus_dir)):
    if tf.io.gfile.isdir(os.path.join(corpus_dir, name)):
      logging.warning("skipping sub-directory %s of corpus_dir", name)
    else:
      names.append(name)
  if not names:
    raise ValueError(f"corpus_dir {corpus_dir!r} contains no files")
  return names


def check_vocab(vocab_file: str) -> None:
  """Raises ValueError (one line) when `vocab_file` is missing or lacks the special tokens."""
  if not tf.io.gfile.exists(vocab_file):
    raise ValueError(f"vocab_file {vocab_file!r} not found")
  vocab = tokenization.load_vocab(vocab_file)
  try:
    tokenization.validate_vocab(vocab)
  except ValueError as e:
    raise ValueError(f"vocab_file {vocab_file!r}: {e}") from None
  missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in vocab]
  if missing:
    raise ValueError(f"vocab_file {vocab_file!r} lacks {', '.join(missing)}")


def check_shape_args(max_seq_length: int, num_processes: int, num_out_files: int) -> None:
  if max_seq_length < 5:  # the official random target length is randint(5, max_seq_length)
    raise ValueError(f"max_seq_length must be >= 5, got {max_seq_length}")
  if num_processes < 1:
    raise ValueError(f"num_processes must be >= 1, got {num_processes}")
  if num_out_files < num_processes:
    raise ValueError(f"num_out_files ({num_out_files}) must be >= num_processes "
                     f"({num_processes}): every process writes its own shards")


def prepare_output_dir(output_dir: str) -> None:
  """Creates `output_dir` and deletes shards (finished or not) of an earlier build in it.

  The official script deletes the whole directory; only our own files are removed here.
  """
  tf.io.gfile.makedirs(output_dir)
  old = (tf.io.gfile.glob(os.path.join(output_dir, SHARD_GLOB))
         + tf.io.gfile.glob(os.path.join(output_dir, TMP_SHARD_GLOB)))
  for path in old:
    tf.io.gfile.remove(path)
  if old:
    logging.info("removed %d shard(s) of an earlier build from %s", len(old), output_dir)


def write_examples(job_id: int, args: BuildArgs, rng: random.Random | None = None,
                   tokenizer: Any = None) -> JobStats:
  """One job: its share of the corpus files (every `num_processes`-th), shuffled, then written.

  `rng` defaults to `random.Random(job_seed(args.seed, job_id))`; `tokenizer` (anything with
  `.vocab` and `.tokenize_to_ids(lines)`) to the project's `FastTokenizer`.
  """
  if rng is None:
    rng = random.Random(None if args.seed is None else job_seed(args.seed, job_id))
  start = time.time()
  writer = ExampleWriter(
    job_id=job_id, vocab_file=args.vocab_file, output_dir=args.output_dir,
    max_seq_length=args.max_seq_length, num_jobs=args.num_processes,
    blanks_separate_docs=args.blanks_separate_docs, do_lower_case=args.do_lower_case,
    num_out_files=args.num_out_files, strip_accents=args.strip_accents, rng=rng,
    chunk_lines=args.chunk_lines, tokenizer=tokenizer)
  try:
    fnames = [f for i, f in enumerate(list_corpus_files(args.corpus_dir))
              if i % args.num_processes == job_id]
    rng.shuffle(fnames)
    with lean_gc():
      writer.write_files([os.path.join(args.corpus_dir, f) for f in fnames])
  except BaseException:
    writer.abort()
    raise
  return finish_job(writer, job_id, start)


def finish_job(writer: ExampleWriter, job_id: int, start: float) -> JobStats:
  """Closes a job's shards and logs its totals (shared with the OpenWebText builder)."""
  stats = writer.finish()
  stats.seconds = time.time() - start
  logging.info("Job %d: done, %d files, %d examples, %d tokens in %.1fs", job_id, stats.files,
               stats.examples, stats.tokens, stats.seconds)
  return stats


def _job_entry(fn: Callable[..., JobStats], job_id: int, args: Any,
               verbosity: int) -> JobStats:
  logging.set_verbosity(verbosity)
  return fn(job_id, args)


def run_jobs(fn: Callable[[int, Any], JobStats], args: Any,
             num_processes: int) -> list[JobStats]:
  """Runs `fn(job_id, args)` for every job: job 0 in this process (already past its
  TensorFlow start-up) while jobs 1.. run in spawned processes (spawn, not fork: forking a
  process that has started TensorFlow is unsafe)."""
  if num_processes == 1:
    return [fn(0, args)]
  ctx = multiprocessing.get_context("spawn")
  with futures.ProcessPoolExecutor(max_workers=num_processes - 1, mp_context=ctx) as pool:
    jobs = [pool.submit(_job_entry, fn, i, args, logging.get_verbosity())
            for i in range(1, num_processes)]
    try:
      first = fn(0, args)
    except BaseException:
      pool.shutdown(wait=True, cancel_futures=True)
      raise
    return [first] + [j.result() for j in jobs]


def log_totals(stats: list[JobStats], seconds: float) -> None:
  tokens = sum(s.tokens for s in stats)
  logging.info("wrote %d examples (%d tokens, %d files, %d non-UTF-8 bytes replaced, "
               "%d empty files) in %.1fs: %.0f tokens/s", sum(s.examples for s in stats),
               tokens, sum(s.files for s in stats), sum(s.bad_bytes for s in stats),
               sum(s.empty_files for s in stats), seconds, tokens / max(seconds, 1e-9))
  skipped = sum(s.skipped_archives for s in stats)
  if skipped:
    logging.error("%d unreadable archive(s) were skipped (see the errors above)", skipped)


def build(args: BuildArgs) -> list[JobStats]:
  """Checks the arguments, then writes the whole corpus; returns per-job counts."""
  check_shape_args(args.max_seq_length, args.num_processes, args.num_out_files)
  check_vocab(args.vocab_file)
  list_corpus_files(args.corpus_dir)
  if args.seed is None:
    args = dataclasses.replace(args, seed=random.SystemRandom().randrange(2**32))
    logging.info("no --seed given; using --seed=%d (pass it to repeat this build)", args.seed)
  prepare_output_dir(args.output_dir)
  start = time.time()
  stats = run_jobs(write_examples, args, args.num_processes)
  log_totals(stats, time.time() - start)
  return stats


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

BOOL_FLAGS = ("blanks_separate_docs", "do_lower_case", "strip_accents")
# The official argparse switches that set a boolean flag to a fixed value.
SWITCH_ALIASES = {
  "--do-lower-case": "--do_lower_case=true", "--no-lower-case": "--do_lower_case=false",
  "--do-strip-accents": "--strip_accents=true", "--no-strip-accents": "--strip_accents=false",
}
_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no", "t", "f"}


def normalize_argv(argv: Sequence[str], bool_flags: Sequence[str] = BOOL_FLAGS) -> list[str]:
  """Rewrites the official argparse spellings into absl ones (argv[0] is kept).

  ``--corpus-dir X`` -> ``--corpus_dir X``; ``--no-lower-case`` -> ``--do_lower_case=false``;
  ``--blanks-separate-docs False`` -> ``--blanks_separate_docs=False`` (the official
  ``type=bool`` turned any value, even "False", into True; the value is honoured here).
  """
  out = list(argv[:1])
  rest = list(argv[1:])
  i = 0
  while i < len(rest):
    arg = rest[i]
    i += 1
    if arg == "--":
      out += rest[i - 1:]
      break
    if not arg.startswith("--"):
      out.append(arg)
      continue
    if arg in SWITCH_ALIASES:
      out.append(SWITCH_ALIASES[arg])
      continue
    name, eq, value = arg[2:].partition("=")
    name = name.replace("-", "_")
    if (name in bool_flags and not eq and i < len(rest)
        and rest[i].lower() in _BOOL_WORDS):
      out.append(f"--{name}={rest[i]}")
      i += 1
      continue
    out.append(f"--{name}{eq}{value}")
  return out


def define_common_flags() -> None:
  """Flags shared with the OpenWebText builder."""
  flags.DEFINE_integer("max_seq_length", 128, "Number of tokens per example.")
  flags.DEFINE_integer("num_processes", 1, "Parallelize across multiple processes.")
  flags.DEFINE_bool("do_lower_case", True, "Lower case input text.")
  flags.DEFINE_bool("strip_accents", True, "Strip accents (only when lower-casing).")
  flags.DEFINE_integer("num_out_files", 1000, "Number of output shards.")
  flags.DEFINE_integer("seed", None, "Seed of the random A/B splits, lengths and file order; "
                       "with one process the same as the official script after random.seed.")
  flags.DEFINE_integer("chunk_lines", 16384, "Non-blank lines tokenized per batched call.")


def define_flags() -> None:
  flags.DEFINE_string("corpus_dir", None, "Location of pre-training text files.")
  flags.DEFINE_string("vocab_file", None, "Location of vocabulary file.")
  flags.DEFINE_string("output_dir", None, "Where to write out the tfrecords.")
  flags.DEFINE_bool("blanks_separate_docs", True, "Whether blank lines indicate document "
                    "boundaries.")
  define_common_flags()
  flags.mark_flags_as_required(["corpus_dir", "vocab_file", "output_dir"])


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  f = flags.FLAGS
  args = BuildArgs(
    corpus_dir=f.corpus_dir, vocab_file=f.vocab_file, output_dir=f.output_dir,
    max_seq_length=f.max_seq_length, num_processes=f.num_processes,
    blanks_separate_docs=f.blanks_separate_docs, do_lower_case=f.do_lower_case,
    strip_accents=f.strip_accents, num_out_files=f.num_out_files, seed=f.seed,
    chunk_lines=f.chunk_lines)
  build(args)


if __name__ == "__main__":
  define_flags()
  console.run(main, "build_pretraining_dataset", normalize_argv(sys.argv))
