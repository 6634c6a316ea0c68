"""Task heads over the encoder's ``sequence_output`` [batch, seq, hidden], official names and math.

Every head is called as ``head(sequence_output, features, training=False)`` and returns
``(outputs, per_example_loss)``: ``outputs`` is the official output dict of the task's
``get_prediction_module`` (``loss``, ``logits``/``predictions``/..., ``eid``) and
``per_example_loss`` is [batch]. Heads with dropout also take ``seed`` (int [2]: stateless
masks, see ``electra_tf.modeling.dropout``). ``features`` holds the batch's decoded features by
their official names (``<task>_label_ids``, ``<task>_start_positions``, ``input_mask``, ...).

Variables are created under the absolute scope ``task_specific/<task>/`` with the official
layer names (``dense``, ``dense_1``, ``qa_hidden``, ...), so ``variable.name[:-2]`` is the TF1
checkpoint key whatever model encloses the head. Dense layers get the default glorot-uniform
initializer, as the official ``tf.layers.dense`` calls without one.
"""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf
import tf_keras

from electra_tf import names
from electra_tf.modeling.dropout import dropout
from electra_tf.modeling.layers import Dense, ScopedLayer, gelu, serializable


def _float(x: tf.Tensor) -> tf.Tensor:
  return tf.cast(x, tf.float32)


class TaskHead(ScopedLayer):
  """A head under ``task_specific/<task_name>``: its config names the task, not the scope."""

  def __init__(self, task_name: str, **kwargs):
    super().__init__(names.task_scope(task_name), **kwargs)
    self.task_name = task_name

  def sub_scope(self, name: str) -> str:
    """``task_specific/<task>/<name>``."""
    return names.join(self.scope, name)

  def get_config(self) -> dict:
    config = super().get_config()
    del config["scope"]  # derived from task_name
    return {**config, "task_name": self.task_name}


def _cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
  """-sum(one_hot(labels) * log_softmax(logits)) over the last axis (official form)."""
  depth = tf.shape(logits)[-1]
  one_hot = tf.one_hot(labels, depth=depth, dtype=tf.float32)
  return -tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=-1), axis=-1)


def multitask_loss(per_task_losses: list[tf.Tensor], task_id: tf.Tensor) -> tf.Tensor:
  """Official ``FinetuningModel.loss``: each example's own task loss, summed over the batch.

  per_task_losses: one [B] tensor per task, in task-id order; task_id [B]. Padding records
  (task_id = number of tasks) contribute 0. Returns a scalar.
  """
  stacked = tf.stack(per_task_losses, -1)  # [B, n_tasks]
  return tf.reduce_sum(stacked * tf.one_hot(task_id, len(per_task_losses)))


@serializable
class ClassificationHead(TaskHead):
  """``dense`` [H, num_labels] on the ``[CLS]`` vector (dropout 0.1 when training).

  outputs: loss [B], logits [B, num_labels], predictions [B] (int64), label_ids [B], eid [B].
  """

  def __init__(self, task_name: str, num_labels: int, dropout_rate: float = 0.1,
               seed: int | None = None, **kwargs):
    super().__init__(task_name, **kwargs)
    if num_labels < 1:
      raise ValueError(f"num_labels must be >= 1, got {num_labels}")
    self.num_labels = num_labels
    self.dropout = tf_keras.layers.Dropout(dropout_rate, seed=seed)
    self.dense = Dense(num_labels, self.sub_scope(names.DENSE))

  def build(self, input_shape):
    self.dense.build([None, int(input_shape[-1])])
    super().build(input_shape)

  def call(self, sequence_output: tf.Tensor, features: Mapping[str, tf.Tensor],
           training: bool = False, seed: tf.Tensor | None = None):
    """[B, T, H] -> (outputs, loss [B]); ``seed`` [2]: stateless dropout (None: Keras)."""
    reprs = dropout(self.dropout, _float(sequence_output)[:, 0], training, seed)  # [B, H]
    logits = self.dense(reprs)  # [B, num_labels]
    label_ids = features[self.task_name + "_label_ids"]
    losses = _cross_entropy(logits, label_ids)
    outputs = dict(loss=losses, logits=logits, predictions=tf.argmax(logits, axis=-1),
                   label_ids=label_ids, eid=features[self.task_name + "_eid"])
    return outputs, losses

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels,
            "dropout_rate": self.dropout.rate, "seed": self.dropout.seed}


