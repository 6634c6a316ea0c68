"""Where the pre-training step's time goes: the TF profiler's op events, grouped.

Builds a variant of ``bench_pretrain.py`` (``ours``, ``ours_bf16``, ``ours_xla``,
``ours_xla_bf16``, ``ours_fused``, ``ours_fused_bf16`` or ``tfm``, the same shapes and batch),
warms it up, traces ``--steps`` steps with ``tf.profiler`` and reads the trace (the XPlane
file the trace viewer shows) back: the time of every TensorFlow op executed, grouped into
matmuls, dropout, GELU, LayerNorm, softmax, transposes, gathers / scatters, the optimizer's
per-variable ops, and the rest. Also printed: the wall time per step and the part of it in
which no op ran at all (executor and host gaps).

Op times add up across the two executor threads and overlap, so shares are of the summed op
time, not of the wall time.

  python benchmarks/profile_pretrain.py [--variant=ours] [--batch_size=16] [--steps=3]
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_pretrain  # noqa: E402  (sets the environment before TensorFlow loads)
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402
from profile_events import busy_time, op_events  # noqa: E402

from electra_tf.modeling import dropout  # noqa: E402

flags.DEFINE_enum("variant", "ours", ["ours", "ours_bf16", "ours_xla", "ours_xla_bf16",
                                      "ours_fused", "ours_fused_bf16", "tfm"],
                  "What to profile.")
flags.DEFINE_integer("top", 12, "Op types listed.")
flags.DEFINE_enum("dropout_mask_bits", "16", ["16", "32"], "Random bits per dropout mask "
                  "element (32: the float32 uniform draw before, electra_tf/modeling/dropout.py).")
FLAGS = flags.FLAGS

OPTIMIZER_SCOPES = ("AdamWeightDecay", "clip_by_global_norm", "Lamb")
XLA_TYPES = ("Execute", "XlaLaunch", "_XlaRun")  # an XLA program run from the graph
GATHER_TYPES = ("Gather", "Scatter", "SegmentSum", "OneHot", "Tile", "Slice")


def category(name: str, op_type: str) -> str:
  """The group of one executed op, from its type and its name scope (first rule that fits)."""
  if "MatMul" in op_type:
    return "matmuls"
  if op_type in XLA_TYPES:
    return "XLA-compiled (elementwise clusters, or the whole step)"
  if any(scope in name for scope in OPTIMIZER_SCOPES):
    return "optimizer (per-variable ops)"
  if op_type.startswith("StatelessRandom") or "dropout" in name.lower():
    return "dropout (RNG, masks)"
  if "LayerNorm" in name or "layer_norm" in name:
    return "LayerNorm"
  if "intermediate" in name:
    return "GELU (erf)"
  if "Softmax" in op_type or "softmax" in name.lower():
    return "softmax"
  if "Transpose" in op_type:
    return "transposes"
  if any(t in op_type for t in GATHER_TYPES):
    return "gathers / scatters"
  if op_type == "BiasAddGrad":
    return "bias gradients"
  return "other (losses, sampling, masking, residual adds)"


def main(argv) -> None:
  del argv
  bench_pretrain.training.set_seed(1)
  dropout.MASK_BITS = int(FLAGS.dropout_mask_bits)
  batch = bench_pretrain.real_batch(FLAGS.batch_size, FLAGS.seq_length)
  if FLAGS.variant == "tfm":
    runner = bench_pretrain.build_tfm(batch)
  else:
    runner = bench_pretrain.build_ours(FLAGS.variant, batch, "xla" in FLAGS.variant,
                                       "bfloat16" if FLAGS.variant.endswith("bf16") else None,
                                       xla_elementwise="fused" in FLAGS.variant)
  runner.warm_up()
  runner.timed(FLAGS.steps)  # untraced: the first full-length call
  logdir = tempfile.mkdtemp(prefix="profile_pretrain_")
  tf.profiler.experimental.start(logdir)
  start = time.perf_counter()
  runner.timed(FLAGS.steps)
  wall = time.perf_counter() - start
  tf.profiler.experimental.stop()
  events = list(op_events(logdir))
  by_category, by_type, count = collections.Counter(), collections.Counter(), collections.Counter()
  for name, op_type, _, duration in events:
    by_category[category(name, op_type)] += duration
    by_type[op_type] += duration
    count[op_type] += 1
  total = sum(by_category.values())
  busy = busy_time([(s, s + d) for _, _, s, d in events])
  steps = FLAGS.steps
  print(f"{FLAGS.variant}, {FLAGS.dropout_mask_bits}-bit dropout masks: ELECTRA-Small shapes, "
        f"{FLAGS.num_layers} layers, batch {FLAGS.batch_size} x {FLAGS.seq_length}, {steps} "
        f"traced steps, {os.cpu_count()} CPUs, "
        f"1-min load before: {os.getloadavg()[0]:.2f}")
  print(f"wall {wall / steps:.3f} s/step; no op running {(wall - busy) / steps:.3f} s/step "
        f"({100 * (wall - busy) / wall:.1f}%); op time {total / steps:.3f} s/step "
        f"({len(events) // steps} ops/step)")
  print("\ngroup                                              s/step   share of op time")
  for group, seconds in by_category.most_common():
    print(f"{group:50s} {seconds / steps:6.3f}   {100 * seconds / total:5.1f}%")
  print(f"\ntop {FLAGS.top} op types                              s/step   share   ops/step")
  for op_type, seconds in by_type.most_common(FLAGS.top):
    print(f"{op_type:50s} {seconds / steps:6.3f}   {100 * seconds / total:5.1f}%  "
          f"{count[op_type] // steps:6d}")


if __name__ == "__main__":
  app.run(main)
