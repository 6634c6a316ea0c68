"""Dropout drawn from a seed, so that a resumed run draws the masks an uninterrupted one draws.

A Keras ``Dropout`` draws its masks from a stateful generator that restarts with the process.
Given an int [2] seed, ``dropout`` draws the mask with ``tf.nn.experimental.stateless_dropout``
instead: the same seed gives the same mask in any process. Each dropout site folds its own index
into the seed (``site_seed``), so no two sites of a step share a mask. Without a seed the layer
is called as usual (stateful masks).
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras


def site_seed(seed: tf.Tensor | None, site: int) -> tf.Tensor | None:
  """The int32 [2] seed of sub-site ``site`` under ``seed`` [2]; None stays None."""
  if seed is None:
    return None
  return tf.random.experimental.stateless_fold_in(seed, site)


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
    return tf.nn.experimental.stateless_dropout(x, layer.rate, seed=seed)

  if isinstance(training, bool):
    return dropped() if training else x
  return tf.cond(tf.cast(training, tf.bool), dropped, lambda: tf.identity(x))
