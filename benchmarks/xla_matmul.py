"""One matmul with and without XLA, in float32 and bfloat16: what XLA's CPU backend does with it.

Times the fastest of ten [n, n] x [n, n] products (TensorFlow's kernel, then the same product in
a ``jit_compile`` function) in each dtype, and reads the compiled program (optimized HLO) to say
in which type XLA computes the bfloat16 product. On a CPU it converts both bfloat16 operands to
float32 and multiplies in float32, which is why ``--jit_compile`` makes a bfloat16 step slower
where the CPU has bfloat16 units, and why ``--xla_elementwise`` leaves the matmuls to
TensorFlow's kernels (docs/performance.md).

  python benchmarks/xla_matmul.py [--n=1024]

Last line: ``bfloat16 matmul, XLA / TensorFlow's kernel = N.NNx``.
"""

from __future__ import annotations

import os
import re
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

flags.DEFINE_integer("n", 1024, "Matrix size.")
FLAGS = flags.FLAGS


def rate(fn, a: tf.Tensor, b: tf.Tensor) -> float:
  """GFLOP/s of the fastest of ten calls."""
  fn(a, b).numpy()
  best = float("inf")
  for _ in range(10):
    start = time.perf_counter()
    fn(a, b).numpy()
    best = min(best, time.perf_counter() - start)
  return 2 * FLAGS.n**3 / best / 1e9


def main(argv) -> None:
  del argv
  n = FLAGS.n
  rates = {}
  for dtype in (tf.float32, tf.bfloat16):
    a = tf.cast(tf.random.stateless_normal([n, n], [1, 2]), dtype)
    b = tf.cast(tf.random.stateless_normal([n, n], [3, 4]), dtype)
    for jit in (False, True):
      fn = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=jit, autograph=False)
      rates[dtype.name, jit] = rate(fn, a, b)
      print(f"{dtype.name:8s} {'XLA' if jit else 'TensorFlow kernel':17s} "
            f"{rates[dtype.name, jit]:7.1f} GFLOP/s", flush=True)
      if jit and dtype == tf.bfloat16:
        hlo = fn.experimental_get_compiler_ir(a, b)(stage="optimized_hlo")
        dots = re.findall(r"= (\w+)\[[\d,]+\][^=]*? dot\(", hlo)
        print(f"XLA's compiled bfloat16 product: dot in {', '.join(dots) or '?'}"
              f"{', operands converted to f32' if 'f32' in dots else ''}")
  print(f"bfloat16 matmul, XLA / TensorFlow's kernel = "
        f"{rates['bfloat16', True] / rates['bfloat16', False]:.2f}x")


if __name__ == "__main__":
  app.run(main)
