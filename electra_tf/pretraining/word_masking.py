"""Whole-word and span masking for pre-training, in the graph (beside ``masking.mask``).

A *word* is a WordPiece followed by its ``##`` continuations; which ids are continuations is a
bool [V] table read once from the vocabulary (``continuation_table``) and passed in as a
tensor. A *unit* is what gets masked whole: a word (``whole_word``) or a span of consecutive
words (``span``, SpanBERT). Each row masks the official number of pieces, ``num_to_predict =
max(1, min(N, round(mask_prob * real tokens)))``, filled by whole units taken in a random
order; a unit that would exceed what is left of the budget is skipped and the next ones are
tried (Hugging Face's ``DataCollatorForWholeWordMask``), so a row masks fewer pieces only when
no unit left fits the remainder. [CLS], [SEP], [MASK] and padding are never masked. The chosen
pieces then get the official replacement: [MASK] with probability 0.85, else kept.

Spans (SpanBERT): the words of a row are cut into consecutive spans whose lengths in words are
drawn from a geometric distribution with ``p = 1 / span_mean_length`` truncated to
``1..span_max_length`` (renormalised, as SpanBERT; the defaults 5.0 and 10 are SpanBERT's
p = 0.2 and 10, a mean of 3.8 words); a span also ends at a non-maskable token ([SEP]).

All static shapes and vectorised ops; the budget is filled by a ``tf.while_loop`` of at most N
passes, each taking the longest prefix of the still-fitting units in the random order (which
is the skip-and-continue greedy exactly). Runs eagerly, in ``tf.function``, under XLA and
``tf.distribute``. Shapes: B batch, T sequence, N max predictions per sequence, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from electra_tf.config import MASKINGS
from electra_tf.full_tokenizer import vocab_lines
from electra_tf.pretraining import masking

TOKEN, WHOLE_WORD, SPAN = MASKINGS  # TOKEN: the official masking (``masking.mask``)


def continuation_table(vocab_file: str) -> np.ndarray:
  """bool [V]: True for the ids of ``##`` WordPiece continuations (line number = id)."""
  return np.array([token.strip().startswith("##") for token in vocab_lines(vocab_file)], bool)


def span_length_probs(mean_length: float, max_length: int) -> np.ndarray:
  """float64 [max_length]: P(length = 1..max_length), geometric p = 1 / mean_length truncated
  and renormalised (SpanBERT's ``len_distrib``)."""
  if mean_length < 1 or max_length < 1:
    raise ValueError(f"span_mean_length must be >= 1 and span_max_length >= 1, got "
                     f"{mean_length} and {max_length}")
  p = 1.0 / mean_length
  probs = p * (1 - p) ** np.arange(max_length)
  return probs / probs.sum()


def word_starts(input_ids: tf.Tensor, candidates: tf.Tensor, continuation: tf.Tensor
                ) -> tf.Tensor:
  """bool [B, T]: candidate positions that begin a word (not a ``##`` piece right after another
  candidate; a ``##`` piece after [CLS] / [SEP] starts its own word)."""
  is_cont = tf.gather(tf.cast(continuation, tf.bool), input_ids)
  prev = tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])
  return candidates & ~(is_cont & prev)


def span_starts(starts: tf.Tensor, candidates: tf.Tensor, uniform: tf.Tensor,
                length_probs: np.ndarray) -> tf.Tensor:
  """bool [B, T]: the word starts that begin a span.

  The row's words (numbered by ``starts``) are cut into consecutive spans with lengths drawn
  from ``length_probs`` by inverse CDF of ``uniform`` float32 [B, T] (one draw a span); a span
  also ends before a word that follows a non-candidate token.
  """
  seq_len = starts.shape[1]
  cdf = tf.constant(np.cumsum(length_probs)[:-1], tf.float32)
  lengths = 1 + tf.reduce_sum(tf.cast(uniform[:, :, tf.newaxis] >= cdf, tf.int32), -1)
  ends = tf.minimum(tf.cumsum(lengths, axis=1), seq_len)  # word numbers beginning a span
  batch = tf.shape(starts)[0]
  index = tf.stack([tf.broadcast_to(tf.range(batch)[:, tf.newaxis], tf.shape(ends)), ends], -1)
  begins = tf.scatter_nd(index, tf.ones_like(ends), tf.stack([batch, seq_len + 1]))[:, :seq_len]
  begins = tf.concat([tf.ones_like(begins[:, :1]), begins[:, 1:]], 1) > 0  # word 0 begins one
  word = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)
  after_gap = ~tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])
  return starts & (tf.gather(begins, word, batch_dims=1) | after_gap)


def _fill_budget(lengths: tf.Tensor, valid: tf.Tensor, budget: tf.Tensor, n: int) -> tf.Tensor:
  """bool [B, U]: units taken in order (lengths int32 [B, U], valid bool [B, U]) while they fit
  ``budget`` int32 [B]; a unit that does not fit is skipped and later ones are tried."""

  def eligible(taken, left):
    return valid & ~taken & (lengths <= left[:, tf.newaxis])

  def cond(taken, left):
    return tf.reduce_any(eligible(taken, left))

  def body(taken, left):
    ok = eligible(taken, left)
    cum = tf.cumsum(tf.where(ok, lengths, 0), axis=1)
    take = ok & (cum <= left[:, tf.newaxis])
    return taken | take, left - tf.reduce_sum(tf.where(take, lengths, 0), 1)

  taken, _ = tf.while_loop(cond, body, (tf.zeros_like(valid), budget), maximum_iterations=n)
  return taken


