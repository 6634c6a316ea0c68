"""electra_tf.names: the TF1 name table the layers use and its Hugging Face map, both ways.

The inverse map (HF -> TF1) is checked on every tensor of ``reference/hf_electra_2l`` (written
by ``transformers`` itself), and the TF1 names it gives are checked against the variables our
layers create for the same configs.
"""

from __future__ import annotations

import json

import pytest
import tensorflow as tf
from safetensors import safe_open

from electra_tf import names
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead
from electra_tf.reading.hf_import import bert_config_from_hf


def _hf_folder(reference_dir, which):
  """(BertConfig, embedding size, {HF name: shape}) of one fixture folder."""
  folder = reference_dir / "hf_electra_2l" / which
  config, e = bert_config_from_hf(json.loads((folder / "config.json").read_text()))
  with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
    shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
  return config, e, shapes


def _our_names(layers):
  return {names.tf1_name(v): tuple(v.shape.as_list()) for layer in layers for v in layer.weights}


@pytest.fixture(scope="module")
def hf_pair(reference_dir):
  disc_config, e, disc_shapes = _hf_folder(reference_dir, "discriminator")
  gen_config, gen_e, gen_shapes = _hf_folder(reference_dir, "generator")
  assert gen_e == e  # the pair shares electra/embeddings
  disc = Transformer(disc_config, embedding_size=e, scope=names.DISCRIMINATOR)
  disc_head = DiscriminatorHead(disc_config.hidden_size)
  gen = Transformer(gen_config, embeddings=disc.embeddings, scope=names.GENERATOR)
  gen_head = MaskedLMHead(disc.embeddings)
  disc.build(None)
  gen.build(None)
  disc_head.build([None, disc_config.hidden_size])
  gen_head.build([None, gen_config.hidden_size])
  return {
      "discriminator": (names.discriminator_table(disc_config, e), disc_shapes,
                        _our_names([disc, disc_head])),
      "generator": (names.generator_table(gen_config, e), gen_shapes,
                    _our_names([disc.embeddings, gen, gen_head])),
  }


@pytest.mark.parametrize("which", ["discriminator", "generator"])
def test_hf_to_tf1_covers_every_fixture_tensor(hf_pair, which):
  table, hf_shapes, ours = hf_pair[which]
  # transformers drops the tied generator_lm_head.weight when saving; the table knows it.
  assert {r.hf_name for r in table.primary_rows} <= set(hf_shapes) <= \
      {r.hf_name for r in table.rows}
  mapped = {}
  for hf_name, hf_shape in hf_shapes.items():
    tf_name = table.to_tf1(hf_name)
    row = table.row_for_hf(hf_name)
    assert tf_name in ours, (hf_name, tf_name)
    assert (hf_shape[::-1] if row.transpose else hf_shape) == ours[tf_name], hf_name
    assert row.tf_shape == ours[tf_name], hf_name
    if not row.alias:
      assert tf_name not in mapped, f"{hf_name} and {mapped.get(tf_name)} -> {tf_name}"
      mapped[tf_name] = hf_name
  # Every variable of the model is reached, and the export direction is the exact inverse.
  assert set(mapped) == set(ours)
  for tf_name, hf_name in mapped.items():
    assert table.to_hf(tf_name) == hf_name


def test_fixture_names_spot_checks(hf_pair):
  disc, _, _ = hf_pair["discriminator"]
  gen, _, _ = hf_pair["generator"]
  assert disc.to_tf1("electra.encoder.layer.1.attention.self.query.weight") == \
      "electra/encoder/layer_1/attention/self/query/kernel"
  assert disc.to_tf1("discriminator_predictions.dense_prediction.bias") == \
      "discriminator_predictions/dense_1/bias"
  assert disc.to_tf1("electra.embeddings.LayerNorm.weight") == "electra/embeddings/LayerNorm/gamma"
  assert gen.to_tf1("electra.embeddings_project.weight") == "generator/embeddings_project/kernel"
  assert gen.to_tf1("electra.embeddings.word_embeddings.weight") == \
      "electra/embeddings/word_embeddings"
  assert gen.to_tf1(names.HF_LM_HEAD_WEIGHT) == "electra/embeddings/word_embeddings"
  assert gen.to_hf("electra/embeddings/word_embeddings") == \
      "electra.embeddings.word_embeddings.weight"  # the alias is never the export name
  assert gen.to_tf1("generator_lm_head.bias") == "generator_predictions/output_bias"


def test_unknown_names_raise():
  table = names.discriminator_table(BertConfig(vocab_size=10, hidden_size=8,
                                               num_hidden_layers=1, num_attention_heads=2,
                                               intermediate_size=16), 8)
  with pytest.raises(KeyError, match="electra.pooler"):
    table.to_tf1("electra.pooler.dense.weight")
  with pytest.raises(KeyError, match="task_specific"):
    table.to_hf("task_specific/rte/dense/kernel")
  # E == H: no embeddings_project row.
  assert not any("embeddings_project" in r.tf_name for r in table.rows)


def test_duplicate_rows_are_rejected():
  row = names.HfRow("a/kernel", "a.weight", (2, 3), transpose=True)
  with pytest.raises(ValueError, match="twice"):
    names.HfTable((row, names.HfRow("a/kernel", "b.weight", (2, 3))))
  names.HfTable((row, names.HfRow("a/kernel", "b.weight", (2, 3), alias=True)))  # alias: ok


def test_scope_helpers():
  assert names.layer_scope(names.GENERATOR, 3) == "generator/encoder/layer_3"
  assert names.join(names.layer_scope("electra", 0), names.QUERY, names.KERNEL) == \
      "electra/encoder/layer_0/attention/self/query/kernel"
  assert names.embeddings_scope(names.GENERATOR_LTR) == "generator_ltr/embeddings"
  assert names.embeddings_project_scope("electra") == "electra/embeddings_project"
  assert names.task_scope("squad") == "task_specific/squad"
  for key in ("global_step", "electra/encoder/layer_0/output/dense/kernel/adam_m",
              "generator_predictions/output_bias/adam_v"):
    assert names.OPTIMIZER_STATE.search(key)
  assert not names.OPTIMIZER_STATE.search("electra/embeddings/word_embeddings")
  assert names.tf1_name(tf.Variable(1.0, name="electra/x")) == "electra/x"
