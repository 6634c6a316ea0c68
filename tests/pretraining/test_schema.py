"""electra_tf.pretraining.schema: the wire-format writer agrees with tf.train.Example, and the
parse spec reads what it writes."""

from __future__ import annotations

import random

import pytest
import tensorflow as tf

from electra_tf.pretraining import schema


def _packed(encoder, values):
  return b"".join(encoder.varints[v] for v in values)


@pytest.mark.parametrize("max_len,max_value", [(5, 30522), (128, 30522), (512, 300000)])
def test_packed_encoder_equals_tf_example(max_len, max_value):
  rng = random.Random(max_len)
  encoder = schema.PackedExampleEncoder(max_len, max_value)
  for _ in range(50):
    features = {name: [rng.randrange(max_value) for _ in range(max_len)]
                for name in schema.FEATURES}
    data = encoder.example([_packed(encoder, features[n]) for n in schema.FEATURES])
    assert tf.train.Example.FromString(data) == schema.to_example(features)


def test_parse_spec_reads_written_examples():
  encoder = schema.PackedExampleEncoder(4, 100)
  rows = [{"input_ids": [2, 7, 3, 0], "input_mask": [1, 1, 1, 0], "segment_ids": [0, 0, 0, 0]},
          {"input_ids": [2, 99, 3, 5], "input_mask": [1, 1, 1, 1], "segment_ids": [0, 0, 0, 1]}]
  records = [encoder.example([_packed(encoder, r[n]) for n in schema.FEATURES]) for r in rows]
  parsed = tf.io.parse_example(tf.constant(records), schema.parse_spec())
  for name in schema.FEATURES:
    assert parsed[name].dtype == schema.STORED_DTYPE
    assert parsed[name].to_list() == [r[name] for r in rows]
  example = tf.train.Example.FromString(records[0])
  assert [schema.stored_length(example, n) for n in schema.FEATURES] == [4, 4, 4]