def choose_units(unit_start: tf.Tensor, candidates: tf.Tensor, budget: tf.Tensor,
                 uniform: tf.Tensor, n: int) -> tf.Tensor:
  """bool [B, T]: the positions of whole units filling ``budget`` int32 [B] in random order.

  A unit runs from a ``unit_start`` [B, T] over the following candidates up to the next start;
  ``uniform`` float32 [B, T] (read at the starts) orders the units.
  """
  seq_len = unit_start.shape[1]
  starts = tf.cast(unit_start, tf.int32)
  num_units = tf.reduce_sum(starts, 1, keepdims=True)
  uid = tf.cumsum(starts, axis=1) - 1  # [B, T]; -1 before the first unit
  in_unit = candidates & (uid >= 0)
  # Start position of unit u (starts first, in order); pieces before each start.
  start_pos = tf.argsort(1 - starts, axis=1, stable=True)
  valid = tf.range(seq_len)[tf.newaxis, :] < num_units  # [B, U = T]
  pieces = tf.cumsum(tf.cast(in_unit, tf.int32), axis=1, exclusive=True)
  total = tf.reduce_sum(tf.cast(in_unit, tf.int32), 1, keepdims=True)
  before = tf.where(valid, tf.gather(pieces, start_pos, batch_dims=1), total)
  lengths = tf.concat([before[:, 1:], total], 1) - before
  keys = tf.where(valid, tf.gather(uniform, start_pos, batch_dims=1), 2.0)
  order = tf.argsort(keys, axis=1, stable=True)
  taken_sorted = _fill_budget(tf.gather(lengths, order, batch_dims=1),
                              tf.gather(valid, order, batch_dims=1), budget, n)
  taken = tf.gather(taken_sorted, tf.argsort(order, axis=1), batch_dims=1)  # by unit
  return in_unit & tf.gather(taken, tf.maximum(uid, 0), batch_dims=1)


def mask_units(inputs: masking.Inputs, mask_prob: float, max_predictions_per_seq: int,
               vocab: Mapping[str, int], continuation: tf.Tensor, masking_kind: str = WHOLE_WORD,
               span_probs: np.ndarray | None = None,
               draws: Mapping[str, tf.Tensor] | None = None,
               seed: tf.Tensor | None = None) -> masking.Inputs:
  """Whole-word or span masking; the same outputs as ``masking.mask``.

  Args:
    inputs: ``input_ids``, ``input_mask``, ``segment_ids`` int32 [B, T] (T static).
    mask_prob, max_predictions_per_seq, vocab: as ``masking.mask``.
    continuation: bool [V], True for ``##`` pieces (``continuation_table``).
    masking_kind: ``whole_word`` or ``span``.
    span_probs: P(span length = 1..M) in words (``span_length_probs``), for ``span``.
    draws: optional injected ``unit_uniform`` float32 [B, T] (unit order), ``span_uniform``
      float32 [B, T] (span lengths) and ``mask_uniform`` float32 [B, N].
    seed: optional int [2] seed for the draws that are not injected.
  Returns:
    ``inputs`` with masked ``input_ids`` and ``masked_lm_*`` [B, N]: the chosen pieces in
    position order in the first slots (weight 1), position 0 and weight 0 after them.
  """
  if masking_kind not in (WHOLE_WORD, SPAN):
    raise ValueError(f"mask_units masks whole_word or span, got {masking_kind!r}")
  draws = draws or {}
  n = int(max_predictions_per_seq)
  ids = tf.convert_to_tensor(inputs.input_ids)
  inputs = inputs._replace(input_ids=ids, input_mask=tf.convert_to_tensor(inputs.input_mask))
  batch, seq_len = tf.shape(ids)[0], ids.shape[1]
  if seq_len is None:
    raise ValueError("whole-word and span masking need a static sequence length")
  unit_seed, span_seed, uniform_seed = masking._split_seed(seed, 3)

  candidates = masking.get_candidates_mask(inputs, vocab)
  units = word_starts(ids, candidates, continuation)
  if masking_kind == SPAN:
    if span_probs is None:
      raise ValueError("span masking needs span_probs (span_length_probs)")
    units = span_starts(units, candidates, masking._uniform(
        draws.get("span_uniform"), [batch, seq_len], span_seed), span_probs)
  budget = masking.num_to_predict(inputs.input_mask, mask_prob, n)
  chosen = choose_units(units, candidates, budget, masking._uniform(
      draws.get("unit_uniform"), [batch, seq_len], unit_seed), n)

  count = tf.reduce_sum(tf.cast(chosen, tf.int32), 1)
  weights = tf.sequence_mask(count, n, tf.float32)
  int_weights = tf.cast(weights, tf.int32)
  positions = tf.argsort(tf.cast(~chosen, tf.int32), axis=1, stable=True)[:, :n] * int_weights
  masked_lm_ids = masking.gather_positions(ids, positions) * int_weights
  uniform = masking._uniform(draws.get("mask_uniform"), [batch, n], uniform_seed)
  replace_positions = positions * tf.cast(uniform < masking.MASK_TOKEN_PROB, tf.int32)
  mask_ids = tf.fill([batch, n], tf.constant(int(vocab["[MASK]"]), ids.dtype))
  masked_ids, _ = masking.scatter_update(ids, mask_ids, replace_positions)
  return inputs._replace(
      input_ids=tf.stop_gradient(masked_ids), masked_lm_positions=positions,
      masked_lm_ids=masked_lm_ids, masked_lm_weights=weights)
