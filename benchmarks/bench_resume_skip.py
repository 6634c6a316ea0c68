"""Cost of a resume-exact restart: skipping the examples a seeded run already consumed.

A seeded pre-training run that restarts at global step s rebuilds its input pipeline and drops
the first ``s * train_batch_size`` examples of the seeded stream (``pretraining_dataset(...,
skip_steps=s)``), so the batches after the resume are those of an uninterrupted run. The
skipped examples are still read, checked and parsed. This builds pre-training TFRecords
(``--max_seq_length``, real text: wikitext-2 test) and times the first batch after skipping
each of ``--skip_steps`` (batch ``--batch_size``), best of ``--repeats`` after an untimed
warm-up; it prints the skip rate in examples/s (between the smallest and largest skip) and what
a resume at ``--resume_steps`` would cost at that rate, then, for comparison, the rate of only
reading the same number of serialized records (what a skip before parsing would cost).

  python benchmarks/bench_resume_skip.py [--data_dir=../shared/data] [--skip_steps=0,200,1000]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import tensorflow as tf  # noqa: E402

from data_prep import build_pretraining_dataset as bpd  # noqa: E402
from electra_tf.pretraining.data import pretraining_dataset  # noqa: E402


def first_batch_seconds(pattern: str, batch_size: int, max_seq_length: int, skip: int) -> float:
  """Wall seconds from building the pipeline to its first batch after ``skip`` steps."""
  start = time.perf_counter()
  ds = pretraining_dataset(pattern, batch_size, max_seq_length, seed=1, skip_steps=skip)
  next(iter(ds))
  return time.perf_counter() - start


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--data_dir", default=str(pathlib.Path(__file__).resolve().parents[2]
                                           / "shared" / "data"))
  p.add_argument("--vocab_file", default=None, help="default: <data_dir>/../reference/vocab.txt")
  p.add_argument("--max_mb", type=float, default=2.0, help="MB of wikitext-2 test text (about 1.3)")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=128)
  p.add_argument("--skip_steps", default="0,200,1000")
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--resume_steps", type=int, default=100_000)
  args = p.parse_args()
  vocab = args.vocab_file or str(pathlib.Path(args.data_dir).parent / "reference" / "vocab.txt")
  with tempfile.TemporaryDirectory() as tmp:
    corpus = pathlib.Path(tmp, "corpus")
    corpus.mkdir()
    with open(pathlib.Path(args.data_dir, "wikitext2", "wiki.test.raw"), encoding="utf-8") as f:
      (corpus / "wiki.txt").write_text(f.read(int(args.max_mb * 2**20)), encoding="utf-8")
    out = pathlib.Path(tmp, "records")
    bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=vocab, output_dir=str(out),
                            max_seq_length=args.max_seq_length, num_out_files=4, seed=1))
    pattern = str(out / "*")
    n = sum(1 for _ in tf.data.TFRecordDataset(tf.io.gfile.glob(pattern)))
    print(f"{n} examples of length {args.max_seq_length} in 4 files; batch {args.batch_size}")
    first_batch_seconds(pattern, args.batch_size, args.max_seq_length, 0)  # warm-up
    times = {}
    for skip in (int(s) for s in args.skip_steps.split(",")):
      times[skip] = min(first_batch_seconds(pattern, args.batch_size, args.max_seq_length, skip)
                        for _ in range(args.repeats))
      print(f"skip {skip:>6} steps ({skip * args.batch_size:>9} examples): first batch after "
            f"{times[skip]:.2f} s")
    base, top = min(times), max(times)
    rate = (top - base) * args.batch_size / max(times[top] - times[base], 1e-9)
    print(f"skip rate: {rate:,.0f} examples/s; a resume at step {args.resume_steps} "
          f"(batch {args.batch_size}) would spend {args.resume_steps * args.batch_size / rate:,.0f}"
          " s skipping")
    n_read = top * args.batch_size
    start = time.perf_counter()
    raw = tf.data.TFRecordDataset(tf.io.gfile.glob(pattern)).repeat().skip(n_read)
    next(iter(raw))
    print(f"reading {n_read} serialized records only: "
          f"{n_read / (time.perf_counter() - start):,.0f} records/s")


if __name__ == "__main__":
  main()
