"""The fastest a pre-training step can be on this machine if only its matmuls ran.

Lists every matmul of one ELECTRA pre-training step (forward and both backward products of
each dense layer and attention product, generator and discriminator towers, the generator's
MLM head at the masked positions and the discriminator head; the same shapes as
``bench_pretrain.py``) and runs exactly those matmuls, nothing else, in one ``tf.function``
on random float32 operands: the executor may overlap independent matmuls, as it does in the
real step. That time is a floor for any step built from TensorFlow's CPU matmul kernels; the
time of tf-models' full step, measured in the same run, over that floor is the largest
ours / tfm ratio such a step could show even if dropout, GELU, LayerNorm, softmax, the losses
and the optimizer cost nothing. ``--dtype=bfloat16`` does the same for bfloat16 matmuls
(against tf-models in float32, as in ``bench_pretrain.py``'s bf16 line).

  python benchmarks/matmul_floor.py [--batch_size=16] [--dtype=float32]

Last line: ``floor ratio tfm step / matmul floor = N.NNx``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_pretrain  # noqa: E402  (sets the environment before TensorFlow loads)
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Matmul operand type.")
flags.DEFINE_integer("max_predictions", 19, "Masked positions per sequence (MLM head rows).")
flags.DEFINE_integer("vocab_size", 30522, "Vocabulary (the MLM head's output width).")
FLAGS = flags.FLAGS

Shape = tuple  # (batch dims..., m, k, n): [..., m, k] x [..., k, n]


def dense_products(m: int, k: int, n: int) -> list[Shape]:
  """y = x W ([m, k] x [k, n]) and its two gradients: dx = dy W^T, dW = x^T dy."""
  return [(m, k, n), (m, n, k), (k, m, n)]


def attention_products(b: int, heads: int, t: int, d: int) -> list[Shape]:
  """scores = q k^T, context = p v, and the two gradients of each."""
  out = []
  for m, k, n in ((t, d, t), (t, t, d)):
    out += [(b, heads, m, k, n), (b, heads, m, n, k), (b, heads, k, m, n)]
  return out


def tower_products(b: int, t: int, hidden: int, heads: int, inter: int, layers: int,
                   embedding: int) -> list[Shape]:
  """Every matmul of one transformer tower's forward and backward pass."""
  n = b * t
  out = dense_products(n, embedding, hidden) if embedding != hidden else []
  for _ in range(layers):
    for _ in range(4):  # query, key, value, attention output
      out += dense_products(n, hidden, hidden)
    out += dense_products(n, hidden, inter) + dense_products(n, inter, hidden)
    out += attention_products(b, heads, t, hidden // heads)
  return out


def step_products(b: int, t: int, layers: int) -> list[Shape]:
  """The pre-training step's matmuls at ELECTRA-Small shapes (``bench_pretrain``'s model)."""
  hidden, heads, embedding = bench_pretrain.HIDDEN, bench_pretrain.HEADS, bench_pretrain.EMBEDDING
  gen_hidden = int(hidden * bench_pretrain.GEN_FRACTION)
  gen_heads = max(1, gen_hidden // 64)
  masked = b * FLAGS.max_predictions
  return (tower_products(b, t, gen_hidden, gen_heads, 4 * gen_hidden, layers, embedding)
          + dense_products(masked, gen_hidden, embedding)  # generator MLM transform
          + dense_products(masked, embedding, FLAGS.vocab_size)  # tied output embedding
          + tower_products(b, t, hidden, heads, 4 * hidden, layers, embedding)
          + dense_products(b * t, hidden, hidden) + dense_products(b * t, hidden, 1))


def flops_of(shapes: list[Shape]) -> float:
  total = 0.0
  for shape in shapes:
    *batch, m, k, n = shape
    size = 1
    for d in batch:
      size *= d
    total += 2.0 * size * m * k * n
  return total


def matmul_only_step(shapes: list[Shape], dtype: tf.DType):
  """A tf.function running one matmul per shape (operands made once, outside the timing)."""
  operands = []
  for i, (*batch, m, k, n) in enumerate(shapes):
    a = tf.cast(tf.random.stateless_normal([*batch, m, k], [i, 0]), dtype)
    w = tf.cast(tf.random.stateless_normal([*batch, k, n], [i, 1]), dtype)
    operands.append((tf.Variable(a), tf.Variable(w)))

  @tf.function
  def run():
    # One element per product keeps every matmul alive and independent of the others.
    return tf.add_n([tf.cast(tf.reshape(tf.matmul(a, w), [-1])[0], tf.float32)
                     for a, w in operands])

  return run


def main(argv) -> None:
  del argv
  dtype = tf.as_dtype(FLAGS.dtype)
  shapes = step_products(FLAGS.batch_size, FLAGS.seq_length, FLAGS.num_layers)
  print(f"{len(shapes)} matmuls, {flops_of(shapes) / 1e9:.1f} GFLOP per step "
        f"(batch {FLAGS.batch_size} x {FLAGS.seq_length}, {FLAGS.num_layers} layers, "
        f"{FLAGS.dtype}), TF {tf.__version__}, {os.cpu_count()} CPUs", flush=True)
  run = matmul_only_step(shapes, dtype)
  run().numpy()
  batch = bench_pretrain.real_batch(FLAGS.batch_size, FLAGS.seq_length)
  tfm = bench_pretrain.build_tfm(batch)
  tfm.warm_up()
  floors = []
  for _ in range(FLAGS.repeats):
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
      run().numpy()
    floors.append((time.perf_counter() - start) / FLAGS.steps)
    tfm.timed(FLAGS.steps)
  floor = statistics.median(floors)
  tfm_step = FLAGS.batch_size / statistics.median(tfm.rates)
  print(f"matmul floor {floor:.3f} s/step ({flops_of(shapes) / floor / 1e9:.0f} GFLOP/s; "
        f"repetitions: {', '.join(f'{x:.3f}' for x in floors)})")
  print(f"tfm step     {tfm_step:.3f} s/step ({statistics.median(tfm.rates):.2f} examples/s)")
  print(f"floor ratio tfm step / matmul floor = {tfm_step / floor:.2f}x")


if __name__ == "__main__":
  app.run(main)
