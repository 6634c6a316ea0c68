"""Extractive QA decoding and scoring (official ``qa_metrics``).

Turns the span head's per-window outputs into answers: the n-best search over every window of
every question, the projection of the word-piece answer back onto the original text, and the
scorer that writes the predictions and runs the task's official evaluation. It takes the
questions with their featurized windows and the task's settings as plain values
(``Question``, ``DecodeOptions``), so it does not know the task classes of ``qa.py``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from electra_tf import atomic_io
from electra_tf.finetuning import scorers


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
  """The task settings the answer search reads (a ``QATask``'s, see ``QATask.decode_options``)."""

  name: str  # the task name, prefix of the window features' keys
  v2: bool  # questions may be unanswerable: null scores are computed
  joint_prediction: bool  # the head's beam gives start / end candidates jointly
  answerable_classifier: bool
  n_best_size: int
  max_answer_length: int
  basic_tokenizer: Any  # the task tokenizer's, for ``get_final_text``


class Question(NamedTuple):
  """One question to answer: its id, the context words and its eval windows' feature dicts
  (``QATask.featurize(example, for_eval=True)``)."""

  qid: str
  doc_tokens: Sequence[str]
  windows: Sequence[Mapping[str, Any]]


def get_final_text(pred_text: str, orig_text: str, basic_tokenizer: Any) -> str:
  """Projects the normalized word-piece answer back onto the original words' characters.

  Tokenizes ``orig_text`` with ``basic_tokenizer`` (the task tokenizer's, so lower-casing
  follows ``do_lower_case`` as official), finds ``pred_text`` in it and maps its characters
  back when the space-stripped strings align one to one; otherwise returns ``orig_text``.
  """

  def strip_spaces(text):
    ns_chars, ns_to_s = [], {}
    for i, c in enumerate(text):
      if c == " ":
        continue
      ns_to_s[len(ns_chars)] = i
      ns_chars.append(c)
    return "".join(ns_chars), ns_to_s

  tok_text = " ".join(basic_tokenizer.tokenize(orig_text))
  start = tok_text.find(pred_text)
  if start == -1:
    return orig_text
  end = start + len(pred_text) - 1
  orig_ns_text, orig_ns_to_s = strip_spaces(orig_text)
  tok_ns_text, tok_ns_to_s = strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    return orig_text
  tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}
  orig_start = orig_ns_to_s.get(tok_s_to_ns.get(start, -1))
  orig_end = orig_ns_to_s.get(tok_s_to_ns.get(end, -1))
  if orig_start is None or orig_end is None:
    return orig_text
  return orig_text[orig_start:orig_end + 1]


def _best_indexes(logits: Sequence[float], n_best_size: int) -> list[int]:
  return [i for i, _ in sorted(enumerate(logits), key=lambda x: x[1], reverse=True)][:n_best_size]


def _softmax(scores: Sequence[float]) -> list[float]:
  if not scores:
    return []
  exp = np.exp(np.asarray(scores, np.float64) - max(scores))
  return list(exp / exp.sum())


_Prelim = collections.namedtuple(
    "Prelim", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])
_NBest = collections.namedtuple("NBest", ["text", "start_logit", "end_logit"])


def _window_spans(feature_index: int, window: Mapping[str, Any], result: Mapping[str, Any],
                  task: DecodeOptions) -> list[_Prelim]:
  """The valid (start, end) candidates of one window: inside the context, max-context start,
  end not before start, at most ``max_answer_length`` word pieces."""
  n = task.name
  tokens = window[n + "_tokens"]
  to_orig = window[n + "_token_to_orig_map"]
  max_context = window[n + "_token_is_max_context"]
  if task.joint_prediction:
    start_indexes = result["start_top_index"]
    end_indexes = result["end_top_index"]
  else:
    start_indexes = _best_indexes(result["start_logits"], task.n_best_size)
    end_indexes = _best_indexes(result["end_logits"], task.n_best_size)
  prelim = []
  for i, start_index in enumerate(start_indexes):
    ends = end_indexes[i] if task.joint_prediction else end_indexes
    for j, end_index in enumerate(ends):
      start_index, end_index = int(start_index), int(end_index)
      if start_index >= len(tokens) or end_index >= len(tokens) or start_index == 0:
        continue
      if start_index not in to_orig or end_index not in to_orig:
        continue
      if not max_context.get(start_index, False) or end_index < start_index:
        continue
      if end_index - start_index + 1 > task.max_answer_length:
        continue
      if task.joint_prediction:
        start_logit = float(result["start_top_log_probs"][i])
        end_logit = float(result["end_top_log_probs"][i][j])
      else:
        start_logit = float(result["start_logits"][start_index])
        end_logit = float(result["end_logits"][end_index])
      prelim.append(_Prelim(feature_index, start_index, end_index, start_logit, end_logit))
  return prelim


def _null_score(result: Mapping[str, Any], task: DecodeOptions) -> float:
  """A window's no-answer score (v2): the answerable logit, else start[0] + end[0]."""
  if task.answerable_classifier:
    return float(result["answerable_logit"])
  return float(result["start_logits"][0] + result["end_logits"][0])


