"""WordPiece model inputs of a text (pair) or of a word sequence, as every fine-tuning task
and the on-device runner featurise them; TensorFlow-free.

Tasks receive a tokenizer object with the official ``FullTokenizer`` interface (``tokenize``,
``convert_tokens_to_ids``, ``vocab``, ``basic_tokenizer``, ``wordpiece_tokenizer``).

- ``sentence_features``: BERT's ``[CLS] a [SEP] b [SEP]``, segment ids 0 / 1, a pair truncated
  by popping from the longer side, zero padding (the GLUE and user sentence tasks);
- ``word_features``: each word's pieces, labelled at its first piece (official
  ``tokenize_and_align`` and the tagging tasks' length budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from electra_tf.full_tokenizer import clean_text, split_on_punctuation, strip_accents

SPECIAL_WORDS = ("[CLS]", "[SEP]")


def truncate_seq_pair(tokens_a: list[str], tokens_b: list[str], max_length: int) -> None:
  """Pops tokens from the end of the longer list (``b`` on ties) until the total fits."""
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def _padded(values: Sequence[Any], length: int, pad: Any = 0) -> list[Any]:
  return list(values) + [pad] * (length - len(values))


def sentence_features(tokenizer: Any, text_a: str, text_b: str | None,
                      max_seq_length: int) -> tuple[dict[str, list[int]], int]:
  """({"input_ids", "input_mask", "segment_ids"}: [max_seq_length] int lists, the length in
  tokens before truncation, [CLS] / [SEP] included)."""
  tokens_a = tokenizer.tokenize(text_a)
  tokens_b = tokenizer.tokenize(text_b) if text_b else None
  n_tokens = len(tokens_a) + (len(tokens_b) + 3 if tokens_b else 2)
  if tokens_b:
    truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  else:
    tokens_a = tokens_a[:max_seq_length - 2]
  tokens = ["[CLS]", *tokens_a, "[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += [*tokens_b, "[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = list(tokenizer.convert_tokens_to_ids(tokens))
  return {"input_ids": _padded(input_ids, max_seq_length),
          "input_mask": _padded([1] * len(input_ids), max_seq_length),
          "segment_ids": _padded(segment_ids, max_seq_length)}, n_tokens


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


def word_features(tokenizer: Any, words: Sequence[str], max_seq_length: int
                  ) -> dict[str, Any]:
  """{"input_ids", "input_mask", "segment_ids" (1 for every real token), "labeled_positions"
  (each kept word's first piece, 0-padded)}: [max_seq_length] int lists, and "n_words" (int):
  how many words fit (the official budget counts every word, so long sentences are cut early)."""
  words_to_tokens = tokenize_and_align(tokenizer, words)
  vocab = tokenizer.vocab
  input_ids: list[int] = []
  tagged_positions: list[int] = []
  for word_tokens in words_to_tokens:
    if len(words_to_tokens) + len(input_ids) + 1 > max_seq_length:
      input_ids.append(vocab["[SEP]"])
      break
    if "[CLS]" not in word_tokens and "[SEP]" not in word_tokens:
      tagged_positions.append(len(input_ids))
    input_ids.extend(vocab[t] for t in word_tokens)
  return {"input_ids": _padded(input_ids, max_seq_length),
          "input_mask": _padded([1] * len(input_ids), max_seq_length),
          "segment_ids": _padded([1] * len(input_ids), max_seq_length),
          "labeled_positions": _padded(tagged_positions, max_seq_length),
          "n_words": len(tagged_positions)}
