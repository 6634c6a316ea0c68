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
  official ``FullTokenizer``), then packed by the cheap pure-Python logic of
  ``pretraining_examples.py``.
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
from typing import Any

from electra_tf import console, early_interrupt  # noqa: E402,I001 -- before TensorFlow loads

if __name__ == "__main__":
  console.require_tensorflow("build_pretraining_dataset")
  early_interrupt.install()
  console.quiet_logs(sys.argv)
  console.use_tf_keras()

import tensorflow as tf  # noqa: E402
from absl import app, flags, logging  # noqa: E402

from electra_tf import tokenization  # noqa: E402
from electra_tf.data_prep.pretraining_examples import (  # noqa: E402, F401  (re-exported)
  SHARD_FORMAT,
  SHARD_GLOB,
  TMP_SHARD_GLOB,
  ExampleBuilder,
  ExampleEncoder,
  ExampleWriter,
  JobStats,
  Segments,
  ShardWriter,
  decode_utf8,
  read_line_blocks,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardArgs:
  """How text becomes examples and shards: the arguments this builder and the Beam pipeline
  share (keyword-only)."""

  vocab_file: str
  output_dir: str
  max_seq_length: int = 128
  blanks_separate_docs: bool = True
  do_lower_case: bool = True
  strip_accents: bool = True
  num_out_files: int = 1000
  chunk_lines: int = 16384


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildArgs(ShardArgs):
  """Arguments of one build; the official names (picklable for worker processes)."""

  corpus_dir: str
  num_processes: int = 1
  seed: int | None = None


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


def make_output_dir(path: str, flag: str = "output_dir") -> None:
  """Creates folder `path`; a one-line ValueError (as for a run's model_dir) if it cannot be."""
  try:
    tf.io.gfile.makedirs(path)
  except (tf.errors.OpError, OSError) as e:
    text = (getattr(e, "message", None) or str(e)).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    raise ValueError(f"{flag} {path} cannot be created: {first}") from None
  if not tf.io.gfile.isdir(path):
    raise ValueError(f"{flag} {path} exists and is not a directory")


def prepare_output_dir(output_dir: str) -> None:
  """Creates `output_dir` and deletes shards (finished or not) of an earlier build in it.

  The official script deletes the whole directory; only our own files are removed here.
  """
  make_output_dir(output_dir)
  old = (tf.io.gfile.glob(os.path.join(output_dir, SHARD_GLOB))
         + tf.io.gfile.glob(os.path.join(output_dir, TMP_SHARD_GLOB)))
  for path in old:
    tf.io.gfile.remove(path)
  if old:
    logging.info("removed %d shard(s) of an earlier build from %s", len(old), output_dir)


def example_writer(args: ShardArgs, job_id: int, num_jobs: int, rng: random.Random,
                   tokenizer: Any = None) -> ExampleWriter:
  """Job ``job_id``'s writer of the shards ``args`` describe (``num_jobs``: the builder's
  processes or the Beam pipeline's jobs)."""
  return ExampleWriter(
    job_id=job_id, vocab_file=args.vocab_file, output_dir=args.output_dir,
    max_seq_length=args.max_seq_length, num_jobs=num_jobs,
    blanks_separate_docs=args.blanks_separate_docs, do_lower_case=args.do_lower_case,
    num_out_files=args.num_out_files, strip_accents=args.strip_accents, rng=rng,
    chunk_lines=args.chunk_lines, tokenizer=tokenizer)


def write_examples(job_id: int, args: BuildArgs, rng: random.Random | None = None,
                   tokenizer: Any = None) -> JobStats:
  """One job: its share of the corpus files (every `num_processes`-th), shuffled, then written.

  `rng` defaults to `random.Random(job_seed(args.seed, job_id))`; `tokenizer` (anything with
  `.vocab` and `.tokenize_to_ids(lines)`) to the project's `FastTokenizer`.
  """
  if rng is None:
    rng = random.Random(None if args.seed is None else job_seed(args.seed, job_id))
  start = time.time()
  writer = example_writer(args, job_id, args.num_processes, rng, tokenizer)
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


def define_tokenizing_flags() -> None:
  """How text becomes examples and shards: flags shared with the OpenWebText and Beam builders."""
  flags.DEFINE_integer("max_seq_length", 128, "Number of tokens per example.")
  flags.DEFINE_bool("do_lower_case", True, "Lower case input text.")
  flags.DEFINE_bool("strip_accents", True, "Strip accents (only when lower-casing).")
  flags.DEFINE_integer("num_out_files", 1000, "Number of output shards.")
  flags.DEFINE_integer("chunk_lines", 16384, "Non-blank lines tokenized per batched call.")


def define_common_flags() -> None:
  """Flags shared with the OpenWebText builder."""
  define_tokenizing_flags()
  flags.DEFINE_integer("num_processes", 1, "Parallelize across multiple processes.")
  flags.DEFINE_integer("seed", None, "Seed of the random A/B splits, lengths and file order; "
                       "with one process the same as the official script after random.seed.")


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
