"""Transformer sizes from a config (``electra_tf.model_sizes``) as the official
``get_bert_config`` / ``get_generator_config`` compute them."""

import pytest

from electra_tf import config as C
from electra_tf.model_sizes import get_bert_config, get_generator_config


@pytest.mark.parametrize("size, hidden, layers, heads, inter", [
  ("small", 256, 12, 4, 1024), ("base", 768, 12, 12, 3072), ("large", 1024, 24, 16, 4096),
])
def test_bert_config_size_presets(size, hidden, layers, heads, inter):
  bert = get_bert_config(C.PretrainingConfig("M", "D", model_size=size, vocab_size=100))
  assert (bert.hidden_size, bert.num_hidden_layers, bert.num_attention_heads,
          bert.intermediate_size, bert.vocab_size) == (hidden, layers, heads, inter, 100)


def test_bert_config_overrides():
  cfg = C.PretrainingConfig("M", "D", model_hparam_overrides={"hidden_size": 128})
  bert = get_bert_config(cfg)  # heads / intermediate follow the overridden hidden size
  assert (bert.hidden_size, bert.num_attention_heads, bert.intermediate_size) == (128, 2, 512)
  cfg = C.PretrainingConfig("M", "D", model_hparam_overrides={
    "hidden_size": 128, "num_attention_heads": 8, "vocab_size": 99})
  bert = get_bert_config(cfg)
  assert (bert.num_attention_heads, bert.vocab_size) == (8, 99)
  with pytest.raises(ValueError, match="model_hparam_overrides.*hidden_sise"):
    get_bert_config(C.PretrainingConfig("M", "D", model_hparam_overrides={"hidden_sise": 1}))


def test_bert_config_debug_shrinks_after_overrides():
  cfg = C.FinetuningConfig("M", "D", debug=True, model_hparam_overrides={"hidden_size": 512})
  bert = get_bert_config(cfg)
  assert (bert.num_hidden_layers, bert.hidden_size, bert.intermediate_size,
          bert.num_attention_heads) == (3, 144, 576, 4)


@pytest.mark.parametrize("size, frac, layers_frac, hidden, heads, layers", [
  ("base", 0.33333, 1.0, 256, 4, 12),  # 767.99 rounds to 256
  ("small", 1.0, 1.0, 256, 4, 12),  # released ELECTRA-Small
  ("large", 0.25, 0.5, 256, 4, 12),
  ("small", 0.25, 0.75, 64, 1, 9),
])
def test_generator_config(size, frac, layers_frac, hidden, heads, layers):
  cfg = C.PretrainingConfig("M", "D", model_size=size, generator_hidden_size=frac,
                            generator_layers=layers_frac)
  gen = get_generator_config(cfg, get_bert_config(cfg))
  assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size,
          gen.num_hidden_layers) == (hidden, heads, 4 * hidden, layers)


def test_generator_rounds_half_to_even_like_python3():
  cfg = C.PretrainingConfig("M", "D", generator_hidden_size=0.25,
                            model_hparam_overrides={"hidden_size": 10, "num_hidden_layers": 5},
                            generator_layers=0.5)
  gen = get_generator_config(cfg, get_bert_config(cfg))
  assert (gen.hidden_size, gen.num_hidden_layers) == (round(2.5), round(2.5)) == (2, 2)
  with pytest.raises(ValueError, match="generator_hidden_size"):
    get_generator_config(C.PretrainingConfig("M", "D", generator_hidden_size=0.001),
                           get_bert_config(C.PretrainingConfig("M", "D")))
