"""WordPiece tokenization giving the ids of the official ELECTRA ``FullTokenizer``.

Two implementations with identical ids:

* ``FullTokenizer``: the pure-Python reference (official algorithm, with its ``strip_accents``
  toggle), TensorFlow-free in ``electra_tf.full_tokenizer`` and re-exported here with the
  vocabulary helpers (``load_vocab``, ``vocab_lines``, ``validate_vocab``, ``clean_text``...).
* ``FastTokenizer``: batched ids through tensorflow-text's ``FastWordpieceTokenizer``, each
  batch handled as one "\n"-joined string. All-ASCII lines (most English text) are cleaned and
  lower-cased by one ``bytes.translate`` and go through its C++ end-to-end mode (split on
  whitespace and ASCII punctuation, WordPiece); lines with other characters are normalised by
  whole-batch string calls (regex passes over just the characters the official rules change,
  ``lower``, NFD; ``str.translate`` where such characters are dense) that reproduce the
  official rules character by character, then split by tf-text into words.

tf-text's own BERT normaliser is not used: it case-folds with ICU (``Straße`` -> ``strasse``,
final ``ς`` -> ``σ``) where the official code calls ``str.lower``, and its Unicode tables and
control/whitespace rules are not Python's ``unicodedata``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.full_tokenizer import (  # noqa: F401 -- re-exported: the pure-Python half
  MAX_CHARS_PER_WORD,
  SPECIAL_TOKENS,
  UNK_TOKEN,
  FullTokenizer,
  clean_text,
  is_chinese_char,
  is_control,
  is_dropped,
  is_punctuation,
  is_whitespace,
  load_vocab,
  to_text,
  validate_vocab,
  vocab_lines,
)


class _CharMap(dict):
  """A `str.translate` table computed per code point on first use (text touches few)."""

  def __init__(self, char_fn):
    super().__init__()
    self._char_fn = char_fn

  def __missing__(self, cp: int) -> str:
    value = self[cp] = self._char_fn(chr(cp))
    return value


def _clean_char(char: str) -> str:
  """Official `_clean_text` + `_tokenize_chinese_chars` + `str.split()` separators, per char."""
  if is_dropped(char):
    return ""
  # isspace(): str.split() also splits on U+2028/U+2029, which `_clean_text` keeps.
  if is_whitespace(char) or char.isspace():
    return " "
  if is_chinese_char(ord(char)):
    return f" {char} "
  return char


# Characters a batch's cleaning / splitting may change: beyond printable ASCII (and "\n", the
# line separator), and beyond ASCII (ASCII punctuation is always split).
_CLEAN_CANDIDATES_RE = re.compile(r"[^\x20-\x7e\n]")
_SPLIT_CANDIDATES_RE = re.compile(r"[^\x00-\x7f]")
_ASCII_PUNCTUATION = [chr(cp) for cp in range(128) if is_punctuation(chr(cp))]
# Regex passes are used while candidates are sparse (<= 1/8 of the first _SAMPLE_CHARS) and
# at most _MAX_REGEX_CHARS distinct ones; otherwise str.translate.
_SAMPLE_CHARS = 1 << 14
_MAX_REGEX_CHARS = 256


def _char_class(chars: Iterable[str]) -> str:
  """A regex character class matching exactly `chars` (any code point, escaped)."""
  return "[" + "".join(f"\\U{ord(c):08x}" for c in sorted(chars)) + "]"


def _rows(ids: np.ndarray, splits: np.ndarray) -> list[list[int]]:
  """Flat ids `[total]` + row splits `[rows + 1]` -> one list per row, with no per-row
  bytecode (C-level map over slices)."""
  values, ends = ids.tolist(), splits.tolist()
  return list(map(values.__getitem__, map(slice, ends[:-1], ends[1:])))


def _ascii_byte_table(do_lower_case: bool) -> tuple[bytes, bytes]:
  """`bytes.translate` (table, delete) doing `_clean_char` (and `lower`) on ASCII bytes.

  "\n" is kept: it separates the lines of a batch (a line's own "\n" never reaches here).
  """
  table = bytearray(range(256))
  delete = bytearray()
  for cp in range(128):
    if cp == 0x0A:
      continue
    char = _clean_char(chr(cp))  # ASCII has no CJK: always "" or one character
    if not char:
      delete.append(cp)
    else:
      table[cp] = ord(char.lower() if do_lower_case else char)
  return bytes(table), bytes(delete)


def tokens_by_id(vocab: Mapping[str, int]) -> list[str]:
  """The token list tf-text's WordPiece wants (unique, non-empty, id = position) for ``vocab``.

  Ids the official dict can never return (earlier duplicates, holes, "") get U+FFFD names,
  which the official `_clean_text` always deletes from the input.
  """
  inv_vocab = {v: k for k, v in vocab.items()}
  return [inv_vocab.get(i) or f"\ufffd{i}" for i in range(max(vocab.values()) + 1)]


def wordpiece_for_words(vocab: Mapping[str, int]) -> tf_text.FastWordpieceTokenizer:
  """tf-text WordPiece over ``vocab`` for text already split into official basic tokens
  (a word of up to MAX_CHARS_PER_WORD characters, 4 bytes each in UTF-8)."""
  return tf_text.FastWordpieceTokenizer(
      tokens_by_id(vocab), suffix_indicator="##", max_bytes_per_word=4 * MAX_CHARS_PER_WORD,
      token_out_type=tf.int64, unknown_token=UNK_TOKEN, no_pretokenization=True,
      support_detokenization=False)


class FastTokenizer:
  """Batched tokenizer on tensorflow-text; ids identical to `FullTokenizer` on every line.

  Costs per batch, not per line, wherever possible: one joined string, one `bytes.translate`
  for cleaning + lower-casing, one tf-text call, ids and row splits back as numpy.
  """

  def __init__(self, vocab_file: str, do_lower_case: bool = True, strip_accents: bool = True,
               batch_size: int = 8192):
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    validate_vocab(self.vocab, required=(UNK_TOKEN,))
    self.do_lower_case = do_lower_case
    self.strip_accents = strip_accents
    self._strip = do_lower_case and strip_accents  # official: accents go only when lower-casing
    self.batch_size = batch_size
    self._clean_map = _CharMap(_clean_char)
    self._clean_map[0x0A] = "\n"  # the line separator of a joined batch
    self._split_map = _CharMap(self._split_char)
    self._ascii_table, self._ascii_delete = _ascii_byte_table(do_lower_case)
    self._tokens_by_id = tokens_by_id(self.vocab)
    # ASCII lines: byte limit == char limit; split rules checked equal for all ASCII chars.
    self._ascii_tokenizer = self._wordpiece(MAX_CHARS_PER_WORD, no_pretokenization=False)
    # Other lines: normalised here and split into words; 200 chars are up to 800 bytes.
    self._word_tokenizer = self._wordpiece(4 * MAX_CHARS_PER_WORD, no_pretokenization=True)
    # The first run of each TF op sets up its kernel (~0.2 s for all): done here, once, rather
    # than inside the first batch of text.
    self.tokenize_to_ids(["a", "\u00e9 " + "x" * (MAX_CHARS_PER_WORD + 1)])

  def _wordpiece(self, max_bytes: int, no_pretokenization: bool):
    return tf_text.FastWordpieceTokenizer(
        self._tokens_by_id, suffix_indicator="##", max_bytes_per_word=max_bytes,
        token_out_type=tf.int64, unknown_token=UNK_TOKEN,
        no_pretokenization=no_pretokenization, support_detokenization=False)

  def _split_char(self, char: str) -> str:
    """Accent removal (after NFD) and punctuation splitting, per char, as the official code."""
    if self._strip and unicodedata.category(char) == "Mn":
      return ""
    return f" {char} " if is_punctuation(char) else char

  def _normalize(self, text: str) -> list[str]:
    """"\n"-joined lines -> per line, space-separated official basic tokens.

    The official per-character rules (`_clean_char`, `_split_char`) applied with a few regex
    passes over the whole batch: only characters that change are touched by Python.
    """
    text = self._substitute(text, self._clean_map, _CLEAN_CANDIDATES_RE)
    if self.do_lower_case:
      # Whole-text lower/NFD equal per-word ones: a space or "\n" stops both (final sigma,
      # reordering of combining marks).
      text = text.lower()
      if self._strip:
        text = unicodedata.normalize("NFD", text)
    return self._substitute(text, self._split_map, _SPLIT_CANDIDATES_RE,
                            _ASCII_PUNCTUATION).split("\n")

  @staticmethod
  def _substitute(text: str, char_map: _CharMap, candidates: re.Pattern[str],
                  always_padded: Sequence[str] = ()) -> str:
    """`text.translate(char_map)`, for a map sending each char to itself, "", " " or " c ",
    when only `candidates` and `always_padded` (chars known to go to " c ") may change."""
    sample = candidates.findall(text, 0, _SAMPLE_CHARS)
    sparse = len(sample) * 8 <= min(len(text), _SAMPLE_CHARS)
    chars = set(sample + candidates.findall(text, _SAMPLE_CHARS)) if sparse else set()
    if not sparse or len(chars) > _MAX_REGEX_CHARS:  # CJK, Cyrillic, ... text: one C-level
      return text.translate(char_map)  # pass beats many regex matches or huge classes
    dropped, spaced, padded = [], [], list(always_padded)
    for char in chars:
      new = char_map[ord(char)]
      if new != char:
        (dropped if not new else spaced if new == " " else padded).append(char)
    if dropped:
      text = re.sub(_char_class(dropped), "", text)
    if spaced:
      text = re.sub(_char_class(spaced), " ", text)
    if padded:  # joining the split pieces (separators kept) by " " puts a space on each side
      text = " ".join(re.split(f"({_char_class(padded)})", text))
    return text

  def tokenize_to_ids(self, lines: Sequence[str]) -> list[list[int]]:
    """Returns one list of WordPiece ids per line (no [CLS]/[SEP] added)."""
    out: list[list[int]] = []
    for start in range(0, len(lines), self.batch_size):
      out += self._tokenize_batch(lines[start:start + self.batch_size])
    return out

  def _tokenize_batch(self, lines: Sequence[str]) -> list[list[int]]:
    if len(lines) == 0:
      return []
    try:
      text = "\n".join(lines)
    except TypeError:  # bytes lines, as the official `convert_to_unicode` accepts
      lines = [to_text(line) for line in lines]
      text = "\n".join(lines)
    if text.count("\n") != len(lines) - 1:  # a line's own "\n" is a space, not a line break
      lines = [line.replace("\n", " ") for line in lines]
      text = "\n".join(lines)
    if text.isascii():  # the common case: no per-line Python work at all
      return _rows(*self._ascii_ids(text))
    ascii_rows = [i for i, line in enumerate(lines) if line.isascii()]
    other_rows = [i for i, line in enumerate(lines) if not line.isascii()]
    out: list[list[int]] = [[] for _ in lines]
    for rows, ids_fn in ((ascii_rows, self._ascii_ids), (other_rows, self._other_ids)):
      if rows:
        for row, ids in zip(rows, _rows(*ids_fn("\n".join([lines[i] for i in rows]))),
                            strict=True):
          out[row] = ids
    return out

  def _ascii_ids(self, text: str) -> tuple[np.ndarray, np.ndarray]:
    """"\n"-joined ASCII lines -> (ids, row splits), through tf-text's end-to-end mode."""
    data = text.encode("ascii").translate(self._ascii_table, self._ascii_delete)
    ids = self._ascii_tokenizer.tokenize(tf.constant(data.split(b"\n")))
    return ids.flat_values.numpy(), ids.row_splits.numpy()

  def _other_ids(self, text: str) -> tuple[np.ndarray, np.ndarray]:
    """"\n"-joined lines (some non-ASCII) -> (ids, row splits): normalised here, then split
    into words and WordPiece'd by tf-text."""
    words = tf.strings.split(tf.constant(self._normalize(text)))  # [lines, (words)]
    too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
    if tf.reduce_any(too_long):  # official: a word of over 200 chars becomes [UNK]
      words = words.with_flat_values(tf.where(too_long, UNK_TOKEN, words.flat_values))
    ids = self._word_tokenizer.tokenize(words).merge_dims(1, 2)  # [lines, (pieces)]
    return ids.flat_values.numpy(), ids.row_splits.numpy()
