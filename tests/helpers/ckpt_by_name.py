"""Test helper: assign an official TF1 checkpoint to variables by name (no mapping table).

The real loader is ``electra_tf.checkpoints``; this one exists so pre-training parity tests
depend only on the variable names, and it insists on an exact one-to-one match.
"""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf


def assign_by_name(variables: Mapping[str, tf.Variable], prefix: str) -> None:
  """Copies every checkpoint tensor (except ``global_step``) into the variable of its name."""
  reader = tf.train.load_checkpoint(prefix)
  names = set(reader.get_variable_to_shape_map()) - {"global_step"}
  missing, unused = sorted(set(variables) - names), sorted(names - set(variables))
  if missing or unused:
    raise AssertionError(f"model/checkpoint names differ: missing {missing[:5]}, "
                         f"unused {unused[:5]}")
  for name, var in variables.items():
    var.assign(reader.get_tensor(name))
