"""Pre-training output heads with the official variable names.

- ``MaskedLMHead``: the official ``get_token_logits`` under ``generator_predictions`` (ELECTRA /
  MLM) or ``cloze_predictions`` (Electric): dense to the embedding width with ``hidden_act``,
  LayerNorm, then logits against the (tied) word-embedding table plus ``output_bias`` [V].
- ``DiscriminatorHead``: ``discriminator_predictions/dense`` [H, H] with ``hidden_act``, then
  ``dense_1`` [H, 1] (glorot init, as the official layer built without an initializer).
"""

from __future__ import annotations

import tensorflow as tf

from electra_tf.modeling.encoder import Embeddings
from electra_tf.modeling.layers import Dense, LayerNorm, ScopedLayer, truncated_normal


class MaskedLMHead(ScopedLayer):
  """hidden [..., h] -> token logits [..., V]; output layer tied to the word embeddings."""

  def __init__(self, embeddings: Embeddings, hidden_act: str = "gelu",
               initializer_range: float = 0.02, scope: str = "generator_predictions", **kwargs):
    super().__init__(scope, **kwargs)
    self.embeddings = embeddings
    self.dense = Dense(embeddings.embedding_size, scope + "/dense", activation=hidden_act,
                       kernel_initializer=truncated_normal(initializer_range))
    self.layer_norm = LayerNorm(scope + "/LayerNorm")

  def build(self, input_shape):
    self.dense.build(input_shape)
    self.layer_norm.build([None, self.embeddings.embedding_size])
    self.output_bias = self.scoped_weight("output_bias", [self.embeddings.vocab_size], "zeros")
    super().build(input_shape)

  def call(self, hidden: tf.Tensor) -> tf.Tensor:
    """[..., h] -> [..., V]."""
    x = self.layer_norm(self.dense(hidden))
    table = tf.cast(self.embeddings.word_embeddings, x.dtype)
    logits = tf.matmul(tf.reshape(x, [-1, tf.shape(x)[-1]]), table, transpose_b=True)
    logits = tf.nn.bias_add(logits, tf.cast(self.output_bias, x.dtype))
    return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [self.embeddings.vocab_size]], 0))


class DiscriminatorHead(ScopedLayer):
  """sequence_output [B, T, H] -> replaced-token logits [B, T]."""

  def __init__(self, hidden_size: int, hidden_act: str = "gelu", initializer_range: float = 0.02,
               scope: str = "discriminator_predictions", **kwargs):
    super().__init__(scope, **kwargs)
    self.hidden_size = hidden_size
    self.dense = Dense(hidden_size, scope + "/dense", activation=hidden_act,
                       kernel_initializer=truncated_normal(initializer_range))
    self.dense_1 = Dense(1, scope + "/dense_1")

  def build(self, input_shape):
    self.dense.build([None, self.hidden_size])
    self.dense_1.build([None, self.hidden_size])
    super().build(input_shape)

  def call(self, sequence_output: tf.Tensor) -> tf.Tensor:
    """[B, T, H] -> [B, T]."""
    return tf.squeeze(self.dense_1(self.dense(sequence_output)), -1)
