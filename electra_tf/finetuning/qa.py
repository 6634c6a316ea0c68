"""Extractive QA: SQuAD 1.1 / 2.0 and the MRQA 2019 tasks (official ``qa_tasks`` / ``qa_metrics``).

Raw files: SQuAD ``<raw_data_dir>/<split>.json`` (``<split>-debug.json`` in debug mode);
MRQA ``<raw_data_dir>/<split>.jsonl`` (a header line, then one paragraph per line with
``detected_answers``). Answers are read for the ``train`` split only, as official; evaluation
reads the gold answers again from the raw file.

Featurisation is BERT's sliding window: ``[CLS] question [SEP] doc span [SEP]``, windows of
``max_seq_length - len(question) - 3`` word pieces moved by ``doc_stride``; a training window
that does not contain the answer (or an impossible question) gets start = end = 0. Feature ids
are ``1000 * example_eid + span_index``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from electra_tf.finetuning import scorers
from electra_tf.finetuning.features import FeatureSpec
from electra_tf.finetuning.heads import SpanQAHead
from electra_tf.finetuning.task import Task, data_error

_LOG = logging.getLogger(__name__)
_DEBUG_MAX_MRQA_LINES = 10


@dataclasses.dataclass
class QAExample:
  """One question over a whitespace-split context (``doc_tokens``); positions index words."""

  task_name: str
  eid: int
  qas_id: str | None
  qid: str | None
  question_text: str
  doc_tokens: list[str]
  orig_answer_text: str | None = None
  start_position: int | None = None
  end_position: int | None = None
  is_impossible: bool = False


def is_whitespace(c: str) -> bool:
  """The official QA context splitter's whitespace: space, tab, CR, LF, U+202F."""
  return c in " \t\r\n" or ord(c) == 0x202F


