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


def attach_vocab(module: tf.Module, vocab_file: str | None) -> None:
  """Ships ``vocab_file`` in the SavedModel (``assets/vocab.txt``; ``module.vocab_file`` is
  its path once loaded)."""
  if vocab_file:
    module.vocab_file = tf.saved_model.Asset(vocab_file)


def export_saved_model(model, export_dir: str, vocab_file: str | None = None) -> list[str]:
  """Writes ``export_dir`` (a SavedModel, ``vocab_file`` as its asset); returns the
  signature names written."""
  module = PretrainingExport(model)
  signatures = module.signatures()
  if not signatures:
    raise ValueError("model has neither a discriminator head nor a generator head to export")
  attach_vocab(module, vocab_file)
  tf.saved_model.save(module, export_dir, signatures=signatures)
  return sorted(signatures)


_HUB_INPUTS = {"input_word_ids": _IDS, "input_mask": _IDS, "input_type_ids": _IDS}


def export_encoder_saved_model(encoder, export_dir: str, vocab_file: str | None = None) -> None:
  """Writes a TF-Hub-style encoder SavedModel (the discriminator / fine-tuning encoder) with
  ``vocab_file`` as its asset (``obj.vocab_file``).

  ``obj = tf.saved_model.load(export_dir)``; ``obj(inputs, training=False)`` takes the TF Hub
  BERT input dict (int32 [B, T] ``input_word_ids``, ``input_mask``, ``input_type_ids``) and
  returns ``sequence_output`` [B, T, H], ``pooled_output`` [B, H] (the [CLS] vector: ELECTRA
  has no pooler layer), ``encoder_outputs`` (one [B, T, H] per layer) and ``default``
  (= pooled_output). ``obj.variables`` / ``obj.trainable_variables`` are there for
  ``hub.KerasLayer``-style fine-tuning; the ``serving_default`` signature takes the three
  tensors as keyword arguments.
  """

  def call(inputs, training=False):
    out = encoder(inputs["input_word_ids"], inputs["input_mask"], inputs["input_type_ids"],
                  training=training)
    sequence = out["sequence_output"]
    layers = tf.unstack(out["all_layer_outputs"], encoder.config.num_hidden_layers)
    return {"sequence_output": sequence, "pooled_output": sequence[:, 0],
            "encoder_outputs": layers, "default": sequence[:, 0]}

  def serve(input_word_ids, input_mask, input_type_ids):
    out = call({"input_word_ids": input_word_ids, "input_mask": input_mask,
                "input_type_ids": input_type_ids})
    return {k: v for k, v in out.items() if k != "encoder_outputs"}

  root = tf.train.Checkpoint()  # an object with plain attributes, as hub.KerasLayer expects
  root.variables = list(encoder.variables)
  root.trainable_variables = list(encoder.trainable_variables)
  root.regularization_losses = []
  attach_vocab(root, vocab_file)
  root.__call__ = tf.function(call, input_signature=[_HUB_INPUTS, tf.TensorSpec([], tf.bool)])
  serving = tf.function(serve, input_signature=[_IDS, _IDS, _IDS])
  tf.saved_model.save(root, export_dir,
                      signatures={"serving_default": serving.get_concrete_function()})
