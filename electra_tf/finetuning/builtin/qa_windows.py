"""The pieces of BERT's sliding-window QA featurisation (official ``qa_tasks``): a context split
into words as the official code splits it, its word pieces, the training answer narrowed to
word pieces, the windows over the document and the window that gives a token its most context.

``qa.QATask.featurize`` puts them together; kept apart so each piece is checked on its own.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any


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


def doc_word_pieces(example: QAExample, tokenizer: Any
                     ) -> tuple[list[int], list[int], list[str]]:
  """(word of each piece, first piece of each word, the context's word pieces)."""
  tok_to_orig_index: list[int] = []
  orig_to_tok_index: list[int] = []
  all_doc_tokens: list[str] = []
  for i, word in enumerate(example.doc_tokens):
    orig_to_tok_index.append(len(all_doc_tokens))
    for sub_token in tokenizer.tokenize(word):
      tok_to_orig_index.append(i)
      all_doc_tokens.append(sub_token)
  return tok_to_orig_index, orig_to_tok_index, all_doc_tokens


def answer_pieces(example: QAExample, orig_to_tok_index: Sequence[int],
                   all_doc_tokens: Sequence[str], tokenizer: Any) -> tuple[int, int]:
  """The training answer's first and last word piece in the context ((-1, -1): none)."""
  if example.is_impossible:
    return -1, -1
  tok_start = orig_to_tok_index[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    tok_end = orig_to_tok_index[example.end_position + 1] - 1
  else:
    tok_end = len(all_doc_tokens) - 1
  return improve_answer_span(all_doc_tokens, tok_start, tok_end, tokenizer,
                             example.orig_answer_text)
