"""Transformer sizes from a config: the official per-size presets, ``model_hparam_overrides``,
the ``debug`` shrink and the generator's fractions, as ``BertConfig`` objects.

Kept apart from ``config`` so that a config holds values only and one place says how they become
the encoder's and the generator's shapes.
"""

from __future__ import annotations

from typing import Any

from electra_tf.config import MODEL_SIZES, FinetuningConfig, PretrainingConfig
from electra_tf.modeling.bert_config import BertConfig

# Official PretrainingModel / FinetuningModel shrink the transformer to this when debug is on.
DEBUG_BERT_SIZES: dict[str, int] = {
  "num_hidden_layers": 3, "hidden_size": 144, "intermediate_size": 144 * 4,
  "num_attention_heads": 4,
}


def get_bert_config(config: PretrainingConfig | FinetuningConfig) -> BertConfig:
  """Discriminator / fine-tuning encoder sizes (official ``training_utils.get_bert_config``).

  Size preset, ``vocab_size``, ``model_hparam_overrides``; heads = max(1, hidden // 64) and
  intermediate = 4 * hidden unless overridden. With ``debug`` the official model classes then
  shrink it to DEBUG_BERT_SIZES; that happens here so every caller sees the same sizes.
  """
  if config.model_size not in MODEL_SIZES:
    raise ValueError(f"Unknown model_size {config.model_size!r}")
  args: dict[str, Any] = dict(MODEL_SIZES[config.model_size], vocab_size=config.vocab_size)
  args.update(config.model_hparam_overrides)
  args["num_attention_heads"] = max(1, args["hidden_size"] // 64)
  args["intermediate_size"] = 4 * args["hidden_size"]
  args.update(config.model_hparam_overrides)
  if config.debug:
    args.update(DEBUG_BERT_SIZES)
  try:
    return BertConfig.from_dict(args)
  except (TypeError, ValueError) as e:
    raise ValueError(f"model_hparam_overrides: {e}") from None


def get_generator_config(config: PretrainingConfig, bert_config: BertConfig) -> BertConfig:
  """Generator sizes (official ``run_pretraining.get_generator_config``).

  hidden = int(round(H * generator_hidden_size)) (Python 3 round: half to even), layers =
  int(round(L * generator_layers)), intermediate = 4 * hidden, heads = max(1, hidden // 64);
  everything else as the discriminator.
  """
  hidden = int(round(bert_config.hidden_size * config.generator_hidden_size))
  layers = int(round(bert_config.num_hidden_layers * config.generator_layers))
  if hidden < 1 or layers < 1:
    raise ValueError(f"generator would have hidden size {hidden} and {layers} layers; raise "
                     "generator_hidden_size / generator_layers")
  return bert_config.replace(hidden_size=hidden, num_hidden_layers=layers,
                             intermediate_size=4 * hidden,
                             num_attention_heads=max(1, hidden // 64))
