"""The official pre-training ``metric_fn`` as streaming Keras metrics (training logs and eval).

Each metric keeps running sums of the additive statistics of
``objectives.metric_statistics`` (weighted totals and counts; for ``disc_auc`` the confusion
counts at the official 200 thresholds), so its ``result()`` over many batches is the official
streaming value (``tf.compat.v1.metrics.accuracy`` / ``mean`` / ``auc``), not a mean of
per-batch values. Create them under ``strategy.scope()`` and call
``update_state(statistics)`` in replica context; variables are summed over replicas on read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf
import tf_keras

from electra_tf.pretraining.objectives import AUC_NUM_THRESHOLDS, metrics_from_statistics

RATIO_METRICS = ("masked_lm_accuracy", "masked_lm_loss", "sampled_masked_lm_accuracy",
                 "disc_loss", "disc_accuracy", "disc_precision", "disc_recall")
AUC_COUNTS = ("tp", "fp", "fn", "tn")
# Metrics that are losses (training logs their per-step values as mlm_loss / disc_loss instead).
LOSS_METRICS = ("masked_lm_loss", "disc_loss")


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
