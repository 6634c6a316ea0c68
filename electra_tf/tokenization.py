"""WordPiece tokenization giving the ids of the official ELECTRA ``FullTokenizer``.

Two implementations with identical ids:

* ``FullTokenizer``: the pure-Python reference (official algorithm, with its ``strip_accents``
  toggle), built on tf-models-official's BERT tokenizer pieces where those match exactly.
* ``FastTokenizer``: batched ids through tensorflow-text's ``FastWordpieceTokenizer``. Lines that
  are pure ASCII (most English text) go through its C++ end-to-end mode (split on whitespace and
  ASCII punctuation, WordPiece); other lines are normalised in Python with C-level string calls
  (``str.translate`` / ``lower`` / NFD) that reproduce the official rules character by
  character, then split by tf-text into words.

tf-text's own BERT normaliser is not used: it case-folds with ICU (``Straße`` -> ``strasse``,
final ``ς`` -> ``σ``) where the official code calls ``str.lower``, and its Unicode tables and
control/whitespace rules are not Python's ``unicodedata``.
"""

from __future__ import annotations

import collections
import re
import unicodedata
from collections.abc import Mapping, Sequence

import tensorflow as tf
import tensorflow_text as tf_text
from official.nlp.tools import tokenization as tfm_tokenization

UNK_TOKEN = "[UNK]"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Official ELECTRA WordpieceTokenizer limit (tf-models-official defaults to 400).
MAX_CHARS_PER_WORD = 200


def load_vocab(vocab_file: str) -> collections.OrderedDict[str, int]:
  """Reads a vocabulary file (one token a line, id = line number) like the official code."""
  if not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(f"vocab file not found: {vocab_file}")
  return tfm_tokenization.load_vocab(vocab_file)


def validate_vocab(vocab: Mapping[str, int], required: Sequence[str] = SPECIAL_TOKENS) -> None:
  """Raises a one-line ValueError naming the required tokens missing from `vocab`."""
  missing = [token for token in required if token not in vocab]
  if missing:
    raise ValueError(f"vocab is missing required token(s): {', '.join(missing)}")


def _is_control(char: str) -> bool:
  """Official rule: every `C*` category except tab/newline/CR (tf-models drops only Cc/Cf)."""
  if char in "\t\n\r":
    return False
  return unicodedata.category(char).startswith("C")


def _is_dropped(char: str) -> bool:
  """Characters the official `_clean_text` deletes."""
  cp = ord(char)
  return cp == 0 or cp == 0xFFFD or _is_control(char)


class _BasicTokenizer(tfm_tokenization.BasicTokenizer):
  """tf-models' BasicTokenizer with the official ELECTRA control rule and strip_accents toggle."""

  def __init__(self, do_lower_case: bool = True, strip_accents: bool = True):
    super().__init__(do_lower_case=do_lower_case, split_on_punc=True)
    self.strip_accents = strip_accents

  def tokenize(self, text: str) -> list[str]:
    # Own version: tf-models always strips accents when lower-casing; ELECTRA makes it optional.
    text = self._clean_text(tfm_tokenization.convert_to_unicode(text))
    text = self._tokenize_chinese_chars(text)
    split_tokens = []
    for token in tfm_tokenization.whitespace_tokenize(text):
      if self.do_lower_case:
        token = token.lower()
        if self.strip_accents:
          token = self._run_strip_accents(token)
      split_tokens.extend(self._run_split_on_punc(token))
    return tfm_tokenization.whitespace_tokenize(" ".join(split_tokens))

  def _clean_text(self, text: str) -> str:
    # Own version: uses the official `_is_control` (all C* categories), see above.
    return "".join(
        " " if tfm_tokenization._is_whitespace(c) else c for c in text if not _is_dropped(c))


class FullTokenizer:
  """Pure-Python reference tokenizer: the official algorithm step by step."""

  def __init__(self, vocab_file: str, do_lower_case: bool = True, strip_accents: bool = True):
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = _BasicTokenizer(do_lower_case, strip_accents)
    self.wordpiece_tokenizer = tfm_tokenization.WordpieceTokenizer(
        self.vocab, unk_token=UNK_TOKEN, max_input_chars_per_word=MAX_CHARS_PER_WORD)

  def tokenize(self, text: str) -> list[str]:
    return [piece for word in self.basic_tokenizer.tokenize(text)
            for piece in self.wordpiece_tokenizer.tokenize(word)]

  def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
    return tfm_tokenization.convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
    return tfm_tokenization.convert_by_vocab(self.inv_vocab, ids)


_is_chinese_char = tfm_tokenization.BasicTokenizer()._is_chinese_char  # same CJK ranges


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
  if _is_dropped(char):
    return ""
  # isspace(): str.split() also splits on U+2028/U+2029, which `_clean_text` keeps.
  if tfm_tokenization._is_whitespace(char) or char.isspace():
    return " "
  if _is_chinese_char(ord(char)):
    return f" {char} "
  return char


