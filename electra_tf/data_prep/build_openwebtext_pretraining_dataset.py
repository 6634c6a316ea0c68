"""Writes the OpenWebText corpus as ELECTRA pre-training TFRecords.

The official ``build_openwebtext_pretraining_dataset.py`` with the same example logic as
``build_pretraining_dataset.py`` (every ``.txt`` file is one document; blank lines do not
separate documents). Input, under ``--data_dir``:

- ``openwebtext/``: what ``tar xf openwebtext.tar.xz`` gives, one ``urlsf_subsetNN-M_data.xz``
  per subset, each an xz-compressed tar of ``.txt`` documents; or
- ``openwebtext.tar.xz`` itself: extracted to a temporary directory first, removed at the end.

Each job takes every ``num_processes``-th subset (sorted names), shuffles them, and for each one
extracts it to its own temporary directory, shuffles its ``.txt`` files (sorted first, so a seed
reproduces the order: the official code shuffled an unsorted directory listing), writes them and
deletes the directory. An unreadable subset archive is logged and skipped. Output goes to
``<data_dir>/pretrain_tfrecords`` and the vocabulary is ``<data_dir>/vocab.txt`` unless
``--output_dir`` / ``--vocab_file`` say otherwise. Seeds as in ``build_pretraining_dataset``.

  python data_prep/build_openwebtext_pretraining_dataset.py --data-dir $DATA_DIR \
      --num-processes 5 --seed 1
"""

from __future__ import annotations

import dataclasses
import lzma
import os
import random
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from electra_tf import console, early_interrupt  # noqa: E402,I001 -- before TensorFlow loads

if __name__ == "__main__":
  console.require_tensorflow("build_openwebtext_pretraining_dataset")
  early_interrupt.install()
  console.quiet_logs(sys.argv)
  console.use_tf_keras()

from absl import app, flags, logging  # noqa: E402

from electra_tf.data_prep import build_pretraining_dataset as bpd  # noqa: E402
from electra_tf.model_files import VOCAB_FILE  # noqa: E402

ARCHIVE_NAME = "openwebtext.tar.xz"
SUBSETS_DIR_NAME = "openwebtext"


@dataclasses.dataclass(frozen=True)
class OwtArgs:
  """Arguments of one OpenWebText build (picklable for worker processes)."""

  data_dir: str
  vocab_file: str | None = None  # default <data_dir>/vocab.txt
  output_dir: str | None = None  # default <data_dir>/pretrain_tfrecords
  tmp_dir: str | None = None  # default <data_dir>/tmp
  max_seq_length: int = 128
  num_processes: int = 1
  do_lower_case: bool = True
  strip_accents: bool = True
  num_out_files: int = 1000
  seed: int | None = None
  chunk_lines: int = 16384
  subsets_dir: str | None = None  # set by `build`: the directory holding the subset archives


def extract(archive: str, dest: str) -> None:
  """Extracts a (compressed) tar archive; members escaping `dest` are refused."""
  with tarfile.open(archive) as tar:
    tar.extractall(dest, filter="data")


def find_subsets_dir(root: str) -> str:
  """The directory under `root` that holds files, descending through lone sub-directories."""
  while True:
    entries = sorted(os.listdir(root))
    if any(os.path.isfile(os.path.join(root, e)) for e in entries):
      return root
    dirs = [e for e in entries if os.path.isdir(os.path.join(root, e))]
    if len(dirs) != 1:
      raise ValueError(f"{root!r} holds no OpenWebText subset archives")
    root = os.path.join(root, dirs[0])


def list_files(root: str) -> list[str]:
  """Every file below `root`, as sorted relative paths."""
  out = []
  for parent, _, names in os.walk(root):
    out += [os.path.relpath(os.path.join(parent, n), root) for n in names]
  return sorted(out)


def write_examples(job_id: int, args: OwtArgs, rng: random.Random | None = None,
                   tokenizer: Any = None) -> bpd.JobStats:
  """One job: its share of the subset archives, shuffled; each extracted, written, deleted."""
  if rng is None:
    rng = random.Random(None if args.seed is None else bpd.job_seed(args.seed, job_id))
  start = time.time()
  writer = bpd.ExampleWriter(
    job_id=job_id, vocab_file=args.vocab_file, output_dir=args.output_dir,
    max_seq_length=args.max_seq_length, num_jobs=args.num_processes,
    blanks_separate_docs=False, do_lower_case=args.do_lower_case,
    num_out_files=args.num_out_files, strip_accents=args.strip_accents, rng=rng,
    chunk_lines=args.chunk_lines, tokenizer=tokenizer)
  stats = writer.stats
  try:
    subsets = [f for i, f in enumerate(sorted(os.listdir(args.subsets_dir)))
               if i % args.num_processes == job_id]
    rng.shuffle(subsets)
    for k, name in enumerate(subsets):
      job_tmp = tempfile.mkdtemp(prefix=f"job_{job_id}_", dir=args.tmp_dir)
      try:
        try:
          extract(os.path.join(args.subsets_dir, name), job_tmp)
        except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as e:
          logging.error("Job %d: skipping unreadable subset archive %s: %s", job_id, name, e)
          stats.skipped_archives += 1
          continue
        txt_files = list_files(job_tmp)
        rng.shuffle(txt_files)
        with bpd.lean_gc():
          writer.write_files([os.path.join(job_tmp, f) for f in txt_files],
                             label=f"subset {k + 1}/{len(subsets)} ({name}):")
      finally:
        shutil.rmtree(job_tmp, ignore_errors=True)
      elapsed = time.time() - start
      logging.info("Job %d: processed %d/%d subsets, %d examples written, elapsed %.0fs, "
                   "ETA %.0fs", job_id, k + 1, len(subsets), writer.n_written, elapsed,
                   elapsed * (len(subsets) - k - 1) / (k + 1))
  except BaseException:
    writer.abort()
    raise
  return bpd.finish_job(writer, job_id, start)


