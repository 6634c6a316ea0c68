"""The official ELECTRA / BERT ``FullTokenizer`` in plain Python: no TensorFlow.

The same algorithm as the official ``tokenization.py`` step by step (clean, split CJK
characters, lower-case and strip accents, split punctuation, greedy longest-match WordPiece),
so the ids equal the official ones (``tests/test_tokenization.py``). It lives apart from
``electra_tf.tokenization`` (which re-exports it beside the tensorflow-text ``FastTokenizer``)
because tf-models-official's tokenizer pieces import TensorFlow, and the on-device runner
(``electra_tf.interop.litert_runner``) must work with numpy and the LiteRT interpreter only.
"""

from __future__ import annotations

import collections
import os
import unicodedata
from collections.abc import Mapping, Sequence

UNK_TOKEN = "[UNK]"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Official ELECTRA WordpieceTokenizer limit (tf-models-official defaults to 400).
MAX_CHARS_PER_WORD = 200
# The official CJK ideograph blocks, split off as single tokens.
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _read_bytes(path: str) -> bytes:
  """A local or (through TensorFlow's file system, e.g. ``gs://``) remote file's bytes."""
  if "://" in path:
    import tensorflow as tf  # local: only remote vocabularies need TensorFlow

    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"vocab file not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
      return f.read()
  if not os.path.isfile(path):
    raise FileNotFoundError(f"vocab file not found: {path}")
  with open(path, "rb") as f:
    return f.read()


def _not_utf8(vocab_file: str, error: UnicodeDecodeError) -> ValueError:
  return ValueError(f"vocab file {vocab_file} is not UTF-8 text: byte "
                    f"0x{error.object[error.start]:02x} cannot be decoded")


def vocab_lines(vocab_file: str) -> list[str]:
  """The tokens of a vocab file, one a line ("\\n" only, as the official line-by-line read);
  one-line errors for a missing or non-UTF-8 file."""
  try:
    lines = _read_bytes(vocab_file).decode("utf-8").split("\n")
  except UnicodeDecodeError as e:
    raise _not_utf8(vocab_file, e) from None
  return lines[:-1] if lines and not lines[-1] else lines


def load_vocab(vocab_file: str) -> collections.OrderedDict[str, int]:
  """Token -> id (id = line number, a repeated token keeps its last line), as the official
  ``load_vocab``: each line stripped of surrounding whitespace."""
  vocab: collections.OrderedDict[str, int] = collections.OrderedDict()
  for index, line in enumerate(vocab_lines(vocab_file)):
    vocab[line.strip()] = index
  return vocab


def validate_vocab(vocab: Mapping[str, int], required: Sequence[str] = SPECIAL_TOKENS) -> None:
  """Raises a one-line ValueError naming the required tokens missing from `vocab`."""
  missing = [token for token in required if token not in vocab]
  if missing:
    raise ValueError(f"vocab is missing required token(s): {', '.join(missing)}")


def is_control(char: str) -> bool:
  """Official rule: every `C*` category except tab/newline/CR."""
  if char in "\t\n\r":
    return False
  return unicodedata.category(char).startswith("C")


def is_whitespace(char: str) -> bool:
  """Official rule: space, tab, newline, CR and category Zs."""
  return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_punctuation(char: str) -> bool:
  """Official rule: all non-alphanumeric ASCII and every `P*` category."""
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def is_chinese_char(cp: int) -> bool:
  """Official rule: a code point in one of the CJK ideograph blocks."""
  return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def is_dropped(char: str) -> bool:
  """Characters the official `_clean_text` deletes."""
  cp = ord(char)
  return cp == 0 or cp == 0xFFFD or is_control(char)


def clean_text(text: str) -> str:
  """Official `BasicTokenizer._clean_text`: drop NUL / U+FFFD / control chars, whitespace -> ' '."""
  return "".join(" " if is_whitespace(c) else c for c in text if not is_dropped(c))


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


def to_text(text: str | bytes) -> str:
  """Official `convert_to_unicode`: bytes are UTF-8, undecodable bytes dropped."""
  return text.decode("utf-8", "ignore") if isinstance(text, bytes) else text


class BasicTokenizer:
  """Official `BasicTokenizer`: words and punctuation, lower-cased (accents stripped unless
  ``strip_accents`` is False) when ``do_lower_case``."""

  def __init__(self, do_lower_case: bool = True, strip_accents: bool = True):
    self.do_lower_case = do_lower_case
    self.strip_accents = strip_accents

  def tokenize(self, text: str | bytes) -> list[str]:
    text = "".join(f" {c} " if is_chinese_char(ord(c)) else c for c in clean_text(to_text(text)))
    split_tokens = []
    for token in text.split():
      if self.do_lower_case:
        token = token.lower()
        if self.strip_accents:
          token = strip_accents(token)
      split_tokens.extend(split_on_punctuation(token))
    return " ".join(split_tokens).split()


class WordpieceTokenizer:
  """Official `WordpieceTokenizer`: greedy longest-match-first pieces (``##`` continuations);
  a word longer than ``max_input_chars_per_word`` or with no match is ``unk_token``."""

  def __init__(self, vocab: Mapping[str, int], unk_token: str = UNK_TOKEN,
               max_input_chars_per_word: int = MAX_CHARS_PER_WORD):
    self.vocab, self.unk_token = vocab, unk_token
    self.max_input_chars_per_word = max_input_chars_per_word

  def tokenize(self, text: str | bytes) -> list[str]:
    output: list[str] = []
    for token in to_text(text).split():
      if len(token) > self.max_input_chars_per_word:
        output.append(self.unk_token)
        continue
      pieces, start = [], 0
      while start < len(token):
        end = len(token)
        while end > start:
          piece = token[start:end] if start == 0 else "##" + token[start:end]
          if piece in self.vocab:
            break
          end -= 1
        if end == start:  # no piece matches: the whole word is unknown
          pieces = [self.unk_token]
          break
        pieces.append(piece)
        start = end
      output.extend(pieces)
    return output


class FullTokenizer:
  """The official `FullTokenizer`: `BasicTokenizer`, then WordPiece over ``vocab_file``."""

  def __init__(self, vocab_file: str, do_lower_case: bool = True, strip_accents: bool = True):
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case, strip_accents)
    self.wordpiece_tokenizer = WordpieceTokenizer(self.vocab)

  def tokenize(self, text: str | bytes) -> list[str]:
    return [piece for word in self.basic_tokenizer.tokenize(text)
            for piece in self.wordpiece_tokenizer.tokenize(word)]

  def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
    return [self.vocab[t] for t in tokens]

  def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
    return [self.inv_vocab[i] for i in ids]
