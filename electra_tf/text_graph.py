"""Raw text -> model inputs inside the TensorFlow graph, with the ids of ``FullTokenizer``.

``TextFeaturizer`` is a ``tf.Module`` a SavedModel can carry (``classify_text`` of the
fine-tuned export): it runs the official basic tokenisation with string ops, WordPiece with
tensorflow-text (``tokenization.wordpiece_for_words``, the fast path's table) and the official
classification featurisation (``[CLS] a [SEP] b [SEP]``, pairs truncated from the longer side,
padding to ``max_seq_length``). The official rules, as regexes over Unicode categories:

- delete NUL, U+FFFD and every ``C*`` character but tab / newline / CR (``_clean_text``);
- turn tab / newline / CR, ``Zs`` and the line / paragraph separators into spaces;
- pad CJK ideographs with spaces (``_tokenize_chinese_chars``);
- lower-case (``str.lower``, final sigma included), NFD, delete ``Mn`` (with ``do_lower_case``);
- pad punctuation (ASCII symbols and ``P*``) with spaces; split on spaces; a word of more than
  200 characters becomes ``[UNK]``.

Loading such a SavedModel needs ``import tensorflow_text`` (its ops).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf import tokenization

_DROPPED = r"[\x00\x{FFFD}]|[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}\t\n\r]"
_SPACES = r"[\t\n\r\p{Zs}\x{2028}\x{2029}]"
_CJK = (r"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
        r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])")
_PUNCTUATION = r"([!-/:-@\[-`{-~\p{P}])"
_TEXT = tf.TensorSpec([None], tf.string)


def truncated_pair_lengths(len_a: tf.Tensor, len_b: tf.Tensor,
                           max_length: int) -> tuple[tf.Tensor, tf.Tensor]:
  """Lengths [B] that ``truncate_seq_pair`` (pop from the longer, ``b`` on ties) leaves."""
  fits = len_a + len_b <= max_length
  keep_a = tf.minimum(len_a, tf.maximum(max_length - len_b, (max_length + 1) // 2))
  return (tf.where(fits, len_a, keep_a), tf.where(fits, len_b, max_length - keep_a))


class TextFeaturizer(tf.Module):
  """Strings [B] -> WordPiece ids, and pairs -> ``input_ids`` / ``input_mask`` /
  ``segment_ids`` int32 [B, max_seq_length] as the classification tasks featurise them."""

  def __init__(self, vocab_file: str, do_lower_case: bool = True, max_seq_length: int = 128,
               strip_accents: bool = True):
    super().__init__(name="text_featurizer")
    vocab = tokenization.load_vocab(vocab_file)
    tokenization.validate_vocab(vocab, ("[UNK]", "[CLS]", "[SEP]"))
    self.wordpiece = tokenization.wordpiece_for_words(vocab)
    self.do_lower_case, self.strip_accents = bool(do_lower_case), bool(strip_accents)
    self.max_seq_length = int(max_seq_length)
    self.cls_id, self.sep_id = int(vocab["[CLS]"]), int(vocab["[SEP]"])

  def words(self, text: tf.Tensor) -> tf.RaggedTensor:
    """[B] strings -> [B, (words)] official basic tokens."""
    text = tf.strings.regex_replace(text, _DROPPED, "")
    text = tf.strings.regex_replace(text, _SPACES, " ")
    text = tf.strings.regex_replace(text, _CJK, r" \1 ")
    if self.do_lower_case:
      text = tf.strings.lower(text, encoding="utf-8")
      if self.strip_accents:
        text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFD"), r"\p{Mn}", "")
    text = tf.strings.regex_replace(text, _PUNCTUATION, r" \1 ")
    words = tf.strings.split(text)
    too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > (
        tokenization.MAX_CHARS_PER_WORD)
    return words.with_flat_values(
        tf.where(too_long, tokenization.UNK_TOKEN, words.flat_values))

  def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
    """[B] strings -> [B, (pieces)] int32 WordPiece ids (no [CLS] / [SEP])."""
    pieces = self.wordpiece.tokenize(self.words(text)).merge_dims(1, 2)
    return tf.cast(pieces, tf.int32)

  def featurize(self, text_a: tf.Tensor, text_b: tf.Tensor) -> dict[str, tf.Tensor]:
    """Pairs of [B] strings (``text_b`` "" for single texts) -> int32 [B, max_seq_length]
    ``input_ids``, ``input_mask``, ``segment_ids``."""
    a, b = self.tokenize(text_a), self.tokenize(text_b)
    len_a, len_b = a.row_lengths(), b.row_lengths()
    has_b = len_b > 0
    pair_a, pair_b = truncated_pair_lengths(len_a, len_b, self.max_seq_length - 3)
    keep_a = tf.where(has_b, pair_a, tf.minimum(len_a, self.max_seq_length - 2))
    keep_b = tf.where(has_b, pair_b, 0)
    a = tf.ragged.boolean_mask(a, tf.ragged.range(len_a) < keep_a[:, None])
    b = tf.ragged.boolean_mask(b, tf.ragged.range(len_b) < keep_b[:, None])
    n = tf.shape(text_a, out_type=tf.int64)[0]
    cls = tf.RaggedTensor.from_row_lengths(tf.fill([n], self.cls_id), tf.ones([n], tf.int64))
    sep = tf.RaggedTensor.from_row_lengths(tf.fill([n], self.sep_id), tf.ones([n], tf.int64))
    sep_b = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(has_b, tf.int64))], self.sep_id), tf.cast(has_b, tf.int64))
    ids = tf.concat([cls, a, sep, b, sep_b], axis=1)
    first = tf.concat([cls, a, sep], axis=1)
    segments = tf.concat([tf.zeros_like(first), tf.ones_like(b), tf.ones_like(sep_b)], axis=1)
    shape = [None, self.max_seq_length]
    return {"input_ids": ids.to_tensor(0, shape=shape),
            "input_mask": tf.ones_like(ids).to_tensor(0, shape=shape),
            "segment_ids": segments.to_tensor(0, shape=shape)}


TEXT_SIGNATURE = [_TEXT, _TEXT]