def split_context(text: str) -> tuple[list[str], list[int]]:
  """Context -> (words, word index of every character)."""
  doc_tokens: list[str] = []
  char_to_word_offset: list[int] = []
  prev_is_whitespace = True
  for c in text:
    if is_whitespace(c):
      prev_is_whitespace = True
    else:
      if prev_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      prev_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def improve_answer_span(doc_tokens: Sequence[str], input_start: int, input_end: int,
                        tokenizer: Any, orig_answer_text: str) -> tuple[int, int]:
  """The first (start, then longest) word-piece sub-span equal to the tokenized answer text."""
  tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
  for new_start in range(input_start, input_end + 1):
    for new_end in range(input_end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == tok_answer_text:
        return new_start, new_end
  return input_start, input_end


DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def doc_spans(n_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[DocSpan]:
  """Sliding windows over ``n_tokens`` word pieces (the last one ends at the document end)."""
  if max_tokens_for_doc < 1:
    raise ValueError(f"no room for the document: max_tokens_for_doc={max_tokens_for_doc}")
  spans = []
  start = 0
  while start < n_tokens:
    length = min(n_tokens - start, max_tokens_for_doc)
    spans.append(DocSpan(start, length))
    if start + length == n_tokens:
      break
    start += min(length, doc_stride)
  return spans


def is_max_context(spans: Sequence[DocSpan], cur_span_index: int, position: int) -> bool:
  """Whether span ``cur_span_index`` gives token ``position`` its best min(left, right) context."""
  best_score, best_index = None, None
  for index, span in enumerate(spans):
    end = span.start + span.length - 1
    if position < span.start or position > end:
      continue
    score = min(position - span.start, end - position) + 0.01 * span.length
    if best_score is None or score > best_score:
      best_score, best_index = score, index
  return cur_span_index == best_index


class QATask(Task):
  """Span-extraction QA task; ``v2`` questions may be unanswerable (SQuAD 2.0)."""

  def __init__(self, name: str, raw_data_dir: str, tokenizer: Any, max_seq_length: int,
               task_id: int = 0, debug: bool = False, v2: bool = False,
               max_query_length: int = 64, doc_stride: int = 128, beam_size: int = 20,
               joint_prediction: bool = True, answerable_classifier: bool = True,
               answerable_uses_start_logits: bool = True, answerable_weight: float = 0.5,
               n_best_size: int = 20, max_answer_length: int = 30,
               qa_na_threshold: float = -2.75):
    super().__init__(name, raw_data_dir, tokenizer, max_seq_length, task_id, debug)
    self.v2 = v2
    self.max_query_length = max_query_length
    self.doc_stride = doc_stride
    self.beam_size = beam_size
    self.joint_prediction = joint_prediction
    self.answerable_classifier = answerable_classifier
    self.answerable_uses_start_logits = answerable_uses_start_logits
    self.answerable_weight = answerable_weight
    self.n_best_size = n_best_size
    self.max_answer_length = max_answer_length
    self.qa_na_threshold = qa_na_threshold
    self._examples: dict[str, list[QAExample]] = {}
    self.example_failures: dict[str, int] = {}

  # --- reading -------------------------------------------------------------------------------
  def raw_path(self, split: str) -> str:
    raise NotImplementedError

  def _read_paragraphs(self, split: str) -> list[Mapping]:
    raise NotImplementedError

  def get_examples(self, split: str) -> list[QAExample]:
    if split not in self._examples:
      examples: list[QAExample] = []
      failures = 0
      path = self.raw_path(split)
      for paragraph in self._read_paragraphs(split):
        failures += self._add_examples(examples, paragraph, split, path)
      if not examples:
        raise data_error(path, f"split '{split}' of task '{self.name}' has no usable questions")
      _LOG.info("%s %s: %d examples, %d failures", self.name, split, len(examples), failures)
      self._examples[split] = examples
      self.example_failures[split] = failures
    return self._examples[split]

  def _add_examples(self, examples: list[QAExample], paragraph: Mapping, split: str,
                    path: str) -> int:
    """Appends the paragraph's questions; returns how many answers could not be located."""
    try:
      context, qas = paragraph["context"], paragraph["qas"]
    except KeyError as e:
      raise data_error(path, f"paragraph without {e.args[0]!r}") from None
    doc_tokens, char_to_word_offset = split_context(context)
    failures = 0
    for qa in qas:
      qas_id, qid = qa.get("id"), qa.get("qid")
      start = end = None
      answer_text = None
      is_impossible = False
      if split == "train":
        if self.v2:
          is_impossible = bool(qa.get("is_impossible", False))
        if not is_impossible:
          if "detected_answers" in qa:  # MRQA
            answers = qa["detected_answers"]
            get_offset = lambda a: a["char_spans"][0][0]
          else:  # SQuAD
            answers = qa.get("answers", [])
            get_offset = lambda a: a["answer_start"]
          if not answers:
            raise data_error(path, f"question {qas_id or qid!r} has no answer in the train split")
          answer = answers[0]
          offset = get_offset(answer)
          answer_text = answer["text"]
          if offset + len(answer_text) - 1 >= len(char_to_word_offset):
            _LOG.info("End position is out of document: %s", qas_id or qid)
            failures += 1
            continue
          start = char_to_word_offset[offset]
          end = char_to_word_offset[offset + len(answer_text) - 1]
          # Keep only answers whose text is recoverable from the words (official rule).
          actual = " ".join(doc_tokens[start:end + 1]).lower()
          cleaned = " ".join(answer_text.split()).lower()
          if actual.find(cleaned) == -1:
            _LOG.info("Could not find answer %r in %r", cleaned, actual)
            failures += 1
            continue
        else:
          start, end, answer_text = -1, -1, ""
      examples.append(QAExample(
          task_name=self.name, eid=len(examples), qas_id=qas_id, qid=qid,
          question_text=qa["question"], doc_tokens=doc_tokens, orig_answer_text=answer_text,
          start_position=start, end_position=end, is_impossible=is_impossible))
    return failures

  # --- features ------------------------------------------------------------------------------
  def featurize(self, example: QAExample, is_training: bool = False,
                for_eval: bool = False) -> list[dict[str, Any]]:
    """One feature dict per document window; ``for_eval`` adds the decoding metadata
    (``<task>_doc_span_index``, ``_tokens``, ``_token_to_orig_map``, ``_token_is_max_context``)."""
    tok = self.tokenizer
    query_tokens = tok.tokenize(example.question_text)[:self.max_query_length]

    tok_to_orig_index: list[int] = []
    orig_to_tok_index: list[int] = []
    all_doc_tokens: list[str] = []
    for i, word in enumerate(example.doc_tokens):
      orig_to_tok_index.append(len(all_doc_tokens))
      for sub_token in tok.tokenize(word):
        tok_to_orig_index.append(i)
        all_doc_tokens.append(sub_token)

    tok_start = tok_end = None
    if is_training and example.is_impossible:
      tok_start = tok_end = -1
    if is_training and not example.is_impossible:
      tok_start = orig_to_tok_index[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end = orig_to_tok_index[example.end_position + 1] - 1
      else:
        tok_end = len(all_doc_tokens) - 1
      tok_start, tok_end = improve_answer_span(all_doc_tokens, tok_start, tok_end, tok,
                                               example.orig_answer_text)

    max_tokens_for_doc = self.max_seq_length - len(query_tokens) - 3
    spans = doc_spans(len(all_doc_tokens), max_tokens_for_doc, self.doc_stride)
    n = self.name
    all_features = []
    for span_index, span in enumerate(spans):
      tokens = ["[CLS]", *query_tokens, "[SEP]"]
      segment_ids = [0] * len(tokens)
      token_to_orig_map: dict[int, int] = {}
      token_is_max_context: dict[int, bool] = {}
      for i in range(span.length):
        split_index = span.start + i
        token_to_orig_map[len(tokens)] = tok_to_orig_index[split_index]
        token_is_max_context[len(tokens)] = is_max_context(spans, span_index, split_index)
        tokens.append(all_doc_tokens[split_index])
        segment_ids.append(1)
      tokens.append("[SEP]")
      segment_ids.append(1)
      input_ids = list(tok.convert_tokens_to_ids(tokens))
      pad = self.max_seq_length - len(input_ids)

      features = {
          "task_id": self.task_id,
          n + "_eid": 1000 * example.eid + span_index,
          "input_ids": input_ids + [0] * pad,
          "input_mask": [1] * len(input_ids) + [0] * pad,
          "segment_ids": segment_ids + [0] * pad,
      }
      if for_eval:
        features.update({n + "_doc_span_index": span_index, n + "_tokens": tokens,
                         n + "_token_to_orig_map": token_to_orig_map,
                         n + "_token_is_max_context": token_is_max_context})
      if is_training:
        start_position = end_position = 0
        if not example.is_impossible:
          doc_end = span.start + span.length - 1
          if span.start <= tok_start and tok_end <= doc_end:
            doc_offset = len(query_tokens) + 2
            start_position = tok_start - span.start + doc_offset
            end_position = tok_end - span.start + doc_offset
        features.update({n + "_start_positions": start_position,
                         n + "_end_positions": end_position,
                         n + "_is_impossible": int(example.is_impossible)})
      all_features.append(features)
    return all_features

  def feature_specs(self) -> list[FeatureSpec]:
    return [FeatureSpec(self.name + s)
            for s in ("_eid", "_start_positions", "_end_positions", "_is_impossible")]

  def make_head(self) -> SpanQAHead:
    return SpanQAHead(self.name, beam_size=self.beam_size,
                      joint_prediction=self.joint_prediction,
                      answerable_classifier=self.answerable_classifier,
                      answerable_uses_start_logits=self.answerable_uses_start_logits,
                      answerable_weight=self.answerable_weight)

  def get_scorer(self, split: str = "dev", preds_path: str | None = None,
                 na_path: str | None = None) -> SpanQAScorer:
    return SpanQAScorer(self, split, preds_path, na_path)

  def evaluate(self, split: str, predictions: Mapping[str, str],
               na_scores: Mapping[str, float]) -> dict[str, float]:
    raise NotImplementedError


class SQuADTask(QATask):
  """SQuAD JSON (``{"data": [{"paragraphs": [{"context", "qas"}]}]}``)."""

  def raw_path(self, split):
    return self.split_path(split + ("-debug" if self.debug else ""), ".json")

  def _dataset(self, split: str) -> list[Mapping]:
    path = self.raw_path(split)
    try:
      with open(path, encoding="utf-8") as f:
        content = json.load(f)
    except json.JSONDecodeError as e:
      raise data_error(path, f"not a SQuAD JSON file ({e})") from None
    if not isinstance(content, dict) or not isinstance(content.get("data"), list):
      raise data_error(path, "not a SQuAD JSON file (no top-level 'data' list)")
    return content["data"]

  def _read_paragraphs(self, split):
    return [p for entry in self._dataset(split) for p in entry["paragraphs"]]

  def evaluate(self, split, predictions, na_scores):
    if self.v2:
      return scorers.squad_v2_evaluate(self._dataset(split), predictions, na_scores,
                                       self.qa_na_threshold)
    return scorers.squad_v1_evaluate(self._dataset(split), predictions)


class MRQATask(QATask):
  """MRQA 2019 shared-task JSONL (header line, then one paragraph per line)."""

  def raw_path(self, split):
    return self.split_path(split, ".jsonl")

  def _read_lines(self, split: str, limit: int | None) -> list[Mapping]:
    path = self.raw_path(split)
    paragraphs = []
    with open(path, encoding="utf-8") as f:
      for i, line in enumerate(f):
        if limit is not None and i > limit:
          break
        if not line.strip():
          continue
        try:
          paragraph = json.loads(line)
        except json.JSONDecodeError as e:
          raise data_error(path, f"invalid JSON ({e.msg})", i + 1) from None
        if "header" in paragraph:
          continue
        paragraphs.append(paragraph)
    return paragraphs

  def _read_paragraphs(self, split):
    return self._read_lines(split, _DEBUG_MAX_MRQA_LINES if self.debug else None)

  def evaluate(self, split, predictions, na_scores):
    answers = {qa["qid"]: qa["answers"] for p in self._read_lines(split, None) for qa in p["qas"]}
    return scorers.mrqa_evaluate(answers, predictions, skip_no_answer=True)


class SQuAD(SQuADTask):
  def __init__(self, raw_data_dir, tokenizer, max_seq_length, task_id=0, debug=False, **kwargs):
    super().__init__("squad", raw_data_dir, tokenizer, max_seq_length, task_id, debug, v2=True,
                     **kwargs)


class SQuADv1(SQuADTask):
  def __init__(self, raw_data_dir, tokenizer, max_seq_length, task_id=0, debug=False, **kwargs):
    super().__init__("squadv1", raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                     v2=False, **kwargs)


class NewsQA(MRQATask):
  def __init__(self, raw_data_dir, tokenizer, max_seq_length, task_id=0, debug=False, **kwargs):
    super().__init__("newsqa", raw_data_dir, tokenizer, max_seq_length, task_id, debug, **kwargs)


class NaturalQuestions(MRQATask):
  def __init__(self, raw_data_dir, tokenizer, max_seq_length, task_id=0, debug=False, **kwargs):
    super().__init__("naturalqs", raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                     **kwargs)


class TriviaQA(MRQATask):
  def __init__(self, raw_data_dir, tokenizer, max_seq_length, task_id=0, debug=False, **kwargs):
    super().__init__("triviaqa", raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                     **kwargs)


class SearchQA(MRQATask):
  def __init__(self, raw_data_dir, tokenizer, max_seq_length, task_id=0, debug=False, **kwargs):
    super().__init__("searchqa", raw_data_dir, tokenizer, max_seq_length, task_id, debug,
                     **kwargs)


# --------------------------------------------------------------------------------------------
# Decoding and scoring
# --------------------------------------------------------------------------------------------


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


def decode_predictions(task: QATask, examples: Sequence[QAExample],
                       results_by_eid: Mapping[int, Mapping[str, Any]]
                       ) -> tuple[dict[str, str], dict[str, list[dict]], dict[str, float]]:
  """Official n-best answer search over every window of every example.

  Returns ``(predictions, nbest, null_scores)`` keyed by question id (``qas_id`` for SQuAD,
  ``qid`` for MRQA). ``null_scores`` (v2 only) is the min over windows of the answerable logit
  with the answerable classifier, else ``min(start[0] + end[0]) - best non-null score``.
  The prediction is always the best non-null text; the no-answer decision is left to the
  threshold in the v2 evaluation, as official.
  """
  n = task.name
  predictions: dict[str, str] = {}
  all_nbest: dict[str, list[dict]] = {}
  null_scores: dict[str, float] = {}
  for example in examples:
    example_id = example.qas_id if "squad" in n else example.qid
    features = task.featurize(example, False, for_eval=True)
    prelim = []
    score_null = 1000000.0
    for feature_index, feature in enumerate(features):
      result = results_by_eid[feature[n + "_eid"]]
      tokens = feature[n + "_tokens"]
      to_orig = feature[n + "_token_to_orig_map"]
      max_context = feature[n + "_token_is_max_context"]
      if task.joint_prediction:
        start_indexes = result["start_top_index"]
        end_indexes = result["end_top_index"]
      else:
        start_indexes = _best_indexes(result["start_logits"], task.n_best_size)
        end_indexes = _best_indexes(result["end_logits"], task.n_best_size)
      if task.v2:
        if task.answerable_classifier:
          null = float(result["answerable_logit"])
        else:
          null = float(result["start_logits"][0] + result["end_logits"][0])
        score_null = min(score_null, null)
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
    prelim.sort(key=lambda x: x.start_logit + x.end_logit, reverse=True)

    seen = set()
    nbest = []
    for pred in prelim:
      if len(nbest) >= task.n_best_size:
        break
      feature = features[pred.feature_index]
      tok_text = " ".join(feature[n + "_tokens"][pred.start_index:pred.end_index + 1])
      tok_text = " ".join(tok_text.replace(" ##", "").replace("##", "").strip().split())
      orig_start = feature[n + "_token_to_orig_map"][pred.start_index]
      orig_end = feature[n + "_token_to_orig_map"][pred.end_index]
      orig_text = " ".join(example.doc_tokens[orig_start:orig_end + 1])
      final_text = get_final_text(tok_text, orig_text, task.tokenizer.basic_tokenizer)
      if final_text in seen:
        continue
      seen.add(final_text)
      nbest.append(_NBest(final_text, pred.start_logit, pred.end_logit))
    if not nbest:  # no valid span at all: official nonce prediction
      nbest.append(_NBest("empty", 0.0, 0.0))

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

  ``preds_path`` / ``na_path``: where to also write the predictions and (v2) null scores as
  JSON (the official ``qa_preds_file`` / ``qa_na_file``).
  """

  def __init__(self, task: QATask, split: str = "dev", preds_path: str | None = None,
               na_path: str | None = None):
    super().__init__()
    self._task = task
    self._split = split
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
    examples = self._task.get_examples(self._split)
    predictions, _, null_scores = decode_predictions(self._task, examples, self._results)
    if self._preds_path:
      with open(self._preds_path, "w") as f:
        json.dump(predictions, f)
    if self._task.v2 and self._na_path:
      with open(self._na_path, "w") as f:
        json.dump({k: float(v) for k, v in null_scores.items()}, f)
    return predictions, null_scores

  def _get_results(self):
    predictions, null_scores = self.write_predictions()
    metrics = self._task.evaluate(self._split, predictions, null_scores)
    return sorted(metrics.items())
