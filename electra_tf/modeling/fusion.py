"""XLA for a layer's elementwise work only; the matmuls stay with TensorFlow's kernels.

XLA on a CPU computes a bfloat16 matmul in float32 (it converts both operands), so compiling a
whole bfloat16 step gives up the CPU's bfloat16 units, where TensorFlow's oneDNN kernels use
them. The work between the matmuls (GELU, softmax + dropout, dropout + residual + LayerNorm) is
what XLA fuses well: with ``xla_elementwise`` on while a model is built, its transformer layers
run those pieces as small XLA-compiled functions during training (forward and backward); the
bias adds stay fused into oneDNN's matmuls (moving them and their gradients into XLA measured
slower). Inference, and training without
seeded dropout, take the usual path, unchanged.

The functions compute what the unfused layers compute; XLA's erf, exp and reductions round
differently from TensorFlow's kernels (float32 differences of about 1e-7 relative).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf

from electra_tf.modeling import dropout, layers

_ENABLED = [False]


def enabled() -> bool:
  """Whether layers made now fuse their elementwise work (read once, when a layer is made)."""
  return _ENABLED[0]


@contextlib.contextmanager
def xla_elementwise(on: bool) -> Iterator[None]:
  """Layers made inside the block fuse their elementwise work when ``on``."""
  before, _ENABLED[0] = _ENABLED[0], bool(on)
  try:
    yield
  finally:
    _ENABLED[0] = before


def _compiled(fn):
  return tf.function(fn, jit_compile=True, autograph=False)


gelu = _compiled(layers.gelu)  # exact (erf) GELU as one XLA kernel


@_compiled
def softmax_dropout(scores: tf.Tensor, adder: tf.Tensor, rate: float, seed: tf.Tensor,
                    dtype: str) -> tf.Tensor:
  """Attention probabilities: softmax(float32(scores) + adder) in ``dtype``, then dropout.

  scores [B, N, T, T] (already scaled), adder [B, 1, T or 1, T], seed int [2].
  """
  probs = tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32) + adder), dtype)
  return dropout.seeded_dropout(probs, rate, seed)


@_compiled
def dropout_add_norm(x: tf.Tensor, residual: tf.Tensor, rate: float, seed: tf.Tensor,
                     beta: tf.Tensor, gamma: tf.Tensor, epsilon: float) -> tf.Tensor:
  """LayerNorm(dropout(x) + residual): a post-LN block's closing step.

  x, residual [..., H]; beta, gamma [H].
  """
  return layers.layer_norm(dropout.seeded_dropout(x, rate, seed) + residual, beta, gamma, epsilon)
