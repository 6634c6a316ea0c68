"""Extractive QA: SQuAD 1.1 / 2.0 and the MRQA 2019 tasks (official ``qa_tasks`` / ``qa_metrics``).

Raw files: SQuAD ``<raw_data_dir>/<split>.json`` (``<split>-debug.json`` in debug mode);
MRQA ``<raw_data_dir>/<split>.jsonl`` (a header line, then one paragraph per line with
``detected_answers``). Answers are read for the ``train`` split only, as official; evaluation
reads the gold answers again from the raw file.

Featurisation is BERT's sliding window: ``[CLS] question [SEP] doc span [SEP]``, windows of
``max_seq_length - len(question) - 3`` word pieces moved by ``doc_stride``; a training window
that does not contain the answer (or an impossible question) gets start = end = 0. Feature ids
are ``1000 * example_eid + span_index``. The windows' pieces: ``qa_windows.py``; answer decoding
and scoring: ``qa_decoding.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from electra_tf.finetuning import scorers
from electra_tf.finetuning.builtin.qa_decoding import DecodeOptions, Question, SpanQAScorer
from electra_tf.finetuning.builtin.qa_windows import (
  QAExample,
  answer_pieces,
  doc_spans,
  doc_word_pieces,
  is_max_context,
  split_context,
)
from electra_tf.finetuning.features import FeatureSpec
from electra_tf.finetuning.task_base import BuiltInTask, Task, data_error
from electra_tf.finetuning.task_heads import SpanQAHead

_LOG = logging.getLogger(__name__)
_DEBUG_MAX_MRQA_LINES = 10


class QATask(Task):
  """Span-extraction QA task; ``v2`` questions may be unanswerable (SQuAD 2.0; default: the
  class's ``v2``)."""

  kind = "span_qa"
  v2: bool = False

  def __init__(self, name: str, raw_data_dir: str, tokenizer: Any, max_seq_length: int,
               task_id: int = 0, debug: bool = False, v2: bool | None = None,
               max_query_length: int = 64, doc_stride: int = 128, beam_size: int = 20,
               joint_prediction: bool = True, answerable_classifier: bool = True,
               answerable_uses_start_logits: bool = True, answerable_weight: float = 0.5,
               n_best_size: int = 20, max_answer_length: int = 30,
               qa_na_threshold: float = -2.75):
    super().__init__(name, raw_data_dir, tokenizer, max_seq_length, task_id, debug)
    if v2 is not None:
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
    tok_to_orig_index, orig_to_tok_index, all_doc_tokens = doc_word_pieces(example, tok)
    tok_start = tok_end = None
    if is_training:
      tok_start, tok_end = answer_pieces(example, orig_to_tok_index, all_doc_tokens, tok)

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

  def decode_options(self) -> DecodeOptions:
    return DecodeOptions(self.name, self.v2, self.joint_prediction, self.answerable_classifier,
                         self.n_best_size, self.max_answer_length,
                         self.tokenizer.basic_tokenizer)

  def questions(self, split: str) -> Iterator[Question]:
    """``split``'s questions with their eval windows, featurized one question at a time."""
    for example in self.get_examples(split):
      qid = example.qas_id if "squad" in self.name else example.qid
      yield Question(qid, example.doc_tokens, self.featurize(example, False, for_eval=True))

  def get_scorer(self, split: str = "dev", preds_path: str | None = None,
                 na_path: str | None = None) -> SpanQAScorer:
    return SpanQAScorer(lambda: self.questions(split),
                        lambda predictions, null_scores: self.evaluate(split, predictions,
                                                                       null_scores),
                        self.decode_options(), preds_path, na_path)

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


class SQuAD(BuiltInTask, SQuADTask):
  task_name = "squad"
  v2 = True


class SQuADv1(BuiltInTask, SQuADTask):
  task_name = "squadv1"


class NewsQA(BuiltInTask, MRQATask):
  task_name = "newsqa"


class NaturalQuestions(BuiltInTask, MRQATask):
  task_name = "naturalqs"


class TriviaQA(BuiltInTask, MRQATask):
  task_name = "triviaqa"


class SearchQA(BuiltInTask, MRQATask):
  task_name = "searchqa"
