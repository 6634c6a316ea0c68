"""Pre-training output heads with the official variable names.

- ``MaskedLMHead``: the official ``get_token_logits`` under ``generator_predictions`` (ELECTRA /
  MLM) or ``cloze_predictions`` (Electric): dense to the embedding width with ``hidden_act``,
  LayerNorm, then logits against the (tied) word-embedding table plus ``output_bias`` [V].
- ``DiscriminatorHead``: ``discriminator_predictions/dense`` [H, H] with ``hidden_act``, then
  ``dense_1`` [H, 1] (glorot init, as the official layer built without an initializer).
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from electra_tf import names
from electra_tf.modeling.encoder import Embeddings
from electra_tf.modeling.layers import (
  Dense,
  LayerNorm,
  ScopedLayer,
  activation_name,
  serializable,
  truncated_normal,
)


@serializable
class MaskedLMHead(ScopedLayer):
  """hidden [..., h] -> token logits [..., V]; output layer tied to the word embeddings."""

  def __init__(self, embeddings: Embeddings, hidden_act: str = "gelu",
               initializer_range: float = 0.02, scope: str = names.GENERATOR_HEAD, **kwargs):
    super().__init__(scope, **kwargs)
    self.embeddings = embeddings
    self.initializer_range = initializer_range
    self.dense = Dense(embeddings.embedding_size, names.join(scope, names.DENSE),
                       activation=hidden_act,
                       kernel_initializer=truncated_normal(initializer_range))
    self.layer_norm = LayerNorm(names.join(scope, names.LAYER_NORM))

  def build(self, input_shape):
    self.dense.build(input_shape)
    self.layer_norm.build([None, self.embeddings.embedding_size])
    self.output_bias = self.scoped_weight(names.OUTPUT_BIAS, [self.embeddings.vocab_size],
                                          "zeros")
    super().build(input_shape)

  def call(self, hidden: tf.Tensor) -> tf.Tensor:
    """[..., h] -> [..., V]."""
    x = self.layer_norm(self.dense(hidden))
    table = tf.cast(self.embeddings.word_embeddings, x.dtype)
    logits = tf.matmul(tf.reshape(x, [-1, tf.shape(x)[-1]]), table, transpose_b=True)
    logits = tf.nn.bias_add(logits, tf.cast(self.output_bias, x.dtype))
    return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [self.embeddings.vocab_size]], 0))

  def get_config(self) -> dict:
    """Includes the tied ``Embeddings`` layer's config (rebuilt, not shared, by from_config)."""
    return {**super().get_config(), "embeddings": tf_keras.layers.serialize(self.embeddings),
            "hidden_act": activation_name(self.dense.activation),
            "initializer_range": self.initializer_range}

  @classmethod
  def from_config(cls, config: dict) -> MaskedLMHead:
    return cls(**{**config, "embeddings": tf_keras.layers.deserialize(config["embeddings"])})


@serializable
class DiscriminatorHead(ScopedLayer):
  """sequence_output [B, T, H] -> replaced-token logits [B, T]."""

  def __init__(self, hidden_size: int, hidden_act: str = "gelu", initializer_range: float = 0.02,
               scope: str = names.DISCRIMINATOR_HEAD, **kwargs):
    super().__init__(scope, **kwargs)
    self.hidden_size = hidden_size
    self.initializer_range = initializer_range
    self.dense = Dense(hidden_size, names.join(scope, names.DENSE), activation=hidden_act,
                       kernel_initializer=truncated_normal(initializer_range))
    self.dense_1 = Dense(1, names.join(scope, names.DENSE_1))

  def build(self, input_shape):
    self.dense.build([None, self.hidden_size])
    self.dense_1.build([None, self.hidden_size])
    super().build(input_shape)

  def call(self, sequence_output: tf.Tensor) -> tf.Tensor:
    """[B, T, H] -> [B, T]."""
    return tf.squeeze(self.dense_1(self.dense(sequence_output)), -1)

  def get_config(self) -> dict:
    return {**super().get_config(), "hidden_size": self.hidden_size,
            "hidden_act": activation_name(self.dense.activation),
            "initializer_range": self.initializer_range}
