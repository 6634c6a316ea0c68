"""Pre-training data builder throughput: batched tensorflow-text path vs pure-Python tokenizer.

Builds TFRecords from real text (../shared/data/gutenberg + state_union by default) three
ways, side by side in one run, all with the same seed (so the same examples):

1. the pure-Python path: the same reader/packer/writer, tokenizing each line with
   tf-models-official's ``FullTokenizer`` (the official code's algorithm), one process;
2. the builder (batched ``FastTokenizer``), one process; 1 and 2 alternate ``--repeats``
   times and the best run of each counts (wall and CPU time of all threads);
3. process scaling: ``build`` with each count in ``--processes`` (spawned workers) over the
   corpus linked ``--scaling_copies`` times (a larger corpus amortises each worker's TensorFlow
   start-up), alternating ``--repeats`` times, best run of each; wall time includes start-up,
   "busy" is tokens / the slowest job's own time. The speed-up over one process is printed
   next to the ideal (the process count, capped by the CPU count) and next to the machine's
   own ceiling: the speed-up of the same number of copies of a CPU-bound pure-Python loop.

tokens/s counts WordPiece ids produced (no [CLS]/[SEP]/padding). The last line is the one-process
speed-up of the builder over the pure-Python path.

  python benchmarks/bench_data_prep.py [--max_mb=8] [--processes=1,2] [--scaling_copies=4]
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402
from official.nlp.tools import tokenization as tfm_tokenization  # noqa: E402

from data_prep import build_pretraining_dataset as bpd  # noqa: E402
from electra_tf import tokenization  # noqa: E402

_SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                       "shared", "data")
flags.DEFINE_list("corpus_dirs", [os.path.join(_SHARED, "gutenberg"),
                                  os.path.join(_SHARED, "state_union")],
                  "Directories whose files form the corpus.")
flags.DEFINE_float("max_mb", 10.0, "Use files (sorted by name) until this many MB.")
flags.DEFINE_integer("repeats", 2, "Alternating runs of each path; the best one counts.")
flags.DEFINE_string("vocab_file", os.path.join(_SHARED, "..", "reference", "vocab.txt"),
                    "WordPiece vocabulary.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per example.")
flags.DEFINE_bool("skip_scaling", False, "Skip the process-scaling runs.")
flags.DEFINE_list("processes", ["1", "2"], "Process counts for the scaling runs (1 first).")
flags.DEFINE_integer("scaling_copies", 4, "Times the corpus is linked for the scaling runs.")
FLAGS = flags.FLAGS


class PurePythonTokenizer:
  """tf-models-official FullTokenizer behind the builder's batched interface, one line a call."""

  def __init__(self, vocab_file: str):
    self._tok = tfm_tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    self.vocab = self._tok.vocab

  def tokenize_to_ids(self, lines: list[str]) -> list[list[int]]:
    tok = self._tok
    return [tok.convert_tokens_to_ids(tok.tokenize(line)) for line in lines]


def make_corpus(dirs: list[str], max_mb: float, out_dir: str) -> tuple[int, int]:
  """Symlinks the chosen files into `out_dir`; returns (n_files, n_bytes)."""
  n_files = n_bytes = 0
  for d in dirs:
    for name in sorted(os.listdir(d)):
      path = os.path.join(d, name)
      if not name.endswith(".txt") or n_bytes >= max_mb * 1e6:
        continue
      os.symlink(path, os.path.join(out_dir, f"{os.path.basename(d)}-{name}"))
      n_files += 1
      n_bytes += os.path.getsize(path)
  return n_files, n_bytes


def replicate_corpus(corpus: str, copies: int, out_dir: str) -> None:
  """Links every corpus file `copies` times into `out_dir` (distinct names: distinct files)."""
  os.makedirs(out_dir)
  for name in sorted(os.listdir(corpus)):
    for k in range(copies):
      os.symlink(os.path.realpath(os.path.join(corpus, name)), os.path.join(out_dir, f"{k}-{name}"))


def scaling(args: bpd.BuildArgs, counts: list[int], copies: int, repeats: int,
            tmp: str) -> None:
  """Best-of-`repeats` tokens/s of `build` at each process count, and the speed-up over 1."""
  corpus = os.path.join(tmp, "corpus_scaling")
  replicate_corpus(args.corpus_dir, copies, corpus)
  best: dict[int, tuple[float, float, int]] = {}
  for _ in range(repeats):
    for n in counts:
      scaled = bpd.BuildArgs(**{**args.__dict__, "corpus_dir": corpus, "num_processes": n,
                                "num_out_files": max(args.num_out_files, n)})
      start = time.perf_counter()
      stats = bpd.build(scaled)
      wall = time.perf_counter() - start
      tokens = sum(s.tokens for s in stats)
      busy = max(s.seconds for s in stats)
      if n not in best or wall < best[n][0]:
        best[n] = (wall, busy, tokens)
  base = best[counts[0]][2] / best[counts[0]][0] / counts[0]  # tokens/s per process
  for n in counts:
    wall, busy, tokens = best[n]
    ideal = min(n, os.cpu_count() or n)
    print(f"build(), {n} process(es), {copies}x corpus: {tokens} tokens, best of {repeats}: "
          f"wall {wall:.2f}s = {tokens / wall:,.0f} tokens/s; busy {busy:.2f}s = "
          f"{tokens / busy:,.0f} tokens/s; speed-up over 1 process {tokens / wall / base:.2f}x "
          f"(ideal {ideal:.2f}x on {os.cpu_count()} CPUs)")