def resolve(args: OwtArgs) -> OwtArgs:
  """Fills the default paths and checks the inputs (one-line ValueError per problem)."""
  if not os.path.isdir(args.data_dir):
    raise ValueError(f"data_dir {args.data_dir!r} does not exist or is not a directory")
  args = dataclasses.replace(
    args,
    vocab_file=args.vocab_file or os.path.join(args.data_dir, VOCAB_FILE),
    output_dir=args.output_dir or os.path.join(args.data_dir, "pretrain_tfrecords"),
    tmp_dir=args.tmp_dir or os.path.join(args.data_dir, "tmp"))
  bpd.check_shape_args(args.max_seq_length, args.num_processes, args.num_out_files)
  bpd.check_vocab(args.vocab_file)
  if args.seed is None:
    args = dataclasses.replace(args, seed=random.SystemRandom().randrange(2**32))
    logging.info("no --seed given; using --seed=%d (pass it to repeat this build)", args.seed)
  return args


def build(args: OwtArgs) -> list[bpd.JobStats]:
  """Writes the whole corpus; returns per-job counts. Temporary files are always removed."""
  args = resolve(args)
  subsets_dir = os.path.join(args.data_dir, SUBSETS_DIR_NAME)
  archive = os.path.join(args.data_dir, ARCHIVE_NAME)
  if not os.path.isdir(subsets_dir) and not os.path.isfile(archive):
    raise ValueError(f"no OpenWebText in {args.data_dir!r}: expected {SUBSETS_DIR_NAME}/ "
                     f"(subset .xz archives) or {ARCHIVE_NAME}")
  made_tmp = not os.path.exists(args.tmp_dir)
  bpd.make_output_dir(args.tmp_dir, "tmp_dir")
  outer_tmp = None
  try:
    if not os.path.isdir(subsets_dir):
      outer_tmp = tempfile.mkdtemp(prefix="openwebtext_", dir=args.tmp_dir)
      logging.info("extracting %s to %s", archive, outer_tmp)
      try:
        extract(archive, outer_tmp)
      except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
        raise ValueError(f"cannot read {archive!r}: {e}") from None
      subsets_dir = find_subsets_dir(outer_tmp)
    if not [f for f in os.listdir(subsets_dir) if os.path.isfile(os.path.join(subsets_dir, f))]:
      raise ValueError(f"{subsets_dir!r} holds no OpenWebText subset archives")
    args = dataclasses.replace(args, subsets_dir=subsets_dir)
    bpd.prepare_output_dir(args.output_dir)
    start = time.time()
    stats = bpd.run_jobs(write_examples, args, args.num_processes)
    bpd.log_totals(stats, time.time() - start)
    return stats
  finally:
    if outer_tmp is not None:
      shutil.rmtree(outer_tmp, ignore_errors=True)
    if made_tmp:
      shutil.rmtree(args.tmp_dir, ignore_errors=True)


def define_flags() -> None:
  flags.DEFINE_string("data_dir", None, "Location of data (vocab file, corpus, etc).")
  flags.DEFINE_string("vocab_file", None, "Vocabulary; default <data_dir>/vocab.txt.")
  flags.DEFINE_string("output_dir", None, "Default <data_dir>/pretrain_tfrecords.")
  flags.DEFINE_string("tmp_dir", None, "Where archives are extracted; default <data_dir>/tmp.")
  bpd.define_common_flags()
  flags.mark_flag_as_required("data_dir")


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  f = flags.FLAGS
  args = OwtArgs(
    data_dir=f.data_dir, vocab_file=f.vocab_file, output_dir=f.output_dir, tmp_dir=f.tmp_dir,
    max_seq_length=f.max_seq_length, num_processes=f.num_processes,
    do_lower_case=f.do_lower_case, strip_accents=f.strip_accents,
    num_out_files=f.num_out_files, seed=f.seed, chunk_lines=f.chunk_lines)
  build(args)


if __name__ == "__main__":
  define_flags()
  console.run(main, "build_openwebtext_pretraining_dataset", bpd.normalize_argv(sys.argv))
