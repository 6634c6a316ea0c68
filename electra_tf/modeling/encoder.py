"""The ELECTRA transformer (BERT's encoder) with the official TF1 variable layout.

One ``Transformer`` is one official ``modeling.BertModel``: scope ``electra`` for the
discriminator / fine-tuning encoder, ``generator`` for the ELECTRA generator,
``generator_ltr`` / ``generator_rtl`` for Electric's two towers. Word, token-type and position
tables plus their LayerNorm live in an ``Embeddings`` layer that towers may share (tied
generator embeddings read ``electra/embeddings/*``).

Shapes: B batch, T sequence, E embedding size, H hidden size, L layers, N heads.
"""

from __future__ import annotations

import math

import tensorflow as tf
import tf_keras

from electra_tf import names
from electra_tf.modeling import fusion
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.dropout import dropout, site_seed
from electra_tf.modeling.layers import (
  Dense,
  LayerNorm,
  ScopedLayer,
  get_activation,
  serializable,
  truncated_normal,
)

ATTENTION_TYPES = ("bidirectional", "ltr", "rtl")


def _one_hot_lookup(table: tf.Variable, ids: tf.Tensor) -> tf.Tensor:
  """table [V, E], ids [B, T] -> [B, T, E] as ``one_hot(ids) @ table`` (dense gradient)."""
  table = tf.convert_to_tensor(table)
  one_hot = tf.one_hot(tf.reshape(ids, [-1]), depth=tf.shape(table)[0], dtype=table.dtype)
  rows = tf.matmul(one_hot, table)
  return tf.reshape(rows, tf.concat([tf.shape(ids), tf.shape(table)[1:]], 0))


