"""The official TF1 variable names in one place.

Every layer reads its scope from here, and checkpoint I/O, ``convert`` and the Hugging Face
export/import use the same constants, so a name is defined once. Scopes are absolute (see
``modeling/layers.py``): ``electra/encoder/layer_0/attention/self/query/kernel``.
"""

from __future__ import annotations

import re

import tensorflow as tf

# Towers (one official ``BertModel`` each).
DISCRIMINATOR = "electra"  # also the fine-tuning encoder and the masked-LM-only model
GENERATOR = "generator"  # ELECTRA's small generator
GENERATOR_LTR = "generator_ltr"  # Electric's left-to-right tower
GENERATOR_RTL = "generator_rtl"  # Electric's right-to-left tower

# Heads.
DISCRIMINATOR_HEAD = "discriminator_predictions"
GENERATOR_HEAD = "generator_predictions"
CLOZE_HEAD = "cloze_predictions"
TASK_SPECIFIC = "task_specific"  # fine-tuning heads: task_specific/<task name>/...

# Checkpoint entries that are training state, not model weights.
GLOBAL_STEP = "global_step"
ADAM_SLOTS = ("adam_m", "adam_v")
OPTIMIZER_STATE = re.compile(r"(^global_step$|/adam_[mv]$)")


def tf1_name(variable: tf.Variable) -> str:
  """``variable.name`` without the ``:<output index>`` suffix (the TF1 checkpoint key)."""
  match = re.match(r"^(.*):\d+$", variable.name)
  return match.group(1) if match else variable.name