@serializable
class RegressionHead(TaskHead):
  """``dense`` [H, 1] on the ``[CLS]`` vector (dropout 0.1 when training), squared-error loss.

  outputs: loss [B], predictions [B], targets [B], eid [B].
  """

  def __init__(self, task_name: str, dropout_rate: float = 0.1, seed: int | None = None,
               **kwargs):
    super().__init__(task_name, **kwargs)
    self.dropout = tf_keras.layers.Dropout(dropout_rate, seed=seed)
    self.dense = Dense(1, self.sub_scope(names.DENSE))

  def build(self, input_shape):
    self.dense.build([None, int(input_shape[-1])])
    super().build(input_shape)

  def call(self, sequence_output: tf.Tensor, features: Mapping[str, tf.Tensor],
           training: bool = False, seed: tf.Tensor | None = None):
    """[B, T, H] -> (outputs, loss [B]); ``seed`` [2]: stateless dropout (None: Keras)."""
    reprs = dropout(self.dropout, _float(sequence_output)[:, 0], training, seed)
    predictions = tf.squeeze(self.dense(reprs), -1)  # [B]
    targets = features[self.task_name + "_targets"]
    losses = tf.square(predictions - _float(targets))
    outputs = dict(loss=losses, predictions=predictions, targets=targets,
                   eid=features[self.task_name + "_eid"])
    return outputs, losses

  def get_config(self):
    return {**super().get_config(), "dropout_rate": self.dropout.rate,
            "seed": self.dropout.seed}


@serializable
class TaggingHead(TaskHead):
  """``dense`` [H, num_tags] on the first word piece of each word (no dropout, as official).

  The sequence output is gathered at ``<task>_labeled_positions`` [B, P]; the softmax cross
  entropy is masked by ``<task>_labels_mask`` and summed over words.
  outputs: loss [B], logits [B, P, num_tags], predictions [B, P] (int64), labels, labels_mask, eid.
  """

  def __init__(self, task_name: str, num_tags: int, **kwargs):
    super().__init__(task_name, **kwargs)
    if num_tags < 1:
      raise ValueError(f"num_tags must be >= 1, got {num_tags}")
    self.num_tags = num_tags
    self.dense = Dense(num_tags, self.sub_scope(names.DENSE))

  def build(self, input_shape):
    self.dense.build([None, int(input_shape[-1])])
    super().build(input_shape)

  def call(self, sequence_output: tf.Tensor, features: Mapping[str, tf.Tensor],
           training: bool = False):
    """[B, T, H] -> (outputs, loss [B])."""
    name = self.task_name
    positions = features[name + "_labeled_positions"]  # [B, P]
    reprs = tf.gather(_float(sequence_output), positions, batch_dims=1)  # [B, P, H]
    logits = self.dense(reprs)  # [B, P, num_tags]
    labels = features[name + "_labels"]
    labels_mask = features[name + "_labels_mask"]
    losses = tf.nn.softmax_cross_entropy_with_logits(
        labels=tf.one_hot(labels, self.num_tags), logits=logits)
    losses = tf.reduce_sum(losses * _float(labels_mask), axis=-1)  # [B]
    outputs = dict(loss=losses, logits=logits, predictions=tf.argmax(logits, axis=-1),
                   labels=labels, labels_mask=labels_mask, eid=features[name + "_eid"])
    return outputs, losses

  def get_config(self):
    return {**super().get_config(), "num_tags": self.num_tags}