@serializable
class Embeddings(ScopedLayer):
  """Word + token-type + position embeddings, LayerNorm, dropout (``<scope>``/embeddings).

  Variables: ``word_embeddings`` [V, E], ``token_type_embeddings`` [type_vocab, E],
  ``position_embeddings`` [max_positions, E], ``LayerNorm/{beta,gamma}`` [E].

  Lookups as the official ``embedding_lookup`` / ``embedding_postprocessor``, which fixes the
  gradient types that global-norm clipping counts: token types by a one-hot matmul and
  positions by a slice (dense gradients); word embeddings by a gather (``IndexedSlices``
  gradient, one row per position, counted unmerged by ``tf.clip_by_global_norm``), or by a
  one-hot matmul when ``use_one_hot_embeddings`` (official on TPU; dense [V, E] gradient).
  """

  def __init__(self, vocab_size: int, embedding_size: int, type_vocab_size: int = 2,
               max_position_embeddings: int = 512, initializer_range: float = 0.02,
               dropout_rate: float = 0.1,
               scope: str = names.embeddings_scope(names.DISCRIMINATOR),
               use_one_hot_embeddings: bool = False, **kwargs):
    super().__init__(scope, **kwargs)
    self.use_one_hot_embeddings = use_one_hot_embeddings
    self.vocab_size = vocab_size
    self.embedding_size = embedding_size
    self.type_vocab_size = type_vocab_size
    self.max_position_embeddings = max_position_embeddings
    self.initializer_range = initializer_range
    self.layer_norm = LayerNorm(names.join(scope, names.LAYER_NORM))
    self.dropout = tf_keras.layers.Dropout(dropout_rate)

  def build(self, input_shape=None):
    init = lambda: truncated_normal(self.initializer_range)  # a fresh instance per variable
    e = self.embedding_size
    self.word_embeddings = self.scoped_weight(names.WORD_EMBEDDINGS, [self.vocab_size, e], init())
    self.token_type_embeddings = self.scoped_weight(
        names.TOKEN_TYPE_EMBEDDINGS, [self.type_vocab_size, e], init())
    self.position_embeddings = self.scoped_weight(
        names.POSITION_EMBEDDINGS, [self.max_position_embeddings, e], init())
    self.layer_norm.build([None, None, e])
    super().build(input_shape)

  def get_config(self) -> dict:
    return {**super().get_config(), "vocab_size": self.vocab_size,
            "embedding_size": self.embedding_size, "type_vocab_size": self.type_vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "initializer_range": self.initializer_range, "dropout_rate": self.dropout.rate,
            "use_one_hot_embeddings": self.use_one_hot_embeddings}

  def call(self, input_ids: tf.Tensor, segment_ids: tf.Tensor, training: bool = False,
           seed: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """[B, T] ids -> (token_embeddings [B, T, E], postprocessed [B, T, E]).

    ``seed``: int [2] for stateless dropout (see ``dropout.py``); None: the Keras layer's.
    """
    if self.use_one_hot_embeddings:
      token_embeddings = _one_hot_lookup(self.word_embeddings, input_ids)
    else:
      token_embeddings = tf.gather(self.word_embeddings, input_ids)
    seq_length = tf.shape(input_ids)[1]
    tf.debugging.assert_less_equal(
        seq_length, self.max_position_embeddings,
        message="sequence longer than max_position_embeddings")
    x = token_embeddings + _one_hot_lookup(self.token_type_embeddings, segment_ids)
    positions = tf.slice(tf.convert_to_tensor(self.position_embeddings), [0, 0], [seq_length, -1])
    x += tf.expand_dims(positions, 0)
    x = dropout(self.dropout, self.layer_norm(x), training, seed)
    return token_embeddings, x


@serializable
class TransformerBlock(ScopedLayer):
  """One official ``layer_i``: self-attention + output, intermediate, output (post-LN)."""

  def __init__(self, config: BertConfig, scope: str, **kwargs):
    super().__init__(scope, **kwargs)
    self.config = config
    h = config.hidden_size
    init = lambda: truncated_normal(config.initializer_range)  # a fresh instance per variable
    if h % config.num_attention_heads:
      raise ValueError(f"hidden_size {h} is not a multiple of num_attention_heads "
                       f"{config.num_attention_heads}")
    self.num_heads = config.num_attention_heads
    self.head_size = h // config.num_attention_heads

    def sub(name: str) -> str:
      return names.join(scope, name)

    self.query = Dense(h, sub(names.QUERY), kernel_initializer=init())
    self.key = Dense(h, sub(names.KEY), kernel_initializer=init())
    self.value = Dense(h, sub(names.VALUE), kernel_initializer=init())
    self.attention_output = Dense(h, sub(names.ATTENTION_OUTPUT), kernel_initializer=init())
    self.attention_norm = LayerNorm(sub(names.ATTENTION_NORM))
    self.intermediate = Dense(config.intermediate_size, sub(names.INTERMEDIATE),
                              activation=get_activation(config.hidden_act),
                              kernel_initializer=init())
    self.output_dense = Dense(h, sub(names.OUTPUT), kernel_initializer=init())
    self.output_norm = LayerNorm(sub(names.OUTPUT_NORM))
    self.attention_dropout = tf_keras.layers.Dropout(config.attention_probs_dropout_prob)
    self.hidden_dropout = tf_keras.layers.Dropout(config.hidden_dropout_prob)
    self.hidden_size = h
    self.intermediate_size = config.intermediate_size
    # XLA for the elementwise work in training (modeling/fusion.py), as set when made.
    self.xla_elementwise = fusion.enabled() and config.hidden_act == "gelu"

  def build(self, input_shape=None):
    h, i = self.hidden_size, self.intermediate_size
    for layer, dim in ((self.query, h), (self.key, h), (self.value, h),
                       (self.attention_output, h), (self.attention_norm, h),
                       (self.intermediate, h), (self.output_dense, i), (self.output_norm, h)):
      layer.build([None, dim])
    super().build(input_shape)

  def get_config(self) -> dict:
    return {**super().get_config(), "config": self.config.to_dict()}

  @classmethod
  def from_config(cls, config: dict) -> TransformerBlock:
    return cls(**{**config, "config": BertConfig.from_dict(config["config"])})

  def _split_heads(self, x: tf.Tensor, batch: tf.Tensor, seq: tf.Tensor) -> tf.Tensor:
    """[B, T, H] -> [B, N, T, H/N]."""
    x = tf.reshape(x, [batch, seq, self.num_heads, self.head_size])
    return tf.transpose(x, [0, 2, 1, 3])

  def call(self, x: tf.Tensor, attention_adder: tf.Tensor, training: bool = False,
           seed: tf.Tensor | None = None) -> tf.Tensor:
    """x [B, T, H], attention_adder [B, 1, T or 1, T] (0 or -10000) -> [B, T, H].

    ``seed``: int [2] for stateless dropout, one sub-seed per dropout site; None: Keras layers'.
    """
    if self.xla_elementwise and training is True and seed is not None:
      return self._fused_call(x, attention_adder, seed)
    scores, v = self._scores_and_values(x)
    scores = tf.cast(scores, tf.float32) + attention_adder
    probs = tf.cast(tf.nn.softmax(scores), x.dtype)
    probs = dropout(self.attention_dropout, probs, training, site_seed(seed, 0))
    attention = dropout(self.hidden_dropout, self.attention_output(self._context(probs, v, x)),
                        training, site_seed(seed, 1))
    attention = self.attention_norm(attention + x)
    out = self.output_dense(self.intermediate(attention))
    out = dropout(self.hidden_dropout, out, training, site_seed(seed, 2))
    return self.output_norm(out + attention)

  def _scores_and_values(self, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """x [B, T, H] -> (scaled attention scores [B, N, T, T], values [B, N, T, H/N])."""
    batch, seq = tf.shape(x)[0], tf.shape(x)[1]
    q = self._split_heads(self.query(x), batch, seq)
    k = self._split_heads(self.key(x), batch, seq)
    v = self._split_heads(self.value(x), batch, seq)
    # Scale after the matmul, as the official graph does (bit-level parity).
    return tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(float(self.head_size))), v

  def _context(self, probs: tf.Tensor, v: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    """probs [B, N, T, T], v [B, N, T, H/N] -> the heads' outputs side by side [B, T, H]."""
    context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])  # [B, T, N, H/N]
    return tf.reshape(context, [tf.shape(x)[0], tf.shape(x)[1], self.hidden_size])

  def _fused_call(self, x: tf.Tensor, attention_adder: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """``call`` in training with its elementwise work XLA-compiled (``fusion``); same shapes."""
    scores, v = self._scores_and_values(x)
    probs = fusion.softmax_dropout(scores, attention_adder, self.attention_dropout.rate,
                                   site_seed(seed, 0), x.dtype.name)
    context = self._context(probs, v, x)

    def close(y: tf.Tensor, residual: tf.Tensor, norm: LayerNorm, site: int) -> tf.Tensor:
      return fusion.dropout_add_norm(
          y, residual, self.hidden_dropout.rate, site_seed(seed, site),
          tf.convert_to_tensor(norm.beta), tf.convert_to_tensor(norm.gamma), norm.epsilon)

    attention = close(self.attention_output(context), x, self.attention_norm, 1)
    out = self.output_dense(fusion.gelu(self.intermediate.linear(attention)))
    return close(out, attention, self.output_norm, 2)


def attention_adder(input_mask: tf.Tensor, attention_type: str = "bidirectional") -> tf.Tensor:
  """Additive attention bias from a [B, T] padding mask: 0 where attended, -10000 elsewhere.

  Returns [B, 1, 1, T] (bidirectional) or [B, 1, T, T] with Electric's causal masks: ``ltr``
  lets position t see positions <= t (lower triangle), ``rtl`` positions >= t.
  """
  mask = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]  # [B, 1, 1, T]
  if attention_type != "bidirectional":
    seq = tf.shape(input_mask)[1]
    ones = tf.ones([seq, seq], tf.float32)
    causal = (tf.linalg.band_part(ones, -1, 0) if attention_type == "ltr"
              else tf.linalg.band_part(ones, 0, -1))
    mask = mask * causal[tf.newaxis, tf.newaxis]
  return (1.0 - mask) * -10000.0


