"""Assertions shared by the conversion tests."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def max_diff(a, b) -> float:
  """Largest absolute difference, computed in float64."""
  return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def assert_same_checkpoint(a: str, b: str) -> None:
  """Two TF1 checkpoints hold the same names, dtypes, shapes and values, bit for bit."""
  ra, rb = tf.train.load_checkpoint(a), tf.train.load_checkpoint(b)
  assert ra.get_variable_to_shape_map() == rb.get_variable_to_shape_map()
  assert ra.get_variable_to_dtype_map() == rb.get_variable_to_dtype_map()
  for name in ra.get_variable_to_shape_map():
    np.testing.assert_array_equal(ra.get_tensor(name), rb.get_tensor(name), name)
