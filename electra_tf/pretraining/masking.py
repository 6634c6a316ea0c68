"""Dynamic masking and sampling for pre-training (the official ``pretrain_helpers``).

Pure TensorFlow functions with static shapes and no Python loops over tokens, so they run
eagerly, inside ``tf.function`` and under XLA. Each random draw can be injected (to reproduce
a recorded run) or comes from stateless random ops seeded by a ``[2]`` int seed (repeatable);
with neither, the stateful ops the official code uses are called (not repeatable). A seed
repeats its draws within one execution mode; XLA-compiled code draws other numbers than
eager / graph code for the same seed.

Shapes: B batch, T sequence, N max predictions per sequence, V vocabulary, D depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf

# Tokens the official ``get_candidates_mask`` never masks (padding is excluded by input_mask).
NEVER_MASKED = ("[SEP]", "[CLS]", "[MASK]")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Official: a chosen position becomes [MASK] when its uniform draw is below this, else keeps
# its token; ELECTRA never substitutes a random token (unlike BERT's 80/10/10).
MASK_TOKEN_PROB = 0.85


class Inputs(NamedTuple):
  """Model inputs (official ``pretrain_data.Inputs``); a NamedTuple so ``tf.nest`` handles it.

  ``input_ids``, ``input_mask``, ``segment_ids``: int32 [B, T]. After masking:
  ``masked_lm_positions``, ``masked_lm_ids``: int32 [B, N]; ``masked_lm_weights``: float32
  [B, N] (1 for the first ``num_to_predict`` slots, 0 after; unused slots hold position 0).
  """

  input_ids: tf.Tensor
  input_mask: tf.Tensor
  segment_ids: tf.Tensor
  masked_lm_positions: tf.Tensor | None = None
  masked_lm_ids: tf.Tensor | None = None
  masked_lm_weights: tf.Tensor | None = None


def features_to_inputs(features: Mapping[str, tf.Tensor]) -> Inputs:
  """A feature dict (``input_ids``, ``input_mask``, ``segment_ids``, optional masked_lm_*);
  integer features become int32 (TFRecords hold int64), as the official input pipeline does."""
  missing = [k for k in ("input_ids", "input_mask", "segment_ids") if k not in features]
  if missing:
    raise ValueError(f"features lack {', '.join(missing)}")
  values = {k: features.get(k) for k in Inputs._fields}
  for k, v in values.items():
    if v is not None and k != "masked_lm_weights":
      values[k] = tf.cast(v, tf.int32)
  return Inputs(**values)


def read_special_ids(vocab_file: str, tokens: tuple[str, ...] = SPECIAL_TOKENS) -> dict[str, int]:
  """Ids of ``tokens`` in a WordPiece vocab (line number = id, as the official ``load_vocab``)."""
  ids: dict[str, int] = {}
  with tf.io.gfile.GFile(vocab_file, "r") as f:
    for index, line in enumerate(f):
      token = line.strip()
      if token in tokens and token not in ids:
        ids[token] = index
  missing = [t for t in tokens if t not in ids]
  if missing:
    raise ValueError(f"vocab {vocab_file} lacks {', '.join(missing)}")
  return ids


def _special_id(vocab: Mapping[str, int], token: str) -> int:
  if token not in vocab:
    raise ValueError(f"vocab has no {token} token")
  return int(vocab[token])


def gather_positions(sequence: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
  """Values of ``sequence`` at per-row positions.

  Args:
    sequence: [B, T] or [B, T, D].
    positions: int32 [B, N], each in [0, T).
  Returns:
    [B, N] or [B, N, D].
  """
  sequence = tf.convert_to_tensor(sequence)
  if sequence.shape.rank not in (2, 3):
    raise ValueError(f"gather_positions needs a rank-2 or rank-3 sequence, got {sequence.shape}")
  return tf.gather(sequence, positions, batch_dims=1)


def scatter_update(sequence: tf.Tensor, updates: tf.Tensor,
                   positions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """Writes ``updates`` into ``sequence`` at per-row positions, the official way.

  Official semantics kept on purpose: updates aimed at position 0 are ignored (0 marks unused
  slots); updates to the same position are summed and divided by their count, with integer
  floor division for int32 sequences (two different samples at one position give a token that
  is neither).

  Args:
    sequence: int32 or float [B, T] or [B, T, D].
    updates: [B, N] or [B, N, D], same dtype as ``sequence``.
    positions: int32 [B, N].
  Returns:
    (updated sequence, same shape as ``sequence``; int32 [B, T] mask of updated positions).
  """
  sequence = tf.convert_to_tensor(sequence)
  updates = tf.convert_to_tensor(updates, sequence.dtype)
  rank = sequence.shape.rank
  if rank not in (2, 3):
    raise ValueError(f"scatter_update needs a rank-2 or rank-3 sequence, got {sequence.shape}")
  if rank == 2:
    sequence = sequence[:, :, tf.newaxis]
    updates = updates[:, :, tf.newaxis]
  positions = tf.cast(positions, tf.int32)
  batch, seq_len = tf.shape(sequence)[0], tf.shape(sequence)[1]
  depth = tf.shape(sequence)[2]
  index = tf.stack([tf.broadcast_to(tf.range(batch)[:, tf.newaxis], tf.shape(positions)),
                    positions], -1)  # [B, N, 2]
  summed = tf.scatter_nd(index, updates, tf.stack([batch, seq_len, depth]))  # [B, T, D]
  counts = tf.scatter_nd(index, tf.ones_like(positions), tf.stack([batch, seq_len]))  # [B, T]
  counts *= tf.cast(tf.range(seq_len) > 0, tf.int32)[tf.newaxis, :]
  counts_3d = counts[:, :, tf.newaxis]
  if sequence.dtype.is_integer:
    averaged = tf.math.floordiv(summed, tf.cast(tf.maximum(1, counts_3d), sequence.dtype))
  else:
    averaged = summed / tf.cast(tf.maximum(1, counts_3d), sequence.dtype)
  updated_mask = tf.minimum(counts, 1)
  keep = tf.cast(updated_mask[:, :, tf.newaxis], sequence.dtype)
  updated = (1 - keep) * sequence + keep * averaged
  if rank == 2:
    updated = updated[:, :, 0]
  return updated, updated_mask


def get_candidates_mask(inputs: Inputs, vocab: Mapping[str, int],
                        disallow_from_mask: tf.Tensor | None = None) -> tf.Tensor:
  """bool [B, T]: positions that may be masked (real tokens other than [CLS], [SEP], [MASK])."""
  ids = inputs.input_ids
  candidates = tf.cast(inputs.input_mask, tf.bool)
  for token in NEVER_MASKED:
    candidates &= tf.not_equal(ids, _special_id(vocab, token))
  if disallow_from_mask is not None:
    candidates &= ~disallow_from_mask
  return candidates


def candidates_log_probs(candidates: tf.Tensor, proposal_distribution: float | tf.Tensor = 1.0
                         ) -> tf.Tensor:
  """float32 [B, T]: log of the official masking distribution (uniform over candidates; -inf
  elsewhere). Rows with no candidate are NaN, as in the official code."""
  prob = proposal_distribution * tf.cast(candidates, tf.float32)
  prob /= tf.reduce_sum(prob, axis=-1, keepdims=True)
  return tf.math.log(tf.stop_gradient(prob))


def num_to_predict(input_mask: tf.Tensor, mask_prob: float, max_predictions_per_seq: int
                   ) -> tf.Tensor:
  """int32 [B]: max(1, min(N, round(num_tokens * mask_prob))), rounding half to even in float32
  (exactly the official expression)."""
  num_tokens = tf.cast(tf.reduce_sum(input_mask, -1), tf.float32)
  return tf.maximum(1, tf.minimum(
      max_predictions_per_seq, tf.cast(tf.round(num_tokens * mask_prob), tf.int32)))


def _uniform(drawn: tf.Tensor | None, shape: list, seed: tf.Tensor | None) -> tf.Tensor:
  """float32 uniform [0, 1) draws of ``shape``: the injected ones, else stateless from
  ``seed``, else stateful."""
  if drawn is not None:
    return tf.cast(drawn, tf.float32)
  if seed is None:
    return tf.random.uniform(shape)
  return tf.random.stateless_uniform(shape, seed)


def _sample_positions(logits: tf.Tensor, n: int, seed: tf.Tensor | None) -> tf.Tensor:
  """int32 [B, n] positions drawn with replacement from float [B, T] log-probabilities (NaN
  rows, which have no candidate, count as uniform); stateless when ``seed`` is given."""
  logits = tf.where(tf.math.is_nan(logits), tf.zeros_like(logits), logits)
  if seed is None:
    return tf.random.categorical(logits, n, dtype=tf.int32)
  # Gumbel-max over [B, N, T]: the same distribution as categorical sampling with
  # replacement, and it compiles under XLA (StatelessMultinomial does not).
  u = tf.random.stateless_uniform(tf.concat([tf.shape(logits)[:1], [n], tf.shape(logits)[1:]], 0),
                                  seed, minval=1e-30, maxval=1.0)
  return tf.argmax(logits[:, tf.newaxis, :] - tf.math.log(-tf.math.log(u)), -1,
                   output_type=tf.int32)


def mask(inputs: Inputs, mask_prob: float, max_predictions_per_seq: int,
         vocab: Mapping[str, int], proposal_distribution: float | tf.Tensor = 1.0,
         disallow_from_mask: tf.Tensor | None = None,
         draws: Mapping[str, tf.Tensor] | None = None,
         seed: tf.Tensor | None = None) -> Inputs:
  """Official dynamic masking: pick positions, record targets, put [MASK] at most of them.

  Per row, ``num_to_predict`` positions are drawn from the candidates *with replacement* (a
  position can be drawn twice: it is then one masked position with two target slots); each is
  replaced by [MASK] with probability 0.85 and otherwise keeps its token.

  Args:
    inputs: ``input_ids``, ``input_mask``, ``segment_ids`` int32 [B, T].
    mask_prob: fraction of real tokens to predict.
    max_predictions_per_seq: N, the static number of target slots.
    vocab: token -> id, with at least [CLS], [SEP], [MASK].
    proposal_distribution: float or [B, T] non-uniform position scores (official option).
    disallow_from_mask: optional bool [B, T] positions never to mask.
    draws: optional injected randomness: ``categorical_positions`` int32 [B, N] (the sampled
      positions) and/or ``mask_uniform`` float32 [B, N] (the [MASK]-or-keep draws).
    seed: optional int [2] seed for the stateless draws that are not injected.
  Returns:
    ``inputs`` with masked ``input_ids`` and ``masked_lm_positions`` / ``masked_lm_ids`` /
    ``masked_lm_weights`` [B, N].
  """
  draws = draws or {}
  inputs = inputs._replace(**{k: tf.convert_to_tensor(v) for k, v in inputs._asdict().items()
                              if v is not None})
  n = int(max_predictions_per_seq)
  if n < 1:
    raise ValueError(f"max_predictions_per_seq must be >= 1, got {max_predictions_per_seq}")
  ids = inputs.input_ids
  batch = tf.shape(ids)[0]
  pos_seed, uniform_seed = _split_seed(seed, 2)

  candidates = get_candidates_mask(inputs, vocab, disallow_from_mask)
  weights = tf.sequence_mask(num_to_predict(inputs.input_mask, mask_prob, n), n, tf.float32)
  # Ours: a row with nothing to mask predicts nothing (the official samples from NaN logits).
  weights *= tf.cast(tf.reduce_any(candidates, -1, keepdims=True), tf.float32)

  if "categorical_positions" in draws:
    positions = tf.cast(draws["categorical_positions"], tf.int32)
  else:
    positions = _sample_positions(candidates_log_probs(candidates, proposal_distribution), n,
                                  pos_seed)
  int_weights = tf.cast(weights, tf.int32)
  positions *= int_weights
  masked_lm_ids = gather_positions(ids, positions) * int_weights

  uniform = _uniform(draws.get("mask_uniform"), [batch, n], uniform_seed)
  replace_positions = positions * tf.cast(uniform < MASK_TOKEN_PROB, tf.int32)
  mask_ids = tf.fill([batch, n], tf.constant(_special_id(vocab, "[MASK]"), ids.dtype))
  masked_ids, _ = scatter_update(ids, mask_ids, replace_positions)
  return inputs._replace(
      input_ids=tf.stop_gradient(masked_ids), masked_lm_positions=positions,
      masked_lm_ids=masked_lm_ids, masked_lm_weights=weights)


def unmask(inputs: Inputs) -> Inputs:
  """Puts the original tokens back at the masked positions (official ``unmask``)."""
  ids, _ = scatter_update(inputs.input_ids, inputs.masked_lm_ids, inputs.masked_lm_positions)
  return inputs._replace(input_ids=ids)


def sample_from_softmax(logits: tf.Tensor, disallow: tf.Tensor | None = None,
                        uniform_noise: tf.Tensor | None = None,
                        seed: tf.Tensor | None = None) -> tf.Tensor:
  """Gumbel-max sample of one token per row (official ``sample_from_softmax``).

  ``argmax(softmax(logits - 1000 * disallow + g))`` with ``g = -log(-log(u + 1e-9) + 1e-9)``;
  the softmax is kept because it changes which index wins float ties.

  Args:
    logits: float [..., V].
    disallow: optional float [..., V], 1 for tokens not to sample.
    uniform_noise: optional injected u, float32 shaped like ``logits``.
    seed: optional int [2] seed for stateless noise when ``uniform_noise`` is None.
  Returns:
    int32 [...] sampled ids (the official returns their one-hot encoding).
  """
  logits = tf.cast(logits, tf.float32)
  if disallow is not None:
    logits -= 1000.0 * tf.cast(disallow, tf.float32)
  if uniform_noise is None:
    if seed is None:
      uniform_noise = tf.random.uniform(tf.shape(logits), minval=0, maxval=1)
    else:
      uniform_noise = tf.random.stateless_uniform(tf.shape(logits), seed, minval=0, maxval=1)
  gumbel = -tf.math.log(-tf.math.log(tf.cast(uniform_noise, tf.float32) + 1e-9) + 1e-9)
  return tf.argmax(tf.nn.softmax(logits + gumbel), -1, output_type=tf.int32)


def _split_seed(seed: tf.Tensor | None, num: int) -> list[tf.Tensor | None]:
  """``num`` independent [2] seeds from one (or ``num`` Nones without a seed)."""
  if seed is None:
    return [None] * num
  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num)
  return [seeds[i] for i in range(num)]
