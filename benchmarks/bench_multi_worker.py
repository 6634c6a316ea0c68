"""Pre-training throughput on 1 worker vs 2 workers (MultiWorkerMirroredStrategy over loopback).

Runs the real entry point, ``run_pretraining.py``, twice on the same TFRecords (real text:
wikitext-2 test, WordPiece, ``--seq_length``) at the same global batch (``--batch_size``):
  - 1 worker: ``--distribution_strategy one_device``, one process, batch B;
  - 2 workers: ``--distribution_strategy multi_worker_mirrored``, two processes on this
    machine (TF_CONFIG, workers on free 127.0.0.1 ports), each with batch B/2; every step
    all-reduces the gradients between them over gRPC.
Model: ELECTRA-Small shapes (discriminator hidden 256, ``--num_layers`` layers, 4 heads,
embedding 128, vocabulary 30522; generator 1/4 of the width), dropout 0.1, float32.

Throughput is the steady rate the run logs (``SPS`` of the last progress line: steps after the
first log interval, which holds the tracing) times the global batch; for 2 workers, the chief's
(worker 0). Over the same steps it reports how many CPU cores the worker processes kept busy
(their user + system CPU time / wall time, from /proc). Then, to show what one step's
communication costs, 2 workers time an all-reduce (sum) of a float32 tensor as large as the
model's trainable weights (= its gradients, read from the 1-worker run's checkpoint), median of
``--allreduce_repeats``. The last line is the ratio of the two throughputs.

  python benchmarks/bench_multi_worker.py [--batch_size=16] [--num_layers=12] [--steps=6]
  python benchmarks/bench_multi_worker.py --only_allreduce=14196219   # ELECTRA-Small's weights
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SPS = re.compile(r"^(\d+)/(\d+) = .*SPS: ([0-9.]+)")
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}


def build_data(data_dir: pathlib.Path, shared: pathlib.Path, seq_length: int, mb: float) -> None:
  """data_dir/vocab.txt and 2 TFRecord shards (one per worker) of wikitext-2 test text."""
  from data_prep import build_pretraining_dataset as bpd

  corpus = data_dir / "corpus"
  corpus.mkdir(parents=True)
  with open(shared / "data" / "wikitext2" / "wiki.test.raw", encoding="utf-8") as f:
    (corpus / "wiki.txt").write_text(f.read(int(mb * 2**20)), encoding="utf-8")
  (data_dir / "vocab.txt").write_bytes((shared / "reference" / "vocab.txt").read_bytes())
  bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=str(data_dir / "vocab.txt"),
                          output_dir=str(data_dir / "pretrain_tfrecords"),
                          max_seq_length=seq_length, num_out_files=2, seed=1))


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def steady_rate(log: str, steps: int) -> float:
  """Steps/s of the last progress line (the run's steady rate), which must be step ``steps``."""
  found = [m for m in map(SPS.match, log.splitlines()) if m]
  if not found or int(found[-1].group(1)) != steps:
    raise RuntimeError(f"no progress line for step {steps} in the run's output:\n{log[-3000:]}")
  return float(found[-1].group(3))


def launch(argv: list[str], workers: int) -> list[subprocess.Popen]:
  """``workers`` processes of ``argv``; more than one: a loopback cluster through TF_CONFIG."""
  pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
  if workers == 1:
    return [subprocess.Popen(argv, env=ENV, **pipes)]
  hosts = [f"127.0.0.1:{free_port()}" for _ in range(workers)]
  return [subprocess.Popen(argv, env={**ENV, "TF_CONFIG": json.dumps(
      {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}})}, **pipes)
          for i in range(workers)]


def finish(procs: list[subprocess.Popen], name: str) -> list[str]:
  logs = [p.communicate()[0] for p in procs]
  for p, log in zip(procs, logs, strict=True):
    if p.returncode:
      raise RuntimeError(f"{name}: exit {p.returncode}:\n{log[-3000:]}")
  return logs


def cpu_seconds(procs: list[subprocess.Popen]) -> float:
  """User + system CPU seconds the processes used so far (Linux /proc; 0 elsewhere)."""
  total = 0.0
  for p in procs:
    try:
      fields = pathlib.Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
      return 0.0
    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
  return total


def run(data_dir: pathlib.Path, name: str, hparams: dict, workers: int) -> tuple[float, float]:
  """(steady global steps/s, CPU cores the worker processes kept busy meanwhile) of
  run_pretraining.py on ``workers`` processes (1 or 2)."""
  args = [sys.executable, str(REPO / "run_pretraining.py"), f"--data_dir={data_dir}",
          f"--model_name={name}", f"--hparams={json.dumps(hparams)}", "--check_data=false"]
  strategy = "one_device" if workers == 1 else "multi_worker_mirrored"
  procs = launch(args + [f"--distribution_strategy={strategy}"], workers)
  marks, lines = [], []
  for line in procs[0].stdout:  # progress lines as they come (the run flushes each)
    lines.append(line)
    if SPS.match(line):
      marks.append((time.perf_counter(), cpu_seconds(procs)))
  logs = finish(procs, name)
  (t0, c0), (t1, c1) = marks[0], marks[-1]
  return steady_rate("".join(lines) + logs[0], hparams["num_train_steps"]), (c1 - c0) / (t1 - t0)


