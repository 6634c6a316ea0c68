"""Cost of a resume-exact restart: continuing a seeded data stream after the consumed examples.

A seeded pre-training run that restarts at global step s must continue its data stream where
an uninterrupted run would be. Two ways, both giving the same batches (checked here):
  old: rebuild the pipeline and drop the first ``s * train_batch_size`` records
       (``pretraining_dataset(..., skip_steps=s)``, the fallback): reads every consumed record.
  new: rebuild the pipeline and restore the iterator state saved beside ``ckpt-s``
       (``electra_tf/training/input_state.py``): file positions, shuffle buffer, RNG state.

This builds pre-training TFRecords (``--max_seq_length``, real text: wikitext-2 test), saves
the stream's state after each of ``--skip_steps`` (untimed), then for each skip size times
each way from building the pipeline to its first batch (batch ``--batch_size``), best of
``--repeats``, the ways alternating, after an untimed warm-up. It prints the time and the
examples/s skipped (consumed examples / that time) of each way, the size of a saved state and
the time to write it, and last the ratio of the rates at the largest skip size.

  python benchmarks/bench_resume_skip.py [--data_dir=../shared/data] [--skip_steps=100,1000,10000]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from data_prep import build_pretraining_dataset as bpd  # noqa: E402
from electra_tf.pretraining import data  # noqa: E402

SEED = 1


def first_batch(start: Callable[[], tf.data.Iterator]) -> tuple[float, np.ndarray]:
  """Wall seconds from `start()` (build the pipeline, maybe restore) to its first batch, and
  the batch's input_ids."""
  t = time.perf_counter()
  batch = next(start())
  return time.perf_counter() - t, batch["input_ids"].numpy()


def parse_args() -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--data_dir", default=str(pathlib.Path(__file__).resolve().parents[2]
                                           / "shared" / "data"))
  p.add_argument("--vocab_file", default=None, help="default: <data_dir>/../reference/vocab.txt")
  p.add_argument("--max_mb", type=float, default=2.0, help="MB of wikitext-2 test text (about 1.3)")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=128)
  p.add_argument("--skip_steps", default="100,1000,10000", help="comma-separated skip sizes")
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--resume_steps", type=int, default=100_000)
  return p.parse_args()


def build_records(args: argparse.Namespace, tmp: str) -> list[str]:
  """Pre-training TFRecords of wikitext-2 test text in ``tmp``; returns the files."""
  vocab = args.vocab_file or str(pathlib.Path(args.data_dir).parent / "reference" / "vocab.txt")
  corpus = pathlib.Path(tmp, "corpus")
  corpus.mkdir()
  with open(pathlib.Path(args.data_dir, "wikitext2", "wiki.test.raw"), encoding="utf-8") as f:
    (corpus / "wiki.txt").write_text(f.read(int(args.max_mb * 2**20)), encoding="utf-8")
  out = pathlib.Path(tmp, "records")
  bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=vocab, output_dir=str(out),
                          max_seq_length=args.max_seq_length, num_out_files=4, seed=1))
  return sorted(str(f) for f in out.iterdir())


def save_states(pipeline: Callable[[int], tf.data.Dataset], sizes: list[int], tmp: str
                ) -> tuple[dict[int, str], dict[int, int], dict[int, float]]:
  """The input states a run saves beside ``ckpt-s`` for each skip size s (untimed): their
  paths, sizes in bytes and write seconds."""
  states, state_bytes, write_seconds, consumed = {}, {}, {}, 0
  it = iter(pipeline(0))
  for s in sizes:
    for _ in range(s - consumed):
      next(it)
    consumed = s
    t = time.perf_counter()
    states[s] = tf.train.Checkpoint(input=it).write(os.path.join(tmp, f"state-{s}", "state"))
    write_seconds[s] = time.perf_counter() - t
    state_bytes[s] = sum(f.stat().st_size for f in pathlib.Path(tmp, f"state-{s}").iterdir())
  return states, state_bytes, write_seconds


def time_ways(ways: dict[str, Callable], sizes: list[int], repeats: int
              ) -> dict[tuple[str, int], float]:
  """Best seconds to the first batch per (way, skip size), the ways alternating after an
  untimed warm-up; exits when the two ways give different batches."""
  for way in ways.values():  # warm-up: graph building, file cache
    first_batch(way(sizes[0]))
  best = {(name, s): float("inf") for name in ways for s in sizes}
  batches = {}
  for _ in range(repeats):
    for s in sizes:
      for name, way in ways.items():
        seconds, batches[name, s] = first_batch(way(s))
        best[name, s] = min(best[name, s], seconds)
  for s in sizes:
    if not np.array_equal(batches["old", s], batches["new", s]):
      sys.exit(f"the two ways give different batches after skipping {s} steps")
  return best


def print_report(args: argparse.Namespace, sizes: list[int], best: dict[tuple[str, int], float],
                 state_bytes: dict[int, int], write_seconds: dict[int, float]) -> None:
  for s in sizes:
    skipped = s * args.batch_size
    print(f"skip {s} steps ({skipped} examples): " + "; ".join(
        f"{name} {best[name, s]:.2f} s to the first batch = {skipped / best[name, s]:,.0f} "
        f"examples/s skipped" for name in ("old", "new"))
        + f"; saved input state {state_bytes[s] / 2**20:.2f} MiB, written in "
        f"{write_seconds[s] * 1000:.0f} ms")
  s = sizes[-1]
  rate_old = s * args.batch_size / best["old", s]
  print(f"old: a resume at step {args.resume_steps} (batch {args.batch_size}) would spend "
        f"about {args.resume_steps * args.batch_size / rate_old:,.0f} s skipping; new: about "
        f"{best['new', s]:.2f} s whatever the step")
  print(f"resume skip at {s} steps: new {s * args.batch_size / best['new', s]:,.0f} ex/s vs "
        f"old {rate_old:,.0f} ex/s: {best['old', s] / best['new', s]:.1f}x")


def main() -> None:
  args = parse_args()
  sizes = sorted({int(s) for s in args.skip_steps.split(",")})
  with tempfile.TemporaryDirectory() as tmp:
    files = build_records(args, tmp)
    n = sum(1 for _ in tf.data.TFRecordDataset(files))
    print(f"{n} examples of length {args.max_seq_length} in {len(files)} files; batch "
          f"{args.batch_size}; skip sizes {sizes} steps")
    pipeline = lambda skip: data.pretraining_dataset(files, args.batch_size, args.max_seq_length,
                                                     seed=SEED, skip_steps=skip)
    states, state_bytes, write_seconds = save_states(pipeline, sizes, tmp)

    def restored(s):
      it = iter(pipeline(0))
      tf.train.Checkpoint(input=it).read(states[s]).assert_consumed()
      return it

    ways = {"old": lambda s: (lambda: iter(pipeline(s))), "new": lambda s: (lambda: restored(s))}
    best = time_ways(ways, sizes, args.repeats)
    print_report(args, sizes, best, state_bytes, write_seconds)


if __name__ == "__main__":
  main()
