"""What a pre-training step optimises (``Objective``) and the math of its stages.

One step is four stages, each returning its values (official ``run_pretraining.py``):

  mask -> generate (logits at the masked slots, MLM loss) -> corrupt (sample, replace, labels)
  -> discriminate (logits, loss);   total = gen_weight * generator loss + disc_weight * disc loss

This module holds the parts that need no weights: ``mask``, ``generator_losses``, ``corrupt``,
``electric_logits`` and ``discriminator_losses`` take tensors and return small NamedTuples, so
each is testable on hand-made logits. ``PretrainingModel`` runs the towers and calls them.

Shapes: B batch, T sequence, N max predictions per sequence, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf

from electra_tf.pretraining import masking, word_masking

# Objective.kind: the discriminator's loss.
ELECTRA = "electra"  # replaced-token detection; a sample equal to the original counts as real
ELECTRIC = "electric"  # noise-contrastive: every replaced position is fake, logits + log q
MLM = "mlm"  # masked language model only: no sampling, no discriminator
KINDS = (ELECTRA, ELECTRIC, MLM)

# Objective.generator: where the generator logits come from.
OWN_TOWER = "own_tower"  # ELECTRA's small generator tower (scope ``generator``)
TWO_TOWERS = "two_towers"  # cloze generator from ``generator_ltr`` + ``generator_rtl``
DISCRIMINATOR_TOWER = "discriminator_tower"  # the discriminator tower itself (all weights tied)
UNIFORM = "uniform"  # zero logits: uniform samples, no generator weights
GENERATORS = (OWN_TOWER, TWO_TOWERS, DISCRIMINATOR_TOWER, UNIFORM)

_DROPOUT = 1  # folded into a step's seed for its dropout seed (masking and sampling split it)


@dataclasses.dataclass(frozen=True)
class Objective:
  """The loss and sampling settings of one pre-training model (made once from the config).

  ``special_ids``: ids of [CLS], [SEP], [MASK] (masking never picks them); may be empty for a
  model that is only exported, never trained. ``seed``: the model seed for the stateless
  masking / sampling draws (None: stateful, unrepeatable draws when no step seed is given).
  ``masking``: ``token`` (official), ``whole_word`` or ``span`` (``word_masking``), with the
  span lengths' ``span_mean_length`` (1 / p of the geometric) and ``span_max_length``.
  """

  kind: str
  generator: str
  vocab_size: int
  mask_prob: float = 0.15
  max_predictions_per_seq: int = 19
  gen_weight: float = 1.0
  disc_weight: float = 50.0
  temperature: float = 1.0
  disallow_correct: bool = False
  special_ids: tuple[tuple[str, int], ...] = ()
  seed: int | None = None
  masking: str = word_masking.TOKEN
  span_mean_length: float = 5.0
  span_max_length: int = 10

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"objective kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
    if self.generator not in GENERATORS:
      raise ValueError(f"generator must be one of {', '.join(GENERATORS)}, "
                       f"got {self.generator!r}")
    if self.kind == ELECTRIC and self.generator != TWO_TOWERS:
      raise ValueError("the Electric objective needs the two-tower cloze generator")
    if not 0.0 < self.mask_prob < 1.0:
      raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
    if self.temperature <= 0:
      raise ValueError(f"temperature must be > 0, got {self.temperature}")
    if self.masking not in word_masking.MASKINGS:
      raise ValueError(f"masking must be one of {', '.join(word_masking.MASKINGS)}, "
                       f"got {self.masking!r}")
    word_masking.span_length_probs(self.span_mean_length, self.span_max_length)

  def to_dict(self) -> dict:
    """JSON-able fields (``special_ids`` as ``[[token, id], ...]``), for ``get_config``."""
    return {**dataclasses.asdict(self), "special_ids": [list(p) for p in self.special_ids]}

  @classmethod
  def from_dict(cls, d: Mapping) -> Objective:
    """The inverse of ``to_dict``; unknown fields are a one-line error."""
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
      raise ValueError(f"unknown Objective field(s): {', '.join(unknown)}")
    special = tuple((str(token), int(i)) for token, i in d.get("special_ids", ()))
    return cls(**{**d, "special_ids": special})

  @property
  def has_discriminator(self) -> bool:
    return self.kind != MLM

  @property
  def vocab(self) -> dict[str, int]:
    """Special token -> id, the form ``masking`` takes."""
    return dict(self.special_ids)

  def log_mask_ratio(self) -> tf.Tensor:
    """log(mask_prob / (1 - mask_prob)) in float32 (ratio in float64 first, as the official)."""
    return tf.math.log(tf.constant(self.mask_prob / (1 - self.mask_prob), tf.float32))

  def _base_seed(self, seed: tf.Tensor | int | None) -> tf.Tensor | None:
    """The int64 [2] seed of one call (see ``step_seeds``), or None for stateful draws."""
    if seed is None:
      if self.seed is None:
        return None
      return tf.constant([int(self.seed), 0], tf.int64)
    seed = tf.cast(seed, tf.int64)
    if seed.shape.rank == 0:
      return tf.stack([tf.constant(int(self.seed or 0), tf.int64), seed])
    if seed.shape.as_list() == [2]:
      return seed
    raise ValueError(f"seed must be a scalar or shape [2], got shape {seed.shape}")

  def step_seeds(self, seed: tf.Tensor | int | None
                 ) -> tuple[tf.Tensor | None, tf.Tensor | None]:
    """(masking seed, sampling seed), each int64 [2], or (None, None) for stateful draws.

    A scalar per-step ``seed`` is combined with the model seed as ``[model seed or 0, seed]``;
    a [2] seed is used as it is. Without a per-step seed the model seed alone is used, so
    every call draws the same randomness: a training loop passes the step number.
    """
    base = self._base_seed(seed)
    if base is None:
      return None, None
    seeds = tf.random.experimental.stateless_split(base, 2)
    return seeds[0], seeds[1]

  def dropout_seed(self, seed: tf.Tensor | int | None) -> tf.Tensor | None:
    """The [2] seed the towers' dropout masks are drawn from (from the same per-step seed as
    ``step_seeds``, independent of masking and sampling), or None for Keras dropout."""
    base = self._base_seed(seed)
    return None if base is None else tf.random.experimental.stateless_fold_in(base, _DROPOUT)


# ------------------------------------------------------------------------------ stage results


class SoftmaxOutput(NamedTuple):
  """Weighted cross-entropy against integer targets (official ``get_softmax_output``)."""

  log_probs: tf.Tensor  # [..., V]
  per_example_loss: tf.Tensor  # [...]: -log p(target)
  loss: tf.Tensor  # []: weighted mean
  preds: tf.Tensor  # int32 [...]: argmax


class GeneratorLosses(NamedTuple):
  """The generator's losses: ``mlm`` at the masked slots [B, N]; ``cloze`` over every
  position [B, T] for the two-tower generator (None otherwise); ``loss`` the generator term
  of the total (the cloze loss for two towers, else the MLM loss)."""

  mlm: SoftmaxOutput
  cloze: SoftmaxOutput | None
  loss: tf.Tensor


class Corrupted(NamedTuple):
  """The discriminator's input: ``inputs`` (original tokens with samples at the masked
  positions), ``sampled`` int32 [B, N] and ``labels`` int32 [B, T] (1 = replaced)."""

  inputs: masking.Inputs
  sampled: tf.Tensor
  labels: tf.Tensor


class DiscriminatorLosses(NamedTuple):
  """Official ``_get_discriminator_output`` on final logits [B, T]."""

  loss: tf.Tensor  # []
  per_example_loss: tf.Tensor  # [B]
  probs: tf.Tensor  # [B, T]
  preds: tf.Tensor  # int32 [B, T]


# ------------------------------------------------------------------------------ stages


def mask(inputs: masking.Inputs, objective: Objective,
         draws: Mapping[str, tf.Tensor] | None = None,
         seed: tf.Tensor | None = None, continuation: tf.Tensor | None = None
         ) -> masking.Inputs:
  """Stage 1: dynamic masking of ``inputs`` by ``objective.masking``: the official
  ``masking.mask`` (``draws`` may hold ``categorical_positions`` [B, N] / ``mask_uniform``
  [B, N]) or ``word_masking.mask_units``, which needs ``continuation`` bool [V] (``##``
  pieces). ``seed`` is an int [2]."""
  if objective.masking == word_masking.TOKEN:
    return masking.mask(inputs, objective.mask_prob, objective.max_predictions_per_seq,
                        objective.vocab, draws=draws, seed=seed)
  if continuation is None:
    raise ValueError(f"{objective.masking} masking needs the vocabulary's continuation table "
                     "(word_masking.continuation_table)")
  span_probs = (word_masking.span_length_probs(objective.span_mean_length,
                                               objective.span_max_length)
                if objective.masking == word_masking.SPAN else None)
  return word_masking.mask_units(inputs, objective.mask_prob, objective.max_predictions_per_seq,
                                 objective.vocab, continuation, objective.masking, span_probs,
                                 draws=draws, seed=seed)


def softmax_output(logits: tf.Tensor, targets: tf.Tensor, weights: tf.Tensor) -> SoftmaxOutput:
  """Official ``get_softmax_output``: logits [..., V], int32 targets [...], float32 weights
  [...]; the loss is the weighted mean (denominator + 1e-6)."""
  logits = tf.cast(logits, tf.float32)
  log_probs = tf.nn.log_softmax(logits)
  # A gather equals the official sum(log_probs * one_hot) exactly and skips the [..., V] one-hot.
  per_example_loss = -tf.gather(log_probs, targets, batch_dims=targets.shape.rank)
  loss = tf.reduce_sum(weights * per_example_loss) / (tf.reduce_sum(weights) + 1e-6)
  preds = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return SoftmaxOutput(log_probs, per_example_loss, loss, preds)


def generator_losses(mlm_logits: tf.Tensor, masked: masking.Inputs,
                     cloze_logits: tf.Tensor | None = None,
                     cloze_weights: tf.Tensor | None = None,
                     original_ids: tf.Tensor | None = None) -> GeneratorLosses:
  """Stage 2's losses: MLM loss of ``mlm_logits`` [B, N, V] against ``masked.masked_lm_ids``.

  Two-tower generator: also the cloze loss of ``cloze_logits`` [B, T, V] against the
  ``original_ids`` [B, T] weighted by ``cloze_weights`` [B, T]; it is the generator term.
  """
  mlm = softmax_output(mlm_logits, masked.masked_lm_ids, masked.masked_lm_weights)
  if cloze_logits is None:
    return GeneratorLosses(mlm, None, mlm.loss)
  cloze = softmax_output(cloze_logits, original_ids, cloze_weights)
  return GeneratorLosses(mlm, cloze, cloze.loss)


def corrupt(masked: masking.Inputs, mlm_logits: tf.Tensor, objective: Objective,
            gumbel_uniform: tf.Tensor | None = None, seed: tf.Tensor | None = None) -> Corrupted:
  """Stage 3: samples a token per masked slot and writes it back into the original input.

  Args:
    masked: the output of ``mask``.
    mlm_logits: float32 [B, N, V] generator logits (divided by the temperature here).
    objective: temperature, disallow_correct, and the kind (labels).
    gumbel_uniform: optional injected uniform noise [B, N, V] for the gumbel-max sample.
    seed: optional int [2] seed for stateless noise.
  Returns:
    ``Corrupted``; labels are 1 at replaced positions, except (ELECTRA) where the sample equals
    the original token.
  """
  unmasked = masking.unmask(masked)
  disallow = (tf.one_hot(masked.masked_lm_ids, objective.vocab_size, dtype=tf.float32)
              if objective.disallow_correct else None)
  sampled = masking.sample_from_softmax(mlm_logits / objective.temperature, disallow=disallow,
                                        uniform_noise=gumbel_uniform, seed=seed)
  fake_ids, replaced = masking.scatter_update(
      unmasked.input_ids, sampled, masked.masked_lm_positions)
  if objective.kind == ELECTRIC:
    labels = replaced
  else:  # a sample equal to the original token is real
    labels = replaced * (1 - tf.cast(tf.equal(fake_ids, unmasked.input_ids), tf.int32))
  return Corrupted(unmasked._replace(input_ids=fake_ids), sampled, labels)


def electric_logits(raw_logits: tf.Tensor, cloze_log_probs: tf.Tensor, input_ids: tf.Tensor,
                    objective: Objective) -> tuple[tf.Tensor, tf.Tensor]:
  """Electric's discriminator logits: raw [B, T] + log q(input token) + log(p / (1 - p)).

  ``cloze_log_probs`` [B, T, V] are the cloze model's log-softmax; ``log q`` gets no gradient.
  Returns (logits [B, T], log_q [B, T]).
  """
  log_q = tf.stop_gradient(tf.gather(cloze_log_probs, input_ids, batch_dims=2))
  # Same order of float additions as the official graph.
  logits = raw_logits + log_q
  logits = logits + objective.log_mask_ratio()
  return logits, log_q


def discriminator_losses(logits: tf.Tensor, labels: tf.Tensor, input_mask: tf.Tensor
                         ) -> DiscriminatorLosses:
  """Stage 4's loss: sigmoid cross-entropy of logits [B, T] against int labels [B, T] over the
  real tokens (``input_mask`` [B, T]); a logit of exactly 0 predicts 0."""
  logits = tf.cast(logits, tf.float32)
  weights = tf.cast(input_mask, tf.float32)
  losses = tf.nn.sigmoid_cross_entropy_with_logits(
      logits=logits, labels=tf.cast(labels, tf.float32)) * weights
  per_example_loss = tf.reduce_sum(losses, -1) / (1e-6 + tf.reduce_sum(weights, -1))
  loss = tf.reduce_sum(losses) / (1e-6 + tf.reduce_sum(weights))
  probs = tf.nn.sigmoid(logits)
  preds = tf.cast(tf.round((tf.sign(logits) + 1) / 2), tf.int32)  # logit 0 -> 0.5 -> 0
  return DiscriminatorLosses(loss, per_example_loss, probs, preds)
