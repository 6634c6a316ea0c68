"""Dropout drawn from a seed, so that a resumed run draws the masks an uninterrupted one draws.

A Keras ``Dropout`` draws its masks from a stateful generator that restarts with the process.
Given an int [2] seed, ``dropout`` draws the mask statelessly instead: the same seed gives the
same mask in any process. Each dropout site folds its own index into the seed (``site_seed``),
so no two sites of a step share a mask. Without a seed the layer is called as usual (stateful
masks, as the official ``tf.nn.dropout``).

The seeded mask costs 16 random bits per element (``MASK_BITS`` 16): one uint32 draw gives two
keep decisions, its low and high halves each compared with ``round(keep_prob * 2**16)`` (see
``keep_mask``; bit operations only, so the mask is the same on any platform), so the
keep probability is off by at most 2**-17 = 7.6e-6 (``keep_probability``); a float32 uniform
per element (``MASK_BITS = 32``: ``tf.nn.experimental.stateless_dropout``, the draw before, like
the official ``tf.nn.dropout``'s) costs twice the random bits and a float conversion per element;
on a CPU it made dropout a fifth of a bfloat16 step's op time (docs/performance.md).
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

MASK_BITS = 16  # 32: tf.nn.experimental.stateless_dropout's float32 uniform per element
_LEVELS = 2**16


def site_seed(seed: tf.Tensor | None, site: int) -> tf.Tensor | None:
  """The int32 [2] seed of sub-site ``site`` under ``seed`` [2]; None stays None."""
  if seed is None:
    return None
  return tf.random.experimental.stateless_fold_in(seed, site)


def keep_threshold(rate: float) -> int:
  """The 16-bit keep threshold of ``rate``: keep an element when its 16 bits are below it."""
  return min(round((1.0 - rate) * _LEVELS), _LEVELS)


def keep_probability(rate: float) -> float:
  """The keep probability the 16-bit masks of ``rate`` have (within 2**-17 of 1 - rate)."""
  return keep_threshold(rate) / _LEVELS


def keep_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
  """bool mask of ``shape`` [..., n], True with probability ``keep_probability(rate)``.

  One uint32 draw of shape [..., ceil(n / 2)] from ``seed`` [2] decides two elements: its low
  16 bits the first half of the last axis, its high 16 bits the second half (then cut to n).
  """
  threshold = keep_threshold(rate)
  if threshold == _LEVELS:
    return tf.ones(shape, tf.bool)
  n = shape[-1]
  bits = tf.random.stateless_uniform(tf.concat([shape[:-1], [(n + 1) // 2]], 0), _portable(seed),
                                     minval=None, maxval=None, dtype=tf.uint32)
  below = tf.constant(threshold * _LEVELS, tf.uint32)
  low = tf.bitwise.left_shift(bits, tf.constant(16, tf.uint32)) < below  # low 16 bits < threshold
  keep = tf.concat([low, bits < below], -1)
  return keep if isinstance(n, int) and n % 2 == 0 else keep[..., :n]


def _portable(seed: tf.Tensor) -> tf.Tensor:
  """``seed`` [2] as int64 in [0, 2**32): the same draws with and without XLA.

  TensorFlow's kernels sign-extend a negative int32 seed, XLA zero-extends it (other bits for
  the same seed); both read a non-negative seed alike.
  """
  return tf.bitwise.bitwise_and(tf.cast(seed, tf.int64), tf.constant(0xFFFFFFFF, tf.int64))


def _shape(x: tf.Tensor) -> tf.Tensor | list:
  """``x``'s shape: the static list when fully known (lets ``keep_mask`` skip a cut)."""
  static = x.shape.as_list() if x.shape.rank is not None else None
  return static if static is not None and None not in static else tf.shape(x)


def seeded_dropout(x: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
  """``x`` with elements zeroed at ``rate`` and the rest scaled by 1 / keep probability."""
  if MASK_BITS == 32:
    return tf.nn.experimental.stateless_dropout(x, rate, seed=seed)
  with tf.name_scope("seeded_dropout"):
    keep = keep_mask(_shape(x), rate, seed)
    scale = tf.cast(1.0 / keep_probability(rate), x.dtype)
    return tf.where(keep, x * scale, tf.zeros_like(x))


def dropout(layer: tf_keras.layers.Dropout, x: tf.Tensor, training: bool | tf.Tensor | None,
            seed: tf.Tensor | None) -> tf.Tensor:
  """``layer(x, training=training)``, or with ``seed`` [2] the same rate drawn statelessly.

  Eval (``training`` false or None) and a rate of 0 return ``x`` itself, as the layer does.
  """
  if seed is None:
    return layer(x, training=training)
  if training is None or layer.rate == 0:
    return x

  def dropped() -> tf.Tensor:
    return seeded_dropout(x, layer.rate, seed)

  if isinstance(training, bool):
    return dropped() if training else x
  return tf.cond(tf.cast(training, tf.bool), dropped, lambda: tf.identity(x))
