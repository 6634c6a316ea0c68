"""XLA for the elementwise work (electra_tf/modeling/fusion.py): same results, compiled."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.modeling import fusion
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer

CONFIG = BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, hidden_dropout_prob=0.1,
                    attention_probs_dropout_prob=0.1)
SEED = tf.constant([3, 8], tf.int64)


def _inputs():
  rng = np.random.default_rng(0)
  ids = tf.constant(rng.integers(1, 40, [3, 12]), tf.int32)
  mask = tf.constant(np.array([[1] * 12, [1] * 9 + [0] * 3, [1] * 5 + [0] * 7]), tf.int32)
  return ids, mask, tf.zeros_like(ids)


def _tower(xla_elementwise: bool) -> Transformer:
  with fusion.xla_elementwise(xla_elementwise):
    tower = Transformer(CONFIG)
  tower(*_inputs())  # builds; the same initial values for both (set below)
  return tower


@pytest.fixture(scope="module")
def towers():
  plain, fused = _tower(False), _tower(True)
  for source, target in zip(plain.weights, fused.weights, strict=True):
    target.assign(source)
  return plain, fused


def _output_and_grads(tower, training):
  ids, mask, segments = _inputs()
  weights = tf.random.stateless_normal([3, 12, 32], [1, 2])

  @tf.function
  def run():
    with tf.GradientTape() as tape:
      out = tower(ids, mask, segments, training=training, seed=SEED)["sequence_output"]
      loss = tf.reduce_sum(out * weights)
    return out, tape.gradient(loss, tower.trainable_weights)
  return run


def _compiled_functions(run) -> int:
  """How many functions of ``run``'s graph (forward and gradient) XLA must compile."""
  graph = run.get_concrete_function().graph.as_graph_def()
  return sum(1 for f in graph.library.function
             if f.attr["_XlaMustCompile"].b)


def test_training_step_matches_the_unfused_layers_and_runs_compiled(towers):
  plain, fused = towers
  run_plain, run_fused = _output_and_grads(plain, True), _output_and_grads(fused, True)
  assert _compiled_functions(run_plain) == 0
  # Per layer: softmax + dropout, two dropout + residual + LayerNorm, GELU.
  assert _compiled_functions(run_fused) >= 4 * CONFIG.num_hidden_layers
  (out_p, grads_p), (out_f, grads_f) = run_plain(), run_fused()
  np.testing.assert_allclose(out_f.numpy(), out_p.numpy(), rtol=0, atol=1e-5)
  assert np.count_nonzero(out_p.numpy() == 0) == 0  # dropout acted before the LayerNorm
  for variable, g_p, g_f in zip(plain.trainable_weights, grads_p, grads_f, strict=True):
    g_p, g_f = tf.convert_to_tensor(g_p).numpy(), tf.convert_to_tensor(g_f).numpy()
    scale = max(1.0, float(np.abs(g_p).max()))
    np.testing.assert_allclose(g_f, g_p, rtol=0, atol=1e-5 * scale, err_msg=variable.name)


def test_dropout_masks_are_the_unfused_ones(towers):
  """Each dropout site draws the same mask fused or not: another seed moves the output far
  more than the fused / unfused difference."""
  plain, fused = towers
  out_f = _output_and_grads(fused, True)()[0].numpy()
  ids, mask, segments = _inputs()
  other = plain(ids, mask, segments, training=True, seed=SEED + 1)["sequence_output"].numpy()
  out_p = _output_and_grads(plain, True)()[0].numpy()
  assert np.abs(other - out_p).max() > 0.1 > 1e-5 >= np.abs(out_f - out_p).max()


def test_inference_is_the_unfused_path_bit_for_bit(towers):
  plain, fused = towers
  run_plain, run_fused = _output_and_grads(plain, False), _output_and_grads(fused, False)
  assert _compiled_functions(run_fused) == 0
  np.testing.assert_array_equal(run_fused()[0].numpy(), run_plain()[0].numpy())


def test_the_setting_is_read_when_a_layer_is_made():
  with fusion.xla_elementwise(True):
    assert fusion.enabled()
    inside = Transformer(CONFIG)
  assert not fusion.enabled()
  assert all(block.xla_elementwise for block in inside.blocks)
  assert not any(block.xla_elementwise for block in Transformer(CONFIG).blocks)
