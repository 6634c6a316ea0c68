"""The Beam pipeline against today's builder: tokens/s and peak memory per worker, one run.

On the same corpus (../shared/data gutenberg + state_union, linked ``--copies`` times), each in
a fresh child process (so its peak memory is its own):

1. the builder (``build_pretraining_dataset.build``), 1 process;
2. the Beam pipeline on the DirectRunner, 1 job on 1 worker (in-process, its default);
3. the Beam pipeline, 2 jobs on 2 worker processes (multi-processing), and the builder with 2
   processes beside it.

Wall time is the build call's (imports excluded; the Beam worker processes' start-up
included); peak memory is the largest resident set of the child and of each process it started
(a Beam worker). tokens/s counts WordPiece ids. Each pair of the same job count is checked to
write identical shards. The last line is ``beam / builder time = N.NNx`` (1 worker over 1
process). ``--copies`` 1 and 10 show whether the peak per worker stays flat as the corpus grows.

  python benchmarks/bench_beam_data_prep.py [--copies=4] [--vocab_file=...]
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SHARED = os.path.join(_ROOT, "..", "shared", "data")
flags.DEFINE_list("corpus_dirs", [os.path.join(_SHARED, "gutenberg"),
                                  os.path.join(_SHARED, "state_union")],
                  "Directories whose files form the corpus.")
flags.DEFINE_integer("copies", 4, "Times each corpus file is linked (a bigger corpus).")
flags.DEFINE_string("vocab_file", os.path.join(_ROOT, "tests", "golden", "vocab.txt"),
                    "WordPiece vocabulary.")
flags.DEFINE_string("child", None, "Internal: run one measurement (JSON arguments).")
FLAGS = flags.FLAGS


def _child(spec: dict) -> None:
  """One build in this process; prints its JSON measurement."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  from data_prep import beam_pretraining_dataset as beam_data
  from data_prep import build_pretraining_dataset as bpd

  common = dict(vocab_file=spec["vocab"], output_dir=spec["out"], max_seq_length=128,
                num_out_files=4, seed=1)
  start = time.time()
  if spec["kind"] == "builder":
    stats = bpd.build(bpd.BuildArgs(corpus_dir=spec["corpus"], num_processes=spec["jobs"],
                                    **common))
    tokens = sum(s.tokens for s in stats)
  else:
    totals = beam_data.build(beam_data.BeamArgs(input=spec["corpus"], num_jobs=spec["jobs"],
                                                **common),
                             [f"--direct_num_workers={spec['jobs']}"])
    tokens = totals["tokens"]
  seconds = time.time() - start
  own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
  print(json.dumps({"seconds": seconds, "tokens": tokens, "own_mb": own,
                    "child_mb": children}))


def _digest(out: str) -> str:
  h = hashlib.sha256()
  for name in sorted(os.listdir(out)):
    if name.startswith("pretrain_data.tfrecord-"):
      with open(os.path.join(out, name), "rb") as f:
        h.update(f.read())
  return h.hexdigest()[:12]


def _measure(kind: str, jobs: int, corpus: str, tmp: str) -> dict:
  out = os.path.join(tmp, f"{kind}-{jobs}")
  spec = {"kind": kind, "jobs": jobs, "corpus": corpus, "out": out, "vocab": FLAGS.vocab_file}
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                        capture_output=True, text=True, check=False)
  if proc.returncode:
    sys.exit(f"bench_beam_data_prep: {kind} with {jobs} job(s) failed: "
             f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  result["digest"] = _digest(out)
  # one job runs in the child itself (Beam: the DirectRunner in-process); with more, the
  # builder runs job 0 in the child and the others in spawned processes, Beam all of them in
  # worker processes
  if jobs == 1:
    worker_mb = result["own_mb"]
  elif kind == "builder":
    worker_mb = max(result["own_mb"], result["child_mb"])
  else:
    worker_mb = result["child_mb"]
  print(f"{kind:7s} {jobs} worker(s): {result['tokens']} tokens in {result['seconds']:.1f}s = "
        f"{result['tokens'] / result['seconds']:,.0f} tokens/s; peak memory per worker "
        f"{worker_mb:.0f} MB (submitting process {result['own_mb']:.0f} MB)", flush=True)
  return result


def main(argv):
  del argv
  if FLAGS.child:
    _child(json.loads(FLAGS.child))
    return
  with tempfile.TemporaryDirectory(prefix="bench-beam-") as tmp:
    corpus = os.path.join(tmp, "corpus")
    os.mkdir(corpus)
    n_bytes = 0
    for d in FLAGS.corpus_dirs:
      for name in sorted(os.listdir(d)):
        path = os.path.abspath(os.path.join(d, name))
        for c in range(FLAGS.copies):
          os.symlink(path, os.path.join(corpus, f"{c:02d}-{os.path.basename(d)}-{name}"))
          n_bytes += os.path.getsize(path)
    print(f"corpus: {len(os.listdir(corpus))} files, {n_bytes / 1e6:.1f} MB "
          f"({FLAGS.copies} copies of {', '.join(FLAGS.corpus_dirs)})")
    print(f"cpus: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f}", flush=True)
    builder1 = _measure("builder", 1, corpus, tmp)
    beam1 = _measure("beam", 1, corpus, tmp)
    builder2 = _measure("builder", 2, corpus, tmp)
    beam2 = _measure("beam", 2, corpus, tmp)
    print(f"identical shards: 1 job {builder1['digest'] == beam1['digest']}, "
          f"2 jobs {builder2['digest'] == beam2['digest']}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"beam / builder time = {beam1['seconds'] / builder1['seconds']:.2f}x")


if __name__ == "__main__":
  app.run(main)