def _nbest(question: Question, prelim: list[_Prelim], task: DecodeOptions) -> list[_NBest]:
  """The best distinct answer texts, projected onto the original words, best first."""
  n = task.name
  prelim = sorted(prelim, key=lambda x: x.start_logit + x.end_logit, reverse=True)
  seen = set()
  nbest = []
  for pred in prelim:
    if len(nbest) >= task.n_best_size:
      break
    feature = question.windows[pred.feature_index]
    tok_text = " ".join(feature[n + "_tokens"][pred.start_index:pred.end_index + 1])
    tok_text = " ".join(tok_text.replace(" ##", "").replace("##", "").strip().split())
    orig_start = feature[n + "_token_to_orig_map"][pred.start_index]
    orig_end = feature[n + "_token_to_orig_map"][pred.end_index]
    orig_text = " ".join(question.doc_tokens[orig_start:orig_end + 1])
    final_text = get_final_text(tok_text, orig_text, task.basic_tokenizer)
    if final_text in seen:
      continue
    seen.add(final_text)
    nbest.append(_NBest(final_text, pred.start_logit, pred.end_logit))
  if not nbest:  # no valid span at all: official nonce prediction
    nbest.append(_NBest("empty", 0.0, 0.0))
  return nbest


def decode_predictions(questions: Iterable[Question],
                       results_by_eid: Mapping[int, Mapping[str, Any]], task: DecodeOptions
                       ) -> tuple[dict[str, str], dict[str, list[dict]], dict[str, float]]:
  """Official n-best answer search over every window of every question.

  Returns ``(predictions, nbest, null_scores)`` keyed by question id (``qas_id`` for SQuAD,
  ``qid`` for MRQA). ``null_scores`` (v2 only) is the min over windows of the answerable logit
  with the answerable classifier, else ``min(start[0] + end[0]) - best non-null score``.
  The prediction is always the best non-null text; the no-answer decision is left to the
  threshold in the v2 evaluation, as official.
  """
  predictions: dict[str, str] = {}
  all_nbest: dict[str, list[dict]] = {}
  null_scores: dict[str, float] = {}
  for question in questions:
    example_id = question.qid
    prelim = []
    score_null = 1000000.0
    for feature_index, window in enumerate(question.windows):
      result = results_by_eid[window[task.name + "_eid"]]
      if task.v2:
        score_null = min(score_null, _null_score(result, task))
      prelim += _window_spans(feature_index, window, result, task)
    nbest = _nbest(question, prelim, task)
    probs = _softmax([e.start_logit + e.end_logit for e in nbest])
    all_nbest[example_id] = [
        {"text": e.text, "probability": float(p), "start_logit": e.start_logit,
         "end_logit": e.end_logit} for e, p in zip(nbest, probs, strict=True)]
    best_non_null = next((e for e in nbest if e.text), None)
    best_text = best_non_null.text if best_non_null else ""
    if not task.v2:
      predictions[example_id] = nbest[0].text
    else:
      if task.answerable_classifier:
        null_scores[example_id] = score_null
      else:
        best = best_non_null or _NBest("", 0.0, 0.0)
        null_scores[example_id] = score_null - best.start_logit - best.end_logit
      predictions[example_id] = best_text
  return predictions, all_nbest, null_scores


class SpanQAScorer(scorers.Scorer):
  """Collects per-feature head outputs, decodes answers and runs the official evaluation.

  ``questions_fn()``: the split's questions (``Question``); ``evaluate_fn(predictions,
  null_scores)``: the task's official metrics. ``preds_path`` / ``na_path``: where to also
  write the predictions and (v2) null scores as JSON (the official ``qa_preds_file`` /
  ``qa_na_file``).
  """

  def __init__(self, questions_fn: Callable[[], Iterable[Question]],
               evaluate_fn: Callable[[dict[str, str], dict[str, float]], Mapping[str, float]],
               options: DecodeOptions, preds_path: str | None = None,
               na_path: str | None = None):
    super().__init__()
    self._questions_fn = questions_fn
    self._evaluate_fn = evaluate_fn
    self._options = options
    self._preds_path = preds_path
    self._na_path = na_path
    self._results: dict[int, dict[str, Any]] = {}
    self._total_loss = 0.0
    self._n = 0

  def update(self, results):
    super().update(results)
    self._results[int(results["eid"])] = {k: np.asarray(v) for k, v in results.items()}
    self._total_loss += float(results["loss"])
    self._n += 1

  def get_loss(self):
    return self._total_loss / max(1, self._n)

  def write_predictions(self) -> tuple[dict[str, str], dict[str, float]]:
    predictions, _, null_scores = decode_predictions(self._questions_fn(), self._results,
                                                     self._options)
    if self._preds_path:  # atomically: a kill leaves the old file or the new one, never half
      atomic_io.write_text(self._preds_path, json.dumps(predictions))
    if self._options.v2 and self._na_path:
      atomic_io.write_text(self._na_path,
                           json.dumps({k: float(v) for k, v in null_scores.items()}))
    return predictions, null_scores

  def _get_results(self):
    predictions, null_scores = self.write_predictions()
    metrics = self._evaluate_fn(predictions, null_scores)
    return sorted(metrics.items())
