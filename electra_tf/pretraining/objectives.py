"""Pre-training objectives in one model: ELECTRA, Electric, masked LM, uniform generator.

``PretrainingModel`` is the official ``run_pretraining.PretrainingModel`` as a Keras model:

  mask the input -> generator logits at the masked slots -> sample replacements (gumbel-max)
  -> discriminator on the corrupted input -> total = gen_weight * gen_loss + disc_weight * disc_loss

Variants (official ``PretrainingConfig`` fields):
- ELECTRA (``electra_objective``): small generator ``generator`` (``untied_generator``), its
  embeddings tied to ``electra/embeddings`` unless ``untied_generator_embeddings``; replaced-token
  detection where a sample equal to the original counts as real.
- Electric (``electric_objective``, ``two_tower_generator``): cloze generator from two causal
  towers ``generator_ltr`` / ``generator_rtl`` on the *unmasked* input, ``cloze_predictions``
  head; every replaced position is fake and the discriminator logit gets
  ``log q(token) + log(mask_prob / (1 - mask_prob))`` (noise-contrastive estimation).
- Masked LM only (neither objective): the full-size ``electra`` tower is the generator.
- ``untied_generator: false``: the generator *is* the discriminator tower (every weight shared).
- ``uniform_generator``: zero generator logits (uniform samples), no generator weights.

Shapes: B batch, T sequence, N max predictions per sequence, V vocabulary, H hidden size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf
import tf_keras

from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead
from electra_tf.pretraining import masking

# Official tf.compat.v1.metrics.auc defaults (ROC curve, trapezoidal rule).
AUC_NUM_THRESHOLDS = 200


def roll(x: tf.Tensor, direction: int) -> tf.Tensor:
  """Official ``roll``: [B, T, D] -> [B, T, D] with ``out[:, t] = x[:, (t + direction) % T]``."""
  return tf.roll(x, shift=-direction, axis=1)


def softmax_output(logits: tf.Tensor, targets: tf.Tensor, weights: tf.Tensor
                   ) -> dict[str, tf.Tensor]:
  """Official ``get_softmax_output``: weighted cross-entropy against integer targets.

  Args:
    logits: [..., V]; targets: int32 [...]; weights: float32 [...].
  Returns:
    ``log_probs`` [..., V], ``per_example_loss`` [...] (-log p(target)), ``loss`` [] (weighted
    mean, denominator + 1e-6), ``preds`` int32 [...] (argmax).
  """
  logits = tf.cast(logits, tf.float32)
  log_probs = tf.nn.log_softmax(logits)
  # A gather equals the official sum(log_probs * one_hot) exactly and skips the [..., V] one-hot.
  per_example_loss = -tf.gather(log_probs, targets, batch_dims=targets.shape.rank)
  loss = tf.reduce_sum(weights * per_example_loss) / (tf.reduce_sum(weights) + 1e-6)
  preds = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return {"log_probs": log_probs, "per_example_loss": per_example_loss, "loss": loss,
          "preds": preds}


def discriminator_output(logits: tf.Tensor, labels: tf.Tensor, input_mask: tf.Tensor
                         ) -> dict[str, tf.Tensor]:
  """Official ``_get_discriminator_output`` losses on final logits [B, T] and int labels [B, T].

  Returns ``loss`` [], ``per_example_loss`` [B], ``probs`` [B, T], ``preds`` int32 [B, T].
  """
  logits = tf.cast(logits, tf.float32)
  weights = tf.cast(input_mask, tf.float32)
  losses = tf.nn.sigmoid_cross_entropy_with_logits(
      logits=logits, labels=tf.cast(labels, tf.float32)) * weights
  per_example_loss = tf.reduce_sum(losses, -1) / (1e-6 + tf.reduce_sum(weights, -1))
  loss = tf.reduce_sum(losses) / (1e-6 + tf.reduce_sum(weights))
  probs = tf.nn.sigmoid(logits)
  preds = tf.cast(tf.round((tf.sign(logits) + 1) / 2), tf.int32)  # logit 0 -> 0.5 -> 0
  return {"loss": loss, "per_example_loss": per_example_loss, "probs": probs, "preds": preds}


class PretrainingModel(tf_keras.Model):
  """Generator + discriminator with the official variable names and losses.

  Every sub-layer is created and built in ``__init__`` (discriminator first), so
  ``tf1_variables()`` is complete right after construction and a checkpoint can be loaded
  before the first step.

  Args:
    config: a ``PretrainingConfig`` (only plain fields are read: the objective flags,
      ``mask_prob``, ``max_predictions_per_seq``, ``embedding_size``, ``gen_weight``,
      ``disc_weight``, ``temperature``, ``seed``, ...).
    vocab: token -> id with [CLS], [SEP], [MASK]; default: read from ``config.vocab_file``.
    bert_config / generator_config: tower sizes; default ``electra_tf.config.get_bert_config``
      / ``get_generator_config``.
  """

  def __init__(self, config: Any, vocab: Mapping[str, int] | None = None,
               bert_config: BertConfig | None = None,
               generator_config: BertConfig | None = None, **kwargs):
    super().__init__(name=kwargs.pop("name", "pretraining_model"), **kwargs)
    self.electra_objective = bool(config.electra_objective)
    self.electric_objective = bool(config.electric_objective)
    self.uniform_generator = bool(config.uniform_generator)
    self.two_tower_generator = bool(config.two_tower_generator)
    self.untied_generator = bool(config.untied_generator)
    self.untied_generator_embeddings = bool(config.untied_generator_embeddings)
    self.mask_prob = float(config.mask_prob)
    self.max_predictions_per_seq = int(config.max_predictions_per_seq)
    self.gen_weight = float(config.gen_weight)
    self.disc_weight = float(config.disc_weight)
    self.temperature = float(config.temperature)
    self.disallow_correct = bool(config.disallow_correct)
    self.seed = getattr(config, "seed", None)
    self._check_variant()
    if not 0.0 < self.mask_prob < 1.0:
      raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
    if self.temperature <= 0:
      raise ValueError(f"temperature must be > 0, got {self.temperature}")

    if bert_config is None:
      from electra_tf.config import get_bert_config
      bert_config = get_bert_config(config)
    self.bert_config = bert_config
    self.vocab_size = bert_config.vocab_size
    embedding_size = (bert_config.hidden_size if config.embedding_size is None
                      else int(config.embedding_size))
    self.vocab = dict(vocab) if vocab is not None else masking.read_special_ids(config.vocab_file)
    self.has_discriminator = self.electra_objective or self.electric_objective
    small_generator = self.has_discriminator and self.untied_generator
    if small_generator and not self.uniform_generator and generator_config is None:
      from electra_tf.config import get_generator_config
      generator_config = get_generator_config(config, bert_config)
    self.generator_config = generator_config
    act, init_range = bert_config.hidden_act, bert_config.initializer_range

    # Discriminator (scope ``electra``): also the generator when the two are fully tied and
    # the whole model for masked-LM-only training.
    self.discriminator = None
    self.discriminator_head = None
    if self.has_discriminator or not (self.uniform_generator or small_generator):
      self.discriminator = Transformer(bert_config, embedding_size, scope="electra")
      self.discriminator.build(None)
    if self.has_discriminator:
      self.discriminator_head = DiscriminatorHead(bert_config.hidden_size, act, init_range)
      self.discriminator_head.build([None, bert_config.hidden_size])

    # Generator.
    self.generator = None
    self.generator_rtl = None
    self.generator_head = None
    self.cloze_head = None
    if self.uniform_generator:
      pass
    elif small_generator:
      tied = None if self.untied_generator_embeddings else self.discriminator.embeddings
      h = generator_config.hidden_size
      if self.two_tower_generator:
        self.generator = Transformer(generator_config, h, tied, "ltr", scope="generator_ltr")
        self.generator_rtl = Transformer(generator_config, h, tied, "rtl", scope="generator_rtl")
        self.generator.build(None)
        self.generator_rtl.build(None)
        self.cloze_head = MaskedLMHead(self.generator.embeddings, act, init_range,
                                       scope="cloze_predictions")
        self.cloze_head.build([None, 2 * h])
      else:
        self.generator = Transformer(generator_config, h, tied, scope="generator")
        self.generator.build(None)
    else:
      self.generator = self.discriminator
    if self.generator is not None and self.cloze_head is None:
      self.generator_head = MaskedLMHead(self.generator.embeddings, act, init_range,
                                         scope="generator_predictions")
      self.generator_head.build([None, self.generator.config.hidden_size])
    self.built = True

  def _check_variant(self) -> None:
    """Rejects flag combinations the official graph cannot build (it crashes on them)."""
    if self.electric_objective and not self.two_tower_generator:
      raise ValueError("electric_objective needs two_tower_generator (its log q correction "
                       "comes from the cloze generator)")
    if self.two_tower_generator and self.uniform_generator:
      raise ValueError("two_tower_generator and uniform_generator exclude each other")
    if self.two_tower_generator and not (
        (self.electra_objective or self.electric_objective) and self.untied_generator):
      raise ValueError("two_tower_generator needs untied_generator and electra_objective or "
                       "electric_objective")

  def tf1_variables(self) -> dict[str, tf.Variable]:
    """Official TF1 checkpoint name -> variable, for every model variable."""
    out: dict[str, tf.Variable] = {}
    for v in self.variables:
      name = v.name.split(":")[0]
      if name in out and out[name] is not v:
        raise ValueError(f"two model variables share the name {name!r}")
      out[name] = v
    return out

  def _seeds(self, seed: tf.Tensor | int | None) -> tuple[tf.Tensor | None, tf.Tensor | None]:
    """(masking seed, sampling seed), each int64 [2], or (None, None) for stateful draws.

    A scalar per-step ``seed`` is combined with the model seed as ``[model seed or 0, seed]``;
    a [2] seed is used as it is. Without a per-step seed the model seed alone is used, so
    every call draws the same randomness: a training loop passes the step number.
    """
    if seed is None:
      if self.seed is None:
        return None, None
      base = tf.constant([int(self.seed), 0], tf.int64)
    else:
      seed = tf.cast(seed, tf.int64)
      if seed.shape.rank == 0:
        base = tf.stack([tf.constant(int(self.seed or 0), tf.int64), seed])
      elif seed.shape.as_list() == [2]:
        base = seed
      else:
        raise ValueError(f"seed must be a scalar or shape [2], got shape {seed.shape}")
    seeds = tf.random.experimental.stateless_split(base, 2)
    return seeds[0], seeds[1]

  def _tower(self, tower: Transformer, prefix: str, inputs: masking.Inputs, training: bool,
             out: dict[str, tf.Tensor], keep: bool) -> tf.Tensor:
    """Runs a tower; with ``keep`` records its inputs / embeddings / layers under ``prefix``."""
    result = tower(inputs.input_ids, inputs.input_mask, inputs.segment_ids, training=training)
    if keep:
      out[prefix + "input_ids"] = inputs.input_ids
      for key in ("token_embeddings", "embedding_postprocessed", "embedding_output",
                  "all_layer_outputs", "sequence_output"):
        out[prefix + key] = result[key]
    return result["sequence_output"]

  @property
  def mlm_head(self) -> MaskedLMHead | None:
    """The generator's output head: ``cloze_predictions`` (two towers) or
    ``generator_predictions``; None for the uniform generator."""
    return self.cloze_head if self.two_tower_generator else self.generator_head

  def generator_hidden(self, inputs: masking.Inputs, training: bool = False,
                       out: dict[str, tf.Tensor] | None = None, keep: bool = False) -> tf.Tensor:
    """Generator representation [B, T, Hg] of ``inputs`` (the input of ``mlm_head``).

    Two towers: ``concat(ltr[t-1], rtl[t+1])`` (wrapping) of width 2h, as the official
    ``TwoTowerClozeTransformer``; otherwise the generator tower's sequence output.
    """
    if self.generator is None:
      raise ValueError("the uniform generator has no representation")
    out = {} if out is None else out
    if not self.two_tower_generator:
      return self._tower(self.generator, "gen_", inputs, training, out, keep)
    ltr = self._tower(self.generator, "ltr_", inputs, training, out, keep)
    rtl = self._tower(self.generator_rtl, "rtl_", inputs, training, out, keep)
    return tf.concat([roll(ltr, -1), roll(rtl, 1)], -1)  # t sees ltr[t-1], rtl[t+1]

  def rtd_logits(self, inputs: masking.Inputs) -> tuple[tf.Tensor, tf.Tensor]:
    """Inference: (discriminator sequence output [B, T, H], logits [B, T]) on ``inputs``.

    For Electric the logits include ``log q`` from the cloze model run on the same input
    (the official ``clean_disc_logits``).
    """
    cloze_log_probs = None
    if self.electric_objective:
      cloze_logits = tf.cast(self.cloze_head(self.generator_hidden(inputs)), tf.float32)
      cloze_log_probs = tf.nn.log_softmax(cloze_logits)
    out: dict[str, tf.Tensor] = {}
    logits, _ = self.discriminate(inputs, False, cloze_log_probs, out, "disc_", True)
    return out["disc_sequence_output"], logits

  def discriminate(self, inputs: masking.Inputs, training: bool = False,
                   cloze_log_probs: tf.Tensor | None = None,
                   out: dict[str, tf.Tensor] | None = None, prefix: str = "disc_",
                   keep: bool = False) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """Discriminator logits [B, T] on ``inputs.input_ids`` (official discriminator output).

    For Electric, ``cloze_log_probs`` [B, T, V] (log-softmax of the cloze logits) adds
    ``log q(input token)`` (no gradient) and ``log(mask_prob / (1 - mask_prob))``.
    Returns (logits, extras) where extras holds ``logits_raw`` and ``log_q`` for Electric.
    """
    if self.discriminator_head is None:
      raise ValueError("this model has no discriminator (electra_objective and "
                       "electric_objective are both false)")
    out = {} if out is None else out
    sequence = self._tower(self.discriminator, prefix, inputs, training, out, keep)
    logits = tf.cast(self.discriminator_head(sequence), tf.float32)
    extras: dict[str, tf.Tensor] = {}
    if self.electric_objective:
      if cloze_log_probs is None:
        raise ValueError("Electric's discriminator needs the cloze log-probabilities")
      log_q = tf.stop_gradient(tf.gather(cloze_log_probs, inputs.input_ids, batch_dims=2))
      extras = {"logits_raw": logits, "log_q": log_q}
      # Same order of float additions as the official graph.
      logits = logits + log_q
      logits = logits + self.log_mask_ratio()
    return logits, extras

  def log_mask_ratio(self) -> tf.Tensor:
    """log(mask_prob / (1 - mask_prob)) in float32 (ratio in float64 first, as the official)."""
    return tf.math.log(tf.constant(self.mask_prob / (1 - self.mask_prob), tf.float32))

  def call(self, features: Mapping[str, tf.Tensor], training: bool = False,
           draws: Mapping[str, tf.Tensor] | None = None, seed: tf.Tensor | int | None = None,
           return_intermediates: bool = False) -> dict[str, tf.Tensor]:
    """One pre-training forward pass.

    Args:
      features: int32 [B, T] ``input_ids``, ``input_mask``, ``segment_ids``.
      training: dropout on (the towers; the heads have none, as in the official code).
      draws: optional injected randomness: ``categorical_positions`` int32 [B, N],
        ``mask_uniform`` float32 [B, N], ``gumbel_uniform`` float32 [B, N, V].
      seed: per-step seed (scalar or [2] int) for the stateless draws not injected.
      return_intermediates: also return tower outputs and full-vocabulary logits (large).
    Returns:
      dict of tensors: ``total_loss``, ``mlm_loss`` (the generator term: cloze loss for the
      two-tower generator), ``disc_loss``, ``masked_input_ids``, ``masked_lm_positions`` /
      ``_ids`` / ``_weights`` [B, N], ``num_to_predict`` [B], ``gen_mlm_preds`` /
      ``gen_mlm_per_example_loss`` [B, N], ``gen_mlm_loss``, and with a discriminator
      ``sampled_tokids`` [B, N], ``fake_input_ids``, ``disc_labels``, ``disc_logits``,
      ``disc_probs``, ``disc_preds`` [B, T], ``disc_per_example_loss`` [B], ``input_mask``;
      Electric adds ``cloze_*``, ``disc_logits_raw``, ``disc_log_q``, ``log_mask_ratio``.
    """
    draws = dict(draws or {})
    keep = return_intermediates
    inputs = masking.features_to_inputs(features)
    mask_seed, sample_seed = self._seeds(seed)
    masked = masking.mask(inputs, self.mask_prob, self.max_predictions_per_seq, self.vocab,
                          draws=draws, seed=mask_seed)
    out: dict[str, tf.Tensor] = {
        "input_mask": inputs.input_mask,
        "masked_input_ids": masked.input_ids,
        "masked_lm_positions": masked.masked_lm_positions,
        "masked_lm_ids": masked.masked_lm_ids,
        "masked_lm_weights": masked.masked_lm_weights,
        "num_to_predict": tf.cast(tf.reduce_sum(masked.masked_lm_weights, -1), tf.int32),
    }
    if keep:
      out["candidates_sample_logits"] = masking.candidates_log_probs(
          masking.get_candidates_mask(inputs, self.vocab))

    # Generator logits at the masked slots [B, N, V].
    cloze = None
    if self.uniform_generator:
      mlm_logits = tf.zeros(tf.concat([tf.shape(masked.masked_lm_ids), [self.vocab_size]], 0))
    elif self.two_tower_generator:
      sequence = self.generator_hidden(inputs, training, out, keep)
      cloze_logits = tf.cast(self.cloze_head(sequence), tf.float32)  # [B, T, V]
      cloze_weights = tf.cast(masking.get_candidates_mask(inputs, self.vocab), tf.float32)
      cloze = softmax_output(cloze_logits, inputs.input_ids, cloze_weights)
      out.update(cloze_loss=cloze["loss"], cloze_per_example_loss=cloze["per_example_loss"],
                 cloze_preds=cloze["preds"], cloze_weights=cloze_weights)
      if keep:
        out.update(gen_sequence_output=sequence, cloze_logits=cloze_logits)
      mlm_logits = masking.gather_positions(cloze_logits, masked.masked_lm_positions)
    else:
      sequence = self._tower(self.generator, "gen_", masked, training, out, keep)
      mlm_logits = self.generator_head(
          masking.gather_positions(sequence, masked.masked_lm_positions))
    mlm_logits = tf.cast(mlm_logits, tf.float32)
    mlm = softmax_output(mlm_logits, masked.masked_lm_ids, masked.masked_lm_weights)
    out.update(gen_mlm_preds=mlm["preds"], gen_mlm_per_example_loss=mlm["per_example_loss"],
               gen_mlm_loss=mlm["loss"])
    if keep:
      out["gen_mlm_logits"] = mlm_logits
    gen_loss = cloze["loss"] if cloze is not None else mlm["loss"]
    total_loss = self.gen_weight * gen_loss
    out["mlm_loss"] = gen_loss

    if not self.has_discriminator:  # masked LM only: nothing is sampled
      out.update(total_loss=total_loss, disc_loss=tf.constant(0.0))
      return out

    # Replace the masked tokens by generator samples.
    unmasked = masking.unmask(masked)
    disallow = (tf.one_hot(masked.masked_lm_ids, self.vocab_size, dtype=tf.float32)
                if self.disallow_correct else None)
    sampled = masking.sample_from_softmax(
        mlm_logits / self.temperature, disallow=disallow,
        uniform_noise=draws.get("gumbel_uniform"), seed=sample_seed)
    fake_ids, replaced = masking.scatter_update(
        unmasked.input_ids, sampled, masked.masked_lm_positions)
    if self.electric_objective:
      labels = replaced
    else:  # a sample equal to the original token is real
      labels = replaced * (1 - tf.cast(tf.equal(fake_ids, unmasked.input_ids), tf.int32))
    fake = unmasked._replace(input_ids=fake_ids)

    logits, extras = self.discriminate(
        fake, training, cloze["log_probs"] if cloze is not None else None, out, "disc_", keep)
    disc = discriminator_output(logits, labels, fake.input_mask)
    total_loss += self.disc_weight * disc["loss"]
    out.update(
        sampled_tokids=sampled, fake_input_ids=fake_ids, disc_labels=labels,
        disc_logits=logits, disc_probs=disc["probs"], disc_preds=disc["preds"],
        disc_per_example_loss=disc["per_example_loss"], disc_loss=disc["loss"],
        total_loss=total_loss)
    if extras:
      out.update(disc_logits_raw=extras["logits_raw"], disc_log_q=extras["log_q"],
                 log_mask_ratio=self.log_mask_ratio())
    return out

  def eval_metrics(self, outputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The official ``metric_fn`` values for one batch (see ``metrics``)."""
    return metrics(outputs, self.disc_weight)


