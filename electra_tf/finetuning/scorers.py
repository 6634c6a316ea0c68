"""Evaluation metrics with the official ELECTRA semantics (all scores in percent, as official).

- sentence level: accuracy, Matthews correlation (CoLA), binary F1, Pearson / Spearman / MSE (STS);
- tagging: word accuracy, entity-level (chunk span) precision / recall / F1 from BIOES tags;
- span QA: the official SQuAD v1.1 (via tf-models-official), SQuAD v2.0 (with ELECTRA's
  no-answer threshold) and MRQA EM / F1 rules.

Scorers follow the official ``Scorer`` protocol: ``update(results)`` once per example with that
example's slice of the head outputs (numpy), then ``get_results()`` -> [(name, value)].
"""

from __future__ import annotations

import abc
import collections
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------
# Pure metrics
# --------------------------------------------------------------------------------------------


def accuracy(labels: Sequence[Any], preds: Sequence[Any]) -> float:
  """Percent of equal pairs."""
  if len(labels) == 0:
    raise ValueError("accuracy of zero examples")
  return 100.0 * sum(1 for y, p in zip(labels, preds, strict=True) if y == p) / len(labels)


def matthews_corrcoef(labels: Sequence[int], preds: Sequence[int]) -> float:
  """Multi-class Matthews correlation (sklearn's formula; 0 when undefined). In [-1, 1]."""
  classes = sorted(set(labels) | set(preds))
  index = {c: i for i, c in enumerate(classes)}
  confusion = np.zeros([len(classes)] * 2, np.float64)
  for y, p in zip(labels, preds, strict=True):
    confusion[index[y], index[p]] += 1
  t_sum, p_sum = confusion.sum(axis=1), confusion.sum(axis=0)
  n, correct = confusion.sum(), np.trace(confusion)
  cov_yp = correct * n - np.dot(t_sum, p_sum)
  cov_pp = n * n - np.dot(p_sum, p_sum)
  cov_yy = n * n - np.dot(t_sum, t_sum)
  if cov_pp * cov_yy == 0:
    return 0.0
  return float(cov_yp / np.sqrt(cov_yy * cov_pp))


def precision_recall_f1(n_correct: int, n_predicted: int, n_gold: int) -> tuple[float, ...]:
  """Percent precision, recall, F1; all 0 when nothing is correct (official convention)."""
  if n_correct == 0:
    return 0.0, 0.0, 0.0
  p = 100.0 * n_correct / n_predicted
  r = 100.0 * n_correct / n_gold
  return p, r, 2 * p * r / (p + r)


