"""The official pre-training ``metric_fn``: its math and streaming Keras metrics.

``metric_statistics`` turns one batch of model outputs into additive sufficient statistics
(weighted totals and counts; for ``disc_auc`` the confusion counts at the official 200
thresholds) and ``metrics_from_statistics`` turns (summed) statistics into values, so summing
over batches gives the official streaming value (``tf.compat.v1.metrics.accuracy`` / ``mean``
/ ``auc``), not a mean of per-batch values. ``OfficialMetric`` keeps those sums in Keras
metric variables: create them under ``strategy.scope()`` and call
``update_state(statistics)`` in replica context; variables are summed over replicas on read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf
import tf_keras

# Official tf.compat.v1.metrics.auc defaults (ROC curve, trapezoidal rule).
AUC_NUM_THRESHOLDS = 200
RATIO_METRICS = ("masked_lm_accuracy", "masked_lm_loss", "sampled_masked_lm_accuracy",
                 "disc_loss", "disc_accuracy", "disc_precision", "disc_recall")
AUC_COUNTS = ("tp", "fp", "fn", "tn")
# Metrics that are losses (training logs their per-step values as mlm_loss / disc_loss instead).
LOSS_METRICS = ("masked_lm_loss", "disc_loss")


def metric_statistics(outputs: Mapping[str, tf.Tensor], disc_weight: float = 1.0
                      ) -> dict[str, tf.Tensor]:
  """Additive sufficient statistics of the official ``metric_fn`` for one batch.

  Summing these over batches and calling ``metrics_from_statistics`` gives the official
  streaming values exactly, AUC included (confusion counts at the same 200 thresholds).
  Discriminator entries appear when ``outputs`` has them and ``disc_weight > 0``, the
  sampled-token accuracy when ``outputs`` has ``sampled_tokids``.
  """
  w = tf.reshape(tf.cast(outputs["masked_lm_weights"], tf.float32), [-1])
  ids = tf.reshape(outputs["masked_lm_ids"], [-1])
  correct = tf.cast(tf.equal(ids, tf.reshape(outputs["gen_mlm_preds"], [-1])), tf.float32)
  stats = {
      "masked_lm_accuracy/total": tf.reduce_sum(w * correct),
      "masked_lm_accuracy/count": tf.reduce_sum(w),
      "masked_lm_loss/total": tf.reduce_sum(
          w * tf.reshape(outputs["gen_mlm_per_example_loss"], [-1])),
      "masked_lm_loss/count": tf.reduce_sum(w),
  }
  if "sampled_tokids" in outputs:
    sampled = tf.cast(tf.equal(ids, tf.reshape(outputs["sampled_tokids"], [-1])), tf.float32)
    stats["sampled_masked_lm_accuracy/total"] = tf.reduce_sum(w * sampled)
    stats["sampled_masked_lm_accuracy/count"] = tf.reduce_sum(w)
  if "disc_probs" in outputs and disc_weight > 0:
    per_example = tf.cast(outputs["disc_per_example_loss"], tf.float32)
    stats["disc_loss/total"] = tf.reduce_sum(per_example)
    stats["disc_loss/count"] = tf.cast(tf.size(per_example), tf.float32)
    mask = tf.cast(outputs["input_mask"], tf.float32)
    labels = tf.cast(outputs["disc_labels"], tf.float32)
    preds = tf.cast(outputs["disc_preds"], tf.float32)
    agree = tf.cast(tf.equal(labels, preds), tf.float32)
    for name, weight in (("disc_accuracy", mask), ("disc_precision", preds * mask),
                         ("disc_recall", labels * mask)):
      stats[name + "/total"] = tf.reduce_sum(weight * agree)
      stats[name + "/count"] = tf.reduce_sum(weight)
    stats.update(_auc_counts(labels * mask, tf.cast(outputs["disc_probs"], tf.float32) * mask))
  return stats


def _auc_thresholds() -> list[float]:
  n = AUC_NUM_THRESHOLDS
  inner = [(i + 1) * 1.0 / (n - 1) for i in range(n - 2)]
  return [0.0 - 1e-7] + inner + [1.0 + 1e-7]


def _auc_counts(labels: tf.Tensor, probs: tf.Tensor) -> dict[str, tf.Tensor]:
  """tf.compat.v1.metrics.auc confusion counts [200]: prediction > threshold is positive.

  As the official call, padding positions take part as negatives with probability 0.
  """
  thresholds = tf.constant(_auc_thresholds(), tf.float32)[:, tf.newaxis]  # [K, 1]
  pred_pos = tf.reshape(probs, [1, -1]) > thresholds  # [K, B*T]
  label_pos = tf.reshape(tf.cast(labels, tf.bool), [1, -1])

  def count(a, b):
    return tf.reduce_sum(tf.cast(a & b, tf.float32), 1)

  return {"disc_auc/tp": count(pred_pos, label_pos), "disc_auc/fp": count(pred_pos, ~label_pos),
          "disc_auc/fn": count(~pred_pos, label_pos), "disc_auc/tn": count(~pred_pos, ~label_pos)}


def metrics_from_statistics(stats: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
  """Metric values from (summed) ``metric_statistics``; a ratio with weight 0 is 0, as TF1."""
  values: dict[str, tf.Tensor] = {}
  for key in stats:
    if key.endswith("/total"):
      name = key[: -len("/total")]
      values[name] = tf.math.divide_no_nan(stats[key], stats[name + "/count"])
  if "disc_auc/tp" in stats:
    tp, fp, fn, tn = (stats["disc_auc/" + k] for k in ("tp", "fp", "fn", "tn"))
    eps = 1e-6  # official compute_auc
    tpr = (tp + eps) / (tp + fn + eps)
    fpr = fp / (fp + tn + eps)
    values["disc_auc"] = tf.reduce_sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2.0)
  return values


def metrics(outputs: Mapping[str, tf.Tensor], disc_weight: float = 1.0) -> dict[str, tf.Tensor]:
  """The official ``metric_fn`` on one batch: ``masked_lm_accuracy``, ``masked_lm_loss``,
  ``sampled_masked_lm_accuracy``, ``disc_loss``, ``disc_auc``, ``disc_accuracy``,
  ``disc_precision``, ``disc_recall`` (the last five when ``disc_weight > 0``).

  ``disc_auc`` is tf.compat.v1.metrics.auc's value (200 thresholds, trapezoidal ROC) computed on
  this batch alone; accumulate ``metric_statistics`` over batches for the streaming value.
  """
  return metrics_from_statistics(metric_statistics(outputs, disc_weight))


class OfficialMetric(tf_keras.metrics.Metric):
  """One value of the official ``metric_fn``, streamed over ``update_state`` calls.

  ``update_state(stats)`` takes the whole ``metric_statistics`` dict and reads only this
  metric's keys (``<name>/total`` and ``<name>/count``, or ``disc_auc/{tp,fp,fn,tn}`` [200]).
  """

  def __init__(self, name: str, **kwargs):
    super().__init__(name=name, dtype=tf.float32, **kwargs)
    if name == "disc_auc":
      keys = {f"disc_auc/{k}": [AUC_NUM_THRESHOLDS] for k in AUC_COUNTS}
    elif name in RATIO_METRICS:
      keys = {f"{name}/total": [], f"{name}/count": []}
    else:
      raise ValueError(f"unknown pre-training metric {name!r}; known: "
                       f"{', '.join(RATIO_METRICS + ('disc_auc',))}")
    self._sums = {key: self.add_weight(key.replace("/", "_"), shape=shape, initializer="zeros")
                  for key, shape in keys.items()}

  def update_state(self, stats: Mapping[str, tf.Tensor]) -> None:  # noqa: D102
    missing = [k for k in self._sums if k not in stats]
    if missing:
      raise ValueError(f"metric {self.name}: statistics lack {', '.join(missing)}")
    for key, var in self._sums.items():
      var.assign_add(tf.cast(stats[key], tf.float32))

  def result(self) -> tf.Tensor:
    return metrics_from_statistics({k: tf.convert_to_tensor(v) for k, v in self._sums.items()}
                                   )[self.name]

  def reset_state(self) -> None:
    for var in self._sums.values():
      var.assign(tf.zeros_like(var))


def metric_names(has_discriminator: bool, disc_weight: float,
                 include_losses: bool = True) -> list[str]:
  """Names the official ``metric_fn`` reports for a model (its eval keys besides ``loss``).

  ``masked_lm_accuracy`` and ``masked_lm_loss`` always; ``sampled_masked_lm_accuracy`` with a
  discriminator; ``disc_loss``, ``disc_auc``, ``disc_accuracy``, ``disc_precision``,
  ``disc_recall`` when also ``disc_weight > 0``. ``include_losses=False`` drops the two losses.
  """
  names = ["masked_lm_accuracy", "masked_lm_loss"]
  if has_discriminator:
    names.append("sampled_masked_lm_accuracy")
    if disc_weight > 0:
      names += ["disc_loss", "disc_auc", "disc_accuracy", "disc_precision", "disc_recall"]
  return [n for n in names if include_losses or n not in LOSS_METRICS]


def official_metrics(names: Sequence[str]) -> list[OfficialMetric]:
  """One ``OfficialMetric`` per name (create under the strategy's scope)."""
  return [OfficialMetric(name) for name in names]