def metric_statistics(outputs: Mapping[str, tf.Tensor], disc_weight: float = 1.0
                      ) -> dict[str, tf.Tensor]:
  """Additive sufficient statistics of the official ``metric_fn`` for one batch.

  Summing these over batches and calling ``metrics_from_statistics`` gives the official
  streaming values exactly, AUC included (confusion counts at the same 200 thresholds).
  Discriminator entries appear when ``outputs`` has them and ``disc_weight > 0``, the
  sampled-token accuracy when ``outputs`` has ``sampled_tokids``.
  """
  w = tf.reshape(tf.cast(outputs["masked_lm_weights"], tf.float32), [-1])
  ids = tf.reshape(outputs["masked_lm_ids"], [-1])
  correct = tf.cast(tf.equal(ids, tf.reshape(outputs["gen_mlm_preds"], [-1])), tf.float32)
  stats = {
      "masked_lm_accuracy/total": tf.reduce_sum(w * correct),
      "masked_lm_accuracy/count": tf.reduce_sum(w),
      "masked_lm_loss/total": tf.reduce_sum(
          w * tf.reshape(outputs["gen_mlm_per_example_loss"], [-1])),
      "masked_lm_loss/count": tf.reduce_sum(w),
  }
  if "sampled_tokids" in outputs:
    sampled = tf.cast(tf.equal(ids, tf.reshape(outputs["sampled_tokids"], [-1])), tf.float32)
    stats["sampled_masked_lm_accuracy/total"] = tf.reduce_sum(w * sampled)
    stats["sampled_masked_lm_accuracy/count"] = tf.reduce_sum(w)
  if "disc_probs" in outputs and disc_weight > 0:
    per_example = tf.cast(outputs["disc_per_example_loss"], tf.float32)
    stats["disc_loss/total"] = tf.reduce_sum(per_example)
    stats["disc_loss/count"] = tf.cast(tf.size(per_example), tf.float32)
    mask = tf.cast(outputs["input_mask"], tf.float32)
    labels = tf.cast(outputs["disc_labels"], tf.float32)
    preds = tf.cast(outputs["disc_preds"], tf.float32)
    agree = tf.cast(tf.equal(labels, preds), tf.float32)
    for name, weight in (("disc_accuracy", mask), ("disc_precision", preds * mask),
                         ("disc_recall", labels * mask)):
      stats[name + "/total"] = tf.reduce_sum(weight * agree)
      stats[name + "/count"] = tf.reduce_sum(weight)
    stats.update(_auc_counts(labels * mask, tf.cast(outputs["disc_probs"], tf.float32) * mask))
  return stats


