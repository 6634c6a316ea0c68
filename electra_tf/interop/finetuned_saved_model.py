"""SavedModel export of a fine-tuned model: one serving signature per task.

Every signature takes int32 ``input_ids``, ``input_mask``, ``segment_ids`` [B, T] (B and T
dynamic) featurised as for the task, and runs the encoder without dropout:

- GLUE classification (``cola``, ``rte``, ...): ``classify`` -> ``logits`` [B, n_labels],
  ``probabilities`` [B, n_labels] (softmax).
- GLUE regression (``sts``): ``classify`` -> ``score`` [B] on the task's scale (STS-B 0..5:
  the head predicts ``score / 5``, as the official targets), ``logits`` [B] (the raw head output).
- Span QA (``squad``, MRQA tasks): ``squad`` -> ``start_logits`` [B, T] (-1000 outside the
  context, position 0 = no answer), ``end_logits`` [B, T], ``answerable_logit`` [B] and the beam
  ``start_top_index`` / ``start_top_log_probs`` [B, K], ``end_top_index`` /
  ``end_top_log_probs`` [B, K, K] that the official n-best decoding uses. With
  ``joint_prediction`` the end depends on the start: ``end_logits`` is conditioned on the best
  start (the official eval graph returns zeros there). Sequences shorter than the beam K are
  padded to K inside the signature (padding is masked out) and outputs are cut back to T.
- Tagging (``chunk``): ``tag`` -> ``logits`` [B, T, n_tags], ``predictions`` [B, T] for every
  token (the official head reads the first word piece of each word).

With a vocabulary, every classify signature has a raw-text twin, ``classify_text(text_a,
text_b)`` (string [B] each; ``text_b`` "" for single texts) with the same outputs: the text is
tokenised and featurised inside the graph (``electra_tf.text_graph``, the ids of the official
``FullTokenizer``, padded to ``max_seq_length``); loading it needs ``import tensorflow_text``.
The vocabulary also ships as ``assets/vocab.txt``.

Signature names come from the one table in ``electra_tf.interop.signatures``: the family
(``classify``, ``squad``, ``tag``) when it is the only task of that family in the export, else
``<family>_<task>`` (e.g. ``classify_rte``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from electra_tf.finetuning import task_heads as heads_lib
from electra_tf.interop import signatures
from electra_tf.interop.saved_model import attach_vocab

_IDS = tf.TensorSpec([None, None], tf.int32)


class FinetunedExport(tf.Module):
  """Serving wrapper over a ``FinetuningModel`` (no training ops, no labels needed)."""

  def __init__(self, model: Any, tasks: Sequence[Any], vocab_file: str | None = None,
               do_lower_case: bool = True, max_seq_length: int = 128):
    super().__init__(name="electra_finetuned_export")
    # Track only the variables: saving the Keras model itself would also trace its call().
    self._model_ref = lambda: model
    self.model_variables = list(model.variables)
    self._tasks = {t.name: t for t in tasks}
    unknown = sorted(set(self._tasks) - set(model.task_names))
    if unknown:
      raise ValueError(f"tasks {unknown} have no head in the model ({model.task_names})")
    self._functions: dict[str, tf.types.experimental.PolymorphicFunction] = {}
    names = signatures.signature_names({name: task.kind for name, task in self._tasks.items()})
    for task_name in self._tasks:
      fn = tf.function(self._make_fn(task_name), input_signature=[_IDS, _IDS, _IDS])
      self._functions[names[task_name]] = fn
      setattr(self, names[task_name], fn)  # tracked, so the SavedModel keeps it
    if vocab_file:
      self._add_text_signatures(names, vocab_file, do_lower_case, max_seq_length)

  def _add_text_signatures(self, names: dict[str, str], vocab_file: str, do_lower_case: bool,
                           max_seq_length: int) -> None:
    """``classify_text[_<task>]`` beside each ``classify[_<task>]`` signature."""
    # local: tensorflow_text is loaded only for the raw-text signatures (a vocab was given)
    from electra_tf.text_graph import TEXT_SIGNATURE, TextFeaturizer

    self.featurizer = TextFeaturizer(vocab_file, do_lower_case, max_seq_length)
    for task_name in self._tasks:
      text_name = signatures.text_signature(names[task_name])
      if text_name is None:
        continue
      name = names[task_name]
      fn = tf.function(self._from_text(self._functions[name]), input_signature=TEXT_SIGNATURE)
      self._functions[text_name] = fn
      setattr(self, text_name, fn)

  def _from_text(self, ids_fn):
    """A function of (text_a, text_b) [B] strings that featurises them and calls ``ids_fn``."""
    def from_text(text_a, text_b):
      inputs = self.featurizer.featurize(text_a, text_b)
      return ids_fn(inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"])
    return from_text

  def _sequence_output(self, input_ids, input_mask, segment_ids):
    encoded = self._model_ref().encoder(input_ids, input_mask, segment_ids, training=False)
    return encoded["sequence_output"]

  def _make_fn(self, task_name: str):
    head = self._model_ref().heads[task_name]
    task = self._tasks[task_name]
    if isinstance(head, heads_lib.ClassificationHead):
      def classify(input_ids, input_mask, segment_ids):
        hidden = self._sequence_output(input_ids, input_mask, segment_ids)
        logits = head.dense(tf.cast(hidden[:, 0], tf.float32))  # [B, n_labels]
        return {"logits": logits, "probabilities": tf.nn.softmax(logits)}
      return classify
    if isinstance(head, heads_lib.RegressionHead):
      lo, hi = float(getattr(task, "min_value", 0.0)), float(getattr(task, "max_value", 1.0))

      def regress(input_ids, input_mask, segment_ids):
        hidden = self._sequence_output(input_ids, input_mask, segment_ids)
        raw = tf.squeeze(head.dense(tf.cast(hidden[:, 0], tf.float32)), -1)  # [B]
        # inverse of the official target (score - min) / max
        return {"score": raw * hi + lo, "logits": raw}
      return regress
    if isinstance(head, heads_lib.TaggingHead):
      def tag(input_ids, input_mask, segment_ids):
        hidden = self._sequence_output(input_ids, input_mask, segment_ids)
        logits = head.dense(tf.cast(hidden, tf.float32))  # [B, T, n_tags]
        return {"logits": logits, "predictions": tf.argmax(logits, -1, output_type=tf.int32)}
      return tag
    return self._make_qa_fn(head)

  def _make_qa_fn(self, head: heads_lib.SpanQAHead):
    name, k = head.task_name, head.beam_size

    def squad(input_ids, input_mask, segment_ids):
      seq_length = tf.shape(input_ids)[1]
      pad = tf.maximum(0, k - seq_length)  # top_k needs at least K positions
      ids, mask, segments = (tf.pad(x, [[0, 0], [0, pad]]) for x in
                             (input_ids, input_mask, segment_ids))
      hidden = tf.cast(self._sequence_output(ids, mask, segments), tf.float32)
      zeros = tf.zeros(tf.shape(ids)[:1], tf.int32)
      features = {"input_mask": mask, "segment_ids": segments, name + "_eid": zeros,
                  name + "_start_positions": zeros, name + "_end_positions": zeros,
                  name + "_is_impossible": zeros}
      out, _ = head(hidden, features, training=False)
      end_logits = out["end_logits"]
      if head.joint_prediction:  # end logits given the best start, as the training path
        answer_mask = tf.cast(mask * segments, tf.float32) + tf.one_hot(0, tf.shape(ids)[1])
        best_start = tf.gather(hidden, out["start_top_index"][:, :1], batch_dims=1)  # [B,1,H]
        end_hidden = head.end_hidden(best_start, hidden)[:, 0]  # [B, T, D]
        end_logits = tf.squeeze(head.end_dense(end_hidden), -1) + 1000.0 * (answer_mask - 1.0)
      return {"start_logits": out["start_logits"][:, :seq_length],
              "end_logits": end_logits[:, :seq_length],
              "answerable_logit": out["answerable_logit"],
              "start_top_index": out["start_top_index"],
              "start_top_log_probs": out["start_top_log_probs"],
              "end_top_index": out["end_top_index"],
              "end_top_log_probs": out["end_top_log_probs"]}
    return squad

  def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
    return {name: fn.get_concrete_function() for name, fn in self._functions.items()}


def export_finetuned_saved_model(model: Any, tasks: Sequence[Any], export_dir: str,
                                 vocab_file: str | None = None, do_lower_case: bool = True,
                                 max_seq_length: int = 128) -> list[str]:
  """Writes ``export_dir`` (a SavedModel with one signature per task, and with ``vocab_file``
  the raw-text classify signatures and ``assets/vocab.txt``); returns the signature names."""
  module = FinetunedExport(model, tasks, vocab_file, do_lower_case, max_seq_length)
  attach_vocab(module, vocab_file)
  signatures = module.signatures()
  tf.saved_model.save(module, export_dir, signatures=signatures)
  return sorted(signatures)