def _spin(_: int) -> tuple[float, float]:
  """A fixed CPU-bound pure-Python loop; returns its (start, end) wall-clock times."""
  start, x = time.time(), 0
  for i in range(15_000_000):
    x += i * i % 7
  return start, time.time()


def machine_ceiling(counts: list[int]) -> None:
  """How much faster n copies of a CPU-bound loop finish than one: the scaling this machine
  allows at all (shared or throttled cores give less than n), measured next to the builder's."""
  start, end = _spin(0)
  one = end - start
  for n in counts[1:]:
    with futures.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
      spans = list(pool.map(_spin, range(n)))
    span = max(e for _, e in spans) - min(s for s, _ in spans)
    print(f"machine ceiling: {n} processes of a CPU-bound loop did {n * one / span:.2f}x the work "
          f"per second of one (ideal {min(n, os.cpu_count() or n):.2f}x)")


def shard_digest(output_dir: str) -> str:
  h = hashlib.md5()
  for name in sorted(os.listdir(output_dir)):
    with open(os.path.join(output_dir, name), "rb") as f:
      h.update(f.read())
  return h.hexdigest()


def one_job(args: bpd.BuildArgs, tokenizer) -> tuple[bpd.JobStats, float, float]:
  """Runs job 0 in this process; returns (stats, wall seconds, CPU seconds of all threads)."""
  bpd.prepare_output_dir(args.output_dir)
  start, cpu = time.perf_counter(), time.process_time()
  stats = bpd.write_examples(0, args, tokenizer=tokenizer)
  return stats, time.perf_counter() - start, time.process_time() - cpu


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus")
    os.makedirs(corpus)
    n_files, n_bytes = make_corpus(FLAGS.corpus_dirs, FLAGS.max_mb, corpus)
    print(f"corpus: {n_files} files, {n_bytes / 1e6:.1f} MB from {', '.join(FLAGS.corpus_dirs)}")
    print(f"cpus: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f}")
    args = bpd.BuildArgs(corpus_dir=corpus, vocab_file=FLAGS.vocab_file,
                         output_dir=os.path.join(tmp, "out"),
                         max_seq_length=FLAGS.max_seq_length, num_out_files=8, seed=1)

    # Tokenizer construction (vocab load, tf-text model build) is outside the timed region.
    # The two paths alternate and each keeps its best run: the machine may be shared.
    py_tok = PurePythonTokenizer(args.vocab_file)
    fast_tok = tokenization.FastTokenizer(args.vocab_file)
    fast_tok.tokenize_to_ids(["warm up the tokenizer"])
    runs = {"py": [], "fast": []}
    digests = set()
    for _ in range(FLAGS.repeats):
      for name, tok in (("py", py_tok), ("fast", fast_tok)):
        runs[name].append(one_job(args, tok))
        digests.add(shard_digest(args.output_dir))
    best = {}
    for name, label in (("py", "pure-Python tokenizer path"),
                        ("fast", "builder (batched FastTokenizer)")):
      st = runs[name][0][0]
      wall = min(r[1] for r in runs[name])
      cpu = min(r[2] for r in runs[name])
      best[name] = (st.tokens / wall, st.tokens / cpu)
      print(f"{label}, 1 process: {st.tokens} tokens, {st.examples} examples; best of "
            f"{FLAGS.repeats}: wall {wall:.2f}s = {st.tokens / wall:,.0f} tokens/s, CPU "
            f"{cpu:.2f}s = {st.tokens / cpu:,.0f} tokens per CPU-second")
    print(f"identical shards from every run of both paths: {len(digests) == 1}; CPU-time "
          f"speed-up {best['fast'][1] / best['py'][1]:.1f}x")

    if not FLAGS.skip_scaling:
      counts = [int(n) for n in FLAGS.processes]
      machine_ceiling(counts)
      scaling(args, counts, FLAGS.scaling_copies, FLAGS.repeats, tmp)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"speed-up of the builder over the pure-Python tokenizer path (1 process, wall): "
          f"{best['fast'][0] / best['py'][0]:.1f}x")


if __name__ == "__main__":
  app.run(main)
