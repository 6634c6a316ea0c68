"""Where fine-tuning's time goes: a train step, or a batch-1 ``classify`` call, profiled.

Builds the variants of ``bench_finetune.py`` (the same shapes, batch and real token ids), warms
them up, traces them with ``tf.profiler`` and reads the trace back (as
``profile_pretrain.py``): the time of every TensorFlow op executed, by op type, per step or call.

- ``--mode=train``: ``--steps`` train steps of ``--variant`` (``ours``, ``ours_bf16``, ``tfm``)
  at ``--shape``;
- ``--mode=latency``: ``--calls`` batch-1 calls of our ``classify`` function (as the SavedModel
  export builds it) and of tf-models' classifier, each traced on its own.

Op times add up across the executor threads, so shares are of the summed op time; "no op
running" is the part of the wall time in which no op ran (executor and host gaps).

  python benchmarks/profile_finetune.py --mode=latency [--shape=small] [--calls=20]
  python benchmarks/profile_finetune.py --mode=train --shape=base --variant=ours --steps=1
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_finetune as bench  # noqa: E402  (sets the environment before TensorFlow loads)
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402
from profile_events import busy_time, op_events  # noqa: E402

from electra_tf.interop.finetuned_saved_model import FinetunedExport  # noqa: E402

flags.DEFINE_enum("mode", "latency", ["latency", "train"], "What to profile.")
flags.DEFINE_enum("shape", "small", ["small", "base"], "Model shapes.")
flags.DEFINE_enum("variant", "ours", ["ours", "ours_bf16", "tfm"], "Train step profiled.")
flags.DEFINE_integer("calls", 20, "Traced batch-1 calls per latency variant.")
flags.DEFINE_integer("top", 12, "Op types listed.")
FLAGS = flags.FLAGS


def profile(name: str, run, n: int, unit: str) -> None:
  """Traces ``n`` calls of ``run`` (one call = one ``unit``) and prints the op time by type."""
  logdir = tempfile.mkdtemp(prefix="profile_finetune_")
  tf.profiler.experimental.start(logdir)
  start = time.perf_counter()
  for _ in range(n):
    run()
  wall = time.perf_counter() - start
  tf.profiler.experimental.stop()
  events = list(op_events(logdir))
  by_type, count = collections.Counter(), collections.Counter()
  for _, op_type, _, duration in events:
    by_type[op_type] += duration
    count[op_type] += 1
  total = sum(by_type.values())
  busy = busy_time([(s, s + d) for _, _, s, d in events])
  ms = 1000 / n
  print(f"\n{name}: wall {wall * ms:.2f} ms/{unit}; no op running {(wall - busy) * ms:.2f} "
        f"ms/{unit} ({100 * (wall - busy) / wall:.1f}%); op time {total * ms:.2f} ms/{unit} "
        f"({len(events) // n} ops/{unit})")
  for op_type, seconds in by_type.most_common(FLAGS.top):
    print(f"  {op_type:40s} {seconds * ms:8.2f} ms  {100 * seconds / total:5.1f}%  "
          f"{count[op_type] // n:5d} ops")


def main(argv) -> None:
  del argv
  bench.training.set_seed(1)
  size = FLAGS.batch_size if FLAGS.mode == "train" else 1
  batch = bench.real_batch(size, FLAGS.seq_length)
  config = bench.finetuning_config(FLAGS.shape)
  print(f"{FLAGS.mode}, {FLAGS.shape} shapes, {FLAGS.num_layers} layers, batch {size} x "
        f"{FLAGS.seq_length}, {os.cpu_count()} CPUs, 1-min load before: "
        f"{os.getloadavg()[0]:.2f}")
  if FLAGS.mode == "train":
    if FLAGS.variant == "tfm":
      runner = bench.Tfm(config, batch).train_runner()
    else:
      runner = bench.Ours(config, batch, FLAGS.variant).train_runner()
    runner.warm_up()
    runner.timed(FLAGS.steps)
    profile(FLAGS.variant, lambda: runner.timed(1), FLAGS.steps, "step")
    return
  ours = bench.Ours(config, batch)
  classify = FinetunedExport(ours.model, ours.tasks).classify
  ids = [tf.constant(batch[k][:1]) for k in bench.IDS]
  model = bench.Tfm(config, batch).model

  @tf.function
  def tfm_classify(inputs):
    logits = model(inputs, training=False)
    return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

  tfm_inputs = dict(zip(("input_word_ids", "input_mask", "input_type_ids"), ids, strict=True))
  calls = {"ours classify": lambda: tf.nest.map_structure(lambda t: t.numpy(), classify(*ids)),
           "tfm BertClassifier": lambda: tf.nest.map_structure(lambda t: t.numpy(),
                                                               tfm_classify(tfm_inputs))}
  for call in calls.values():
    for _ in range(3):
      call()
  for name, call in calls.items():
    profile(name, call, FLAGS.calls, "call")


if __name__ == "__main__":
  app.run(main)