@serializable
class Transformer(tf_keras.layers.Layer):
  """One official ``BertModel`` tower under scope ``scope``.

  Args:
    config: the tower's sizes (``hidden_size`` H, ``num_hidden_layers`` L, ...).
    embedding_size: E; when E != H a ``<scope>/embeddings_project`` dense [E, H] is added.
      Ignored when ``embeddings`` is given (its width is used).
    embeddings: a shared ``Embeddings`` layer (tied embeddings); by default the tower owns
      one at ``<scope>/embeddings``.
    attention_type: ``bidirectional``, or ``ltr`` / ``rtl`` for Electric's towers.
    scope: ``electra``, ``generator``, ``generator_ltr``, ``generator_rtl``.
    use_one_hot_embeddings: look word embeddings up by a one-hot matmul (official on TPU)
      instead of a gather; only for the tower's own ``Embeddings`` (a shared one keeps its own).
  """

  def __init__(self, config: BertConfig, embedding_size: int | None = None,
               embeddings: Embeddings | None = None, attention_type: str = "bidirectional",
               scope: str = names.DISCRIMINATOR, use_one_hot_embeddings: bool = False, **kwargs):
    super().__init__(name=scope, **kwargs)
    if attention_type not in ATTENTION_TYPES:
      raise ValueError(f"attention_type must be one of {ATTENTION_TYPES}, got {attention_type!r}")
    self.config = config
    self.scope = scope
    self.attention_type = attention_type
    if embeddings is None:
      embeddings = Embeddings(
          config.vocab_size, embedding_size or config.hidden_size, config.type_vocab_size,
          config.max_position_embeddings, config.initializer_range, config.hidden_dropout_prob,
          scope=names.embeddings_scope(scope), use_one_hot_embeddings=use_one_hot_embeddings)
    self.embeddings = embeddings
    self.embedding_size = embeddings.embedding_size
    self.embeddings_project = None
    if self.embedding_size != config.hidden_size:
      self.embeddings_project = Dense(config.hidden_size, names.embeddings_project_scope(scope))
    self.blocks = [TransformerBlock(config, names.layer_scope(scope, i))
                   for i in range(config.num_hidden_layers)]

  def build(self, input_shape=None):
    if not self.embeddings.built:
      self.embeddings.build(None)
    if self.embeddings_project is not None:
      self.embeddings_project.build([None, self.embedding_size])
    for block in self.blocks:
      block.build(None)
    super().build(input_shape)

  def get_config(self) -> dict:
    """Sizes, attention type, scope and the (possibly shared) embeddings layer's config."""
    config = super().get_config()
    del config["name"]  # = scope
    return {**config, "config": self.config.to_dict(), "embedding_size": self.embedding_size,
            "embeddings": tf_keras.layers.serialize(self.embeddings),
            "attention_type": self.attention_type, "scope": self.scope}

  @classmethod
  def from_config(cls, config: dict) -> Transformer:
    """Rebuilds the tower; its embeddings become a new layer with the same config (and names)."""
    return cls(**{**config, "config": BertConfig.from_dict(config["config"]),
                  "embeddings": tf_keras.layers.deserialize(config["embeddings"])})

  @property
  def embedding_table(self) -> tf.Variable:
    """The word-embedding table [V, E] this tower reads (tied output layers use it)."""
    return self.embeddings.word_embeddings

  def call(self, input_ids: tf.Tensor, input_mask: tf.Tensor, segment_ids: tf.Tensor,
           training: bool = False, seed: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """Runs the tower.

    Args:
      input_ids, input_mask, segment_ids: int32 [B, T].
      training: dropout on.
      seed: int [2]: dropout masks drawn statelessly from it (the embeddings from sub-seed 0,
        layer i from sub-seed i + 1), the same in every process; None: Keras (stateful) dropout.
    Returns:
      dict with ``token_embeddings`` [B, T, E] (raw lookup), ``embedding_postprocessed``
      [B, T, E] (+ type/position, LayerNorm), ``embedding_output`` [B, T, H] (after the
      projection; the transformer input), ``all_layer_outputs`` [L, B, T, H] and
      ``sequence_output`` [B, T, H].
    """
    token_embeddings, x = self.embeddings(input_ids, segment_ids, training=training,
                                          seed=site_seed(seed, 0))
    postprocessed = x
    if self.embeddings_project is not None:
      x = self.embeddings_project(x)
    embedding_output = x
    adder = attention_adder(input_mask, self.attention_type)
    layers = []
    for block in self.blocks:
      x = block(x, adder, training=training, seed=site_seed(seed, len(layers) + 1))
      layers.append(x)
    return {
        "token_embeddings": token_embeddings,
        "embedding_postprocessed": postprocessed,
        "embedding_output": embedding_output,
        "all_layer_outputs": tf.stack(layers, 0),
        "sequence_output": x,
    }