def num_weights(model_dir: pathlib.Path) -> int:
  """Number of model weights (float32 gradients per step) in the latest checkpoint."""
  import numpy as np
  import tensorflow as tf

  return sum(int(np.prod(shape)) for name, shape in
             tf.train.list_variables(tf.train.latest_checkpoint(str(model_dir)))
             if name.startswith("model/"))


def allreduce_worker(size: int, repeats: int) -> None:
  """One worker of the all-reduce timing: prints the median seconds of a sum of ``size``
  float32 values over the cluster of TF_CONFIG."""
  import statistics

  import tensorflow as tf

  strategy = tf.distribute.MultiWorkerMirroredStrategy()

  def replica_fn():
    return tf.distribute.get_replica_context().all_reduce("sum", tf.ones([size], tf.float32))

  @tf.function
  def reduce():
    return strategy.experimental_local_results(strategy.run(replica_fn))[0][0]

  reduce().numpy()  # warm-up: tracing, collective group setup
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    reduce().numpy()
    seconds.append(time.perf_counter() - start)
  print(f"allreduce_seconds {statistics.median(seconds)}", flush=True)


def allreduce_seconds(size: int, repeats: int) -> float:
  argv = [sys.executable, __file__, f"--allreduce_worker={size}",
          f"--allreduce_repeats={repeats}"]
  log = finish(launch(argv, 2), "all-reduce")[0]
  return float(re.search(r"allreduce_seconds ([0-9.e-]+)", log).group(1))


def report_allreduce(size: int, repeats: int) -> None:
  seconds = allreduce_seconds(size, repeats)
  print(f"all-reduce of {size / 1e6:.1f}M float32 ({size * 4 / 2**20:.0f} MiB) between 2 workers "
        f"over loopback: {seconds:.3f} s", flush=True)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--shared", default=str(REPO.parent / "shared"),
                 help="folder with data/wikitext2 and reference/vocab.txt")
  p.add_argument("--batch_size", type=int, default=16, help="global batch (both setups)")
  p.add_argument("--seq_length", type=int, default=128)
  p.add_argument("--num_layers", type=int, default=12, help="layers of both towers")
  p.add_argument("--steps", type=int, default=6, help="steps per run (the first 2 untimed)")
  p.add_argument("--text_mb", type=float, default=0.5, help="MB of wikitext-2 text to use")
  p.add_argument("--allreduce_repeats", type=int, default=5)
  p.add_argument("--only_allreduce", type=int, default=0,
                 help="only time the all-reduce, of this many float32 values")
  p.add_argument("--allreduce_worker", type=int, default=0, help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.allreduce_worker:
    allreduce_worker(args.allreduce_worker, args.allreduce_repeats)
    return
  if args.only_allreduce:
    report_allreduce(args.only_allreduce, args.allreduce_repeats)
    return
  hparams = {"model_size": "small",
             "model_hparam_overrides": {"num_hidden_layers": args.num_layers},
             "max_seq_length": args.seq_length, "train_batch_size": args.batch_size,
             "num_train_steps": args.steps, "iterations_per_loop": 2,
             "save_checkpoints_steps": args.steps, "num_warmup_steps": 0, "seed": 1}
  with tempfile.TemporaryDirectory(prefix="bench_multi_worker_") as tmp:
    data_dir = pathlib.Path(tmp)
    build_data(data_dir, pathlib.Path(args.shared), args.seq_length, args.text_mb)
    print(f"ELECTRA-Small shapes, {args.num_layers} layers, sequence {args.seq_length}, global "
          f"batch {args.batch_size}, {args.steps} steps (rate over steps 3-{args.steps}), "
          f"{os.cpu_count()} CPU cores", flush=True)
    rates = {}
    for workers in (1, 2):
      steps_per_second, cores = run(data_dir, f"workers{workers}", hparams, workers)
      rates[workers] = steps_per_second * args.batch_size
      per = args.batch_size // workers
      print(f"{workers} worker(s) x batch {per}: {rates[workers]:.2f} examples/s "
            f"({1 / steps_per_second:.2f} s/step, {cores:.2f} CPU cores busy = "
            f"{cores / steps_per_second:.2f} CPU s/step)", flush=True)
    size = num_weights(data_dir / "models" / "workers1")
  report_allreduce(size, args.allreduce_repeats)
  print(f"2 workers / 1 worker = {rates[2] / rates[1]:.2f}x")


if __name__ == "__main__":
  main()
