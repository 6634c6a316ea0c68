"""get_config / from_config of the Keras layers: a serialized layer rebuilds with the same
TF1 variable names and shapes, and a rebuilt Transformer computes the same outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf import names
from electra_tf.finetuning import task_heads as ft_heads
from electra_tf.modeling import heads, layers
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Embeddings, Transformer, TransformerBlock

CONFIG = BertConfig(vocab_size=37, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=24, max_position_embeddings=20, type_vocab_size=3,
                    hidden_act="gelu")


def _round_trip(layer):
  """serialize -> JSON -> deserialize, as tf_keras.models.clone_model / saving do."""
  blob = json.loads(json.dumps(tf_keras.layers.serialize(layer)))
  return tf_keras.layers.deserialize(blob)


def _variables(layer):
  return sorted((names.tf1_name(v), tuple(v.shape.as_list())) for v in layer.weights)


def _embeddings(scope="electra/embeddings"):
  return Embeddings(CONFIG.vocab_size, 12, CONFIG.type_vocab_size, CONFIG.max_position_embeddings,
                    0.05, 0.2, scope=scope)


CASES = {
    "dense": (lambda: layers.Dense(5, "x/dense", activation="gelu",
                                   kernel_initializer=layers.truncated_normal(0.3)), [None, 7]),
    "dense_plain": (lambda: layers.Dense(1, "x/dense_1"), [None, 3]),
    "layer_norm": (lambda: layers.LayerNorm("x/LayerNorm", epsilon=1e-6), [None, 6]),
    "embeddings": (lambda: _embeddings("generator/embeddings"), None),
    "block": (lambda: TransformerBlock(CONFIG, names.layer_scope("generator", 1)), None),
    "transformer": (lambda: Transformer(CONFIG, embedding_size=12, attention_type="ltr",
                                        scope=names.GENERATOR_LTR), None),
    "mlm_head": (lambda: heads.MaskedLMHead(_embeddings(), "relu", 0.1,
                                            scope=names.CLOZE_HEAD), [None, 16]),
    "disc_head": (lambda: heads.DiscriminatorHead(16, "gelu", 0.1), [None, 16]),
    "classification": (lambda: ft_heads.ClassificationHead("rte", 3, 0.2, seed=4), [None, 5, 16]),
    "regression": (lambda: ft_heads.RegressionHead("sts", 0.3), [None, 5, 16]),
    "tagging": (lambda: ft_heads.TaggingHead("chunk", 9), [None, 5, 16]),
    "span_qa": (lambda: ft_heads.SpanQAHead("squad", beam_size=3, qa_hidden_size=8,
                                            answerable_weight=0.7), [None, 5, 16]),
    "span_qa_plain": (lambda: ft_heads.SpanQAHead("squad", joint_prediction=False,
                                                  answerable_uses_start_logits=False),
                      [None, 5, 16]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_round_trip_rebuilds_same_variables(case):
  make, input_shape = CASES[case]
  original = make()
  rebuilt = _round_trip(original)
  assert type(rebuilt) is type(original)
  assert rebuilt.get_config() == original.get_config()
  original.build(input_shape)
  rebuilt.build(input_shape)
  assert _variables(rebuilt) == _variables(original)
  assert _variables(original)  # the layer has variables at all


def test_round_trip_keeps_hyperparameters():
  dense = _round_trip(layers.Dense(5, "x/dense", activation="gelu",
                                   kernel_initializer=layers.truncated_normal(0.3)))
  assert dense.activation is layers.gelu
  assert dense.kernel_initializer.stddev == pytest.approx(0.3)
  emb = _round_trip(_embeddings())
  assert (emb.initializer_range, emb.dropout.rate, emb.embedding_size) == (0.05, 0.2, 12)
  qa = _round_trip(CASES["span_qa"][0]())
  assert (qa.beam_size, qa.qa_hidden_size, qa.answerable_weight, qa.scope) == \
      (3, 8, 0.7, "task_specific/squad")
  clf = _round_trip(CASES["classification"][0]())
  assert (clf.dropout.rate, clf.dropout.seed, clf.num_labels) == (0.2, 4, 3)
  tower = _round_trip(CASES["transformer"][0]())
  assert (tower.config, tower.attention_type, tower.scope) == (CONFIG, "ltr", "generator_ltr")


def test_rebuilt_transformer_gives_identical_outputs():
  original = Transformer(CONFIG, embedding_size=12, scope=names.DISCRIMINATOR)
  original.build(None)
  rebuilt = Transformer.from_config(original.get_config())
  rebuilt.build(None)
  by_name = {names.tf1_name(v): v for v in rebuilt.weights}
  for v in original.weights:
    by_name[names.tf1_name(v)].assign(v)
  rng = np.random.default_rng(0)
  ids = tf.constant(rng.integers(0, CONFIG.vocab_size, (2, 9)), tf.int32)
  mask = tf.constant([[1] * 9, [1] * 5 + [0] * 4], tf.int32)
  segments = tf.constant([[0] * 4 + [1] * 5, [0] * 9], tf.int32)
  a = original(ids, mask, segments, training=False)
  b = rebuilt(ids, mask, segments, training=False)
  assert sorted(a) == sorted(b)
  for key in a:
    np.testing.assert_array_equal(a[key].numpy(), b[key].numpy(), err_msg=key)
