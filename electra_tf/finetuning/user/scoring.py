"""Scorers reporting the metrics a user task's ``task.json`` names (percent, as every scorer
here), built on the built-in scorers' accumulation and metric functions; ``loss`` is always
reported last, as by the built-in scorers.

Classification: ``accuracy``, ``macro_f1`` (unweighted mean of the per-class F1 over the
classes in the gold labels or the predictions, as scikit-learn's ``average="macro"``), ``mcc``,
and for two labels ``precision`` / ``recall`` / ``f1`` of the second label (as GLUE's MRPC F1).
Regression: ``pearson``, ``spearman``, ``mse`` (on the task's targets, as ``sts``).
Tagging: span ``precision`` / ``recall`` / ``f1`` (the ``chunk`` scorer) and word ``accuracy``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from electra_tf.finetuning import scorers


def macro_f1(labels: Sequence[int], preds: Sequence[int]) -> float:
  """Mean per-class F1 (percent) over the classes seen in ``labels`` or ``preds``."""
  classes = sorted(set(labels) | set(preds))
  if not classes:
    raise ValueError("macro F1 of zero examples")
  return float(np.mean([scorers.binary_f1(labels, preds, positive=c)[2] for c in classes]))


def classification_metrics(labels: Sequence[int], preds: Sequence[int],
                           names: Sequence[str]) -> list[tuple[str, float]]:
  """The named metrics of label ids vs predicted ids."""
  p_r_f1 = dict(zip(("precision", "recall", "f1"), scorers.binary_f1(labels, preds),
                    strict=True))
  out = []
  for name in names:
    if name == "accuracy":
      out.append((name, scorers.accuracy(labels, preds)))
    elif name == "macro_f1":
      out.append((name, macro_f1(labels, preds)))
    elif name == "mcc":
      out.append((name, 100.0 * scorers.matthews_corrcoef(labels, preds)))
    else:
      out.append((name, p_r_f1[name]))
  return out


def regression_metrics(targets: Sequence[float], preds: Sequence[float],
                       names: Sequence[str]) -> list[tuple[str, float]]:
  t, p = np.asarray(targets, np.float64), np.asarray(preds, np.float64)
  values = {"pearson": lambda: 100.0 * scorers.pearson(t, p),
            "spearman": lambda: 100.0 * scorers.spearman(t, p),
            "mse": lambda: float(np.mean(np.square(t - p)))}
  return [(name, values[name]()) for name in names]


class ClassificationScorer(scorers.SentenceLevelScorer):
  """Sentence-level scorer of the named classification metrics."""

  def __init__(self, metrics: Sequence[str]):
    super().__init__()
    self.metrics = tuple(metrics)

  def _get_results(self):
    labels = [int(y) for y in self._labels]
    preds = [int(p) for p in self._preds]
    return classification_metrics(labels, preds, self.metrics) + [("loss", self.get_loss())]


class RegressionScorer(scorers.SentenceLevelScorer):
  """Sentence-level scorer of the named regression metrics."""

  def __init__(self, metrics: Sequence[str]):
    super().__init__()
    self.metrics = tuple(metrics)

  def _get_results(self):
    return regression_metrics(self._labels, self._preds, self.metrics) + [
        ("loss", self.get_loss())]


class TaggingScorer(scorers.EntityLevelF1Scorer):
  """The ``chunk`` span scorer, plus word accuracy, reporting the named metrics."""

  def __init__(self, label_mapping: Mapping[str, int], metrics: Sequence[str]):
    super().__init__(label_mapping)
    self.metrics = tuple(metrics)

  def _get_results(self):
    values = dict(super()._get_results()) if set(self.metrics) - {"accuracy"} else {}
    if "accuracy" in self.metrics:
      labels = [int(y) for sent in self._labels for y in sent]
      preds = [int(p) for sent in self._preds for p in sent]
      values["accuracy"] = scorers.accuracy(labels, preds)
    return [(name, values[name]) for name in self.metrics] + [("loss", self.get_loss())]
