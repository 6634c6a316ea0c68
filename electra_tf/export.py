"""SavedModel export of a pre-training model with ``rtd`` and ``mlm`` serving signatures.

Both signatures take int32 ``[B, T]`` tensors with dynamic B and T:

- ``rtd(input_ids, input_mask, segment_ids)`` -> ``sequence_output`` [B, T, H] and
  ``rtd_logits`` [B, T] (discriminator; for Electric including the ``log q`` correction from
  the cloze model run on the same input).
- ``mlm(input_ids, input_mask, segment_ids, masked_lm_positions [B, P])`` ->
  ``sequence_output`` [B, T, Hg] and ``mlm_logits`` [B, P, V] (generator side; for Electric
  the two-tower cloze representation and its logits gathered at the positions).
"""

from __future__ import annotations

import tensorflow as tf

from electra_tf.pretraining.masking import Inputs, gather_positions

_IDS = tf.TensorSpec([None, None], tf.int32)


class PretrainingExport(tf.Module):
  """Serving wrapper over a ``PretrainingModel``'s towers and heads (no training ops)."""

  def __init__(self, model):
    super().__init__(name="electra_export")
    # Track only the variables: saving the Keras model itself would also trace its call().
    self._model_ref = lambda: model
    self.model_variables = list(model.variables)
    if model.discriminator_head is not None:
      self.rtd = tf.function(self._rtd, input_signature=[_IDS, _IDS, _IDS])
    if model.mlm_head is not None:
      self.mlm = tf.function(self._mlm, input_signature=[_IDS, _IDS, _IDS, _IDS])

  def _rtd(self, input_ids, input_mask, segment_ids):
    inputs = Inputs(input_ids, input_mask, segment_ids)
    sequence_output, logits = self._model_ref().rtd_logits(inputs)
    return {"sequence_output": sequence_output, "rtd_logits": logits}

  def _mlm(self, input_ids, input_mask, segment_ids, masked_lm_positions):
    hidden = self._model_ref().generator_hidden(Inputs(input_ids, input_mask, segment_ids))
    logits = self._model_ref().mlm_head(gather_positions(hidden, masked_lm_positions))
    return {"sequence_output": hidden, "mlm_logits": tf.cast(logits, tf.float32)}

  def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
    out = {}
    if hasattr(self, "rtd"):
      out["rtd"] = self.rtd.get_concrete_function()
    if hasattr(self, "mlm"):
      out["mlm"] = self.mlm.get_concrete_function()
    return out


def export_saved_model(model, export_dir: str) -> list[str]:
  """Writes ``export_dir`` (a SavedModel); returns the signature names written."""
  module = PretrainingExport(model)
  signatures = module.signatures()
  if not signatures:
    raise ValueError("model has neither a discriminator head nor a generator head to export")
  tf.saved_model.save(module, export_dir, signatures=signatures)
  return sorted(signatures)