_ASCII_CONTROL_RE = re.compile("[\x00-\x09\x0b-\x1f\x7f]")  # tab/CR become spaces, rest vanish
_ASCII_CONTROL_TABLE = str.maketrans(
    {chr(cp): _clean_char(chr(cp)) for cp in [*range(0x00, 0x0A), *range(0x0B, 0x20), 0x7F]})
_LONG_WORD_RE = re.compile(rf"[^ ]{{{MAX_CHARS_PER_WORD + 1},}}")


class FastTokenizer:
  """Batched tokenizer on tensorflow-text; ids identical to `FullTokenizer` on every line."""

  def __init__(self, vocab_file: str, do_lower_case: bool = True, strip_accents: bool = True,
               batch_size: int = 8192):
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    validate_vocab(self.vocab, required=(UNK_TOKEN,))
    self.do_lower_case = do_lower_case
    self.strip_accents = strip_accents
    self._strip = do_lower_case and strip_accents  # official: accents go only when lower-casing
    self.batch_size = batch_size
    self._clean_map = _CharMap(_clean_char)
    self._split_map = _CharMap(self._split_char)
    # tf-text wants unique, non-empty tokens with id = position: ids the official dict can never
    # return (earlier duplicates, holes, "") get U+FFFD names, which `_clean_text` always deletes.
    self._tokens_by_id = [self.inv_vocab.get(i) or f"\ufffd{i}"
                          for i in range(max(self.vocab.values()) + 1)]
    # ASCII lines: byte limit == char limit; split rules checked equal for all ASCII chars.
    self._ascii_tokenizer = self._wordpiece(MAX_CHARS_PER_WORD, no_pretokenization=False)
    self._word_tokenizer = None  # built on first non-ASCII line

  def _wordpiece(self, max_bytes: int, no_pretokenization: bool):
    return tf_text.FastWordpieceTokenizer(
        self._tokens_by_id, suffix_indicator="##", max_bytes_per_word=max_bytes,
        token_out_type=tf.int64, unknown_token=UNK_TOKEN,
        no_pretokenization=no_pretokenization, support_detokenization=False)

  def _split_char(self, char: str) -> str:
    """Accent removal (after NFD) and punctuation splitting, per char, as the official code."""
    if self._strip and unicodedata.category(char) == "Mn":
      return ""
    return f" {char} " if tfm_tokenization._is_punctuation(char) else char

  def _normalize(self, line: str) -> str:
    """Non-ASCII line -> space-separated official basic tokens; >200-char words -> [UNK]."""
    text = line.translate(self._clean_map)
    if self.do_lower_case:
      # Whole-line lower/NFD equal per-word ones: a space stops both (final sigma, reordering).
      text = text.lower()
      if self._strip:
        text = unicodedata.normalize("NFD", text)
    text = text.translate(self._split_map)
    return _LONG_WORD_RE.sub(UNK_TOKEN, text)

  def tokenize_to_ids(self, lines: Sequence[str]) -> list[list[int]]:
    """Returns one list of WordPiece ids per line (no [CLS]/[SEP] added)."""
    out = []
    for start in range(0, len(lines), self.batch_size):
      out.extend(self._tokenize_batch(lines[start:start + self.batch_size]))
    return out

  def _tokenize_batch(self, lines: Sequence[str]) -> list[list[int]]:
    lines = [tfm_tokenization.convert_to_unicode(line) for line in lines]
    ascii_rows = [i for i, line in enumerate(lines) if line.isascii()]
    other_rows = [i for i, line in enumerate(lines) if not line.isascii()]
    out: list[list[int]] = [[] for _ in lines]
    if ascii_rows:
      # One string for the whole batch: a single lower() and control-char scan.
      text = "\n".join(lines[i].replace("\n", " ") for i in ascii_rows)
      if _ASCII_CONTROL_RE.search(text):
        text = text.translate(_ASCII_CONTROL_TABLE)
      if self.do_lower_case:
        text = text.lower()
      ids = self._ascii_tokenizer.tokenize(tf.constant(text.split("\n")))
      self._scatter(ids, ascii_rows, out)
    if other_rows:
      if self._word_tokenizer is None:
        self._word_tokenizer = self._wordpiece(4 * MAX_CHARS_PER_WORD, no_pretokenization=True)
      words = tf.strings.split(tf.constant([self._normalize(lines[i]) for i in other_rows]))
      ids = self._word_tokenizer.tokenize(words).merge_dims(1, 2)
      self._scatter(ids, other_rows, out)
    return out

  @staticmethod
  def _scatter(ids: tf.RaggedTensor, rows: list[int], out: list[list[int]]) -> None:
    """Writes ragged ids [len(rows), (pieces)] into `out` at `rows`."""
    values = ids.flat_values.numpy().tolist()
    splits = ids.row_splits.numpy().tolist()
    for k, row in enumerate(rows):
      out[row] = values[splits[k]:splits[k + 1]]
