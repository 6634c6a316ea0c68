"""Seeded dropout (electra_tf/modeling/dropout.py): 16-bit keep decisions, same mask per seed."""

import math
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.modeling import dropout as dropout_lib

SEED = tf.constant([4, 9], tf.int64)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9, 1e-3])
def test_keep_probability_is_within_2_to_the_minus_17_of_one_minus_rate(rate):
  assert abs(dropout_lib.keep_probability(rate) - (1 - rate)) <= 2**-17 < 1e-5


@pytest.mark.parametrize("rate, shape", [(0.1, [64, 128, 256]), (0.5, [8, 127, 33]),
                                         (0.9, [2, 1024, 64])])
def test_kept_fraction_matches_the_keep_probability_statistically(rate, shape):
  """The kept fraction of n draws is within 5 binomial standard deviations of p, in each half
  of the last axis (low and high 16 bits) and overall; kept values are scaled by 1 / p."""
  x = tf.ones(shape)
  y = dropout_lib.seeded_dropout(x, rate, SEED).numpy()
  p = dropout_lib.keep_probability(rate)
  np.testing.assert_allclose(np.unique(y[y != 0]), [1 / p], rtol=1e-6)
  half = (shape[-1] + 1) // 2
  for part in (y, y[..., :half], y[..., half:]):
    n = part.size
    assert abs((part != 0).mean() - p) < 5 * math.sqrt(p * (1 - p) / n), (rate, part.shape)


def test_masks_of_neighbouring_elements_are_not_correlated():
  """Element i of the low half and i of the high half come from one draw: their keep
  decisions still agree only as often as independent ones would (p^2 + q^2)."""
  y = dropout_lib.seeded_dropout(tf.ones([256, 512]), 0.5, SEED).numpy() != 0
  agree = (y[:, :256] == y[:, 256:]).mean()
  assert abs(agree - 0.5) < 5 * math.sqrt(0.25 / y[:, :256].size)


def test_same_seed_same_mask_in_another_process():
  script = ("import numpy as np, tensorflow as tf\n"
            "from electra_tf.modeling import dropout as d\n"
            "y = d.seeded_dropout(tf.ones([3, 50, 7]), 0.3, tf.constant([4, 9], tf.int64))\n"
            "print(''.join('1' if v else '0' for v in (y.numpy() != 0).ravel()))\n")
  child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
  here = (dropout_lib.seeded_dropout(tf.ones([3, 50, 7]), 0.3, SEED).numpy() != 0).ravel()
  assert child.stdout.strip() == "".join("1" if v else "0" for v in here)
  other = dropout_lib.seeded_dropout(tf.ones([3, 50, 7]), 0.3, tf.constant([4, 10], tf.int64))
  assert not np.array_equal(here, other.numpy().ravel() != 0)


def test_xla_and_graph_draw_the_same_mask_and_bfloat16_keeps_its_dtype():
  x = tf.ones([4, 16, 32], tf.bfloat16)
  graph = tf.function(lambda v: dropout_lib.seeded_dropout(v, 0.1, SEED))(x)
  xla = tf.function(lambda v: dropout_lib.seeded_dropout(v, 0.1, SEED), jit_compile=True)(x)
  assert graph.dtype == tf.bfloat16
  np.testing.assert_array_equal(graph.numpy(), xla.numpy())


def test_rate_zero_and_eval_return_the_input_and_the_previous_draw_stays_reachable(monkeypatch):
  layer, x = tf_keras.layers.Dropout(0.2), tf.ones([2, 8, 6])
  assert dropout_lib.dropout(layer, x, training=False, seed=SEED) is x
  assert dropout_lib.dropout(tf_keras.layers.Dropout(0.0), x, training=True, seed=SEED) is x
  monkeypatch.setattr(dropout_lib, "MASK_BITS", 32)
  np.testing.assert_array_equal(
      dropout_lib.dropout(layer, x, training=True, seed=SEED).numpy(),
      tf.nn.experimental.stateless_dropout(x, 0.2, seed=SEED).numpy())


@pytest.mark.parametrize("seed", [[-1080120218, 1], [-1, -7], [3, 8]])
def test_same_mask_with_and_without_xla_even_for_a_negative_seed(seed):
  """XLA zero-extends an int32 seed where TensorFlow's kernels sign-extend it; the masks
  (drawn from ``site_seed``'s int32 seeds, half of them negative) still agree."""
  x, seed = tf.ones([3, 12, 32]), tf.constant(seed, tf.int32)
  compiled = tf.function(lambda x, s: dropout_lib.seeded_dropout(x, 0.1, s), jit_compile=True,
                         autograph=False)
  np.testing.assert_array_equal(compiled(x, seed).numpy(),
                                dropout_lib.seeded_dropout(x, 0.1, seed).numpy())