def binary_f1(labels: Sequence[int], preds: Sequence[int], positive: int = 1) -> tuple[float, ...]:
  """Precision, recall, F1 (percent) of the ``positive`` class."""
  n_pred = sum(1 for p in preds if p == positive)
  n_gold = sum(1 for y in labels if y == positive)
  n_correct = sum(1 for y, p in zip(labels, preds, strict=True) if y == p == positive)
  return precision_recall_f1(n_correct, n_pred, n_gold)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
  """Pearson correlation in [-1, 1] (float64)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  xc, yc = x - x.mean(), y - y.mean()
  return float(np.sum(xc * yc) / np.sqrt(np.sum(xc * xc) * np.sum(yc * yc)))


def _average_ranks(x: np.ndarray) -> np.ndarray:
  """1-based ranks, ties get the mean of their ranks (scipy ``rankdata`` 'average')."""
  order = np.argsort(x, kind="mergesort")
  ranks = np.empty(len(x), np.float64)
  sorted_x = x[order]
  start = 0
  for i in range(1, len(x) + 1):
    if i == len(x) or sorted_x[i] != sorted_x[start]:
      ranks[order[start:i]] = (start + 1 + i) / 2.0
      start = i
  return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
  """Spearman rank correlation: Pearson of the tie-averaged ranks."""
  return pearson(_average_ranks(np.asarray(x, np.float64)),
                 _average_ranks(np.asarray(y, np.float64)))


# --------------------------------------------------------------------------------------------
# Tagging spans (official tagging_utils)
# --------------------------------------------------------------------------------------------


def get_span_labels(tags: Sequence[Any],
                    inv_label_mapping: Mapping[int, str] | None = None) -> list[tuple]:
  """Tags (IOB, BIOES, ...; or ids with ``inv_label_mapping``) -> [(start, end, type)].

  Official rules: a span closes before a ``B``/``S`` tag or ``O``; an ``I``/``E`` tag never
  starts a new span (a type change without ``B`` extends the open span, taking the last type).
  """
  if inv_label_mapping:
    tags = [inv_label_mapping[t] for t in tags]
  spans = []
  last, start = "O", -1
  for i, tag in enumerate(tags):
    pos = None if tag == "O" else tag.split("-")[0]
    if (pos in ("S", "B") or tag == "O") and last != "O":
      spans.append((start, i - 1, last.split("-")[-1]))
    if pos in ("B", "S") or last == "O":
      start = i
    last = tag
  if len(tags) and tags[-1] != "O":
    spans.append((start, len(tags) - 1, tags[-1].split("-")[-1]))
  return spans


def get_tags(span_labels: Sequence[tuple], length: int, encoding: str = "BIOES") -> list[str]:
  """[(start, end, type)] -> per-word tags in ``encoding`` (letters among B, I, O, E, S)."""
  tags = ["O"] * length
  for s, e, t in span_labels:
    for i in range(s, e + 1):
      tags[i] = "I-" + t
    if "E" in encoding:
      tags[e] = "E-" + t
    if "B" in encoding:
      tags[s] = "B-" + t
    if "S" in encoding and s == e:
      tags[s] = "S-" + t
  return tags


# --------------------------------------------------------------------------------------------
# SQuAD / MRQA answer matching
# --------------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
  """Lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace."""
  s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(gold: str, pred: str) -> int:
  return int(normalize_answer(gold) == normalize_answer(pred))


def f1_v1(gold: str, pred: str) -> float:
  """SQuAD v1.1 / MRQA token F1 (an empty side scores 0)."""
  gold_toks, pred_toks = normalize_answer(gold).split(), normalize_answer(pred).split()
  num_same = sum((collections.Counter(gold_toks) & collections.Counter(pred_toks)).values())
  if num_same == 0:
    return 0.0
  precision, recall = num_same / len(pred_toks), num_same / len(gold_toks)
  return 2 * precision * recall / (precision + recall)


def f1_v2(gold: str, pred: str) -> float:
  """SQuAD v2.0 token F1: when either side is empty (no answer), 1 if both are, else 0."""
  gold_toks = normalize_answer(gold).split() if gold else []
  pred_toks = normalize_answer(pred).split() if pred else []
  if not gold_toks or not pred_toks:
    return float(gold_toks == pred_toks)
  return f1_v1(gold, pred)


def squad_v1_evaluate(dataset: Sequence[Mapping], predictions: Mapping[str, str]) -> dict:
  """Official SQuAD v1.1 script: {'exact_match', 'f1'} in percent over all questions."""
  # tf-models-official's copy of the v1.1 script (same rules) returns fractions. Imported here:
  # tf-models-official needs TensorFlow to install, and the device path scores without it.
  from official.nlp.tools import squad_evaluate_v1_1

  result = squad_evaluate_v1_1.evaluate(dataset, predictions)
  return {"exact_match": 100.0 * result["exact_match"], "f1": 100.0 * result["final_f1"]}


def squad_v2_evaluate(dataset: Sequence[Mapping], predictions: Mapping[str, str],
                      na_scores: Mapping[str, float] | None = None,
                      na_threshold: float = 1.0) -> dict[str, float]:
  """Official SQuAD v2.0 script as ELECTRA runs it.

  A question is predicted unanswerable when ``na_scores[qid] > na_threshold``; ELECTRA passes
  the answerable-classifier logit (not a probability) and ``qa_na_threshold`` (-2.75).
  Returns exact / f1 / total, HasAns_* and NoAns_* and, with ``na_scores``, best_exact /
  best_f1 and their thresholds. Questions without a prediction are left out (the official
  script prints "Missing prediction").
  """
  has_answer: dict[str, bool] = {}
  exact_raw: dict[str, float] = {}
  f1_raw: dict[str, float] = {}
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        qid = qa["id"]
        has_answer[qid] = bool(qa["answers"])
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qid not in predictions:
          continue
        pred = predictions[qid]
        exact_raw[qid] = max(exact_match(g, pred) for g in golds)
        f1_raw[qid] = max(f1_v2(g, pred) for g in golds)
  scores_na = na_scores if na_scores is not None else {k: 0.0 for k in predictions}

  def thresholded(raw):
    return {q: float(not has_answer[q]) if scores_na[q] > na_threshold else s
            for q, s in raw.items()}

  exact, f1 = thresholded(exact_raw), thresholded(f1_raw)

  def summary(qids):
    return {"exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
            "f1": 100.0 * sum(f1[q] for q in qids) / len(qids), "total": len(qids)}

  out = summary(list(exact))
  for prefix, wanted in (("HasAns", True), ("NoAns", False)):
    qids = [q for q in exact if has_answer[q] == wanted]
    if qids:
      out.update({f"{prefix}_{k}": v for k, v in summary(qids).items()})
  if na_scores is not None:
    for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
      best, thresh = _best_threshold(predictions, raw, na_scores, has_answer)
      out[f"best_{name}"], out[f"best_{name}_thresh"] = best, thresh
  return out


def _best_threshold(predictions, scores, na_scores, has_answer) -> tuple[float, float]:
  """Official ``find_best_thresh``: sweep the no-answer threshold over the sorted scores."""
  cur = best = sum(1 for q in has_answer if not has_answer[q])
  best_thresh = 0.0
  for qid in sorted(na_scores, key=lambda q: na_scores[q]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      cur += scores[qid]
    else:
      cur += -1 if predictions[qid] else 0
    if cur > best:
      best, best_thresh = cur, na_scores[qid]
  return 100.0 * best / len(scores), best_thresh


def mrqa_evaluate(answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                  skip_no_answer: bool = True) -> dict[str, float]:
  """Official MRQA script: max EM / F1 over the gold strings, percent.

  ELECTRA calls it with ``skip_no_answer=True``: questions without a prediction do not count.
  """
  em = f1 = total = 0.0
  for qid, golds in answers.items():
    if qid not in predictions:
      if not skip_no_answer:
        total += 1
      continue
    total += 1
    em += max(exact_match(g, predictions[qid]) for g in golds)
    f1 += max(f1_v1(g, predictions[qid]) for g in golds)
  if total == 0:
    raise ValueError("MRQA evaluation over zero questions")
  return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


# --------------------------------------------------------------------------------------------
# Scorers
# --------------------------------------------------------------------------------------------


class Scorer(abc.ABC):
  """Accumulates per-example head outputs; ``get_results`` caches until the next update."""

  def __init__(self):
    self._updated = False
    self._cached: list[tuple[str, float]] = []

  def update(self, results: Mapping[str, Any]) -> None:
    self._updated = True

  @abc.abstractmethod
  def get_loss(self) -> float:
    """Mean loss over what was seen."""

  @abc.abstractmethod
  def _get_results(self) -> list[tuple[str, float]]:
    pass

  def get_results(self, prefix: str = "") -> list[tuple[str, float]]:
    if self._updated:
      self._cached = self._get_results()
      self._updated = False
    return [(prefix + k, v) for k, v in self._cached]

  def results_str(self) -> str:
    return " - ".join(f"{k}: {v:.2f}" for k, v in self.get_results())


class SentenceLevelScorer(Scorer):
  """One label (``label_ids``) or target (``targets``) and one prediction per example."""

  def __init__(self):
    super().__init__()
    self._total_loss = 0.0
    self._labels: list[Any] = []
    self._preds: list[Any] = []

  def update(self, results):
    super().update(results)
    self._total_loss += float(results["loss"])
    label = results["label_ids"] if "label_ids" in results else results["targets"]
    self._labels.append(np.asarray(label).item())
    self._preds.append(np.asarray(results["predictions"]).item())

  def get_loss(self):
    return self._total_loss / max(1, len(self._labels))


class AccuracyScorer(SentenceLevelScorer):
  def _get_results(self):
    return [("accuracy", accuracy(self._labels, self._preds)), ("loss", self.get_loss())]


class AccuracyF1Scorer(SentenceLevelScorer):
  """Accuracy (the official MRPC / QQP metric) plus positive-class F1 (GLUE's other metric)."""

  def _get_results(self):
    p, r, f1 = binary_f1(self._labels, self._preds)
    return [("accuracy", accuracy(self._labels, self._preds)), ("precision", p),
            ("recall", r), ("f1", f1), ("loss", self.get_loss())]


class MCCScorer(SentenceLevelScorer):
  def _get_results(self):
    return [("mcc", 100.0 * matthews_corrcoef(self._labels, self._preds)),
            ("loss", self.get_loss())]


class RegressionScorer(SentenceLevelScorer):
  def _get_results(self):
    labels, preds = np.asarray(self._labels, np.float64), np.asarray(self._preds, np.float64)
    return [("pearson", 100.0 * pearson(labels, preds)),
            ("spearman", 100.0 * spearman(labels, preds)),
            ("mse", float(np.mean(np.square(labels - preds)))), ("loss", self.get_loss())]


class WordLevelScorer(Scorer):
  """Per-word labels/predictions of the first ``sum(labels_mask)`` words of each example."""

  def __init__(self):
    super().__init__()
    self._total_loss = 0.0
    self._total_words = 0
    self._labels: list[np.ndarray] = []
    self._preds: list[np.ndarray] = []

  def update(self, results):
    super().update(results)
    n_words = int(round(float(np.sum(results["labels_mask"]))))
    self._labels.append(np.asarray(results["labels"])[:n_words])
    self._preds.append(np.asarray(results["predictions"])[:n_words])
    # The official adds each loss twice (reported loss doubled); counted once here.
    self._total_loss += float(np.sum(results["loss"]))
    self._total_words += n_words

  def get_loss(self):
    return self._total_loss / max(1, self._total_words)


class WordAccuracyScorer(WordLevelScorer):
  def _get_results(self):
    labels = [int(y) for sent in self._labels for y in sent]
    preds = [int(p) for sent in self._preds for p in sent]
    return [("accuracy", accuracy(labels, preds)), ("loss", self.get_loss())]


class EntityLevelF1Scorer(WordLevelScorer):
  """Span (chunk / entity) precision, recall, F1 from tag ids through ``label_mapping``."""

  def __init__(self, label_mapping: Mapping[str, int]):
    super().__init__()
    self._inv_label_mapping = {v: k for k, v in label_mapping.items()}

  def _get_results(self):
    n_correct = n_gold = n_pred = 0
    for labels, preds in zip(self._labels, self._preds, strict=True):
      gold = set(get_span_labels([int(t) for t in labels], self._inv_label_mapping))
      pred = set(get_span_labels([int(t) for t in preds], self._inv_label_mapping))
      n_correct += len(gold & pred)
      n_gold += len(gold)
      n_pred += len(pred)
    p, r, f1 = precision_recall_f1(n_correct, n_pred, n_gold)
    return [("precision", p), ("recall", r), ("f1", f1), ("loss", self.get_loss())]