def _auc_thresholds() -> list[float]:
  n = AUC_NUM_THRESHOLDS
  inner = [(i + 1) * 1.0 / (n - 1) for i in range(n - 2)]
  return [0.0 - 1e-7] + inner + [1.0 + 1e-7]


def _auc_counts(labels: tf.Tensor, probs: tf.Tensor) -> dict[str, tf.Tensor]:
  """tf.compat.v1.metrics.auc confusion counts [200]: prediction > threshold is positive.

  As the official call, padding positions take part as negatives with probability 0.
  """
  thresholds = tf.constant(_auc_thresholds(), tf.float32)[:, tf.newaxis]  # [K, 1]
  pred_pos = tf.reshape(probs, [1, -1]) > thresholds  # [K, B*T]
  label_pos = tf.reshape(tf.cast(labels, tf.bool), [1, -1])

  def count(a, b):
    return tf.reduce_sum(tf.cast(a & b, tf.float32), 1)

  return {"disc_auc/tp": count(pred_pos, label_pos), "disc_auc/fp": count(pred_pos, ~label_pos),
          "disc_auc/fn": count(~pred_pos, label_pos), "disc_auc/tn": count(~pred_pos, ~label_pos)}


def metrics_from_statistics(stats: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
  """Metric values from (summed) ``metric_statistics``; a ratio with weight 0 is 0, as TF1."""
  values: dict[str, tf.Tensor] = {}
  for key in stats:
    if key.endswith("/total"):
      name = key[: -len("/total")]
      values[name] = tf.math.divide_no_nan(stats[key], stats[name + "/count"])
  if "disc_auc/tp" in stats:
    tp, fp, fn, tn = (stats["disc_auc/" + k] for k in ("tp", "fp", "fn", "tn"))
    eps = 1e-6  # official compute_auc
    tpr = (tp + eps) / (tp + fn + eps)
    fpr = fp / (fp + tn + eps)
    values["disc_auc"] = tf.reduce_sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2.0)
  return values


def metrics(outputs: Mapping[str, tf.Tensor], disc_weight: float = 1.0) -> dict[str, tf.Tensor]:
  """The official ``metric_fn`` on one batch: ``masked_lm_accuracy``, ``masked_lm_loss``,
  ``sampled_masked_lm_accuracy``, ``disc_loss``, ``disc_auc``, ``disc_accuracy``,
  ``disc_precision``, ``disc_recall`` (the last five when ``disc_weight > 0``).

  ``disc_auc`` is tf.compat.v1.metrics.auc's value (200 thresholds, trapezoidal ROC) computed on
  this batch alone; accumulate ``metric_statistics`` over batches for the streaming value.
  """
  return metrics_from_statistics(metric_statistics(outputs, disc_weight))

