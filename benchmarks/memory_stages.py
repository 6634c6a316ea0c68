"""Where a pre-training variant's resident memory comes from, stage by stage.

Builds one variant of ``bench_pretrain.py`` (``ours`` or ``tfm``, the same shapes), then prints
after each stage (batch read, model built, loop traced, first call, 4 more steps) the process's
resident memory (``VmRSS``), its peak (``VmHWM``) and TensorFlow's own CPU allocator counters
(live tensors now and at their peak; the BFC allocator is switched on for this), and the op
count of the traced step. RSS well above the tensors' peak is graph, kernels and runtime, not
activations. Run each variant in its own process:

  python benchmarks/memory_stages.py --variant=ours
  python benchmarks/memory_stages.py --variant=tfm
"""

from __future__ import annotations

import os
import sys

os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"  # so get_memory_info("CPU:0") counts tensors
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_pretrain  # noqa: E402  (sets the environment before TensorFlow loads)
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

flags.DEFINE_enum("variant", "ours", ["ours", "tfm"], "Which step to build.")
FLAGS = flags.FLAGS


def report(stage: str) -> None:
  """One line: RSS, peak RSS, live tensor bytes now and at their peak (GiB)."""
  with open("/proc/self/status", encoding="ascii") as f:
    status = {line.split(":")[0]: int(line.split()[1]) / 2**20 for line in f
              if line.startswith(("VmRSS:", "VmHWM:"))}
  tensors = tf.config.experimental.get_memory_info("CPU:0")
  print(f"{FLAGS.variant:4s} {stage:14s} RSS {status['VmRSS']:.2f}  peak RSS "
        f"{status['VmHWM']:.2f}  tensors {tensors['current'] / 2**30:.2f}  tensor peak "
        f"{tensors['peak'] / 2**30:.2f} GiB", flush=True)


def traced_ops(runner) -> str:
  """Ops of the traced loop: outside the loop body and in its largest function (the step)."""
  loop = runner._loop
  for cell in getattr(loop, "__closure__", None) or ():  # ours wraps the Trainer's loop
    if hasattr(cell.cell_contents, "get_concrete_function"):
      loop = cell.cell_contents
  graph = loop.get_concrete_function(runner._iterator, tf.constant(2)).graph.as_graph_def()
  largest = max((len(f.node_def) for f in graph.library.function), default=0)
  return f"{len(graph.node)} ops outside the loop body, {largest} in its largest function"


def main(argv) -> None:
  del argv
  bench_pretrain.training.set_seed(1)
  report("start")
  batch = bench_pretrain.real_batch(FLAGS.batch_size, FLAGS.seq_length)
  report("batch")
  runner = (bench_pretrain.build_ours("ours", batch, False, None) if FLAGS.variant == "ours"
            else bench_pretrain.build_tfm(batch))
  report("built")
  ops = traced_ops(runner)
  report("traced")
  runner.warm_up()
  report("first call")
  runner.timed(4)
  report("4 more steps")
  print(f"{FLAGS.variant}: {ops}")


if __name__ == "__main__":
  app.run(main)
