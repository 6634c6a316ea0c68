"""Word-aligned WordPieces for the tagging tasks (official `tokenize_and_align`).

Tasks receive a tokenizer object with the official ``FullTokenizer`` interface (``tokenize``,
``convert_tokens_to_ids``, ``vocab``, ``basic_tokenizer``, ``wordpiece_tokenizer``); this module
adds the word-level tokenisation of the tagging tasks.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from electra_tf.tokenization import clean_text, is_punctuation

SPECIAL_WORDS = ("[CLS]", "[SEP]")


def strip_accents(text: str) -> str:
  """NFD, then drop combining marks (category Mn)."""
  return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def split_on_punctuation(text: str) -> list[str]:
  """Every punctuation character becomes its own piece; other runs stay together."""
  pieces: list[str] = []
  start_new = True
  for ch in text:
    if is_punctuation(ch):
      pieces.append(ch)
      start_new = True
    else:
      if start_new:
        pieces.append("")
        start_new = False
      pieces[-1] += ch
  return pieces


def tokenize_and_align(tokenizer, words: Sequence[str], cased: bool = False) -> list[list[str]]:
  """WordPieces of ``[CLS] + words + [SEP]``, one list per word (official tagging alignment).

  Unlike ``tokenizer.tokenize`` this never splits a word on whitespace or around CJK
  characters, and lower-cases / strips accents unless ``cased`` (whatever the tokenizer's
  ``do_lower_case``), exactly as the official ``tagging_tasks.tokenize_and_align``.
  """
  aligned = []
  for word in ["[CLS]", *words, "[SEP]"]:
    word = clean_text(word)
    if word in SPECIAL_WORDS:
      pieces = [word]
    else:
      if not cased:
        word = strip_accents(word.lower())
      pieces = split_on_punctuation(word)
    aligned.append([wp for piece in pieces for wp in tokenizer.wordpiece_tokenizer.tokenize(piece)])
  return aligned