@serializable
class SpanQAHead(TaskHead):
  """SQuAD / MRQA span head (official ``QATask.get_prediction_module``).

  Start logits: ``dense`` [H, 1], pushed to -1000 outside the context (``answer_mask`` =
  input_mask * segment_ids, plus position 0 for "no answer"). With ``joint_prediction`` the
  end logits are conditioned on a start: ``qa_hidden`` [2H, qa_hidden_size] (gelu) on
  concat(start token, end token), then ``dense_1`` [qa_hidden_size, 1]. Training conditions on
  the gold start; inference on each of the ``beam_size`` best starts and returns top-k
  start/end log probs (``end_logits`` is then all zeros, as official). Without joint
  prediction ``dense_1`` [H, 1] gives independent end logits. The answerable classifier is
  ``dense_2`` [2H, qa_hidden_size] (gelu) on concat([CLS], softmax(start)-weighted tokens) and
  ``dense_3`` [qa_hidden_size, 1] (only ``dense_2`` [H, 1] on [CLS] when
  ``answerable_uses_start_logits`` is off), trained with sigmoid cross entropy on
  ``<task>_is_impossible``, weighted by ``answerable_weight``.

  outputs: loss [B], start_logits [B, T], end_logits [B, T], answerable_logit [B],
  start_positions, end_positions [B], start_top_log_probs / start_top_index [B, K],
  end_top_log_probs / end_top_index [B, K, K], eid [B]  (K = beam_size).
  """

  def __init__(self, task_name: str, beam_size: int = 20, joint_prediction: bool = True,
               answerable_classifier: bool = True, answerable_uses_start_logits: bool = True,
               answerable_weight: float = 0.5, qa_hidden_size: int = 512, **kwargs):
    super().__init__(task_name, **kwargs)
    self.beam_size, self.joint_prediction = beam_size, joint_prediction
    self.answerable_classifier = answerable_classifier
    self.answerable_uses_start_logits = answerable_uses_start_logits
    self.answerable_weight, self.qa_hidden_size = answerable_weight, qa_hidden_size
    s = self.sub_scope
    self.start_dense = Dense(1, s(names.DENSE))
    self.qa_hidden = Dense(qa_hidden_size, s(names.QA_HIDDEN)) if joint_prediction else None
    self.end_dense = Dense(1, s(names.DENSE_1))
    self.answerable_hidden = None
    self.answerable_dense = None
    if answerable_classifier:
      if answerable_uses_start_logits:
        self.answerable_hidden = Dense(qa_hidden_size, s(names.DENSE_2))
        self.answerable_dense = Dense(1, s(names.DENSE_3))
      else:
        self.answerable_dense = Dense(1, s(names.DENSE_2))

  def build(self, input_shape):
    h = int(input_shape[-1])
    self.start_dense.build([None, h])
    if self.joint_prediction:
      self.qa_hidden.build([None, 2 * h])
      self.end_dense.build([None, self.qa_hidden_size])
    else:
      self.end_dense.build([None, h])
    if self.answerable_hidden is not None:
      self.answerable_hidden.build([None, 2 * h])
      self.answerable_dense.build([None, self.qa_hidden_size])
    elif self.answerable_dense is not None:
      self.answerable_dense.build([None, h])
    super().build(input_shape)

  def end_hidden(self, start_features: tf.Tensor, hidden: tf.Tensor) -> tf.Tensor:
    """gelu(qa_hidden(concat(start, token))) as start@W[:H] + token@W[H:] + b.

    start_features [B, K, H] (or [B, 1, H]), hidden [B, T, H] -> [B, K, T, qa_hidden_size].
    Splitting the kernel avoids the official [B, K, T, 2H] tiled concat (same math, less memory).
    """
    h = tf.shape(hidden)[-1]
    kernel = self.qa_hidden.kernel
    from_start = tf.einsum("bkh,hd->bkd", start_features, kernel[:h])  # [B, K, D]
    from_token = tf.einsum("bth,hd->btd", hidden, kernel[h:])  # [B, T, D]
    pre = from_start[:, :, None, :] + from_token[:, None, :, :] + self.qa_hidden.bias
    return gelu(pre)

  def call(self, sequence_output: tf.Tensor, features: Mapping[str, tf.Tensor],
           training: bool = False):
    """[B, T, H] -> (outputs, loss [B])."""
    name, k = self.task_name, self.beam_size
    hidden = _float(sequence_output)
    batch_size, seq_length = tf.shape(hidden)[0], tf.shape(hidden)[1]
    answer_mask = _float(features["input_mask"]) * _float(features["segment_ids"])
    answer_mask += tf.one_hot(0, seq_length)  # position 0 = "no answer"
    mask_adder = 1000.0 * (answer_mask - 1.0)  # [B, T]
    start_positions = features[name + "_start_positions"]
    end_positions = features[name + "_end_positions"]

    start_logits = tf.squeeze(self.start_dense(hidden), -1)  # [B, T]
    start_top_log_probs = tf.zeros([batch_size, k])
    start_top_index = tf.zeros([batch_size, k], tf.int32)
    end_top_log_probs = tf.zeros([batch_size, k, k])
    end_top_index = tf.zeros([batch_size, k, k], tf.int32)
    if self.joint_prediction:
      start_logits += mask_adder
      start_top_log_probs, start_top_index = tf.nn.top_k(tf.nn.log_softmax(start_logits), k=k)
      if training:
        # One concat matmul, as the official training path: the split form of end_hidden rounds
        # differently, and a rounding step at -1000 (masked positions) is 6e-5.
        start_features = tf.gather(hidden, start_positions, batch_dims=1)  # [B, H]
        start_tiled = tf.tile(start_features[:, None], [1, seq_length, 1])  # [B, T, H]
        end_hidden = gelu(self.qa_hidden(tf.concat([start_tiled, hidden], -1)))  # [B, T, D]
        end_logits = tf.squeeze(self.end_dense(end_hidden), -1) + mask_adder  # [B, T]
      else:
        start_features = tf.gather(hidden, start_top_index, batch_dims=1)  # [B, K, H]
        end_hidden = self.end_hidden(start_features, hidden)  # [B, K, T, D]
        beam_end_logits = tf.squeeze(self.end_dense(end_hidden), -1) + mask_adder[:, None]
        end_top_log_probs, end_top_index = tf.nn.top_k(tf.nn.log_softmax(beam_end_logits), k=k)
        end_logits = tf.zeros([batch_size, seq_length])  # official: zeros at inference
    else:
      end_logits = tf.squeeze(self.end_dense(hidden), -1) + mask_adder
      start_logits += mask_adder

    losses = (_cross_entropy(start_logits, start_positions) +
              _cross_entropy(end_logits, end_positions)) / 2.0

    answerable_logit = tf.zeros([batch_size])
    if self.answerable_classifier:
      reprs = hidden[:, 0]  # [B, H]
      if self.answerable_uses_start_logits:
        start_p = tf.nn.softmax(start_logits)  # [B, T]
        start_feature = tf.reduce_sum(start_p[:, :, None] * hidden, axis=1)  # [B, H]
        reprs = gelu(self.answerable_hidden(tf.concat([reprs, start_feature], -1)))
      answerable_logit = tf.squeeze(self.answerable_dense(reprs), -1)  # [B]
      answerable_loss = tf.nn.sigmoid_cross_entropy_with_logits(
          labels=_float(features[name + "_is_impossible"]), logits=answerable_logit)
      losses += answerable_loss * self.answerable_weight

    outputs = dict(loss=losses, start_logits=start_logits, end_logits=end_logits,
                   answerable_logit=answerable_logit, start_positions=start_positions,
                   end_positions=end_positions, start_top_log_probs=start_top_log_probs,
                   start_top_index=start_top_index, end_top_log_probs=end_top_log_probs,
                   end_top_index=end_top_index, eid=features[name + "_eid"])
    return outputs, losses

  def get_config(self):
    return {**super().get_config(), "beam_size": self.beam_size,
            "joint_prediction": self.joint_prediction,
            "answerable_classifier": self.answerable_classifier,
            "answerable_uses_start_logits": self.answerable_uses_start_logits,
            "answerable_weight": self.answerable_weight, "qa_hidden_size": self.qa_hidden_size}
