"""A long pre-training run in one process: does resident memory grow, does the folder stay bounded?

A tiny ELECTRA (2 layers, hidden 64, sequence 32, batch 8) trains ``--steps`` steps on
TFRecords built from real text (Emma, ../shared/data), with a checkpoint every 1,000 steps
(``keep_checkpoint_max`` 5, the input state saved beside each) and, every ``--every`` steps,
the evaluation ``run_pretraining.py`` runs with ``do_eval`` (the Trainer's ``evaluate``: the
official metrics, eval TensorBoard events, the results file). The pre-training Trainer
evaluates only when training ends; here an interval hook makes that same call periodically, in
the training process, so one process goes many times through every path a long run takes.

Every ``--every`` steps one line: resident memory (``VmRSS``), the TensorBoard event files'
size, the checkpoints and input states kept. The last line: the growth of resident memory
after ``--warmup`` steps (least-squares slope, MiB per 1,000 steps) against the target of
1 MiB, and the checkpoints kept against ``keep_checkpoint_max``.

  nice -n 10 python benchmarks/soak.py [--steps 20000] [--every 1000] [--warmup 5000]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import glob
import logging
import os
import pathlib
import sys
import tempfile
import time
import tracemalloc
from collections import Counter

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from electra_tf import console, early_interrupt  # noqa: E402, I001 -- before TensorFlow loads

early_interrupt.install()
console.quiet_logs(sys.argv)
console.use_tf_keras()
logging.getLogger("absl").setLevel(logging.WARNING)  # the data build's and saves' INFO records

import numpy as np  # noqa: E402

from data_prep import build_pretraining_dataset as bpd  # noqa: E402
from electra_tf.pretraining import task  # noqa: E402
from electra_tf.reading import model_dir as model_files  # noqa: E402
from electra_tf.reading.model_source import pretraining_config  # noqa: E402
from electra_tf.training import checkpointing, input_state  # noqa: E402

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared"
TARGET_MIB = 1.0  # per 1,000 steps after warm-up
KEEP = 5
LIBC = ctypes.CDLL("libc.so.6")
TINY = {"model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2},
        "embedding_size": 64, "max_seq_length": 32, "train_batch_size": 8, "eval_batch_size": 8,
        "num_eval_steps": 10, "iterations_per_loop": 100, "save_checkpoints_steps": 1000,
        "keep_checkpoint_max": KEEP, "num_warmup_steps": 100, "seed": 1, "do_train": True,
        "do_eval": True}


def rss_mib() -> float:
  """This process's resident memory (VmRSS, MiB) after a garbage collection and malloc_trim,
  which hands freed heap pages back: what stays is live memory, not allocator slack."""
  gc.collect()
  LIBC.malloc_trim(0)
  with open("/proc/self/status", encoding="ascii") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def event_mib(model_dir: str) -> tuple[float, int]:
  """(MiB, count) of the TensorBoard event files under model_dir (training and eval)."""
  files = glob.glob(os.path.join(model_dir, "**", "events.out.tfevents.*"), recursive=True)
  return sum(os.path.getsize(f) for f in files) / 2**20, len(files)


def kept(model_dir: str) -> tuple[int, int]:
  """(complete checkpoints, input states) in model_dir."""
  states = glob.glob(os.path.join(model_dir, input_state.FOLDER, "ckpt-*"))
  return len(checkpointing.complete_checkpoints(model_dir)), len(states)


def build_data(root: pathlib.Path, chars: int) -> None:
  """root in the official data_dir layout, from the first `chars` characters of Emma."""
  corpus = root / "corpus"
  corpus.mkdir(parents=True)
  text = (SHARED / "data" / "gutenberg" / "austen-emma.txt").read_text(encoding="utf-8")
  (corpus / "emma.txt").write_text(text[:chars], encoding="utf-8")
  vocab = root / "vocab.txt"
  vocab.write_bytes((SHARED / "reference" / "vocab.txt").read_bytes())
  bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=str(vocab),
                          output_dir=str(root / "pretrain_tfrecords"), max_seq_length=32,
                          num_out_files=2, seed=1))


class Diagnosis:
  """--diagnose: what grew between two reports: Python allocation sites (tracemalloc) and live
  Python objects by type (gc), the five largest increases of each."""

  def __init__(self):
    tracemalloc.start(8)
    self._snapshot, self._types = tracemalloc.take_snapshot(), self._count()
    self._functions = self._function_count()

  @staticmethod
  def _function_count() -> int:
    """Functions registered in the eager context (traced tf.functions, tf.data functions)."""
    from tensorflow.python.eager import context  # no public API lists them

    return len(context.context().list_function_names())

  @staticmethod
  def _count() -> Counter:
    return Counter(type(o).__qualname__ for o in gc.get_objects())

  def report(self) -> None:
    snapshot, types = tracemalloc.take_snapshot(), self._count()
    for stat in snapshot.compare_to(self._snapshot, "traceback")[:5]:
      if stat.size_diff > 0:
        print(f"    +{stat.size_diff / 1024:7.1f} KiB in {stat.count_diff:+d} blocks at "
              + " <- ".join(f"{pathlib.Path(f.filename).name}:{f.lineno}"
                            for f in list(stat.traceback)[::-1][:4]))
    grown = sorted(((n - self._types[t], t) for t, n in types.items()), reverse=True)[:5]
    functions = self._function_count()
    print(f"    functions in the eager context: {functions} ({functions - self._functions:+d}); "
          "objects: " + ", ".join(f"{t} {d:+d}" for d, t in grown if d > 0))
    self._snapshot, self._types, self._functions = snapshot, types, functions


def cpu() -> str:
  with open("/proc/cpuinfo", encoding="utf-8") as f:
    name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                "unknown CPU")
  return f"{name}, {os.cpu_count()} cores"


def growth(points: list[tuple[int, float]], warmup: int) -> float:
  """Least-squares slope of resident memory over the steps after warm-up, MiB / 1,000 steps."""
  after = [(s, m) for s, m in points if s > warmup]
  if len(after) < 2:
    raise SystemExit(f"soak: fewer than 2 reports after --warmup {warmup}; train longer")
  steps, mib = np.array(after, dtype=float).T
  return float(np.polyfit(steps, mib, 1)[0] * 1000)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--steps", type=int, default=20000)
  p.add_argument("--every", type=int, default=1000, help="steps between evaluations/reports")
  p.add_argument("--warmup", type=int, default=5000, help="steps left out of the growth")
  p.add_argument("--chars", type=int, default=200000, help="characters of Emma to train on")
  p.add_argument("--diagnose", action="store_true",
                 help="print what grew between reports (slower; the memory figures include it)")
  p.add_argument("--out_dir", help="data and model folder (default: a new temporary folder)")
  args = p.parse_args()
  if args.every % TINY["iterations_per_loop"]:
    p.error(f"--every must be a multiple of {TINY['iterations_per_loop']} (the log interval)")
  root = pathlib.Path(args.out_dir or tempfile.mkdtemp(prefix="soak-"))
  if not (root / "pretrain_tfrecords").is_dir():
    build_data(root, args.chars)
  print(f"soak: {args.steps} steps in {root} on {cpu()}", flush=True)
  config = pretraining_config("soak", str(root), {**TINY, "num_train_steps": args.steps})
  quiet = lambda line: None if line[:1].isdigit() or line.startswith("Saved") else print(line)  # noqa: E731
  run = task.build_run(config, log_fn=quiet)
  start = run.trainer.restore_or_initialize()
  model_files.write_model_files(config.model_dir, config, config.vocab_file)
  skip = task.consumed_steps(config, start, print)
  stream = input_state.plan(
      config.model_dir, start, skip, task.stream_signature(config), run.trainer.strategy,
      config.train_batch_size, lambda n: task.dataset_fn(config, True, config.seed, n), print)
  eval_step = task.eval_step_fn(run.model, run.eval_metrics)  # one step function: one trace
  points: list[tuple[int, float]] = []
  most = [0, 0]  # the most checkpoints and input states seen at once
  diagnosis: list[Diagnosis] = []  # started at the first report: tracing is slow under it
  began = time.perf_counter()

  def evaluate_and_report(step: int, logged: dict) -> None:
    if step % args.every:
      return
    results = run.trainer.evaluate(
        task.dataset_fn(config, False, config.seed), config.num_eval_steps, step_fn=eval_step,
        metrics=run.eval_metrics, results_file=config.results_txt)
    mib, (events, files), now = rss_mib(), event_mib(config.model_dir), kept(config.model_dir)
    points.append((step, mib))
    most[:] = map(max, most, now)
    print(f"step {step:6d}  RSS {mib:7.1f} MiB  events {events:6.3f} MiB in {files} files  "
          f"checkpoints kept {now[0]}, input states {now[1]}  eval loss {results['loss']:.3f}  "
          f"{time.perf_counter() - began:5.0f} s", flush=True)
    if diagnosis:
      diagnosis[0].report()
    elif args.diagnose:
      diagnosis.append(Diagnosis())

  run.trainer.interval_hooks += (evaluate_and_report,)
  run.trainer.train(task.dataset_fn(config, True, config.seed, stream.skip_steps),
                    metrics=run.train_metrics, input_state=stream)
  final = kept(config.model_dir)
  most[:] = map(max, most, final)
  saves = -(-args.steps // config.save_checkpoints_steps)  # every 1,000 steps and the last
  expected = min(KEEP, saves)
  slope = growth(points, args.warmup)
  ok = slope <= TARGET_MIB and final == (expected, expected) and max(most) <= KEEP
  print(f"soak: memory growth after step {args.warmup}: {slope:+.2f} MiB per 1,000 steps "
        f"(target <= {TARGET_MIB:g}); checkpoints kept {final[0]}, input states {final[1]}, at "
        f"most {max(most)} (keep_checkpoint_max {KEEP}): {'target met' if ok else 'TARGET MISSED'}")


if __name__ == "__main__":
  main()
