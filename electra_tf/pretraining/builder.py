"""Config -> pre-training model: the one place that reads the config and the vocab file.

``build_objective`` turns the official ``PretrainingConfig`` flags into an ``Objective``;
``build_pretraining_model`` builds the towers and heads it needs (discriminator first, then
the generator, in the official creation order so a seed gives the same initial weights) and
hands them to ``PretrainingModel``. Call it under the distribution strategy's scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from electra_tf import names
from electra_tf.config import PretrainingConfig
from electra_tf.model_sizes import get_bert_config, get_generator_config
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead
from electra_tf.pretraining import masking, word_masking
from electra_tf.pretraining.objective import (
  DISCRIMINATOR_TOWER,
  ELECTRA,
  ELECTRIC,
  MLM,
  OWN_TOWER,
  TWO_TOWERS,
  UNIFORM,
  Objective,
)
from electra_tf.pretraining.pretraining_model import PretrainingModel
from electra_tf.training.runtime import uses_tpu


def _check_flags(config: PretrainingConfig) -> None:
  """Rejects flag combinations the official graph cannot build (it crashes on them)."""
  if config.electric_objective and not config.two_tower_generator:
    raise ValueError("electric_objective needs two_tower_generator (its log q correction "
                     "comes from the cloze generator)")
  if config.two_tower_generator and config.uniform_generator:
    raise ValueError("two_tower_generator and uniform_generator exclude each other")
  if config.two_tower_generator and not (
      (config.electra_objective or config.electric_objective) and config.untied_generator):
    raise ValueError("two_tower_generator needs untied_generator and electra_objective or "
                     "electric_objective")


def build_objective(config: PretrainingConfig, vocab: Mapping[str, int] | None = None) -> Objective:
  """The ``Objective`` a ``PretrainingConfig`` describes.

  ``vocab``: token -> id with [CLS], [SEP], [MASK] (other entries are ignored); default: read
  from ``config.vocab_file``. Pass ``{}`` for a model that is only converted or exported.
  """
  _check_flags(config)
  kind = ELECTRIC if config.electric_objective else ELECTRA if config.electra_objective else MLM
  if config.uniform_generator:
    generator = UNIFORM
  elif kind != MLM and config.untied_generator:
    generator = TWO_TOWERS if config.two_tower_generator else OWN_TOWER
  else:
    generator = DISCRIMINATOR_TOWER
  if vocab is None:
    vocab = masking.read_special_ids(config.vocab_file)
  special = tuple((t, int(vocab[t])) for t in masking.NEVER_MASKED if t in vocab)
  return Objective(
      kind=kind, generator=generator, vocab_size=int(config.vocab_size),
      mask_prob=float(config.mask_prob),
      max_predictions_per_seq=int(config.max_predictions_per_seq),
      gen_weight=float(config.gen_weight), disc_weight=float(config.disc_weight),
      temperature=float(config.temperature), disallow_correct=bool(config.disallow_correct),
      special_ids=special, seed=getattr(config, "seed", None),
      masking=str(getattr(config, "masking", word_masking.TOKEN)),
      span_mean_length=float(getattr(config, "span_mean_length", 5.0)),
      span_max_length=int(getattr(config, "span_max_length", 10)))


def build_pretraining_model(config: PretrainingConfig, vocab: Mapping[str, int] | None = None
                            ) -> PretrainingModel:
  """Builds every tower and head the config's objective needs, then the model.

  Sizes: ``model_sizes.get_bert_config`` (discriminator) and ``get_generator_config`` (the
  generator's own towers); ``embedding_size`` (None: the hidden size) for the discriminator,
  whose embedding tables a generator reads unless ``untied_generator_embeddings``. Whole-word
  and span masking read the ``##`` continuation table from ``config.vocab_file`` here, once.
  """
  objective = build_objective(config, vocab)
  bert_config = get_bert_config(config)
  embedding_size = (bert_config.hidden_size if config.embedding_size is None
                    else int(config.embedding_size))
  act, init_range = bert_config.hidden_act, bert_config.initializer_range
  one_hot = uses_tpu(getattr(config, "use_tpu", False))  # official use_one_hot_embeddings
  parts: dict[str, Any] = {}

  if objective.generator != UNIFORM or objective.has_discriminator:
    discriminator = Transformer(bert_config, embedding_size, scope=names.DISCRIMINATOR,
                                use_one_hot_embeddings=one_hot)
    discriminator.build(None)
    parts["discriminator"] = discriminator
  if objective.has_discriminator:
    head = DiscriminatorHead(bert_config.hidden_size, act, init_range,
                             scope=names.DISCRIMINATOR_HEAD)
    head.build([None, bert_config.hidden_size])
    parts["discriminator_head"] = head

  if objective.generator in (OWN_TOWER, TWO_TOWERS):
    generator_config = get_generator_config(config, bert_config)
    h = generator_config.hidden_size
    tied = None if config.untied_generator_embeddings else parts["discriminator"].embeddings
    if objective.generator == TWO_TOWERS:
      ltr = Transformer(generator_config, h, tied, "ltr", scope=names.GENERATOR_LTR,
                        use_one_hot_embeddings=one_hot)
      rtl = Transformer(generator_config, h, tied, "rtl", scope=names.GENERATOR_RTL,
                        use_one_hot_embeddings=one_hot)
      ltr.build(None)
      rtl.build(None)
      cloze_head = MaskedLMHead(ltr.embeddings, act, init_range, scope=names.CLOZE_HEAD)
      cloze_head.build([None, 2 * h])
      parts.update(generator_ltr=ltr, generator_rtl=rtl, cloze_head=cloze_head)
    else:
      generator = Transformer(generator_config, h, tied, scope=names.GENERATOR,
                              use_one_hot_embeddings=one_hot)
      generator.build(None)
      parts["generator"] = generator
  if objective.generator in (OWN_TOWER, DISCRIMINATOR_TOWER):
    tower = parts.get("generator") or parts["discriminator"]
    generator_head = MaskedLMHead(tower.embeddings, act, init_range, scope=names.GENERATOR_HEAD)
    generator_head.build([None, tower.config.hidden_size])
    parts["generator_head"] = generator_head
  continuation = (None if objective.masking == word_masking.TOKEN
                  else word_masking.continuation_table(config.vocab_file))
  return PretrainingModel(objective, continuation=continuation, **parts)
